//! The daemon's Prometheus endpoint (`[metrics] listen = "127.0.0.1:9560"`):
//! `GET /metrics` answers in the OpenMetrics text format (Prometheus's own
//! exposition format since 2.5; `Content-Type: application/openmetrics-text`),
//! encoded by the `prometheus-client` crate.
//!
//! Everything is read at scrape time, so a scrape costs nothing between
//! scrapes and never shows a stale value:
//!
//! | metric | type | labels | from |
//! | --- | --- | --- | --- |
//! | `ccctl_algorithm_loaded` | gauge 0/1 | `algorithm`, `kernel_name` | `tcp_available_congestion_control` |
//! | `ccctl_algorithm_in_config` | gauge 0/1 | `algorithm`, `kernel_name` | the daemon's configuration |
//! | `ccctl_algorithm_params_version` | gauge | `algorithm`, `kernel_name` | the params map (loaded algorithms) |
//! | `ccctl_algorithm_param_value` | gauge | `algorithm`, `kernel_name`, `param`, `unit` | the params map, in the unit `ccctl tune` shows |
//! | `ccctl_algorithm_flows` | gauge | `algorithm`, `kernel_name` | TCP sockets using it now: one inet_diag dump of the daemon's network namespace |
//! | `ccctl_trace_enabled` | gauge 0/1 | | the daemon traces |
//! | `ccctl_trace_events_written_total` | counter | | events the daemon wrote into its files |
//! | `ccctl_trace_events_produced_total` | counter | | events the BPF side tried to emit (since the algorithms were loaded) |
//! | `ccctl_trace_events_dropped_total` | counter | | of those, events it found no ring-buffer room for |
//! | `ccctl_trace_files_rotated_total` | counter | | trace files finished and renamed to `.parquet` |
//! | `ccctl_config_last_reload_timestamp_seconds` | gauge | | Unix time of the start or the last SIGHUP |
//! | `ccctl_config_last_reload_success` | gauge 0/1 | | whether that configuration was applied |
//! | `ccctl_config_reloads_total` | counter | `result` = `applied`, `refused` | SIGHUPs |
//! | `ccctl_policy_rule_state` | gauge 0/1 | `rule`, `state` = `baseline`, `canary`, `active`, `rolled_back` | the applied policy (`baseline`: its judge measures the control before the canary starts; `active`: the rule takes all its connections, promoted) |
//! | `ccctl_policy_rule_connections_total` | counter | `rule`, `group` = `canary`, `control`, `app_kept`, `failed` | the sockops program's counters: new connections the rule took, by what they got |
//! | `ccctl_policy_rule_rolled_back_connections_total` | counter | `rule` | live connections a rollback moved back |
//! | `ccctl_policy_rule_migrated_connections_total` | counter | `rule`, `group` = `canary`, `control`, `left`, `app_kept`, `failed` | live connections `ccctl policy apply --migrate` moved onto the rule |
//! | `ccctl_policy_rule_auto_rollbacks_total` | counter | `rule` | rollbacks the daemon's canary judge made |
//! | `ccctl_policy_rule_breaching` | gauge 0/1 | `rule` | the judge saw a threshold crossed at its last interval |
//! | `ccctl_policy_group_flows` | gauge | `rule`, `group` = `canary`, `control` | established connections counted in the last interval (inet_diag, by congestion control name) |
//! | `ccctl_policy_group_goodput_bits_per_second` | gauge | `rule`, `group` | mean per connection, from `bytes_acked` deltas over the last interval |
//! | `ccctl_policy_group_rtt_seconds` | gauge | `rule`, `group` | mean smoothed RTT |
//! | `ccctl_policy_group_retransmission_ratio` | gauge | `rule`, `group` | retransmitted / sent segments over the last interval |
//!
//! The BPF counters reset when every algorithm is unloaded and one loaded
//! again (new maps); Prometheus's `rate()` handles counter resets.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use ccctl_core::{kernel, params, registry, trace};
use ccctl_observe::trace_files::SinkStats;

/// What the daemon shares with the endpoint.
#[derive(Default)]
pub struct Shared {
    /// The trace files' counters (kept across trace restarts).
    pub stats: Arc<SinkStats>,
    pub tracing: std::sync::atomic::AtomicBool,
    /// User names of the algorithms in the configuration in force.
    pub configured: Mutex<Vec<&'static str>>,
    pub reload: Mutex<Reload>,
    /// The policy rules' latest group numbers (the judge's sampler).
    pub policy: super::judge::Views,
}

