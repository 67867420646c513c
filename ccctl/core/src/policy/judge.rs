//! The canary judge: a rule with a share and a control is compared, group
//! against group, from inet_diag counters every `interval`; a breach of any
//! threshold held for `hold` decides a rollback.
//!
//! ```toml
//! [rule.judge]                 # inside a [[rule]] (acted on by `ccctl daemon`)
//! max_rtt_ratio = 1.5          # canary mean srtt / control mean srtt
//! max_retrans_ratio = 3.0      # canary retransmitted / sent segments over the control's
//! min_goodput_ratio = 0.5      # canary per-connection goodput / control's, at least
//! max_goodput_ratio = 2.5      # ... and at most (optional): a canary that takes
//!                              # this many times a control connection's goodput on a
//!                              # shared path is harming the control
//! hold = "10s"                 # a breach must last this long
//! interval = "1s"              # how often the groups are sampled
//! min_flows = 1                # each group needs this many live connections
//! baseline = "30s"             # optional: measure the rule's connections all on the
//!                              # control this long before the canary starts
//! max_control_harm = 0.3       # with a baseline: the harm to the control, against it
//! ```
//!
//! With a `baseline`, `ccctl policy apply` gives every matching connection
//! the control first (state `baseline`); the daemon measures them over
//! intervals with at least `min_flows` connections until they cover
//! `baseline`, keeps the numbers in the applied policy, and only then
//! starts the canary. From then on the harm the canary does to the control
//! is judged against the control before it (harm-vs-fairness.txt, Ware
//! et al.'s harm, x_alone = the control with no canary beside it):
//! goodput harm = 1 - control goodput per connection x connections now /
//! the baseline's total goodput (what the control would get per connection
//! were the path shared among today's connections as it was before: more
//! connections alone is not harm), RTT harm = 1 - baseline srtt / control
//! srtt now. The larger of the two is held against `max_control_harm`.
//! The baseline assumes the path and its demand stay as they were (bulk
//! connections limited by the path, not the application).
//!
//! Per interval and per group, from the connections alive at both ends of
//! it (keyed by the socket cookie): goodput = sum of `bytes_acked` deltas x 8
//! / interval / connections; retransmission ratio = sum of `total_retrans`
//! deltas / sum of `segs_out` deltas; RTT = mean `srtt`. The retransmission
//! ratio of the control is floored at 0.001 (so a clean control does not
//! make any canary retransmission an infinite ratio).
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::HumanDuration;

/// `[rule.judge]` as written; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rtt_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retrans_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_goodput_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_goodput_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<HumanDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<HumanDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_flows: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<HumanDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_control_harm: Option<f64>,
}

/// Validated thresholds (defaults filled in).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub max_rtt_ratio: f64,
    pub max_retrans_ratio: f64,
    pub min_goodput_ratio: f64,
    /// Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_goodput_ratio: Option<f64>,
    pub hold_s: f64,
    pub interval_s: f64,
    pub min_flows: u32,
    /// How long the control alone is measured before the canary starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_s: Option<f64>,
    /// Harm to the control against that baseline, at most (needs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_control_harm: Option<f64>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            max_rtt_ratio: 1.5,
            max_retrans_ratio: 3.0,
            min_goodput_ratio: 0.5,
            max_goodput_ratio: None,
            hold_s: 10.0,
            interval_s: 1.0,
            min_flows: 1,
            baseline_s: None,
            max_control_harm: None,
        }
    }
}

impl Thresholds {
    pub fn interval(&self) -> Duration {
        Duration::from_secs_f64(self.interval_s)
    }
}

