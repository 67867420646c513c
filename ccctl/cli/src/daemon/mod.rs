//! `ccctl daemon`: load and tune algorithms from a config file, trace them
//! into rotating Parquet files, reload on SIGHUP, clean up on SIGTERM.
//!
//! - One daemon at a time: an exclusive `flock` on `/run/ccctl/daemon.lock`
//!   (holding the daemon's pid); a second start refuses and names the pid.
//! - Start: validate the config, load each algorithm not already loaded
//!   (remembering which ones we loaded), make one the default if asked,
//!   write each one's parameters (one map update per algorithm), start the
//!   trace thread if `[trace]` is there (it takes the tracer lock, so a
//!   `ccctl trace` running at the same time refuses, and vice versa).
//! - SIGHUP: read and validate the file again; if it is invalid, log why and
//!   keep the running configuration. Else apply the difference: parameters
//!   are written to the maps (running flows pick them up at their next ACK,
//!   no reload, no reconnect), new algorithms are loaded, algorithms no
//!   longer listed that the daemon loaded are unloaded, and the trace filter
//!   is rewritten in place (or tracing started or stopped).
//! - SIGTERM / SIGINT: stop tracing (the current file is finished and
//!   readable), then unload every algorithm of the config if `on_exit =
//!   "unload"` (or leave them registered with `"leave"`), release the locks.
//! - `[metrics]`: a Prometheus endpoint on the daemon's tokio runtime
//!   ([`metrics`]), bound before anything is loaded (a bind error changes
//!   nothing); a SIGHUP that moves it binds the new address first and is
//!   refused, old configuration kept, if it cannot.
pub mod config;
pub mod judge;
pub mod metrics;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use ccctl_core::kernel;
use ccctl_core::loader::{self, LoadOptions};
use ccctl_core::params;
use ccctl_core::policy::audit;
use ccctl_core::registry;
use ccctl_core::trace;

pub use config::{DaemonConfig, OnExit};

const LOCK_PATH: &str = "/run/ccctl/daemon.lock";

/// The daemon's single-instance lock (pid inside), released on exit.
fn single_instance(path: &Path) -> Result<ccctl_sys::lock::PidLock> {
    use ccctl_sys::lock::{LockError, PidLock, Wait};
    match PidLock::acquire(path, Wait::No) {
        Ok(l) => Ok(l),
        Err(LockError::Busy { pid, .. }) => bail!(
            "another ccctl daemon (pid {}) is running; stop it first (it holds {})",
            pid.map_or_else(|| "unknown".to_string(), |p| p.to_string()),
            path.display()
        ),
        Err(e) => Err(e.into()),
    }
}

/// What the daemon's loop acts on: SIGHUP reloads, SIGTERM or SIGINT ends.
struct Signals {
    hup: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
    int: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> Result<Signals> {
        use ccctl_sys::signals::flag;
        let f = |sig| flag(sig).with_context(|| format!("watching signal {sig}"));
        Ok(Signals {
            hup: f(libc::SIGHUP)?,
            term: f(libc::SIGTERM)?,
            int: f(libc::SIGINT)?,
        })
    }

    fn take_hup(&self) -> bool {
        self.hup.swap(false, Ordering::SeqCst)
    }

    fn term(&self) -> bool {
        self.term.load(Ordering::SeqCst) || self.int.load(Ordering::SeqCst)
    }
}

/// The running trace thread.
struct Tracing {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<trace::TraceSummary>>,
    maps: Arc<trace::SharedMaps>,
    session: u64,
}

impl Tracing {
    fn start(
        cfg: &config::TraceConfig,
        rotate_bytes: u64,
        shared: &Arc<metrics::Shared>,
    ) -> Result<Tracing> {
        let layout = match cfg.layout {
            config::TraceLayout::Flat => ccctl_observe::trace_files::Layout::Flat,
            config::TraceLayout::Hive => ccctl_observe::trace_files::Layout::Hive {
                host: match &cfg.host {
                    Some(h) => h.clone(),
                    None => this_host()?,
                },
            },
        };
        std::fs::create_dir_all(&cfg.out_dir)
            .with_context(|| format!("creating {}", cfg.out_dir.display()))?;
        let maps = Arc::new(trace::SharedMaps::open()?);
        let filter = trace_filter(cfg)?;
        let stop = Arc::new(AtomicBool::new(false));
        let output = ccctl_observe::trace_files::Output::Rotating {
            dir: cfg.out_dir.clone(),
            prefix: "trace".into(),
            max_bytes: rotate_bytes,
            max_age: cfg.rotate_time.0,
            layout,
            stats: shared.stats.clone(),
        };
        let opts = trace::TraceOptions {
            filter,
            duration: None,
            stall: None,
            announce: false,
            stop: Some(stop.clone()),
        };
        let m = maps.clone();
        let thread = std::thread::Builder::new()
            .name("ccctl-trace".into())
            .spawn(move || {
                let _lock = trace::TraceLock::acquire()?;
                ccctl_observe::trace_files::run_with(&m, opts, &output)
            })
            .context("starting the trace thread")?;
        Ok(Tracing {
            stop,
            thread,
            maps,
            session: std::process::id() as u64,
        })
    }

