//! Tunable parameters: real numbers at the CLI and in config files,
//! fixed point in the pinned `params` map (`struct ccctl_params`).
//!
//! Every value is validated here before anything is written, and several
//! values change together in one map update or not at all. The BPF side
//! clamps again on read (bounds in `bbr_core.h` and each variant's source),
//! so a map written by anyone else cannot stall or explode a flow either.
//!
//! The BPF programs look the map up on every ACK, so a write reaches flows
//! that are already running at their next ACK: no reload, no reconnect.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::abi;
use crate::algos::Algorithm;
use crate::error::{Error, Result};
use crate::loader;

/// Scale of Modest BBR's W_min and W_max in the map (`struct ccctl_params`:
/// "x 1024").
pub const W_UNIT: f64 = 1024.0;

/// One parameter: its name, where it lives, its scale and its bounds.
#[derive(Debug, Clone, Copy)]
pub struct ParamDef {
    /// Name in configs, JSON and messages (`cwnd_gain`).
    pub name: &'static str,
    /// Long flag on the command line, without the dashes (`cwnd-gain`).
    pub flag: &'static str,
    pub summary: &'static str,
    /// Unit of the real value, for display (`BDP`, `packets`, ...).
    pub unit: &'static str,
    /// Fixed-point scale in the map (value = real x scale).
    pub scale: f64,
    /// Bounds, in real units; inclusive unless `*_exclusive`.
    pub min: f64,
    pub max: f64,
    pub min_exclusive: bool,
    pub max_exclusive: bool,
    pub default: f64,
    /// Must be a whole number (in real units).
    pub integer: bool,
    get: fn(&abi::ccctl_params) -> u32,
    set: fn(&mut abi::ccctl_params, u32),
}

/// The BBR family's PROBE_BW cwnd gain, every BBR-based algorithm has it.
/// 1 to 4: the same bounds `bbr_core.h` clamps to on every read
/// (`BBR_CWND_GAIN_MIN`, `BBR_CWND_GAIN_MAX`).
pub const CWND_GAIN: ParamDef = ParamDef {
    name: "cwnd_gain",
    flag: "cwnd-gain",
    summary: "PROBE_BW cwnd gain: in-flight cap in BDPs",
    unit: "x BDP",
    scale: abi::CCCTL_GAIN_UNIT as f64,
    min: 1.0,
    max: 4.0,
    min_exclusive: false,
    max_exclusive: false,
    default: 2.0,
    integer: false,
    get: |p| p.cwnd_gain,
    set: |p, v| p.cwnd_gain = v,
};

/// The BBR family's PROBE_BW up-probe pacing gain. 1 to 2: the bounds
/// `bbr_core.h` clamps to on every read (`BBR_PROBE_UP_GAIN_MIN`,
/// `BBR_PROBE_UP_GAIN_MAX`).
pub const PROBE_UP_GAIN: ParamDef = ParamDef {
    name: "probe_up_gain",
    flag: "probe-up-gain",
    summary: "PROBE_BW up-probe pacing gain",
    unit: "x btl_bw",
    scale: abi::CCCTL_GAIN_UNIT as f64,
    min: 1.0,
    max: 2.0,
    min_exclusive: false,
    max_exclusive: false,
    default: 1.25,
    integer: false,
    get: |p| p.probe_up_gain,
    set: |p, v| p.probe_up_gain = v,
};

/// W_min's exclusive floor (the 0 < W_min). The smallest value the
/// map holds is 1/1024, which `modest_bbr.bpf.c` also clamps to
/// (`MODEST_W_MIN_LO`); the search window never goes below 4 packets there.
pub const W_MIN_LO: f64 = 0.0;

/// Modest BBR's W_min, a fraction of the BBR window, x1024 in the map.
/// 0 < W_min < W_max (the pair checked on the resulting set, see
/// [`validate`]).
pub const W_MIN: ParamDef = ParamDef {
    name: "w_min",
    flag: "wmin",
    summary: "Modest BBR: lower end of the window search, fraction of BBR's in-flight window (BtlBw x RTprop)",
    unit: "x BDP",
    scale: W_UNIT,
    min: W_MIN_LO,
    max: 1.0,
    min_exclusive: true,
    max_exclusive: true,
    default: 0.75,
    integer: false,
    get: |p| p.w_min,
    set: |p, v| p.w_min = v,
};

/// Modest BBR's W_max, a fraction of the BBR window, x1024 in the map.
/// W_min < W_max <= 1 (`MODEST_W_MAX_HI`: never above BBR's window).
pub const W_MAX: ParamDef = ParamDef {
    name: "w_max",
    flag: "wmax",
    summary: "Modest BBR: upper end of the window search, fraction of BBR's in-flight window (BtlBw x RTprop)",
    unit: "x BDP",
    scale: W_UNIT,
    min: W_MIN_LO,
    max: 1.0,
    min_exclusive: true,
    max_exclusive: false,
    default: 1.0,
    integer: false,
    get: |p| p.w_max,
    set: |p, v| p.w_max = v,
};

/// Modest BBR's S_min, whole packets, 1 to 64.
pub const S_MIN: ParamDef = ParamDef {
    name: "s_min",
    flag: "smin",
    summary: "Modest BBR: smallest window search step",
    unit: "packets",
    scale: 1.0,
    min: 1.0,
    max: 64.0,
    min_exclusive: false,
    max_exclusive: false,
    default: 1.0,
    integer: true,
    get: |p| p.s_min,
    set: |p, v| p.s_min = v,
};

