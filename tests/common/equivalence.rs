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
    ccctl(&["load", "bbr"]).ok();
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
