//! Lab scenarios: what to run, as a TOML file a researcher writes once and
//! reruns, validated before anything is created and expanded into runs.
//!
//! ```toml
//! name = "bbr-vs-cubic"
//! duration = "30s"          # each run
//! warmup = "3s"             # cut from every metric (default 3 s)
//! repetitions = 2
//!
//! [link]
//! rate = "30mbit"           # bottleneck
//! rtt = "30ms"              # base RTT of flows that do not set their own
//! buffer = "0.3bdp"         # or "100pkt", "150kB"
//! loss = 0.0                # random loss probability on the data path
//! reorder = { share = 0.003, delay = "20ms" }   # optional: that share of the data
//!                           # packets overtakes the rest, which wait `delay` (within `rtt`)
//! aqm = "tail_drop"         # or "fq_codel"
//! ip = "v4"                 # or "v6": flows over IPv6 (fd00:ccc::/48 inside the testbed)
//!
//! flows = "cubic:1, bbr:1"  # or [[flows]] tables: cc, count, start, duration, rtt,
//!                           # schedule = { on = "10ms", off = "70ms" } (a descheduled sender)
//!
//! [sweep]                   # every combination becomes a link setting
//! buffer = ["0.3bdp", "2bdp"]
//! flows = ["cubic:1, reno:1", "bbr:1, cubic:1"]   # match-ups, each run on every link
//! ```
//!
//! `baselines = false` skips the solo and same-algorithm runs that harm needs;
//! `baselines_for = ["cubic", "reno"]` keeps them for those algorithms only.
use std::{collections::BTreeSet, fmt, time::Duration};

use serde::{de, Deserialize, Deserializer, Serialize};

use ccctl_core::units::{Buffer, HumanDuration, Rate};

/// Frame size the bottleneck counts per full-size packet (MTU 1500 + Ethernet).
pub const FRAME_BYTES: u64 = 1514;
/// The testbed has one sender host per flow and room for this many.
pub const MAX_FLOWS: u32 = 250;

/// A scenario field that is wrong, and what is allowed there.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScenarioError {
    pub field: String,
    pub message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError {
        field: field.into(),
        message: message.into(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub duration: HumanDuration,
    #[serde(default = "default_warmup")]
    pub warmup: HumanDuration,
    #[serde(default = "one")]
    pub repetitions: u32,
    pub link: Link,
    /// Empty only when `sweep.flows` names the match-ups.
    #[serde(default, deserialize_with = "flows_from_toml")]
    pub flows: Vec<FlowGroup>,
    #[serde(default)]
    pub sweep: Sweep,
    /// Run each flow alone and each algorithm against itself on every link,
    /// so harm (Ware; harm-vs-fairness eq. 2) can be computed.
    #[serde(default = "yes")]
    pub baselines: bool,
    /// Only these algorithms get baseline runs (each flow of theirs alone,
    /// and their same-algorithm runs); empty: every algorithm. For a harm
    /// study that reads only the harmed flows (harm-vs-fairness's β), this
    /// leaves out runs no number uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baselines_for: Vec<String>,
    /// `kernel = "6.1"`: run in the VM on Debian's 6.1 kernel (the
    /// pre-6.10 `cong_control` ABI). Left out: on this kernel, with the
    /// userspace path emulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
}

/// The kernels a scenario can ask for by name: the VM's.
pub const KERNELS: [&str; 1] = ["6.1"];

fn yes() -> bool {
    true
}

fn default_warmup() -> HumanDuration {
    HumanDuration(Duration::from_secs(3))
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    pub rate: Rate,
    pub rtt: HumanDuration,
    pub buffer: Buffer,
    #[serde(default)]
    pub loss: f64,
    #[serde(default)]
    pub aqm: Aqm,
    /// The IP version the flows run over.
    #[serde(default)]
    pub ip: IpVersion,
    /// The ACK direction's rate; default: unconstrained. Host path only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_rate: Option<Rate>,
    /// A bandwidth trace in Mahimahi's format (one line per 1500-byte
    /// delivery opportunity, in ms) that sets the bottleneck's rate in
    /// place of `rate` (which still sizes BDP buffers). Host path only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Reordering on the data path after the bottleneck.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reorder: Option<ReorderSpec>,
}

/// A path that reorders (parallel links of different delay, ECMP or link
/// aggregation): a `share` of the data packets overtakes the rest, which
/// wait `delay` more. The flows' RTT is the RTT of the waiting packets:
/// `delay` is taken out of the ACK path, so the overtaking ones see
/// `rtt - delay`, and `delay` must be below every RTT it applies to. On
/// the host path the share is the share; the VM's netem (`reorder P% 50%`)
/// lets far fewer packets overtake (docs/lab.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReorderSpec {
    pub share: f64,
    pub delay: HumanDuration,
}