    /// New filters, in place: the ring and the current file go on.
    fn refilter(&self, cfg: &config::TraceConfig) -> Result<()> {
        let filter = trace_filter(cfg)?;
        self.maps.write_cfg(&filter.cfg(self.session))?;
        Ok(())
    }

    fn stop(self) -> Result<trace::TraceSummary> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.join() {
            Ok(r) => r,
            Err(_) => bail!("the trace thread panicked"),
        }
    }
}

/// This machine's name (`uname -n`), checked as a Hive partition value.
fn this_host() -> Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("reading the host name from /proc/sys/kernel/hostname")?;
    let name = name.trim().to_string();
    config::check_host(&name).map_err(|e| {
        anyhow::anyhow!("trace.host: this machine's name cannot be used ({e}); set trace.host")
    })?;
    Ok(name)
}

fn trace_filter(cfg: &config::TraceConfig) -> Result<trace::Filter> {
    Ok(trace::Filter::new(
        &cfg.algo,
        (cfg.port != 0).then_some(cfg.port),
        Some(cfg.sample),
        cfg.per_rtt,
    )?
    .with_endpoints(
        cfg.local_endpoint().map_err(anyhow::Error::msg)?,
        cfg.remote_endpoint().map_err(anyhow::Error::msg)?,
    ))
}

/// What the daemon has done to the system, to undo on exit.
#[derive(Default)]
struct State {
    /// User names of algorithms this daemon loaded.
    loaded_by_us: BTreeSet<&'static str>,
}

fn apply(cfg: &DaemonConfig, prev: Option<&DaemonConfig>, state: &mut State) -> Result<()> {
    for a in &cfg.algorithms {
        let algo = registry::find(&a.name)?;
        let mut written = false;
        if !kernel::is_registered(algo.kernel_name)? {
            // Its parameters are in the map before it is registered.
            let initial = params::initial(algo, &a.params)?;
            loader::load(
                algo,
                &LoadOptions {
                    set_default: a.default,
                    params: Some(initial),
                    ..Default::default()
                },
            )?;
            state.loaded_by_us.insert(algo.name);
            written = true;
            tracing::info!(algo = algo.name, params = ?a.params, "loaded");
        } else if a.default {
            loader::load(
                algo,
                &LoadOptions {
                    set_default: true,
                    ..Default::default()
                },
            )?;
        }
        let before = prev.and_then(|p| {
            p.algorithms
                .iter()
                .find(|b| registry::find(&b.name).is_ok_and(|b| b.name == algo.name))
        });
        if !written && before.map(|b| &b.params) != Some(&a.params) {
            // Unlisted parameters go back to their defaults: the file is the
            // truth. One map update, so flows never see a half-applied set.
            let v = params::replace(algo, &a.params)?;
            tracing::info!(algo = algo.name, version = v, params = ?a.params, "parameters written");
        }
    }
    if let Some(p) = prev {
        for old in &p.algorithms {
            let Ok(algo) = registry::find(&old.name) else {
                continue;
            };
            let still = cfg
                .algorithms
                .iter()
                .any(|a| registry::find(&a.name).is_ok_and(|a| a.name == algo.name));
            if !still && state.loaded_by_us.remove(algo.name) {
                loader::unload(algo)?;
                tracing::info!(algo = algo.name, "unloaded (no longer in the config)");
            }
        }
    }
    Ok(())
}

/// Append `rec` to the daemon's audit log; a failure is logged loudly
/// (stderr and the journal) and counted, the daemon goes on.
pub(crate) fn audit_write(log: &mut Option<audit::Log>, rec: &audit::Record) {
    let Some(l) = log else {
        return;
    };
    if let Err(e) = l.append(rec) {
        eprintln!("ccctl daemon: error: {:?} not recorded: {e}", rec.action);
        tracing::error!("audit log: {e}");
    }
}

/// The daemon's audit log: `$CCCTL_AUDIT`, else `audit` in the config, else
/// the default; opened before anything is changed (an error stops the start).
fn open_audit(cfg: &DaemonConfig) -> Result<audit::Log> {
    let path = audit::resolve(None, cfg.audit.as_deref());
    audit::Log::open(&path).context("audit: the daemon's audit log")
}

