//! Turns job records into the numbers the lab reports, with the warm-up cut.
//!
//! Per flow, over `[start + warmup, start + duration]` of that flow:
//! - goodput: bytes the receiver acknowledged (`tcpi_bytes_acked`) between
//!   the first and last socket sample of the window, over their time span;
//!   iperf3's per-second sender intervals when there are no samples;
//! - retransmitted segments (`tcpi_total_retrans` difference);
//! - mean and p95 (nearest rank) of the smoothed RTT samples; min RTT is the
//!   kernel's windowed minimum (`tcpi_min_rtt`) over the whole flow.
//!
//! Per main-run flow, against its baselines (see [`super::plan`]):
//! - Ware harm `(x - y) / x` for goodput and `(y - x) / x` for mean RTT, `x`
//!   from the flow's solo run;
//! - harm-vs-fairness eq. 2: `m_f = eq2(m(β), m(α))` with `m(α)` the mean
//!   goodput of the flows of other algorithms in the run; `m_h(tput) =
//!   eq2(m(β), m(β₁))` with `β₁` the same flow position in the β-vs-β run.
//!   For RTT, less is better, so `m_h(RTT) = eq2(rtt(β₁), rtt(β))`: negative
//!   again means the competitor harmed β.
//!
//! Per run: Jain's index over the flows' goodputs, link utilization (the
//! bits the flows delivered in their windows over what the configured rate
//! carries from the first window's start to the last one's end), the ping
//! prober's mean RTT after the warm-up, bottleneck drops.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::metrics;

use super::exec::{FlowRecord, JobRecord};
use super::plan::{self, JobKind, Plan, CALIBRATION_SHARE};

/// Shortest sampled span that yields a goodput (a few sampling periods).
const MIN_SPAN_SECS: f64 = 0.5;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FlowMetrics {
    pub goodput_bps: Option<f64>,
    /// Retransmitted segments after the warm-up.
    pub retransmits: Option<u64>,
    /// Retransmitted segments over the whole flow (iperf3).
    pub retransmits_total: u64,
    pub mean_rtt_ms: Option<f64>,
    pub p95_rtt_ms: Option<f64>,
    pub min_rtt_ms: Option<f64>,
    /// Samples inside the window.
    pub samples: usize,
    /// `inet_diag` or `iperf3`: where goodput came from.
    pub source: &'static str,
}

/// A flow's metrics over its post-warm-up window.
pub fn flow_metrics(f: &FlowRecord, warmup: f64) -> FlowMetrics {
    let start = f.plan.start.as_secs_f64();
    let from = start + warmup;
    let to = start + f.plan.duration.as_secs_f64() + 0.05;
    let window: Vec<_> = f
        .samples
        .iter()
        .filter(|s| s.t >= from && s.t <= to)
        .collect();
    let mut m = FlowMetrics {
        retransmits_total: f.result.retransmits,
        samples: window.len(),
        ..Default::default()
    };
    if let (Some(first), Some(last)) = (window.first(), window.last()) {
        let span = last.t - first.t;
        if let (Some(a), Some(b)) = (first.info.bytes_acked, last.info.bytes_acked) {
            if span >= MIN_SPAN_SECS && b >= a {
                m.goodput_bps = metrics::goodput_bps(b - a, span);
                m.source = "inet_diag";
            }
        }
        m.retransmits = Some(
            last.info
                .total_retrans
                .saturating_sub(first.info.total_retrans) as u64,
        );
        let rtts: Vec<f64> = window
            .iter()
            .filter(|s| s.info.rtt_us > 0)
            .map(|s| s.info.rtt_us as f64 / 1e3)
            .collect();
        m.mean_rtt_ms = metrics::mean(&rtts);
        m.p95_rtt_ms = metrics::percentile(&rtts, 95.0);
    }
    m.min_rtt_ms = f
        .samples
        .iter()
        .filter_map(|s| s.info.min_rtt_us)
        .filter(|&r| r > 0 && r != u32::MAX)
        .min()
        .map(|r| r as f64 / 1e3)
        .or(f.result.min_rtt_us.map(|r| r as f64 / 1e3));
    if m.goodput_bps.is_none() {
        // No usable samples: iperf3's sender-side intervals after the warm-up.
        let iv: Vec<_> = f
            .result
            .intervals
            .iter()
            .filter(|i| i.start >= warmup - 1e-6)
            .collect();
        let secs: f64 = iv.iter().map(|i| i.end - i.start).sum();
        let bytes: u64 = iv.iter().map(|i| i.bytes).sum();
        m.goodput_bps = metrics::goodput_bps(bytes, secs).or(Some(f.result.goodput_bps));
        m.retransmits = m
            .retransmits
            .or_else(|| iv.iter().map(|i| i.retransmits).sum());
        if m.mean_rtt_ms.is_none() {
            m.mean_rtt_ms = f.result.mean_rtt_us.map(|r| r as f64 / 1e3);
        }
        m.source = "iperf3";
    }
    m
}