/// `ip = "v4"` (198.18.0.0/15) or `"v6"` (unique local fd00:ccc::/48),
/// both only inside the testbed's namespaces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IpVersion {
    #[default]
    V4,
    V6,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aqm {
    #[default]
    #[serde(alias = "taildrop")]
    TailDrop,
    FqCodel,
    /// RFC 8289 CoDel on one queue (host path only).
    Codel,
}

/// Flows of one congestion control that start together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowGroup {
    pub cc: String,
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default = "zero_span")]
    pub start: HumanDuration,
    /// Default: until the run ends.
    #[serde(default)]
    pub duration: Option<HumanDuration>,
    /// Base RTT of these flows; default: the link's (or the swept) RTT.
    #[serde(default)]
    pub rtt: Option<HumanDuration>,
    /// The sender host of these flows is gated On/Off, as a virtual machine
    /// the hypervisor deschedules (the patched-BBR paper Sec. III-C): during
    /// Off it neither transmits nor receives. Default: always On.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// Data packets to drop from each of these flows' connections,
    /// numbered from 1 in the order they leave the bottleneck (a
    /// retransmission is a new packet): a loss at a known place, every
    /// run. Host path only. iperf3's control connection counts on its own
    /// and sends a handful of data packets, so numbers below ~10 hit it too
    /// (it retransmits them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<u64>,
}

/// An On/Off gate of a sender host: On for `on`, Off for `off`, repeating.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    pub on: HumanDuration,
    pub off: HumanDuration,
}

/// Bounds of a schedule's periods: taprio's gate keeps time to well under a
/// millisecond, and a period shorter than 1 ms is below what the sender's
/// own Off detection (1 ms past the pacing gap) is meant to see; a cycle
/// over 1 s is no longer scheduling noise but an outage.
pub const SCHEDULE_MIN: Duration = Duration::from_millis(1);
pub const SCHEDULE_MAX_CYCLE: Duration = Duration::from_secs(1);

impl Schedule {
    /// The on-percentage Θ = On / (On + Off) (the patched-BBR paper eq. 11).
    pub fn theta(&self) -> f64 {
        let on = self.on.0.as_secs_f64();
        on / (on + self.off.0.as_secs_f64())
    }

    /// One cycle, On + Off.
    pub fn cycle(&self) -> Duration {
        self.on.0 + self.off.0
    }

    /// Why this schedule cannot be run, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.on.0 < SCHEDULE_MIN || self.off.0 < SCHEDULE_MIN {
            return Err(format!(
                "on {} / off {}: each must be at least 1 ms (leave `schedule` out for a sender that is always On)",
                self.on, self.off
            ));
        }
        if self.cycle() > SCHEDULE_MAX_CYCLE {
            return Err(format!(
                "on {} + off {} is a cycle over 1 s",
                self.on, self.off
            ));
        }
        if self.on.0.subsec_nanos() % 1_000 != 0 || self.off.0.subsec_nanos() % 1_000 != 0 {
            return Err("on and off must be whole microseconds".into());
        }
        Ok(())
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "on {} / off {}", self.on, self.off)
    }
}

fn zero_span() -> HumanDuration {
    HumanDuration(Duration::ZERO)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    #[serde(default)]
    pub rate: Vec<Rate>,
    #[serde(default)]
    pub rtt: Vec<HumanDuration>,
    #[serde(default)]
    pub buffer: Vec<Buffer>,
    /// Alternative flow sets ("match-ups"), shorthand strings; each replaces
    /// `flows` in turn.
    #[serde(default, deserialize_with = "matchups_from_toml")]
    pub flows: Vec<Vec<FlowGroup>>,
}

/// Each match-up is a shorthand string or an array of flow tables (the form
/// the scenario a run writes into its directory uses, so that file reads
/// back as the same scenario).
fn matchups_from_toml<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<FlowGroup>>, D::Error> {
    struct Matchup(Vec<FlowGroup>);
    impl<'de> Deserialize<'de> for Matchup {
        fn deserialize<D2: Deserializer<'de>>(d: D2) -> Result<Self, D2::Error> {
            flows_from_toml(d).map(Matchup)
        }
    }
    Ok(Vec::<Matchup>::deserialize(d)?
        .into_iter()
        .map(|m| m.0)
        .collect())
}

