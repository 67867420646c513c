//! `cargo xtask bench testbed`: what the lab's namespace testbed on the
//! userspace path emulator (ccctl-path) carries on this machine, and what
//! it costs (see the module documentation of `bench`).
//!
//! The testbed lives in ccctl-lab, which compiles BPF (clang), and xtask
//! must build on a fresh machine before `setup` installed clang: so
//! ccctl-lab is an optional dependency behind xtask's `testbed` feature.
//! Without it (a plain `cargo xtask`), this bench builds xtask in release
//! mode with the feature and runs that binary with the same arguments.

use anyhow::Result;

use super::BenchArgs;

#[cfg(not(feature = "testbed"))]
pub fn run(args: &BenchArgs) -> Result<()> {
    use anyhow::{bail, Context};
    use std::process::Command;

    eprintln!("bench testbed: building xtask --features testbed in release mode");
    let bin = crate::proc::cargo_build_json(
        &[
            "build",
            "--release",
            "-p",
            "xtask",
            "--features",
            "testbed",
            "--bins",
        ],
        |name, kinds, _| name == "xtask" && kinds.iter().any(|k| k == "bin"),
    )?;
    let mut cmd = Command::new(&bin);
    cmd.args(["bench", "testbed", "--secs", &args.secs.to_string()]);
    if args.quick {
        cmd.arg("--quick");
    }
    if let Some(j) = &args.json {
        cmd.arg("--json").arg(j);
    }
    let st = cmd
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    if !st.success() {
        bail!("bench testbed ({}) failed: {st}", bin.display());
    }
    Ok(())
}

#[cfg(feature = "testbed")]
pub fn run(args: &BenchArgs) -> Result<()> {
    imp::run(args)
}

#[cfg(feature = "testbed")]
mod imp {
    use std::time::{Duration, Instant};

    use anyhow::{bail, Context, Result};
    use ccctl_lab::iperf::{self, FlowResult, FlowSpec};
    use ccctl_lab::testbed::{buffer_bdp, buffer_packets, Role, Testbed, TestbedConfig};
    use serde::Serialize;

    use super::BenchArgs;

    const MBIT: u64 = 1_000_000;
    /// Share of the rate one flow must reach on a rung of the ladder.
    const TARGET_SHARE: f64 = 0.95;
    /// The most a TCP flow's payload can be of the IP bytes the link counts
    /// (MSS 1448 with timestamps in a 1500-byte packet).
    const PAYLOAD_SHARE: f64 = 1448.0 / 1500.0;
    /// Seconds at the start of each flow not counted (iperf3 `-O`).
    const OMIT_S: u32 = 2;
    const LADDER_MBIT: &[u64] = &[20, 50, 100, 200, 300, 400, 500, 700, 1000];
    const QUICK_LADDER_MBIT: &[u64] = &[20, 100, 300, 500, 1000];
    const PING_RTTS_MS: &[u64] = &[10, 20, 50, 100, 200];
    const FLOW_COUNTS: &[usize] = &[1, 16, 128];
    const RTT: Duration = Duration::from_millis(20);

    /// 1 BDP at `rate` and 20 ms, at least 100 full-size packets.
    fn buffer(rate: u64) -> u64 {
        buffer_bdp(rate, RTT, 1.0, 1500).max(buffer_packets(100, 1500))
    }

    #[derive(Debug, Serialize)]
    struct Rung {
        rate_mbit: u64,
        buffer_bytes: u64,
        build_s: f64,
        goodput_mbit: f64,
        /// goodput / rate
        share_of_rate: f64,
        retransmits: u64,
        mean_rtt_ms: Option<f64>,
        /// Emulator CPU seconds per wall second over the counted part.
        emulator_cpu_share: f64,
        emulator_threads: usize,
        /// IP bytes the bottleneck sent over the counted part, Mbit/s.
        link_mbit: f64,
        /// Emulator CPU-s per s per 100 Mbit/s of link traffic carried.
        cpu_per_100mbit: f64,
        bottleneck_drops: u64,
        passed: bool,
    }

    #[derive(Debug, Serialize)]
    struct RttError {
        rtt_ms: u64,
        pings: usize,
        median_ms: f64,
        median_error_ms: f64,
        p99_ms: f64,
        p99_error_ms: f64,
        min_ms: f64,
        /// Resolution of ping's time= at this RTT (3 significant digits).
        resolution_ms: f64,
    }