/// One row of `summary.parquet`: a flow, or (flow = None) a whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SummaryRow {
    pub level: &'static str,
    pub run_id: usize,
    pub kind: &'static str,
    pub link_index: usize,
    pub rate_bps: f64,
    pub rtt_ms: f64,
    pub buffer: String,
    pub buffer_bytes: u64,
    pub loss: f64,
    pub aqm: String,
    pub matchup: Option<usize>,
    pub repetition: u32,
    pub flow: Option<usize>,
    pub cc: String,
    pub start_s: Option<f64>,
    pub duration_s: f64,
    pub flow_rtt_ms: Option<f64>,
    /// The flow's sender On/Off gate (the ground truth of Θ), if gated.
    pub schedule_on_ms: Option<f64>,
    pub schedule_off_ms: Option<f64>,
    /// The gate's on-percentage On / (On + Off) (the patched-BBR paper eq. 11).
    pub schedule_theta: Option<f64>,
    pub metrics: FlowMetrics,
    pub share: Option<f64>,
    pub harm_tput: Option<f64>,
    pub harm_rtt: Option<f64>,
    pub m_f_tput: Option<f64>,
    pub m_h_tput: Option<f64>,
    pub m_h_rtt: Option<f64>,
    pub jain_index: Option<f64>,
    pub utilization: Option<f64>,
    /// Mean RTT of the run's ping prober after the warm-up (run rows).
    pub ping_rtt_ms: Option<f64>,
    pub bottleneck_drops: Option<u64>,
    pub reference_bps: Option<f64>,
    pub testbed_limited: bool,
}

/// Calibration result of one link setting.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    pub link_index: usize,
    pub rate_bps: f64,
    pub reference_bps: Option<f64>,
    pub share: Option<f64>,
    /// The paced reference (the kernel's BBR alone): its goodput and share.
    #[serde(default)]
    pub paced_bps: Option<f64>,
    #[serde(default)]
    pub paced_share: Option<f64>,
    pub testbed_limited: bool,
}

pub struct Analysis {
    pub rows: Vec<SummaryRow>,
    pub calibrations: Vec<Calibration>,
}