/// `flows` is either the shorthand string `"cubic:1, bbr:2"` or an array of tables.
fn flows_from_toml<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<FlowGroup>, D::Error> {
    struct V;
    impl<'de> de::Visitor<'de> for V {
        type Value = Vec<FlowGroup>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(r#"a string like "cubic:1, bbr:1" or an array of [[flows]] tables"#)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            parse_flow_shorthand(s).map_err(E::custom)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(g) = seq.next_element::<FlowGroup>()? {
                out.push(g);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

/// `"cubic:1, modest-bbr:2"` -> groups; a missing `:N` means one flow.
pub fn parse_flow_shorthand(s: &str) -> Result<Vec<FlowGroup>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|part| {
            let (cc, count) = match part.split_once(':') {
                Some((cc, n)) => (
                    cc.trim(),
                    n.trim().parse::<u32>().map_err(|_| {
                        format!("`{part}`: the count after `:` must be a whole number")
                    })?,
                ),
                None => (part, 1),
            };
            Ok(FlowGroup {
                cc: cc.to_string(),
                count,
                start: zero_span(),
                drop: Vec::new(),
                duration: None,
                rtt: None,
                schedule: None,
            })
        })
        .collect()
}

/// One link configuration of a (swept) scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkSetting {
    pub rate: Rate,
    pub rtt: HumanDuration,
    pub buffer: Buffer,
    pub buffer_bytes: u64,
    pub loss: f64,
    pub aqm: Aqm,
    pub ip: IpVersion,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverse_rate: Option<Rate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reorder: Option<ReorderSpec>,
}

/// One flow of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowPlan {
    pub cc: String,
    pub start: Duration,
    pub duration: Duration,
    pub rtt: Duration,
    /// The On/Off gate of this flow's sender host, if any.
    pub schedule: Option<Schedule>,
    /// Data packets of its connection to drop (see [`FlowGroup::drop`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<u64>,
}

/// One run: a link setting, a repetition, its flows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub link_index: usize,
    pub link: LinkSetting,
    /// Index into [`Scenario::matchups`].
    pub matchup: usize,
    pub repetition: u32,
    pub flows: Vec<FlowPlan>,
}