/// A TCP D* parameter counted in whole units (ms, packets, RTTs), x1 in the
/// map. The bounds are the ones `dstar.bpf.c` clamps to on every read.
#[allow(clippy::too_many_arguments)] // one per ParamDef field that differs
const fn dstar_whole(
    name: &'static str,
    flag: &'static str,
    summary: &'static str,
    unit: &'static str,
    min: f64,
    max: f64,
    default: f64,
    get: fn(&abi::ccctl_params) -> u32,
    set: fn(&mut abi::ccctl_params, u32),
) -> ParamDef {
    ParamDef {
        name,
        flag,
        summary,
        unit,
        scale: 1.0,
        min,
        max,
        min_exclusive: false,
        max_exclusive: false,
        default,
        integer: true,
        get,
        set,
    }
}

/// TCP D*: how long min RTT may go un-refreshed before DRAIN, ms (Fig. 1's
/// 10 s); 10 ms to 10 min (`DSTAR_MIN_RTT_WIN_MS_LO`, `_HI`).
pub const DSTAR_MIN_RTT_WIN: ParamDef = dstar_whole(
    "min_rtt_win_ms",
    "min-rtt-win-ms",
    "TCP D*: min RTT expires after this long without a refresh (then cwnd 4, DRAIN)",
    "ms",
    10.0,
    600_000.0,
    10_000.0,
    |p| p.dstar_min_rtt_win_ms,
    |p, v| p.dstar_min_rtt_win_ms = v,
);

/// TCP D*: gain_cwnd = floor + min(factor x sigma, BDP); x256 in the map,
/// 0 to 8 (`DSTAR_SIGMA_FACTOR_HI`).
pub const DSTAR_SIGMA_FACTOR: ParamDef = ParamDef {
    name: "sigma_factor",
    flag: "sigma-factor",
    summary: "TCP D*: deviation factor, gain_cwnd = floor + min(factor x |BDP - last BDP|, BDP)",
    unit: "x sigma",
    scale: abi::CCCTL_GAIN_UNIT as f64,
    min: 0.0,
    max: 8.0,
    min_exclusive: false,
    max_exclusive: false,
    default: 2.0,
    integer: false,
    get: |p| p.dstar_sigma_factor,
    set: |p, v| p.dstar_sigma_factor = v,
};

/// TCP D*: gain_cwnd's floor, whole packets, 1 to 64.
pub const DSTAR_GAIN_FLOOR: ParamDef = dstar_whole(
    "gain_floor",
    "gain-floor",
    "TCP D*: smallest gain_cwnd, the packets probed above the BDP",
    "packets",
    1.0,
    64.0,
    4.0,
    |p| p.dstar_gain_floor,
    |p, v| p.dstar_gain_floor = v,
);

/// TCP D*: DRAIN's length, whole RTTs, 1 to 16.
pub const DSTAR_DRAIN_RTTS: ParamDef = dstar_whole(
    "drain_rtts",
    "drain-rtts",
    "TCP D*: DRAIN lasts more than this many RTTs",
    "RTTs",
    1.0,
    16.0,
    2.0,
    |p| p.dstar_drain_rtts,
    |p, v| p.dstar_drain_rtts = v,
);

/// TCP D*: GAIN 1's length, whole RTTs, 1 to 16.
pub const DSTAR_GAIN1_RTTS: ParamDef = dstar_whole(
    "gain1_rtts",
    "gain1-rtts",
    "TCP D*: GAIN 1 (settling at the new window) lasts more than this many RTTs",
    "RTTs",
    1.0,
    16.0,
    2.0,
    |p| p.dstar_gain1_rtts,
    |p, v| p.dstar_gain1_rtts = v,
);

/// TCP D*: GAIN 2's length (the delivery-rate measurement), whole RTTs, 1 to 16.
pub const DSTAR_GAIN2_RTTS: ParamDef = dstar_whole(
    "gain2_rtts",
    "gain2-rtts",
    "TCP D*: GAIN 2 (counting delivered packets for eq. 1) lasts more than this many RTTs",
    "RTTs",
    1.0,
    16.0,
    1.0,
    |p| p.dstar_gain2_rtts,
    |p, v| p.dstar_gain2_rtts = v,
);

/// TCP D*'s parameters, in the order `ccctl tune dstar` shows them.
pub const DSTAR: &[ParamDef] = &[
    DSTAR_MIN_RTT_WIN,
    DSTAR_SIGMA_FACTOR,
    DSTAR_GAIN_FLOOR,
    DSTAR_DRAIN_RTTS,
    DSTAR_GAIN1_RTTS,
    DSTAR_GAIN2_RTTS,
];

/// Scale of patched BBR's Θ thresholds in the map (`CCCTL_THETA_UNIT`).
pub const THETA_UNIT: f64 = abi::CCCTL_THETA_UNIT as f64;

/// Patched BBR: Θ above this is case (a), "little" descheduling (eq. 37's
/// and eq. 38's upper threshold), x1024. theta_heavy < theta_little <= 1
/// (the pair checked on the resulting set).
pub const THETA_LITTLE: ParamDef = ParamDef {
    name: "theta_little",
    flag: "theta-little",
    summary: "patched BBR: on-percentage above which descheduling is 'little' (no pacing boost, alpha_little)",
    unit: "Θ",
    scale: THETA_UNIT,
    min: 0.0,
    max: 1.0,
    min_exclusive: true,
    max_exclusive: false,
    default: 0.667,
    integer: false,
    get: |p| p.theta_little,
    set: |p, v| p.theta_little = v,
};

