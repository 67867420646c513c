//! bpf_bbr against the kernel's own bbr on one link: the same throughput
//! and queueing delay alone.
use std::time::Duration;

use ccctl_lab::{
    iperf::{self, FlowResult, FlowSpec},
    testbed::TestbedConfig,
};

use super::flows::{mbit, testbed};
use super::{ccctl, Clean};

pub fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// Prints `text` and keeps it in target/ccctl-figures/`name`.
pub fn record(name: &str, text: &str) {
    println!("{text}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/ccctl-figures");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join(name), format!("{text}\n"));
    }
}

/// Solo, bpf_bbr's throughput is within ±5 % and its mean RTT within ±10 %
/// of the kernel's bbr on the same link (`cfg`, one sender). Flows of
/// `secs` in the order `order` (ABBA, so a drift of the path's speed hits
/// both alike). Every native bbr run must reach 80 % of the rate (the
/// premise: the path carries a paced flow; the reference judges the
/// testbed, never bpf_bbr's own runs), and so must every bpf_bbr run.
/// `figure` names the record in target/ccctl-figures.
pub fn solo_bpf_bbr_matches_native_bbr(
    cfg: TestbedConfig,
    secs: u64,
    order: &[&'static str],
    figure: &str,
) {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let rate = cfg.rate_bps;
    let rtt_ms = cfg.senders[0].rtt.as_millis();
    let path = cfg.path.name();
    let tb = testbed(cfg);
    let mut runs: Vec<(&str, FlowResult)> = Vec::new();
    for &cc in order {
        let flow =
            iperf::run_flow(&tb, &FlowSpec::new(0, cc, Duration::from_secs(secs))).expect("iperf3");
        assert_eq!(flow.sender_cc.as_deref(), Some(cc));
        runs.push((cc, flow));
    }
    let _ = tb.destroy();
    let stat = |cc: &str, f: fn(&FlowResult) -> f64| -> f64 {
        mean(
            &runs
                .iter()
                .filter(|(c, _)| *c == cc)
                .map(|(_, r)| f(r))
                .collect::<Vec<_>>(),
        )
    };
    let tput = |r: &FlowResult| r.goodput_bps;
    let rtt = |r: &FlowResult| r.mean_rtt_us.unwrap_or(0) as f64 / 1000.0;
    let retx = |r: &FlowResult| r.retransmits as f64;
    let (nt, bt) = (stat("bbr", tput), stat("bpf_bbr", tput));
    let (nr, br) = (stat("bbr", rtt), stat("bpf_bbr", rtt));
    let (nx, bx) = (stat("bbr", retx), stat("bpf_bbr", retx));
    let each = order.iter().filter(|&&c| c == "bbr").count();
    let mut text = format!(
        "solo, {} Mbit/s, {rtt_ms} ms, 1 BDP, {secs} s x{each} each ({path} path):\n  native bbr: {:.2} Mbit/s, mean RTT {:.1} ms, {:.0} retransmits\n  bpf_bbr:    {:.2} Mbit/s, mean RTT {:.1} ms, {:.0} retransmits\n  ratio bpf/native: throughput {:.3}, mean RTT {:.3}",
        rate / 1_000_000,
        mbit(nt), nr, nx, mbit(bt), br, bx, bt / nt, br / nr
    );
    for (cc, r) in &runs {
        text.push_str(&format!(
            "\n  run {cc}: {:.2} Mbit/s, {:.1} ms, {} retx",
            mbit(r.goodput_bps),
            rtt(r),
            r.retransmits
        ));
    }
    record(figure, &text);
    assert!(nt > 0.0 && nr > 0.0, "native bbr measured nothing");
    for (cc, r) in &runs {
        assert!(
            r.goodput_bps >= 0.8 * rate as f64,
            "{cc} got {:.2} Mbit/s, below 80 % of {} Mbit/s{}:\n{text}",
            mbit(r.goodput_bps),
            rate / 1_000_000,
            if *cc == "bbr" {
                " (native bbr: the path does not carry a paced flow; is the machine busy?)"
            } else {
                ""
            }
        );
    }
    assert!(
        (bt / nt - 1.0).abs() <= 0.05,
        "throughput differs by more than 5 %:\n{text}"
    );
    assert!(
        (br / nr - 1.0).abs() <= 0.10,
        "mean RTT differs by more than 10 %:\n{text}"
    );
}

/// bpf_bbr and the kernel's bbr share one link (`cfg`, two senders, the
/// same RTT): bpf_bbr's mean share of the two goodputs over `n_runs` runs
/// of `secs` (ABBA: who starts on sender 0 alternates) is 45-55 %. Every
/// run must also carry >= 85 % of the rate together (the premise: the path
/// carries two paced flows; judged on the sum, which no unfair split
/// changes). `CCCTL_SHARED_RUNS=N` runs more (never fewer) for a
/// measurement. The spread that sets `n_runs` is in the caller's comment.
pub fn bpf_bbr_and_native_bbr_share_a_link(
    cfg: TestbedConfig,
    secs: u64,
    n_runs: usize,
    figure: &str,
) {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    assert_eq!(cfg.senders.len(), 2, "two senders");
    let n_runs: usize = std::env::var("CCCTL_SHARED_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n_runs)
        .max(n_runs);
    let rate = cfg.rate_bps;
    let rtt_ms = cfg.senders[0].rtt.as_millis();
    let path = cfg.path.name();
    let tb = testbed(cfg);
    let mut runs = Vec::new();
    for k in 0..n_runs {
        let order = if matches!(k % 4, 0 | 3) {
            ["bbr", "bpf_bbr"]
        } else {
            ["bpf_bbr", "bbr"]
        };
        let flows = iperf::run_flows(
            &tb,
            &[
                FlowSpec::new(0, order[0], Duration::from_secs(secs)),
                FlowSpec::new(1, order[1], Duration::from_secs(secs)),
            ],
        )
        .expect("iperf3");
        for f in &flows {
            assert_eq!(f.sender_cc.as_deref(), Some(f.spec.cc.as_str()));
        }
        runs.push(flows);
    }
    let _ = tb.destroy();
    let goodput = |flows: &[FlowResult], cc: &str| -> f64 {
        flows
            .iter()
            .filter(|f| f.spec.cc == cc)
            .map(|f| f.goodput_bps)
            .sum()
    };
    let shares: Vec<f64> = runs
        .iter()
        .map(|flows| {
            let (ours, native) = (goodput(flows, "bpf_bbr"), goodput(flows, "bbr"));
            ours / (ours + native)
        })
        .collect();
    let n = shares.len() as f64;
    let m = mean(&shares);
    let sd = (shares.iter().map(|s| (s - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let per_run = runs
        .iter()
        .zip(&shares)
        .map(|(flows, s)| {
            format!(
                "sender 0 {}: bpf_bbr {:.2}, bbr {:.2} Mbit/s, share {:.1} %; by 5 s (sender side): {}",
                flows[0].spec.cc,
                mbit(goodput(flows, "bpf_bbr")),
                mbit(goodput(flows, "bbr")),
                100.0 * s,
                windowed_shares(flows, 5.0)
            )
        })
        .collect::<Vec<_>>()
        .join("\n  ");
    let text = format!(
        "shared, {} Mbit/s, {rtt_ms} ms, 1 BDP, {} ABBA runs x {secs} s ({path} path): bpf_bbr's share {:.1} % (mean), sd {:.1} points, standard error {:.1} points\n  {per_run}",
        rate / 1_000_000,
        shares.len(),
        100.0 * m,
        100.0 * sd,
        100.0 * sd / n.sqrt(),
    );
    record(figure, &text);
    for flows in &runs {
        let sum = goodput(flows, "bpf_bbr") + goodput(flows, "bbr");
        assert!(
            sum >= 0.85 * rate as f64,
            "two flows carried {:.2} Mbit/s together, below 85 % of {} Mbit/s: the path does not carry them (is the machine busy?):\n{text}",
            mbit(sum),
            rate / 1_000_000
        );
    }
    assert!(
        (0.45..=0.55).contains(&m),
        "bpf_bbr's mean share {:.1} % is outside 45-55 %:\n{text}",
        100.0 * m
    );
}

/// bpf_bbr's share of the bytes sent in each `window`-second slice of a
/// shared run, from iperf3's sender-side intervals (for the record only).
fn windowed_shares(flows: &[FlowResult], window: f64) -> String {
    let bytes_in = |cc: &str, lo: f64, hi: f64| -> f64 {
        flows
            .iter()
            .filter(|f| f.spec.cc == cc)
            .flat_map(|f| f.intervals.iter())
            .filter(|iv| iv.start >= lo - 1e-3 && iv.end <= hi + 1e-3)
            .map(|iv| iv.bytes as f64)
            .sum()
    };
    let end = flows
        .iter()
        .flat_map(|f| f.intervals.iter())
        .map(|iv| iv.end)
        .fold(0.0, f64::max);
    let mut out = Vec::new();
    let mut lo = 0.0;
    while lo + 0.5 * window < end {
        let (ours, native) = (
            bytes_in("bpf_bbr", lo, lo + window),
            bytes_in("bbr", lo, lo + window),
        );
        if ours + native > 0.0 {
            out.push(format!("{:.0}", 100.0 * ours / (ours + native)));
        }
        lo += window;
    }
    out.join("/") + " %"
}
