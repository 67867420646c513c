//! From a scenario to the list of testbed runs ("jobs") the lab executes.
//!
//! For every link setting of the sweep, in this order:
//!
//! 1. **calibration**: one Cubic flow over a deep buffer (2 BDP), no loss, tail
//!    drop, on that link's rate and RTT, then the same with one flow of the
//!    kernel's BBR, which paces (the paced reference: a testbed whose timers
//!    fire late cannot pace, and a BBR-family algorithm measured there is
//!    measuring the timers). If either gets less than [`CALIBRATION_SHARE`]
//!    of the configured rate, every result on that link is marked
//!    `testbed-limited`: the testbed, not the algorithm, is the bottleneck
//!    (an emulated CPU that cannot keep up looks like an inefficient
//!    congestion control otherwise).
//! 2. **main** runs: each match-up x each repetition, repetition-major, the
//!    match-ups in reverse order on odd repetitions (A B, B A, A B ...: a
//!    drift of the testbed, and whatever a run inherits from the one before
//!    it, hits every match-up alike).
//! 3. **baselines** (unless `baselines = false`), once per link and shared by
//!    every match-up and repetition on it:
//!    - `solo`: each distinct flow (cc, RTT, duration) alone on the link, the
//!      `x` of Ware et al.'s harm;
//!    - `same-cc`: for a match-up mixing algorithms, the same flow layout with
//!      every flow running β, for each β in it: the β-vs-β run behind
//!      harm-vs-fairness `m_h`.
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::scenario::{Aqm, FlowPlan, LinkSetting, Scenario, FRAME_BYTES};
use ccctl_core::units::Buffer;

/// Calibration passes when the reference flow gets this share of the rate.
pub const CALIBRATION_SHARE: f64 = 0.85;
/// Reference flow length: long enough for Cubic to fill 2 BDP at tens of
/// Mbit/s and 100 ms, short enough to repeat at every link setting.
const CALIBRATION_DURATION: Duration = Duration::from_secs(10);
/// Its warm-up cut (Cubic's slow start is over well before this).
const CALIBRATION_WARMUP: Duration = Duration::from_secs(2);
/// Floor of the reference buffer, in full-size packets.
const CALIBRATION_MIN_PACKETS: u64 = 64;
/// The reference congestion control: the kernel default everywhere.
pub const CALIBRATION_CC: &str = "cubic";
/// The paced reference: the kernel's BBR (built in or a module on every
/// kernel we run on), paced by TCP's own pacing timer as ours are.
pub const PACED_CALIBRATION_CC: &str = "bbr";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    Calibration,
    Main,
    Solo,
    SameCc,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Calibration => "calibration",
            JobKind::Main => "main",
            JobKind::Solo => "solo",
            JobKind::SameCc => "same-cc",
        }
    }
}

/// One testbed run.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    /// `run_id` in every output file.
    pub id: usize,
    pub kind: JobKind,
    /// The scenario link setting this job belongs to.
    pub link_index: usize,
    /// The link as configured for this job (calibration: 2 BDP, no loss).
    pub link: LinkSetting,
    /// Match-up index (main runs and same-cc baselines).
    pub matchup: Option<usize>,
    pub repetition: u32,
    pub flows: Vec<FlowPlan>,
    pub duration: Duration,
    pub warmup: Duration,
}

impl Job {
    /// Wall time the job occupies the testbed (flows plus setup slack).
    pub fn expected_secs(&self) -> f64 {
        self.duration.as_secs_f64() + 3.0 + 0.1 * self.flows.len() as f64
    }
}

/// Where each main flow finds its baselines.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Baselines {
    /// link_index -> calibration job id.
    pub calibration: BTreeMap<usize, usize>,
    /// link_index -> paced calibration job id.
    pub paced_calibration: BTreeMap<usize, usize>,
    /// (link_index, flow key) -> solo job id.
    pub solo: BTreeMap<(usize, String), usize>,
    /// (link_index, layout key) -> same-cc job id.
    pub same_cc: BTreeMap<(usize, String), usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub jobs: Vec<Job>,
    pub baselines: Baselines,
}

/// `~on/off us` of a gated sender, empty for one that is always On.
fn schedule_key(f: &FlowPlan) -> String {
    f.schedule
        .map(|s| format!("~{}/{}us", s.on.0.as_micros(), s.off.0.as_micros()))
        .unwrap_or_default()
}

/// Identity of a flow for solo reuse: cc, RTT, sender schedule and length.
pub fn solo_key(f: &FlowPlan) -> String {
    format!(
        "{}@{}us{}/{}ms",
        f.cc,
        f.rtt.as_micros(),
        schedule_key(f),
        f.duration.as_millis()
    )
}

