//! Integration tests that must run inside the virtme-ng VM (Debian's 6.1
//! kernel: no struct_ops links, the 2-argument cong_control, and netem for
//! delay). `cargo xtask test` boots the VM once and runs them all in it, so
//! native bbr and bpf_bbr are compared within the same boot. Run anywhere
//! else, each test fails: a VM test that cannot run where it must is a
//! failure, not a skip.
#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use ccctl_lab::{
    iperf::{self, FlowSpec},
    testbed::{buffer_bdp, TestbedConfig},
};
use common::{ccctl, flows::*, lifecycle, Clean};

/// Fail unless we are in the VM that `cargo xtask vm` boots.
fn require_vm() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    assert!(
        std::env::var("CCCTL_IN_VM").as_deref() == Ok("1") && release.starts_with("6.1."),
        "VM tests must run inside the 6.1 VM (found kernel {release:?}); run them with `cargo xtask test`"
    );
}

#[test]
fn load_registers_and_unload_removes() {
    require_vm();
    lifecycle::load_registers_and_unload_removes(false);
}

#[test]
fn load_twice_is_ok() {
    require_vm();
    lifecycle::load_twice_is_ok();
}

#[test]
fn default_is_set_and_restored() {
    require_vm();
    lifecycle::default_is_set_and_restored();
}

#[test]
fn pins_are_private_and_planted_links_refused() {
    require_vm();
    lifecycle::pins_are_private_and_planted_links_refused();
}

#[test]
fn errors_are_clear_and_change_nothing() {
    require_vm();
    lifecycle::errors_are_clear_and_change_nothing();
}

#[test]
fn load_mounts_a_missing_bpffs() {
    require_vm();
    lifecycle::load_mounts_a_missing_bpffs();
}

/// Unload while a flow runs, on the 6.1 path (map registration deleted).
#[test]
fn unload_while_a_flow_runs_is_safe() {
    require_vm();
    let _clean = Clean::new();
    // The emulated CPU cannot promise line rate: compare the flow with itself.
    unload_mid_flow(
        TestbedConfig::new(10_000_000, buffer_bdp(10_000_000, RTT, 1.0, 1500)).with_rtts(&[RTT]),
        None,
    );
}

