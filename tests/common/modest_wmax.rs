//! Modest BBR's W_max bounds the searched proportion everywhere (Sec. III-B:
//! Proportion in [W_min, W_max]), read from the per-ACK trace.
use std::time::Duration;

use ccctl_lab::iperf::{self, FlowSpec};
use ccctl_lab::testbed::TestbedConfig;

use super::flows::testbed;
use super::lab::{f64s, strs};
use super::tracing::{u64s, FlowTrace};
use super::{ccctl, Clean};

/// W_max 0.8 as the map holds it: round(0.8 x 1024).
const W_MAX_FIXED: u64 = 819;
/// BBR's smallest window, packets: the one place the search may sit above
/// W_max x last_cwnd.
const MIN_CWND: u64 = 4;
/// BBR's largest PROBE_BW pacing gain at the default up-probe gain.
const PROBE_UP_GAIN: f64 = 1.25;

/// modest-bbr loaded with W_min 0.5, W_max 0.8; one traced modest_bbr flow
/// beside a Cubic flow (which keeps the shallow buffer overflowing, so
/// searches start again and again) for `secs`. On every event of the
/// search (PROBE_BW, phase binary or linear): the searched upper bound
/// `max_win` is at most max(4, last_cwnd x 0.8); with the connection in
/// the Open state (packet conservation, which sets cwnd itself, is over)
/// cwnd is too; and the pacing gain is at most 1.25 x 0.8 (eq. 1's
/// proportion applied to BBR's highest gain), wherever last_cwnd x 0.8 is
/// above the 4-packet floor. The linear phase must have been reached (that
/// is where the old code climbed back to 1.0 x last_cwnd).
pub fn w_max_bounds_the_search(cfg: TestbedConfig, secs: u64) {
    let _clean = Clean::new();
    ccctl(&["load", "modest-bbr", "--wmin", "0.5", "--wmax", "0.8"]).ok();
    let dir = super::tempdir("modest-wmax");
    let out = dir.join("wmax.parquet");
    let tb = testbed(cfg);
    let trace = FlowTrace::start(&tb, "modest-bbr", &out);
    let flows = iperf::spawn_flows(
        &tb,
        &[
            FlowSpec::new(0, "modest_bbr", Duration::from_secs(secs)).port(trace.port),
            FlowSpec::new(1, "cubic", Duration::from_secs(secs)),
        ],
    )
    .expect("flows")
    .wait()
    .expect("the flows finish");
    let df = trace.finish();
    let data_port = flows[0].local_port.expect("local port") as u64;
    let sport = u64s(&df, "sport");
    let (cwnd, ca_state) = (u64s(&df, "cwnd"), u64s(&df, "ca_state"));
    let (max_win, last_cwnd) = (u64s(&df, "max_win"), u64s(&df, "last_cwnd"));
    let (phase, mode) = (strs(&df, "modest_phase"), strs(&df, "bbr_mode"));
    let gain = f64s(&df, "pacing_gain");
    let (mut searching, mut linear, mut open_checked, mut gain_checked) = (0, 0, 0, 0);
    for i in 0..df.height() {
        if sport[i] != data_port || mode[i] != "probe_bw" {
            continue;
        }
        if phase[i] != "binary" && phase[i] != "linear" {
            continue;
        }
        searching += 1;
        linear += usize::from(phase[i] == "linear");
        let top_exact = last_cwnd[i] * W_MAX_FIXED / 1024;
        let top = top_exact.max(MIN_CWND);
        assert!(
            max_win[i] <= top,
            "event {i} ({}): max_win {} above W_max x last_cwnd = {top} (last_cwnd {})",
            phase[i],
            max_win[i],
            last_cwnd[i]
        );
        if ca_state[i] == 0 {
            open_checked += 1;
            assert!(
                cwnd[i] <= top,
                "event {i} ({}): cwnd {} above W_max x last_cwnd = {top} (last_cwnd {})",
                phase[i],
                cwnd[i],
                last_cwnd[i]
            );
        }
        if top_exact >= MIN_CWND {
            let g = gain[i].expect("pacing_gain on a modest_bbr row");
            gain_checked += 1;
            assert!(
                g <= PROBE_UP_GAIN * W_MAX_FIXED as f64 / 1024.0 + 1.0 / 256.0,
                "event {i} ({}): pacing gain {g} above 1.25 x W_max",
                phase[i]
            );
        }
    }
    eprintln!(
        "{searching} search events ({linear} linear, {open_checked} in Open, {gain_checked} with the gain checked); modest {:.2} Mbit/s, cubic {:.2} Mbit/s",
        flows[0].goodput_bps / 1e6,
        flows[1].goodput_bps / 1e6
    );
    assert!(linear > 50, "only {linear} linear-phase events");
    assert!(open_checked > 100, "only {open_checked} Open search events");
    assert!(gain_checked > 100, "only {gain_checked} gain checks");
}
