//! ccctl-lab: congestion-control experiments on a namespace dumbbell, and
//! everything that measures flows.
//!
//! The measuring parts: [`testbed`] (ccctl-testbed: namespaces, links,
//! the kernel's qdiscs or the userspace path emulator), [`iperf`]
//! (traffic), [`metrics`] (goodput, Jain's index, harm), [`plots`] and
//! [`vm`] (the 6.1 test VM); socket sampling through inet_diag and per-ACK
//! trace files come from ccctl-observe, shared with the fleet.
//!
//! `ccctl lab run`:
//! A scenario ([`crate::scenario`]) becomes a [`plan`] of testbed runs
//! (calibration, main runs, solo and same-algorithm baselines); [`exec`]
//! runs each on a fresh testbed while sampling every flow's socket through
//! inet_diag; [`analyze`] cuts the warm-up and computes goodput, RTT,
//! retransmissions, Jain's index and harm; [`output`] writes the run
//! directory (scenario, metadata, `samples.parquet`, `summary.parquet`,
//! `summary.txt`, plots), whose layout and formats [`run_dir`] defines for
//! every writer and reader.
//!
//! Where: the testbed needs netem for delay and loss. When this kernel has
//! none (or `--where vm`), the same command runs inside a virtme-ng VM
//! booting Debian's 6.1 kernel over the host's filesystem, writing into the
//! same run directory ([`crate::vm`]).
//!
//! Large sweeps: `--shard K/N` runs a deterministic part of the plan and
//! `ccctl lab merge` joins the parts ([`shard`]).
pub mod iperf;
pub mod metrics;
pub mod plots;
pub mod scenario;
/// The namespace dumbbell and its path emulators (ccctl-testbed).
pub use ccctl_testbed as testbed;
#[cfg(test)]
mod testbed_tests;

/// The test VM (ccctl-vm), where the lab runs when this kernel has no netem.
pub use ccctl_vm as vm;

pub mod analyze;
pub mod exec;
pub mod provision;
/// Ctrl-C for the lab: SIGINT, SIGTERM and SIGHUP are recorded; the lab notices
/// at its next 100 ms tick, stops its flows, tears down the testbed, unloads
/// what it loaded and exits (ccctl-sys's signal policy).
pub use ccctl_core::sys::signals as interrupt;
pub mod output;
pub mod plan;
mod progress;
pub mod reproduce;
pub mod run_dir;
pub mod shard;
mod traces;

use std::path::{Path, PathBuf};

/// Puts right what lab runs killed midway (SIGKILL, a crash) left behind:
/// the algorithms they loaded and their network namespaces. One line per
/// repair, for the user.
pub fn repair_stale_runs() -> Vec<String> {
    let mut fixed = provision::reap_stale();
    fixed.extend(
        testbed::sweep_stale()
            .into_iter()
            .map(|ns| format!("removed network namespace {ns}, left by a lab run that is gone")),
    );
    fixed
}

