//! `cargo xtask reproduce [NAME...] [--quick]`: every seed's headline result
//! re-measured, side by side with the paper.
//!
//! Runs each scenario of `scenarios/seeds/` with `ccctl lab run` (on this
//! kernel with the userspace path emulator; in the 6.1 VM only for a
//! scenario that asks for `kernel = "6.1"`) into
//! `results/reproduction-<UTC time>/<name>/`, then has `reproduction
//! report` (an example of ccctl-lab) compute every headline from those Parquet files
//! into `REPORT.md`. The suite and headline tables live in
//! `ccctl/lab/src/reproduce.rs` (xtask does not link polars).
//!
//! `--out` reuses a reproduction directory: scenarios already complete
//! there are kept, so a suite can be run in parts (e.g. one lock hold per
//! part on a shared machine) and reported as one. `--lock FILE` holds an
//! exclusive flock on FILE around each scenario's run only.
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;

use crate::proc;

#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// Scenarios to run (names in scenarios/seeds/; default: all).
    pub names: Vec<String>,
    /// Keep each effect, cut repetitions, durations and sweep points.
    #[arg(long)]
    pub quick: bool,
    /// Reproduction directory (created, or reused: complete scenarios in it are kept).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A ccctl binary to use instead of building one.
    #[arg(long)]
    pub ccctl: Option<PathBuf>,
    /// Hold an exclusive flock on this file around each scenario's run.
    #[arg(long)]
    pub lock: Option<PathBuf>,
    /// Only (re)write REPORT.md from what --out holds; run nothing.
    #[arg(long, requires = "out")]
    pub report_only: bool,
    /// Also write the report to docs/reproduction.md (its plots to
    /// docs/reproduction/), headed by the date, the commits and the command.
    #[arg(long)]
    pub docs: bool,
}

/// A line of `reproduction plan` (ccctl-lab's `reproduce::Planned`).
#[derive(serde::Deserialize)]
struct Planned {
    name: String,
    file: PathBuf,
    complete: bool,
}

fn utc_stamp() -> Result<String> {
    let out = proc::capture(Command::new("date").args(["-u", "+%Y%m%dT%H%M%SZ"]))?;
    Ok(out.trim().to_string())
}

