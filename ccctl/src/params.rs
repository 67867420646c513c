//! Tunable parameters: real numbers at the CLI and in config files,
//! fixed point in the pinned `params` map (`struct ccctl_params`).
//!
//! Every value is validated here before anything is written, and several
//! values change together in one map update or not at all. The BPF side
//! clamps again on read (bounds in `bbr_core.h`), so a map written by anyone
//! else cannot stall or explode a flow either.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::abi;
use crate::algos::Algorithm;
use crate::error::{Error, Result};
use crate::loader;

/// One parameter: its name, where it lives, its scale and its bounds.
#[derive(Debug, Clone, Copy)]
pub struct ParamDef {
    /// Name on the command line (`--cwnd-gain`) and in configs (`cwnd_gain`).
    pub name: &'static str,
    pub summary: &'static str,
    /// Fixed-point scale in the map (value = real x scale).
    pub scale: f64,
    /// Inclusive bounds, in real units.
    pub min: f64,
    pub max: f64,
    pub default: f64,
    /// Must be a whole number (in real units).
    pub integer: bool,
    get: fn(&abi::ccctl_params) -> u32,
    set: fn(&mut abi::ccctl_params, u32),
}

/// The BBR family's gains: every BBR-based algorithm has them.
pub const CWND_GAIN: ParamDef = ParamDef {
    name: "cwnd_gain",
    summary: "PROBE_BW cwnd gain: in-flight cap in BDPs",
    scale: abi::CCCTL_GAIN_UNIT as f64,
    min: 1.0,
    max: 4.0,
    default: 2.0,
    integer: false,
    get: |p| p.cwnd_gain,
    set: |p, v| p.cwnd_gain = v,
};

pub const PROBE_UP_GAIN: ParamDef = ParamDef {
    name: "probe_up_gain",
    summary: "PROBE_BW up-probe pacing gain",
    scale: abi::CCCTL_GAIN_UNIT as f64,
    min: 1.0,
    max: 2.0,
    default: 1.25,
    integer: false,
    get: |p| p.probe_up_gain,
    set: |p, v| p.probe_up_gain = v,
};

/// Parameters of each algorithm, by its user name.
pub fn defs_for(algo: &Algorithm) -> &'static [ParamDef] {
    match algo.name {
        "bbr" => &[CWND_GAIN, PROBE_UP_GAIN],
        _ => &[],
    }
}

impl ParamDef {
    /// Real value -> fixed point, or why not.
    pub fn encode(&self, v: f64) -> std::result::Result<u32, String> {
        if !v.is_finite() {
            return Err(format!("{v} is not a number; allowed: {} to {}", self.min, self.max));
        }
        if v < self.min || v > self.max {
            return Err(format!("{v} is out of range; allowed: {} to {}", self.min, self.max));
        }
        if self.integer && v.fract() != 0.0 {
            return Err(format!("{v} must be a whole number ({} to {})", self.min, self.max));
        }
        Ok((v * self.scale).round() as u32)
    }

    pub fn decode(&self, raw: u32) -> f64 {
        raw as f64 / self.scale
    }

    pub fn current(&self, p: &abi::ccctl_params) -> f64 {
        if p.version == 0 {
            self.default
        } else {
            self.decode((self.get)(p))
        }
    }
}

/// Values in force and defaults, for display.
#[derive(Debug, Serialize)]
pub struct ParamView {
    pub name: &'static str,
    pub value: f64,
    pub default: f64,
    pub min: f64,
    pub max: f64,
    pub summary: &'static str,
}

pub fn view(algo: &Algorithm) -> Result<(u32, Vec<ParamView>)> {
    let p = loader::read_params(&loader::pin_dir(algo))?;
    Ok((
        p.version,
        defs_for(algo)
            .iter()
            .map(|d| ParamView {
                name: d.name,
                value: d.current(&p),
                default: d.default,
                min: d.min,
                max: d.max,
                summary: d.summary,
            })
            .collect(),
    ))
}