/// A policy clear, recorded.
fn clear_policy(log: &mut Option<audit::Log>, why: &str) -> Result<()> {
    let before = ccctl_core::policy::kernel::current().ok().flatten();
    let r = ccctl_core::policy::kernel::clear()?;
    let mut rec = audit::Record::now(audit::Action::Clear, why);
    rec.rules = before
        .iter()
        .flat_map(|d| d.rules.iter().map(|r| (&r.rule).into()))
        .collect();
    rec.outcome = serde_json::to_value(&r).unwrap_or_default();
    audit_write(log, &rec);
    Ok(())
}

/// The config's `[[rule]]` tables into the kernel: applied when they differ
/// from what the daemon applied before (or at start), cleared when the
/// config no longer has any (and the daemon had applied some).
fn apply_policy(
    cfg: &DaemonConfig,
    prev: Option<&DaemonConfig>,
    log: &mut Option<audit::Log>,
) -> Result<()> {
    let before = prev.map(|p| p.rules.as_slice());
    if before == Some(cfg.rules.as_slice()) {
        return Ok(());
    }
    if cfg.rules.is_empty() {
        if before.is_some_and(|b| !b.is_empty()) {
            clear_policy(log, "ccctl daemon: no [[rule]] in the config")?;
            eprintln!("ccctl daemon: policy cleared (no [[rule]] in the config)");
        }
        return Ok(());
    }
    let policy = cfg.policy().map_err(anyhow::Error::msg)?;
    let why = "ccctl daemon config";
    let r = ccctl_core::policy::kernel::apply(&policy, why)?;
    let mut rec = audit::Record::now(audit::Action::Apply, why);
    rec.rules = match ccctl_core::policy::kernel::current() {
        Ok(Some(doc)) => doc.rules.iter().map(|r| (&r.rule).into()).collect(),
        _ => policy.rules.iter().map(Into::into).collect(),
    };
    rec.outcome = serde_json::to_value(&r).unwrap_or_default();
    audit_write(log, &rec);
    eprintln!(
        "ccctl daemon: policy applied: {} rule(s), generation {}",
        r.rules, r.generation
    );
    Ok(())
}

fn read_config(path: &Path) -> Result<DaemonConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    DaemonConfig::from_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

pub struct DaemonOptions {
    pub config: PathBuf,
    /// Lock path (tests use their own).
    pub lock: Option<PathBuf>,
}

/// The metrics endpoint for `cfg`, if it has one.
fn start_metrics(
    rt: &tokio::runtime::Runtime,
    cfg: &DaemonConfig,
    shared: &Arc<metrics::Shared>,
) -> Result<Option<metrics::Server>> {
    let Some(m) = &cfg.metrics else {
        return Ok(None);
    };
    let addr = m
        .addr()
        .map_err(|e| anyhow::anyhow!("metrics.listen: {e}"))?;
    let server = metrics::Server::start(rt, addr, shared.clone())?;
    eprintln!("ccctl daemon: metrics on http://{}/metrics", server.addr);
    Ok(Some(server))
}