use crate::scenario::{Aqm, Scenario, ScenarioError};

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("scenario: {0}")]
    Scenario(ScenarioError),
    #[error(transparent)]
    Testbed(#[from] testbed::Error),
    #[error(transparent)]
    Iperf(#[from] crate::iperf::Error),
    #[error(transparent)]
    Diag(#[from] ccctl_observe::sockdiag::DiagError),
    #[error(transparent)]
    Load(ccctl_core::error::Error),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {what}: {message}")]
    Output { what: String, message: String },
    #[error("interrupted by signal {0}; the testbed was torn down and algorithms loaded for the run were unloaded")]
    Interrupted(i32),
    #[error("{0}")]
    Vm(String),
    #[error(transparent)]
    RunDir(#[from] run_dir::RunDirError),
}

impl LabError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
        let what = what.into();
        move |source| LabError::Io { what, source }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Where {
    /// This kernel with the userspace path emulator, unless the scenario
    /// asks for a kernel (`kernel = "6.1"`): then the VM.
    Auto,
    /// This kernel, the userspace path emulator.
    Host,
    /// The VM (Debian 6.1 under TCG), the kernel's qdiscs.
    Vm,
}

pub struct LabOptions {
    pub scenario: Scenario,
    /// Results go to `<out_root>/<name>-<UTC time>/`.
    pub out_root: PathBuf,
    /// Exact run directory (used by the VM half of a run).
    pub run_dir: Option<PathBuf>,
    pub where_: Where,
    /// Verbosity to pass on to the VM half.
    pub verbose: u8,
    /// Run only this part of the plan ([`shard`]).
    pub shard: Option<shard::Shard>,
}

pub struct LabOutcome {
    pub run_dir: PathBuf,
    pub limited_links: usize,
}

/// A field of the scenario only the userspace path emulator can run.
fn host_only_field(sc: &Scenario) -> Option<String> {
    if sc.link.reverse_rate.is_some() {
        return Some("link.reverse_rate".into());
    }
    if sc.link.trace.is_some() {
        return Some("link.trace".into());
    }
    if sc.link.aqm == Aqm::Codel {
        return Some("link.aqm".into());
    }
    let groups = sc.matchups().into_iter().flatten();
    groups
        .clone()
        .any(|g| !g.drop.is_empty())
        .then(|| "flows[].drop".to_string())
}

/// The path emulator of a lab run here: the kernel's qdiscs inside the VM
/// (its 6.1 kernel has netem), the userspace emulator on the host.
pub fn path_here() -> testbed::PathKind {
    if in_vm() {
        testbed::PathKind::Qdisc
    } else {
        testbed::PathKind::Userspace
    }
}

/// The parameter sets in force for our algorithms `sc` names (loaded by
/// now), for metadata.json; an algorithm whose set cannot be read is left
/// out with a warning (the run does not depend on it).
fn params_in_force(
    sc: &Scenario,
) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, f64>> {
    let mut out = std::collections::BTreeMap::new();
    for name in sc.algorithms() {
        let provision::Source::Ours(a) = provision::resolve(&name) else {
            continue;
        };
        match ccctl_core::params::view(a) {
            Ok(v) => {
                out.insert(
                    a.kernel_name.to_string(),
                    v.params
                        .iter()
                        .map(|p| (p.name.to_string(), p.value))
                        .collect(),
                );
            }
            Err(e) => {
                tracing::warn!(algo = a.name, error = %e, "cannot read its parameters for metadata.json")
            }
        }
    }
    out
}

fn in_vm() -> bool {
    std::env::var_os("CCCTL_IN_VM").is_some_and(|v| v == "1")
}

pub fn run(opts: LabOptions) -> Result<LabOutcome, LabError> {
    interrupt::record_ending();
    ccctl_core::kernel::check_privileges().map_err(LabError::Load)?;
    let wants_kernel = opts.scenario.kernel.is_some();
    let where_ = match opts.where_ {
        Where::Auto if in_vm() => Where::Host,
        Where::Auto if wants_kernel => {
            eprintln!("ccctl lab: the scenario asks for kernel 6.1: running it in the VM (Debian 6.1, TCG)");
            Where::Vm
        }
        Where::Auto if !provision::missing_here(&opts.scenario).is_empty() => {
            eprintln!(
                "ccctl lab: this kernel has no {}: running the scenario in the VM (Debian 6.1, TCG), which has it",
                provision::missing_here(&opts.scenario).join(", ")
            );
            Where::Vm
        }
        Where::Auto => Where::Host,
        w => w,
    };
    if where_ == Where::Host && wants_kernel && !in_vm() {
        return Err(LabError::Scenario(scenario::ScenarioError {
            field: "kernel".into(),
            message: "the scenario asks for kernel 6.1, which only the VM has: leave --where out or use --where vm".into(),
        }));
    }
    if where_ == Where::Vm && !in_vm() {
        if let Some(field) = host_only_field(&opts.scenario) {
            return Err(LabError::Scenario(scenario::ScenarioError {
                field,
                message: "needs the host's userspace path emulator; the VM runs the kernel's qdiscs (leave --where out)".into(),
            }));
        }
    }
    // Everything that can be checked is checked before anything is created.
    let kernel_cc = match where_ {
        Where::Vm => {
            provision::precheck(&opts.scenario)?;
            None
        }
        _ => Some(provision::check(&opts.scenario)?),
    };
    let run_dir = match &opts.run_dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(LabError::io(format!("creating {}", d.display())))?;
            d.clone()
        }
        None => match opts.shard {
            None => output::create_run_dir(&opts.out_root, &opts.scenario.name)?,
            Some(s) => output::create_run_dir(
                &opts.out_root,
                &format!("{}-shard{}of{}", opts.scenario.name, s.index, s.count),
            )?,
        },
    };
    match kernel_cc {
        None => run_in_vm(&opts, &run_dir),
        Some(kernel_cc) => run_here(
            &opts.scenario,
            &kernel_cc,
            &run_dir,
            where_label(),
            opts.shard,
        ),
    }
}

fn where_label() -> &'static str {
    if in_vm() {
        "vm"
    } else {
        "host"
    }
}