#[derive(Debug, Default, Clone)]
pub struct Reload {
    /// Unix time of the start or the last SIGHUP.
    pub last_unix: f64,
    pub last_ok: bool,
    pub applied: u64,
    pub refused: u64,
}

impl Shared {
    pub fn set_configured(&self, cfg: &super::DaemonConfig) {
        let names = cfg
            .algorithms
            .iter()
            .filter_map(|a| registry::find(&a.name).ok().map(|a| a.name))
            .collect();
        *self
            .configured
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = names;
    }

    /// A SIGHUP's outcome (or the start's, with `count = false`).
    pub fn reloaded(&self, ok: bool, count: bool) {
        let mut r = self.reload.lock().unwrap_or_else(PoisonError::into_inner);
        r.last_unix = ccctl_core::sys::time::now_unix_f64();
        r.last_ok = ok;
        if count {
            if ok {
                r.applied += 1;
            } else {
                r.refused += 1;
            }
        }
    }
}

type Labels = Vec<(&'static str, String)>;

fn algo_labels(a: &registry::Algorithm) -> Labels {
    vec![
        ("algorithm", a.name.to_string()),
        ("kernel_name", a.kernel_name.to_string()),
    ]
}

/// A counter holding `v` (the registry is built anew for every scrape).
fn counter(v: u64) -> Counter {
    let c = Counter::default();
    c.inc_by(v);
    c
}

/// The exposition text, from the system's state now.
pub fn render(shared: &Shared) -> Result<String> {
    let mut reg = Registry::with_prefix("ccctl");

    let loaded = Family::<Labels, Gauge>::default();
    let in_config = Family::<Labels, Gauge>::default();
    let version = Family::<Labels, Gauge>::default();
    let value = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let flows = Family::<Labels, Gauge>::default();
    let available = kernel::available_congestion_controls()?;
    let configured = shared
        .configured
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    // One dump of this namespace's TCP sockets, counted by congestion control.
    let mut by_cc = std::collections::BTreeMap::<String, i64>::new();
    match ccctl_observe::sockdiag::DiagSocket::open().and_then(|d| d.tcp_sockets()) {
        Ok(socks) => {
            for s in socks {
                if let Some(cc) = s.cc {
                    *by_cc.entry(cc).or_default() += 1;
                }
            }
        }
        Err(e) => tracing::warn!("metrics: counting flows through inet_diag: {e}"),
    }
    for a in registry::ALGORITHMS {
        let l = algo_labels(a);
        let is_loaded = available.iter().any(|n| n == a.kernel_name);
        loaded.get_or_create(&l).set(i64::from(is_loaded));
        in_config
            .get_or_create(&l)
            .set(i64::from(configured.contains(&a.name)));
        flows
            .get_or_create(&l)
            .set(by_cc.get(a.kernel_name).copied().unwrap_or(0));
        if !is_loaded {
            continue;
        }
        // Registered by someone else without our maps: no parameters to show.
        let Ok(set) = params::view(a) else {
            continue;
        };
        version.get_or_create(&l).set(i64::from(set.version));
        for p in &set.params {
            let mut pl = l.clone();
            pl.push(("param", p.name.to_string()));
            pl.push(("unit", p.unit.to_string()));
            value.get_or_create(&pl).set(p.value);
        }
    }
    reg.register(
        "algorithm_loaded",
        "Whether the congestion control is registered with the kernel (1) or not (0)",
        loaded,
    );
    reg.register(
        "algorithm_in_config",
        "Whether the daemon's configuration lists the algorithm",
        in_config,
    );
    reg.register(
        "algorithm_params_version",
        "Version of the parameter set in force (bumped on every write; 0: defaults never written)",
        version,
    );
    reg.register(
        "algorithm_param_value",
        "A tunable parameter's value in force, in the unit of the `unit` label",
        value,
    );
    reg.register(
        "algorithm_flows",
        "TCP sockets in the daemon's network namespace using the algorithm now (inet_diag at scrape time)",
        flows,
    );

    let enabled = Gauge::<i64>::default();
    enabled.set(i64::from(shared.tracing.load(Ordering::Relaxed)));
    reg.register(
        "trace_enabled",
        "Whether the daemon writes per-ACK traces",
        enabled,
    );
    reg.register(
        "trace_events_written",
        "Per-ACK events the daemon wrote into its trace files",
        counter(shared.stats.events_written.load(Ordering::Relaxed)),
    );
    reg.register(
        "trace_files_rotated",
        "Trace files finished and renamed to their .parquet name",
        counter(shared.stats.files_rotated.load(Ordering::Relaxed)),
    );
    // The BPF side's counters, while any ccctl algorithm has its maps pinned.
    if let Ok(maps) = trace::SharedMaps::open() {
        if let (Ok(p), Ok(d)) = (maps.produced(), maps.drops()) {
            reg.register(
                "trace_events_produced",
                "Per-ACK events the BPF side tried to emit since the algorithms were loaded",
                counter(p),
            );
            reg.register(
                "trace_events_dropped",
                "Per-ACK events the BPF side found no ring-buffer room for (a subset of produced)",
                counter(d),
            );
        }
    }

    let r = shared
        .reload
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let ts = Gauge::<f64, AtomicU64>::default();
    ts.set(r.last_unix);
    reg.register_with_unit(
        "config_last_reload_timestamp",
        "Unix time the configuration was last loaded (start or SIGHUP)",
        Unit::Seconds,
        ts,
    );
    let ok = Gauge::<i64>::default();
    ok.set(i64::from(r.last_ok));
    reg.register(
        "config_last_reload_success",
        "Whether the last configuration loaded was applied (1) or refused (0)",
        ok,
    );
    let reloads = Family::<Labels, Counter>::default();
    reloads
        .get_or_create(&vec![("result", "applied".to_string())])
        .inc_by(r.applied);
    reloads
        .get_or_create(&vec![("result", "refused".to_string())])
        .inc_by(r.refused);
    reg.register(
        "config_reloads",
        "SIGHUPs, by whether the new configuration was applied or refused",
        reloads,
    );

    policy_metrics(&mut reg, shared);

    let mut out = String::new();
    encode(&mut out, &reg).context("encoding the metrics")?;
    Ok(out)
}

/// The rollout policy's per-rule metrics (nothing when no policy is applied).
fn policy_metrics(reg: &mut Registry, shared: &Shared) {
    use ccctl_core::policy::kernel::{self as pk, RuleState};
    let doc = match pk::current() {
        Ok(Some(d)) => d,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("metrics: reading the policy: {e}");
            return;
        }
    };
    let stats = pk::stats().unwrap_or_default();
    let mig = pk::mig_stats().unwrap_or_default();
    let views = shared.policy.get();
    let state = Family::<Labels, Gauge>::default();
    let conns = Family::<Labels, Counter>::default();
    let rolled = Family::<Labels, Counter>::default();
    let migrated = Family::<Labels, Counter>::default();
    let auto = Family::<Labels, Counter>::default();
    let breaching = Family::<Labels, Gauge>::default();
    let flows = Family::<Labels, Gauge>::default();
    let goodput = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let rtt = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let retrans = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for r in &doc.rules {
        let name = r.rule.name.clone();
        let rl = vec![("rule", name.clone())];
        for (s, v) in [
            ("baseline", RuleState::Baseline),
            ("canary", RuleState::Canary),
            ("active", RuleState::Active),
            ("rolled_back", RuleState::RolledBack),
        ] {
            let mut l = rl.clone();
            l.push(("state", s.to_string()));
            state.get_or_create(&l).set(i64::from(r.state == v));
        }
        let st = stats.get(&r.rule.id).copied().unwrap_or_default();
        for (g, v) in [
            ("canary", st.canary),
            ("control", st.control),
            ("app_kept", st.app_kept),
            ("failed", st.failed),
        ] {
            let mut l = rl.clone();
            l.push(("group", g.to_string()));
            conns.get_or_create(&l).inc_by(v);
        }
        rolled.get_or_create(&rl).inc_by(st.rolled_back);
        let m = mig.get(&r.rule.id).copied().unwrap_or_default();
        for (g, v) in [
            ("canary", m.canary),
            ("control", m.control),
            ("left", m.left),
            ("app_kept", m.app_kept),
            ("failed", m.failed),
        ] {
            let mut l = rl.clone();
            l.push(("group", g.to_string()));
            migrated.get_or_create(&l).inc_by(v);
        }
        let Some(v) = views.get(&name) else {
            continue;
        };
        auto.get_or_create(&rl).inc_by(v.auto_rollbacks);
        breaching.get_or_create(&rl).set(i64::from(v.breaching));
        for (g, s) in [("canary", v.canary), ("control", v.control)] {
            let mut l = rl.clone();
            l.push(("group", g.to_string()));
            flows.get_or_create(&l).set(i64::from(s.flows));
            if s.flows > 0 {
                goodput.get_or_create(&l).set(s.goodput_bps);
                rtt.get_or_create(&l).set(s.rtt_ms / 1e3);
                retrans.get_or_create(&l).set(s.retrans_ratio);
            }
        }
    }
    reg.register(
        "policy_rule_state",
        "The rule's state: canary (a share of its connections), active (all of them, promoted) or rolled_back",
        state,
    );
    reg.register(
        "policy_rule_connections",
        "New connections the rule took, by what they got (the sockops program's counters)",
        conns,
    );
    reg.register(
        "policy_rule_rolled_back_connections",
        "Live canary connections a rollback moved back",
        rolled,
    );
    reg.register(
        "policy_rule_migrated_connections",
        "Live connections `ccctl policy apply --migrate` moved onto the rule, by what they got (canary, control; left: no control; app_kept: the application's choice; failed)",
        migrated,
    );
    reg.register(
        "policy_rule_auto_rollbacks",
        "Rollbacks of the rule the daemon's canary judge made",
        auto,
    );
    reg.register(
        "policy_rule_breaching",
        "Whether the canary judge saw a threshold crossed at its last interval",
        breaching,
    );
    reg.register(
        "policy_group_flows",
        "Established connections of the group counted in the last interval (inet_diag)",
        flows,
    );
    reg.register(
        "policy_group_goodput_bits_per_second",
        "Mean goodput per connection of the group over the last interval (bytes_acked deltas)",
        goodput,
    );
    reg.register_with_unit(
        "policy_group_rtt",
        "Mean smoothed RTT of the group's connections",
        Unit::Seconds,
        rtt,
    );
    reg.register(
        "policy_group_retransmission_ratio",
        "Retransmitted / sent segments of the group over the last interval",
        retrans,
    );
}

