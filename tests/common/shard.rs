//! `ccctl lab run --shard K/N` and `ccctl lab merge`, from the outside: a
//! tiny scenario run whole and as 3 shards one after the other; the merge
//! must be the whole run's directory (files, runs, summary rows and
//! columns, plots), its metrics recomputed from the merged samples, and a
//! mismatched or incomplete set of shards refused with nothing written.
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::lab::{
    assert_run_files, check_summary_against_samples, f64s, lab_run, metadata, read_parquet, rows,
    strs,
};
use super::{ccctl, tempdir, Clean};

/// Two algorithms (so there are solo and same-cc baselines), one of them
/// ours (so runs 1, 3 and 5 have per-ACK traces), no netem (the host kernel
/// has none): calibration, main, 2 solo, 2 same-cc = 6 runs.
const SCENARIO: &str = "name = \"shardtest\"\nduration = \"2s\"\nwarmup = \"0.5s\"\n\
                        flows = \"cubic:1, bpf_bbr:1\"\n\
                        [link]\nrate = \"50mbit\"\nrtt = \"0ms\"\nbuffer = \"100pkt\"\n";
const WARMUP_S: f64 = 0.5;

fn files_in(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// (level, run_id, kind, flow, cc) of every summary row.
fn row_keys(dir: &Path) -> Vec<(String, i64, String, i64, String)> {
    let df = read_parquet(&dir.join("summary.parquet"));
    let (level, kind, cc) = (strs(&df, "level"), strs(&df, "kind"), strs(&df, "cc"));
    let (run, flow) = (f64s(&df, "run_id"), f64s(&df, "flow"));
    let mut keys: Vec<_> = (0..df.height())
        .map(|i| {
            (
                level[i].clone(),
                run[i].map_or(-1, |v| v as i64),
                kind[i].clone(),
                flow[i].map_or(-1, |v| v as i64),
                cc[i].clone(),
            )
        })
        .collect();
    keys.sort();
    keys
}

fn merge(dirs: &[&Path], out: &Path) -> super::Run {
    let mut args = vec!["lab".to_string(), "merge".to_string()];
    args.extend(dirs.iter().map(|d| d.display().to_string()));
    args.extend(["--out".to_string(), out.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ccctl(&args)
}

/// A copy of shard directory `src` with `metadata.json`'s `key` set to `value`.
fn tampered(src: &Path, dst: &Path, key: &str, value: impl Into<serde_json::Value>) -> PathBuf {
    fs::create_dir_all(dst).expect("copy dir");
    for f in ["scenario.toml", "records.json", "metadata.json"] {
        fs::copy(src.join(f), dst.join(f)).expect("copy");
    }
    let mut meta = metadata(dst);
    meta[key] = value.into();
    fs::write(dst.join("metadata.json"), meta.to_string()).expect("write");
    dst.to_path_buf()
}

pub fn shards_merge_into_the_unsharded_run_and_mismatches_are_refused() {
    let _clean = Clean::new();
    let work = tempdir("shard");
    let scenario = work.join("shardtest.toml");
    fs::write(&scenario, SCENARIO).expect("scenario");
    let sc = scenario.to_str().unwrap_or("");

    // Bad --shard values: refused naming the flag, no directory made.
    for bad in ["0/3", "4/3", "1/0", "x"] {
        let out = work.join("bad");
        let out_s = out.to_string_lossy().into_owned();
        let r = ccctl(&[
            "lab", "run", sc, "--where", "host", "--shard", bad, "--out", &out_s,
        ]);
        r.failed_with(&["--shard"]);
        assert!(!out.exists(), "--shard {bad} created {}", out.display());
    }

    let (whole, _whole_out, whole_dir) = lab_run("shard-whole", &[sc, "--where", "host"]);
    whole.ok();
    let whole_dir = whole_dir.expect("unsharded run directory");

    let shards_out = work.join("shards");
    let out_s = shards_out.to_string_lossy().into_owned();
    let mut shard_dirs = Vec::new();
    for k in 1..=3 {
        let spec = format!("{k}/3");
        let before = files_in(&shards_out);
        ccctl(&[
            "lab", "run", sc, "--where", "host", "--shard", &spec, "--out", &out_s,
        ])
        .ok();
        let new: Vec<String> = files_in(&shards_out).difference(&before).cloned().collect();
        assert_eq!(new.len(), 1, "shard {spec} made {new:?}");
        assert!(
            new[0].starts_with(&format!("shardtest-shard{k}of3-")),
            "{new:?}"
        );
        shard_dirs.push(shards_out.join(&new[0]));
    }
    let shard_runs: Vec<Vec<u64>> = shard_dirs
        .iter()
        .map(|d| {
            let m = metadata(d);
            assert_eq!(m["status"], "complete");
            assert_eq!(m["plan_digest"], metadata(&whole_dir)["plan_digest"]);
            m["shard"]["runs"]
                .as_array()
                .expect("runs")
                .iter()
                .filter_map(|v| v.as_u64())
                .collect()
        })
        .collect();
    println!("shards ran {shard_runs:?}");
    // Calibration (runs 0 and 1: Cubic, the paced reference) with every
    // shard, every other run exactly once.
    for runs in &shard_runs {
        assert!(
            runs.contains(&0) && runs.contains(&1),
            "calibration travels with each shard"
        );
    }
    let mut others: Vec<u64> = shard_runs
        .iter()
        .flatten()
        .copied()
        .filter(|&r| r > 1)
        .collect();
    others.sort_unstable();
    assert_eq!(others, [2, 3, 4, 5, 6], "each non-calibration run once");
    // The main run (2) and at least one of its baselines are on different
    // shards: harm below can only come from the merge joining them.
    let shard_of = |run: u64| shard_runs.iter().position(|r| r.contains(&run));
    assert!(
        (3..=6).any(|b| shard_of(b) != shard_of(2)),
        "all baselines with the main run: {shard_runs:?}"
    );

    // Refusals first: each names the problem and writes nothing.
    let refused = work.join("refused");
    let d: Vec<&Path> = shard_dirs.iter().map(PathBuf::as_path).collect();
    merge(&[d[0], d[1]], &refused).failed_with(&["incomplete shard set", "3 of 3 missing"]);
    merge(&[d[0], d[1], d[2], d[1]], &refused).failed_with(&["shard 2/3 given twice"]);
    let other_plan = tampered(
        d[2],
        &work.join("t-plan"),
        "plan_digest",
        "0123456789abcdef",
    );
    merge(&[d[0], d[1], &other_plan], &refused).failed_with(&["different plans"]);
    let other_version = tampered(d[2], &work.join("t-version"), "ccctl_version", "9.9.9");
    merge(&[d[0], d[1], &other_version], &refused).failed_with(&["different ccctl versions"]);
    let other_scenario = tampered(d[2], &work.join("t-name"), "scenario", "other");
    merge(&[d[0], d[1], &other_scenario], &refused).failed_with(&["different scenarios"]);
    let failed = tampered(
        d[2],
        &work.join("t-status"),
        "status",
        "interrupted: signal 2",
    );
    merge(&[d[0], d[1], &failed], &refused).failed_with(&["did not complete"]);
    merge(&[d[0], d[1], &whole_dir], &refused).failed_with(&["not a shard directory"]);
    // A shard written by a newer ccctl: refused by its format, with both versions.
    let newer = tampered(d[2], &work.join("t-format"), "format", 2);
    merge(&[d[0], d[1], &newer], &refused).failed_with(&[
        "metadata.json: run directory format 2",
        "reads formats 1 to 1",
    ]);
    assert!(
        !refused.exists(),
        "a refused merge wrote {}",
        refused.display()
    );

    let merged = work.join("merged");
    let run = merge(&[d[2], d[0], d[1]], &merged).ok();
    println!("{}{}", run.stdout, run.stderr);
    merge(&d, &merged).failed_with(&["exists and is not empty"]);

    // The unsharded run's files, runs, rows and columns.
    assert_run_files(&merged);
    assert_eq!(files_in(&merged), files_in(&whole_dir));
    assert_eq!(
        files_in(&merged.join("plots")),
        files_in(&whole_dir.join("plots"))
    );
    // The per-ACK traces, copied from the shards that took them.
    let traces = files_in(&merged.join("traces"));
    assert_eq!(traces, files_in(&whole_dir.join("traces")));
    assert!(traces.contains("run-002.parquet"), "{traces:?}");
    assert!(read_parquet(&merged.join("traces/run-002.parquet")).height() > 100);
    let meta = metadata(&merged);
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["planned_runs"], 7);
    let ids: Vec<u64> = meta["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["run_id"].as_u64())
        .collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5, 6], "exactly the planned runs");
    assert_eq!(meta["shards"].as_array().map(Vec::len), Some(3));
    let s_merged = read_parquet(&merged.join("summary.parquet"));
    let s_whole = read_parquet(&whole_dir.join("summary.parquet"));
    assert_eq!(s_merged.get_column_names(), s_whole.get_column_names());
    assert_eq!(row_keys(&merged), row_keys(&whole_dir));
    let harm = f64s(&s_merged, "harm_tput");
    let m_h = f64s(&s_merged, "m_h_tput");
    for i in rows(&s_merged, "flow", "main") {
        assert!(
            harm[i].is_some() && m_h[i].is_some(),
            "main flow row {i}: harm from baselines on other shards"
        );
    }
    // Every goodput, JFI and harm figure recomputed from the merged samples.
    let g = check_summary_against_samples(&merged, WARMUP_S);
    println!("merged goodputs recomputed from samples.parquet: {g:?}");
    let table = fs::read_to_string(merged.join("summary.txt")).expect("summary.txt");
    assert!(
        table.contains("cubic") && table.contains("bpf_bbr"),
        "{table}"
    );
    assert!(
        !super::registered("bpf_bbr"),
        "the lab unloads what it loaded"
    );
}
