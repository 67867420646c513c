//! The daemon's view of the policy in force: every rule with a control is
//! sampled from inet_diag (its connections split by congestion control
//! name: the rule's registration = canary, the control's = control), the
//! numbers go to `/metrics`, and a rule with a `[rule.judge]` is judged
//! ([`ccctl_core::policy::judge`]); a breach held for `hold` rolls it back
//! through [`pk::rollback`] (what `ccctl policy rollback` runs) and writes
//! the audit line with the numbers. A rule whose judge has a `baseline`
//! starts in the state `baseline` (all its connections on the control):
//! the control is measured here until the intervals with `min_flows`
//! connections cover it, then [`pk::start_canary`] keeps the numbers in the
//! applied policy and starts the canary (an audit line `canary_start`);
//! the judge then holds the control's harm against them.
//!
//! Which sockets: those of the daemon's network namespace and of each
//! rule's `netns`, established, whose first matching rule (first match
//! wins, as in BPF) is the rule. A cgroup rule counts the sockets of its
//! cgroup and of every cgroup below it ([`CgroupSubtrees`], as the dry run
//! and `bpf/policy.bpf.c` decide).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use ccctl_core::policy::judge::{
    group_sample, BaselineMeter, GroupSample, Judge, SockCounters, Verdict,
};
use ccctl_core::policy::kernel::{self as pk, Applied, RuleState};
use ccctl_core::policy::{audit, CgroupRef, CgroupSubtrees, Policy};
use ccctl_observe::sockdiag::DiagSocket;

/// What `/metrics` shows per rule.
#[derive(Debug, Clone, Default)]
pub struct RuleView {
    pub canary: GroupSample,
    pub control: GroupSample,
    /// Intervals the judge has seen in breach, and rollbacks it made.
    pub breaching: bool,
    pub auto_rollbacks: u64,
}

/// Shared with the metrics endpoint: rule name -> its latest numbers.
#[derive(Default)]
pub struct Views(pub Mutex<BTreeMap<String, RuleView>>);

impl Views {
    pub fn get(&self) -> BTreeMap<String, RuleView> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[derive(Default)]
struct RuleTrack {
    /// The apply (when, by whom) and rule id the track belongs to: a new
    /// apply restarts it; a rollback or a canary start of another rule,
    /// which bump the policy's generation, do not.
    key: (u64, String, u32),
    last: Option<(Instant, Vec<SockCounters>, Vec<SockCounters>)>,
    judge: Judge,
    /// The control alone, while the rule measures its baseline.
    meter: BaselineMeter,
    auto_rollbacks: u64,
}

/// The sampler and judge, run from the daemon's loop.
pub struct Watcher {
    start: Instant,
    tracks: BTreeMap<String, RuleTrack>,
    next: Instant,
}

/// How often rules without a judge are sampled (for the metrics).
const DEFAULT_INTERVAL_S: f64 = 1.0;

impl Watcher {
    pub fn new() -> Watcher {
        let now = Instant::now();
        Watcher {
            start: now,
            tracks: BTreeMap::new(),
            next: now,
        }
    }

