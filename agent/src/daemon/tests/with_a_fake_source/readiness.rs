//! `/readyz` and `memtide_source_running` tell whether the agent samples.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_source_the_agent_serves_metrics_but_is_not_ready_and_says_why() {
    let machine = Machine::new("[sources]\norder = [\"pebs\"]\n");
    let daemon = machine.start_with(FakeSources::none()).await;
    let readyz = get(&daemon, "/readyz");
    assert!(readyz.starts_with("HTTP/1.0 503"), "{readyz}");
    assert!(
        readyz.contains("not ready: no hotness source runs")
            && readyz.contains("[sources] order (pebs)"),
        "names the cause: {readyz}"
    );
    assert!(get(&daemon, "/healthz").starts_with("HTTP/1.0 200"));
    let status = daemon.status();
    assert!(
        status
            .not_ready
            .is_some_and(|reason| readyz.contains(&reason)),
        "/status says the same: {readyz}"
    );
    eventually("the source gauge", || {
        metric(
            &metrics(&daemon),
            &["memtide_source_running{", "source=\"none\""],
        )
        .is_some()
    })
    .await;
    let text = metrics(&daemon);
    assert_eq!(
        metric(&text, &["memtide_source_running{", "source=\"none\""]),
        Some(0.0),
        "{text}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_source_running_the_agent_is_ready_and_exports_it() {
    let (a, b) = (Sleeper::spawn(), Sleeper::spawn());
    let machine = Machine::new(&format!(
        "[targets]\npids = [{}, {}]\nmax_targets = 1\n[sources]\ncpu_budget_percent = 2.5\n",
        a.pid(),
        b.pid()
    ));
    let (daemon, _source) = machine.start().await;
    let readyz = get(&daemon, "/readyz");
    assert!(readyz.starts_with("HTTP/1.0 200"), "{readyz}");
    assert_eq!(daemon.status().not_ready, None);
    eventually("the source gauge", || {
        metric(&metrics(&daemon), &["memtide_source_running{"]).is_some()
    })
    .await;
    let text = metrics(&daemon);
    assert_eq!(
        metric(&text, &["memtide_source_running{", "source=\"swfault\""]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, &["memtide_sampling_cpu_budget_ratio "]),
        Some(0.025),
        "{text}"
    );
    // One of the two is past the limit.
    assert_eq!(target_pids(&daemon).len(), 1);
    assert!(
        metric(&text, &["memtide_targets_refused_total{", "max_targets"]) >= Some(1.0),
        "{text}"
    );
    daemon.stop().await;
}
