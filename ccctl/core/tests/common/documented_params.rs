// Every tunable parameter as the papers and ccctl's docs give it, written
// out by hand: the independent reference the generated table
// (`params::ALL`, from bpf/ccctl_abi.h) is compared with, by the unit test
// `defaults_match_the_version_1_map` and by the parameter fuzz. A change
// of a default or a bound in the header fails both until it is made here
// too, on purpose.
//
// Sources: BBR's cwnd gain 2 and up-probe 1.25 (tcp_bbr.c); Modest BBR
// Sec. III-C (W_min 0.75, W_max 1, S_min 1); TCP D* Fig. 1 and Sec. 3.2.4
// (10 s min-RTT window, deviation factor 2, floor 4, DRAIN 2 / GAIN 1 2 /
// GAIN 2 1 RTTs); patched BBR Pseudocode 2 and Sec. V-C-2 (Θ thresholds
// 2/3 and 1/3, Off threshold 1 ms, alpha 0 / 1 / 2); ccctl's own
// quiet_rounds 64, stall_filter 0 and divide_after_max 0 (eq. 36 as the
// paper writes it; docs/algorithms). Bounds are
// the ranges docs/ and `ccctl tune --help` state.

/// One parameter: name, flag, the algorithms (kernel names) that have it,
/// default, lower bound (exclusive?), upper bound (exclusive?), whole.
pub struct Documented {
    pub name: &'static str,
    pub flag: &'static str,
    pub algos: &'static [&'static str],
    pub default: f64,
    pub min: f64,
    pub min_exclusive: bool,
    pub max: f64,
    pub max_exclusive: bool,
    pub whole: bool,
}

const BBR_FAMILY: &[&str] = &["bpf_bbr", "modest_bbr", "patched_bbr"];
const MODEST: &[&str] = &["modest_bbr"];
const DSTAR: &[&str] = &["dstar"];
const PATCHED: &[&str] = &["patched_bbr"];

const fn p(
    name: &'static str,
    flag: &'static str,
    algos: &'static [&'static str],
    default: f64,
    (min, min_exclusive): (f64, bool),
    (max, max_exclusive): (f64, bool),
    whole: bool,
) -> Documented {
    Documented {
        name,
        flag,
        algos,
        default,
        min,
        min_exclusive,
        max,
        max_exclusive,
        whole,
    }
}

const IN: bool = false;
const EX: bool = true;

pub const DOCUMENTED: &[Documented] = &[
    p(
        "cwnd_gain",
        "cwnd-gain",
        BBR_FAMILY,
        2.0,
        (1.0, IN),
        (4.0, IN),
        false,
    ),
    p(
        "probe_up_gain",
        "probe-up-gain",
        BBR_FAMILY,
        1.25,
        (1.0, IN),
        (2.0, IN),
        false,
    ),
    p("w_min", "wmin", MODEST, 0.75, (0.0, EX), (1.0, EX), false),
    p("w_max", "wmax", MODEST, 1.0, (0.0, EX), (1.0, IN), false),
    p("s_min", "smin", MODEST, 1.0, (1.0, IN), (64.0, IN), true),
    p(
        "quiet_rounds",
        "quiet-rounds",
        MODEST,
        64.0,
        (0.0, IN),
        (1024.0, IN),
        true,
    ),
    p(
        "min_rtt_win_ms",
        "min-rtt-win-ms",
        DSTAR,
        10_000.0,
        (10.0, IN),
        (600_000.0, IN),
        true,
    ),
    p(
        "sigma_factor",
        "sigma-factor",
        DSTAR,
        2.0,
        (0.0, IN),
        (8.0, IN),
        false,
    ),
    p(
        "gain_floor",
        "gain-floor",
        DSTAR,
        4.0,
        (1.0, IN),
        (64.0, IN),
        true,
    ),
    p(
        "drain_rtts",
        "drain-rtts",
        DSTAR,
        2.0,
        (1.0, IN),
        (16.0, IN),
        true,
    ),
    p(
        "gain1_rtts",
        "gain1-rtts",
        DSTAR,
        2.0,
        (1.0, IN),
        (16.0, IN),
        true,
    ),
    p(
        "gain2_rtts",
        "gain2-rtts",
        DSTAR,
        1.0,
        (1.0, IN),
        (16.0, IN),
        true,
    ),
    p(
        "theta_little",
        "theta-little",
        PATCHED,
        2.0 / 3.0,
        (0.0, EX),
        (1.0, IN),
        false,
    ),
    p(
        "theta_heavy",
        "theta-heavy",
        PATCHED,
        1.0 / 3.0,
        (0.0, EX),
        (1.0, EX),
        false,
    ),
    p(
        "off_thresh",
        "off-thresh",
        PATCHED,
        1.0,
        (0.1, IN),
        (100.0, IN),
        false,
    ),
    p(
        "alpha_little",
        "alpha-little",
        PATCHED,
        0.0,
        (0.0, IN),
        (4.0, IN),
        false,
    ),
    p(
        "alpha_medium",
        "alpha-medium",
        PATCHED,
        1.0,
        (0.0, IN),
        (4.0, IN),
        false,
    ),
    p(
        "alpha_heavy",
        "alpha-heavy",
        PATCHED,
        2.0,
        (0.0, IN),
        (4.0, IN),
        false,
    ),
    p(
        "stall_filter",
        "stall-filter",
        PATCHED,
        0.0,
        (0.0, IN),
        (1.0, IN),
        true,
    ),
    p(
        "divide_after_max",
        "divide-after-max",
        PATCHED,
        0.0,
        (0.0, IN),
        (1.0, IN),
        true,
    ),
];

/// The row of `name`; panics naming it if there is none.
pub fn documented(name: &str) -> &'static Documented {
    DOCUMENTED
        .iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| {
            panic!("parameter {name} is not documented in tests/common/documented_params.rs")
        })
}

/// Whether `v` is inside the documented range of `d`.
pub fn in_range(d: &Documented, v: f64) -> bool {
    let lo = if d.min_exclusive {
        v > d.min
    } else {
        v >= d.min
    };
    let hi = if d.max_exclusive {
        v < d.max
    } else {
        v <= d.max
    };
    v.is_finite() && lo && hi && (!d.whole || v.fract() == 0.0)
}
