//! `cargo xtask bench`: what our datapath costs, as ratios measured in one
//! run against a reference measured in the same run. Benchmarks, not tests:
//! they print figures and never fail on them.
//!
//! - `datapath`: one loopback iperf3 flow in a private network namespace,
//!   the kernel's `bbr` against our `bpf_bbr`, alternating, `--reps` times
//!   each: throughput, and CPU (all CPUs' busy time from /proc/stat over the
//!   run, per byte moved, so both ends and softirq work count).
//!   Target: bpf_bbr >= 0.97x throughput at <= 1.03x CPU per byte.
//! - `trace`: `bpf_bbr` traced on every ACK (`ccctl trace` writing Parquet)
//!   against untraced, in pairs (A B, B A, ...). Target (issue 24): <= 3 %
//!   throughput loss, 0 drops.
//! - `consumer`: events per second `ccctl trace`'s decode + Parquet path
//!   sustains (the consumer thread and the writer's), fed by a synthetic
//!   producer: four algorithms interleaved and one algorithm, on every core
//!   the machine gives and all on one core. Target (issue 24) >= 4 M/s.
//! - `per-packet`: a path where every ACK costs. Loopback with 64 KB
//!   segments hides the per-ACK work (one ACK per ~44 segments); here two
//!   namespaces are joined by a veth pair at MTU 1500 with TSO, GSO and GRO
//!   off on both ends, so every 1448-byte segment is its own skb and about
//!   every second one is ACKed. One iperf3 flow, CPU-bound: native `bbr`
//!   against each of our algorithms in alternating runs (bbr, ours, bbr,
//!   ours, ...), throughput ratio against the native runs of the same
//!   pairs. Then, with `kernel.bpf_stats_enabled=1` (restored afterwards),
//!   one more run per algorithm reads run_time_ns / run_cnt of each of its
//!   struct_ops programs: the BPF cost per call. Those runs are not used
//!   for the ratios (stats add two clock reads per BPF call that native
//!   bbr does not pay). Targets: bpf_bbr >= 0.99x, the others >= 0.97x.
//!   Last, the bystander cost: Cubic flows alone against Cubic flows with
//!   patched_bbr loaded (its send-gap tracer runs on every packet the host
//!   queues), alternating. Target >= 0.99x.
//! - `testbed`: the lab's namespace dumbbell on the userspace path emulator
//!   (ccctl-path), on this kernel: (1) the highest rate of a ladder (20 to
//!   1000 Mbit/s) at which one Cubic flow gets >= 0.95x of the rate
//!   (goodput / rate; 1448/1500 = 0.965x is the most a flow's payload can
//!   be), 20 ms, 1 BDP (>= 100 packets), first 2 s of each flow not
//!   counted, stopping at the first rung that misses; (2) ping through an
//!   idle path at 10, 20, 50, 100 and 200 ms: median and p99 error against
//!   the configured RTT; (3) the emulator's CPU seconds per second per
//!   100 Mbit/s it carries, from the ladder; (4) 1, 16 and 128 Cubic flows
//!   (iperf3 -P from one sender host) at 100 Mbit/s, 20 ms, 1 BDP: link
//!   utilisation, Jain's index, emulator CPU; and the build time of a
//!   128-sender testbed. `--quick` shortens it, `--json FILE` writes the
//!   results. No targets: it says what this machine can emulate.
//!
//! Every comparison is read per pair: the median of the pairs' ratios with
//! a 95 % interval that assumes no distribution (order statistics), and a
//! target is "met" or "not met" only where that interval lies wholly on
//! one side of it; otherwise "cannot tell", and more pairs (`--reps`)
//! narrow it.
//!
//! Everything is built in release mode (about 11 minutes from scratch).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use crate::proc;

