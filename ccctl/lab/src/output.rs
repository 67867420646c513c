//! Writing a run directory (its layout, file names and formats:
//! [`crate::run_dir`]): the directory itself, `scenario.toml`, the
//! metadata of a run as it goes, `samples.parquet`, `summary.parquet`,
//! `summary.txt` and the plots.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use polars::prelude::*;

use crate::plots::{self, Panel, Series};
use crate::run_dir::{self, Metadata, RunMeta, ScheduleMeta, SummaryRecord};
use crate::scenario::Scenario;

use super::analyze::{Analysis, SummaryRow};
use super::exec::JobRecord;
use super::plan::{JobKind, Plan, CALIBRATION_SHARE};
use super::LabError;

/// Creates `<root>/<name>-<UTC yyyymmddThhmmssZ>` (suffixed if it exists).
pub fn create_run_dir(root: &Path, name: &str) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(root).map_err(LabError::io(format!("creating {}", root.display())))?;
    let stamp = utc_stamp();
    for n in 0..100 {
        let dir = root.join(if n == 0 {
            format!("{name}-{stamp}")
        } else {
            format!("{name}-{stamp}-{n}")
        });
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(LabError::io(format!("creating {}", dir.display()))(e)),
        }
    }
    Err(LabError::Output {
        what: root.display().to_string(),
        message: "100 run directories with the same name and second".into(),
    })
}

fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    ccctl_core::units::utc(secs, "", "T", "", "Z")
}

