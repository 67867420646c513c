//! Per-ACK traces of the lab's flows that run one of our algorithms: one
//! `ccctl trace` session per run, filtered to the algorithms in it, written
//! to `traces/run-NNN.parquet` beside the results, and plotted (cwnd, pacing
//! rate and BBR mode over time per flow).
//!
//! The lab takes the tracer lock for the whole scenario; if someone else is
//! tracing, the lab says so and runs without traces (the ring buffer is
//! shared, so two tracers would steal each other's events).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use polars::prelude::*;

use super::exec::JobRecord;
use super::plan::Job;
use super::provision::{self, Source};
use crate::plots::{self, Panel, Series};
use ccctl_core::trace::{Filter, SharedMaps, TraceLock, TraceOptions, TraceSummary};

use ccctl_observe::trace_files::{self, Output};

/// Holds the tracer lock for the lab run.
pub struct LabTracer {
    _lock: TraceLock,
    dir: PathBuf,
}

/// A trace session running beside one job.
pub struct JobTrace {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<TraceSummary>>,
    pub path: PathBuf,
}

impl LabTracer {
    /// None when the scenario has none of ours, or another tracer runs.
    pub fn new(
        scenario_algos: impl IntoIterator<Item = String>,
        run_dir: &Path,
    ) -> Option<LabTracer> {
        if !scenario_algos
            .into_iter()
            .any(|a| matches!(provision::resolve(&a), Source::Ours(_)))
        {
            return None;
        }
        match TraceLock::acquire() {
            Ok(lock) => Some(LabTracer {
                _lock: lock,
                dir: run_dir.join(crate::run_dir::TRACES),
            }),
            Err(e) => {
                eprintln!("ccctl lab: per-ACK traces skipped: {e}");
                None
            }
        }
    }

    /// Starts tracing the job's flows of our algorithms (None if it has none).
    pub fn start(&self, job: &Job) -> Option<JobTrace> {
        let ours: Vec<String> = job
            .flows
            .iter()
            .filter_map(|f| match provision::resolve(&f.cc) {
                Source::Ours(a) => Some(a.kernel_name.to_string()),
                Source::Kernel => None,
            })
            .collect();
        if ours.is_empty() {
            return None;
        }
        let started = (|| -> anyhow::Result<JobTrace> {
            std::fs::create_dir_all(&self.dir)?;
            let maps = SharedMaps::open()?;
            let path = self.dir.join(format!("run-{:03}.parquet", job.id));
            let stop = Arc::new(AtomicBool::new(false));
            let opts = TraceOptions {
                filter: Filter::new(&ours, None, None, false)?,
                duration: None,
                stall: None,
                announce: false,
                stop: Some(stop.clone()),
            };
            let output = Output::Parquet(path.clone());
            let thread = std::thread::Builder::new()
                .name("ccctl-lab-trace".into())
                .spawn(move || trace_files::run_with(&maps, opts, &output))?;
            // Let the session switch tracing on before the flows start.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while std::time::Instant::now() < deadline
                && !SharedMaps::open()
                    .and_then(|m| m.read_cfg())
                    .is_ok_and(|c| c.enabled != 0)
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Ok(JobTrace { stop, thread, path })
        })();
        match started {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("ccctl lab: run {}: no per-ACK trace: {e:#}", job.id);
                None
            }
        }
    }
}

impl JobTrace {
    /// Ends the session; the file path if it was written.
    pub fn finish(self) -> Option<PathBuf> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.join() {
            Ok(Ok(s)) => {
                if s.events_dropped > 0 {
                    eprintln!(
                        "ccctl lab: trace {}: {} events dropped (the ring buffer overflowed)",
                        self.path.display(),
                        s.events_dropped
                    );
                }
                Some(self.path)
            }
            Ok(Err(e)) => {
                eprintln!("ccctl lab: trace {}: {e:#}", self.path.display());
                None
            }
            Err(_) => None,
        }
    }
}

fn col_f64(df: &DataFrame, name: &str) -> PolarsResult<Vec<f64>> {
    let c = df.column(name)?.cast(&DataType::Float64)?;
    let ca = c.f64()?;
    Ok((0..ca.len())
        .map(|i| ca.get(i).unwrap_or(f64::NAN))
        .collect())
}