mod per_packet;
mod testbed;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// Loopback iperf3: native bbr against bpf_bbr, throughput and CPU per byte.
    Datapath,
    /// bpf_bbr traced on every ACK into Parquet against untraced.
    Trace,
    /// Events per second of `ccctl trace`'s decode + Parquet path.
    Consumer,
    /// Native bbr against our algorithms where every segment and ACK is a packet.
    PerPacket,
    /// The lab testbed's userspace path emulator: max rate, RTT error, CPU, many flows.
    Testbed,
    All,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Which benchmark.
    #[arg(value_enum, default_value_t = Which::All)]
    pub which: Which,
    /// Seconds per iperf3 run (testbed: each flow's, the first 2 s not counted).
    #[arg(long, default_value_t = 10)]
    pub secs: u64,
    /// Runs per variant, in pairs (six or more for a 95 % interval).
    #[arg(long, default_value_t = 6)]
    pub reps: u32,
    /// Synthetic events for the consumer benchmark.
    #[arg(long, default_value_t = 5_000_000)]
    pub events: u64,
    /// per-packet: only these of our algorithms (bbr, modest-bbr, dstar; all by default).
    #[arg(long, value_delimiter = ',')]
    pub algos: Vec<String>,
    /// testbed: a shorter run (5 of the 9 rungs, 5 s flows, 100 pings per RTT).
    #[arg(long)]
    pub quick: bool,
    /// testbed: also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// A private namespace with loopback up; deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Result<Netns> {
        Netns::named(format!("ccctl-bench-{}", std::process::id()))
    }

    fn named(name: String) -> Result<Netns> {
        proc::run(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = Netns(name);
        proc::run(Command::new("ip").args(["-n", &ns.0, "link", "set", "lo", "up"]))?;
        Ok(ns)
    }

    fn cmd(&self, argv: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).args(argv);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "pids", &self.0])
            .output()
            .map(|o| {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            });
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

struct Flow {
    bits_per_s: f64,
    bytes: f64,
    cpu_busy_s: f64,
    /// Full-sized segments sent (bytes / 1448), for calls per segment.
    segs_out: f64,
    /// Segments the sender retransmitted.
    retrans: u64,
}

/// One loopback flow with congestion control `cc` in `ns`.
fn flow(ns: &Netns, cc: &str, secs: u64, port: u16) -> Result<Flow> {
    flow_between(ns, ns, "127.0.0.1", cc, secs, port)
}