pub fn analyze(plan: &Plan, records: &[JobRecord]) -> Analysis {
    let by_id: BTreeMap<usize, &JobRecord> = records.iter().map(|r| (r.job.id, r)).collect();
    let metrics_of = |r: &JobRecord| -> Vec<FlowMetrics> {
        let w = r.job.warmup.as_secs_f64();
        r.flows.iter().map(|f| flow_metrics(f, w)).collect()
    };
    let cache: BTreeMap<usize, Vec<FlowMetrics>> =
        records.iter().map(|r| (r.job.id, metrics_of(r))).collect();

    let calibrations: Vec<Calibration> = plan
        .baselines
        .calibration
        .iter()
        .map(|(&li, id)| {
            let rate = plan.jobs[*id].link.rate.0;
            let reference = cache
                .get(id)
                .and_then(|m| m.first())
                .and_then(|m| m.goodput_bps);
            let share = reference.map(|r| r / rate);
            let paced_id = plan.baselines.paced_calibration.get(&li);
            let paced = paced_id
                .and_then(|id| cache.get(id))
                .and_then(|m| m.first())
                .and_then(|m| m.goodput_bps);
            let paced_share = paced.map(|r| r / rate);
            // Plans written before the paced reference have none to miss.
            let paced_short =
                paced_id.is_some() && paced_share.is_none_or(|s| s < CALIBRATION_SHARE);
            Calibration {
                link_index: li,
                rate_bps: rate,
                reference_bps: reference,
                share,
                paced_bps: paced,
                paced_share,
                // No reference figure (run failed) counts as limited too.
                testbed_limited: share.is_none_or(|s| s < CALIBRATION_SHARE) || paced_short,
            }
        })
        .collect();
    let cal_of = |li: usize| calibrations.iter().find(|c| c.link_index == li);

    let mut rows = Vec::new();
    for rec in records {
        let job = &rec.job;
        let Some(ms) = cache.get(&job.id) else {
            continue;
        };
        let cal = cal_of(job.link_index);
        let base = SummaryRow {
            level: "flow",
            run_id: job.id,
            kind: job.kind.as_str(),
            link_index: job.link_index,
            rate_bps: job.link.rate.0,
            rtt_ms: job.link.rtt.0.as_secs_f64() * 1e3,
            buffer: job.link.buffer.to_string(),
            buffer_bytes: job.link.buffer_bytes,
            loss: job.link.loss,
            aqm: format!("{:?}", job.link.aqm),
            matchup: job.matchup,
            repetition: job.repetition,
            duration_s: job.duration.as_secs_f64(),
            reference_bps: cal.and_then(|c| c.reference_bps),
            // A link the references found short, or a run the emulator
            // fell behind in (packets dropped before the emulated path, or
            // too many read late).
            testbed_limited: cal.is_none_or(|c| c.testbed_limited)
                || rec.path.as_ref().is_some_and(|p| p.fell_behind()),
            ..Default::default()
        };
        let goodputs: Vec<f64> = ms.iter().filter_map(|m| m.goodput_bps).collect();
        let total: f64 = goodputs.iter().sum();
        for (i, (f, m)) in rec.flows.iter().zip(ms).enumerate() {
            let mut row = SummaryRow {
                flow: Some(i),
                cc: f.plan.cc.clone(),
                start_s: Some(f.plan.start.as_secs_f64()),
                duration_s: f.plan.duration.as_secs_f64(),
                flow_rtt_ms: Some(f.plan.rtt.as_secs_f64() * 1e3),
                schedule_on_ms: f.plan.schedule.map(|s| s.on.0.as_secs_f64() * 1e3),
                schedule_off_ms: f.plan.schedule.map(|s| s.off.0.as_secs_f64() * 1e3),
                schedule_theta: f.plan.schedule.map(|s| s.theta()),
                metrics: m.clone(),
                share: m.goodput_bps.filter(|_| total > 0.0).map(|g| g / total),
                ..base.clone()
            };
            if job.kind == JobKind::Main {
                harm_against_baselines(&mut row, plan, rec, i, ms, &by_id, &cache);
            }
            rows.push(row);
        }
        rows.push(SummaryRow {
            level: "run",
            cc: run_label(rec),
            metrics: FlowMetrics {
                goodput_bps: (!goodputs.is_empty()).then_some(total),
                retransmits: ms.iter().map(|m| m.retransmits).sum(),
                retransmits_total: ms.iter().map(|m| m.retransmits_total).sum(),
                samples: ms.iter().map(|m| m.samples).sum(),
                ..Default::default()
            },
            jain_index: metrics::jain_fairness(&goodputs).filter(|_| goodputs.len() == ms.len()),
            utilization: run_utilization(rec, ms),
            ping_rtt_ms: ping_rtt(rec),
            bottleneck_drops: rec.bottleneck.as_ref().map(|q| q.drops),
            ..base
        });
    }
    Analysis { rows, calibrations }
}

/// The mean RTT of the run's pings after the warm-up, up to the run's end:
/// what Flent's ping through the bottleneck reports.
fn ping_rtt(rec: &JobRecord) -> Option<f64> {
    let (from, to) = (rec.job.warmup.as_secs_f64(), rec.job.duration.as_secs_f64());
    let rtts: Vec<f64> = rec
        .ping
        .iter()
        .filter(|p| p.t >= from && p.t <= to)
        .map(|p| p.rtt_ms)
        .collect();
    metrics::mean(&rtts)
}