/// Re-runs this command inside the VM with `--where host --run-dir <dir>`.
fn run_in_vm(opts: &LabOptions, run_dir: &Path) -> Result<LabOutcome, LabError> {
    let scenario_path = run_dir.join(run_dir::SCENARIO);
    output::write_scenario(&scenario_path, &opts.scenario)?;
    let exe = std::env::current_exe().map_err(LabError::io("finding the ccctl executable"))?;
    let mut cmd = vec![exe.to_string_lossy().into_owned()];
    if opts.verbose > 0 {
        cmd.push(format!("-{}", "v".repeat(opts.verbose as usize)));
    }
    cmd.extend(
        [
            "lab",
            "run",
            &scenario_path.to_string_lossy(),
            "--where",
            "host",
            "--run-dir",
            &run_dir.to_string_lossy(),
        ]
        .map(String::from),
    );
    if let Some(s) = opts.shard {
        cmd.extend(["--shard".to_string(), s.to_string()]);
    }
    let spec = vm::GuestRun {
        rwdirs: vec![run_dir.to_path_buf()],
        cmd,
        ..vm::GuestRun::default()
    };
    let code = vm::run(&spec, run_dir, || interrupt::received().is_some())
        .map_err(|e| LabError::Vm(format!("{e:#}")))?;
    if let Some(sig) = interrupt::received() {
        return Err(LabError::Interrupted(sig));
    }
    if code != 0 {
        return Err(LabError::Vm(format!(
            "the lab run inside the VM failed (exit code {code}); its output is above, partial results in {}",
            run_dir.display()
        )));
    }
    // The VM half wrote the metadata; a file this ccctl cannot read is
    // reported, the results stay where they are.
    let limited_links = match run_dir::Metadata::read(run_dir) {
        Ok(m) => m.limited_links(),
        Err(e) => {
            eprintln!("ccctl lab: warning: {e}");
            0
        }
    };
    Ok(LabOutcome {
        run_dir: run_dir.to_path_buf(),
        limited_links,
    })
}

fn run_here(
    sc: &Scenario,
    kernel_cc: &std::collections::BTreeMap<String, String>,
    run_dir: &Path,
    where_: &str,
    shard: Option<shard::Shard>,
) -> Result<LabOutcome, LabError> {
    let plan = plan::plan(sc);
    let mut meta = run_dir::Metadata::new(sc, where_, &plan);
    if path_here() == testbed::PathKind::Userspace {
        meta.testbed = "router-namespace dumbbell on the running kernel; the path in userspace (ccctl-path on \
                        rattan-core, AF_PACKET at the router's veths, the router's kernel not forwarding): \
                        bottleneck rate (IP bytes) and queue, base RTT as a delay on each sender's ACK path, \
                        random loss and drop lists after the bottleneck, sender gates on both directions; \
                        TSO/GSO/GRO and tx checksumming off on every veth"
            .into();
    }
    let jobs: Vec<plan::Job> = match shard {
        None => plan.jobs.clone(),
        Some(s) => {
            let ids = shard::select(&plan, s);
            eprintln!(
                "ccctl lab: shard {s}: {} of the plan's {} runs",
                ids.len(),
                plan.jobs.len()
            );
            meta.shard = Some(run_dir::ShardMeta {
                index: s.index,
                count: s.count,
                runs: ids.clone(),
            });
            ids.iter().map(|&i| plan.jobs[i].clone()).collect()
        }
    };
    output::write_scenario(&run_dir.join(run_dir::SCENARIO), sc)?;
    meta.write(run_dir)?;
    let loaded = provision::Loaded::ensure(sc)?;
    meta.loaded_for_run = loaded.names().iter().map(|s| s.to_string()).collect();
    meta.params = params_in_force(sc);

    let tracer = traces::LabTracer::new(sc.algorithms(), run_dir);
    let mut progress = progress::Progress::new(&jobs);
    let mut records = Vec::with_capacity(jobs.len());
    let mut failure = None;
    for job in &jobs {
        progress.start(job);
        let job_trace = tracer.as_ref().and_then(|t| t.start(job));
        let result = exec::run_job(job, kernel_cc, path_here());
        let trace_file = job_trace.and_then(traces::JobTrace::finish);
        match result {
            Ok(mut rec) => {
                rec.trace = trace_file;
                progress.finish(job, Some(&rec));
                records.push(rec);
            }
            Err(e) => {
                progress.finish(job, None);
                failure = Some(e);
                break;
            }
        }
    }
    progress.done();
    drop(tracer);
    drop(loaded);
    meta.finish(&records, failure.as_ref());
    if let Some(s) = shard {
        shard::write_records(run_dir, &plan, s, &records)?;
    }
    let analysis = write_results(sc, &plan, &mut meta, &records, run_dir)?;
    eprintln!("ccctl lab: results in {}", run_dir.display());
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(LabOutcome {
        run_dir: run_dir.to_path_buf(),
        limited_links: analysis
            .calibrations
            .iter()
            .filter(|c| c.testbed_limited)
            .count(),
    })
}