/// Patched BBR: Θ at or below this is case (b), "heavy" (alpha_heavy), x1024.
pub const THETA_HEAVY: ParamDef = ParamDef {
    name: "theta_heavy",
    flag: "theta-heavy",
    summary: "patched BBR: on-percentage at or below which descheduling is 'heavy' (alpha_heavy)",
    unit: "Θ",
    scale: THETA_UNIT,
    min: 0.0,
    max: 1.0,
    min_exclusive: true,
    max_exclusive: true,
    default: 0.333,
    integer: false,
    get: |p| p.theta_heavy,
    set: |p, v| p.theta_heavy = v,
};

/// Patched BBR: a send gap this much longer than the pacing gap is Off
/// (Sec. V-C-2), ms at the CLI, us in the map; 0.1 to 100 ms, the bounds
/// `patched_bbr.bpf.c` clamps to (`PATCHED_OFF_THRESH_US_LO/HI`).
pub const OFF_THRESH: ParamDef = ParamDef {
    name: "off_thresh",
    flag: "off-thresh",
    summary: "patched BBR: a send gap this much longer than the pacing gap counts as Off",
    unit: "ms",
    scale: 1000.0,
    min: 0.1,
    max: 100.0,
    min_exclusive: false,
    max_exclusive: false,
    default: 1.0,
    integer: false,
    get: |p| p.off_thresh_us,
    set: |p, v| p.off_thresh_us = v,
};

const fn alpha(
    name: &'static str,
    flag: &'static str,
    summary: &'static str,
    default: f64,
    get: fn(&abi::ccctl_params) -> u32,
    set: fn(&mut abi::ccctl_params, u32),
) -> ParamDef {
    ParamDef {
        name,
        flag,
        summary,
        unit: "x BDP",
        scale: abi::CCCTL_GAIN_UNIT as f64,
        min: 0.0,
        max: 4.0,
        min_exclusive: false,
        max_exclusive: false,
        default,
        integer: false,
        get,
        set,
    }
}

/// Patched BBR's eq. 38 alpha per descheduling level, added to the PROBE_BW
/// cwnd gain (eq. 39), x256; 0 to 4 (`PATCHED_ALPHA_HI`).
pub const ALPHA_LITTLE: ParamDef = alpha(
    "alpha_little",
    "alpha-little",
    "patched BBR: cwnd gain added when Θ > theta_little (eq. 38)",
    0.0,
    |p| p.alpha_little,
    |p, v| p.alpha_little = v,
);
pub const ALPHA_MEDIUM: ParamDef = alpha(
    "alpha_medium",
    "alpha-medium",
    "patched BBR: cwnd gain added when theta_heavy < Θ <= theta_little (eq. 38)",
    1.0,
    |p| p.alpha_medium,
    |p, v| p.alpha_medium = v,
);
pub const ALPHA_HEAVY: ParamDef = alpha(
    "alpha_heavy",
    "alpha-heavy",
    "patched BBR: cwnd gain added when Θ <= theta_heavy (eq. 38)",
    2.0,
    |p| p.alpha_heavy,
    |p, v| p.alpha_heavy = v,
);

/// Patched BBR: leave the machine's own stalls (a 1 ms heartbeat timer's
/// lateness) out of Off, 0 or 1. For an emulated testbed whose whole machine
/// stalls (our TCG VM on a busy host); a real descheduled VM stalls as a
/// whole too, so there it must stay 0 (the default).
pub const STALL_FILTER: ParamDef = ParamDef {
    name: "stall_filter",
    flag: "stall-filter",
    summary: "patched BBR: 1 leaves the whole machine's stalls (heartbeat timer lateness) out of Off; for emulated testbeds only",
    unit: "0/1",
    scale: 1.0,
    min: 0.0,
    max: 1.0,
    min_exclusive: false,
    max_exclusive: false,
    default: 0.0,
    integer: true,
    get: |p| p.stall_filter,
    set: |p, v| p.stall_filter = v,
};

/// Every parameter any algorithm has, to name unknown ones helpfully.
pub const ALL: &[ParamDef] = &[
    W_MIN,
    W_MAX,
    S_MIN,
    CWND_GAIN,
    PROBE_UP_GAIN,
    DSTAR_MIN_RTT_WIN,
    DSTAR_SIGMA_FACTOR,
    DSTAR_GAIN_FLOOR,
    DSTAR_DRAIN_RTTS,
    DSTAR_GAIN1_RTTS,
    DSTAR_GAIN2_RTTS,
    THETA_LITTLE,
    THETA_HEAVY,
    OFF_THRESH,
    ALPHA_LITTLE,
    ALPHA_MEDIUM,
    ALPHA_HEAVY,
    STALL_FILTER,
];

/// Parameters of each algorithm, by its user name.
pub fn defs_for(algo: &Algorithm) -> &'static [ParamDef] {
    match algo.name {
        "bbr" => &[CWND_GAIN, PROBE_UP_GAIN],
        "modest-bbr" => &[CWND_GAIN, PROBE_UP_GAIN, W_MIN, W_MAX, S_MIN],
        "dstar" => DSTAR,
        "patched-bbr" => &[
            CWND_GAIN,
            PROBE_UP_GAIN,
            THETA_LITTLE,
            THETA_HEAVY,
            OFF_THRESH,
            ALPHA_LITTLE,
            ALPHA_MEDIUM,
            ALPHA_HEAVY,
            STALL_FILTER,
        ],
        _ => &[],
    }
}

/// The definition a config key or flag names: `w_min`, `w-min` or `wmin`.
pub fn lookup<'d>(defs: &'d [ParamDef], key: &str) -> Option<&'d ParamDef> {
    let key = key.trim_start_matches("--");
    let norm = key.replace('-', "_");
    defs.iter().find(|d| d.name == norm || d.flag == key)
}