/// Identity of a flow layout (starts, lengths, RTTs) run entirely with `cc`.
pub fn same_cc_key(flows: &[FlowPlan], cc: &str) -> String {
    let parts: Vec<String> = flows
        .iter()
        .map(|f| {
            format!(
                "{}ms+{}ms@{}us{}",
                f.start.as_millis(),
                f.duration.as_millis(),
                f.rtt.as_micros(),
                schedule_key(f)
            )
        })
        .collect();
    format!("{cc}:[{}]", parts.join(","))
}

/// Whether a flow set mixes congestion controls (and so has harm baselines).
pub fn is_mixed(flows: &[FlowPlan]) -> bool {
    flows.windows(2).any(|w| w[0].cc != w[1].cc)
}

/// The reference link for calibrating `link`: same rate and RTT, 2 BDP, no
/// loss, tail drop.
/// (at least CALIBRATION_MIN_PACKETS, for links with a tiny or zero RTT)
fn calibration_link(link: &LinkSetting) -> LinkSetting {
    let buffer = Buffer::Bdp(2.0);
    LinkSetting {
        rate: link.rate,
        rtt: link.rtt,
        buffer,
        buffer_bytes: buffer
            .bytes(link.rate, link.rtt.0, FRAME_BYTES)
            .max(CALIBRATION_MIN_PACKETS * FRAME_BYTES),
        loss: 0.0,
        aqm: Aqm::TailDrop,
        ip: link.ip,
        reverse_rate: None,
        trace: None,
        reorder: None,
    }
}

