//! Pod opt-in in the daemon: a task lists this node's opted-in pods every `poll_seconds`
//! (blocking HTTP, off the runtime's threads) and publishes the latest answer; the target
//! refresh adds the pods' UIDs to the selection. A failed list keeps the pods of the last
//! good one (a restarting API server must not make memtide drop every pod), is logged once
//! per distinct error and counted in `memtide_pod_list_errors_total`.

use std::time::Duration;

use tokio::{sync::watch, task::JoinHandle};

use crate::metrics::Metrics;
use memtide_host::targets::select::{Selection, Selector};

use crate::kube::{PodLister, PodRef};

type Answer = Option<Result<Vec<PodRef>, String>>;

/// The daemon's side of the pod list.
#[derive(Debug)]
pub(super) struct PodWatch {
    answers: watch::Receiver<Answer>,
    task: JoinHandle<()>,
    /// The pods of the last good answer.
    pods: Vec<PodRef>,
    /// The last error logged (logged again only when it changes).
    last_error: Option<String>,
}

impl PodWatch {
    /// Starts listing with `lister` every `poll`.
    #[must_use]
    pub(super) fn spawn(lister: PodLister, poll: Duration) -> Self {
        let (sender, answers) = watch::channel(None);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let lister = lister.clone();
                let answer = match tokio::task::spawn_blocking(move || lister.list()).await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(join) => Err(format!("the pod list task failed: {join}")),
                };
                if sender.send(Some(answer)).is_err() {
                    return;
                }
            }
        });
        Self {
            answers,
            task,
            pods: Vec::new(),
            last_error: None,
        }
    }

    /// Takes in the latest answer, if a new one came; true when the set of pods changed.
    pub(super) fn update(&mut self, metrics: &Metrics) -> bool {
        if !self.answers.has_changed().unwrap_or(false) {
            return false;
        }
        let answer = self.answers.borrow_and_update().clone();
        match answer {
            None => false,
            Some(Ok(pods)) => {
                self.last_error = None;
                metrics
                    .opted_in_pods
                    .set(i64::try_from(pods.len()).unwrap_or(i64::MAX));
                if pods == self.pods {
                    return false;
                }
                let names: Vec<String> = pods
                    .iter()
                    .map(|p| format!("{}/{}", p.namespace, p.name))
                    .collect();
                tracing::info!(pods = ?names, "opted-in pods on this node");
                self.pods = pods;
                true
            }
            Some(Err(error)) => {
                metrics.pod_list_errors.inc();
                if self.last_error.as_ref() != Some(&error) {
                    tracing::warn!(%error, kept = self.pods.len(), "listing the opted-in pods failed; keeping the last list");
                    self.last_error = Some(error);
                }
                false
            }
        }
    }

    /// The opted-in pods of the last good list.
    pub(super) fn pods(&self) -> &[PodRef] {
        &self.pods
    }

    /// `base` plus one pod selector per opted-in pod.
    #[must_use]
    pub(super) fn selection(&self, base: &Selection) -> Selection {
        let mut selection = base.clone();
        selection
            .include
            .extend(self.pods.iter().map(|pod| Selector::Pod(pod.uid.clone())));
        selection
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