/// One iperf3 flow from `client` to the server in `server` at `addr`.
fn flow_between(
    client: &Netns,
    server: &Netns,
    addr: &str,
    cc: &str,
    secs: u64,
    port: u16,
) -> Result<Flow> {
    let mut server = server
        .cmd(&["iperf3", "-s", "-1", "-B", addr, "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 -s")?;
    std::thread::sleep(Duration::from_millis(300));
    let hz = 100.0; // USER_HZ
    let b0 = proc::cpu_ticks_now()?.busy;
    let out = client
        .cmd(&[
            "iperf3",
            "-c",
            addr,
            "-p",
            &port.to_string(),
            "-C",
            cc,
            "-t",
            &secs.to_string(),
            "-J",
        ])
        .output()
        .context("running iperf3 -c")?;
    let b1 = proc::cpu_ticks_now()?.busy;
    let _ = server.wait();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("iperf3 JSON")?;
    if let Some(e) = v.get("error") {
        bail!("iperf3 -C {cc}: {e}");
    }
    let got_cc = v["end"]["sender_tcp_congestion"].as_str().unwrap_or("");
    if got_cc != cc {
        bail!("iperf3 ran with {got_cc:?}, not {cc}");
    }
    Ok(Flow {
        bits_per_s: v["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or(0.0),
        bytes: v["end"]["sum_received"]["bytes"].as_f64().unwrap_or(0.0),
        cpu_busy_s: (b1 - b0) as f64 / hz,
        segs_out: v["end"]["sum_sent"]["bytes"].as_f64().unwrap_or(0.0) / 1448.0,
        retrans: v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
    })
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

fn ccctl(bin: &Path, args: &[&str]) -> Result<()> {
    proc::run(Command::new(bin).args(args))
}

/// Runs of two variants in pairs, in [`pair_order`]; `around_b` wraps each
/// B run.
fn compare(
    ns: &Netns,
    a: &str,
    b: &str,
    args: &BenchArgs,
    mut around_b: impl FnMut(&mut dyn FnMut() -> Result<Flow>) -> Result<Flow>,
) -> Result<(Vec<Flow>, Vec<Flow>)> {
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for rep in 0..args.reps {
        let port = 5300 + rep as u16 * 2;
        for is_b in pair_order(rep) {
            proc::bail_if_interrupted()?;
            let f = if is_b {
                around_b(&mut || flow(ns, "bpf_bbr", args.secs, port + 1))?
            } else {
                flow(ns, a, args.secs, port)?
            };
            record_run(rep, if is_b { b } else { a }, f, is_b, &mut ra, &mut rb);
        }
    }
    Ok((ra, rb))
}

/// Which of a pair runs first: A B in even pairs, B A in odd ones (true
/// is B), so a drift of the machine over the runs falls on both alike.
fn pair_order(rep: u32) -> [bool; 2] {
    if rep.is_multiple_of(2) {
        [false, true]
    } else {
        [true, false]
    }
}

/// Prints run `rep` of a pair and files it with the A or the B runs.
fn record_run(rep: u32, label: &str, f: Flow, is_b: bool, ra: &mut Vec<Flow>, rb: &mut Vec<Flow>) {
    println!(
        "  run {}: {label:<26} {:7.2} Gbit/s, CPU {:5.2} s",
        rep + 1,
        f.bits_per_s / 1e9,
        f.cpu_busy_s
    );
    if is_b { rb } else { ra }.push(f);
}

/// Median of sorted values.
fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// A 95 % interval for the median of the population `sorted` was drawn
/// from, assuming nothing of its shape: the order statistics
/// (x_k, x_{n+1-k}) with the largest k for which
/// P(Binomial(n, 1/2) <= k - 1) <= 2.5 % (each tail). None below six
/// values, where even (min, max) covers less than 95 %.
fn median_interval(sorted: &[f64]) -> Option<(f64, f64)> {
    let n = sorted.len();
    let mut below = 0.0; // P(Bin(n, 1/2) <= j)
    let mut choose = 1.0; // C(n, j)
    let mut k = 0;
    for j in 0..n {
        below += choose * 0.5f64.powi(n as i32);
        if below > 0.025 {
            break;
        }
        k = j + 1;
        choose = choose * (n - j) as f64 / (j + 1) as f64;
    }
    (k >= 1).then(|| (sorted[k - 1], sorted[n - k]))
}

/// Where a 95 % interval stands against a floor the ratio must reach.
fn against_floor(interval: Option<(f64, f64)>, floor: f64) -> &'static str {
    match interval {
        None => "cannot tell (fewer than 6 pairs)",
        Some((lo, _)) if lo >= floor => "met",
        Some((_, hi)) if hi < floor => "not met",
        Some(_) => "cannot tell (the interval spans it)",
    }
}

/// `b` against `a`, run in pairs: both means in Gbit/s, the ratio of the
/// means, the median of the per-pair throughput ratios with its 95 %
/// interval (and each ratio), that judged against `floor`, and the median
/// per-pair CPU-per-byte ratio.
fn compare_pairs(a: &[Flow], b: &[Flow], floor: f64) -> String {
    let tput = |r: &[Flow]| mean(&r.iter().map(|f| f.bits_per_s).collect::<Vec<_>>());
    // Each pair's ratio, in run order; sorted copies for the statistics.
    let per_pair =
        |f: fn(&Flow) -> f64| -> Vec<f64> { a.iter().zip(b).map(|(x, y)| f(y) / f(x)).collect() };
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let in_order = per_pair(|f| f.bits_per_s);
    let shown: Vec<String> = in_order.iter().map(|r| format!("{r:.3}")).collect();
    let pairs = sorted(in_order);
    let cpu = sorted(per_pair(|f| f.cpu_busy_s / f.bytes.max(1.0)));
    let interval = median_interval(&pairs);
    format!(
        "{:.3} vs {:.3} Gbit/s: throughput ratio {:.3}, median of pairs {:.3} (95 % interval \
         {}; pairs {}), target >= {floor}: {}; CPU-per-byte ratio, median of pairs {:.3}",
        tput(b) / 1e9,
        tput(a) / 1e9,
        tput(b) / tput(a),
        median(&pairs),
        interval.map_or("-".to_string(), |(lo, hi)| format!("{lo:.3}..{hi:.3}")),
        shown.join(" "),
        against_floor(interval, floor),
        median(&cpu)
    )
}

pub fn main(args: BenchArgs) -> Result<i32> {
    if args.which == Which::Testbed {
        // Needs no ccctl binary and no BPF loaded.
        testbed::run(&args)?;
        return Ok(0);
    }
    eprintln!("bench: building ccctl in release mode (about 11 minutes from scratch)");
    let bin: PathBuf = proc::cargo_build_json(
        &["build", "--release", "-p", "ccctl", "--bins"],
        |name, kinds, _| name == "ccctl" && kinds.iter().any(|k| k == "bin"),
    )?;
    let run_all = args.which == Which::All;
    if run_all || args.which == Which::Consumer {
        let scratch = ccctl_sys::scratch_dir("bench-consumer")?;
        let out = scratch.join("consumer.parquet");
        println!(
            "consumer: {} synthetic events through decode + Parquet (the consumer and writer threads)",
            args.events
        );
        // Research tooling lives beside the product, not in it: an example
        // of ccctl-observe.
        let bench = proc::cargo_build_json(
            &[
                "build",
                "--release",
                "-p",
                "ccctl-observe",
                "--example",
                "trace_bench",
            ],
            |name, kinds, _| name == "trace_bench" && kinds.iter().any(|k| k == "example"),
        )?;
        // The worst case (four algorithms interleaved: every
        // algorithm-specific column half null) and the common one (one
        // algorithm traced).
        // Each on every core the machine gives, then all on one core.
        for extra in [
            &[][..],
            &["--one-algorithm"],
            &["--one-core"],
            &["--one-algorithm", "--one-core"],
        ] {
            let events = args.events.to_string();
            let mut argv = vec![
                "--events",
                &events,
                "--out",
                out.to_str().context("temp path")?,
            ];
            argv.extend(extra);
            let res = proc::capture(Command::new(&bench).args(&argv));
            let _ = std::fs::remove_file(&out);
            println!("{}", res?.trim());
        }
    }
    if run_all || args.which != Which::Consumer {
        // Native bbr is the reference of every datapath benchmark.
        if !std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")?
            .split_whitespace()
            .any(|c| c == "bbr")
        {
            let _ = Command::new("modprobe").arg("tcp_bbr").status();
        }
    }
    if run_all || args.which == Which::PerPacket {
        per_packet::run(&bin, &args)?;
    }
    if run_all || matches!(args.which, Which::Datapath | Which::Trace) {
        ccctl(&bin, &["load", "bpf-bbr"])?;
        let res = (|| -> Result<()> {
            let ns = Netns::new()?;
            if run_all || args.which == Which::Datapath {
                println!(
                    "datapath: loopback, {} s per run, {} runs each, alternating",
                    args.secs, args.reps
                );
                let (ra, rb) = compare(&ns, "bbr", "bpf_bbr", &args, |f| f())?;
                println!(
                    "datapath: bpf_bbr vs bbr: {}",
                    compare_pairs(&ra, &rb, 0.97)
                );
            }
            if run_all || args.which == Which::Trace {
                println!("trace: bpf_bbr untraced vs traced on every ACK into Parquet");
                let scratch = ccctl_sys::scratch_dir("bench-trace")?;
                let out = scratch.join("trace.parquet");
                let mut reports = Vec::new();
                let (ra, rb) = compare(&ns, "bpf_bbr", "bpf_bbr+trace", &args, |f| {
                    let tracer = Command::new(&bin)
                        .args([
                            "trace",
                            "--algo",
                            "bpf-bbr",
                            "--out",
                            out.to_str().unwrap_or("/tmp/x.parquet"),
                        ])
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .spawn()
                        .context("starting ccctl trace")?;
                    std::thread::sleep(Duration::from_millis(500));
                    let r = f();
                    // SIGINT to our own child: it flushes and reports.
                    ccctl_sys::signals::kill(tracer.id(), rustix::process::Signal::INT);
                    let o = tracer
                        .wait_with_output()
                        .context("waiting for ccctl trace")?;
                    reports.push(String::from_utf8_lossy(&o.stderr).trim().to_string());
                    r
                })?;
                let _ = std::fs::remove_file(&out);
                println!(
                    "trace: traced vs untraced (issue 24: <= 3 % loss): {}",
                    compare_pairs(&ra, &rb, 0.97)
                );
                for r in reports {
                    println!("  {}", r.lines().last().unwrap_or(""));
                }
            }
            Ok(())
        })();
        let unload = ccctl(&bin, &["unload", "bpf-bbr"]);
        res?;
        unload?;
    }
    if run_all {
        testbed::run(&args)?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order-statistic interval against the binomial table: n = 6 gives
    /// (min, max) as P(Bin(6) = 0) is 1.6 %; n = 10 the 2nd and 9th, as
    /// P(Bin(10) at most 1) is 1.1 % and at most 2 is 5.5 %; n = 20 the 6th
    /// and 15th, as P(Bin(20) at most 5) is 2.07 % and at most 6 is 5.8 %;
    /// below six, none.
    #[test]
    fn median_interval_follows_the_binomial() {
        let xs = |n: usize| (1..=n).map(|i| i as f64).collect::<Vec<_>>();
        assert_eq!(median_interval(&xs(5)), None);
        assert_eq!(median_interval(&xs(6)), Some((1.0, 6.0)));
        assert_eq!(median_interval(&xs(10)), Some((2.0, 9.0)));
        assert_eq!(median_interval(&xs(20)), Some((6.0, 15.0)));
        assert_eq!(median(&xs(6)), 3.5);
    }

    #[test]
    fn a_floor_is_judged_only_when_the_interval_is_on_one_side() {
        assert_eq!(against_floor(Some((0.975, 1.01)), 0.97), "met");
        assert_eq!(against_floor(Some((0.90, 0.969)), 0.97), "not met");
        assert!(against_floor(Some((0.96, 0.99)), 0.97).starts_with("cannot tell"));
        assert!(against_floor(None, 0.97).starts_with("cannot tell"));
    }
}
