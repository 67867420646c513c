//! Parameter sets change atomically: a flow's every ACK acts on one whole
//! set, never half of one and half of another, while a writer replaces the
//! set as fast as it can.
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccctl_core::abi::{self, Plain};
use ccctl_core::{params, pins, registry};
use ccctl_lab::iperf::{self, FlowSpec};
use ccctl_lab::testbed::TestbedConfig;

use super::flows::testbed;
use super::lab::{f64s, strs};
use super::tracing::{u64s, FlowTrace};
use super::{ccctl, Clean};

/// FNV-1a (32 bit) over a set's native-endian u32 words in memory order,
/// written here from the definition (ccctl_abi.h, CCCTL_PARAM_DIGEST_*),
/// not taken from the BPF side.
pub fn digest(p: &abi::ccctl_params) -> u32 {
    p.as_bytes()
        .chunks_exact(4)
        .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
        .fold(2_166_136_261u32, |h, w| (h ^ w).wrapping_mul(16_777_619))
}

/// Two valid modest-bbr sets that differ in every field, so that any mix
/// of them is a third set.
fn the_two_sets() -> [abi::ccctl_params; 2] {
    let a = params::defaults();
    let b = abi::ccctl_params {
        version: 0,
        cwnd_gain: 3 * abi::CCCTL_GAIN_UNIT,
        probe_up_gain: 3 * abi::CCCTL_GAIN_UNIT / 2,
        w_min: 512,
        w_max: 900,
        s_min: 2,
        quiet_rounds: 100,
        dstar_min_rtt_win_ms: 20_000,
        dstar_sigma_factor: abi::CCCTL_GAIN_UNIT,
        dstar_gain_floor: 6,
        dstar_drain_rtts: 3,
        dstar_gain1_rtts: 3,
        dstar_gain2_rtts: 2,
        theta_little: 800,
        theta_heavy: 200,
        off_thresh_us: 2000,
        alpha_little: abi::CCCTL_GAIN_UNIT / 2,
        alpha_medium: 2 * abi::CCCTL_GAIN_UNIT,
        alpha_heavy: 3 * abi::CCCTL_GAIN_UNIT,
        stall_filter: 1,
        divide_after_max: 1,
    };
    [a, b]
}

/// The set the writer put in force as `version`: load writes version 1
/// (defaults), then version v is the_two_sets()[v % 2] with that version.
fn set_of(version: u32) -> abi::ccctl_params {
    abi::ccctl_params {
        version,
        ..the_two_sets()[version as usize % 2]
    }
}

/// The check, on its own so it can be shown to catch a mix: every event's
/// digest is the digest of the set its version names, and in PROBE_BW the
/// cwnd gain the flow applied on that ACK is that set's (the ACK decided
/// on it, not only reported it). The distinct versions seen, or the first
/// event that acted on something else.
fn check_events(
    version: &[u64],
    digests: &[u64],
    probe_bw_cwnd_gain: &[Option<f64>],
) -> Result<usize, String> {
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..version.len() {
        let v = version[i] as u32;
        let want = set_of(v);
        if digests[i] as u32 != digest(&want) {
            return Err(format!(
                "event {i} (version {v}) acted on a set that is not version {v}'s whole set \
                 (digest {:#x}, want {:#x}): half of one set and half of another",
                digests[i],
                digest(&want)
            ));
        }
        let gain = want.cwnd_gain as f64 / abi::CCCTL_GAIN_UNIT as f64;
        if probe_bw_cwnd_gain[i].is_some_and(|g| g != gain) {
            return Err(format!(
                "event {i}: PROBE_BW cwnd gain {:?} is not version {v}'s {gain}",
                probe_bw_cwnd_gain[i]
            ));
        }
        seen.insert(v);
    }
    Ok(seen.len())
}