impl JudgeSpec {
    /// Validate; `field` is the table's name (`rule[0].judge`), errors name
    /// the key (`rule[0].judge.max_rtt_ratio: ...`).
    pub fn validate(&self, field: &str) -> Result<Thresholds, (String, String)> {
        let d = Thresholds::default();
        let ratio = |k: &str, v: Option<f64>, def: f64, min_excl: f64| match v {
            None => Ok(def),
            Some(x) if x.is_finite() && x > min_excl => Ok(x),
            Some(x) => Err((
                format!("{field}.{k}"),
                format!("{x} is not a ratio above {min_excl}"),
            )),
        };
        let max_rtt_ratio = ratio("max_rtt_ratio", self.max_rtt_ratio, d.max_rtt_ratio, 1.0)?;
        let max_retrans_ratio = ratio(
            "max_retrans_ratio",
            self.max_retrans_ratio,
            d.max_retrans_ratio,
            1.0,
        )?;
        let min_goodput_ratio = ratio(
            "min_goodput_ratio",
            self.min_goodput_ratio,
            d.min_goodput_ratio,
            0.0,
        )?;
        if min_goodput_ratio >= 1.0 {
            return Err((
                format!("{field}.min_goodput_ratio"),
                format!("{min_goodput_ratio} must be below 1 (the canary may not be slower than this share of the control)"),
            ));
        }
        let max_goodput_ratio = match self.max_goodput_ratio {
            None => None,
            Some(x) => Some(ratio("max_goodput_ratio", Some(x), 0.0, 1.0)?),
        };
        let interval_s = self.interval.map_or(d.interval_s, |h| h.0.as_secs_f64());
        if !(0.1..=3600.0).contains(&interval_s) {
            return Err((
                format!("{field}.interval"),
                format!("{interval_s}s is outside 100ms to 1h"),
            ));
        }
        let hold_s = self.hold.map_or(d.hold_s, |h| h.0.as_secs_f64());
        if hold_s < interval_s || hold_s > 86_400.0 {
            return Err((
                format!("{field}.hold"),
                format!(
                    "{hold_s}s must be at least the interval ({interval_s}s) and at most 1 day"
                ),
            ));
        }
        let min_flows = self.min_flows.unwrap_or(d.min_flows);
        if min_flows == 0 {
            return Err((
                format!("{field}.min_flows"),
                "must be at least 1".to_string(),
            ));
        }
        let baseline_s = match self.baseline.map(|h| h.0.as_secs_f64()) {
            None => None,
            Some(b) if b >= interval_s && b <= 86_400.0 => Some(b),
            Some(b) => {
                return Err((
                    format!("{field}.baseline"),
                    format!("{b}s must be at least the interval ({interval_s}s) and at most 1 day"),
                ))
            }
        };
        let max_control_harm =
            match self.max_control_harm {
                None => None,
                Some(h) if !(h.is_finite() && h > 0.0 && h < 1.0) => {
                    return Err((
                        format!("{field}.max_control_harm"),
                        format!("{h} is not a harm between 0 and 1 (both excluded)"),
                    ))
                }
                Some(_) if baseline_s.is_none() => return Err((
                    format!("{field}.max_control_harm"),
                    "needs `baseline`: the harm is measured against the control before the canary"
                        .to_string(),
                )),
                Some(h) => Some(h),
            };
        Ok(Thresholds {
            max_rtt_ratio,
            max_retrans_ratio,
            min_goodput_ratio,
            max_goodput_ratio,
            hold_s,
            interval_s,
            min_flows,
            baseline_s,
            max_control_harm,
        })
    }
}

/// One group's numbers over one interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupSample {
    /// Connections counted (alive at both ends of the interval).
    pub flows: u32,
    /// Mean goodput per connection, bit/s (bytes_acked delta).
    pub goodput_bps: f64,
    /// Mean smoothed RTT, milliseconds.
    pub rtt_ms: f64,
    /// Retransmitted segments / segments sent.
    pub retrans_ratio: f64,
}

/// A connection's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SockCounters {
    pub cookie: u64,
    pub bytes_acked: u64,
    pub segs_out: u32,
    pub total_retrans: u32,
    pub rtt_us: u32,
}