impl Scenario {
    /// Parse and validate a scenario file's text.
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        let sc: Scenario = toml::from_str(text).map_err(|e| {
            let field = e
                .span()
                .map(|r| describe_span(text, r))
                .unwrap_or_else(|| "scenario".into());
            // The parser's own message is empty for some syntax errors (a
            // file that ends inside an array, found by the fuzz test); a
            // refusal must still say what is wrong.
            let message = e.message().trim();
            let message = if message.is_empty() {
                "is not valid TOML here: a `[`, `{` or string is not closed \
                 before this point, or the file ends early"
                    .to_string()
            } else {
                message.to_string()
            };
            bad(field, message)
        })?;
        sc.validate()?;
        Ok(sc)
    }

    /// Every link setting the sweep expands to, in a stable order.
    pub fn link_settings(&self) -> Vec<LinkSetting> {
        let rates = if self.sweep.rate.is_empty() {
            vec![self.link.rate]
        } else {
            self.sweep.rate.clone()
        };
        let rtts = if self.sweep.rtt.is_empty() {
            vec![self.link.rtt]
        } else {
            self.sweep.rtt.clone()
        };
        let buffers = if self.sweep.buffer.is_empty() {
            vec![self.link.buffer]
        } else {
            self.sweep.buffer.clone()
        };
        let mut out = Vec::new();
        for &rate in &rates {
            for &rtt in &rtts {
                for &buffer in &buffers {
                    out.push(LinkSetting {
                        rate,
                        rtt,
                        buffer,
                        buffer_bytes: buffer.bytes(rate, rtt.0, FRAME_BYTES),
                        loss: self.link.loss,
                        aqm: self.link.aqm,
                        ip: self.link.ip,
                        reverse_rate: self.link.reverse_rate,
                        trace: self.link.trace.clone(),
                        reorder: self.link.reorder,
                    });
                }
            }
        }
        out
    }

    /// The flow sets to run on every link: `sweep.flows` if given, else `flows`.
    pub fn matchups(&self) -> Vec<&[FlowGroup]> {
        if self.sweep.flows.is_empty() {
            vec![&self.flows]
        } else {
            self.sweep.flows.iter().map(Vec::as_slice).collect()
        }
    }

    /// The flows of `groups` on `link`, one entry per flow.
    pub fn flow_plans(&self, groups: &[FlowGroup], link: &LinkSetting) -> Vec<FlowPlan> {
        groups
            .iter()
            .flat_map(|g| {
                let duration = g
                    .duration
                    .map(|d| d.0)
                    .unwrap_or(self.duration.0.saturating_sub(g.start.0));
                let rtt = g.rtt.map(|r| r.0).unwrap_or(link.rtt.0);
                (0..g.count).map(move |_| FlowPlan {
                    cc: g.cc.clone(),
                    start: g.start.0,
                    duration,
                    rtt,
                    schedule: g.schedule,
                    drop: g.drop.clone(),
                })
            })
            .collect()
    }

    /// Every run: link settings x match-ups x repetitions, flows resolved.
    pub fn runs(&self) -> Vec<Run> {
        let mut out = Vec::new();
        for (link_index, link) in self.link_settings().into_iter().enumerate() {
            for (matchup, groups) in self.matchups().into_iter().enumerate() {
                for repetition in 0..self.repetitions {
                    out.push(Run {
                        link_index,
                        link: link.clone(),
                        matchup,
                        repetition,
                        flows: self.flow_plans(groups, &link),
                    });
                }
            }
        }
        out
    }

    /// The distinct congestion controls the scenario names.
    pub fn algorithms(&self) -> BTreeSet<String> {
        self.matchups()
            .into_iter()
            .flatten()
            .map(|g| g.cc.clone())
            .collect()
    }

    /// Check that every algorithm is one of `known` (ours plus the target
    /// kernel's); the lab calls this with the kernel it will run on.
    pub fn check_algorithms(&self, known: &[String]) -> Result<(), ScenarioError> {
        self.check_flows(|field, g| {
            if known.iter().any(|k| k == &g.cc) {
                Ok(())
            } else {
                Err(bad(
                    format!("{field}.cc"),
                    format!(
                        "unknown congestion control `{}`; known here: {}",
                        g.cc,
                        known.join(", ")
                    ),
                ))
            }
        })
    }

    /// Calls `check` on every flow group with its field path
    /// (`flows[1]`, or `sweep.flows[2][0]` for match-ups).
    fn check_flows(
        &self,
        mut check: impl FnMut(&str, &FlowGroup) -> Result<(), ScenarioError>,
    ) -> Result<(), ScenarioError> {
        if self.sweep.flows.is_empty() {
            for (i, g) in self.flows.iter().enumerate() {
                check(&format!("flows[{i}]"), g)?;
            }
        } else {
            for (m, set) in self.sweep.flows.iter().enumerate() {
                for (i, g) in set.iter().enumerate() {
                    check(&format!("sweep.flows[{m}][{i}]"), g)?;
                }
            }
        }
        Ok(())
    }

    /// Everything that can be checked without a kernel, with the field named.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let valid_name = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        if !valid_name(&self.name) {
            return Err(bad("name", "1-64 characters of letters, digits, `-`, `_` or `.` (it names the results directory)"));
        }
        let run = self.duration.0;
        if run.is_zero() {
            return Err(bad("duration", "must be longer than 0 s"));
        }
        if self.warmup.0 >= run {
            return Err(bad(
                "warmup",
                format!(
                    "{} leaves nothing of a {} run to measure",
                    self.warmup, self.duration
                ),
            ));
        }
        if !(1..=100).contains(&self.repetitions) {
            return Err(bad("repetitions", "must be 1 to 100"));
        }
        if !(0.0..1.0).contains(&self.link.loss) {
            return Err(bad(
                "link.loss",
                "a loss probability in [0, 1), e.g. 0.01 for 1 %",
            ));
        }
        if let Some(r) = self.link.reorder {
            if !(r.share > 0.0 && r.share < 1.0) {
                return Err(bad(
                    "link.reorder.share",
                    format!(
                        "{}: a share of the packets in (0, 1), e.g. 0.003 for 0.3 %",
                        r.share
                    ),
                ));
            }
            let max = ccctl_path::MAX_REORDER_DELAY;
            if r.delay.0.is_zero() || r.delay.0 > max {
                return Err(bad(
                    "link.reorder.delay",
                    format!("{}: must be above 0 and at most {max:?}", r.delay),
                ));
            }
        }
        if let Some(k) = &self.kernel {
            if !KERNELS.contains(&k.as_str()) {
                return Err(bad(
                    "kernel",
                    format!(
                        "`{k}`: only {} (the VM's Debian kernel) can be asked for; leave it out to run on this kernel",
                        KERNELS.map(|k| format!("\"{k}\"")).join(", ")
                    ),
                ));
            }
        }
        if let Some(r) = self.link.reverse_rate {
            if !(8e3..=1e10).contains(&r.0) {
                return Err(bad(
                    "link.reverse_rate",
                    format!("{r} is outside 8kbit to 10gbit"),
                ));
            }
        }
        if let Some(t) = &self.link.trace {
            ccctl_path::trace::BandwidthTrace::load(std::path::Path::new(t))
                .map_err(|e| bad("link.trace", e.to_string()))?;
        }
        if self.kernel.is_some() {
            // The VM's path is the kernel's qdiscs: nothing that only the
            // userspace path emulator does.
            let host_only = if self.link.reverse_rate.is_some() {
                Some("link.reverse_rate")
            } else if self.link.trace.is_some() {
                Some("link.trace")
            } else if self.link.aqm == Aqm::Codel {
                Some("link.aqm")
            } else {
                None
            };
            if let Some(field) = host_only {
                return Err(bad(
                    field,
                    "needs the host's userspace path emulator; with kernel = \"6.1\" the run is in the VM (netem and tbf)",
                ));
            }
        }
        let rates = self
            .sweep
            .rate
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("sweep.rate[{i}]"), *r));
        for (field, rate) in std::iter::once(("link.rate".to_string(), self.link.rate)).chain(rates)
        {
            if !(8e3..=1e10).contains(&rate.0) {
                return Err(bad(field, format!("{rate} is outside 8kbit to 10gbit")));
            }
        }
        // Buffers must hold one full-size packet on every link they apply to.
        for link in self.link_settings() {
            if link.buffer_bytes < FRAME_BYTES {
                let field = match self.sweep.buffer.iter().position(|b| *b == link.buffer) {
                    Some(i) => format!("sweep.buffer[{i}]"),
                    None => "link.buffer".into(),
                };
                return Err(bad(
                    field,
                    format!(
                        "{} is {} bytes on a {} / {} link, less than one packet ({FRAME_BYTES} bytes)",
                        link.buffer, link.buffer_bytes, link.rate, link.rtt
                    ),
                ));
            }
        }
        if self.flows.is_empty() && self.sweep.flows.is_empty() {
            return Err(bad("flows", "name at least one flow, e.g. \"cubic:1\""));
        }
        if !self.baselines_for.is_empty() {
            if !self.baselines {
                return Err(bad(
                    "baselines_for",
                    "names algorithms to run baselines for, but `baselines = false` runs none",
                ));
            }
            let named = self.algorithms();
            if let Some((i, cc)) = self
                .baselines_for
                .iter()
                .enumerate()
                .find(|(_, cc)| !named.contains(*cc))
            {
                return Err(bad(
                    format!("baselines_for[{i}]"),
                    format!(
                        "`{cc}` runs in no match-up; the scenario's algorithms: {}",
                        named.into_iter().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        if let Some(m) = self.sweep.flows.iter().position(Vec::is_empty) {
            return Err(bad(
                format!("sweep.flows[{m}]"),
                "name at least one flow, e.g. \"cubic:1\"",
            ));
        }
        let duration = self.duration;
        self.check_flows(|field, g| {
            let valid_cc = !g.cc.is_empty()
                && g.cc.len() <= 15
                && g.cc
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c));
            if !valid_cc {
                return Err(bad(
                    format!("{field}.cc"),
                    format!("`{}` is not a congestion-control name", g.cc),
                ));
            }
            if g.count == 0 {
                return Err(bad(format!("{field}.count"), "must be at least 1"));
            }
            if g.start.0 >= run {
                return Err(bad(
                    format!("{field}.start"),
                    format!("{} is not before the end of the {duration} run", g.start),
                ));
            }
            if let Some(d) = g.duration {
                if d.0.is_zero() {
                    return Err(bad(format!("{field}.duration"), "must be longer than 0 s"));
                }
                if g.start.0 + d.0 > run {
                    return Err(bad(
                        format!("{field}.duration"),
                        format!(
                            "start {} + duration {d} ends after the {duration} run",
                            g.start
                        ),
                    ));
                }
            }
            if let Some(sch) = g.schedule {
                sch.check()
                    .map_err(|m| bad(format!("{field}.schedule"), m))?;
            }
            if g.drop.contains(&0) {
                return Err(bad(
                    format!("{field}.drop"),
                    "data packets are numbered from 1",
                ));
            }
            if !g.drop.is_empty() && self.kernel.is_some() {
                return Err(bad(
                    format!("{field}.drop"),
                    "needs the host's userspace path emulator; with kernel = \"6.1\" the run is in the VM",
                ));
            }
            if let Some(r) = g.rtt {
                if r.0 > Duration::from_secs(10) {
                    return Err(bad(
                        format!("{field}.rtt"),
                        format!("{r} is above the 10 s the testbed allows"),
                    ));
                }
            }
            if let (Some(r), Some(o)) = (g.rtt, self.link.reorder) {
                if o.delay.0 >= r.0 {
                    return Err(bad(
                        format!("{field}.rtt"),
                        format!(
                            "{r} is not above link.reorder.delay {}: the delay is part of the RTT",
                            o.delay
                        ),
                    ));
                }
            }
            Ok(())
        })?;
        if let Some(o) = self.link.reorder {
            let rtts = std::iter::once(("link.rtt".to_string(), self.link.rtt)).chain(
                self.sweep
                    .rtt
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (format!("sweep.rtt[{i}]"), *r)),
            );
            for (field, rtt) in rtts {
                if o.delay.0 >= rtt.0 {
                    return Err(bad(
                        field,
                        format!(
                            "{rtt} is not above link.reorder.delay {}: the delay is part of the RTT",
                            o.delay
                        ),
                    ));
                }
            }
        }
        for (m, groups) in self.matchups().into_iter().enumerate() {
            let total = groups.iter().fold(0u32, |t, g| t.saturating_add(g.count));
            if total > MAX_FLOWS {
                let field = if self.sweep.flows.is_empty() {
                    "flows".to_string()
                } else {
                    format!("sweep.flows[{m}]")
                };
                return Err(bad(
                    field,
                    format!("{total} flows; the testbed runs at most {MAX_FLOWS}"),
                ));
            }
        }
        Ok(())
    }
}

