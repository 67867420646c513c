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
//! ```
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
        Ok(Thresholds {
            max_rtt_ratio,
            max_retrans_ratio,
            min_goodput_ratio,
            max_goodput_ratio,
            hold_s,
            interval_s,
            min_flows,
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
    /// Judge one interval ending at `now_s` (seconds, any monotonic origin).
    pub fn observe(
        &mut self,
        t: &Thresholds,
        canary: GroupSample,
        control: GroupSample,
        now_s: f64,
    ) -> Verdict {
        let control_harm = ControlHarm::of(&canary, &control);
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
            })
            .collect();
        format!(
            "canary judge: {} held {:.1}s (hold {:.1}s){}; canary {} flows {:.1} Mbit/s/flow srtt {:.1} ms retrans {:.4}, control {} flows {:.1} Mbit/s/flow srtt {:.1} ms retrans {:.4}",
            b.join(", "),
            self.held_s,
            self.thresholds.hold_s,
            self.control_harm
                .map(|h| format!(", control harm {:.2}", h.goodput_harm))
                .unwrap_or_default(),
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
            j.observe(&t(), bad, ctl, 1.0),
            Verdict::Breaching(_)
        ));
        assert!(matches!(
            j.observe(&t(), bad, ctl, 2.0),
            Verdict::Breaching(_)
        ));
        // A healthy interval resets the hold.
        assert!(matches!(
            j.observe(&t(), ctl, ctl, 3.0),
            Verdict::Healthy(_)
        ));
        assert!(matches!(
            j.observe(&t(), bad, ctl, 4.0),
            Verdict::Breaching(_)
        ));
        assert!(matches!(
            j.observe(&t(), bad, ctl, 5.0),
            Verdict::Breaching(_)
        ));
        match j.observe(&t(), bad, ctl, 6.0) {
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
        let v = j.observe(&t(), g(4, 1e7, 16.0, 0.01), ctl, 1.0);
        assert!(
            matches!(&v, Verdict::Breaching(d) if matches!(d.breaches[..], [Breach::RttRatio { .. }])),
            "{v:?}"
        );
        let v = Judge::default().observe(&t(), g(4, 4e6, 10.0, 0.01), ctl, 1.0);
        assert!(
            matches!(&v, Verdict::Breaching(d) if matches!(d.breaches[..], [Breach::GoodputRatio { .. }])),
            "{v:?}"
        );
        let v = Judge::default().observe(&t(), g(4, 2e7, 9.0, 0.02), ctl, 1.0);
        assert!(matches!(v, Verdict::Healthy(_)), "{v:?}");
        let share = Thresholds {
            max_goodput_ratio: Some(2.5),
            ..t()
        };
        let v = Judge::default().observe(&share, g(4, 3e7, 10.0, 0.01), ctl, 1.0);
        match v {
            Verdict::Breaching(d) => {
                assert!(matches!(d.breaches[..], [Breach::GoodputShare { .. }]));
                // 4 x 30 + 4 x 10 over 8: a fair share is 20; control harm 0.5.
                assert_eq!(d.control_harm, Some(ControlHarm { goodput_harm: 0.5 }));
            }
            v => panic!("{v:?}"),
        }
        let v = Judge::default().observe(&t(), g(0, 0.0, 0.0, 0.0), ctl, 1.0);
        assert_eq!(v, Verdict::Insufficient);
        // A clean control: the floor keeps the ratio finite.
        let v = Judge::default().observe(&t(), g(4, 1e7, 10.0, 0.002), g(4, 1e7, 10.0, 0.0), 1.0);
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
        let ok = JudgeSpec::default().validate("x").expect("defaults");
        assert_eq!(ok, Thresholds::default());
    }
}
