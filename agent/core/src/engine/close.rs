//! The interval close: at each counting interval's end every stage-1 record cools and takes in
//! the interval's counts (reuse gaps and domains noted as it goes), the top-N superpages get
//! stage-2 counters, long-cold records are forgotten, and the superpage hot set is measured.
//! One walk over the records does all of it; only the warm ones are visited again.

use std::time::Duration;

use super::{Engine, domain::Domain, hotset::Coverage, superpage::NO_SLOT};
use crate::units::SUPERPAGE_SIZE;

impl Engine {
    /// Closes every counting interval that ended at or before `now`.
    pub fn tick(&mut self, now: Duration) {
        let interval = self.cfg.interval();
        // Intervals are aligned to multiples of the interval length, so two engines fed the same
        // observations close the same intervals whatever time their first sample came at.
        let Some(next) = self.next_close else {
            let k = u32::try_from(now.as_nanos() / interval.as_nanos()).unwrap_or(u32::MAX);
            self.next_close = Some(interval * (k + 1));
            return;
        };
        if now < next {
            return;
        }
        let behind = (now - next).as_nanos() / interval.as_nanos();
        let steps = u32::try_from(behind + 1).unwrap_or(u32::MAX);
        self.close_intervals(steps);
        self.next_close = Some(next + interval * steps);
    }

    /// Cooling periods that end within the next `steps` intervals: periods are whole
    /// multiples of [`EngineConfig::intervals_per_cooling`] counted from the first interval.
    ///
    /// [`EngineConfig::intervals_per_cooling`]: super::EngineConfig::intervals_per_cooling
    fn cooling_periods_ended(&self, steps: u32) -> u32 {
        let k = self.cfg.intervals_per_cooling();
        let ended = (self.intervals + u64::from(steps)) / k - self.intervals / k;
        u32::try_from(ended).unwrap_or(u32::MAX)
    }

    /// The cooling period the last closed interval belongs to (stage 2 cools once in each).
    pub(super) fn cooling_period_index(&self) -> u64 {
        self.intervals / self.cfg.intervals_per_cooling()
    }

    /// The 16-bit stamp of the last closed interval, as records keep it in `last_touch`.
    pub(super) fn last_closed_stamp(&self) -> u16 {
        (self.intervals.wrapping_sub(1) & 0xFFFF) as u16
    }

    /// The units of the interval being closed: its mean weight per read and per write sample
    /// (kept from before when it had none of a kind).
    fn update_units(&mut self) {
        let mean = |(weight, samples): (u64, u64), last: f64| {
            if samples == 0 {
                last
            } else {
                weight as f64 / samples as f64
            }
        };
        self.units.read = mean(self.interval_reads, self.units.read);
        self.units.write = mean(self.interval_writes, self.units.write);
        self.interval_reads = (0, 0);
        self.interval_writes = (0, 0);
        self.open_counts = (0, 0);
    }