/// `w_min (--wmin)`, or the key itself when no algorithm has it.
fn label(key: &str) -> String {
    match lookup(ALL, key) {
        Some(d) => d.label(),
        None => key.to_string(),
    }
}

impl ParamDef {
    /// `w_min (--wmin)`.
    pub fn label(&self) -> String {
        format!("{} (--{})", self.name, self.flag)
    }

    /// The allowed range in words: `1 to 4`, `above 0, up to 1`,
    /// `above 0, below 1`.
    pub fn allowed(&self) -> String {
        let lo = if self.min_exclusive {
            format!("above {}", self.min)
        } else if self.max_exclusive {
            format!("from {}", self.min)
        } else {
            format!("{}", self.min)
        };
        let hi = match (self.min_exclusive || self.max_exclusive, self.max_exclusive) {
            (_, true) => format!("below {}", self.max),
            (true, false) => format!("up to {}", self.max),
            (false, false) => format!("{}", self.max),
        };
        let sep = if self.min_exclusive || self.max_exclusive {
            ", "
        } else {
            " to "
        };
        let whole = if self.integer { ", a whole number" } else { "" };
        format!("{lo}{sep}{hi}{whole}")
    }

    /// [`allowed`](Self::allowed), with the constraints between
    /// parameters: `above 0, below w_max` for w_min.
    pub fn allowed_in_set(&self) -> String {
        match self.name {
            "w_min" => format!("above {W_MIN_LO}, below w_max"),
            "w_max" => "above w_min, up to 1".into(),
            "theta_little" => "above theta_heavy, up to 1".into(),
            "theta_heavy" => "above 0, below theta_little".into(),
            _ => self.allowed(),
        }
    }

    /// Real value -> fixed point, or why not.
    pub fn encode(&self, v: f64) -> std::result::Result<u32, String> {
        let allowed = self.allowed();
        if v.is_nan() {
            return Err(format!("{v} is not a number; allowed: {allowed}"));
        }
        if v.is_infinite() {
            return Err(format!("{v} is not a finite number; allowed: {allowed}"));
        }
        let below = if self.min_exclusive {
            v <= self.min
        } else {
            v < self.min
        };
        let above = if self.max_exclusive {
            v >= self.max
        } else {
            v > self.max
        };
        if below || above {
            return Err(format!("{v} is out of range; allowed: {allowed}"));
        }
        if self.integer && v.fract() != 0.0 {
            return Err(format!("{v} must be a whole number; allowed: {allowed}"));
        }
        let raw = (v * self.scale).round();
        let (raw_min, raw_max) = (
            (self.min * self.scale).round(),
            (self.max * self.scale).round(),
        );
        if (self.min_exclusive && raw <= raw_min) || (self.max_exclusive && raw >= raw_max) {
            return Err(format!(
                "{v} rounds to {} in the map's steps of 1/{}; allowed: {allowed}",
                raw / self.scale,
                self.scale
            ));
        }
        Ok(raw as u32)
    }

    pub fn decode(&self, raw: u32) -> f64 {
        raw as f64 / self.scale
    }

    /// The shortest decimal that encodes to `raw` (0.6 for 614/1024, not
    /// 0.599609375): what a user wrote, in the map's resolution.
    pub fn display(&self, raw: u32) -> f64 {
        let exact = self.decode(raw);
        for digits in 0..=6 {
            let p = 10f64.powi(digits);
            let v = (exact * p).round() / p;
            if (v * self.scale).round() == raw as f64 {
                return v;
            }
        }
        exact
    }

    /// Raw value in force: the map's, or the default before any write.
    pub fn raw(&self, p: &abi::ccctl_params) -> u32 {
        if p.version == 0 {
            (self.get)(&loader::default_params())
        } else {
            (self.get)(p)
        }
    }

    pub fn current(&self, p: &abi::ccctl_params) -> f64 {
        self.display(self.raw(p))
    }
}

/// Values in force and defaults, for display.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ParamView {
    pub name: &'static str,
    /// `--flag` on the command line.
    pub flag: String,
    pub value: f64,
    /// Fixed-point value in the map.
    pub raw: u32,
    pub default: f64,
    pub min: f64,
    pub max: f64,
    pub min_exclusive: bool,
    pub max_exclusive: bool,
    pub integer: bool,
    /// The allowed range in words.
    pub allowed: String,
    pub unit: &'static str,
    pub summary: &'static str,
}

/// One algorithm's parameter set, as `ccctl tune --json` prints it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SetView {
    pub algorithm: &'static str,
    pub kernel_name: &'static str,
    /// Bumped on every write; 0 = never written (defaults in force).
    pub version: u32,
    pub params: Vec<ParamView>,
}

/// The view of `p` for `algo`.
pub fn view_of(algo: &Algorithm, p: &abi::ccctl_params) -> SetView {
    SetView {
        algorithm: algo.name,
        kernel_name: algo.kernel_name,
        version: p.version,
        params: defs_for(algo)
            .iter()
            .map(|d| ParamView {
                name: d.name,
                flag: format!("--{}", d.flag),
                value: d.current(p),
                raw: d.raw(p),
                default: d.default,
                min: d.min,
                max: d.max,
                min_exclusive: d.min_exclusive,
                max_exclusive: d.max_exclusive,
                integer: d.integer,
                allowed: d.allowed_in_set(),
                unit: d.unit,
                summary: d.summary,
            })
            .collect(),
    }
}