/// cwnd, pacing rate and estimated bandwidth, BBR mode, and (patched BBR)
/// Θ in force against the sender gate's Θ, over time, per flow of the run:
/// under a Heavy gate bpf_bbr's pacing rate decays (Theorem 4, Fig. 5) where
/// patched_bbr's recovers.
pub fn plot(rec: &JobRecord, dir: &Path) -> anyhow::Result<()> {
    let Some(path) = &rec.trace else {
        return Ok(());
    };
    let df = ParquetReader::new(std::fs::File::open(path)?).finish()?;
    let ts = col_f64(&df, "ts_ns")?;
    let sport = col_f64(&df, "sport")?;
    let cwnd = col_f64(&df, "cwnd")?;
    let pacing = col_f64(&df, "pacing_rate_bps")?;
    let btl_bw = col_f64(&df, "btl_bw_bps")?;
    // Traces written before patched BBR have no Θ column.
    let theta = col_f64(&df, "theta").ok();
    let algo_col = df.column("algo")?.cast(&DataType::String)?;
    let algos = algo_col.str()?;
    let mode_col = df.column("bbr_mode")?.cast(&DataType::String)?;
    let modes = mode_col.str()?;
    let mode_num = |m: Option<&str>| match m {
        Some("startup") => 0.0,
        Some("drain") => 1.0,
        Some("probe_bw") => 2.0,
        Some("probe_rtt") => 3.0,
        _ => f64::NAN,
    };
    // Lab flows by their data connection's local port, with the gate's Θ.
    let mut by_port: BTreeMap<u64, (String, Option<f64>)> = BTreeMap::new();
    for (i, f) in rec.flows.iter().enumerate() {
        if let Some(p) = f.result.local_port {
            if matches!(provision::resolve(&f.plan.cc), Source::Ours(_)) {
                by_port.insert(
                    p as u64,
                    (
                        format!("{} #{i}", f.plan.cc),
                        f.plan.schedule.map(|s| s.theta()),
                    ),
                );
            }
        }
    }
    let t0 = rec.t0_monotonic_ns as f64;
    // At most ~5000 points per series: every k-th event.
    let step = (df.height() / 5000).max(1);
    let mut panels = [
        Panel {
            y_label: "cwnd (packets)".into(),
            series: Vec::new(),
        },
        Panel {
            y_label: "pacing rate, btl_bw (Mbit/s)".into(),
            series: Vec::new(),
        },
        Panel {
            y_label: "mode (0 startup, 2 probe_bw)".into(),
            series: Vec::new(),
        },
        Panel {
            y_label: "Θ: patched_bbr's, the gate's".into(),
            series: Vec::new(),
        },
    ];
    for (port, (label, gate_theta)) in &by_port {
        let rows: Vec<usize> = (0..df.height())
            .filter(|&i| sport[i] == *port as f64)
            .step_by(step)
            .collect();
        let t = |i: usize| (ts[i] - t0) / 1e9;
        panels[0].series.push(Series {
            label: label.clone(),
            points: rows.iter().map(|&i| (t(i), cwnd[i])).collect(),
        });
        panels[1].series.push(Series {
            label: format!("{label} pacing"),
            points: rows.iter().map(|&i| (t(i), pacing[i] / 1e6)).collect(),
        });
        panels[1].series.push(Series {
            label: format!("{label} btl_bw"),
            points: rows.iter().map(|&i| (t(i), btl_bw[i] / 1e6)).collect(),
        });
        let patched = rows.iter().any(|&i| algos.get(i) == Some("patched_bbr"));
        if let (Some(theta), true) = (&theta, patched) {
            panels[3].series.push(Series {
                label: format!("{label} Θ"),
                points: rows.iter().map(|&i| (t(i), theta[i])).collect(),
            });
        }
        if let (Some(g), Some(&first), Some(&last)) = (gate_theta, rows.first(), rows.last()) {
            panels[3].series.push(Series {
                label: format!("{label} gate Θ"),
                points: vec![(t(first), *g), (t(last), *g)],
            });
        }
        panels[2].series.push(Series {
            label: label.clone(),
            points: rows
                .iter()
                .map(|&i| (t(i), mode_num(modes.get(i))))
                .collect(),
        });
    }
    plots::time_series(
        &dir.join(format!("run-{:03}-per-ack", rec.job.id)),
        &format!("run {}: per-ACK state of our algorithms' flows", rec.job.id),
        "time (s)",
        &panels,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
