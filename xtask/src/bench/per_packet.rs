//! `cargo xtask bench per-packet`: native `bbr` against our algorithms on a
//! CPU-bound path where every segment and every ACK is its own packet (see
//! the module documentation of `bench`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::{ccctl, compare_pairs, flow_between, pair_order, record_run, BenchArgs, Flow, Netns};
use crate::proc;

/// Our algorithms: the name `ccctl load` takes and the kernel name iperf3's
/// `-C` takes.
const ALGOS: &[(&str, &str)] = &[
    ("bpf-bbr", "bpf_bbr"),
    ("modest-bbr", "modest_bbr"),
    ("dstar", "dstar"),
];

/// Addresses of the two ends (198.18.0.0/15 is reserved for benchmarks).
const TX_ADDR: &str = "198.18.0.1";
const RX_ADDR: &str = "198.18.0.2";

/// Two namespaces joined by a veth pair, MTU 1500, TSO/GSO/GRO off on both
/// ends. The veth pair lives inside the namespaces and goes with them.
struct VethPath {
    tx: Netns,
    rx: Netns,
}

impl VethPath {
    fn new() -> Result<VethPath> {
        let pid = std::process::id();
        let tx = Netns::named(format!("ccctl-bench-{pid}-tx"))?;
        let rx = Netns::named(format!("ccctl-bench-{pid}-rx"))?;
        let (a, b) = (format!("cbt{pid}"), format!("cbr{pid}"));
        proc::run(Command::new("ip").args([
            "link", "add", &a, "netns", &tx.0, "mtu", "1500", "type", "veth", "peer", "name", &b,
            "netns", &rx.0, "mtu", "1500",
        ]))?;
        for (ns, dev, addr) in [(&tx, &a, TX_ADDR), (&rx, &b, RX_ADDR)] {
            proc::run(&mut ns.cmd(&["ip", "addr", "add", &format!("{addr}/30"), "dev", dev]))?;
            proc::run(&mut ns.cmd(&[
                "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off",
            ]))
            .context("turning TSO/GSO/GRO off (is ethtool installed?)")?;
            proc::run(&mut ns.cmd(&["ip", "link", "set", dev, "up"]))?;
        }
        Ok(VethPath { tx, rx })
    }

    fn flow(&self, cc: &str, secs: u64, port: u16) -> Result<Flow> {
        flow_between(&self.tx, &self.rx, RX_ADDR, cc, secs, port)
    }
}

/// Ids of the struct_ops programs loaded now.
fn struct_ops_progs() -> Result<BTreeMap<u64, ProgStats>> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .context("running bpftool -j prog show (is bpftool installed?)")?;
    if !out.status.success() {
        bail!(
            "bpftool prog show: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("bpftool JSON")?;
    let mut progs = BTreeMap::new();
    for p in v.as_array().context("bpftool: not a list")? {
        if p["type"].as_str() != Some("struct_ops") {
            continue;
        }
        let Some(id) = p["id"].as_u64() else { continue };
        progs.insert(
            id,
            ProgStats {
                name: p["name"].as_str().unwrap_or("?").to_string(),
                run_time_ns: p["run_time_ns"].as_u64().unwrap_or(0),
                run_cnt: p["run_cnt"].as_u64().unwrap_or(0),
            },
        );
    }
    Ok(progs)
}

#[derive(Clone)]
struct ProgStats {
    name: String,
    run_time_ns: u64,
    run_cnt: u64,
}

/// `ccctl load`s algorithms and remembers which struct_ops programs each
/// brought; unloads them on drop.
struct Loaded<'a> {
    bin: &'a Path,
    algos: Vec<(&'static str, &'static str, Vec<u64>)>,
}

impl Drop for Loaded<'_> {
    fn drop(&mut self) {
        for (name, _, _) in &self.algos {
            if let Err(e) = ccctl(self.bin, &["unload", name]) {
                eprintln!("bench: unloading {name}: {e:#}");
            }
        }
    }
}

/// kernel.bpf_stats_enabled set to 1 while this lives, then put back.
struct BpfStats {
    prev: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> Result<BpfStats> {
        let prev = std::fs::read_to_string(BPF_STATS).context(BPF_STATS)?;
        std::fs::write(BPF_STATS, "1").context(BPF_STATS)?;
        Ok(BpfStats {
            prev: prev.trim().to_string(),
        })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(BPF_STATS, &self.prev) {
            eprintln!("bench: restoring {BPF_STATS} to {}: {e}", self.prev);
        }
    }
}