/// `ccctl lab check`'s "about N s of testbed time".
fn testbed_secs(ccctl: &Path, file: &Path) -> Result<f64> {
    let out = proc::capture(Command::new(ccctl).args(["lab", "check"]).arg(file))?;
    let first = out.lines().next().unwrap_or_default();
    first
        .split("about ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("cannot read the testbed time from `{first}`"))
}

fn mins(secs: f64) -> String {
    format!("{}m{:02}s", (secs / 60.0) as u64, (secs % 60.0) as u64)
}

/// The cargo arguments that build the reproduction tool (see `main`).
pub const REPRODUCTION_TOOL_BUILD: [&str; 9] = [
    "build",
    "-p",
    "ccctl",
    "-p",
    "ccctl-lab",
    "--bin",
    "ccctl",
    "--example",
    "reproduction",
];

pub fn main(args: ReproduceArgs) -> Result<i32> {
    let root = proc::workspace_root();
    let ccctl = match &args.ccctl {
        Some(p) => p.clone(),
        None => {
            eprintln!("reproduce: building ccctl (debug)");
            proc::cargo_build_json(&["build", "-p", "ccctl", "--bins"], |name, kinds, _| {
                name == "ccctl" && kinds.iter().any(|k| k == "bin")
            })?
        }
    };
    let out = match &args.out {
        Some(o) => o.clone(),
        None => root
            .join("results")
            .join(format!("reproduction-{}", utc_stamp()?)),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let out = out.canonicalize()?;
    // The suite's plan and report: an example of ccctl-lab (research
    // tooling, not in the ccctl users install). Built together with ccctl's
    // binary so that cargo unifies the features of the crates both share and
    // builds them once: `-p ccctl-lab` alone enables fewer features on tokio
    // and regex and so compiled polars and everything on it a second time
    // (2 min 29 s of CI's host phase).
    eprintln!("reproduce: building the reproduction tool (debug)");
    let tool = proc::cargo_build_json(&REPRODUCTION_TOOL_BUILD, |name, kinds, _| {
        name == "reproduction" && kinds.iter().any(|k| k == "example")
    })?;
    if args.report_only {
        let code = report(&tool, &out)?;
        if args.docs {
            write_docs(&tool, &root, &out)?;
        }
        return Ok(code);
    }

    let mut plan_cmd = Command::new(&tool);
    plan_cmd
        .args(["plan", "--seeds"])
        .arg(root.join("scenarios/seeds"))
        .arg("--out")
        .arg(&out)
        .args(&args.names);
    if args.quick {
        plan_cmd.arg("--quick");
    }
    // `plan` also starts suite.json (the mode and the scenario runs made
    // into this directory), or refuses a directory of the other mode.
    let planned: Vec<Planned> = proc::capture(&mut plan_cmd)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("reading `reproduction plan`")?;

    let mut todo = Vec::new();
    for p in planned {
        let dir = out.join(&p.name);
        if p.complete {
            println!(
                "reproduce: {} already complete in {}, kept",
                p.name,
                dir.display()
            );
            continue;
        }
        if dir.exists() {
            let aside = out.join(format!("{}.incomplete-{}", p.name, utc_stamp()?));
            std::fs::rename(&dir, &aside)?;
            println!(
                "reproduce: an incomplete {} moved to {}",
                p.name,
                aside.display()
            );
        }
        let secs = testbed_secs(&ccctl, &p.file)?;
        todo.push((p, secs));
    }
    // Per scenario beyond its testbed time: run setup and teardown, and a VM
    // boot when the lab goes into the VM (measured: ~5 s per run, ~40 s a boot).
    // Corrected by what the finished scenarios really took.
    let overhead = 1.3;
    let mut factor = overhead;
    let started = Instant::now();
    let (mut spent_est, mut spent_real) = (0.0, 0.0);
    let total = todo.len();
    let mut failed = Vec::new();
    for (i, (p, secs)) in todo.iter().enumerate() {
        let remaining: f64 = todo[i..].iter().map(|(_, s)| s + 40.0).sum::<f64>() * factor;
        println!(
            "reproduce: [{}/{}] {} (~{} testbed time); elapsed {}, remaining ~{}",
            i + 1,
            total,
            p.name,
            mins(*secs),
            mins(started.elapsed().as_secs_f64()),
            mins(remaining)
        );
        let _guard = match &args.lock {
            Some(l) => {
                let f = File::options()
                    .create(true)
                    .append(true)
                    .open(l)
                    .with_context(|| format!("opening {}", l.display()))?;
                rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
                    .with_context(|| format!("locking {}", l.display()))?;
                Some(f)
            }
            None => None,
        };
        let t0 = Instant::now();
        let res = proc::run(
            Command::new(&ccctl)
                .args(["lab", "run"])
                .arg(&p.file)
                .arg("--run-dir")
                .arg(out.join(&p.name))
                .current_dir(&root),
        );
        drop(_guard);
        proc::bail_if_interrupted()?;
        let took = t0.elapsed().as_secs_f64();
        spent_est += secs + 40.0;
        spent_real += took;
        factor = spent_real / spent_est;
        if let Err(e) = res {
            eprintln!(
                "reproduce: {} failed: {e:#}; going on with the others",
                p.name
            );
            failed.push(p.name.clone());
        }
        let mut part = Command::new(&tool);
        part.args(["part", "--out"])
            .arg(&out)
            .args(["--scenario", &p.name, "--file"])
            .arg(&p.file)
            .args(["--wall-secs", &format!("{took:.1}")]);
        if failed.contains(&p.name) {
            part.arg("--failed");
        }
        proc::capture(&mut part)?;
    }
    if total > 0 {
        println!(
            "reproduce: {} scenario(s) in {}",
            total,
            mins(started.elapsed().as_secs_f64())
        );
    }
    let code = report(&tool, &out)?;
    if args.docs {
        write_docs(&tool, &root, &out)?;
    }
    if !failed.is_empty() {
        eprintln!("reproduce: failed: {}", failed.join(", "));
        return Ok(1);
    }
    Ok(code)
}

fn report(tool: &Path, out: &Path) -> Result<i32> {
    proc::capture(Command::new(tool).arg("report").arg(out))?;
    println!("reproduce: report in {}", out.join("REPORT.md").display());
    Ok(0)
}

/// docs/reproduction.md (and docs/reproduction/'s plots) from `out`'s
/// REPORT.md, written by `reproduction docs` (ccctl-lab's typed run
/// directory and suite.json).
fn write_docs(tool: &Path, root: &Path, out: &Path) -> Result<()> {
    let written = proc::capture(
        Command::new(tool)
            .arg("docs")
            .arg("--root")
            .arg(root)
            .arg("--out")
            .arg(out),
    )?;
    println!("reproduce: wrote {}", written.trim());
    Ok(())
}