/// The testbed's qdisc scripts where the kernel has netem and fq_codel (the
/// VM; a host without them fails here instead of skipping): ACK-path delay
/// per sender, fq_codel under tbf, random loss via ifb on the receiver's
/// ingress, each seen in place and doing its job in a flow.
#[test]
fn netem_loss_and_fq_codel_in_place() {
    require_vm();
    use ccctl_lab::testbed::{fq_codel_available, netem_available, Aqm, Role, Testbed};
    assert!(
        netem_available().expect("probing netem")
            && fq_codel_available().expect("probing fq_codel"),
        "the VM kernel must have netem and fq_codel"
    );
    let rtt = Duration::from_millis(40);
    let tb = Testbed::new(
        TestbedConfig::new(20_000_000, 100_000)
            .with_rtts(&[rtt, Duration::ZERO])
            .with_loss(0.01)
            .with_aqm(Aqm::FqCodel),
    )
    .expect("testbed");
    let show = |role: Role, what: &[&str]| {
        let out = tb.exec(role, what).expect("tc/ip in a testbed namespace");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let rt = show(Role::Router, &["tc", "qdisc", "show"]);
    assert!(rt.contains("qdisc tbf 1: dev to_rx root"), "{rt}");
    assert!(
        rt.contains("qdisc fq_codel 10: dev to_rx parent 1:1"),
        "{rt}"
    );
    assert!(
        rt.contains("qdisc netem 1: dev to_s0 root") && rt.contains("delay 40ms"),
        "{rt}"
    );
    assert!(!rt.contains("netem 1: dev to_s1"), "{rt}"); // zero RTT: no netem
    let rx = show(Role::Receiver, &["tc", "qdisc", "show"]);
    assert!(
        rx.contains("dev ifb0 root") && rx.contains("loss 1%"),
        "{rx}"
    );
    assert!(rx.contains("qdisc ingress ffff: dev eth0"), "{rx}");
    let filter = show(
        Role::Receiver,
        &["tc", "filter", "show", "dev", "eth0", "parent", "ffff:"],
    );
    assert!(filter.contains("Redirect to device ifb0"), "{filter}");
    let ifb = show(Role::Receiver, &["ip", "-o", "link", "show", "ifb0"]);
    assert!(ifb.contains(",UP"), "{ifb}");

    let r =
        iperf::run_flow(&tb, &FlowSpec::new(0, "cubic", Duration::from_secs(3))).expect("iperf3");
    println!(
        "goodput {:.1} Mbit/s, retrans {}, min rtt {:?} us",
        r.goodput_bps / 1e6,
        r.retransmits,
        r.min_rtt_us
    );
    assert!(
        r.min_rtt_us.is_some_and(|us| us >= 40_000),
        "{:?}",
        r.min_rtt_us
    );
    assert!(r.retransmits > 0, "1% loss but no retransmission");
    tb.destroy().expect("testbed teardown");
}

/// The link of the equivalence tests: 40 ms base RTT, one BDP of buffer at
/// the router, TSO/GSO/GRO off (the testbed's default), at a rate the
/// emulated machine carries right now (see `measure_on_a_healthy_link`).
const RTT: Duration = Duration::from_millis(40);
const CANDIDATE_RATES_BPS: [u64; 2] = [20_000_000, 10_000_000];
/// A reference Cubic flow over 2 BDP must get this share of the rate.
const HEALTHY_SHARE: f64 = 0.85;

fn equivalence_link(rate_bps: u64, senders: usize) -> TestbedConfig {
    TestbedConfig::new(rate_bps, buffer_bdp(rate_bps, RTT, 1.0, 1500))
        .with_rtts(&vec![RTT; senders])
}

/// `algo` (ccctl's name) loaded, one `cc` flow of `secs` on the
/// equivalence link at a rate the emulator carries now: it must carry half
/// of it (BBR-family flows in this VM measured 62-95 % of the link).
fn loads_and_carries(algo: &str, cc: &str, secs: u64) {
    let _clean = Clean::new();
    let (rate, flow, seen) = measure_on_a_healthy_link(&format!("{cc} flow"), |rate| {
        let (flow, seen) = loaded_flow(algo, cc, equivalence_link(rate, 1), secs);
        Ok((rate, flow, seen))
    });
    assert_carries(cc, rate as f64, &flow, &seen, 0.5);
}

/// Share of `rate` a 10 s reference Cubic flow gets over a 2 BDP buffer now.
fn reference_share(rate: u64) -> f64 {
    let cfg = TestbedConfig::new(rate, buffer_bdp(rate, RTT, 2.0, 1500)).with_rtts(&[RTT]);
    let tb = testbed(cfg);
    let flow =
        iperf::run_flow(&tb, &FlowSpec::new(0, "cubic", Duration::from_secs(10))).expect("iperf3");
    let share = flow.goodput_bps / rate as f64;
    println!(
        "reference: cubic reached {:.1} of {} Mbit/s ({:.0} %)",
        mbit(flow.goodput_bps),
        rate / 1_000_000,
        100.0 * share
    );
    share
}

/// Under TCG a busy host cannot forward 20 Mbit/s, and then every algorithm
/// looks alike and slow; the emulator's speed also drifts within one boot
/// (a CI run saw 92 % at its start and solo BBR flows at 40 % of the same
/// rate ten minutes later). So: find the first candidate rate a reference
/// Cubic flow fills to >= 85 % now, run `measure` there, then check the
/// reference again. If the testbed slowed down in between, the figures
/// measured the emulator: measure again at the next lower rate. Fails,
/// saying so, when no rate stays healthy through a measurement.
/// `measure` itself may also report the testbed as limited (`Err`): paced
/// flows suffer from late timers before a Cubic reference does (one run had
/// the reference at 91 % and 89 % while BBR flows got 32-62 % of the rate).
/// Every rate tried, skipped or chosen, is printed in the test's output
/// (`xtask test` shows it for passing tests too), with a line naming the
/// rate measured at and every fallback that led there: a run at 10 or 5
/// Mbit/s never passes unnoticed.
fn measure_on_a_healthy_link<T>(
    what: &str,
    mut measure: impl FnMut(u64) -> Result<T, String>,
) -> T {
    measure_on_a_healthy_link_with(what, |rate, _| measure(rate))
}

/// [`measure_on_a_healthy_link`], `measure` also given the share of the
/// rate the reference Cubic flow got just before: what the emulated link
/// carries now.
fn measure_on_a_healthy_link_with<T>(
    what: &str,
    mut measure: impl FnMut(u64, f64) -> Result<T, String>,
) -> T {
    let mut seen = Vec::new();
    for rate in CANDIDATE_RATES_BPS {
        let before = reference_share(rate);
        if before < HEALTHY_SHARE {
            println!(
                "{what}: calibration: reference Cubic {:.0} % of {} Mbit/s, below {:.0} %: \
                 not measuring there",
                100.0 * before,
                rate / 1_000_000,
                100.0 * HEALTHY_SHARE
            );
            seen.push(format!(
                "{:.0} % of {} Mbit/s before",
                100.0 * before,
                rate / 1_000_000
            ));
            continue;
        }
        println!(
            "{what}: calibration: measuring at {} Mbit/s (reference Cubic {:.0} %)",
            rate / 1_000_000,
            100.0 * before
        );
        let result = measure(rate, before);
        let after = reference_share(rate);
        match result {
            Ok(r) if after >= HEALTHY_SHARE => {
                if rate == CANDIDATE_RATES_BPS[0] {
                    println!(
                        "{what}: calibration: measured at {} Mbit/s, the first candidate",
                        rate / 1_000_000
                    );
                } else {
                    println!(
                        "{what}: calibration: FELL BACK to {} Mbit/s (not {} Mbit/s: {})",
                        rate / 1_000_000,
                        CANDIDATE_RATES_BPS[0] / 1_000_000,
                        seen.join(", ")
                    );
                }
                return r;
            }
            Err(why) => {
                println!(
                    "{what}: testbed-limited during the measurement ({why}); again at a lower rate"
                );
                seen.push(format!("{why} at {} Mbit/s", rate / 1_000_000));
                continue;
            }
            Ok(_) => {}
        }
        println!("{what}: the testbed slowed down during the measurement; again at a lower rate");
        seen.push(format!(
            "{:.0} % of {} Mbit/s after",
            100.0 * after,
            rate / 1_000_000
        ));
    }
    panic!("{what}: testbed-limited, the VM cannot carry a reference Cubic flow ({}); is the machine busy?", seen.join(", "));
}

/// bpf_bbr against the kernel's bbr phase by phase on 6.1 (issue 27 item
/// 2), the host test's check on the qdisc path (tbf + netem): 10 Mbit/s
/// (a rate the emulated machine carries under TCG: the phases are timed in
/// min_rtt and read in gains, not in throughput), 40 ms, 2 BDP, 23 s runs
/// (two PROBE_RTTs each) in the order bbr, bpf_bbr, bbr, bpf_bbr: 92 s of
/// flows, two runs of each for the run-to-run spread and so that a run
/// whose PROBE_RTT the emulated clock pushed past its end still leaves
/// one of that side's. Judged: only what the code decides
/// ([`common::bbr_phases::Judge::CodeDecided`]); under TCG the phase
/// lengths are the VM's timers (the kernel's own bbr failed them). The
/// table, every line, is in target/ccctl-figures/vm-bbr-phases.txt.
#[test]
fn bpf_bbr_phases_match_kernel_bbr() {
    require_vm();
    let rate = 10_000_000;
    common::bbr_phases::bpf_bbr_phases_match_kernel_bbr(
        TestbedConfig::new(rate, buffer_bdp(rate, RTT, 2.0, 1500)).with_rtts(&[RTT]),
        23,
        &["bbr", "bpf_bbr", "bbr", "bpf_bbr"],
        "vm-bbr-phases.txt",
        common::bbr_phases::Judge::CodeDecided,
    );
}

/// Sharing the link with native bbr, bpf_bbr's mean share over ABBA-ordered
/// runs is 45-55 %. Each run is two 40 s flows started together; run k puts
/// bpf_bbr on sender 1 in A runs and on sender 0 in B runs (A B B A), so a
/// bias of either host path, or a drift of the emulator's speed over the
/// runs, cannot pass for the algorithm's. The share is per run,
/// bpf_bbr / (bpf_bbr + bbr), and the bar is on the mean of the runs.
///
/// PROBE_RTT's 4-packet samples must not become btl_bw (bbr_core.h,
/// bbr_sample_app_limited()). tcp_bbr.c marks the flow app-limited while in
/// PROBE_RTT so those samples only count if they raise the max; 6.1 refuses
/// that write, and without our own mark 200 ms at 4 packets outlasts the
/// 10-round btl_bw window whenever the RTT is under 20 ms. Here: 10 Mbit/s,
/// 10 ms, so a BDP is ~8.6 packets, PROBE_RTT's 4 packets per round carry
/// ~46 % of the link and 200 ms is ~20 rounds. The trace (every ACK) must
/// show PROBE_RTT, and in every PROBE_RTT btl_bw must stay at >= 80 % of
/// the lower of btl_bw on entering it and the link's rate (with the mark
/// only an entry inflated above the link can age out; without it, btl_bw
/// falls to about half the link).
///
/// The flow runs 40 s. PROBE_RTT comes 10 s after the last new min_rtt, and
/// with the host busy a lower RTT sample still arrives well into the flow:
/// five 25 s runs in the VM (2026-11-24) entered their first PROBE_RTT at
/// 10.7, 10.7 s (idle host) and 10.1, 21.4, 16.1 s (one busy loop on the
/// host), so the 18 s flow this test had before failed CI with no PROBE_RTT
/// to judge. The trace only decides whether there was a PROBE_RTT; how
/// btl_bw behaves in it is what is checked.
#[test]
fn probe_rtt_samples_do_not_become_btl_bw() {
    use common::lab::strs;
    use common::tracing::{u64s, FlowTrace};

    require_vm();
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let rate = 10_000_000;
    let rtt = Duration::from_millis(10);
    let secs = 40;
    let tb = testbed(TestbedConfig::new(rate, buffer_bdp(rate, rtt, 1.0, 1500)).with_rtts(&[rtt]));
    let trace_dir = common::tempdir("probe-rtt");
    let trace = FlowTrace::start(&tb, "bpf-bbr", &trace_dir.join("bbr.parquet"));
    let flow = iperf::run_flow(
        &tb,
        &FlowSpec::new(0, "bpf_bbr", Duration::from_secs(secs)).port(trace.port),
    )
    .expect("iperf3");
    let df = trace.finish();
    let data_port = flow.local_port.expect("local port") as u64;
    let (sport, ts, btl_bw, min_rtt, retrans, mode) = (
        u64s(&df, "sport"),
        u64s(&df, "ts_ns"),
        u64s(&df, "btl_bw_bps"),
        u64s(&df, "min_rtt_us"),
        u64s(&df, "total_retrans"),
        strs(&df, "bbr_mode"),
    );
    let rows: Vec<usize> = (0..df.height())
        .filter(|&i| sport[i] == data_port)
        .collect();
    assert!(
        !rows.is_empty(),
        "no traced event of the flow's port {data_port}"
    );
    let t0 = ts[rows[0]];
    let at = |i: usize| (ts[i] - t0) as f64 / 1e9;
    // Where min_rtt changed, for the message if PROBE_RTT never comes.
    let min_rtt_changes: Vec<String> = rows
        .windows(2)
        .filter(|w| min_rtt[w[0]] != min_rtt[w[1]])
        .map(|w| format!("{:.2} s: {} us", at(w[1]), min_rtt[w[1]]))
        .collect();
    // Every PROBE_RTT episode, in trace order.
    struct Episode {
        start_s: f64,
        end_s: f64,
        entry: u64,
        lowest: u64,
        events: usize,
        retransmits: u64,
    }
    let mut episodes: Vec<Episode> = Vec::new();
    for (k, &i) in rows.iter().enumerate() {
        if mode[i] != "probe_rtt" {
            continue;
        }
        let prev = if k > 0 { Some(rows[k - 1]) } else { None };
        match prev {
            Some(p) if mode[p] == "probe_rtt" => {
                let e = episodes.last_mut().expect("an open episode");
                e.lowest = e.lowest.min(btl_bw[i]);
                e.end_s = at(i);
                e.events += 1;
                e.retransmits = retrans[i] - retrans[rows[0]];
            }
            Some(p) => episodes.push(Episode {
                start_s: at(i),
                end_s: at(i),
                entry: btl_bw[p],
                lowest: btl_bw[i].min(btl_bw[p]),
                events: 1,
                retransmits: retrans[i] - retrans[rows[0]],
            }),
            None => panic!("the flow started in PROBE_RTT"),
        }
    }
    let listing = episodes
        .iter()
        .map(|e| {
            format!(
                "{:.2}-{:.2} s ({} events): btl_bw {:.2} Mbit/s on entry, lowest {:.2}; {} retransmits by then",
                e.start_s,
                e.end_s,
                e.events,
                e.entry as f64 / 1e6,
                e.lowest as f64 / 1e6,
                e.retransmits
            )
        })
        .collect::<Vec<_>>()
        .join("\n  ");
    println!(
        "{} events over {:.1} s; flow {:.2} Mbit/s, {} retransmits; PROBE_RTT:\n  {listing}",
        rows.len(),
        at(*rows.last().expect("rows")),
        mbit(flow.goodput_bps),
        flow.retransmits
    );
    assert!(
        !episodes.is_empty(),
        "no PROBE_RTT in {} events of a {secs} s flow; min_rtt changed at: {}",
        rows.len(),
        min_rtt_changes.join(", ")
    );
    // Judged against the lower of btl_bw on entry and the link's rate: an
    // entry the emulated CPU's ACK compression inflated (16.4 Mbit/s on this
    // 10 Mbit/s link in a CI run on a busy machine) ages out of the 10-round
    // window during PROBE_RTT's ~20 rounds and lets btl_bw fall to the
    // next sample (11.8 there) with no PROBE_RTT sample involved. The
    // defect this test is for takes it to PROBE_RTT's own rate, ~46 % of
    // the link, well below 80 % of either.
    for e in &episodes {
        let floor = 0.8 * (e.entry as f64).min(rate as f64);
        assert!(
            e.lowest as f64 >= floor,
            "btl_bw fell from {} to {} bit/s in the PROBE_RTT at {:.2} s, below 80 % of the \
             lower of the entry and the link's {rate} bit/s: its 4-packet samples entered the \
             max filter\n  {listing}",
            e.entry,
            e.lowest,
            e.start_s
        );
    }
}

/// `ccctl lab` where netem exists.
mod lab {
    use super::common::{lab::*, Clean};
    use super::require_vm;

    /// One Cubic flow gets the link (goodput within 10 % of the rate, min RTT
    /// within 10 % of the base RTT); two Cubic flows share that one link
    /// (together 85-105 % of the rate: two flows each with its own
    /// bottleneck would carry twice that) and neither is starved (JFI >=
    /// 0.75, i.e. within 3.7:1). Not JFI > 0.9: with tail drop both flows
    /// lose on the same overflow and keep their ratio, so Cubic may end 25
    /// s at 2:1 (a CI run: 3.2 and 6.4 Mbit/s, JFI 0.890; an earlier 20 s
    /// run 0.899). That measures Cubic's convergence, not the lab; the
    /// lab's JFI arithmetic is recomputed from the samples in the host
    /// test `lab_runs_a_scenario_and_writes_every_output`.
    #[test]
    fn lab_single_flow_fills_the_link_and_two_cubic_flows_are_fair() {
        require_vm();
        let _clean = Clean::new();
        let scenario_dir = super::common::tempdir("lab-vm-basic-scenario");
        let scenario = scenario_dir.join("basic.toml");
        std::fs::write(
            &scenario,
            // 2 BDP so one Cubic flow keeps the link full (1 BDP gave 8.78 of 10
            // Mbit/s once); 30 s with a 5 s warm-up gives two Cubic flows 25 s to
            // be measured over (one 20 s run gave JFI 0.899).
            "name = \"vm-basic\"\nduration = \"30s\"\nwarmup = \"5s\"\nbaselines = false\n\
             [link]\nrate = \"10mbit\"\nrtt = \"40ms\"\nbuffer = \"2bdp\"\n\
             [sweep]\nflows = [\"cubic:1\", \"cubic:2\"]\n",
        )
        .expect("write scenario");
        let (run, _out, dir) = lab_run("vm-basic", &[scenario.to_str().expect("utf-8")]);
        run.ok();
        let dir = dir.expect("a run directory");
        assert_run_files(&dir);
        let meta = metadata(&dir);
        assert_eq!(meta["ran_on"], "vm");
        assert_eq!(meta["status"], "complete");
        let summary = read_parquet(&dir.join("summary.parquet"));
        let limited_col = summary
            .column("testbed_limited")
            .expect("column")
            .bool()
            .expect("bool")
            .clone();
        let limited: Vec<bool> = (0..limited_col.len())
            .map(|i| limited_col.get(i).unwrap_or(true))
            .collect();
        assert!(
            !limited.iter().any(|&l| l),
            "calibration marked the VM testbed-limited: {meta}"
        );

        let matchup = f64s(&summary, "matchup");
        let goodput = f64s(&summary, "goodput_bps");
        let min_rtt = f64s(&summary, "min_rtt_ms");
        let flows = rows(&summary, "flow", "main");
        let single: Vec<usize> = flows
            .iter()
            .copied()
            .filter(|&i| matchup[i] == Some(0.0))
            .collect();
        assert_eq!(single.len(), 1);
        let g = goodput[single[0]].expect("goodput");
        assert!(
            (g - 10e6).abs() <= 1e6,
            "single flow goodput {:.2} Mbit/s, not within 10 % of 10",
            g / 1e6
        );
        let r = min_rtt[single[0]].expect("min RTT");
        assert!(
            (r - 40.0).abs() <= 4.0,
            "single flow min RTT {r:.2} ms, not within 10 % of 40"
        );

        let runs = rows(&summary, "run", "main");
        let pair = runs
            .iter()
            .copied()
            .find(|&i| matchup[i] == Some(1.0))
            .expect("two-flow run");
        let jfi = f64s(&summary, "jain_index")[pair].expect("JFI");
        let together: Vec<f64> = flows
            .iter()
            .filter(|&&i| matchup[i] == Some(1.0))
            .map(|&i| goodput[i].expect("goodput"))
            .collect();
        let sum: f64 = together.iter().sum();
        println!(
            "two Cubic flows: {:.2} Mbit/s together of 10, JFI {jfi:.3}",
            sum / 1e6
        );
        assert_eq!(together.len(), 2, "two flows in the two-flow run");
        assert!(
            (8.5e6..=10.5e6).contains(&sum),
            "two Cubic flows carried {:.2} Mbit/s together: not one shared 10 Mbit/s link",
            sum / 1e6
        );
        assert!(jfi >= 0.75, "two Cubic flows: JFI {jfi:.3}, one starved");
    }
}

/// Per-ACK tracing on 6.1 (no struct_ops links, 2-argument cong_control).
mod tracing {
    use std::time::Duration;

    use super::common::tracing::*;
    use super::require_vm;

    #[test]
    fn traced_flow_is_one_row_per_ack_and_matches_the_socket() {
        require_vm();
        traced_flow_matches_the_socket(10_000_000, 50_000, Duration::from_millis(20));
    }
}

/// Modest BBR on the 6.1 kernel: it loads through the 2-argument
/// cong_control and a map registration, and carries a flow; a live `ccctl
/// tune` reaches a running flow (bpf_bbr, see `live_tune_reaches_a_running_flow`).
mod modest {
    use super::*;
    use crate::common::modest;

    #[test]
    fn modest_bbr_loads_and_carries_a_flow() {
        require_vm();
        // 1 BDP: modest_bbr's search takes a share off BBR's window when the
        // buffer overflows (W_min 0.75) and wins it back one packet per
        // round trip: VM runs measured 65-93 % of the link. Half of a link
        // the testbed carries is "carries"; a flow pinned by a stale search
        // window (the defect fixed in modest_bbr.bpf.c) got 40 %.
        loads_and_carries("modest-bbr", "modest_bbr", 20);
    }

    #[test]
    fn live_tune_changes_a_running_flow_and_reset_restores_it() {
        require_vm();
        modest::live_tune_reaches_a_running_flow(10_000_000, RTT);
    }
}

/// patched BBR on the 6.1 kernel, and the lab's sender gate.
mod patched {
    use super::*;
    use crate::common::patched::{self, Rule};
    use ccctl_lab::testbed::Gate;

    /// Loads through the 2-argument cong_control and a map registration,
    /// its transmit tracer attached, and carries a flow on a link the
    /// emulator carries (half of it: BBR-family flows in this VM measured
    /// 62-89 % ungated).
    #[test]
    fn patched_bbr_loads_and_carries_a_flow() {
        require_vm();
        loads_and_carries("patched-bbr", "patched_bbr", 20);
    }

    /// The gate of the lab keeps time (On 20 / Off 60 ms on 10 Mbit/s, 40 ms):
    /// every packet on the sender's link in an On window, within 1 ms.
    #[test]
    fn sender_gate_passes_packets_only_in_on_windows() {
        require_vm();
        patched::gate_passes_packets_only_in_on_windows(
            10_000_000,
            RTT,
            20,
            60,
            ccctl_lab::testbed::PathKind::Qdisc,
        );
    }

    /// Pseudocode 2 from the trace of a patched_bbr flow whose sender is
    /// gated Heavy (On 10 / Off 70 ms, Θ = 0.125): every rule recomputed
    /// from the traced inputs, the heavy level and the probe's pacing boost
    /// taken, and the mean Θ in force after a 5 s warm-up below 0.5.
    #[test]
    fn patched_bbr_follows_pseudocode2_under_a_heavy_gate() {
        require_vm();
        let _clean = Clean::new();
        let rate = 10_000_000;
        let mut cfg = TestbedConfig::new(rate, buffer_bdp(rate, RTT, 1.0, 1500)).with_rtts(&[RTT]);
        let gate = Gate {
            on: Duration::from_millis(10),
            off: Duration::from_millis(70),
        };
        cfg.senders[0].gate = Some(gate);
        let tb = testbed(cfg);
        // No stall_filter: it cannot tell the emulator's stalls from the
        // gate's Off periods they overlap (it read Θ 0.32-0.42 here).
        let sum =
            patched::pseudocode2_from_trace(&tb, 25, Duration::from_secs(5), &[], Rule::DEFAULT);
        assert!(
            sum.levels[0] > 0 && sum.boosted > 0 && sum.corrected > 0,
            "the heavy branch of Pseudocode 2 was not taken: {sum:?}"
        );
        // The gate is seen: a sender whose Off periods go unnoticed reads Θ
        // near 1 (0.99 when the router's side of the gate leaked, 0.98-0.99
        // ungated). The issue's +-0.1 target is not met (0.29-0.32 here,
        // 0.23 in the lab at 20 Mbit/s; README, patched BBR): measured in
        // the lab, not asserted.
        assert!(
            sum.mean_theta < 0.5,
            "mean Θ {:.3} under a gate of Θ 0.125: the Off periods were not seen",
            sum.mean_theta
        );
    }

    #[test]
    fn patched_bbr_parameters() {
        require_vm();
        crate::common::patched::patched_bbr_parameters();
    }
}

/// `ccctl tune` and `ccctl load ALGO --PARAM X` on the 6.1 kernel: the same
/// cases as the host's, every bad input refused with the map unchanged.
mod tune {
    use super::require_vm;

    #[test]
    fn tune_shows_changes_resets_and_infers_the_algorithm() {
        require_vm();
        crate::common::tune::tune_shows_changes_resets_and_infers_the_algorithm();
    }

    #[test]
    fn tune_refuses_bad_input_and_changes_nothing() {
        require_vm();
        crate::common::tune::tune_refuses_bad_input_and_changes_nothing();
    }

    #[test]
    fn load_with_parameters_validates_first_and_refuses_when_loaded() {
        require_vm();
        crate::common::tune::load_with_parameters_validates_first_and_refuses_when_loaded();
    }

    #[test]
    fn modest_bbr_window_parameters() {
        require_vm();
        crate::common::tune::modest_bbr_window_parameters();
    }
    /// The host's case on 6.1 (map registration, 2-argument cong_control):
    /// 10 Mbit/s, 40 ms, 0.5 BDP, 6 s.
    #[test]
    fn parameter_sets_change_atomically() {
        require_vm();
        use ccctl_lab::testbed::{buffer_bdp, TestbedConfig};
        let rate = 10_000_000;
        crate::common::atomic::parameter_sets_change_atomically(
            TestbedConfig::new(rate, buffer_bdp(rate, super::RTT, 0.5, 1500))
                .with_rtts(&[super::RTT]),
            6,
        );
    }
}

/// TCP D* on the 6.1 kernel (2-argument cong_control, map registration),
/// with a real base RTT: 20 Mbit/s, 40 ms (67 packets of BDP).
mod dstar {
    use super::*;
    use crate::common::dstar;

    const RATE: u64 = 20_000_000;

    fn link(buffer_bdps: f64) -> TestbedConfig {
        TestbedConfig::new(RATE, buffer_bdp(RATE, RTT, buffer_bdps, 1500)).with_rtts(&[RTT])
    }

    /// Carries a flow, on a link the reference Cubic flow shows healthy;
    /// half the link is "carries" on the emulated CPU (measured 95 % of
    /// 20 Mbit/s at 10 ms on an idle machine).
    #[test]
    fn dstar_loads_and_carries_a_flow() {
        require_vm();
        loads_and_carries("dstar", "dstar", 15);
    }

    #[test]
    fn dstar_trace_follows_fig1() {
        require_vm();
        dstar::dstar_trace_follows_fig1(link(1.0), 15);
    }

    #[test]
    fn dstar_as_default_and_restored() {
        require_vm();
        dstar::dstar_as_default_and_restored();
    }

    #[test]
    fn tune_dstar_refuses_bad_values_and_changes_nothing() {
        require_vm();
        dstar::tune_dstar_refuses_bad_values();
    }
}

/// IPv6 on 6.1: the trace's IPv6 path (addresses read from the
/// socket's IPv6 fields, the prefix match) passes the 6.1 verifier, and an
/// IPv6 flow is traced with its addresses while an IPv4 flow beside it is
/// filtered out, and the other way round. 10 Mbit/s, 3 s flows.
#[test]
fn ipv6_flows_are_traced_and_filtered_on_6_1() {
    require_vm();
    common::ipv6::ipv6_and_ipv4_flows_filtered_by_address(
        10_000_000,
        ccctl_lab::testbed::buffer_packets(50, 1500),
        3,
        50,
    );
}

/// The rollout policy's rules on 6.1 (issue 28: "on 6.18 and 6.1"): rules
/// by port and by prefix each take exactly the connections they name,
/// counted by inet_diag, as on the host.
#[test]
fn policy_rules_by_port_and_prefix_take_exactly_theirs_on_6_1() {
    require_vm();
    common::policy::rules_by_port_and_prefix_take_exactly_theirs();
}

/// `policy apply --migrate` on 6.1: the migration iterator loads (it
/// shares the sockops program's rule loop) and moves live connections
/// where the canary hash puts them, only when asked.
#[test]
fn policy_migrate_moves_live_connections_only_when_asked_on_6_1() {
    require_vm();
    common::policy::migrate_moves_live_connections_only_when_asked();
}

/// A rule by cgroup on 6.1 takes exactly its processes' connections.
#[test]
fn policy_rule_by_cgroup_takes_exactly_its_processes_on_6_1() {
    require_vm();
    common::policy::rule_by_cgroup_takes_exactly_its_processes();
}

/// `ccctl load NAME --replace` on 6.1 (no struct_ops link): refused with
/// the reason, nothing changed.
#[test]
fn replace_is_refused_without_struct_ops_links() {
    require_vm();
    common::policy::replace_is_refused_without_struct_ops_links();
}