/// Group numbers from two snapshots `dt_s` apart (connections in both).
pub fn group_sample(before: &[SockCounters], now: &[SockCounters], dt_s: f64) -> GroupSample {
    let prev: BTreeMap<u64, &SockCounters> = before.iter().map(|s| (s.cookie, s)).collect();
    let (mut n, mut bytes, mut segs, mut retr, mut rtt) = (0u32, 0u64, 0u64, 0u64, 0f64);
    for s in now {
        let Some(p) = prev.get(&s.cookie) else {
            continue;
        };
        n += 1;
        bytes += s.bytes_acked.saturating_sub(p.bytes_acked);
        segs += u64::from(s.segs_out.wrapping_sub(p.segs_out));
        retr += u64::from(s.total_retrans.saturating_sub(p.total_retrans));
        rtt += f64::from(s.rtt_us) / 1000.0;
    }
    if n == 0 || dt_s <= 0.0 {
        return GroupSample::default();
    }
    GroupSample {
        flows: n,
        goodput_bps: bytes as f64 * 8.0 / dt_s / f64::from(n),
        rtt_ms: rtt / f64::from(n),
        retrans_ratio: if segs == 0 {
            0.0
        } else {
            retr as f64 / segs as f64
        },
    }
}

/// A threshold crossed, with the number measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Breach {
    RttRatio {
        measured: f64,
        limit: f64,
    },
    RetransRatio {
        measured: f64,
        limit: f64,
    },
    GoodputRatio {
        measured: f64,
        limit: f64,
    },
    /// The canary takes more than `limit` times a control connection's goodput.
    GoodputShare {
        measured: f64,
        limit: f64,
    },
    /// The control's harm against its baseline (before the canary) is above `limit`.
    ControlHarm {
        metric: HarmMetric,
        measured: f64,
        limit: f64,
    },
}

/// The harm the canary does to the control connections sharing its path,
/// as the lab's `1 - x_with / x_alone` with `x_alone` taken as a fair
/// share: the two groups' total goodput over their connections. 0 when the
/// control gets its share, toward 1 as the canary takes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ControlHarm {
    pub goodput_harm: f64,
}

impl ControlHarm {
    pub fn of(canary: &GroupSample, control: &GroupSample) -> Option<ControlHarm> {
        let n = f64::from(canary.flows + control.flows);
        let total = canary.goodput_bps * f64::from(canary.flows)
            + control.goodput_bps * f64::from(control.flows);
        if control.flows == 0 || total <= 0.0 {
            return None;
        }
        Some(ControlHarm {
            goodput_harm: 1.0 - control.goodput_bps / (total / n),
        })
    }
}

/// The control measured alone before the canary started: means over the
/// baseline's intervals (each with at least `min_flows` connections).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// Intervals measured and the time they cover, seconds.
    pub intervals: u32,
    pub secs: f64,
    /// Mean connections, and their mean total goodput (bit/s).
    pub flows: f64,
    pub total_goodput_bps: f64,
    /// Mean per-connection goodput (bit/s), srtt (ms), retransmission ratio.
    pub goodput_bps: f64,
    pub rtt_ms: f64,
    pub retrans_ratio: f64,
}

/// Sums a baseline's intervals.
#[derive(Debug, Clone, Default)]
pub struct BaselineMeter {
    intervals: u32,
    secs: f64,
    flows: f64,
    total: f64,
    goodput: f64,
    rtt: f64,
    retrans: f64,
}

impl BaselineMeter {
    /// Count one interval of `dt_s` if it had at least `min_flows`
    /// connections (the control: during the baseline every matching
    /// connection is on it).
    pub fn add(&mut self, g: &GroupSample, dt_s: f64, min_flows: u32) {
        if g.flows < min_flows.max(1) || dt_s <= 0.0 {
            return;
        }
        self.intervals += 1;
        self.secs += dt_s;
        self.flows += f64::from(g.flows);
        self.total += g.goodput_bps * f64::from(g.flows);
        self.goodput += g.goodput_bps;
        self.rtt += g.rtt_ms;
        self.retrans += g.retrans_ratio;
    }