    /// Sample and judge when the shortest interval has passed.
    pub fn tick(&mut self, views: &Views, log: &mut Option<audit::Log>) {
        let now = Instant::now();
        if now < self.next {
            return;
        }
        let doc = match pk::current() {
            Ok(Some(d)) => d,
            Ok(None) => {
                self.tracks.clear();
                views
                    .0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
                self.next = now + std::time::Duration::from_secs(1);
                return;
            }
            Err(e) => {
                tracing::warn!("policy judge: reading the policy: {e}");
                self.next = now + std::time::Duration::from_secs(1);
                return;
            }
        };
        let interval = doc
            .rules
            .iter()
            .filter_map(|r| r.rule.judge.map(|j| j.interval_s))
            .fold(DEFAULT_INTERVAL_S, f64::min);
        self.next = now + std::time::Duration::from_secs_f64(interval);
        let groups = match sample(&doc) {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!("policy judge: {e:#}");
                return;
            }
        };
        let mut out = BTreeMap::new();
        for r in &doc.rules {
            let name = &r.rule.name;
            let t = self.tracks.entry(name.clone()).or_default();
            let key = (doc.applied.at_unix, doc.applied.by.clone(), r.rule.id);
            if t.key != key && r.state != RuleState::RolledBack {
                // A new apply (or a first look): start over.
                let kept = t.auto_rollbacks;
                *t = RuleTrack {
                    auto_rollbacks: kept,
                    ..Default::default()
                };
            }
            t.key = key;
            let (can_now, ctl_now) = groups.get(name).cloned().unwrap_or_default();
            let mut view = RuleView {
                auto_rollbacks: t.auto_rollbacks,
                ..Default::default()
            };
            let mut dt = 0.0;
            if let Some((at, can_before, ctl_before)) = &t.last {
                dt = now.duration_since(*at).as_secs_f64();
                view.canary = group_sample(can_before, &can_now, dt);
                view.control = group_sample(ctl_before, &ctl_now, dt);
            }
            t.last = Some((now, can_now, ctl_now));
            if let (Some(th), RuleState::Baseline) = (r.rule.judge, r.state) {
                let need = th.baseline_s.unwrap_or(0.0);
                t.meter.add(&view.control, dt, th.min_flows);
                if let Some(b) = t.meter.baseline().filter(|_| t.meter.secs() + 1e-9 >= need) {
                    let why = format!(
                        "baseline measured: {} intervals over {:.1}s, control {:.1} connections, {:.1} Mbit/s in all, {:.2} Mbit/s each, srtt {:.1} ms, retransmission ratio {:.4}",
                        b.intervals,
                        b.secs,
                        b.flows,
                        b.total_goodput_bps / 1e6,
                        b.goodput_bps / 1e6,
                        b.rtt_ms,
                        b.retrans_ratio
                    );
                    match pk::start_canary(name, b, &why) {
                        Ok(()) => {
                            eprintln!("ccctl daemon: rule {name}: canary started; {why}");
                            let mut rec = audit::Record::now(audit::Action::CanaryStart, why);
                            rec.rules = vec![(&r.rule).into()];
                            rec.outcome =
                                serde_json::to_value(b).unwrap_or(serde_json::Value::Null);
                            super::audit_write(log, &rec);
                        }
                        Err(e) => {
                            eprintln!(
                                "ccctl daemon: starting the canary of rule {name} failed: {e}"
                            );
                            tracing::error!(rule = %name, "starting the canary failed: {e}");
                        }
                    }
                }
            }
            if let (Some(th), RuleState::Canary, true) = (
                r.rule.judge,
                r.state,
                view.canary.flows + view.control.flows > 0,
            ) {
                let at = now.duration_since(self.start).as_secs_f64();
                match t
                    .judge
                    .observe(&th, view.canary, view.control, r.baseline.as_ref(), at)
                {
                    Verdict::Insufficient | Verdict::Healthy(_) => {}
                    Verdict::Breaching(d) => {
                        view.breaching = true;
                        tracing::info!(rule = %name, "canary judge: {}", d.summary());
                    }
                    Verdict::RollBack(d) => {
                        let why = d.summary();
                        eprintln!("ccctl daemon: rolling back rule {name}: {why}");
                        match pk::rollback(name, &why) {
                            Ok(report) => {
                                t.auto_rollbacks += 1;
                                view.auto_rollbacks = t.auto_rollbacks;
                                eprintln!(
                                    "ccctl daemon: rule {name} rolled back: {} live canary connection(s) moved to {} ({} failed)",
                                    report.moved, report.to, report.failed
                                );
                                let mut rec = audit::Record::now(audit::Action::AutoRollback, why);
                                rec.rules = vec![(&r.rule).into()];
                                rec.decision = Some(d);
                                rec.outcome = serde_json::to_value(&report)
                                    .unwrap_or(serde_json::Value::Null);
                                super::audit_write(log, &rec);
                            }
                            Err(e) => {
                                eprintln!("ccctl daemon: rolling back rule {name} failed: {e}");
                                tracing::error!(rule = %name, "automatic rollback failed: {e}");
                            }
                        }
                    }
                }
            }
            out.insert(name.clone(), view);
        }
        self.tracks.retain(|k, _| out.contains_key(k));
        *views.0.lock().unwrap_or_else(PoisonError::into_inner) = out;
    }
}

type Groups = BTreeMap<String, (Vec<SockCounters>, Vec<SockCounters>)>;

/// Each rule's established connections, canary and control, by counters.
fn sample(doc: &Applied) -> anyhow::Result<Groups> {
    use anyhow::Context;
    let policy = Policy {
        rules: doc.rules.iter().map(|r| r.rule.clone()).collect(),
        overlaps: Vec::new(),
    };
    let own = pk::netns_cookie(std::path::Path::new("/proc/self/ns/net")).ok();
    let mut spaces: Vec<(Option<PathBuf>, Option<u64>)> = vec![(None, own)];
    for r in &policy.rules {
        if let Some(n) = &r.netns {
            if !spaces.iter().any(|(_, c)| *c == Some(n.cookie)) {
                spaces.push((Some(n.path.clone()), Some(n.cookie)));
            }
        }
    }
    let mut out = Groups::new();
    // Below a rule's cgroup as the dry run and the BPF side see it (walked
    // each sample: a cgroup made since the last one counts).
    let subtrees = CgroupSubtrees::of(&policy.rules);
    let in_cgroup = |g: &CgroupRef, id: u64| subtrees.contains(g, id);
    for (path, cookie) in spaces {
        let diag = DiagSocket::open_at(path.as_deref()).context("opening inet_diag")?;
        for s in diag.tcp_sockets().context("listing TCP connections")? {
            let (Some(cc), Some(info)) = (&s.cc, &s.info) else {
                continue;
            };
            if s.state != 1 {
                continue;
            }
            let c = s.conn(cookie);
            let Some(rule) = policy.rules.iter().find(|r| r.matches(&c, &in_cgroup)) else {
                continue;
            };
            let Some(control) = &rule.control else {
                continue;
            };
            let counters = SockCounters {
                cookie: s.cookie,
                bytes_acked: info.bytes_acked.unwrap_or(0),
                segs_out: info.segs_out.unwrap_or(0),
                total_retrans: info.total_retrans,
                rtt_us: info.rtt_us,
            };
            let e = out.entry(rule.name.clone()).or_default();
            if *cc == rule.algorithm.kernel_name {
                e.0.push(counters);
            } else if *cc == control.kernel_name {
                e.1.push(counters);
            }
        }
    }
    Ok(out)
}