/// A mix of the two sets (A with B's last two fields, under A's version)
/// has a digest that is neither set's, and `check_events` refuses it; so
/// does a cwnd gain from the other set.
pub fn the_check_refuses_a_mixed_set() {
    let (a, b) = (set_of(2), set_of(3));
    let mut mixed = a;
    mixed.dstar_gain1_rtts = b.dstar_gain1_rtts;
    mixed.dstar_gain2_rtts = b.dstar_gain2_rtts;
    assert_ne!(digest(&mixed), digest(&a));
    assert_ne!(digest(&mixed), digest(&b));
    let (da, db) = (digest(&a) as u64, digest(&b) as u64);
    assert!(check_events(&[2], &[digest(&mixed) as u64], &[None]).is_err());
    assert!(check_events(&[2], &[da], &[Some(3.0)]).is_err());
    assert_eq!(
        check_events(&[2, 3, 3], &[da, db, db], &[Some(2.0), Some(3.0), None]),
        Ok(2)
    );
}

/// modest-bbr loaded; one traced modest_bbr flow for `secs` over `cfg`
/// while a thread of this process writes the two sets alternately, version
/// after version, through ccctl's own write path (`pins::write_params`),
/// as fast as it can. Every event must carry one whole set (its digest is
/// the digest of the set its version names) and, in PROBE_BW, that set's
/// cwnd gain; the trace must have dropped nothing and seen at least 20
/// versions (the writer really raced the flow).
pub fn parameter_sets_change_atomically(cfg: TestbedConfig, secs: u64) {
    the_check_refuses_a_mixed_set();
    let _clean = Clean::new();
    ccctl(&["load", "modest-bbr"]).ok();
    let algo = registry::find("modest-bbr").expect("modest-bbr is built in");
    let dir = super::tempdir("params-atomic");
    let out = dir.join("atomic.parquet");
    let tb = testbed(cfg);
    let trace = FlowTrace::start(&tb, "modest-bbr", &out);

    let stop = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU32::new(1));
    let writer = {
        let (stop, last) = (stop.clone(), last.clone());
        let pins = pins::pin_dir(algo);
        std::thread::spawn(move || {
            let mut v = 1u32;
            while !stop.load(Ordering::Relaxed) {
                v += 1;
                pins::write_params(&pins, &set_of(v)).expect("writing a set");
                last.store(v, Ordering::Relaxed);
            }
        })
    };
    let flows = iperf::spawn_flows(
        &tb,
        &[FlowSpec::new(0, "modest_bbr", Duration::from_secs(secs)).port(trace.port)],
    )
    .expect("flow")
    .wait()
    .expect("the flow finishes");
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer");
    let df = trace.finish();
    let data_port = flows[0].local_port.expect("local port") as u64;
    let sport = u64s(&df, "sport");
    let rows: Vec<usize> = (0..df.height())
        .filter(|&i| sport[i] == data_port)
        .collect();
    let (version, digests) = (u64s(&df, "param_version"), u64s(&df, "param_digest"));
    let (mode, cwnd_gain) = (strs(&df, "bbr_mode"), f64s(&df, "cwnd_gain"));
    let pick = |col: &[u64]| rows.iter().map(|&i| col[i]).collect::<Vec<_>>();
    let probe_bw_gain: Vec<Option<f64>> = rows
        .iter()
        .map(|&i| (mode[i] == "probe_bw").then_some(cwnd_gain[i]).flatten())
        .collect();
    let writes = last.load(Ordering::Relaxed) - 1;
    let distinct = check_events(&pick(&version), &pick(&digests), &probe_bw_gain)
        .unwrap_or_else(|e| panic!("{e}"));
    let probe_bw = probe_bw_gain.iter().filter(|g| g.is_some()).count();
    eprintln!(
        "{} events of the data connection ({probe_bw} in PROBE_BW), {distinct} distinct versions, {writes} writes",
        rows.len()
    );
    assert!(
        rows.len() > 200,
        "{} events for the data connection",
        rows.len()
    );
    assert!(probe_bw > 100, "{probe_bw} PROBE_BW events");
    assert!(
        distinct >= 20,
        "only {distinct} versions among the events: the writer did not race the flow"
    );
    // The writer's last set is what ccctl reads back, whole.
    let now = pins::read_params(&pins::pin_dir(algo)).expect("reading the set");
    assert_eq!(now.as_bytes(), set_of(writes + 1).as_bytes());
}