    /// Time covered so far, seconds.
    pub fn secs(&self) -> f64 {
        self.secs
    }

    /// The means, once an interval was counted.
    pub fn baseline(&self) -> Option<Baseline> {
        if self.intervals == 0 {
            return None;
        }
        let n = f64::from(self.intervals);
        Some(Baseline {
            intervals: self.intervals,
            secs: self.secs,
            flows: self.flows / n,
            total_goodput_bps: self.total / n,
            goodput_bps: self.goodput / n,
            rtt_ms: self.rtt / n,
            retrans_ratio: self.retrans / n,
        })
    }
}

/// The harm the canary does to the control against the baseline (see the
/// module's text): 0 when the control fares as before, toward 1 as it
/// loses goodput or its RTT grows; negative when it fares better.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BaselineHarm {
    pub goodput_harm: f64,
    pub rtt_harm: f64,
}

impl BaselineHarm {
    pub fn of(
        canary: &GroupSample,
        control: &GroupSample,
        base: &Baseline,
    ) -> Option<BaselineHarm> {
        if control.flows == 0 || base.total_goodput_bps <= 0.0 {
            return None;
        }
        let now_flows = f64::from(canary.flows + control.flows);
        let expected = base.total_goodput_bps / now_flows;
        let goodput_harm = 1.0 - control.goodput_bps / expected;
        let rtt_harm = if control.rtt_ms > 0.0 && base.rtt_ms > 0.0 {
            1.0 - base.rtt_ms / control.rtt_ms
        } else {
            0.0
        };
        Some(BaselineHarm {
            goodput_harm,
            rtt_harm,
        })
    }

