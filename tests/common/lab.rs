//! `ccctl lab` from the outside: run it, find its run directory, read its
//! Parquet files, and check that nothing of it is left on the machine.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use polars::prelude::*;

use super::{ccctl, ccctl_bin, registered, tempdir, Run};

/// Runs `ccctl lab run <args> --out <fresh dir>`; returns the outcome and
/// the run directory it created (None if it created none).
pub fn lab_run(tag: &str, args: &[&str]) -> (Run, PathBuf, Option<PathBuf>) {
    let out = tempdir(&format!("lab-{tag}"));
    let out_s = out.to_string_lossy().into_owned();
    let mut full = vec!["lab", "run"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--out", &out_s]);
    let run = ccctl(&full);
    eprintln!("{}{}", run.stdout, run.stderr);
    let dir = run_dir_in(&out);
    (run, out, dir)
}

/// The single run directory under `out`, if any.
pub fn run_dir_in(out: &Path) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(out)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert!(
        dirs.len() <= 1,
        "more than one run directory in {}: {dirs:?}",
        out.display()
    );
    dirs.pop()
}

/// Spawns `ccctl lab run <args> --out <out>` in the background.
pub fn lab_spawn(out: &Path, args: &[&str]) -> super::Spawned {
    let child = Command::new(ccctl_bin())
        .args(["lab", "run"])
        .args(args)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawning ccctl lab run");
    super::Spawned::new(child)
}

pub fn read_parquet(path: &Path) -> DataFrame {
    let f = fs::File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    ParquetReader::new(f)
        .finish()
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Values of a numeric column as f64 (nulls as None).
pub fn f64s(df: &DataFrame, name: &str) -> Vec<Option<f64>> {
    let s = df
        .column(name)
        .unwrap_or_else(|e| panic!("column {name}: {e}"))
        .cast(&DataType::Float64)
        .unwrap_or_else(|e| panic!("column {name} as f64: {e}"));
    let ca = s.f64().expect("f64 column");
    (0..ca.len()).map(|i| ca.get(i)).collect()
}

pub fn strs(df: &DataFrame, name: &str) -> Vec<String> {
    let c = df
        .column(name)
        .unwrap_or_else(|e| panic!("column {name}: {e}"))
        .cast(&DataType::String)
        .unwrap_or_else(|e| panic!("column {name} as string: {e}"));
    let ca = c.str().expect("string column");
    (0..ca.len())
        .map(|i| ca.get(i).unwrap_or("").to_string())
        .collect()
}

/// Rows of `summary.parquet` matching `level` and `kind`, as (row index) list.
pub fn rows(df: &DataFrame, level: &str, kind: &str) -> Vec<usize> {
    let l = strs(df, "level");
    let k = strs(df, "kind");
    (0..df.height())
        .filter(|&i| l[i] == level && k[i] == kind)
        .collect()
}

/// Namespaces whose name starts with `ccctl-<pid>-`.
pub fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("ccctl-{pid}-");
    fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Pids of running iperf3 processes.
pub fn iperf3_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.trim() == "iperf3")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `cond` holds (polling every 100 ms) or panics after `limit`.
#[track_caller]
pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < end,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the lab child has its testbed up with flows running through
/// it (namespaces exist, `kernel_cc` registered if given, iperf3 running).
pub fn wait_until_flows_run(child: &Child, kernel_cc: Option<&str>) {
    let pid = child.id();
    wait_for(
        "the lab's namespaces and flows",
        Duration::from_secs(120),
        || {
            !namespaces_of(pid).is_empty()
                && kernel_cc.is_none_or(registered)
                && !iperf3_pids().is_empty()
        },
    );
    // Let the flows carry data for a moment.
    std::thread::sleep(Duration::from_secs(3));
}

/// Asserts the machine holds nothing of lab process `pid`: no namespace,
/// no iperf3, `kernel_cc` unregistered and its pins gone.
#[track_caller]
pub fn assert_nothing_left(pid: u32, kernel_cc: &str, algo_pin_dir: &str) {
    assert_eq!(
        namespaces_of(pid),
        Vec::<String>::new(),
        "namespaces left behind"
    );
    assert_eq!(
        iperf3_pids(),
        Vec::<u32>::new(),
        "iperf3 processes left behind"
    );
    assert!(!registered(kernel_cc), "{kernel_cc} still registered");
    assert!(
        !super::pin_root().join(algo_pin_dir).exists(),
        "pins left in {}",
        super::pin_root().join(algo_pin_dir).display()
    );
}

/// Reads `metadata.json` of a run directory.
pub fn metadata(dir: &Path) -> serde_json::Value {
    let text = fs::read_to_string(dir.join("metadata.json")).expect("metadata.json");
    serde_json::from_str(&text).expect("metadata.json is JSON")
}

/// The files every finished run directory holds.
#[track_caller]
pub fn assert_run_files(dir: &Path) {
    for f in [
        "scenario.toml",
        "metadata.json",
        "samples.parquet",
        "summary.parquet",
        "summary.txt",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing in {}", dir.display());
    }
    for stem in ["throughput-vs-delay", "harm-fairness-cdf"] {
        for ext in ["png", "svg"] {
            let p = dir.join("plots").join(format!("{stem}.{ext}"));
            assert!(
                p.is_file() && fs::metadata(&p).map(|m| m.len()).unwrap_or(0) > 1000,
                "{} missing or empty",
                p.display()
            );
        }
    }
    let timeseries = fs::read_dir(dir.join("plots"))
        .expect("plots/")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with("-timeseries.png"))
        .count();
    assert!(timeseries >= 1, "no per-run time-series plot");
}
