//! Pod opt-in in the daemon: a task lists, then watches, this node's opted-in pods
//! ([`PodWatcher`]) and publishes the set each time it changes; the target refresh adds the
//! pods' UIDs to the selection. A failure keeps the pods of the last good answer (a restarting
//! API server must not make memtide drop every pod); the task counts every failure in
//! `memtide_pod_list_errors_total` (a refusal also in `memtide_kube_api_denied_total` by reason)
//! and logs it once per distinct error, as a warning, until the watch recovers.

use std::ops::ControlFlow;

use tokio::{sync::watch, task::JoinHandle};

use crate::{
    kube::{PodRef, PodWatchError, PodWatcher},
    metrics::{Metrics, Reason},
};
use memtide_host::targets::select::{Selection, Selector};

/// The daemon's side of the pod watch.
#[derive(Debug)]
pub(super) struct PodWatch {
    answers: watch::Receiver<Option<Vec<PodRef>>>,
    task: JoinHandle<()>,
    /// The pods of the last good answer.
    pods: Vec<PodRef>,
}

impl PodWatch {
    /// Starts watching with `watcher`.
    #[must_use]
    pub(super) fn spawn(watcher: PodWatcher, metrics: Metrics) -> Self {
        let (sender, answers) = watch::channel(None);
        let task = tokio::spawn(async move {
            let mut last_error: Option<PodWatchError> = None;
            watcher
                .run(|update| {
                    match update {
                        Ok(pods) => {
                            if let Some(error) = last_error.take() {
                                tracing::info!(was = %error, "the pod watch recovered");
                            }
                            if sender.send(Some(pods)).is_err() {
                                return ControlFlow::Break(());
                            }
                        }
                        Err(error) => {
                            count_failure(&metrics, &error);
                            if last_error.as_ref() != Some(&error) {
                                tracing::warn!(%error, "watching the opted-in pods failed; keeping the last list and retrying");
                                last_error = Some(error);
                            }
                        }
                    }
                    ControlFlow::Continue(())
                })
                .await;
        });
        Self {
            answers,
            task,
            pods: Vec::new(),
        }
    }

    /// Takes in the latest set, if a new one came; true when the set of pods changed.
    pub(super) fn update(&mut self, metrics: &Metrics) -> bool {
        if !self.answers.has_changed().unwrap_or(false) {
            return false;
        }
        let Some(pods) = self.answers.borrow_and_update().clone() else {
            return false;
        };
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

    /// The opted-in pods of the last good answer.
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

fn count_failure(metrics: &Metrics, error: &PodWatchError) {
    metrics.pod_list_errors.inc();
    if let Some(denial) = error.denial {
        metrics
            .kube_api_denied
            .get_or_create(&Reason {
                reason: denial.label().to_owned(),
            })
            .inc();
    }
}