/// Analysis, metadata, Parquet files, table and plots of `records` (of a
/// run, a shard, or merged shards) into `run_dir`.
fn write_results(
    sc: &Scenario,
    plan: &plan::Plan,
    meta: &mut run_dir::Metadata,
    records: &[exec::JobRecord],
    run_dir: &Path,
) -> Result<analyze::Analysis, LabError> {
    let records = records.to_vec();
    let analysis = analyze::analyze(plan, &records);
    // A shard's calibrations: of the links it ran on (others have no record).
    meta.calibrations = analysis
        .calibrations
        .iter()
        .filter(|c| {
            meta.shard.is_none()
                || plan
                    .baselines
                    .calibration
                    .get(&c.link_index)
                    .is_some_and(|id| records.iter().any(|r| r.job.id == *id))
        })
        .cloned()
        .collect();
    meta.write(run_dir)?;
    // Whatever ran is written even when a later job failed or was interrupted.
    output::write_samples(&run_dir.join(run_dir::SAMPLES), &records)?;
    output::write_summary(run_dir, &analysis.rows)?;
    let table = output::summary_table(sc, plan, &analysis);
    std::fs::write(run_dir.join(run_dir::SUMMARY_TABLE), &table)
        .map_err(LabError::io("writing summary.txt"))?;
    print!("{table}");
    for rec in records.iter().filter(|r| r.job.kind == plan::JobKind::Main) {
        if let Err(e) = traces::plot(rec, &run_dir.join(run_dir::PLOTS)) {
            eprintln!(
                "ccctl lab: warning: per-ACK plot of run {}: {e:#}",
                rec.job.id
            );
        }
    }
    if let Err(e) = output::write_plots(&run_dir.join(run_dir::PLOTS), &records, &analysis) {
        tracing::warn!(error = %e, "plots incomplete");
        eprintln!("ccctl lab: warning: {e}");
    }
    Ok(analysis)
}

/// `ccctl lab merge DIR... --out OUT`: the shards of one plan joined into
/// the run directory an unsharded run writes (see [`shard`]).
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<LabOutcome, shard::MergeError> {
    if out.exists()
        && std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(shard::MergeError::OutExists(out.to_path_buf()));
    }
    let (shards, plan, mut records) = shard::gather(dirs)?;
    let sc = &shards[0].scenario;
    std::fs::create_dir_all(out).map_err(LabError::io(format!("creating {}", out.display())))?;
    // Per-ACK traces: copied beside the merged results, as a run has them.
    for r in records.iter_mut() {
        if let Some(src) = r.trace.take() {
            let Some(name) = src.file_name() else {
                continue;
            };
            let traces = out.join(run_dir::TRACES);
            std::fs::create_dir_all(&traces)
                .map_err(LabError::io(format!("creating {}", traces.display())))?;
            let dst = traces.join(name);
            std::fs::copy(&src, &dst).map_err(LabError::io(format!(
                "copying {} to {}",
                src.display(),
                dst.display()
            )))?;
            r.trace = Some(dst);
        }
    }
    let joined = |key: fn(&run_dir::Metadata) -> &str| -> String {
        let mut v: Vec<&str> = shards.iter().map(|s| key(&s.meta)).collect();
        v.sort();
        v.dedup();
        v.join(", ")
    };
    let mut meta = run_dir::Metadata::new(sc, &joined(|m| &m.ran_on), &plan);
    meta.kernel = joined(|m| &m.kernel);
    meta.iperf3 = joined(|m| &m.iperf3);
    meta.started_unix = shards
        .iter()
        .map(|s| s.meta.started_unix)
        .fold(f64::INFINITY, f64::min);
    let mut loaded: Vec<String> = shards
        .iter()
        .flat_map(|s| s.meta.loaded_for_run.iter().cloned())
        .collect();
    loaded.sort();
    loaded.dedup();
    meta.loaded_for_run = loaded;
    meta.shards = shards
        .iter()
        .map(|s| run_dir::MergedShard {
            dir: s.dir.display().to_string(),
            index: s.shard.index,
            count: s.shard.count,
            ran_on: s.meta.ran_on.clone(),
            kernel: s.meta.kernel.clone(),
            runs: s.shard.runs.clone(),
            calibrations: s.meta.calibrations.clone(),
            started_unix: s.meta.started_unix,
            finished_unix: s.meta.finished_unix,
        })
        .collect();
    meta.finish(&records, None);
    meta.finished_unix = Some(
        shards
            .iter()
            .filter_map(|s| s.meta.finished_unix)
            .fold(0.0, f64::max),
    );
    output::write_scenario(&out.join(run_dir::SCENARIO), sc)?;
    let analysis = write_results(sc, &plan, &mut meta, &records, out)?;
    eprintln!(
        "ccctl lab: merged {} shards ({} runs) into {}",
        shards.len(),
        records.len(),
        out.display()
    );
    Ok(LabOutcome {
        run_dir: out.to_path_buf(),
        limited_links: analysis
            .calibrations
            .iter()
            .filter(|c| c.testbed_limited)
            .count(),
    })
}