    #[derive(Debug, Serialize)]
    struct Multi {
        flows: usize,
        how: String,
        build_s: f64,
        goodput_mbit: f64,
        /// sum of goodput / rate
        utilisation: f64,
        jain: f64,
        min_flow_mbit: f64,
        max_flow_mbit: f64,
        retransmits: u64,
        emulator_cpu_share: f64,
        bottleneck_drops: u64,
    }

    #[derive(Debug, Serialize)]
    struct Build {
        senders: usize,
        build_s: f64,
        teardown_s: f64,
    }

    #[derive(Debug, Serialize)]
    struct Report {
        bench: &'static str,
        quick: bool,
        flow_s: u64,
        omitted_s: u32,
        target_share: f64,
        payload_share_limit: f64,
        rtt_ms: u64,
        /// Highest rung with goodput >= target_share x rate (None: not even the first).
        max_rate_mbit: Option<u64>,
        first_miss_mbit: Option<u64>,
        ladder: Vec<Rung>,
        rtt_error: Vec<RttError>,
        /// Median over the rungs of emulator CPU-s per s per 100 Mbit/s.
        cpu_per_100mbit_median: Option<f64>,
        flows: Vec<Multi>,
        builds: Vec<Build>,
        total_s: f64,
    }

    fn build(cfg: TestbedConfig) -> Result<(Testbed, f64)> {
        let t = Instant::now();
        let tb = Testbed::new(cfg).context("building the testbed")?;
        Ok((tb, t.elapsed().as_secs_f64()))
    }

    /// The counted part of a run: from the end of the omitted seconds to
    /// the end of the flows.
    struct Window {
        results: Vec<FlowResult>,
        wall_s: f64,
        cpu_s: f64,
        threads: usize,
        link_bytes: u64,
        drops: u64,
    }

    fn run_window(tb: &Testbed, specs: &[FlowSpec]) -> Result<Window> {
        let running = iperf::spawn_flows(tb, specs)?;
        std::thread::sleep(Duration::from_secs(OMIT_S.into()));
        let (c0, s0, t0) = (tb.path_cpu(), tb.path_stats(), Instant::now());
        let results = running.wait()?;
        let (c1, s1, wall) = (tb.path_cpu(), tb.path_stats(), t0.elapsed());
        let (c0, c1) = (c0.unwrap_or_default(), c1.unwrap_or_default());
        let (s0, s1) = (s0.unwrap_or_default(), s1.unwrap_or_default());
        for r in &results {
            if r.sender_cc.as_deref() != Some(specs[0].cc.as_str()) {
                bail!("iperf3 ran with {:?}, not {}", r.sender_cc, specs[0].cc);
            }
        }
        // sent_bytes counts frames (IP + 14 bytes of Ethernet header).
        let frames = s1.sent.saturating_sub(s0.sent);
        Ok(Window {
            results,
            wall_s: wall.as_secs_f64(),
            cpu_s: c1.cpu.saturating_sub(c0.cpu).as_secs_f64(),
            threads: c1.threads,
            link_bytes: s1
                .sent_bytes
                .saturating_sub(s0.sent_bytes)
                .saturating_sub(frames * 14),
            drops: s1.dropped.saturating_sub(s0.dropped),
        })
    }

    fn quantile(v: &[f64], q: f64) -> f64 {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    }

