//! The interval still open: its samples read apart from the cooled counts until its close,
//! and its share of them (what a first touch is judged against).

use super::*;

/// The default engine cooling on time alone, so that closes without samples cool a small
/// count to 0.
fn time_cooled_engine() -> Engine {
    new_engine(EngineConfig {
        cool_after_samples: 0,
        ..cfg()
    })
}

#[test]
fn the_open_intervals_samples_are_read_apart_until_its_close() {
    let mut e = time_cooled_engine();
    e.observe_samples(&[Sample::load(SUPERPAGE_SIZE); 4], MS);
    // A first touch: no heat until the close, its samples in the open interval.
    let first = record(&e, SUPERPAGE_SIZE);
    assert_eq!(
        (e.view().accesses(&first), e.view().open_accesses(&first)),
        (0, 4)
    );
    e.tick(50 * MS);
    let closed = record(&e, SUPERPAGE_SIZE);
    assert_eq!(e.view().open_accesses(&closed), 0);
    assert!(e.view().accesses(&closed) > 0);
    // Closes without samples cool it to nothing; it comes back in the open interval.
    e.tick(300 * MS);
    assert_eq!(e.view().accesses(&record(&e, SUPERPAGE_SIZE)), 0);
    e.observe_samples(&[Sample::load(SUPERPAGE_SIZE); 4], 301 * MS);
    let back = record(&e, SUPERPAGE_SIZE);
    assert_eq!(
        (e.view().accesses(&back), e.view().open_accesses(&back)),
        (0, 4)
    );
}

#[test]
fn the_open_share_is_the_open_intervals_samples_over_the_cooled_counts() {
    let mut e = time_cooled_engine();
    // Nothing closed yet: the open interval is all there is.
    e.observe_samples(&[Sample::load(SUPERPAGE_SIZE); 8], MS);
    assert_eq!(e.view().open_share(), 1.0);
    // Closed (8 samples, then nothing to cool them yet), then 2 more on another superpage.
    e.tick(50 * MS);
    let cooled = e.view().accesses(&record(&e, SUPERPAGE_SIZE));
    assert!(cooled > 0);
    e.observe_samples(&[Sample::load(3 * SUPERPAGE_SIZE); 2], 51 * MS);
    let share = e.view().open_share();
    assert!(
        (share - 2.0 / f64::from(cooled)).abs() < 1e-9,
        "share {share} with {cooled} cooled"
    );
}

#[test]
fn the_open_share_counts_what_the_records_hold_open() {
    // The running open total against the records it stands for: reads, writes (worth the
    // write factor), DAMON credits, and a close in between that must restart it.
    let mut e = time_cooled_engine();
    let sum_over_records = |e: &Engine| -> f64 {
        let wf = e.view().write_factor();
        e.stage1
            .records()
            .iter()
            .map(|r| f64::from(r.ivl_r) + wf * f64::from(r.ivl_w))
            .sum()
    };
    e.observe_samples(&[Sample::load(0), Sample::store(SUPERPAGE_SIZE)], MS);
    e.tick(50 * MS);
    let cooled = e.view().cover.cover(1.0).total as f64;
    assert!(cooled > 0.0);
    e.observe_samples(
        &[
            Sample::store(SUPERPAGE_SIZE),
            Sample::load(4 * SUPERPAGE_SIZE),
        ],
        51 * MS,
    );
    e.observe_damon(
        &[DamonObservation {
            start: 8 * SUPERPAGE_SIZE,
            end: 8 * SUPERPAGE_SIZE + 8192,
            nr_accesses: 1,
            max_nr_accesses: 20,
            age: 1,
        }],
        52 * MS,
    );
    let open = sum_over_records(&e);
    assert!(open > 0.0);
    let share = e.view().open_share();
    assert!(
        (share - (open / cooled).min(1.0)).abs() < 1e-9,
        "share {share}, records hold {open} open over {cooled} cooled"
    );
    e.tick(100 * MS);
    assert_eq!(sum_over_records(&e), 0.0);
    assert_eq!(e.view().open_share(), 0.0);
}