/// The parameters in force for a loaded `algo`.
pub fn view(algo: &Algorithm) -> Result<SetView> {
    Ok(view_of(algo, &read_loaded(algo)?))
}

/// The map of a loaded algorithm, or `NotLoaded`.
fn read_loaded(algo: &Algorithm) -> Result<abi::ccctl_params> {
    let dir = loader::pin_dir(algo);
    if !has_params(&dir) {
        return Err(Error::NotLoaded {
            algo: algo.name.into(),
        });
    }
    loader::read_params(&dir)
}

/// Serializes read-modify-write cycles (`ccctl tune` against another
/// `ccctl tune` or the daemon's SIGHUP), so a concurrent write is never lost.
/// Held microseconds; released by the kernel when dropped or on exit.
const WRITE_LOCK: &str = "/run/ccctl/params.lock";

fn write_lock() -> Result<ccctl_sys::lock::PidLock> {
    use ccctl_sys::lock::{LockError, PidLock, Wait};
    PidLock::acquire(Path::new(WRITE_LOCK), Wait::Yes).map_err(|e| match e {
        LockError::Io { what, path, source } => Error::Io {
            what: format!("{what} {}", path.display()),
            source,
        },
        // Only non-blocking attempts are refused.
        LockError::Busy { .. } => Error::Io {
            what: format!("locking {WRITE_LOCK}"),
            source: std::io::Error::from(std::io::ErrorKind::WouldBlock),
        },
    })
}

/// A write: the set before and the set written.
#[derive(Debug, Clone, Copy)]
pub struct Change {
    pub before: abi::ccctl_params,
    pub after: abi::ccctl_params,
}

/// Validates every `(name, value)` for `algo` and writes them in one update
/// (version bumped). Nothing is written if any is invalid. Returns the new
/// version.
pub fn apply(algo: &Algorithm, changes: &BTreeMap<String, f64>) -> Result<u32> {
    Ok(update(algo, changes)?.after.version)
}

/// [`apply`], returning the set before and after.
pub fn update(algo: &Algorithm, changes: &BTreeMap<String, f64>) -> Result<Change> {
    resolve(algo, changes)?; // unknown names before "not loaded"
    read_loaded(algo)?;
    let _lock = write_lock()?;
    let before = read_loaded(algo)?;
    let after = validate(algo, changes, &before)?;
    loader::write_params(&loader::pin_dir(algo), &after)?;
    Ok(Change { before, after })
}

fn invalid(algo: &Algorithm, param: String, message: String) -> Error {
    Error::InvalidParam {
        algo: algo.name.into(),
        param,
        message,
    }
}

/// The parameter set `changes` would produce from `current`, or the first
/// problem with the parameter named. Unknown names are reported before any
/// value, and the constraints between parameters (0 < w_min < w_max <= 1)
/// are checked on the resulting set, in the map's fixed point.
pub fn validate(
    algo: &Algorithm,
    changes: &BTreeMap<String, f64>,
    current: &abi::ccctl_params,
) -> Result<abi::ccctl_params> {
    let resolved = resolve(algo, changes)?;
    let mut next = if current.version == 0 {
        loader::default_params()
    } else {
        *current
    };
    for (def, _, v) in &resolved {
        let raw = def.encode(*v).map_err(|m| invalid(algo, def.label(), m))?;
        (def.set)(&mut next, raw);
    }
    check_window(algo, defs_for(algo), &next, &resolved)?;
    check_theta(algo, defs_for(algo), &next, &resolved)?;
    next.version = current.version.wrapping_add(1).max(1);
    Ok(next)
}