pub fn run(opts: DaemonOptions) -> Result<()> {
    kernel::check_privileges()?;
    let mut cfg = read_config(&opts.config)?;
    let _lock = single_instance(opts.lock.as_deref().unwrap_or(Path::new(LOCK_PATH)))?;
    let signals = Signals::install()?;
    let mut state = State::default();
    // The daemon's tokio runtime: the metrics endpoint runs on it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(2)
        .thread_name("ccctl-daemon-rt")
        .enable_all()
        .build()
        .context("starting the daemon's tokio runtime")?;
    let shared = Arc::new(metrics::Shared::default());
    shared.set_configured(&cfg);
    shared.reloaded(true, false);
    // Bound before anything is loaded: a bad address changes nothing.
    let mut metrics_server = start_metrics(&rt, &cfg, &shared)?;
    // Opened before anything is changed: a log that cannot be written
    // stops the start. Only a daemon with rules records anything.
    let mut audit_log = if cfg.rules.is_empty() && cfg.audit.is_none() {
        None
    } else {
        Some(open_audit(&cfg)?)
    };
    let mut watcher = judge::Watcher::new();
    let result = (|| -> Result<()> {
        apply(&cfg, None, &mut state)?;
        apply_policy(&cfg, None, &mut audit_log)?;
        let mut tracing_thread = match &cfg.trace {
            Some(t) => Some(Tracing::start(t, cfg.rotate_bytes(), &shared)?),
            None => None,
        };
        shared
            .tracing
            .store(tracing_thread.is_some(), Ordering::Relaxed);
        eprintln!(
            "ccctl daemon: running (pid {}): {} algorithm(s){}",
            std::process::id(),
            cfg.algorithms.len(),
            if tracing_thread.is_some() {
                ", tracing"
            } else {
                ""
            }
        );
        loop {
            if signals.term() {
                break;
            }
            if let Some(t) = &tracing_thread {
                if t.thread.is_finished() {
                    let t = tracing_thread.take().context("trace thread")?;
                    let r = t.stop();
                    bail!("tracing stopped unexpectedly: {:?}", r.err());
                }
            }
            if signals.take_hup() {
                // A moved endpoint is bound first: if it cannot be, the
                // whole new configuration is refused.
                let read = read_config(&opts.config).and_then(|new| {
                    if new.metrics == cfg.metrics {
                        return Ok((new, None));
                    }
                    let server = start_metrics(&rt, &new, &shared)?;
                    Ok((new, Some(server)))
                });
                match read {
                    Err(e) => {
                        shared.reloaded(false, true);
                        tracing::error!("SIGHUP: keeping the running configuration: {e:#}");
                        eprintln!(
                            "ccctl daemon: SIGHUP: config refused, keeping the running one: {e:#}"
                        );
                    }
                    Ok((new, moved)) => {
                        if let Some(server) = moved {
                            if let Some(old) = std::mem::replace(&mut metrics_server, server) {
                                old.stop();
                            }
                        }
                        if new.audit != cfg.audit || audit_log.is_none() && !new.rules.is_empty() {
                            match open_audit(&new) {
                                Ok(l) => audit_log = Some(l),
                                Err(e) => {
                                    eprintln!(
                                        "ccctl daemon: SIGHUP: {e:#}; keeping the previous log"
                                    )
                                }
                            }
                        }
                        apply(&new, Some(&cfg), &mut state)?;
                        apply_policy(&new, Some(&cfg), &mut audit_log)?;
                        tracing_thread = match (tracing_thread.take(), &new.trace) {
                            (Some(t), Some(tc))
                                if cfg.trace.as_ref().map(|o| {
                                    (&o.out_dir, &o.rotate_size, o.rotate_time, o.layout, &o.host)
                                }) == Some((
                                    &tc.out_dir,
                                    &tc.rotate_size,
                                    tc.rotate_time,
                                    tc.layout,
                                    &tc.host,
                                )) =>
                            {
                                t.refilter(tc)?;
                                Some(t)
                            }
                            (Some(t), new_trace) => {
                                let s = t.stop()?;
                                eprintln!(
                                    "ccctl daemon: trace: {} events written, {} dropped",
                                    s.events_written, s.events_dropped
                                );
                                match new_trace {
                                    Some(tc) => {
                                        Some(Tracing::start(tc, new.rotate_bytes(), &shared)?)
                                    }
                                    None => None,
                                }
                            }
                            (None, Some(tc)) => {
                                Some(Tracing::start(tc, new.rotate_bytes(), &shared)?)
                            }
                            (None, None) => None,
                        };
                        shared
                            .tracing
                            .store(tracing_thread.is_some(), Ordering::Relaxed);
                        cfg = new;
                        shared.set_configured(&cfg);
                        shared.reloaded(true, true);
                        eprintln!("ccctl daemon: SIGHUP: configuration reloaded");
                    }
                }
            }
            if !cfg.rules.is_empty() {
                watcher.tick(&shared.policy, &mut audit_log);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        shared.tracing.store(false, Ordering::Relaxed);
        if let Some(t) = tracing_thread.take() {
            let s = t.stop()?;
            eprintln!(
                "ccctl daemon: trace: {} events written, {} dropped",
                s.events_written, s.events_dropped
            );
        }
        Ok(())
    })();
    if let Some(server) = metrics_server.take() {
        server.stop();
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    // Whatever happened above: leave the system as the config says.
    let mut cleanup_err = None;
    // The policy goes before the algorithms it may use (`leave` keeps both).
    if !cfg.rules.is_empty() && (cfg.on_exit == OnExit::Unload || result.is_err()) {
        if let Err(e) = clear_policy(&mut audit_log, "ccctl daemon exit (on_exit)") {
            cleanup_err.get_or_insert(e);
        }
    }
    if cfg.on_exit == OnExit::Unload || result.is_err() {
        for a in &cfg.algorithms {
            if let Ok(algo) = registry::find(&a.name) {
                if cfg.on_exit == OnExit::Unload || state.loaded_by_us.contains(algo.name) {
                    if let Err(e) = loader::unload(algo) {
                        cleanup_err.get_or_insert(e.into());
                    }
                }
            }
        }
    }
    eprintln!(
        "ccctl daemon: stopped; algorithms {}",
        if cfg.on_exit == OnExit::Unload {
            "unloaded"
        } else {
            "left loaded"
        }
    );
    result?;
    if let Some(e) = cleanup_err {
        return Err(e);
    }
    Ok(())
}