pub fn write_scenario(path: &Path, sc: &Scenario) -> Result<(), LabError> {
    let text = toml::to_string_pretty(sc).map_err(|e| LabError::Output {
        what: path.display().to_string(),
        message: e.to_string(),
    })?;
    std::fs::write(
        path,
        format!(
            "# the scenario as run by ccctl {}\n{text}",
            env!("CARGO_PKG_VERSION")
        ),
    )
    .map_err(LabError::io(format!("writing {}", path.display())))
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Metadata {
    pub fn new(sc: &Scenario, ran_on: &str, plan: &Plan) -> Metadata {
        let iperf3 = std::process::Command::new("iperf3")
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_default();
        let sysctls = [
            "net/ipv4/tcp_congestion_control",
            "net/ipv4/tcp_available_congestion_control",
            "net/core/default_qdisc",
        ]
        .iter()
        .map(|k| (k.replace('/', "."), read_trim(&format!("/proc/sys/{k}"))))
        .chain([
            (
                "netns: net.ipv4.tcp_no_metrics_save".to_string(),
                "1".to_string(),
            ),
            (
                "netns: net.ipv4.tcp_rmem".to_string(),
                "4096 131072 67108864".to_string(),
            ),
            (
                "netns: net.ipv4.tcp_wmem".to_string(),
                "4096 16384 67108864".to_string(),
            ),
        ])
        .collect();
        Metadata {
            format: run_dir::FORMAT,
            ccctl_version: env!("CARGO_PKG_VERSION").into(),
            git_commit: ccctl_core::GIT_COMMIT.into(),
            scenario: sc.name.clone(),
            ran_on: ran_on.into(),
            kernel: read_trim("/proc/sys/kernel/osrelease"),
            iperf3,
            sysctls,
            testbed: "router-namespace dumbbell: tbf (and fq_codel) on the router's egress to the receiver, \
                      base RTT as netem delay on the router's egress to each sender (ACK path), random loss as \
                      netem on the receiver's ifb ingress; TSO/GSO/GRO off on every veth"
                .into(),
            calibration_share: CALIBRATION_SHARE,
            planned_runs: plan.jobs.len(),
            plan_digest: crate::shard::plan_digest(plan),
            shard: None,
            shards: Vec::new(),
            started_unix: ccctl_core::sys::time::now_unix_f64(),
            finished_unix: None,
            status: "running".into(),
            loaded_for_run: Vec::new(),
            params: BTreeMap::new(),
            calibrations: Vec::new(),
            runs: Vec::new(),
        }
    }

    pub fn finish(&mut self, records: &[JobRecord], failure: Option<&LabError>) {
        self.finished_unix = Some(ccctl_core::sys::time::now_unix_f64());
        self.status = match failure {
            None => run_dir::STATUS_COMPLETE.into(),
            Some(e @ LabError::Interrupted(_)) => format!("interrupted: {e}"),
            Some(e) => format!("failed: {e}"),
        };
        self.runs = records
            .iter()
            .map(|r| RunMeta {
                run_id: r.job.id,
                kind: r.job.kind.as_str().into(),
                link_index: r.job.link_index,
                started_unix: r.started_unix,
                wall_secs: r.wall_secs,
                setup_flows_teardown_secs: r.phase_secs,
                sample_failures: r.sample_failures,
                qdiscs: r.qdiscs.clone(),
                trace: r
                    .trace
                    .as_ref()
                    .and_then(|p| p.file_name())
                    .map(|f| format!("{}/{}", run_dir::TRACES, f.to_string_lossy())),
                schedules: r
                    .job
                    .flows
                    .iter()
                    .map(|f| {
                        f.schedule.map(|s| ScheduleMeta {
                            on_ms: s.on.0.as_secs_f64() * 1e3,
                            off_ms: s.off.0.as_secs_f64() * 1e3,
                            theta: s.theta(),
                        })
                    })
                    .collect(),
                path: r.path.clone(),
            })
            .collect();
    }
}

/// Per-sample throughput: acked bytes over the window since the sample
/// `lag` periods earlier (0.1 s x lag).
fn windowed_bps(samples: &[super::exec::Sample], i: usize, lag: usize) -> Option<f64> {
    let j = i.checked_sub(lag)?;
    let (a, b) = (&samples[j], &samples[i]);
    let bytes = b.info.bytes_acked?.checked_sub(a.info.bytes_acked?)?;
    crate::metrics::goodput_bps(bytes, b.t - a.t)
}

/// `samples.parquet`: one row per flow per socket sample.
pub fn write_samples(path: &Path, records: &[JobRecord]) -> Result<(), LabError> {
    let mut run_id = Vec::new();
    let mut kind = Vec::new();
    let mut link_index = Vec::new();
    let mut flow = Vec::new();
    let mut cc = Vec::new();
    let mut t_s = Vec::new();
    let mut flow_t_s = Vec::new();
    let mut cwnd = Vec::new();
    let mut ssthresh = Vec::new();
    let mut srtt_ms = Vec::new();
    let mut rttvar_ms = Vec::new();
    let mut min_rtt_ms = Vec::new();
    let mut pacing = Vec::new();
    let mut delivery = Vec::new();
    let mut throughput = Vec::new();
    let mut bytes_acked = Vec::new();
    let mut total_retrans = Vec::new();
    let mut unacked = Vec::new();
    let mut lost = Vec::new();
    let mut ca_state = Vec::new();
    let mut mss = Vec::new();
    let mut sched_on = Vec::new();
    let mut sched_off = Vec::new();
    for r in records {
        for (fi, f) in r.flows.iter().enumerate() {
            for (i, s) in f.samples.iter().enumerate() {
                let info = &s.info;
                run_id.push(r.job.id as u32);
                kind.push(r.job.kind.as_str());
                link_index.push(r.job.link_index as u32);
                flow.push(fi as u32);
                cc.push(f.plan.cc.clone());
                t_s.push(s.t);
                flow_t_s.push(s.t - f.plan.start.as_secs_f64());
                cwnd.push(info.snd_cwnd);
                ssthresh.push(info.snd_ssthresh);
                srtt_ms.push(info.rtt_us as f64 / 1e3);
                rttvar_ms.push(info.rttvar_us as f64 / 1e3);
                min_rtt_ms.push(
                    info.min_rtt_us
                        .filter(|&v| v != u32::MAX)
                        .map(|v| v as f64 / 1e3),
                );
                pacing.push(
                    info.pacing_rate
                        .filter(|&v| v != u64::MAX)
                        .map(|v| v as f64 * 8.0),
                );
                delivery.push(info.delivery_rate.map(|v| v as f64 * 8.0));
                throughput.push(windowed_bps(&f.samples, i, 1));
                bytes_acked.push(info.bytes_acked);
                total_retrans.push(info.total_retrans);
                unacked.push(info.unacked);
                lost.push(info.lost);
                ca_state.push(info.ca_state as u32);
                mss.push(info.snd_mss);
                sched_on.push(f.plan.schedule.map(|s| s.on.0.as_secs_f64() * 1e3));
                sched_off.push(f.plan.schedule.map(|s| s.off.0.as_secs_f64() * 1e3));
            }
        }
    }
    Ok(run_dir::write_parquet(
        path,
        vec![
            Column::new("run_id".into(), run_id),
            Column::new("kind".into(), kind),
            Column::new("link_index".into(), link_index),
            Column::new("flow".into(), flow),
            Column::new("cc".into(), cc),
            Column::new("t_s".into(), t_s),
            Column::new("flow_t_s".into(), flow_t_s),
            Column::new("cwnd_pkts".into(), cwnd),
            Column::new("ssthresh_pkts".into(), ssthresh),
            Column::new("srtt_ms".into(), srtt_ms),
            Column::new("rttvar_ms".into(), rttvar_ms),
            Column::new("min_rtt_ms".into(), min_rtt_ms),
            Column::new("pacing_rate_bps".into(), pacing),
            Column::new("delivery_rate_bps".into(), delivery),
            Column::new("throughput_bps".into(), throughput),
            Column::new("bytes_acked".into(), bytes_acked),
            Column::new("total_retrans".into(), total_retrans),
            Column::new("unacked_pkts".into(), unacked),
            Column::new("lost_pkts".into(), lost),
            Column::new("ca_state".into(), ca_state),
            Column::new("mss".into(), mss),
            Column::new("schedule_on_ms".into(), sched_on),
            Column::new("schedule_off_ms".into(), sched_off),
        ],
    )?)
}

/// `summary.parquet` of `dir`: one row per flow (`level = "flow"`) and per
/// run (`level = "run"`), its columns those of [`run_dir::SummaryRecord`].
pub fn write_summary(dir: &Path, rows: &[SummaryRow]) -> Result<(), LabError> {
    let records: Vec<SummaryRecord> = rows.iter().map(SummaryRecord::of).collect();
    Ok(run_dir::write_summary(dir, &records)?)
}

fn opt(v: Option<f64>, scale: f64, digits: usize) -> String {
    v.map(|v| format!("{:.*}", digits, v * scale))
        .unwrap_or_else(|| "-".into())
}

/// The printed summary: per link setting, per match-up, per algorithm, the
/// mean over repetitions of the main runs.
pub fn summary_table(sc: &Scenario, plan: &Plan, a: &Analysis) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n== {}: {} ==",
        sc.name,
        if sc.description.is_empty() {
            "results"
        } else {
            &sc.description
        }
    );
    let _ = writeln!(
        out,
        "Means over repetitions after a {} warm-up; harm against each flow's solo run, m_f/m_h per harm-vs-fairness eq. 2.",
        sc.warmup
    );
    for (li, link) in sc.link_settings().iter().enumerate() {
        let cal = a.calibrations.iter().find(|c| c.link_index == li);
        let _ = writeln!(
            out,
            "\nlink {}: {} / {} / buffer {} ({} B){}{}{}",
            li + 1,
            link.rate,
            link.rtt,
            link.buffer,
            link.buffer_bytes,
            if link.loss > 0.0 {
                format!(" / loss {}%", link.loss * 100.0)
            } else {
                String::new()
            },
            if link.aqm == crate::scenario::Aqm::FqCodel {
                " / fq_codel"
            } else {
                ""
            },
            if link.ip == crate::scenario::IpVersion::V6 {
                " / IPv6"
            } else {
                ""
            },
        );
        match cal {
            Some(c) => {
                let paced = if c.paced_bps.is_some() || c.paced_share.is_some() {
                    format!(
                        "; paced reference BBR {} Mbit/s = {} %",
                        opt(c.paced_bps, 1e-6, 2),
                        opt(c.paced_share, 100.0, 1)
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "  reference Cubic (2 BDP): {} Mbit/s = {} % of the rate{paced}{}",
                    opt(c.reference_bps, 1e-6, 2),
                    opt(c.share, 100.0, 1),
                    if c.testbed_limited {
                        "  ** TESTBED-LIMITED: a reference below 85 %, results on this link measure the testbed **"
                    } else {
                        ""
                    }
                );
            }
            None => {
                let _ = writeln!(out, "  reference Cubic: not run");
            }
        }
        let _ = writeln!(
            out,
            "  {:<24} {:<12} {:>9} {:>7} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>6} {:>6}",
            "match-up",
            "cc",
            "Mbit/s",
            "share",
            "retrans",
            "RTT ms",
            "p95 ms",
            "harm",
            "m_f",
            "m_h",
            "JFI",
            "util"
        );
        let matchups = plan
            .jobs
            .iter()
            .filter(|j| j.kind == JobKind::Main && j.link_index == li)
            .filter_map(|j| j.matchup);
        let mut seen = Vec::new();
        for m in matchups {
            if seen.contains(&m) {
                continue;
            }
            seen.push(m);
            let flows: Vec<&SummaryRow> = a
                .rows
                .iter()
                .filter(|r| {
                    r.level == "flow"
                        && r.kind == "main"
                        && r.link_index == li
                        && r.matchup == Some(m)
                })
                .collect();
            let runs: Vec<&SummaryRow> = a
                .rows
                .iter()
                .filter(|r| {
                    r.level == "run"
                        && r.kind == "main"
                        && r.link_index == li
                        && r.matchup == Some(m)
                })
                .collect();
            let label = runs.first().map(|r| r.cc.clone()).unwrap_or_default();
            let jfi =
                crate::metrics::mean(&runs.iter().filter_map(|r| r.jain_index).collect::<Vec<_>>());
            let util = crate::metrics::mean(
                &runs
                    .iter()
                    .filter_map(|r| r.utilization)
                    .collect::<Vec<_>>(),
            );
            let mut ccs: Vec<&str> = flows.iter().map(|r| r.cc.as_str()).collect();
            ccs.dedup();
            let mut unique = Vec::new();
            for c in ccs {
                if !unique.contains(&c) {
                    unique.push(c);
                }
            }
            for (k, cc) in unique.iter().enumerate() {
                let of: Vec<&&SummaryRow> = flows.iter().filter(|r| r.cc == *cc).collect();
                let mean = |f: &dyn Fn(&SummaryRow) -> Option<f64>| {
                    crate::metrics::mean(&of.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
                };
                // Per-flow means, then summed over this cc's flows per run.
                let n_runs = runs.len().max(1) as f64;
                let goodput: f64 =
                    of.iter().filter_map(|r| r.metrics.goodput_bps).sum::<f64>() / n_runs;
                let share = mean(&|r| r.share).map(|s| s * of.len() as f64 / n_runs);
                let retrans =
                    of.iter().filter_map(|r| r.metrics.retransmits).sum::<u64>() as f64 / n_runs;
                let _ = writeln!(
                    out,
                    "  {:<24} {:<12} {:>9.2} {:>7} {:>8.0} {:>8} {:>8} {:>7} {:>7} {:>7} {:>6} {:>6}",
                    if k == 0 { truncate(&label, 24) } else { String::new() },
                    truncate(cc, 12),
                    goodput / 1e6,
                    opt(share, 100.0, 1) + "%",
                    retrans,
                    opt(mean(&|r| r.metrics.mean_rtt_ms), 1.0, 1),
                    opt(mean(&|r| r.metrics.p95_rtt_ms), 1.0, 1),
                    opt(mean(&|r| r.harm_tput), 1.0, 2),
                    opt(mean(&|r| r.m_f_tput), 1.0, 2),
                    opt(mean(&|r| r.m_h_tput), 1.0, 2),
                    if k == 0 { opt(jfi, 1.0, 3) } else { String::new() },
                    if k == 0 { opt(util, 100.0, 0) + "%" } else { String::new() },
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "\n(Mbit/s and retrans: per algorithm, summed over its flows, mean per run; share of the run's goodput.)"
    );
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}

/// `rate, RTT, buffer` of a summary row's link, each part only if asked.
fn describe_link(r: &SummaryRow, rate: bool, rtt: bool, buffer: bool) -> String {
    let mut parts = Vec::new();
    if rate {
        parts.push(format!("{} Mbit/s", fmt_num(r.rate_bps / 1e6)));
    }
    if rtt {
        parts.push(format!("{} ms", fmt_num(r.rtt_ms)));
    }
    if buffer {
        parts.push(format!("{} buffer", r.buffer));
    }
    parts.join(", ")
}

fn fmt_num(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Names a row's link by the parts (rate, RTT, buffer) that differ between
/// the links of `rows`; None when they all share one link.
fn link_labeller(rows: &[&SummaryRow]) -> impl Fn(&SummaryRow) -> Option<String> {
    let differs = |f: &dyn Fn(&SummaryRow) -> String| {
        rows.iter()
            .map(|r| f(r))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1
    };
    let rate = differs(&|r| r.rate_bps.to_string());
    let rtt = differs(&|r| r.rtt_ms.to_string());
    let buffer = differs(&|r| r.buffer.clone());
    move |r| (rate || rtt || buffer).then(|| describe_link(r, rate, rtt, buffer))
}

/// Plots: per main run, throughput and RTT over time; the Kleinrock
/// scatter (goodput vs p95 RTT) of every main-run flow; CDFs of harm and
/// fairness.
pub fn write_plots(dir: &Path, records: &[JobRecord], a: &Analysis) -> Result<(), LabError> {
    std::fs::create_dir_all(dir).map_err(LabError::io(format!("creating {}", dir.display())))?;
    // Without a font the SVGs are still written: note it once, go on.
    let mut no_font: Option<String> = None;
    let mut err = |r: Result<Vec<PathBuf>, plots::PlotError>| -> Result<(), LabError> {
        match r {
            Ok(_) => Ok(()),
            Err(e @ plots::PlotError::NoFont { .. }) => {
                no_font.get_or_insert_with(|| e.to_string());
                Ok(())
            }
            Err(e) => Err(LabError::Output {
                what: "plots".into(),
                message: e.to_string(),
            }),
        }
    };
    for r in records.iter().filter(|r| r.job.kind == JobKind::Main) {
        let mut tput = Vec::new();
        let mut rtt = Vec::new();
        for (i, f) in r.flows.iter().enumerate() {
            let label = format!("{} #{i}", f.plan.cc);
            // 0.5 s windows smooth the 100 ms sampling.
            let tp: Vec<(f64, f64)> = (0..f.samples.len())
                .filter_map(|k| windowed_bps(&f.samples, k, 5).map(|b| (f.samples[k].t, b / 1e6)))
                .collect();
            let rt: Vec<(f64, f64)> = f
                .samples
                .iter()
                .map(|s| (s.t, s.info.rtt_us as f64 / 1e3))
                .collect();
            tput.push(Series {
                label: label.clone(),
                points: tp,
            });
            rtt.push(Series { label, points: rt });
        }
        let title = format!(
            "run {}: {} on {} / {} / {}{}",
            r.job.id,
            super::analyze::run_label(r),
            r.job.link.rate,
            r.job.link.rtt,
            r.job.link.buffer,
            if r.job.repetition > 0 {
                format!(" (rep {})", r.job.repetition + 1)
            } else {
                String::new()
            }
        );
        err(plots::time_series(
            &dir.join(format!("run-{:03}-timeseries", r.job.id)),
            &title,
            "time (s)",
            &[
                Panel {
                    y_label: "throughput (Mbit/s)".into(),
                    series: tput,
                },
                Panel {
                    y_label: "smoothed RTT (ms)".into(),
                    series: rtt,
                },
            ],
        ))?;
    }
    let main_flows: Vec<&SummaryRow> = a
        .rows
        .iter()
        .filter(|r| r.level == "flow" && r.kind == "main")
        .collect();
    // One group per algorithm and link: the label names the link by what
    // differs between the run's links (a buffer sweep: the buffer), so each
    // point says where it was measured; the colour stays the algorithm's.
    let link_label = link_labeller(&main_flows);
    // (algorithm, link) -> (legend label, points)
    type Group = (String, Vec<(f64, f64)>);
    let mut by_cc: BTreeMap<(String, usize), Group> = BTreeMap::new();
    for r in &main_flows {
        if let (Some(d), Some(g)) = (r.metrics.p95_rtt_ms, r.metrics.goodput_bps) {
            let label = match link_label(r) {
                Some(l) => format!("{} @ {l}", r.cc),
                None => r.cc.clone(),
            };
            by_cc
                .entry((r.cc.clone(), r.link_index))
                .or_insert_with(|| (label, Vec::new()))
                .1
                .push((d, g / 1e6));
        }
    }
    let groups: Vec<Series> = by_cc
        .into_values()
        .map(|(label, points)| Series { label, points })
        .collect();
    let title = match main_flows.first() {
        Some(r) if link_label(r).is_none() => format!(
            "goodput vs p95 RTT per flow on {} (better: up and right)",
            describe_link(r, true, true, true)
        ),
        _ => "goodput vs p95 RTT per flow (better: up and right)".to_string(),
    };
    err(plots::scatter(
        &dir.join("throughput-vs-delay"),
        &title,
        "p95 RTT (ms)",
        "goodput (Mbit/s)",
        &groups,
        true,
    ))?;
    let mut sets: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in &main_flows {
        for (name, v) in [
            ("harm tput", r.harm_tput),
            ("m_f tput", r.m_f_tput),
            ("m_h tput", r.m_h_tput),
            ("m_h RTT", r.m_h_rtt),
        ] {
            if let Some(v) = v {
                sets.entry(format!("{name} ({})", r.cc))
                    .or_default()
                    .push(v);
            }
        }
    }
    let sets: Vec<(String, Vec<f64>)> = sets.into_iter().collect();
    err(plots::cdf(
        &dir.join("harm-fairness-cdf"),
        "harm and fairness across runs",
        "metric value",
        &sets,
    ))?;
    match no_font {
        Some(e) => Err(LabError::Output {
            what: "PNG plots".into(),
            message: e,
        }),
        None => Ok(()),
    }
}