pub fn plan(sc: &Scenario) -> Plan {
    let mut jobs: Vec<Job> = Vec::new();
    let mut baselines = Baselines::default();
    let push = |jobs: &mut Vec<Job>, mut job: Job| -> usize {
        job.id = jobs.len();
        jobs.push(job);
        jobs.len() - 1
    };
    for (li, link) in sc.link_settings().into_iter().enumerate() {
        // The reference depends on rate and RTT only (its buffer is always
        // 2 BDP): links of a buffer sweep share one.
        let same_reference = jobs.iter().find(|j: &&Job| {
            j.kind == JobKind::Calibration && j.link.rate == link.rate && j.link.rtt == link.rtt
        });
        if let Some(cal) = same_reference {
            baselines.calibration.insert(li, cal.id);
            let paced = cal.id + 1;
            baselines.paced_calibration.insert(li, paced);
        } else {
            let duration = CALIBRATION_DURATION.min(sc.duration.0);
            for cc in [CALIBRATION_CC, PACED_CALIBRATION_CC] {
                let cal = Job {
                    id: 0,
                    kind: JobKind::Calibration,
                    link_index: li,
                    link: calibration_link(&link),
                    matchup: None,
                    repetition: 0,
                    flows: vec![FlowPlan {
                        cc: cc.into(),
                        start: Duration::ZERO,
                        duration,
                        rtt: link.rtt.0,
                        schedule: None,
                        drop: Vec::new(),
                    }],
                    duration,
                    warmup: CALIBRATION_WARMUP.min(sc.warmup.0).min(duration / 3),
                };
                let id = push(&mut jobs, cal);
                if cc == CALIBRATION_CC {
                    baselines.calibration.insert(li, id);
                } else {
                    baselines.paced_calibration.insert(li, id);
                }
            }
        }

        let mut wanted_solo: Vec<FlowPlan> = Vec::new();
        let mut wanted_same: Vec<(usize, Vec<FlowPlan>)> = Vec::new();
        let matchups: Vec<Vec<FlowPlan>> = sc
            .matchups()
            .into_iter()
            .map(|groups| sc.flow_plans(groups, &link))
            .collect();
        // Repetition-major, the match-ups' order reversed on every other
        // repetition (A B C, C B A, A B C ...): a drift of the testbed over
        // the run hits every match-up alike, and so does whatever a run
        // inherits from the one before it. With a fixed order (A B A B)
        // the one-flow patched_bbr/bpf_bbr pair of patched-no-gate read a
        // mean RTT ratio of 1.048 with patched_bbr first and 0.954 with
        // bpf_bbr first, the same day: the first run of a pair, right after
        // a five-flow run, read 55-64 ms where the others read 52
        // (docs/notebook/2026-11-28-consumer-and-run-order.md).
        for rep in 0..sc.repetitions {
            let order: Vec<usize> = if rep % 2 == 0 {
                (0..matchups.len()).collect()
            } else {
                (0..matchups.len()).rev().collect()
            };
            for m in order {
                let flows = &matchups[m];
                push(
                    &mut jobs,
                    Job {
                        id: 0,
                        kind: JobKind::Main,
                        link_index: li,
                        link: link.clone(),
                        matchup: Some(m),
                        repetition: rep,
                        flows: flows.clone(),
                        duration: sc.duration.0,
                        warmup: sc.warmup.0,
                    },
                );
            }
        }
        for (m, flows) in matchups.into_iter().enumerate() {
            if !sc.baselines {
                continue;
            }
            let wanted =
                |cc: &str| sc.baselines_for.is_empty() || sc.baselines_for.iter().any(|b| b == cc);
            for f in flows.iter().filter(|f| wanted(&f.cc)) {
                if !wanted_solo.iter().any(|w| solo_key(w) == solo_key(f)) {
                    wanted_solo.push(f.clone());
                }
            }
            if is_mixed(&flows) {
                let mut ccs: Vec<&str> = flows.iter().map(|f| f.cc.as_str()).collect();
                ccs.dedup();
                ccs.sort_unstable();
                ccs.dedup();
                for cc in ccs.into_iter().filter(|cc| wanted(cc)) {
                    let same: Vec<FlowPlan> = flows
                        .iter()
                        .map(|f| FlowPlan {
                            cc: cc.to_string(),
                            ..f.clone()
                        })
                        .collect();
                    if !wanted_same
                        .iter()
                        .any(|(_, w)| same_cc_key(w, &w[0].cc) == same_cc_key(&same, cc))
                    {
                        wanted_same.push((m, same));
                    }
                }
            }
        }
        for f in wanted_solo {
            let key = solo_key(&f);
            let job = Job {
                id: 0,
                kind: JobKind::Solo,
                link_index: li,
                link: link.clone(),
                matchup: None,
                repetition: 0,
                duration: f.duration,
                warmup: sc.warmup.0.min(f.duration / 2),
                flows: vec![FlowPlan {
                    start: Duration::ZERO,
                    ..f
                }],
            };
            let id = push(&mut jobs, job);
            baselines.solo.insert((li, key), id);
        }
        for (m, flows) in wanted_same {
            let key = same_cc_key(&flows, &flows[0].cc);
            let job = Job {
                id: 0,
                kind: JobKind::SameCc,
                link_index: li,
                link: link.clone(),
                matchup: Some(m),
                repetition: 0,
                flows,
                duration: sc.duration.0,
                warmup: sc.warmup.0,
            };
            let id = push(&mut jobs, job);
            baselines.same_cc.insert((li, key), id);
        }
    }
    Plan { jobs, baselines }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(extra: &str) -> Scenario {
        Scenario::from_toml(&format!(
            "name = \"t\"\nduration = \"20s\"\n{extra}\n[link]\nrate = \"20mbit\"\nrtt = \"40ms\"\nbuffer = \"1bdp\"\n"
        ))
        .expect("valid scenario")
    }

    #[test]
    fn repetitions_interleave_the_matchups_in_alternating_order() {
        let sc = scenario(
            "repetitions = 3\nbaselines = false\n[sweep]\nflows = [\"cubic:1, reno:1\", \"bbr:1, cubic:1\"]",
        );
        let order: Vec<(u32, Option<usize>)> = plan(&sc)
            .jobs
            .iter()
            .filter(|j| j.kind == JobKind::Main)
            .map(|j| (j.repetition, j.matchup))
            .collect();
        assert_eq!(
            order,
            [
                (0, Some(0)),
                (0, Some(1)),
                (1, Some(1)),
                (1, Some(0)),
                (2, Some(0)),
                (2, Some(1))
            ]
        );
    }

    #[test]
    fn baselines_are_planned_once_per_link_and_shared() {
        let sc = scenario(
            "repetitions = 2\n[sweep]\nflows = [\"cubic:1, reno:1\", \"bbr:1, cubic:1\"]\nbuffer = [\"0.5bdp\", \"2bdp\"]",
        );
        let p = plan(&sc);
        let count = |k: JobKind| p.jobs.iter().filter(|j| j.kind == k).count();
        assert_eq!(
            count(JobKind::Calibration),
            2,
            "buffers share the rate x RTT references (Cubic, and the paced one)"
        );
        assert_eq!(p.baselines.calibration[&0], p.baselines.calibration[&1]);
        assert_eq!(
            p.baselines.paced_calibration[&0],
            p.baselines.paced_calibration[&1]
        );
        let paced = &p.jobs[p.baselines.paced_calibration[&1]];
        assert_eq!(paced.flows[0].cc, PACED_CALIBRATION_CC);
        assert_eq!(
            p.jobs[p.baselines.calibration[&1]].flows[0].cc,
            CALIBRATION_CC
        );
        assert_eq!(count(JobKind::Main), 2 * 2 * 2);
        // Solo cubic is shared by both match-ups: cubic, reno, bbr per link.
        assert_eq!(count(JobKind::Solo), 2 * 3);
        // same-cc: cubic x2 layout shared; reno x2, bbr x2 -> 3 per link.
        assert_eq!(count(JobKind::SameCc), 2 * 3);
        let same: Vec<&str> = p
            .jobs
            .iter()
            .filter(|j| j.kind == JobKind::SameCc && j.link_index == 0)
            .map(|j| j.flows[0].cc.as_str())
            .collect();
        assert_eq!(same, ["cubic", "reno", "bbr"]);
        assert!(p.jobs.iter().enumerate().all(|(i, j)| j.id == i));
        let cal = &p.jobs[p.baselines.calibration[&1]];
        assert_eq!(cal.link.buffer, Buffer::Bdp(2.0));
        assert_eq!(cal.link.buffer_bytes, 200_000, "2 x 20 Mbit/s x 40 ms");
        assert_eq!(cal.duration, Duration::from_secs(10));
    }

    #[test]
    fn baselines_for_keeps_only_the_named_algorithms_baselines() {
        let sc = scenario(
            "baselines_for = [\"cubic\", \"reno\"]\n[sweep]\nflows = [\"cubic:1, reno:1\", \"bbr:1, cubic:1\"]",
        );
        let p = plan(&sc);
        let ccs = |k: JobKind| -> Vec<String> {
            p.jobs
                .iter()
                .filter(|j| j.kind == k)
                .map(|j| {
                    j.flows
                        .iter()
                        .map(|f| f.cc.as_str())
                        .collect::<Vec<_>>()
                        .join("+")
                })
                .collect()
        };
        // bbr (the harming α of the second match-up) gets neither a solo
        // run nor a bbr-vs-bbr run; cubic's solo and cubic x2 are shared.
        assert_eq!(ccs(JobKind::Solo), ["cubic", "reno"]);
        assert_eq!(ccs(JobKind::SameCc), ["cubic+cubic", "reno+reno"]);
        assert_eq!(ccs(JobKind::Main), ["cubic+reno", "bbr+cubic"]);
        let e = Scenario::from_toml(
            "name = \"t\"\nduration = \"20s\"\nflows = \"cubic:1, bbr:1\"\nbaselines_for = [\"reno\"]\n[link]\nrate = \"20mbit\"\nrtt = \"40ms\"\nbuffer = \"1bdp\"\n",
        )
        .expect_err("reno runs in no match-up");
        assert_eq!(e.field, "baselines_for[0]");
        let e = Scenario::from_toml(
            "name = \"t\"\nduration = \"20s\"\nflows = \"cubic:1, bbr:1\"\nbaselines = false\nbaselines_for = [\"cubic\"]\n[link]\nrate = \"20mbit\"\nrtt = \"40ms\"\nbuffer = \"1bdp\"\n",
        )
        .expect_err("no baselines at all");
        assert_eq!(e.field, "baselines_for");
    }

    #[test]
    fn homogeneous_runs_need_no_same_cc_baseline_and_can_skip_all() {
        let p = plan(&scenario("flows = \"cubic:2\""));
        assert_eq!(
            p.jobs.iter().filter(|j| j.kind == JobKind::SameCc).count(),
            0
        );
        assert_eq!(p.jobs.iter().filter(|j| j.kind == JobKind::Solo).count(), 1);
        let p = plan(&scenario("flows = \"cubic:1, bbr:1\"\nbaselines = false"));
        let kinds: Vec<JobKind> = p.jobs.iter().map(|j| j.kind).collect();
        assert_eq!(
            kinds,
            [JobKind::Calibration, JobKind::Calibration, JobKind::Main]
        );
    }

    #[test]
    fn late_flows_get_their_own_solo_length() {
        let p = plan(&scenario(
            "[[flows]]\ncc = \"cubic\"\n[[flows]]\ncc = \"bbr\"\nstart = \"5s\"\nrtt = \"80ms\"",
        ));
        let solo: Vec<&Job> = p.jobs.iter().filter(|j| j.kind == JobKind::Solo).collect();
        assert_eq!(solo.len(), 2);
        assert_eq!(solo[1].flows[0].start, Duration::ZERO);
        assert_eq!(solo[1].duration, Duration::from_secs(15));
        assert_eq!(solo[1].flows[0].rtt, Duration::from_millis(80));
    }
}