/// The run's link utilization (see the top of this file): each flow's
/// goodput counts for the window it was measured over, `[start + warmup,
/// start + duration]`, against the span from the earliest window start to
/// the latest end.
fn run_utilization(rec: &JobRecord, ms: &[FlowMetrics]) -> Option<f64> {
    let warmup = rec.job.warmup.as_secs_f64();
    let windows: Vec<(f64, f64)> = rec
        .flows
        .iter()
        .map(|f| {
            let start = f.plan.start.as_secs_f64();
            let end = start + f.plan.duration.as_secs_f64();
            ((start + warmup).min(end), end)
        })
        .collect();
    let from = windows.iter().map(|w| w.0).fold(f64::INFINITY, f64::min);
    let to = windows
        .iter()
        .map(|w| w.1)
        .fold(f64::NEG_INFINITY, f64::max);
    let flows: Vec<(f64, f64)> = ms
        .iter()
        .zip(&windows)
        .filter_map(|(m, w)| m.goodput_bps.map(|g| (g, w.1 - w.0)))
        .collect();
    if flows.is_empty() {
        return None;
    }
    metrics::link_utilization(&flows, rec.job.link.rate.0, to - from)
}

/// "cubic:1, bbr:1" style label of a run's flows.
pub fn run_label(rec: &JobRecord) -> String {
    let mut groups: Vec<(String, usize)> = Vec::new();
    for f in &rec.flows {
        match groups.iter_mut().find(|(cc, _)| *cc == f.plan.cc) {
            Some(g) => g.1 += 1,
            None => groups.push((f.plan.cc.clone(), 1)),
        }
    }
    groups
        .iter()
        .map(|(cc, n)| format!("{cc}:{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn harm_against_baselines(
    row: &mut SummaryRow,
    plan: &Plan,
    rec: &JobRecord,
    i: usize,
    ms: &[FlowMetrics],
    by_id: &BTreeMap<usize, &JobRecord>,
    cache: &BTreeMap<usize, Vec<FlowMetrics>>,
) {
    let job = &rec.job;
    let f = &job.flows[i];
    let m = &ms[i];
    let solo = plan
        .baselines
        .solo
        .get(&(job.link_index, plan::solo_key(f)))
        .and_then(|id| cache.get(id))
        .and_then(|v| v.first());
    if let (Some(solo), Some(g)) = (solo, m.goodput_bps) {
        row.harm_tput = solo
            .goodput_bps
            .and_then(|x| metrics::harm_more_is_better(x, g));
    }
    if let (Some(solo), Some(r)) = (solo, m.mean_rtt_ms) {
        row.harm_rtt = solo
            .mean_rtt_ms
            .and_then(|x| metrics::harm_less_is_better(x, r));
    }
    if !plan::is_mixed(&job.flows) {
        return;
    }
    let others: Vec<f64> = job
        .flows
        .iter()
        .zip(ms)
        .filter(|(o, _)| o.cc != f.cc)
        .filter_map(|(_, om)| om.goodput_bps)
        .collect();
    if let (Some(alpha), Some(beta)) = (metrics::mean(&others), m.goodput_bps) {
        row.m_f_tput = metrics::fairness_m_f(beta, alpha);
    }
    let same = plan
        .baselines
        .same_cc
        .get(&(job.link_index, plan::same_cc_key(&job.flows, &f.cc)))
        .filter(|id| by_id.contains_key(id))
        .and_then(|id| cache.get(id))
        .and_then(|v| v.get(i));
    if let Some(same) = same {
        if let (Some(b), Some(b1)) = (m.goodput_bps, same.goodput_bps) {
            row.m_h_tput = metrics::harm_m_h(b, b1);
        }
        if let (Some(r), Some(r1)) = (m.mean_rtt_ms, same.mean_rtt_ms) {
            row.m_h_rtt = metrics::eq2(r1, r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccctl_observe::sockdiag::{Sample, TcpInfo};
    use std::time::Duration;

    fn sample(t: f64, acked: u64, retrans: u32, rtt_ms: u32) -> Sample {
        Sample {
            t,
            info: TcpInfo {
                bytes_acked: Some(acked),
                total_retrans: retrans,
                rtt_us: rtt_ms * 1000,
                min_rtt_us: Some(30_000),
                ..Default::default()
            },
            bbr: None,
        }
    }

    fn record(start_s: u64, samples: Vec<Sample>) -> FlowRecord {
        let report = crate::iperf::parse_report(
            r#"{"start":{"connected":[],"version":"x"},"intervals":[],"end":{}}"#,
        )
        .expect("minimal report");
        let spec = crate::iperf::FlowSpec::new(0, "cubic", Duration::from_secs(10));
        FlowRecord {
            plan: crate::scenario::FlowPlan {
                cc: "cubic".into(),
                start: Duration::from_secs(start_s),
                duration: Duration::from_secs(10),
                rtt: Duration::from_millis(30),
                schedule: None,
                drop: Vec::new(),
            },
            kernel_cc: "cubic".into(),
            sender: 0,
            result: crate::iperf::FlowResult::from_report(spec, 5201, 0.0, report),
            samples,
        }
    }

    #[test]
    fn warmup_is_cut_from_the_flows_own_start() {
        // Flow starts at 5 s; warm-up 3 s -> window [8 s, 15 s].
        let mut s = vec![sample(6.0, 0, 0, 100)]; // slow start, cut
                                                  // 1.25 MB per second = 10 Mbit/s from 8 s to 15 s; 4 retransmits.
        for k in 0..=70 {
            let t = 8.0 + k as f64 * 0.1;
            s.push(sample(
                t,
                1_000_000 + (k as u64) * 125_000,
                10 + (k as u32 / 20),
                if k < 35 { 40 } else { 60 },
            ));
        }
        let m = flow_metrics(&record(5, s), 3.0);
        assert_eq!(m.source, "inet_diag");
        let g = m.goodput_bps.expect("goodput");
        assert!((g - 10e6).abs() < 1.0, "{g}");
        assert_eq!(m.retransmits, Some(3));
        assert_eq!(m.samples, 71);
        // 35 samples at 40 ms, 36 at 60 ms.
        let mean = m.mean_rtt_ms.expect("mean rtt");
        assert!((mean - (35.0 * 40.0 + 36.0 * 60.0) / 71.0).abs() < 1e-9);
        assert_eq!(m.p95_rtt_ms, Some(60.0));
        assert_eq!(m.min_rtt_ms, Some(30.0));
    }

    /// The prober's replies count from the warm-up to the run's end: a
    /// 20 s run with a 5 s warm-up keeps 5..20 s.
    #[test]
    fn ping_rtt_is_the_mean_after_the_warmup() {
        let sc = crate::scenario::Scenario::from_toml(
            "name = \"t\"\nduration = \"20s\"\nwarmup = \"5s\"\nflows = \"cubic:1\"\nbaselines = false\n[link]\nrate = \"20mbit\"\nrtt = \"40ms\"\nbuffer = \"1bdp\"\n",
        )
        .expect("scenario");
        let job = plan::plan(&sc)
            .jobs
            .into_iter()
            .find(|j| j.kind == JobKind::Main)
            .expect("main run");
        let ping = [
            (1.0, 40.0),
            (5.0, 60.0),
            (12.0, 80.0),
            (20.0, 100.0),
            (21.0, 500.0),
        ]
        .map(|(t, rtt_ms)| crate::exec::PingSample { t, rtt_ms })
        .to_vec();
        let mut rec = JobRecord {
            job,
            flows: Vec::new(),
            bottleneck: None,
            started_unix: 0.0,
            wall_secs: 20.0,
            sample_failures: 0,
            qdiscs: Vec::new(),
            phase_secs: [0.0; 3],
            t0_monotonic_ns: 0,
            trace: None,
            path: None,
            ping,
        };
        assert_eq!(ping_rtt(&rec), Some(80.0));
        rec.ping.clear();
        assert_eq!(ping_rtt(&rec), None, "no prober, no number");
    }

    #[test]
    fn no_samples_falls_back_to_iperf() {
        let m = flow_metrics(&record(0, vec![]), 3.0);
        assert_eq!(m.source, "iperf3");
        assert_eq!(m.samples, 0);
    }
}