    fn ladder(rates: &[u64], flow_s: u64) -> Result<Vec<Rung>> {
        println!(
            "testbed ladder: one cubic flow, {} ms RTT, 1 BDP buffer (>= 100 packets), {flow_s} s \
             flows, first {OMIT_S} s not counted; goodput as a share of the rate (at most \
             {PAYLOAD_SHARE:.3} with 1448-byte segments); stop below {TARGET_SHARE:.2}",
            RTT.as_millis()
        );
        println!(
            "  {:>6} {:>8} {:>6} {:>9} {:>7} {:>8} {:>8} {:>9} {:>11} {:>7}",
            "Mbit/s",
            "buf KB",
            "build",
            "goodput",
            "share",
            "retrans",
            "rtt ms",
            "emu CPU",
            "CPU/100Mb",
            "drops"
        );
        let mut rungs = Vec::new();
        for &mbit in rates {
            let rate = mbit * MBIT;
            let buf = buffer(rate);
            let (tb, build_s) = build(TestbedConfig::new(rate, buf).with_rtts(&[RTT]).userspace())?;
            let spec =
                FlowSpec::new(0, "cubic", Duration::from_secs(flow_s - OMIT_S as u64)).omit(OMIT_S);
            let w = run_window(&tb, &[spec])?;
            drop(tb);
            let r = &w.results[0];
            let share = r.goodput_bps / rate as f64;
            let cpu_share = w.cpu_s / w.wall_s;
            let link_mbit = w.link_bytes as f64 * 8.0 / w.wall_s / 1e6;
            let rung = Rung {
                rate_mbit: mbit,
                buffer_bytes: buf,
                build_s,
                goodput_mbit: r.goodput_bps / 1e6,
                share_of_rate: share,
                retransmits: r.retransmits,
                mean_rtt_ms: r.mean_rtt_us.map(|u| u as f64 / 1e3),
                emulator_cpu_share: cpu_share,
                emulator_threads: w.threads,
                link_mbit,
                cpu_per_100mbit: cpu_share / (link_mbit / 100.0).max(1e-9),
                bottleneck_drops: w.drops,
                passed: share >= TARGET_SHARE,
            };
            println!(
                "  {:>6} {:>8.0} {:>5.1}s {:>9.1} {:>6.3}x {:>8} {:>8.1} {:>8.1}% {:>11.3} {:>7}{}",
                mbit,
                buf as f64 / 1e3,
                build_s,
                rung.goodput_mbit,
                share,
                rung.retransmits,
                rung.mean_rtt_ms.unwrap_or(f64::NAN),
                100.0 * cpu_share,
                rung.cpu_per_100mbit,
                rung.bottleneck_drops,
                if rung.passed { "" } else { "  (missed)" }
            );
            let passed = rung.passed;
            rungs.push(rung);
            if !passed {
                break;
            }
        }
        Ok(rungs)
    }

    /// RTTs (ms) of `count` pings from sender `i`, one every `interval_ms`.
    fn ping_rtts(tb: &Testbed, i: usize, count: u32, interval_ms: u32) -> Result<Vec<f64>> {
        Ok(tb.ping_rtts(Role::Sender(i), count, interval_ms)?)
    }

    fn rtt_errors(count: u32) -> Result<(Vec<RttError>, Build)> {
        let rate = 100 * MBIT;
        let rtts: Vec<Duration> = PING_RTTS_MS
            .iter()
            .map(|&ms| Duration::from_millis(ms))
            .collect();
        let (tb, build_s) = build(
            TestbedConfig::new(rate, buffer(rate))
                .with_rtts(&rtts)
                .userspace(),
        )?;
        println!(
            "testbed RTT: {count} pings (ping -n, every 20 ms) through an idle 100 Mbit/s path, \
             one sender per RTT (testbed of {} senders built in {build_s:.1} s); error = ping - \
             configured",
            rtts.len()
        );
        let mut out = Vec::new();
        for (i, &ms) in PING_RTTS_MS.iter().enumerate() {
            // One ping first, so neither neighbour discovery nor a cold
            // path counts.
            let _ = ping_rtts(&tb, i, 1, 20);
            let got = ping_rtts(&tb, i, count, 20)?;
            let c = ms as f64;
            let e = RttError {
                rtt_ms: ms,
                pings: got.len(),
                median_ms: quantile(&got, 0.5),
                median_error_ms: quantile(&got, 0.5) - c,
                p99_ms: quantile(&got, 0.99),
                p99_error_ms: quantile(&got, 0.99) - c,
                min_ms: quantile(&got, 0.0),
                resolution_ms: if ms >= 100 {
                    1.0
                } else if ms >= 10 {
                    0.1
                } else {
                    0.01
                },
            };
            println!(
                "  {:>4} ms: median {:>8.3} ms (error {:+.3} ms, {:+.2} %), p99 {:>8.3} ms (error \
                 {:+.3} ms), min {:.3} ms, {} pings, ping prints {} ms steps",
                ms,
                e.median_ms,
                e.median_error_ms,
                100.0 * e.median_error_ms / c,
                e.p99_ms,
                e.p99_error_ms,
                e.min_ms,
                e.pings,
                e.resolution_ms
            );
            out.push(e);
        }
        let t = Instant::now();
        tb.destroy().context("tearing the testbed down")?;
        let build = Build {
            senders: rtts.len(),
            build_s,
            teardown_s: t.elapsed().as_secs_f64(),
        };
        Ok((out, build))
    }

    fn jain(xs: &[f64]) -> f64 {
        let s: f64 = xs.iter().sum();
        let s2: f64 = xs.iter().map(|x| x * x).sum();
        if s2 == 0.0 {
            0.0
        } else {
            s * s / (xs.len() as f64 * s2)
        }
    }