/// Each key's definition, or the first key `algo` does not have (with
/// the valid ones listed) or that is given twice.
fn resolve<'c>(
    algo: &Algorithm,
    changes: &'c BTreeMap<String, f64>,
) -> Result<Vec<(&'static ParamDef, &'c str, f64)>> {
    let defs = defs_for(algo);
    let mut resolved: Vec<(&ParamDef, &str, f64)> = Vec::new();
    for (key, &v) in changes {
        let Some(def) = lookup(defs, key) else {
            return Err(invalid(
                algo,
                label(key),
                format!(
                    "not a parameter of {}; valid: {}",
                    algo.name,
                    if defs.is_empty() {
                        "none (it has no tunable parameters)".to_string()
                    } else {
                        defs.iter()
                            .map(|d| d.label())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            ));
        };
        if let Some((_, other, _)) = resolved.iter().find(|(d, _, _)| d.name == def.name) {
            return Err(invalid(
                algo,
                def.label(),
                format!("given twice (as `{other}` and `{key}`)"),
            ));
        }
        resolved.push((def, key, v));
    }
    Ok(resolved)
}

/// 0 < w_min < w_max <= 1 on the set `p` (the single-value bounds already
/// hold for values given now; this catches pairs, and a map someone else
/// wrote). Values given in this call are quoted as given.
fn check_window(
    algo: &Algorithm,
    defs: &[ParamDef],
    p: &abi::ccctl_params,
    given: &[(&ParamDef, &str, f64)],
) -> Result<()> {
    let has = |n: &str| defs.iter().any(|d| d.name == n);
    if !(has(W_MIN.name) && has(W_MAX.name)) {
        return Ok(());
    }
    let shown = |d: &ParamDef| {
        given
            .iter()
            .find(|(g, _, _)| g.name == d.name)
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| d.display((d.get)(p)))
    };
    let (lo, hi) = (p.w_min, p.w_max);
    let rule = format!("allowed: {W_MIN_LO} < w_min < w_max <= 1");
    if (lo as f64) <= W_MIN_LO * W_UNIT || lo as f64 >= W_UNIT {
        return Err(invalid(
            algo,
            W_MIN.label(),
            format!("{} is out of range; {rule}", shown(&W_MIN)),
        ));
    }
    if hi as f64 <= W_MIN_LO * W_UNIT || hi as f64 > W_UNIT {
        return Err(invalid(
            algo,
            W_MAX.label(),
            format!("{} is out of range; {rule}", shown(&W_MAX)),
        ));
    }
    if lo >= hi {
        let (a, b) = (shown(&W_MIN), shown(&W_MAX));
        let note = if a < b {
            format!(" (equal in the map's steps of 1/{W_UNIT})")
        } else {
            String::new()
        };
        return Err(invalid(
            algo,
            format!("{} and {}", W_MIN.label(), W_MAX.label()),
            format!("w_min {a} must be below w_max {b}{note}; {rule}"),
        ));
    }
    Ok(())
}

/// 0 < theta_heavy < theta_little <= 1 on the set `p` (patched BBR's
/// descheduling levels must not overlap), in the map's fixed point.
fn check_theta(
    algo: &Algorithm,
    defs: &[ParamDef],
    p: &abi::ccctl_params,
    given: &[(&ParamDef, &str, f64)],
) -> Result<()> {
    let has = |n: &str| defs.iter().any(|d| d.name == n);
    if !(has(THETA_HEAVY.name) && has(THETA_LITTLE.name)) {
        return Ok(());
    }
    let shown = |d: &ParamDef| {
        given
            .iter()
            .find(|(g, _, _)| g.name == d.name)
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| d.display((d.get)(p)))
    };
    let rule = "allowed: 0 < theta_heavy < theta_little <= 1";
    if p.theta_heavy == 0 || p.theta_heavy as f64 >= THETA_UNIT {
        return Err(invalid(
            algo,
            THETA_HEAVY.label(),
            format!("{} is out of range; {rule}", shown(&THETA_HEAVY)),
        ));
    }
    if p.theta_little == 0 || p.theta_little as f64 > THETA_UNIT {
        return Err(invalid(
            algo,
            THETA_LITTLE.label(),
            format!("{} is out of range; {rule}", shown(&THETA_LITTLE)),
        ));
    }
    if p.theta_heavy >= p.theta_little {
        let (a, b) = (shown(&THETA_HEAVY), shown(&THETA_LITTLE));
        let note = if a < b {
            format!(" (equal in the map's steps of 1/{THETA_UNIT})")
        } else {
            String::new()
        };
        return Err(invalid(
            algo,
            format!("{} and {}", THETA_HEAVY.label(), THETA_LITTLE.label()),
            format!("theta_heavy {a} must be below theta_little {b}{note}; {rule}"),
        ));
    }
    Ok(())
}

/// The first parameter set of a fresh load: defaults with `changes`
/// applied, version 1. Validated like any write, before anything loads.
pub fn initial(algo: &Algorithm, changes: &BTreeMap<String, f64>) -> Result<abi::ccctl_params> {
    validate(algo, changes, &abi::ccctl_params::default())
}

/// Replaces the whole set: defaults with `changes` applied, in one update
/// (what a config file means: unlisted parameters are at their defaults).
pub fn replace(algo: &Algorithm, changes: &BTreeMap<String, f64>) -> Result<u32> {
    read_loaded(algo)?;
    let _lock = write_lock()?;
    let current = read_loaded(algo)?;
    let base = abi::ccctl_params {
        version: current.version,
        ..loader::default_params()
    };
    let next = validate(algo, changes, &base)?;
    loader::write_params(&loader::pin_dir(algo), &next)?;
    Ok(next.version)
}

/// Restores every default (version bumped).
pub fn reset(algo: &Algorithm) -> Result<u32> {
    Ok(reset_change(algo)?.after.version)
}

/// [`reset`], returning the set before and after.
pub fn reset_change(algo: &Algorithm) -> Result<Change> {
    read_loaded(algo)?;
    let _lock = write_lock()?;
    let before = read_loaded(algo)?;
    let mut after = loader::default_params();
    after.version = before.version.wrapping_add(1).max(1);
    loader::write_params(&loader::pin_dir(algo), &after)?;
    Ok(Change { before, after })
}

/// True if `dir` has a params pin (the algorithm is loaded by ccctl).
pub fn has_params(dir: &Path) -> bool {
    dir.join("params").exists()
}

/// Algorithms ccctl has loaded (registered, with a params pin).
pub fn loaded() -> Result<Vec<&'static Algorithm>> {
    let mut out = Vec::new();
    for a in crate::algos::ALGORITHMS {
        if has_params(&loader::pin_dir(a)) && crate::kernel::is_registered(a.kernel_name)? {
            out.push(a);
        }
    }
    Ok(out)
}