/// Validates every `(name, value)` for `algo` and writes them in one update
/// (version bumped). Nothing is written if any is invalid. Returns the new
/// version.
pub fn apply(algo: &Algorithm, changes: &BTreeMap<String, f64>) -> Result<u32> {
    let dir = loader::pin_dir(algo);
    let next = validate(algo, changes, &loader::read_params(&dir)?)?;
    loader::write_params(&dir, &next)?;
    Ok(next.version)
}

/// The parameter set `changes` would produce from `current`, or the first
/// problem with the parameter named.
pub fn validate(
    algo: &Algorithm,
    changes: &BTreeMap<String, f64>,
    current: &abi::ccctl_params,
) -> Result<abi::ccctl_params> {
    let defs = defs_for(algo);
    let mut next = if current.version == 0 { loader::default_params() } else { *current };
    for (name, &v) in changes {
        let key = name.replace('-', "_");
        let def = defs.iter().find(|d| d.name == key).ok_or_else(|| Error::InvalidParam {
            algo: algo.name.into(),
            param: name.clone(),
            message: format!(
                "not a parameter of {}; valid: {}",
                algo.name,
                defs.iter().map(|d| d.name).collect::<Vec<_>>().join(", ")
            ),
        })?;
        let raw = def.encode(v).map_err(|message| Error::InvalidParam {
            algo: algo.name.into(),
            param: def.name.into(),
            message,
        })?;
        (def.set)(&mut next, raw);
    }
    next.version = current.version.wrapping_add(1).max(1);
    Ok(next)
}

/// Replaces the whole set: defaults with `changes` applied, in one update
/// (what a config file means: unlisted parameters are at their defaults).
pub fn replace(algo: &Algorithm, changes: &BTreeMap<String, f64>) -> Result<u32> {
    let dir = loader::pin_dir(algo);
    let current = loader::read_params(&dir)?;
    let base = abi::ccctl_params {
        version: current.version,
        ..loader::default_params()
    };
    let next = validate(algo, changes, &base)?;
    loader::write_params(&dir, &next)?;
    Ok(next.version)
}

/// Restores every default (version bumped).
pub fn reset(algo: &Algorithm) -> Result<u32> {
    let dir = loader::pin_dir(algo);
    let current = loader::read_params(&dir)?;
    let mut next = loader::default_params();
    next.version = current.version.wrapping_add(1).max(1);
    loader::write_params(&dir, &next)?;
    Ok(next.version)
}

/// True if `dir` has a params pin (the algorithm is loaded by ccctl).
pub fn has_params(dir: &Path) -> bool {
    dir.join("params").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bbr() -> &'static Algorithm {
        crate::algos::find("bbr").expect("bbr exists")
    }

    #[test]
    fn encode_checks_range_nan_and_wholeness() {
        assert_eq!(CWND_GAIN.encode(2.0), Ok(512));
        assert_eq!(PROBE_UP_GAIN.encode(1.25), Ok(320));
        assert!(CWND_GAIN.encode(f64::NAN).unwrap_err().contains("not a number"));
        assert!(CWND_GAIN.encode(f64::INFINITY).is_err());
        assert!(CWND_GAIN.encode(-1.0).unwrap_err().contains("1 to 4"));
        assert!(CWND_GAIN.encode(4.5).is_err());
        let whole = ParamDef { integer: true, ..CWND_GAIN };
        assert!(whole.encode(2.5).unwrap_err().contains("whole number"));
    }

    #[test]
    fn validate_changes_all_or_nothing_and_bumps_version() {
        let cur = loader::default_params();
        let mut ch = BTreeMap::new();
        ch.insert("cwnd-gain".to_string(), 3.0);
        ch.insert("probe_up_gain".to_string(), 1.5);
        let next = validate(bbr(), &ch, &cur).expect("valid");
        assert_eq!((next.cwnd_gain, next.probe_up_gain, next.version), (768, 384, 2));
        ch.insert("probe_up_gain".to_string(), 9.0);
        let e = validate(bbr(), &ch, &cur).expect_err("9.0 is out of range");
        assert!(e.to_string().contains("probe_up_gain"), "{e}");
        ch.clear();
        ch.insert("wmin".to_string(), 0.5);
        let e = validate(bbr(), &ch, &cur).expect_err("bbr has no wmin");
        assert!(e.to_string().contains("valid: cwnd_gain, probe_up_gain"), "{e}");
    }
}