    /// The larger harm and its metric.
    pub fn worst(&self) -> (HarmMetric, f64) {
        if self.rtt_harm > self.goodput_harm {
            (HarmMetric::Rtt, self.rtt_harm)
        } else {
            (HarmMetric::Goodput, self.goodput_harm)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HarmMetric {
    Goodput,
    Rtt,
}

/// What the judge saw at one interval (and, on a rollback, what decided it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub thresholds: Thresholds,
    /// How long the breach had lasted.
    pub held_s: f64,
    pub breaches: Vec<Breach>,
    pub canary: GroupSample,
    pub control: GroupSample,
    pub rtt_ratio: f64,
    pub retrans_ratio: f64,
    pub goodput_ratio: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_harm: Option<ControlHarm>,
    /// The control before the canary, and the harm against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_harm: Option<BaselineHarm>,
}

/// Floor of the control's retransmission ratio in the ratio.
pub const RETRANS_FLOOR: f64 = 0.001;

/// What one interval decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Not enough connections in a group: nothing judged, hold reset.
    Insufficient,
    Healthy(Decision),
    /// A breach, held for less than `hold`.
    Breaching(Decision),
    /// A breach held for `hold`: roll back.
    RollBack(Decision),
}

/// One rule's judge: the time its current breach began.
#[derive(Debug, Clone, Default)]
pub struct Judge {
    breach_since: Option<f64>,
}

impl Judge {
    /// Judge one interval ending at `now_s` (seconds, any monotonic origin);
    /// `baseline`: the control before the canary, if the rule measured one.
    pub fn observe(
        &mut self,
        t: &Thresholds,
        canary: GroupSample,
        control: GroupSample,
        baseline: Option<&Baseline>,
        now_s: f64,
    ) -> Verdict {
        let control_harm = ControlHarm::of(&canary, &control);
        let baseline_harm = baseline.and_then(|b| BaselineHarm::of(&canary, &control, b));
        if canary.flows < t.min_flows || control.flows < t.min_flows {
            self.breach_since = None;
            return Verdict::Insufficient;
        }
        let rtt_ratio = if control.rtt_ms > 0.0 {
            canary.rtt_ms / control.rtt_ms
        } else {
            1.0
        };
        let retrans_ratio = canary.retrans_ratio / control.retrans_ratio.max(RETRANS_FLOOR);
        let goodput_ratio = if control.goodput_bps > 0.0 {
            canary.goodput_bps / control.goodput_bps
        } else {
            1.0
        };
        let mut breaches = Vec::new();
        if rtt_ratio > t.max_rtt_ratio {
            breaches.push(Breach::RttRatio {
                measured: rtt_ratio,
                limit: t.max_rtt_ratio,
            });
        }
        if retrans_ratio > t.max_retrans_ratio {
            breaches.push(Breach::RetransRatio {
                measured: retrans_ratio,
                limit: t.max_retrans_ratio,
            });
        }
        if goodput_ratio < t.min_goodput_ratio {
            breaches.push(Breach::GoodputRatio {
                measured: goodput_ratio,
                limit: t.min_goodput_ratio,
            });
        }
        if let Some(max) = t.max_goodput_ratio.filter(|m| goodput_ratio > *m) {
            breaches.push(Breach::GoodputShare {
                measured: goodput_ratio,
                limit: max,
            });
        }
        if let (Some(limit), Some(h)) = (t.max_control_harm, baseline_harm) {
            let (metric, measured) = h.worst();
            if measured > limit {
                breaches.push(Breach::ControlHarm {
                    metric,
                    measured,
                    limit,
                });
            }
        }
        let since = if breaches.is_empty() {
            self.breach_since = None;
            None
        } else {
            // The breach began an interval before the first one seen.
            Some(*self.breach_since.get_or_insert(now_s - t.interval_s))
        };
        let d = Decision {
            thresholds: *t,
            held_s: since.map_or(0.0, |s| now_s - s),
            breaches,
            canary,
            control,
            rtt_ratio,
            retrans_ratio,
            goodput_ratio,
            control_harm,
            baseline: baseline.copied(),
            baseline_harm,
        };
        match since {
            None => Verdict::Healthy(d),
            Some(_) if d.held_s + 1e-9 >= t.hold_s => Verdict::RollBack(d),
            Some(_) => Verdict::Breaching(d),
        }
    }
}

impl Decision {
    /// `retransmission ratio 7.50 > 3.00 held 3.0s (canary 4 flows ...)`.
    pub fn summary(&self) -> String {
        let b: Vec<String> = self
            .breaches
            .iter()
            .map(|b| match b {
                Breach::RttRatio { measured, limit } => {
                    format!("RTT ratio {measured:.2} > {limit:.2}")
                }
                Breach::RetransRatio { measured, limit } => {
                    format!("retransmission ratio {measured:.2} > {limit:.2}")
                }
                Breach::GoodputRatio { measured, limit } => {
                    format!("goodput ratio {measured:.2} < {limit:.2}")
                }
                Breach::GoodputShare { measured, limit } => {
                    format!("goodput ratio {measured:.2} > {limit:.2} (harm to the control)")
                }
                Breach::ControlHarm {
                    metric,
                    measured,
                    limit,
                } => format!(
                    "control's {} harm against its baseline {measured:.2} > {limit:.2}",
                    match metric {
                        HarmMetric::Goodput => "goodput",
                        HarmMetric::Rtt => "RTT",
                    }
                ),
            })
            .collect();
        format!(
            "canary judge: {} held {:.1}s (hold {:.1}s){}; canary {} flows {:.1} Mbit/s/flow srtt {:.1} ms retrans {:.4}, control {} flows {:.1} Mbit/s/flow srtt {:.1} ms retrans {:.4}",
            b.join(", "),
            self.held_s,
            self.thresholds.hold_s,
            match (self.control_harm, self.baseline_harm, self.baseline) {
                (_, Some(h), Some(b)) => format!(
                    ", control harm against its baseline: goodput {:.2}, RTT {:.2} (baseline {:.1} flows {:.1} Mbit/s in all, srtt {:.1} ms)",
                    h.goodput_harm,
                    h.rtt_harm,
                    b.flows,
                    b.total_goodput_bps / 1e6,
                    b.rtt_ms
                ),
                (Some(h), _, _) => format!(", control harm {:.2}", h.goodput_harm),
                _ => String::new(),
            },
            self.canary.flows,
            self.canary.goodput_bps / 1e6,
            self.canary.rtt_ms,
            self.canary.retrans_ratio,
            self.control.flows,
            self.control.goodput_bps / 1e6,
            self.control.rtt_ms,
            self.control.retrans_ratio,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(flows: u32, goodput: f64, rtt: f64, retrans: f64) -> GroupSample {
        GroupSample {
            flows,
            goodput_bps: goodput,
            rtt_ms: rtt,
            retrans_ratio: retrans,
        }
    }

    fn t() -> Thresholds {
        Thresholds {
            hold_s: 3.0,
            ..Thresholds::default()
        }
    }

    #[test]
    fn a_breach_must_be_held() {
        let mut j = Judge::default();
        let bad = g(4, 1e7, 10.0, 0.05);
        let ctl = g(4, 1e7, 10.0, 0.005);
        assert!(matches!(
            j.observe(&t(), bad, ctl, None, 1.0),
            Verdict::Breaching(_)
        ));
        assert!(matches!(
            j.observe(&t(), bad, ctl, None, 2.0),
            Verdict::Breaching(_)
        ));
        // A healthy interval resets the hold.
        assert!(matches!(
            j.observe(&t(), ctl, ctl, None, 3.0),
            Verdict::Healthy(_)
        ));
        assert!(matches!(
            j.observe(&t(), bad, ctl, None, 4.0),
            Verdict::Breaching(_)
        ));
        assert!(matches!(
            j.observe(&t(), bad, ctl, None, 5.0),
            Verdict::Breaching(_)
        ));
        match j.observe(&t(), bad, ctl, None, 6.0) {
            Verdict::RollBack(d) => {
                assert_eq!(d.held_s, 3.0);
                assert_eq!(
                    d.breaches,
                    vec![Breach::RetransRatio {
                        measured: 10.0,
                        limit: 3.0
                    }]
                );
                assert!(d.summary().contains("retransmission ratio 10.00 > 3.00"));
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn each_threshold_and_too_few_flows() {
        let ctl = g(4, 1e7, 10.0, 0.01);
        let mut j = Judge::default();
        let v = j.observe(&t(), g(4, 1e7, 16.0, 0.01), ctl, None, 1.0);
        assert!(
            matches!(&v, Verdict::Breaching(d) if matches!(d.breaches[..], [Breach::RttRatio { .. }])),
            "{v:?}"
        );
        let v = Judge::default().observe(&t(), g(4, 4e6, 10.0, 0.01), ctl, None, 1.0);
        assert!(
            matches!(&v, Verdict::Breaching(d) if matches!(d.breaches[..], [Breach::GoodputRatio { .. }])),
            "{v:?}"
        );
        let v = Judge::default().observe(&t(), g(4, 2e7, 9.0, 0.02), ctl, None, 1.0);
        assert!(matches!(v, Verdict::Healthy(_)), "{v:?}");
        let share = Thresholds {
            max_goodput_ratio: Some(2.5),
            ..t()
        };
        let v = Judge::default().observe(&share, g(4, 3e7, 10.0, 0.01), ctl, None, 1.0);
        match v {
            Verdict::Breaching(d) => {
                assert!(matches!(d.breaches[..], [Breach::GoodputShare { .. }]));
                // 4 x 30 + 4 x 10 over 8: a fair share is 20; control harm 0.5.
                assert_eq!(d.control_harm, Some(ControlHarm { goodput_harm: 0.5 }));
            }
            v => panic!("{v:?}"),
        }
        let v = Judge::default().observe(&t(), g(0, 0.0, 0.0, 0.0), ctl, None, 1.0);
        assert_eq!(v, Verdict::Insufficient);
        // A clean control: the floor keeps the ratio finite.
        let v = Judge::default().observe(
            &t(),
            g(4, 1e7, 10.0, 0.002),
            g(4, 1e7, 10.0, 0.0),
            None,
            1.0,
        );
        assert!(matches!(v, Verdict::Healthy(d) if d.retrans_ratio == 2.0));
    }

    #[test]
    fn samples_from_deltas() {
        let c = |cookie, bytes, segs, retr, rtt| SockCounters {
            cookie,
            bytes_acked: bytes,
            segs_out: segs,
            total_retrans: retr,
            rtt_us: rtt,
        };
        let before = [c(1, 0, 0, 0, 0), c(2, 1000, 10, 0, 0)];
        // Connection 3 is new: not counted.
        let now = [
            c(1, 1_000_000, 700, 7, 10_000),
            c(2, 1_001_000, 710, 0, 20_000),
            c(3, 5_000_000, 1, 0, 1),
        ];
        let s = group_sample(&before, &now, 2.0);
        assert_eq!(s.flows, 2);
        assert_eq!(s.goodput_bps, 2_000_000.0 * 8.0 / 2.0 / 2.0);
        assert_eq!(s.rtt_ms, 15.0);
        assert_eq!(s.retrans_ratio, 7.0 / 1400.0);
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |spec: JudgeSpec, key: &str| {
            let (f, _) = spec.validate("rule[0].judge").expect_err("refused");
            assert_eq!(f, format!("rule[0].judge.{key}"));
        };
        bad(
            JudgeSpec {
                max_rtt_ratio: Some(0.9),
                ..Default::default()
            },
            "max_rtt_ratio",
        );
        bad(
            JudgeSpec {
                max_retrans_ratio: Some(f64::NAN),
                ..Default::default()
            },
            "max_retrans_ratio",
        );
        bad(
            JudgeSpec {
                min_goodput_ratio: Some(1.2),
                ..Default::default()
            },
            "min_goodput_ratio",
        );
        bad(
            JudgeSpec {
                hold: Some(HumanDuration(Duration::from_millis(500))),
                ..Default::default()
            },
            "hold",
        );
        bad(
            JudgeSpec {
                interval: Some(HumanDuration(Duration::from_millis(10))),
                ..Default::default()
            },
            "interval",
        );
        bad(
            JudgeSpec {
                min_flows: Some(0),
                ..Default::default()
            },
            "min_flows",
        );
        bad(
            JudgeSpec {
                baseline: Some(HumanDuration(Duration::from_millis(500))),
                ..Default::default()
            },
            "baseline",
        );
        bad(
            JudgeSpec {
                baseline: Some(HumanDuration(Duration::from_secs(30))),
                max_control_harm: Some(1.0),
                ..Default::default()
            },
            "max_control_harm",
        );
        bad(
            JudgeSpec {
                baseline: Some(HumanDuration(Duration::from_secs(30))),
                max_control_harm: Some(f64::NAN),
                ..Default::default()
            },
            "max_control_harm",
        );
        // A harm needs the baseline it is measured against.
        let (f, why) = JudgeSpec {
            max_control_harm: Some(0.3),
            ..Default::default()
        }
        .validate("rule[1].judge")
        .expect_err("refused");
        assert_eq!(f, "rule[1].judge.max_control_harm");
        assert!(why.contains("baseline"), "{why}");
        let ok = JudgeSpec::default().validate("x").expect("defaults");
        assert_eq!(ok, Thresholds::default());
        let with = JudgeSpec {
            baseline: Some(HumanDuration(Duration::from_secs(30))),
            max_control_harm: Some(0.3),
            ..Default::default()
        }
        .validate("x")
        .expect("valid");
        assert_eq!(
            (with.baseline_s, with.max_control_harm),
            (Some(30.0), Some(0.3))
        );
    }

    #[test]
    fn baseline_is_the_mean_of_intervals_with_enough_connections() {
        let mut m = BaselineMeter::default();
        assert_eq!(m.baseline(), None);
        m.add(&g(1, 9e7, 5.0, 0.0), 1.0, 2); // too few connections: not counted
        m.add(&g(4, 2.5e7, 12.0, 0.001), 1.0, 2);
        m.add(&g(4, 2.3e7, 14.0, 0.003), 1.0, 2);
        let b = m.baseline().expect("two intervals");
        assert_eq!(b.intervals, 2);
        assert_eq!(m.secs(), 2.0);
        assert_eq!(b.flows, 4.0);
        assert!((b.total_goodput_bps - 9.6e7).abs() < 1.0, "{b:?}");
        assert!((b.goodput_bps - 2.4e7).abs() < 1.0, "{b:?}");
        assert_eq!(b.rtt_ms, 13.0);
        assert!((b.retrans_ratio - 0.002).abs() < 1e-12);
    }

    fn base() -> Baseline {
        // 4 control connections alone: 96 Mbit/s in all, srtt 12 ms.
        Baseline {
            intervals: 4,
            secs: 4.0,
            flows: 4.0,
            total_goodput_bps: 9.6e7,
            goodput_bps: 2.4e7,
            rtt_ms: 12.0,
            retrans_ratio: 0.001,
        }
    }

    fn harm_judge() -> Thresholds {
        Thresholds {
            hold_s: 2.0,
            baseline_s: Some(4.0),
            max_control_harm: Some(0.3),
            ..Thresholds::default()
        }
    }

    #[test]
    fn more_connections_alone_are_not_harm() {
        // 4 more connections, a fair canary: each of the 8 gets 12 Mbit/s,
        // half the baseline's per connection, and no harm.
        let h = BaselineHarm::of(
            &g(4, 1.2e7, 12.0, 0.001),
            &g(4, 1.2e7, 12.0, 0.001),
            &base(),
        )
        .expect("harm");
        assert!(h.goodput_harm.abs() < 1e-9, "{h:?}");
        assert!(h.rtt_harm.abs() < 1e-9, "{h:?}");
        let v = Judge::default().observe(
            &harm_judge(),
            g(4, 1.2e7, 12.0, 0.001),
            g(4, 1.2e7, 12.0, 0.001),
            Some(&base()),
            1.0,
        );
        assert!(matches!(v, Verdict::Healthy(_)), "{v:?}");
    }

    #[test]
    fn a_canary_that_takes_the_controls_goodput_or_queues_it_breaches() {
        // The canary takes 3x: control 6 Mbit/s of the 12 it would get: harm 0.5.
        let mut j = Judge::default();
        let greedy = g(4, 1.8e7, 12.0, 0.001);
        let starved = g(4, 6e6, 12.0, 0.001);
        assert!(matches!(
            j.observe(&harm_judge(), greedy, starved, Some(&base()), 1.0),
            Verdict::Breaching(_)
        ));
        match j.observe(&harm_judge(), greedy, starved, Some(&base()), 2.0) {
            Verdict::RollBack(d) => {
                assert_eq!(
                    d.breaches,
                    vec![Breach::ControlHarm {
                        metric: HarmMetric::Goodput,
                        measured: 0.5,
                        limit: 0.3
                    }]
                );
                assert!(
                    d.summary()
                        .contains("goodput harm against its baseline 0.50 > 0.30"),
                    "{}",
                    d.summary()
                );
            }
            v => panic!("{v:?}"),
        }
        // Same goodput, but the control's srtt doubled: RTT harm 0.5.
        let v = Judge::default().observe(
            &harm_judge(),
            g(4, 1.2e7, 24.0, 0.001),
            g(4, 1.2e7, 24.0, 0.001),
            Some(&base()),
            1.0,
        );
        match v {
            Verdict::Breaching(d) => assert_eq!(
                d.breaches,
                vec![Breach::ControlHarm {
                    metric: HarmMetric::Rtt,
                    measured: 0.5,
                    limit: 0.3
                }]
            ),
            v => panic!("{v:?}"),
        }
        // Without a baseline there is nothing to judge the harm against.
        let v = Judge::default().observe(&harm_judge(), greedy, starved, None, 1.0);
        assert!(matches!(v, Verdict::Healthy(_)), "{v:?}");
    }
}
