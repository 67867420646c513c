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

use anyhow::{bail, Context, Result};
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

#[derive(serde::Deserialize)]
struct Planned {
    name: String,
    file: PathBuf,
}

fn utc_stamp() -> Result<String> {
    let out = proc::capture(Command::new("date").args(["-u", "+%Y%m%dT%H%M%SZ"]))?;
    Ok(out.trim().to_string())
}

fn complete(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("metadata.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|m| m["status"] == "complete")
        && dir.join("summary.parquet").exists()
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
    // tooling, not in the ccctl users install).
    eprintln!("reproduce: building the reproduction tool (debug)");
    let tool = proc::cargo_build_json(
        &["build", "-p", "ccctl-lab", "--example", "reproduction"],
        |name, kinds, _| name == "reproduction" && kinds.iter().any(|k| k == "example"),
    )?;
    if args.report_only {
        let code = report(&tool, &out)?;
        if args.docs {
            write_docs(&root, &out)?;
        }
        return Ok(code);
    }

    // suite.json: the mode and the parts run into this directory.
    let suite_path = out.join("suite.json");
    let mut suite: serde_json::Value = std::fs::read_to_string(&suite_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| serde_json::json!({ "quick": args.quick, "parts": [] }));
    if suite["quick"].as_bool() != Some(args.quick) {
        bail!(
            "{} holds a {} reproduction; run with{} --quick or use another --out",
            out.display(),
            if args.quick { "full" } else { "--quick" },
            if args.quick { "out" } else { "" }
        );
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
    let planned: Vec<Planned> = proc::capture(&mut plan_cmd)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("reading `reproduction plan`")?;

    let mut todo = Vec::new();
    for p in planned {
        let dir = out.join(&p.name);
        if complete(&dir) {
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
        if let Some(parts) = suite["parts"].as_array_mut() {
            parts.push(serde_json::json!({
                "scenario": p.name,
                "file": p.file,
                "wall_secs": took,
                "ok": !failed.contains(&p.name),
            }));
        }
        std::fs::write(&suite_path, serde_json::to_string_pretty(&suite)? + "\n")?;
    }
    if total > 0 {
        println!(
            "reproduce: {} scenario(s) in {}",
            total,
            mins(started.elapsed().as_secs_f64())
        );
    }
    std::fs::write(&suite_path, serde_json::to_string_pretty(&suite)? + "\n")?;
    let code = report(&tool, &out)?;
    if args.docs {
        write_docs(&root, &out)?;
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

/// docs/reproduction.md from `out`'s REPORT.md: a header saying when, from
/// which commits, with which command and how long each scenario took (from
/// each scenario's metadata.json and suite.json), then the report as the
/// command wrote it, its plots copied to docs/reproduction/ and linked
/// there. Nothing in it is typed by hand; the reading of the numbers goes
/// to docs/notebook/.
fn write_docs(root: &Path, out: &Path) -> Result<()> {
    let report = std::fs::read_to_string(out.join("REPORT.md"))
        .with_context(|| format!("reading {}", out.join("REPORT.md").display()))?;
    let suite: serde_json::Value = std::fs::read_to_string(out.join("suite.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    let plots_dir = root.join("docs/reproduction");
    std::fs::create_dir_all(&plots_dir)
        .with_context(|| format!("creating {}", plots_dir.display()))?;
    let mut commits = std::collections::BTreeSet::new();
    let mut started = f64::INFINITY;
    let mut finished: f64 = 0.0;
    let mut body = report.clone();
    // The report's own figures (headline values with intervals, beside the
    // paper's): out/plots/<stem>.png -> docs/reproduction/<stem>.png.
    if let Ok(rd) = std::fs::read_dir(out.join("plots")) {
        for png in rd.flatten() {
            let file = png.file_name().to_string_lossy().into_owned();
            if !file.ends_with(".png") {
                continue;
            }
            std::fs::copy(png.path(), plots_dir.join(&file))
                .with_context(|| format!("copying {}", png.path().display()))?;
            body = body.replace(
                &format!("(plots/{file})"),
                &format!("(reproduction/{file})"),
            );
        }
    }
    for entry in std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))? {
        let dir = entry?.path();
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            continue;
        };
        let Ok(meta) = std::fs::read_to_string(dir.join("metadata.json")) else {
            continue;
        };
        let meta: serde_json::Value = serde_json::from_str(&meta)
            .with_context(|| format!("parsing {}", dir.join("metadata.json").display()))?;
        if let Some(c) = meta["git_commit"].as_str() {
            commits.insert(c.to_string());
        }
        if let Some(t) = meta["started_unix"].as_f64() {
            started = started.min(t);
        }
        if let Some(t) = meta["finished_unix"].as_f64() {
            finished = finished.max(t);
        }
        let Ok(rd) = std::fs::read_dir(dir.join("plots")) else {
            continue;
        };
        for png in rd.flatten() {
            let file = png.file_name().to_string_lossy().into_owned();
            if !file.ends_with(".png") {
                continue;
            }
            let to = format!("{name}-{file}");
            std::fs::copy(png.path(), plots_dir.join(&to))
                .with_context(|| format!("copying {}", png.path().display()))?;
            body = body.replace(
                &format!("({name}/plots/{file})"),
                &format!("(reproduction/{to})"),
            );
        }
    }
    let stamp = |t: f64| -> Result<String> {
        Ok(proc::capture(Command::new("date").args([
            "-u",
            "-d",
            &format!("@{}", t as i64),
            "+%Y-%m-%d %H:%M UTC",
        ]))?
        .trim()
        .to_string())
    };
    let when = if started.is_finite() && finished > 0.0 {
        format!("{} to {}", stamp(started)?, stamp(finished)?)
    } else {
        "unknown".into()
    };
    let parts: Vec<String> = suite["parts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    format!(
                        "{} {:.0} s{}",
                        p["scenario"].as_str().unwrap_or("?"),
                        p["wall_secs"].as_f64().unwrap_or(0.0),
                        if p["ok"].as_bool() == Some(false) {
                            " (failed)"
                        } else {
                            ""
                        }
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mode = if suite["quick"].as_bool() == Some(true) {
        " --quick"
    } else {
        ""
    };
    let header = format!(
        "<!-- Generated by `cargo xtask reproduce --docs`: do not edit; the reading of these numbers \
         is in docs/notebook/. -->\n\n\
         Measured {when}, commit(s) {}, with `cargo xtask reproduce{mode} --out {}` (the directory \
         holds every run: metadata.json, summary.parquet, per-flow samples). Wall time per \
         scenario run (a scenario resumed later shows each part): {}.\n\n",
        commits.into_iter().collect::<Vec<_>>().join(", "),
        out.display(),
        if parts.is_empty() { "not recorded".to_string() } else { parts.join(", ") },
    );
    let text = match body.split_once('\n') {
        Some((title, rest)) => format!("{title}\n\n{header}{}", rest.trim_start()),
        None => header + &body,
    };
    let path = root.join("docs/reproduction.md");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    println!("reproduce: wrote {}", path.display());
    Ok(())
}