pub fn run(bin: &Path, args: &BenchArgs) -> Result<()> {
    let wanted: Vec<_> = ALGOS
        .iter()
        .filter(|(name, kname)| {
            args.algos.is_empty() || args.algos.iter().any(|a| a == name || a == kname)
        })
        .copied()
        .collect();
    if wanted.is_empty() {
        bail!(
            "--algos: none of {:?} is one of ours (bpf-bbr, modest-bbr, dstar)",
            args.algos
        );
    }
    let mut loaded = Loaded {
        bin,
        algos: Vec::new(),
    };
    for (name, kname) in wanted {
        let before = struct_ops_progs()?;
        ccctl(bin, &["load", name])?;
        // Unloaded on drop from here on, whatever fails next.
        loaded.algos.push((name, kname, Vec::new()));
        let ids = struct_ops_progs()?
            .into_keys()
            .filter(|id| !before.contains_key(id))
            .collect();
        if let Some(last) = loaded.algos.last_mut() {
            last.2 = ids;
        }
    }
    let path = VethPath::new()?;
    println!(
        "per-packet: veth, MTU 1500, TSO/GSO/GRO off, one flow, {} s per run, {} pairs per \
         algorithm (native bbr, ours, alternating)",
        args.secs, args.reps
    );
    let mut port = 5500;
    let mut results: Vec<(Vec<Flow>, Vec<Flow>)> = loaded
        .algos
        .iter()
        .map(|_| (Vec::new(), Vec::new()))
        .collect();
    for rep in 0..args.reps {
        for (i, (_, kname, _)) in loaded.algos.iter().enumerate() {
            for (cc, out) in [("bbr", 0), (*kname, 1)] {
                proc::bail_if_interrupted()?;
                let f = path.flow(cc, args.secs, port)?;
                port += 1;
                println!(
                    "  run {}: {cc:<10} {:6.3} Gbit/s, CPU {:5.2} s, {} retransmits",
                    rep + 1,
                    f.bits_per_s / 1e9,
                    f.cpu_busy_s,
                    f.retrans
                );
                if out == 0 {
                    results[i].0.push(f);
                } else {
                    results[i].1.push(f);
                }
            }
        }
    }
    for ((_, kname, _), (native, ours)) in loaded.algos.iter().zip(&results) {
        println!(
            "per-packet: {kname} vs bbr: {}",
            compare_pairs(native, ours, if *kname == "bpf_bbr" { 0.99 } else { 0.97 })
        );
    }

    // BPF run time per call, in runs of their own (stats cost BPF, not native).
    let stats = BpfStats::enable()?;
    println!(
        "per-packet BPF run time (kernel.bpf_stats_enabled=1, separate runs): every ns/call \
         includes the fixed cost of a call with stats on, about what a program that returns a \
         constant shows (bbr_sndbuf_expand)"
    );
    for (_, kname, ids) in &loaded.algos {
        proc::bail_if_interrupted()?;
        let before = struct_ops_progs()?;
        let f = path.flow(kname, args.secs, port)?;
        port += 1;
        let after = struct_ops_progs()?;
        println!(
            "per-packet BPF stats: {kname} {:.3} Gbit/s, {:.0} segments (stats on)",
            f.bits_per_s / 1e9,
            f.segs_out
        );
        let mut total_ns = 0u64;
        for id in ids {
            let (Some(b), Some(a)) = (before.get(id), after.get(id)) else {
                continue;
            };
            let (cnt, ns) = (a.run_cnt - b.run_cnt, a.run_time_ns - b.run_time_ns);
            if cnt == 0 {
                continue;
            }
            total_ns += ns;
            println!(
                "  {:<16} {:>10} calls, {:6.1} ns/call, {:.3} calls/segment",
                a.name,
                cnt,
                ns as f64 / cnt as f64,
                cnt as f64 / f.segs_out.max(1.0)
            );
        }
        println!(
            "  all programs: {:.1} ns of BPF per segment sent, {:.2} % of the run's CPU time",
            total_ns as f64 / f.segs_out.max(1.0),
            total_ns as f64 / (f.cpu_busy_s * 1e9).max(1.0) * 100.0
        );
    }
    drop(stats);
    drop(loaded);
    bystander(bin, &path, args, &mut port)?;
    drop(path);
    Ok(())
}

/// patched_bbr unloaded on drop (the bystander runs load it per pair).
struct PatchedLoaded<'a>(&'a Path);

impl Drop for PatchedLoaded<'_> {
    fn drop(&mut self) {
        if let Err(e) = ccctl(self.0, &["unload", "patched-bbr"]) {
            eprintln!("bench: unloading patched-bbr: {e:#}");
        }
    }
}

/// What patched_bbr costs traffic that does not use it: while it is loaded
/// its send-gap tracer (tp_btf on net_dev_queue) runs on every packet any
/// device of the host queues. Cubic flows with nothing of ours loaded
/// against Cubic flows with patched_bbr loaded, in pairs (`--reps`,
/// [`super::pair_order`]; loaded and unloaded around each B run). Target: >= 0.99x.
fn bystander(bin: &Path, path: &VethPath, args: &BenchArgs, port: &mut u16) -> Result<()> {
    println!(
        "per-packet bystander: cubic with nothing loaded against cubic with patched_bbr \
         loaded (its tracer on every packet of the host), {} pairs, {} s per run",
        args.reps, args.secs
    );
    let (mut plain, mut beside) = (Vec::new(), Vec::new());
    for rep in 0..args.reps {
        for loaded in pair_order(rep) {
            proc::bail_if_interrupted()?;
            let guard = if loaded {
                ccctl(bin, &["load", "patched-bbr"])?;
                Some(PatchedLoaded(bin))
            } else {
                None
            };
            let f = path.flow("cubic", args.secs, *port)?;
            *port += 1;
            drop(guard);
            let label = if loaded {
                "cubic, patched_bbr loaded"
            } else {
                "cubic, nothing loaded"
            };
            record_run(rep, label, f, loaded, &mut plain, &mut beside);
        }
    }
    println!(
        "per-packet bystander: cubic beside patched_bbr vs alone: {}",
        compare_pairs(&plain, &beside, 0.99)
    );
    Ok(())
}