/// Name the TOML key around a byte range, for error messages.
fn describe_span(text: &str, r: std::ops::Range<usize>) -> String {
    let line_no = text[..r.start.min(text.len())].matches('\n').count() + 1;
    let line = text.lines().nth(line_no - 1).unwrap_or("").trim();
    let key = line.split('=').next().unwrap_or(line).trim();
    format!("line {line_no} (`{key}`)")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
name = "bbr-vs-cubic"
duration = "30s"
[link]
rate = "30mbit"
rtt = "30ms"
buffer = "0.3bdp"
"#;

    /// Every bundled scenario, written out the way a run directory keeps it
    /// (and the VM re-reads it), parses back to the same scenario.
    #[test]
    fn bundled_scenarios_round_trip_through_the_run_directory_form() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("scenarios/") {
            let path = entry.expect("dir entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("readable");
            let sc =
                Scenario::from_toml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let written = toml::to_string_pretty(&sc).expect("serializes");
            let back = Scenario::from_toml(&written)
                .unwrap_or_else(|e| panic!("{} written back: {e}\n{written}", path.display()));
            assert_eq!(back.runs(), sc.runs(), "{}", path.display());
            n += 1;
        }
        assert!(n >= 5, "only {n} bundled scenarios found");
    }

    fn with(extra: &str) -> Result<Scenario, ScenarioError> {
        // `flows` is a top-level key: it must come before [link].
        let (head, tail) = BASE.split_at(BASE.find("[link]").unwrap_or(0));
        Scenario::from_toml(&format!("{head}{extra}\n{tail}"))
    }

    #[test]
    fn a_schedule_gates_a_flow_group_and_bad_ones_are_refused() {
        let sc = with(
            r#"flows = [{ cc = "bbr", schedule = { on = "10ms", off = "70ms" } }, { cc = "cubic" }]"#,
        )
        .expect("valid");
        let runs = sc.runs();
        let sch = runs[0].flows[0].schedule.expect("the first group is gated");
        assert_eq!(
            (sch.on.0, sch.off.0),
            (Duration::from_millis(10), Duration::from_millis(70))
        );
        assert_eq!(sch.theta(), 0.125);
        assert_eq!(
            runs[0].flows[1].schedule, None,
            "the second group is always On"
        );
        for (bad, needle) in [
            (r#"{ on = "0ms", off = "10ms" }"#, "at least 1 ms"),
            (r#"{ on = "10ms", off = "0.5ms" }"#, "at least 1 ms"),
            (r#"{ on = "600ms", off = "600ms" }"#, "cycle over 1 s"),
            (r#"{ on = "10ms" }"#, "missing field `off`"),
            (
                r#"{ on = "10ms", off = "10ms", slot = "1ms" }"#,
                "unknown field `slot`",
            ),
        ] {
            let e = with(&format!(r#"flows = [{{ cc = "bbr", schedule = {bad} }}]"#))
                .expect_err(bad)
                .to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn shorthand_flows_and_defaults() {
        let sc = with(r#"flows = "cubic:1, bbr""#).expect("valid");
        assert_eq!(sc.warmup.0, Duration::from_secs(3));
        assert_eq!(sc.repetitions, 1);
        let runs = sc.runs();
        assert_eq!(runs.len(), 1);
        let f = &runs[0].flows;
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].cc.as_str(), f[1].cc.as_str()), ("cubic", "bbr"));
        assert_eq!(f[0].duration, Duration::from_secs(30));
        assert_eq!(f[0].rtt, Duration::from_millis(30));
        // 0.3 BDP of 30 Mbit/s x 30 ms = 33 750 bytes.
        assert_eq!(runs[0].link.buffer_bytes, 33_750);
    }

    #[test]
    fn tables_sweeps_and_repetitions_expand() {
        let sc = with(
            r#"repetitions = 2
[[flows]]
cc = "cubic"
count = 2
[[flows]]
cc = "bbr"
start = "5s"
rtt = "80ms"
[sweep]
buffer = ["0.5bdp", "2bdp"]
rtt = ["10ms", "50ms"]"#,
        )
        .expect("valid");
        let runs = sc.runs();
        assert_eq!(runs.len(), 2 * 2 * 2, "2 rtt x 2 buffers x 2 repetitions");
        assert_eq!(sc.link_settings().len(), 4);
        let r = &runs[0];
        assert_eq!(r.flows.len(), 3);
        assert_eq!(r.flows[2].start, Duration::from_secs(5));
        assert_eq!(r.flows[2].duration, Duration::from_secs(25));
        assert_eq!(
            r.flows[2].rtt,
            Duration::from_millis(80),
            "own RTT wins over the sweep"
        );
        assert_eq!(r.flows[0].rtt, Duration::from_millis(10), "swept RTT");
        assert_eq!(
            sc.algorithms().into_iter().collect::<Vec<_>>(),
            vec!["bbr", "cubic"]
        );
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases: &[(&str, &str)] = &[
            (r#"flows = "cubic:0""#, "flows[0].count"),
            (r#"flows = "cubic:x""#, "count after `:`"),
            (r#"flows = """#, "flows"),
            (
                "[[flows]]\ncc = \"cubic\"\nstart = \"30s\"",
                "flows[0].start",
            ),
            (
                "[[flows]]\ncc = \"cubic\"\nstart = \"20s\"\nduration = \"20s\"",
                "flows[0].duration",
            ),
            (
                "[[flows]]\ncc = \"cubic\"\ncolour = \"red\"",
                "unknown field `colour`",
            ),
            ("flows = \"cubic\"\nwarmup = \"30s\"", "warmup"),
            ("flows = \"cubic\"\nrepetitions = 0", "repetitions"),
            ("flows = \"cubic\"\nbogus = 1", "unknown field `bogus`"),
            ("flows = \"cubic:300\"", "at most 250"),
            ("flows = \"bad name\"", "flows[0].cc"),
            (
                "flows = \"cubic\"\n[sweep]\nbuffer = [\"1pkt\", \"0.01bdp\"]",
                "sweep.buffer[1]",
            ),
        ];
        for (extra, needle) in cases {
            let e = with(extra).expect_err(extra);
            assert!(e.to_string().contains(needle), "{extra:?}: {e}");
        }
    }

    #[test]
    fn impossible_link_numbers_are_refused() {
        let flows = "flows = \"cubic\"\n";
        let cases: &[(&str, &str, &str)] = &[
            ("rate = \"30mbit\"", "rate = \"0mbit\"", "rate"),
            ("rtt = \"30ms\"", "rtt = \"-5ms\"", "rtt"),
            ("buffer = \"0.3bdp\"", "buffer = \"0.5pkt\"", "link.buffer"),
            (
                "buffer = \"0.3bdp\"",
                "buffer = \"0.3bdp\"\nloss = 1.5",
                "link.loss",
            ),
            (
                "buffer = \"0.3bdp\"",
                "buffer = \"0.3bdp\"\naqm = \"red\"",
                "aqm",
            ),
            (
                "buffer = \"0.3bdp\"",
                "buffer = \"0.3bdp\"\nip = \"v5\"",
                "(`ip`): unknown variant `v5`, expected `v4` or `v6`",
            ),
        ];
        for (from, to, needle) in cases {
            let text = format!("{flows}{}", BASE.replace(from, to));
            let text = text.replacen("\nname", "name", 1);
            let e = Scenario::from_toml(&text).expect_err(to);
            assert!(e.to_string().contains(needle), "{to}: {e}");
        }
    }

    /// `link.reorder` reaches every measured run's testbed with its delay
    /// taken out of the ACK path (the waiting packets' RTT is the flows'
    /// RTT), the calibration runs on a link without it, and bad values are
    /// refused naming the field.
    #[test]
    fn reordering_reaches_the_testbed_within_the_rtt() {
        let link = |extra: &str| {
            let text = format!(
                "flows = \"cubic:1, bbr:1\"\n{}",
                BASE.replace(
                    "buffer = \"0.3bdp\"",
                    &format!("buffer = \"0.3bdp\"\n{extra}")
                )
            );
            Scenario::from_toml(&text.replacen("\nname", "name", 1))
        };
        let sc = link("reorder = { share = 0.003, delay = \"20ms\" }").expect("valid");
        let plan = crate::plan::plan(&sc);
        let mut measured = 0;
        for job in &plan.jobs {
            let cfg = crate::exec::testbed_config(job, crate::testbed::PathKind::Userspace)
                .expect("a testbed config");
            match job.link.reorder {
                Some(r) => {
                    measured += 1;
                    assert_eq!(
                        cfg.reorder,
                        Some(crate::testbed::Reorder {
                            share: 0.003,
                            delay: Duration::from_millis(20)
                        })
                    );
                    assert!(r.share == 0.003);
                    assert!(
                        cfg.senders
                            .iter()
                            .all(|h| h.rtt == Duration::from_millis(10)),
                        "30 ms RTT less the 20 ms the waiting packets wait: {:?}",
                        cfg.senders
                    );
                }
                None => {
                    assert_eq!(cfg.reorder, None, "{:?}", job.kind);
                    assert!(cfg
                        .senders
                        .iter()
                        .all(|h| h.rtt == Duration::from_millis(30)));
                }
            }
        }
        assert!(
            measured > 0 && measured < plan.jobs.len(),
            "calibration without it"
        );

        let cases: &[(&str, &str)] = &[
            (
                "reorder = { share = 1.5, delay = \"20ms\" }",
                "link.reorder.share",
            ),
            (
                "reorder = { share = nan, delay = \"20ms\" }",
                "link.reorder.share",
            ),
            (
                "reorder = { share = 0.0, delay = \"20ms\" }",
                "link.reorder.share",
            ),
            (
                "reorder = { share = 0.1, delay = \"0ms\" }",
                "link.reorder.delay",
            ),
            (
                "reorder = { share = 0.1, delay = \"2s\" }",
                "link.reorder.delay",
            ),
            (
                "reorder = { share = 0.1, delay = \"30ms\" }",
                "link.rtt: 30ms is not above link.reorder.delay",
            ),
            (
                "reorder = { share = 0.1, delay = \"5ms\", gap = 3 }",
                "unknown field `gap`",
            ),
            ("reorder = { share = 0.1 }", "missing field `delay`"),
        ];
        for (extra, needle) in cases {
            let e = link(extra).expect_err(extra);
            assert!(e.to_string().contains(needle), "{extra}: {e}");
        }
        let e = link(
            "reorder = { share = 0.1, delay = \"20ms\" }\n[sweep]\nrtt = [\"40ms\", \"15ms\"]",
        )
        .expect_err("a swept RTT within the delay");
        assert!(e.to_string().contains("sweep.rtt[1]"), "{e}");
    }

    /// `ip = "v6"` reaches every run's link (the calibration's too, see
    /// plan.rs); the default is IPv4.
    #[test]
    fn ip_version_reaches_every_link() {
        let v4 = with("flows = \"cubic\"").expect("valid");
        assert!(v4.link_settings().iter().all(|l| l.ip == IpVersion::V4));
        let text = format!(
            "flows = \"cubic\"\n{}",
            BASE.replace("buffer = \"0.3bdp\"", "buffer = \"0.3bdp\"\nip = \"v6\"")
        );
        let sc = Scenario::from_toml(&text.replacen("\nname", "name", 1)).expect("valid");
        let links = sc.link_settings();
        assert!(!links.is_empty() && links.iter().all(|l| l.ip == IpVersion::V6));
        assert!(crate::plan::plan(&sc)
            .jobs
            .iter()
            .all(|j| j.link.ip == IpVersion::V6));
    }

    #[test]
    fn matchups_expand_and_are_validated() {
        let sc = with("repetitions = 2\n[sweep]\nflows = [\"cubic:1, reno:1\", \"bbr:2\"]\nbuffer = [\"1bdp\", \"2bdp\"]").expect("valid");
        let runs = sc.runs();
        assert_eq!(
            runs.len(),
            2 * 2 * 2,
            "2 buffers x 2 match-ups x 2 repetitions"
        );
        assert_eq!(runs[0].matchup, 0);
        assert_eq!(runs[2].matchup, 1);
        assert_eq!(
            runs[2]
                .flows
                .iter()
                .map(|f| f.cc.as_str())
                .collect::<Vec<_>>(),
            ["bbr", "bbr"]
        );
        assert_eq!(
            sc.algorithms().into_iter().collect::<Vec<_>>(),
            ["bbr", "cubic", "reno"]
        );
        let e = with("[sweep]\nflows = [\"cubic:1\", \"reno:0\"]").expect_err("count 0");
        assert_eq!(e.field, "sweep.flows[1][0].count");
        let known: Vec<String> = ["reno", "cubic"].map(String::from).to_vec();
        let e = sc.check_algorithms(&known).expect_err("bbr unknown");
        assert_eq!(e.field, "sweep.flows[1][0].cc");
        let e = with("").expect_err("no flows at all");
        assert_eq!(e.field, "flows");
    }

    #[test]
    fn algorithms_are_checked_against_the_target() {
        let sc = with(r#"flows = "cubic:1, modest-bbr:1""#).expect("valid");
        let known: Vec<String> = ["reno", "cubic", "bbr"].map(String::from).to_vec();
        let e = sc
            .check_algorithms(&known)
            .expect_err("modest-bbr is not known");
        assert_eq!(e.field, "flows[1].cc");
        assert!(e.message.contains("reno, cubic, bbr"));
    }

    /// A file cut off inside an array (the fuzz test found one: the closing
    /// `]` of `sweep.flows` replaced by a comment) is refused with a message,
    /// not with the parser's empty one.
    #[test]
    fn an_unterminated_array_is_refused_with_a_message() {
        let text = format!("{BASE}[sweep]\nflows = [\n    [\"cubic\"],\n#");
        let e = Scenario::from_toml(&text).expect_err("unterminated array");
        assert!(!e.field.trim().is_empty(), "{e:?}");
        assert!(e.message.contains("not valid TOML"), "{e:?}");
    }
}
