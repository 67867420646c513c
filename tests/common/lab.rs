//! `ccctl lab` from the outside: run it, find its run directory, read its
//! Parquet files, and check that nothing of it is left on the machine.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use polars::prelude::*;

use super::{ccctl, ccctl_bin, registered, tempdir, Run};

/// Runs `ccctl lab run <args> --out <fresh dir>`; returns the outcome and
/// the run directory it created (None if it created none). The `--out`
/// directory is removed when the returned guard drops.
pub fn lab_run(tag: &str, args: &[&str]) -> (Run, ccctl_sys::ScratchDir, Option<PathBuf>) {
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

/// Per-flow goodput recomputed from `samples.parquet` alone: bytes the
/// receiver acknowledged between the first and the last socket sample inside
/// the flow's measured window `[start + warmup, start + duration]` (50 ms of
/// slack at the end for the last sample's timing), over their time span.
/// Written here from the README's definition, with none of ccctl-lab's
/// functions; keyed by (run_id, flow).
pub fn goodputs_from_samples(
    samples: &DataFrame,
    summary: &DataFrame,
    warmup_s: f64,
) -> std::collections::BTreeMap<(u32, u32), f64> {
    let (s_run, s_flow) = (f64s(samples, "run_id"), f64s(samples, "flow"));
    let (s_t, s_acked) = (f64s(samples, "t_s"), f64s(samples, "bytes_acked"));
    let (run, flow) = (f64s(summary, "run_id"), f64s(summary, "flow"));
    let (start, dur) = (f64s(summary, "start_s"), f64s(summary, "duration_s"));
    let mut out = std::collections::BTreeMap::new();
    for i in rows(summary, "flow", "main")
        .into_iter()
        .chain(rows(summary, "flow", "solo"))
        .chain(rows(summary, "flow", "same-cc"))
        .chain(rows(summary, "flow", "calibration"))
    {
        let key = (
            run[i].expect("run_id") as u32,
            flow[i].expect("flow") as u32,
        );
        let from = start[i].expect("start_s") + warmup_s;
        let to = start[i].expect("start_s") + dur[i].expect("duration_s") + 0.05;
        let window: Vec<(f64, f64)> = (0..samples.height())
            .filter(|&k| s_run[k] == Some(key.0 as f64) && s_flow[k] == Some(key.1 as f64))
            .filter_map(|k| Some((s_t[k]?, s_acked[k]?)))
            .filter(|&(t, _)| t >= from && t <= to)
            .collect();
        let (Some(first), Some(last)) = (window.first(), window.last()) else {
            panic!(
                "run {} flow {}: no samples in [{from}, {to}] s",
                key.0, key.1
            )
        };
        assert!(
            last.0 - first.0 >= 0.5,
            "run {} flow {}: sampled span {:.2} s too short to recompute",
            key.0,
            key.1,
            last.0 - first.0
        );
        out.insert(key, (last.1 - first.1) * 8.0 / (last.0 - first.0));
    }
    out
}

/// Ware et al.'s harm paper eq. 2, written again here: `1 - y/x` when x < y,
/// `x/y - 1` when x > y, 0 when equal.
pub fn eq2_by_hand(x: f64, y: f64) -> f64 {
    if x < y {
        1.0 - y / x
    } else {
        x / y - 1.0
    }
}

/// Jain's index, Ware et al.'s harm paper eq. 1, written again here.
pub fn jfi_by_hand(xs: &[f64]) -> f64 {
    let s: f64 = xs.iter().sum();
    s * s / (xs.len() as f64 * xs.iter().map(|x| x * x).sum::<f64>())
}

#[track_caller]
pub fn assert_close(what: &str, summary: Option<f64>, by_hand: f64) {
    let s = summary.unwrap_or_else(|| panic!("{what}: missing in summary.parquet"));
    assert!(
        (s - by_hand).abs() <= 1e-6 * by_hand.abs().max(1e-3),
        "{what}: summary says {s}, recomputed from samples.parquet {by_hand}"
    );
}

/// Checks every flow's goodput, every run's Jain index and every main-run
/// flow's Ware harm, m_f and m_h in `summary.parquet` against the same
/// quantities recomputed from `samples.parquet` with the papers' formulas.
/// Returns the recomputed goodputs.
pub fn check_summary_against_samples(
    dir: &Path,
    warmup_s: f64,
) -> std::collections::BTreeMap<(u32, u32), f64> {
    let summary = read_parquet(&dir.join("summary.parquet"));
    let samples = read_parquet(&dir.join("samples.parquet"));
    let g = goodputs_from_samples(&samples, &summary, warmup_s);
    let (run, flow) = (f64s(&summary, "run_id"), f64s(&summary, "flow"));
    let (kind, cc, level) = (
        strs(&summary, "kind"),
        strs(&summary, "cc"),
        strs(&summary, "level"),
    );
    let key = |i: usize| {
        (
            run[i].expect("run_id") as u32,
            flow[i].expect("flow") as u32,
        )
    };
    let goodput = f64s(&summary, "goodput_bps");
    let source = strs(&summary, "goodput_source");
    for i in (0..summary.height()).filter(|&i| level[i] == "flow") {
        assert_eq!(
            source[i], "inet_diag",
            "row {i}: goodput from socket samples"
        );
        assert_close(&format!("goodput of {:?}", key(i)), goodput[i], g[&key(i)]);
    }
    let jfi = f64s(&summary, "jain_index");
    for i in (0..summary.height()).filter(|&i| level[i] == "run") {
        let r = run[i].expect("run_id") as u32;
        let xs: Vec<f64> = g.range((r, 0)..(r + 1, 0)).map(|(_, &v)| v).collect();
        assert_close(&format!("JFI of run {r}"), jfi[i], jfi_by_hand(&xs));
    }
    let (harm, m_f, m_h) = (
        f64s(&summary, "harm_tput"),
        f64s(&summary, "m_f_tput"),
        f64s(&summary, "m_h_tput"),
    );
    let flows_of = |k: &str, cc_: &str| -> Vec<usize> {
        (0..summary.height())
            .filter(|&i| level[i] == "flow" && kind[i] == k && cc[i] == cc_)
            .collect()
    };
    for i in rows(&summary, "flow", "main") {
        let (r, f) = key(i);
        let beta = g[&(r, f)];
        // Ware: x = the flow alone (its solo run), y = with the competitor.
        // No solo run (baselines off): no harm either.
        let solo = flows_of("solo", &cc[i]);
        assert!(solo.len() <= 1, "one solo run of {}", cc[i]);
        match solo.first() {
            Some(&s) => {
                let x = g[&key(s)];
                assert_close(&format!("harm of {:?}", (r, f)), harm[i], (x - beta) / x);
            }
            None => assert_eq!(harm[i], None, "harm of {:?} without a solo run", (r, f)),
        }
        // m_f: x = m(beta) in the mixed run, y = mean goodput of the others;
        // undefined when all flows run the same algorithm.
        let others: Vec<f64> = rows(&summary, "flow", "main")
            .into_iter()
            .filter(|&o| run[o] == run[i] && cc[o] != cc[i])
            .map(|o| g[&key(o)])
            .collect();
        if others.is_empty() {
            assert_eq!(
                m_f[i],
                None,
                "m_f of {:?} in a single-algorithm run",
                (r, f)
            );
            continue;
        }
        let alpha = others.iter().sum::<f64>() / others.len() as f64;
        assert_close(
            &format!("m_f of {:?}", (r, f)),
            m_f[i],
            eq2_by_hand(beta, alpha),
        );
        // m_h: y = the same flow position in the run of beta against beta.
        match flows_of("same-cc", &cc[i]).first() {
            Some(&s) => {
                let same_run = run[s].expect("run_id") as u32;
                let b1 = g[&(same_run, f)];
                assert_close(
                    &format!("m_h of {:?}", (r, f)),
                    m_h[i],
                    eq2_by_hand(beta, b1),
                );
            }
            None => assert_eq!(m_h[i], None, "m_h of {:?} without a same-cc run", (r, f)),
        }
    }
    g
}