/// The one algorithm among `loaded` that has every parameter in `names`
/// (`ccctl tune --wmin 0.7` without an algorithm), or why there is none.
pub fn pick<'a>(
    loaded: &[&'a Algorithm],
    names: &[&str],
) -> std::result::Result<&'a Algorithm, String> {
    if loaded.is_empty() {
        return Err(
            "no ccctl algorithm is loaded; load one with `ccctl load ALGO` (see `ccctl list`)"
                .into(),
        );
    }
    let fits: Vec<&'a Algorithm> = loaded
        .iter()
        .copied()
        .filter(|a| names.iter().all(|n| lookup(defs_for(a), n).is_some()))
        .collect();
    let with_params = |list: &[&Algorithm]| {
        list.iter()
            .map(|a| {
                let ps: Vec<_> = defs_for(a).iter().map(|d| d.name).collect();
                format!(
                    "{} ({})",
                    a.name,
                    if ps.is_empty() {
                        "no parameters".into()
                    } else {
                        ps.join(", ")
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let wanted = if names.is_empty() {
        String::new()
    } else {
        format!(
            " with {}",
            names
                .iter()
                .map(|n| label(n))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    match fits.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "no loaded algorithm has every parameter named{wanted}; loaded: {}",
            with_params(loaded)
        )),
        many => Err(format!(
            "several loaded algorithms fit{wanted}: {}; name one, e.g. `ccctl tune {} ...`",
            with_params(many),
            many[0].name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::{Attached, LoadPlan};

    fn bbr() -> &'static Algorithm {
        crate::algos::find("bbr").expect("bbr exists")
    }

    fn never(_: &LoadPlan<'_>) -> Result<Attached> {
        unreachable!("tests never register")
    }

    /// Parameters depend on the user name only; this stands in for the real
    /// entry whether or not this build has it.
    static MODEST: Algorithm = Algorithm {
        name: "modest-bbr",
        kernel_name: "modest_bbr",
        summary: "test stand-in",
        register: never,
    };

    fn ch(kv: &[(&str, f64)]) -> BTreeMap<String, f64> {
        kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn err(algo: &Algorithm, kv: &[(&str, f64)]) -> String {
        validate(algo, &ch(kv), &loader::default_params())
            .expect_err(&format!("{kv:?} should be refused"))
            .to_string()
    }

    #[test]
    fn encode_checks_range_nan_and_wholeness() {
        assert_eq!(CWND_GAIN.encode(2.0), Ok(512));
        assert_eq!(PROBE_UP_GAIN.encode(1.25), Ok(320));
        assert!(CWND_GAIN
            .encode(f64::NAN)
            .unwrap_err()
            .contains("not a number"));
        assert!(CWND_GAIN
            .encode(f64::INFINITY)
            .unwrap_err()
            .contains("not a finite number"));
        assert!(CWND_GAIN.encode(-1.0).unwrap_err().contains("1 to 4"));
        assert!(CWND_GAIN.encode(4.5).is_err());
        let whole = ParamDef {
            integer: true,
            ..CWND_GAIN
        };
        assert!(whole.encode(2.5).unwrap_err().contains("whole number"));
    }

    #[test]
    fn defaults_match_the_version_1_map() {
        let d = loader::default_params();
        for def in ALL {
            assert_eq!(def.encode(def.default), Ok((def.get)(&d)), "{}", def.name);
            assert_eq!(
                def.current(&abi::ccctl_params::default()),
                def.default,
                "{} at version 0",
                def.name
            );
        }
        assert_eq!((d.w_min, d.w_max, d.s_min), (768, 1024, 1));
    }

    #[test]
    fn display_is_the_shortest_decimal_of_the_fixed_point() {
        let raw = W_MIN.encode(0.6).expect("0.6 is valid");
        assert_eq!(raw, 614);
        assert_eq!(W_MIN.display(raw), 0.6);
        assert_eq!(
            CWND_GAIN.display(CWND_GAIN.encode(1.1).expect("valid")),
            1.1
        );
        assert_eq!(S_MIN.display(7), 7.0);
    }

    #[test]
    fn validate_changes_all_or_nothing_and_bumps_version() {
        let cur = loader::default_params();
        let mut ch = BTreeMap::new();
        ch.insert("cwnd-gain".to_string(), 3.0);
        ch.insert("probe_up_gain".to_string(), 1.5);
        let next = validate(bbr(), &ch, &cur).expect("valid");
        assert_eq!(
            (next.cwnd_gain, next.probe_up_gain, next.version),
            (768, 384, 2)
        );
        ch.insert("probe_up_gain".to_string(), 9.0);
        let e = validate(bbr(), &ch, &cur).expect_err("9.0 is out of range");
        assert!(e.to_string().contains("probe_up_gain"), "{e}");
        ch.clear();
        ch.insert("wmin".to_string(), 0.5);
        let e = validate(bbr(), &ch, &cur).expect_err("bbr has no wmin");
        assert!(
            e.to_string()
                .contains("valid: cwnd_gain (--cwnd-gain), probe_up_gain (--probe-up-gain)"),
            "{e}"
        );
        assert!(e.to_string().contains("w_min (--wmin)"), "{e}");
    }

    #[test]
    fn version_bumps_from_zero_and_wraps_past_zero() {
        let v0 = abi::ccctl_params::default();
        assert_eq!(
            validate(bbr(), &BTreeMap::new(), &v0)
                .expect("valid")
                .version,
            1
        );
        let v7 = abi::ccctl_params {
            version: 7,
            ..loader::default_params()
        };
        assert_eq!(
            validate(bbr(), &ch(&[("cwnd_gain", 3.0)]), &v7)
                .expect("valid")
                .version,
            8
        );
        let top = abi::ccctl_params {
            version: u32::MAX,
            ..loader::default_params()
        };
        assert_eq!(
            validate(bbr(), &BTreeMap::new(), &top)
                .expect("valid")
                .version,
            1,
            "0 would mean never written"
        );
    }

    #[test]
    fn modest_bbr_has_the_window_parameters_and_the_gains() {
        let names: Vec<_> = defs_for(&MODEST).iter().map(|d| d.name).collect();
        assert_eq!(
            names,
            ["cwnd_gain", "probe_up_gain", "w_min", "w_max", "s_min"]
        );
        let next = validate(
            &MODEST,
            &ch(&[
                ("wmin", 0.6),
                ("w_max", 0.9),
                ("smin", 4.0),
                ("cwnd-gain", 2.5),
            ]),
            &loader::default_params(),
        )
        .expect("valid");
        assert_eq!(
            (next.w_min, next.w_max, next.s_min, next.cwnd_gain),
            (614, 922, 4, 640)
        );
        assert_eq!(next.probe_up_gain, 320, "untouched");
    }

    #[test]
    fn w_min_must_stay_below_w_max_on_the_resulting_set() {
        let e = err(&MODEST, &[("w_min", 0.9), ("w_max", 0.8)]);
        assert!(e.contains("w_min 0.9 must be below w_max 0.8"), "{e}");
        assert!(e.contains("0 < w_min < w_max <= 1"), "{e}");
        // Only w_max given, but the set in force has w_min 0.75.
        let e = err(&MODEST, &[("w_max", 0.7)]);
        assert!(e.contains("w_min 0.75 must be below w_max 0.7"), "{e}");
        // ... and lowering both together is fine.
        validate(
            &MODEST,
            &ch(&[("w_min", 0.5), ("w_max", 0.7)]),
            &loader::default_params(),
        )
        .expect("valid pair");
        // Equal is not below.
        assert!(err(&MODEST, &[("w_min", 0.8), ("w_max", 0.8)]).contains("must be below"));
        // Distinct as typed but one step apart is less than the map's resolution.
        let e = err(&MODEST, &[("w_min", 0.9999), ("w_max", 1.0)]);
        assert!(e.contains("w_min (--wmin)"), "{e}");
        for (v, needle) in [
            (0.0, "above 0, below 1"),
            (-0.5, "out of range"),
            (0.0001, "rounds to 0"),
            (1.0, "below 1"),
        ] {
            let e = err(&MODEST, &[("wmin", v)]);
            assert!(
                e.contains("w_min (--wmin)") && e.contains(needle),
                "{v}: {e}"
            );
        }
        assert!(err(&MODEST, &[("wmax", 1.01)]).contains("up to 1"));
        assert!(err(&MODEST, &[("wmax", 0.0)]).contains("above 0, up to 1"));
        let e = err(&MODEST, &[("w_min", 0.1), ("wmax", 0.10005)]);
        assert!(
            e.contains("must be below") && e.contains("equal in the map's steps"),
            "{e}"
        );
        validate(
            &MODEST,
            &ch(&[("w_min", 0.01), ("w_max", 0.02)]),
            &loader::default_params(),
        )
        .expect("the smallest window search");
        // A map someone else wrote with the pair inverted is not made worse.
        let bad = abi::ccctl_params {
            version: 3,
            w_min: 1000,
            w_max: 500,
            ..loader::default_params()
        };
        let e = validate(&MODEST, &ch(&[("cwnd_gain", 3.0)]), &bad)
            .expect_err("inverted pair in force");
        assert!(e.to_string().contains("must be below"), "{e}");
        // bbr ignores the window fields.
        validate(bbr(), &ch(&[("cwnd_gain", 3.0)]), &bad).expect("bbr has no window");
    }

    #[test]
    fn s_min_is_a_whole_number_of_packets_from_1_to_64() {
        for ok in [1.0, 2.0, 64.0] {
            validate(&MODEST, &ch(&[("s_min", ok)]), &loader::default_params())
                .expect("valid s_min");
        }
        assert!(err(&MODEST, &[("smin", 1.5)]).contains("whole number"));
        for bad in [0.0, 65.0, -1.0] {
            let e = err(&MODEST, &[("smin", bad)]);
            assert!(
                e.contains("s_min (--smin)") && e.contains("1 to 64"),
                "{bad}: {e}"
            );
        }
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(err(&MODEST, &[("smin", bad)]).contains("s_min (--smin)"));
        }
    }

    #[test]
    fn unknown_names_are_reported_first_and_list_the_valid_ones() {
        let e = err(&MODEST, &[("cwnd_gain", f64::NAN), ("theta", 1.0)]);
        assert!(e.contains("`theta`: not a parameter of modest-bbr"), "{e}");
        assert!(
            e.contains("valid: cwnd_gain (--cwnd-gain), probe_up_gain (--probe-up-gain), w_min (--wmin), w_max (--wmax), s_min (--smin)"),
            "{e}"
        );
        let e = err(&MODEST, &[("w_min", 0.5), ("wmin", 0.6)]);
        assert!(e.contains("given twice"), "{e}");
    }

    #[test]
    fn pick_infers_the_one_loaded_algorithm_with_every_parameter() {
        let b = bbr();
        assert_eq!(
            pick(&[b, &MODEST], &["w_min"]).map(|a| a.name),
            Ok("modest-bbr")
        );
        assert_eq!(pick(&[b], &["cwnd_gain"]).map(|a| a.name), Ok("bbr"));
        assert_eq!(pick(&[&MODEST], &[]).map(|a| a.name), Ok("modest-bbr"));
        let e = pick(&[b, &MODEST], &["cwnd_gain"])
            .map(|a| a.name)
            .expect_err("both have it");
        assert!(
            e.contains("several") && e.contains("bbr (") && e.contains("modest-bbr ("),
            "{e}"
        );
        let e = pick(&[b], &["w_min"])
            .map(|a| a.name)
            .expect_err("bbr has no w_min");
        assert!(
            e.contains("w_min (--wmin)") && e.contains("loaded: bbr (cwnd_gain, probe_up_gain)"),
            "{e}"
        );
        assert!(pick(&[], &["w_min"])
            .map(|a| a.name)
            .expect_err("nothing loaded")
            .contains("no ccctl algorithm is loaded"));
    }
}