    fn close_intervals(&mut self, steps: u32) {
        let stamp = (self.intervals & 0xFFFF) as u16;
        let periods = self.cooling_periods_ended(steps);
        self.intervals += u64::from(steps);
        self.update_units();
        // Cooling forgets evidence, so it waits until the hottest superpage holds enough of it
        // to act on after cooling: at a PMU's sparse sampling (a sample per superpage every few
        // seconds) halving every interval would forget each sample before the next arrived,
        // and no superpage would ever look hot. With dense samples it cools once per
        // `cooling_ms`.
        let gate = self.cfg.cooling_gate(self.cfg.cooling_shift);
        let cooling = if periods > 0 && self.cover_hist.max() >= gate {
            self.cfg.cooling_shift.saturating_mul(periods)
        } else {
            0
        };
        let (shift, ratio, ww) = (cooling, self.read_write_ratio, self.cfg.write_weight);
        let factor = self.units.write_factor();
        let (mut rd, mut wd) = (0, 0);
        self.hist.clear();
        self.cover_hist.clear();
        let epoch_end = self.epoch_end.take();
        let (closed, retain) = (self.last_closed_stamp(), self.cfg.retain_intervals);
        self.warm.clear();
        let mut n_dead = 0;
        for (idx, rec) in self.stage1.records_mut().iter_mut().enumerate() {
            // Most records of a large target: read, not written, so the walk does not dirty
            // the cache lines of 20 MiB of records at 1 TiB.
            if rec.at_rest() {
                n_dead += usize::from(rec.untouched_beyond(closed, retain));
                continue;
            }
            if let Some((cutoff, at_plan)) = epoch_end {
                rec.end_epoch(cutoff, at_plan);
            }
            let (domain, gap) = rec.close(shift, steps, stamp, (ratio, factor));
            match domain {
                Domain::ReadDominant => rd += 1,
                Domain::WriteDominant => wd += 1,
                Domain::Cold => {}
            }
            if let Some(g) = gap {
                self.reuse.record(g);
            }
            let weighted = rec.weighted(ww, factor);
            self.hist.add(weighted);
            self.cover_hist.add(rec.accesses(factor));
            if weighted > 0 || rec.slot != NO_SLOT {
                self.warm.push(idx as u32);
            }
            // A record cooled to zero loses its stage-2 slot in `select_stage2`, if it held one.
            n_dead += usize::from(rec.cold_beyond(closed, retain));
        }
        self.select_stage2(n_dead);

        let secs = self.cfg.interval().as_secs_f64() * f64::from(steps);
        let rate = self.interval_weight as f64 / secs;
        let a = self.cfg.rate_smoothing;
        self.access_rate = if self.intervals == u64::from(steps) {
            rate
        } else {
            a * rate + (1.0 - a) * self.access_rate
        };
        self.interval_weight = 0;
        self.update_hot_stats(rd, wd);
    }

    /// Gives the top-N superpages stage-2 counters (the histogram holds weighted heats), then
    /// forgets the records that are cold, outside stage 2 and untouched for `retain_intervals`
    /// once they are a quarter of all (`n_dead`, counted by the close). Only the records the
    /// close found warm or holding a slot (`warm`, in record order, so ties at the cut-off
    /// fall as they would over all records) can gain or lose one: a large target whose
    /// superpages are mostly cooled to zero pays for its warm ones.
    fn select_stage2(&mut self, n_dead: usize) {
        let (cutoff, mut ties) = self.hist.top(self.top_n);
        let (ww, factor) = (self.cfg.write_weight, self.units.write_factor());
        self.needs_slot.clear();
        for &idx in &self.warm {
            let rec = self.stage1.get_mut(idx as usize);
            let h = rec.weighted(ww, factor).min(u32::from(u16::MAX));
            let selected = h > cutoff || (h == cutoff && h > 0 && ties > 0);
            if h == cutoff && selected {
                ties -= 1;
            }
            if selected && rec.slot == NO_SLOT {
                self.needs_slot.push(idx);
            } else if !selected && rec.slot != NO_SLOT {
                self.stage2.release(rec.slot);
                rec.slot = NO_SLOT;
            }
        }
        // Slots are handed out once every deselected superpage has freed its own.
        for &idx in &self.needs_slot {
            let rec = self.stage1.get_mut(idx as usize);
            rec.slot = self.stage2.allocate(rec.sp);
        }
        // Compacting re-indexes everything, so wait until it frees a quarter of the records.
        if n_dead > 0 && n_dead * 4 >= self.stage1.len() {
            let (stamp, retain) = (self.last_closed_stamp(), self.cfg.retain_intervals);
            self.stage1
                .retain(|r| r.slot != NO_SLOT || !r.cold_beyond(stamp, retain));
            self.last = None;
        }
    }

    fn update_hot_stats(&mut self, rd: u64, wd: u64) {
        let sp: Coverage = self.cover_hist.cover(self.cfg.hot_coverage);
        self.hot_cutoff = sp.min_count;
        let s = &mut self.stats;
        s.intervals = self.intervals;
        s.touched_superpages = self.stage1.len() as u64;
        s.stage2_superpages = self.stage2.live() as u64;
        s.top_n = self.top_n as u64;
        s.hot_superpages = sp.units;
        s.hot_superpage_bytes = sp.units * SUPERPAGE_SIZE;
        s.read_dominant = rd;
        s.write_dominant = wd;
        s.access_rate = self.access_rate;
    }
}