    /// `n` cubic flows as iperf3 `-P n` (parallel streams in one client and
    /// one server process) from one sender host: the flows share an RTT, so
    /// they need no host each.
    fn flows(counts: &[usize], flow_s: u64) -> Result<Vec<Multi>> {
        let rate = 100 * MBIT;
        println!(
            "testbed flows: N cubic flows at 100 Mbit/s, {} ms, 1 BDP ({} KB); one sender host, one \
             iperf3 client with -P N; {flow_s} s, first {OMIT_S} s not counted",
            RTT.as_millis(),
            buffer(rate) / 1000
        );
        println!(
            "  {:>5} {:>6} {:>9} {:>7} {:>7} {:>17} {:>8} {:>8} {:>7}",
            "flows",
            "build",
            "goodput",
            "util",
            "Jain",
            "min..max Mbit/s",
            "retrans",
            "emu CPU",
            "drops"
        );
        let mut out = Vec::new();
        for &n in counts {
            let (tb, build_s) = build(
                TestbedConfig::new(rate, buffer(rate))
                    .with_rtts(&[RTT])
                    .userspace(),
            )?;
            let mut spec =
                FlowSpec::new(0, "cubic", Duration::from_secs(flow_s - OMIT_S as u64)).omit(OMIT_S);
            if n > 1 {
                spec.extra_args = vec!["-P".into(), n.to_string()];
            }
            let w = run_window(&tb, &[spec])?;
            drop(tb);
            let r = &w.results[0];
            let per: Vec<f64> = r
                .report
                .end
                .streams
                .iter()
                .map(|s| s.receiver.bits_per_second)
                .collect();
            if per.len() != n {
                bail!("{n} flows asked, iperf3 reported {}", per.len());
            }
            let total: f64 = per.iter().sum();
            let m = Multi {
                flows: n,
                how: if n > 1 {
                    format!("iperf3 -P {n}, one sender host")
                } else {
                    "one iperf3 flow".into()
                },
                build_s,
                goodput_mbit: total / 1e6,
                utilisation: total / rate as f64,
                jain: jain(&per),
                min_flow_mbit: per.iter().copied().fold(f64::INFINITY, f64::min) / 1e6,
                max_flow_mbit: per.iter().copied().fold(0.0, f64::max) / 1e6,
                retransmits: r.retransmits,
                emulator_cpu_share: w.cpu_s / w.wall_s,
                bottleneck_drops: w.drops,
            };
            println!(
                "  {:>5} {:>5.1}s {:>9.1} {:>6.3}x {:>7.3} {:>8.2}..{:<8.2} {:>8} {:>7.1}% {:>7}",
                n,
                build_s,
                m.goodput_mbit,
                m.utilisation,
                m.jain,
                m.min_flow_mbit,
                m.max_flow_mbit,
                m.retransmits,
                100.0 * m.emulator_cpu_share,
                m.bottleneck_drops
            );
            out.push(m);
        }
        Ok(out)
    }

    /// Build and teardown time of a dumbbell with `n` sender hosts (no flows).
    fn build_time(n: usize) -> Result<Build> {
        let rate = 100 * MBIT;
        let (tb, build_s) = build(
            TestbedConfig::new(rate, buffer(rate))
                .with_rtts(&vec![RTT; n])
                .userspace(),
        )?;
        let t = Instant::now();
        tb.destroy().context("tearing the testbed down")?;
        let b = Build {
            senders: n,
            build_s,
            teardown_s: t.elapsed().as_secs_f64(),
        };
        println!(
            "testbed build: {n} sender hosts ({} namespaces): built in {:.1} s, torn down in {:.1} s \
             (not used for flows: -P runs N flows from one host)",
            n + 2,
            b.build_s,
            b.teardown_s
        );
        Ok(b)
    }