/// Longest request head read (a scraper sends a few hundred bytes).
const MAX_REQUEST: usize = 8192;
/// A client that sends no complete request head within this is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The endpoint running on the daemon's tokio runtime.
pub struct Server {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Bind `addr` (errors name `metrics.listen`) and serve on `rt`.
    pub fn start(
        rt: &tokio::runtime::Runtime,
        addr: SocketAddr,
        shared: Arc<Shared>,
    ) -> Result<Server> {
        let std_listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("metrics.listen: cannot listen on {addr}"))?;
        std_listener
            .set_nonblocking(true)
            .context("metrics.listen: setting the socket non-blocking")?;
        let bound = std_listener.local_addr().unwrap_or(addr);
        let listener = {
            let _guard = rt.enter();
            tokio::net::TcpListener::from_std(std_listener)
                .with_context(|| format!("metrics.listen: serving {addr}"))?
        };
        let task = rt.spawn(serve(listener, shared));
        tracing::info!(%bound, "metrics endpoint listening");
        Ok(Server { addr: bound, task })
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((conn, peer)) => {
                let shared = shared.clone();
                tokio::spawn(async move {
                    if let Err(e) = answer(conn, shared).await {
                        tracing::debug!(%peer, "metrics request: {e:#}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("metrics endpoint: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One HTTP/1.x request, one answer, connection closed.
async fn answer(mut conn: tokio::net::TcpStream, shared: Arc<Shared>) -> Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = tokio::time::timeout(REQUEST_TIMEOUT, async {
        loop {
            let n = conn.read(&mut buf).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            if head.len() > MAX_REQUEST {
                return Ok(false);
            }
        }
    })
    .await
    .context("request timed out")??;
    if !complete {
        return respond(&mut conn, "400 Bad Request", "text/plain", "bad request\n").await;
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    if method != "GET" {
        return respond(
            &mut conn,
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n",
        )
        .await;
    }
    if path != "/metrics" {
        return respond(&mut conn, "404 Not Found", "text/plain", "GET /metrics\n").await;
    }
    // Reading maps, /proc and inet_diag blocks: off the runtime's thread.
    let body = tokio::task::spawn_blocking(move || render(&shared))
        .await
        .context("the metrics collector panicked")?;
    match body {
        Ok(body) => {
            respond(
                &mut conn,
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                &body,
            )
            .await
        }
        Err(e) => {
            tracing::warn!("metrics: {e:#}");
            respond(
                &mut conn,
                "500 Internal Server Error",
                "text/plain",
                &format!("{e:#}\n"),
            )
            .await
        }
    }
}

async fn respond(
    conn: &mut tokio::net::TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(body.as_bytes()).await?;
    conn.shutdown().await?;
    Ok(())
}
