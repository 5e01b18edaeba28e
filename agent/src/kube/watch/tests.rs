use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::TcpListener,
    sync::{Arc, Mutex},
};

use kube::core::Status;
use serde_json::json;

use super::*;
use crate::kube::{KubeConfig, PodWatcher};

fn pod(uid: &str, phase: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("pod-{uid}"), "namespace": "prod", "uid": uid,
                     "labels": {"tier": "gold"}, "resourceVersion": "8"},
        "status": {"phase": phase},
    }))
    .unwrap()
}

fn uids(pods: Option<Vec<PodRef>>) -> Option<Vec<String>> {
    pods.map(|pods| pods.into_iter().map(|p| p.uid).collect())
}

#[test]
fn events_fold_into_the_running_pods_and_a_relist_replaces_them_whole() {
    let mut set = PodSet::default();
    assert_eq!(uids(set.apply(Event::Init)), None);
    assert_eq!(
        uids(set.apply(Event::InitApply(pod("b", Some("Running"))))),
        None
    );
    assert_eq!(
        uids(set.apply(Event::InitApply(pod("c", Some("Succeeded"))))),
        None
    );
    assert_eq!(uids(set.apply(Event::InitApply(pod("a", None)))), None);
    assert_eq!(
        uids(set.apply(Event::InitDone)),
        Some(vec!["a".into(), "b".into()])
    );
    let got = set.apply(Event::Apply(pod("d", Some("Pending")))).unwrap();
    assert_eq!(got[2].name, "pod-d");
    assert_eq!(got[2].labels.get("tier").map(String::as_str), Some("gold"));
    // A pod that finishes, and one deleted (or no longer labelled), leave the set.
    let got = set.apply(Event::Apply(pod("a", Some("Failed"))));
    assert_eq!(uids(got), Some(vec!["b".into(), "d".into()]));
    let got = set.apply(Event::Delete(pod("b", Some("Running"))));
    assert_eq!(uids(got), Some(vec!["d".into()]));
    // A relist (after 410 Gone, say) keeps the old set until it completes, then replaces it.
    assert_eq!(uids(set.apply(Event::Init)), None);
    assert_eq!(uids(set.apply(Event::InitApply(pod("e", None)))), None);
    assert_eq!(uids(set.apply(Event::InitDone)), Some(vec!["e".into()]));
}

#[test]
fn a_refusal_says_which_and_what_to_fix() {
    let refused = |code| {
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(
            Status::failure("pods is forbidden: User \"x\" cannot list", "Forbidden")
                .with_code(code),
        )))
    };
    let forbidden = describe(&refused(403), "https://api:6443", Some("/t"));
    assert_eq!(forbidden.denial, Some(Denial::Forbidden));
    assert!(forbidden.message.contains("rbac.yaml"), "{forbidden}");
    assert!(forbidden.message.contains("cannot list"), "{forbidden}");
    let unauthorized = describe(&refused(401), "https://api:6443", Some("/run/token"));
    assert_eq!(unauthorized.denial, Some(Denial::Unauthorized));
    assert!(
        unauthorized.message.contains("/run/token"),
        "{unauthorized}"
    );
    let other = describe(&refused(500), "https://api:6443", None);
    assert_eq!(other.denial, None);
    assert!(other.message.contains("https://api:6443"), "{other}");
}