    pub fn run(args: &BenchArgs) -> Result<()> {
        let t_all = Instant::now();
        let quick = args.quick;
        let flow_s = if quick { 5 } else { args.secs }.max(OMIT_S as u64 + 1);
        let rates = if quick {
            QUICK_LADDER_MBIT
        } else {
            LADDER_MBIT
        };
        let pings = if quick { 100 } else { 200 };
        if !std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")?
            .split_whitespace()
            .any(|c| c == "cubic")
        {
            bail!("cubic is not available on this kernel");
        }

        let ladder = ladder(rates, flow_s)?;
        let passed: Vec<&Rung> = ladder.iter().filter(|r| r.passed).collect();
        let max_rate = passed.last().map(|r| r.rate_mbit);
        let first_miss = ladder.iter().find(|r| !r.passed).map(|r| r.rate_mbit);
        let cpu_median = if ladder.is_empty() {
            None
        } else {
            Some(quantile(
                &ladder.iter().map(|r| r.cpu_per_100mbit).collect::<Vec<_>>(),
                0.5,
            ))
        };

        let (rtt_error, rtt_build) = rtt_errors(pings)?;
        let mut builds = vec![rtt_build];
        builds.push(build_time(128)?);
        let flows = flows(FLOW_COUNTS, flow_s)?;

        let report = Report {
            bench: "testbed",
            quick,
            flow_s,
            omitted_s: OMIT_S,
            target_share: TARGET_SHARE,
            payload_share_limit: PAYLOAD_SHARE,
            rtt_ms: RTT.as_millis() as u64,
            max_rate_mbit: max_rate,
            first_miss_mbit: first_miss,
            ladder,
            rtt_error,
            cpu_per_100mbit_median: cpu_median,
            flows,
            builds,
            total_s: t_all.elapsed().as_secs_f64(),
        };
        summary(&report);
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
            println!("testbed: results written to {}", path.display());
        }
        Ok(())
    }

    fn summary(r: &Report) {
        let rung = |m: Option<u64>| r.ladder.iter().find(|x| Some(x.rate_mbit) == m);
        println!();
        println!(
            "testbed summary (userspace path emulator, this machine, {:.0} s in all)",
            r.total_s
        );
        println!("  {:<34} result", "item");
        let item1 = match (rung(r.max_rate_mbit), rung(r.first_miss_mbit)) {
            (Some(a), Some(b)) => format!(
                "{} Mbit/s ({:.3}x of rate); {} Mbit/s missed ({:.3}x)",
                a.rate_mbit, a.share_of_rate, b.rate_mbit, b.share_of_rate
            ),
            (Some(a), None) => format!(
                "{} Mbit/s ({:.3}x of rate), the top of the ladder",
                a.rate_mbit, a.share_of_rate
            ),
            (None, Some(b)) => format!(
                "none: {} Mbit/s already missed ({:.3}x of rate)",
                b.rate_mbit, b.share_of_rate
            ),
            (None, None) => "no rung ran".into(),
        };
        println!("  {:<34} {item1}", "1 max rate, 1 flow >= 0.95x rate");
        let item2 = r
            .rtt_error
            .iter()
            .map(|e| {
                format!(
                    "{}: {:+.2}/{:+.2}",
                    e.rtt_ms, e.median_error_ms, e.p99_error_ms
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        println!("  {:<34} {item2}", "2 RTT error ms (median/p99)");
        let item3 = match r.cpu_per_100mbit_median {
            Some(m) => {
                let lo = r
                    .ladder
                    .iter()
                    .map(|x| x.cpu_per_100mbit)
                    .fold(f64::INFINITY, f64::min);
                let hi = r
                    .ladder
                    .iter()
                    .map(|x| x.cpu_per_100mbit)
                    .fold(0.0, f64::max);
                format!(
                    "{m:.3} CPU-s/s per 100 Mbit/s (median of {} rungs, {lo:.3}..{hi:.3})",
                    r.ladder.len()
                )
            }
            None => "-".into(),
        };
        println!("  {:<34} {item3}", "3 emulator CPU per 100 Mbit/s");
        for m in &r.flows {
            println!(
                "  {:<34} util {:.3}x of rate, Jain {:.3}, emulator CPU {:.1} % of a core",
                format!("4 {} cubic flow(s), 100 Mbit/s", m.flows),
                m.utilisation,
                m.jain,
                100.0 * m.emulator_cpu_share
            );
        }
        for b in &r.builds {
            println!(
                "  {:<34} build {:.1} s, teardown {:.1} s",
                format!("  testbed of {} senders", b.senders),
                b.build_s,
                b.teardown_s
            );
        }
        println!();
        println!("testbed: {item1}");
        println!("testbed: RTT error (ms, median/p99 at configured ms) {item2}");
        println!("testbed: emulator {item3}");
        println!(
            "testbed: 100 Mbit/s, 20 ms, 1 BDP: {}",
            r.flows
                .iter()
                .map(|m| format!(
                    "{} flow(s) {:.3}x of rate, Jain {:.3}, CPU {:.0} %",
                    m.flows,
                    m.utilisation,
                    m.jain,
                    100.0 * m.emulator_cpu_share
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}