/// A loopback API server that answers lists with the next of `lists` and watches with the next
/// of `watches` (status, body; the last one repeats), closing the connection after each, and
/// records the request lines.
fn fake_server(
    lists: Vec<(u16, String)>,
    watches: Vec<(u16, String)>,
    requests: Arc<Mutex<Vec<String>>>,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut lists_served, mut watches_served) = (0, 0);
        for tcp in listener.incoming().flatten() {
            let mut reader = BufReader::new(tcp.try_clone().unwrap());
            let mut line = String::new();
            let mut first = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if first.is_empty() {
                    first = line.trim_end().to_owned();
                }
                line.clear();
            }
            let (answers, served) = if first.contains("watch=true") {
                watches_served += 1;
                (&watches, watches_served - 1)
            } else {
                lists_served += 1;
                (&lists, lists_served - 1)
            };
            requests.lock().unwrap().push(first);
            let (status, body) = &answers[served.min(answers.len() - 1)];
            let mut tcp = tcp;
            let _ = write!(
                tcp,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

fn watcher_of(port: u16) -> PodWatcher {
    let config = KubeConfig {
        api_server: format!("http://127.0.0.1:{port}"),
        ..KubeConfig::default()
    };
    PodWatcher::new(&config, "node-a", "app=db", |_| None).unwrap()
}

/// Runs the watcher until `until` says stop, at most 20 s.
async fn run_until(
    watcher: PodWatcher,
    mut until: impl FnMut(&Result<Vec<PodRef>, PodWatchError>) -> bool,
) -> Vec<Result<Vec<PodRef>, PodWatchError>> {
    let mut seen = Vec::new();
    let run = watcher.run(|update| {
        let stop = until(&update);
        seen.push(update);
        if stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    let finished = tokio::time::timeout(Duration::from_secs(20), run).await;
    assert!(
        finished.is_ok(),
        "the watcher did not answer within 20 s: {seen:?}"
    );
    seen
}

#[tokio::test]
async fn it_lists_by_label_and_node_then_watches_from_the_list_version() {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                      "items": [pod("u-1", Some("Running"))]});
    let added = json!({"type": "ADDED", "object": pod("u-2", None)});
    let port = fake_server(
        vec![(200, list.to_string())],
        vec![(200, format!("{added}\n"))],
        Arc::clone(&requests),
    );
    let seen = run_until(watcher_of(port), |update| {
        update.as_ref().is_ok_and(|pods| pods.len() == 2)
    })
    .await;
    assert_eq!(uids(seen[0].clone().ok()), Some(vec!["u-1".into()]));
    let requests = requests.lock().unwrap().clone();
    assert!(requests[0].starts_with("GET /api/v1/pods?"), "{requests:?}");
    for wanted in [
        "labelSelector=app%3Ddb",
        "fieldSelector=spec.nodeName%3Dnode-a",
        "resourceVersion=0",
    ] {
        assert!(requests[0].contains(wanted), "{wanted} in {}", requests[0]);
    }
    assert!(requests[1].contains("watch=true"), "{}", requests[1]);
    assert!(requests[1].contains("resourceVersion=7"), "{}", requests[1]);
}

/// Faults the real API server cannot be made to send (deploy/tests/k8s tests the rest): a body
/// that is not a pod list, and a refusal the watcher must report as one.
#[tokio::test]
async fn a_garbled_list_and_a_refusal_are_reported_and_retried() {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let denied = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "pods is forbidden", "reason": "Forbidden", "code": 403});
    let port = fake_server(
        vec![
            (200, "<html>proxy error</html>".to_owned()),
            (403, denied.to_string()),
        ],
        Vec::new(),
        Arc::clone(&requests),
    );
    let seen = run_until(watcher_of(port), |update| {
        update.as_ref().is_err_and(|e| e.denial.is_some())
    })
    .await;
    let errors: Vec<PodWatchError> = seen.into_iter().filter_map(Result::err).collect();
    assert_eq!(errors[0].denial, None, "{}", errors[0]);
    assert!(
        errors[0]
            .message
            .contains("watching pods on http://127.0.0.1"),
        "{}",
        errors[0]
    );
    assert_eq!(errors.last().unwrap().denial, Some(Denial::Forbidden));
    assert!(requests.lock().unwrap().len() >= 2, "retried");
}

#[test]
fn retries_wait_longer_after_each_failure_up_to_30_s_until_one_succeeds() {
    let mut retry = RetryDelay::default();
    let waits: Vec<Duration> = (0..10).map(|_| retry.next_delay()).collect();
    for (n, wait) in waits.iter().enumerate() {
        let base = RETRY_FIRST.saturating_mul(1 << n).min(RETRY_MAX);
        assert!(
            *wait >= base.mul_f64(0.75) && *wait <= base.mul_f64(1.25),
            "wait {n}: {wait:?} around {base:?}"
        );
    }
    assert!(
        waits[9] >= Duration::from_secs(22),
        "capped near 30 s: {waits:?}"
    );
    retry.reset();
    assert!(retry.next_delay() <= RETRY_FIRST.mul_f64(1.25));
}

#[test]
fn a_failure_says_its_causes_once_each() {
    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "client error (Connect)")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let inner = std::io::Error::other("invalid peer certificate: UnknownIssuer");
    assert_eq!(
        error_chain(&Outer(inner)),
        "client error (Connect): invalid peer certificate: UnknownIssuer"
    );
}
