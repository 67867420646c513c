//! Network-namespace dumbbell testbed.
//!
//! ```text
//!  sender0 ns ─eth0══to_s0─┐
//!  sender1 ns ─eth0══to_s1─┤ router ns ─to_rx══eth0─ receiver ns
//!  ...                     ┘     │
//!                                └ bottleneck qdisc on to_rx egress
//! ```
//!
//! Qdisc layout (all in the router namespace, never on a sender's own egress,
//! where TCP Small Queues would throttle the sender locally and the buffer
//! would never overflow):
//!
//! * `to_rx` root: `tbf rate R burst B limit L` (handle `1:`). With
//!   [`Aqm::TailDrop`] tbf's built-in bfifo of `L` bytes is the bottleneck
//!   buffer. With [`Aqm::FqCodel`] an `fq_codel` child (handle `10:`, parent
//!   `1:1`) replaces it, its packet limit derived from the byte buffer.
//!   * `L = buffer_bytes` (bytes as the qdisc counts them: IP packet + 14 bytes
//!     of Ethernet header, so a full-size frame is `mtu + 14` bytes).
//!   * `B = max(2 * (mtu + 14), ceil(R / 8 * 10 ms))`: at least two full frames
//!     (tbf drops a packet larger than its bucket, so small rates still work)
//!     and 10 ms worth of tokens, so a late watchdog timer (common in a TCG
//!     guest on a busy machine) does not throw link time away; see
//!     [`TBF_BURST_MS`]. The burst is tokens, not buffer: it never adds
//!     queueing, and the bucket only fills while the queue is empty.
//! * `to_sN` root (ACK path toward sender N): `netem delay RTT_N limit 100000`,
//!   only when `RTT_N > 0`. The whole base RTT sits on the ACK path so that the
//!   data path to the bottleneck has no extra queue and each sender keeps its
//!   own RTT (RTT unfairness) while sharing one bottleneck.
//! * A gated sender N ([`SenderConfig::gate`], a descheduled VM,
//!   the patched-BBR paper Sec. III-C): `taprio` roots on the sender's own
//!   `eth0` and on the router's `to_sN`, one traffic class, gate open On /
//!   closed Off, CLOCK_TAI, base-time 0, so both gates open and close
//!   together: Off, the sender transmits nothing (TCP Small Queues holds the
//!   socket once its few packets wait at the closed gate) and receives
//!   nothing (its ACKs wait at the router). Such a sender's base RTT moves
//!   to its data path, before the bottleneck: `to_sN` ingress is
//!   redirected (u32 match-all + mirred) to `ifbgN`, whose root is the
//!   netem delay. The gates are installed last, once both ends of the link
//!   are running (see `qdisc::gate_qdiscs` for why), and both ends get
//!   permanent neighbour entries (ARP would wait at the gates).
//! * Random loss (optional) is applied to the data path *after* the
//!   bottleneck: in the receiver namespace, `eth0` ingress is redirected
//!   (u32 match-all + mirred) to an `ifb0` device whose root is
//!   `netem loss P%`. Built with a loss (0 included), the testbed can
//!   change it while flows run ([`Testbed::set_loss`]: a loss burst).
//! * Reordering (optional, [`Reorder`]) is the same netem on the same
//!   path: `delay D reorder P% 50%`: packets leave at once and overtake
//!   the others, which wait D (so D adds to the path's RTT). Like loss it
//!   comes after the bottleneck, as on a path whose parallel links (ECMP,
//!   link aggregation) differ in delay. netem's correlated draw lets far
//!   fewer packets overtake than P (see [`Reorder`]); the userspace path's
//!   reordering cell lets P overtake.
//!
//! TSO/GSO/GRO are switched off on every veth end of the path, so buffer
//! sizes mean what they say.
//!
//! Building spawns at most three processes whatever the number of senders
//! (one `ip -batch`, one or two `tc -batch`) and teardown one (`ip -batch`
//! of `netns del`): inside the TCG VM every spawn costs ~300 ms. Sysctls,
//! links, offloads, addresses and routes are set from a helper thread that
//! joined the namespace (see [`Testbed::build`]).
//!
//! The parts, by topic: `exec` (running commands and processes in
//! namespaces, [`NsProcess`]), `netns` (namespace lifecycle: names, the
//! registry of live namespaces, stale sweep, teardown on a signal), `link`
//! (veths, addresses, routes, offloads, set up from inside each namespace)
//! and `qdisc` (the tc scripts, the buffer/BDP/burst formulas, qdisc probes
//! and counters). This module is the builder: configuration, roles, and
//! [`Testbed`] itself.
//!
//! Addresses, IPv4 (all in 198.18.0.0/15, the default): receiver link
//! 198.18.0.0/24 (router .1, receiver .2), sender N link 198.18.(N+1).0/24
//! (sender .1, router .2). IPv6 ([`IpVersion::V6`], unique local addresses
//! in fd00:ccc::/48, used inside these namespaces only): receiver link
//! fd00:ccc::/64 (router ::1, receiver ::2), sender N link fd00:ccc:0:N+1::/64 (all in fd00:ccc::/48)
//! (sender ::1, router ::2). IPv6 addresses skip duplicate address detection
//! (`IFA_F_NODAD`, and `accept_dad = 0` on every testbed device before it
//! goes up, for the link-local ones too), and the build waits (at most 5 s)
//! for the kernel's link-local addresses and its workqueue that clears the
//! tentative flag, so they are usable at once.
//!
//! Namespace names are `ccctl-<pid>-<seq>-<role>`; [`sweep_stale`] removes
//! namespaces left behind by dead processes.
//!
//! Every namespace this process creates is also in a process-global registry;
//! SIGINT, SIGTERM and SIGHUP tear all of them down (processes inside first)
//! before the process dies of the signal. See [`cleanup_all`] for programs
//! that install their own handlers for those signals.

mod exec;
mod link;
mod netns;
mod qdisc;
mod sender_gate;

pub use exec::{ns_command, ns_exec, ns_spawn, ns_spawn_stdio, run, NsProcess};
pub use link::{router_sender_dev, RECEIVER_DEV, ROUTER_RX_DEV, SENDER_DEV};
pub use netns::{cleanup_all, sweep_stale, NS_PREFIX};

/// What tests outside this crate inspect: the namespaces that exist, the
/// ones this process has live, the processes inside one, a namespace's
/// identity.
#[doc(hidden)]
pub mod inspect {
    pub use super::netns::{list_netns, live, netns_pids, ns_id, NsId};
}
pub use qdisc::{
    bdp_bytes, buffer_bdp, buffer_packets, fq_codel_available, netem_available, parse_qdisc_stats,
    qdisc_available, taprio_available, tbf_burst, Aqm, Gate, QdiscStats, ETH_HLEN, TBF_BURST_MS,
};

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::thread;
use std::time::Duration;

use exec::{run_batch, spawn_tc_batch};
use link::{veth_line, veth_line_with_macs, NsSetup, IFB_DEV};
use netns::next_prefix;
use qdisc::{
    data_path_netem_line, data_path_qdiscs, gate_ifb_dev, gate_qdiscs, modprobe_all, router_qdiscs,
};

pub use ccctl_path::trace::BandwidthTrace;
pub use ccctl_path::{PathCpu, PathEmulator, PathStats};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Path(#[from] ccctl_path::Error),
    #[error("command `{cmd}` failed ({status}): {stderr}")]
    Command {
        cmd: String,
        status: String,
        stderr: String,
    },
    #[error("cannot run `{cmd}`: {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid testbed config: {0}")]
    Config(String),
    #[error("{what} needs the netem qdisc, which this kernel lacks (run inside the VM)")]
    NetemMissing { what: String },
    #[error("{what} needs the {qdisc} qdisc, which this kernel lacks")]
    QdiscMissing { what: String, qdisc: String },
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout { what: String, timeout: Duration },
    #[error("cannot parse {what}: {detail}")]
    Parse { what: String, detail: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------
// Configuration

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SenderConfig {
    /// Base round-trip time of this sender's path (zero: no netem at all).
    pub rtt: Duration,
    /// On/Off gate of this sender host (None: always On).
    pub gate: Option<Gate>,
}

/// `fd00:ccc:0:NET::HOST`: the testbed's IPv6 unique local addresses (RFC
/// 4193), all inside fd00:ccc::/48 (NET is the subnet, the fourth group),
/// in our own namespaces only, as 198.18.0.0/15 is for IPv4.
fn ula(net: u16, host: u16) -> IpAddr {
    Ipv6Addr::new(0xfd00, 0x0ccc, 0, net, 0, 0, 0, host).into()
}

/// MAC addresses of sender `i`'s link: (sender end, router end), for a
/// gated sender's permanent neighbour entries and for the userspace path,
/// which writes frames to the peer's address.
fn link_macs(i: usize) -> (String, String) {
    (
        format!("02:cc:00:00:{:02x}:01", i as u8),
        format!("02:cc:00:00:{:02x}:02", i as u8),
    )
}

/// MAC addresses of the receiver's link: (router end, receiver end).
const RECEIVER_LINK_MACS: (&str, &str) = ("02:cc:00:01:00:01", "02:cc:00:01:00:02");

fn mac_bytes(mac: &str) -> [u8; 6] {
    let mut b = [0u8; 6];
    for (i, part) in mac.split(':').take(6).enumerate() {
        b[i] = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    b
}

/// The IP version the testbed's hosts talk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IpVersion {
    #[default]
    V4,
    V6,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestbedConfig {
    /// Bottleneck rate in bit/s.
    pub rate_bps: u64,
    /// Bottleneck buffer in bytes (frames count as `mtu + 14`); see
    /// [`buffer_bdp`], [`buffer_packets`].
    pub buffer_bytes: u64,
    pub senders: Vec<SenderConfig>,
    /// Random loss probability on the data path, 0.0..1.0 (needs netem).
    /// `Some` (0.0 included) installs the loss path, so that
    /// [`Testbed::set_loss`] can change it later; `None`: no loss path.
    pub loss: Option<f64>,
    /// Reordering on the data path after the bottleneck.
    pub reorder: Option<Reorder>,
    pub aqm: Aqm,
    pub mtu: u32,
    /// Turn TSO/GSO/GRO off on every veth of the path (default true).
    pub disable_offloads: bool,
    /// Addresses, routes and so flows: IPv4 (default) or IPv6.
    pub ip: IpVersion,
    /// Which emulator makes the path: the kernel's qdiscs (netem, tbf,
    /// taprio) or ccctl-path in userspace.
    pub path: PathKind,
    /// The ACK direction's rate, bit/s (None: unconstrained). Userspace only.
    pub reverse_rate_bps: Option<u64>,
    /// A packet limit on the bottleneck queue besides `buffer_bytes`.
    /// Userspace only.
    pub buffer_packets: Option<u64>,
    /// Data packets to drop, per sender: see [`ccctl_path::LossList`].
    /// Userspace only.
    pub loss_lists: Vec<(usize, BTreeSet<u64>)>,
    /// A bandwidth trace for the bottleneck in place of `rate_bps`
    /// (Mahimahi's format). Userspace only.
    pub trace: Option<BandwidthTrace>,
    /// Seed of the userspace path's random loss.
    pub seed: u64,
}

/// The path emulator of a testbed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PathKind {
    /// tbf, netem, taprio and fq_codel in the router namespace (needs the
    /// qdiscs: the 6.1 VM has them, this host has no netem).
    #[default]
    Qdisc,
    /// ccctl-path's rattan cells on AF_PACKET in the router namespace:
    /// needs only veth and AF_PACKET, so it runs on any kernel we support,
    /// with the host's own timers.
    Userspace,
}

impl PathKind {
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Qdisc => "qdisc",
            PathKind::Userspace => "userspace",
        }
    }
}

impl TestbedConfig {
    /// One sender with zero base RTT, tail drop, MTU 1500.
    pub fn new(rate_bps: u64, buffer_bytes: u64) -> Self {
        TestbedConfig {
            rate_bps,
            buffer_bytes,
            senders: vec![SenderConfig::default()],
            loss: None,
            reorder: None,
            aqm: Aqm::TailDrop,
            mtu: 1500,
            disable_offloads: true,
            ip: IpVersion::V4,
            path: PathKind::Qdisc,
            reverse_rate_bps: None,
            buffer_packets: None,
            loss_lists: Vec::new(),
            trace: None,
            seed: 1,
        }
    }

    /// The same testbed on the userspace path emulator.
    pub fn userspace(mut self) -> Self {
        self.path = PathKind::Userspace;
        self
    }

    /// Drops data packets `packets` (counted from 1 per connection) of
    /// sender `sender`'s connections: a loss at a known place.
    pub fn with_loss_list(mut self, sender: usize, packets: &[u64]) -> Self {
        self.loss_lists
            .push((sender, packets.iter().copied().collect()));
        self
    }

    pub fn with_ip(mut self, ip: IpVersion) -> Self {
        self.ip = ip;
        self
    }

    /// Replaces the senders by one per RTT given.
    pub fn with_rtts(mut self, rtts: &[Duration]) -> Self {
        self.senders = rtts
            .iter()
            .map(|&rtt| SenderConfig { rtt, gate: None })
            .collect();
        self
    }

    pub fn with_loss(mut self, p: f64) -> Self {
        self.loss = Some(p);
        self
    }

    /// Reorders the data path: see [`Reorder`].
    pub fn with_reorder(mut self, reorder: Reorder) -> Self {
        self.reorder = Some(reorder);
        self
    }

    /// Whether the receiver's ifb netem (loss, reordering) is installed.
    fn has_data_path_netem(&self) -> bool {
        self.loss.is_some() || self.reorder.is_some()
    }

    pub fn with_aqm(mut self, aqm: Aqm) -> Self {
        self.aqm = aqm;
        self
    }

    fn needs_netem(&self) -> bool {
        self.path == PathKind::Qdisc
            && (self.has_data_path_netem() || self.senders.iter().any(|s| !s.rtt.is_zero()))
    }

    fn validate(&self) -> Result<()> {
        let frame = self.mtu as u64 + ETH_HLEN;
        if self.rate_bps < 8_000 {
            return Err(Error::Config(format!(
                "rate {} bit/s is below 8 kbit/s",
                self.rate_bps
            )));
        }
        if self.buffer_bytes < frame {
            return Err(Error::Config(format!(
                "buffer {} B is smaller than one frame ({frame} B)",
                self.buffer_bytes
            )));
        }
        if self.senders.is_empty() || self.senders.len() > 250 {
            return Err(Error::Config(format!(
                "{} senders (need 1..=250)",
                self.senders.len()
            )));
        }
        if let Some(p) = self.loss {
            if !(0.0..1.0).contains(&p) {
                return Err(Error::Config(format!("loss probability {p} not in [0, 1)")));
            }
        }
        if let Some(why) = self.reorder.and_then(|r| r.problem()) {
            return Err(Error::Config(why));
        }
        for (i, s) in self.senders.iter().enumerate() {
            if let Some(g) = s.gate {
                if g.on.is_zero() || g.off.is_zero() {
                    return Err(Error::Config(format!(
                        "sender {i}: gate on {:?} / off {:?}: both must be above 0",
                        g.on, g.off
                    )));
                }
            }
        }
        if !(576..=9000).contains(&self.mtu) {
            return Err(Error::Config(format!("mtu {} not in 576..=9000", self.mtu)));
        }
        for (i, _) in &self.loss_lists {
            if *i >= self.senders.len() {
                return Err(Error::Config(format!(
                    "loss list for sender {i}: the testbed has {} senders",
                    self.senders.len()
                )));
            }
        }
        if self.path == PathKind::Qdisc {
            let only = |what: &str| {
                Err(Error::Config(format!(
                    "{what} needs the userspace path emulator (the qdisc testbed has none)"
                )))
            };
            if self.reverse_rate_bps.is_some() {
                return only("a reverse (ACK path) rate");
            }
            if self.buffer_packets.is_some() {
                return only("a queue limit in packets");
            }
            if !self.loss_lists.is_empty() {
                return only("a loss list");
            }
            if self.trace.is_some() {
                return only("a bandwidth trace");
            }
            if self.aqm == Aqm::CoDel {
                return only("a CoDel queue");
            }
        }
        Ok(())
    }
}

pub use ccctl_path::Reorder;

/// How long a gated link may take to be running on both ends before the
/// testbed gives up (linkwatch delays non-urgent carrier events by up to 1 s).
const GATE_LINK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an IPv6 testbed's devices may take to have their link-local
/// addresses and no tentative one (linkwatch's up to 1 s, then the
/// addrconf workqueue) before the build gives up.
const IPV6_READY_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Testbed

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Sender(usize),
    Router,
    Receiver,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Sender(i) => write!(f, "s{i}"),
            Role::Router => f.write_str("rt"),
            Role::Receiver => f.write_str("rx"),
        }
    }
}

/// A dumbbell testbed; `Drop` kills every process inside its namespaces and
/// deletes them (so does SIGINT/SIGTERM/SIGHUP, see [`cleanup_all`]).
#[derive(Debug)]
pub struct Testbed {
    cfg: TestbedConfig,
    prefix: String,
    /// Namespaces of this testbed in creation order, recorded (and in the
    /// registry of live namespaces) before the batch that creates them: after a failed
    /// build some may not exist, which teardown tolerates.
    created: Vec<String>,
    next_port: AtomicU16,
    /// The userspace path, when the testbed has one (stopped before the
    /// namespaces go).
    path: Option<PathEmulator>,
    /// The gated senders' own side of their gates (userspace path).
    sender_gates: Vec<sender_gate::SenderGate>,
}

impl Testbed {
    /// Sweeps stale namespaces, then builds the testbed; on any failure,
    /// what was created so far is torn down.
    pub fn new(cfg: TestbedConfig) -> Result<Self> {
        cfg.validate()?;
        sweep_stale();
        if cfg.path == PathKind::Qdisc {
            Self::check_qdiscs(&cfg)?;
        }
        let mut tb = Testbed {
            cfg,
            prefix: next_prefix(),
            created: Vec::new(),
            next_port: AtomicU16::new(5201),
            path: None,
            sender_gates: Vec::new(),
        };
        tb.build()?; // on error, Drop cleans up
        Ok(tb)
    }

    /// The qdisc testbed needs netem, taprio and fq_codel where `cfg` uses
    /// them: refused by name before anything is created.
    fn check_qdiscs(cfg: &TestbedConfig) -> Result<()> {
        modprobe_all();
        if cfg.needs_netem() && !netem_available()? {
            return Err(Error::NetemMissing {
                what: "a non-zero base RTT, random loss or reordering".into(),
            });
        }
        if cfg.senders.iter().any(|s| s.gate.is_some()) && !taprio_available()? {
            return Err(Error::QdiscMissing {
                what: "a sender On/Off gate".into(),
                qdisc: "taprio".into(),
            });
        }
        if cfg.aqm == Aqm::FqCodel && !fq_codel_available()? {
            return Err(Error::QdiscMissing {
                what: "Aqm::FqCodel".into(),
                qdisc: "fq_codel".into(),
            });
        }
        Ok(())
    }

    /// The userspace path's counters (None on the qdisc testbed).
    pub fn path_stats(&self) -> Option<PathStats> {
        self.path.as_ref().map(PathEmulator::stats)
    }

    /// The userspace path's threads and CPU time so far.
    pub fn path_cpu(&self) -> Option<PathCpu> {
        self.path.as_ref().map(PathEmulator::cpu)
    }

    /// Whether every sender gate of the userspace path kept its schedule
    /// (a gate whose switching failed stops: its runs measured no gate).
    pub fn check_gates(&self) -> Result<()> {
        for (i, g) in self.sender_gates.iter().enumerate() {
            if let Some(why) = g.failure() {
                return Err(Error::Config(format!("sender gate {i}: {why}")));
            }
        }
        Ok(())
    }

    /// The userspace path emulator itself (None on the qdisc testbed).
    pub fn path_emulator(&self) -> Option<&PathEmulator> {
        self.path.as_ref()
    }

    pub fn config(&self) -> &TestbedConfig {
        &self.cfg
    }

    pub fn num_senders(&self) -> usize {
        self.cfg.senders.len()
    }

    /// The prefix of this testbed's namespace names (`ccctl-<pid>-<seq>`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Namespace name of `role`.
    pub fn ns(&self, role: Role) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// Address of a host: sender N's own address, the receiver's address, or
    /// the router's receiver-facing address.
    pub fn addr(&self, role: Role) -> IpAddr {
        match (self.cfg.ip, role) {
            (IpVersion::V4, Role::Sender(i)) => Ipv4Addr::new(198, 18, i as u8 + 1, 1).into(),
            (IpVersion::V4, Role::Router) => Ipv4Addr::new(198, 18, 0, 1).into(),
            (IpVersion::V4, Role::Receiver) => Ipv4Addr::new(198, 18, 0, 2).into(),
            (IpVersion::V6, Role::Sender(i)) => ula(i as u16 + 1, 1),
            (IpVersion::V6, Role::Router) => ula(0, 1),
            (IpVersion::V6, Role::Receiver) => ula(0, 2),
        }
    }

    /// The router's address on sender `i`'s link (that sender's gateway).
    pub fn router_sender_addr(&self, i: usize) -> IpAddr {
        match self.cfg.ip {
            IpVersion::V4 => Ipv4Addr::new(198, 18, i as u8 + 1, 2).into(),
            IpVersion::V6 => ula(i as u16 + 1, 2),
        }
    }

    /// Prefix length of every link's subnet.
    fn subnet_len(&self) -> u8 {
        match self.cfg.ip {
            IpVersion::V4 => 24,
            IpVersion::V6 => 64,
        }
    }

    pub fn receiver_addr(&self) -> IpAddr {
        self.addr(Role::Receiver)
    }

    pub fn sender_addr(&self, i: usize) -> IpAddr {
        self.addr(Role::Sender(i))
    }

    /// A fresh TCP port number for a server in this testbed (5201, 5202, …).
    pub fn alloc_port(&self) -> u16 {
        self.next_port.fetch_add(1, Ordering::Relaxed)
    }

    /// Round-trip times (ms, in order) of `count` pings from `from` to the
    /// receiver, one every `interval_ms` (`ping -n`; root may go below
    /// 200 ms). Fewer than 90 % replies is an error naming what ping said.
    pub fn ping_rtts(&self, from: Role, count: u32, interval_ms: u32) -> Result<Vec<f64>> {
        let dst = self.receiver_addr().to_string();
        let interval = format!("{:.3}", f64::from(interval_ms) / 1000.0);
        let count_s = count.to_string();
        let out = self.exec(from, &["ping", "-n", "-c", &count_s, "-i", &interval, &dst])?;
        let text = String::from_utf8_lossy(&out.stdout);
        let rtts: Vec<f64> = text
            .lines()
            .filter_map(|l| l.split("time=").nth(1))
            .filter_map(|t| t.split_whitespace().next()?.parse().ok())
            .collect();
        if (rtts.len() as u64) * 10 < u64::from(count) * 9 {
            return Err(Error::Parse {
                what: format!("ping from {from} ({} of {count} replies)", rtts.len()),
                detail: text.into_owned(),
            });
        }
        Ok(rtts)
    }

    /// Runs `argv` in `role`'s namespace; non-zero exit is an error.
    pub fn exec<S: AsRef<str>>(&self, role: Role, argv: &[S]) -> Result<Output> {
        ns_exec(&self.ns(role), argv)
    }

    /// Spawns `argv` in `role`'s namespace (stdout/stderr piped).
    pub fn spawn<S: AsRef<str>>(&self, role: Role, argv: &[S]) -> Result<NsProcess> {
        ns_spawn(&self.ns(role), argv)
    }

    /// [`spawn`](Self::spawn) with explicit stdout/stderr.
    pub fn spawn_stdio<S: AsRef<str>>(
        &self,
        role: Role,
        argv: &[S],
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<NsProcess> {
        ns_spawn_stdio(&self.ns(role), argv, stdout, stderr)
    }

    /// `tc -s -j qdisc show` of the bottleneck's root qdisc.
    pub fn bottleneck_stats(&self) -> Result<QdiscStats> {
        if let Some(p) = &self.path {
            let st = p.stats();
            return Ok(QdiscStats {
                kind: format!("userspace-{}", self.cfg.aqm.queue_kind().name()),
                bytes: st.sent_bytes,
                packets: st.sent,
                drops: st.dropped,
                overlimits: 0,
                requeues: 0,
                backlog: st.backlog_bytes,
                qlen: st.backlog,
            });
        }
        let out = self.exec(
            Role::Router,
            &["tc", "-s", "-j", "qdisc", "show", "dev", ROUTER_RX_DEV],
        )?;
        parse_qdisc_stats(&String::from_utf8_lossy(&out.stdout), "1:")
    }

    /// Sets the random loss of the data path to `p` (0.0..1.0) while flows
    /// run, e.g. a loss burst: `set_loss(0.05)`, then `set_loss(0.0)`. Needs
    /// a testbed built with a loss ([`TestbedConfig::with_loss`], 0.0 will
    /// do); refused, changing nothing, otherwise or for `p` outside [0, 1).
    pub fn set_loss(&self, p: f64) -> Result<()> {
        if self.cfg.loss.is_none() {
            return Err(Error::Config(
                "set_loss: this testbed has no loss path (build it with_loss, 0.0 will do)".into(),
            ));
        }
        if !(0.0..1.0).contains(&p) {
            return Err(Error::Config(format!(
                "set_loss: loss probability {p} not in [0, 1)"
            )));
        }
        if let Some(path) = &self.path {
            return Ok(path.set_loss(p)?);
        }
        // `tc -n`: one process (each costs ~300 ms in the TCG VM, and a
        // burst's edges should be where the caller put them).
        let line = data_path_netem_line("change", p, self.cfg.reorder);
        let mut cmd = std::process::Command::new("tc");
        cmd.arg("-n")
            .arg(self.ns(Role::Receiver))
            .args(line.split_whitespace());
        run(&mut cmd)?;
        Ok(())
    }

    /// Builds the dumbbell with at most three processes whatever the number
    /// of senders (spawns cost ~300 ms each in the TCG VM):
    ///
    /// 1. one `ip -batch -`: every namespace (`netns add`, i.e. a bind mount
    ///    under /run/netns), every veth pair (created straight into its two
    ///    namespaces, MTU set), the ifb device;
    /// 2. one `tc -n <router> -batch -` for the bottleneck and ACK-path
    ///    delays, and with random loss one `tc -n <receiver> -batch -`,
    ///    running concurrently with
    /// 3. a helper thread per namespace ([`NsSetup`]): sysctls, links up,
    ///    offloads off, addresses, default route.
    ///
    /// All names are in `created` (and the registry of live namespaces) before the
    /// batch runs, so a failure at any step tears down whatever exists.
    fn build(&mut self) -> Result<()> {
        if self.cfg.path == PathKind::Userspace {
            return self.build_userspace();
        }
        let c = &self.cfg;
        let (rt, rx, senders, all) = self.names();
        let data_path = c.has_data_path_netem();

        let mut lines: Vec<String> = all.iter().map(|ns| format!("netns add {ns}")).collect();
        // Router <-> receiver, with the bottleneck on the router's egress.
        lines.push(veth_line(&rt, ROUTER_RX_DEV, &rx, RECEIVER_DEV, c.mtu));
        if data_path {
            lines.push(format!("link add {IFB_DEV} netns {rx} type ifb"));
        }
        for (i, s) in senders.iter().enumerate() {
            let line = if c.senders[i].gate.is_some() {
                // Known addresses, for the permanent neighbours set below.
                let (a, b) = link_macs(i);
                veth_line_with_macs((s, SENDER_DEV, &a), (&rt, &router_sender_dev(i), &b), c.mtu)
            } else {
                veth_line(s, SENDER_DEV, &rt, &router_sender_dev(i), c.mtu)
            };
            lines.push(line);
        }
        for (i, s) in c.senders.iter().enumerate() {
            if s.gate.is_some() && !s.rtt.is_zero() {
                lines.push(format!("link add {} netns {rt} type ifb", gate_ifb_dev(i)));
            }
        }
        let rt_tc = router_qdiscs(&self.cfg);
        let rx_tc = data_path.then(|| data_path_qdiscs(c.loss.unwrap_or(0.0), c.reorder));
        let setups = self.ns_setups();
        let gates: Vec<(usize, Gate)> = c
            .senders
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.gate.map(|g| (i, g)))
            .collect();

        self.created = all.clone();
        netns::create_netns(&all, || run_batch("ip", &[], &lines))?;

        thread::scope(|scope| {
            let rt_job = spawn_tc_batch(scope, &rt, &rt_tc)?;
            let rx_job = rx_tc
                .as_deref()
                .map(|l| spawn_tc_batch(scope, &rx, l))
                .transpose()?;
            let configured = setups.iter().try_for_each(NsSetup::apply);
            let join = |h: thread::ScopedJoinHandle<'_, Result<Output>>| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::Io {
                        what: "running `tc -batch -`".into(),
                        source: std::io::Error::other("thread panicked"),
                    })
                })
            };
            let rt_res = join(rt_job);
            let rx_res = rx_job.map(join).transpose();
            rt_res?;
            rx_res?;
            configured
        })?;
        if !gates.is_empty() {
            self.install_gates(&gates)?;
        }
        if c.ip == IpVersion::V6 {
            // Usable at once means no tentative address when build returns.
            for setup in &setups {
                let devs: Vec<String> = setup.addrs.iter().map(|(d, ..)| d.clone()).collect();
                link::wait_ipv6_ready(&setup.ns, &devs, IPV6_READY_TIMEOUT)?;
            }
        }
        Ok(())
    }

    /// The namespaces to create: router, receiver, the senders, and all of
    /// them in creation order.
    fn names(&self) -> (String, String, Vec<String>, Vec<String>) {
        let rt = self.ns(Role::Router);
        let rx = self.ns(Role::Receiver);
        let senders: Vec<String> = (0..self.cfg.senders.len())
            .map(|i| self.ns(Role::Sender(i)))
            .collect();
        let mut all = vec![rt.clone(), rx.clone()];
        all.extend(senders.iter().cloned());
        (rt, rx, senders, all)
    }

    /// The userspace path: one `ip -batch` for the namespaces and veths
    /// (every end with a known MAC address: the emulator writes each frame
    /// to its peer's), the namespaces' set-up (the router does not
    /// forward; checksums computed before a frame leaves a host), then
    /// ccctl-path's cells in the router namespace.
    fn build_userspace(&mut self) -> Result<()> {
        let c = &self.cfg;
        let (rt, rx, senders, all) = self.names();
        let mut lines: Vec<String> = all.iter().map(|ns| format!("netns add {ns}")).collect();
        let (rt_mac, rx_mac) = RECEIVER_LINK_MACS;
        lines.push(veth_line_with_macs(
            (&rt, ROUTER_RX_DEV, rt_mac),
            (&rx, RECEIVER_DEV, rx_mac),
            c.mtu,
        ));
        for (i, s) in senders.iter().enumerate() {
            let (a, b) = link_macs(i);
            lines.push(veth_line_with_macs(
                (s, SENDER_DEV, &a),
                (&rt, &router_sender_dev(i), &b),
                c.mtu,
            ));
        }
        self.created = all.clone();
        netns::create_netns(&all, || run_batch("ip", &[], &lines))?;
        let setups = self.ns_setups();
        setups.iter().try_for_each(NsSetup::apply)?;
        if c.ip == IpVersion::V6 {
            for setup in &setups {
                let devs: Vec<String> = setup.addrs.iter().map(|(d, ..)| d.clone()).collect();
                link::wait_ipv6_ready(&setup.ns, &devs, IPV6_READY_TIMEOUT)?;
            }
        }
        let spec = self.path_spec();
        self.path = Some(PathEmulator::start(&spec)?);
        // Gated senders: a permanent neighbour for the gateway (ARP would
        // wait at the closed gate), then the sender's own side of the gate.
        for (i, s) in self.cfg.senders.iter().enumerate() {
            if let Some(g) = s.gate {
                let sender = self.ns(Role::Sender(i));
                let (sender_mac, router_mac) = link_macs(i);
                link::neigh_permanent(
                    &sender,
                    SENDER_DEV,
                    self.router_sender_addr(i),
                    &router_mac,
                )?;
                self.sender_gates.push(sender_gate::SenderGate::start(
                    ccctl_sys::netns::named(&sender),
                    SENDER_DEV,
                    (mac_bytes(&sender_mac), mac_bytes(&router_mac)),
                    g,
                )?);
            }
        }
        Ok(())
    }

    /// What ccctl-path builds for this testbed.
    fn path_spec(&self) -> ccctl_path::PathSpec {
        let c = &self.cfg;
        let frame = u64::from(c.mtu) + ETH_HLEN;
        ccctl_path::PathSpec {
            router_ns: ccctl_sys::netns::named(&self.ns(Role::Router)),
            receiver: ccctl_path::RouterPort {
                dev: ROUTER_RX_DEV.into(),
                mac: mac_bytes(RECEIVER_LINK_MACS.0),
                peer_mac: mac_bytes(RECEIVER_LINK_MACS.1),
            },
            senders: c
                .senders
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let (sender_mac, router_mac) = link_macs(i);
                    ccctl_path::SenderPath {
                        port: ccctl_path::RouterPort {
                            dev: router_sender_dev(i),
                            mac: mac_bytes(&router_mac),
                            peer_mac: mac_bytes(&sender_mac),
                        },
                        addr: self.addr(Role::Sender(i)),
                        rtt: s.rtt,
                        gate: s.gate,
                    }
                })
                .collect(),
            rate_bps: c.rate_bps,
            reverse_rate_bps: c.reverse_rate_bps,
            trace: c.trace.clone(),
            queue: c.aqm.queue_kind(),
            limit: ccctl_path::QueueLimit {
                bytes: Some(c.buffer_bytes.max(frame)),
                packets: c.buffer_packets,
            },
            mtu: c.mtu,
            loss: c.loss,
            reorder: c.reorder,
            loss_lists: c
                .loss_lists
                .iter()
                .map(|(i, packets)| ccctl_path::LossList {
                    sender: self.addr(Role::Sender(*i)),
                    packets: packets.clone(),
                })
                .collect(),
            seed: c.seed,
            workers: 1,
        }
    }

    /// The sender gates, last: permanent neighbours on both ends of each
    /// gated link, then, once both ends are running (carrier on and seen by
    /// linkwatch, so no later `dev_deactivate` resets taprio and freezes its
    /// schedule), the taprio roots: one `tc -batch` per gated sender and one
    /// for the router.
    fn install_gates(&self, gates: &[(usize, Gate)]) -> Result<()> {
        let rt = self.ns(Role::Router);
        let mut rt_lines = Vec::new();
        let mut jobs = Vec::new();
        for &(i, g) in gates {
            let (sender_mac, router_mac) = link_macs(i);
            let router_ip = self.router_sender_addr(i);
            let sender = self.ns(Role::Sender(i));
            link::neigh_permanent(&sender, SENDER_DEV, router_ip, &router_mac)?;
            link::neigh_permanent(
                &rt,
                &router_sender_dev(i),
                self.addr(Role::Sender(i)),
                &sender_mac,
            )?;
            link::wait_running(&sender, SENDER_DEV, GATE_LINK_TIMEOUT)?;
            link::wait_running(&rt, &router_sender_dev(i), GATE_LINK_TIMEOUT)?;
            let (s_lines, r_lines) = gate_qdiscs(&g, i);
            jobs.push((sender, s_lines));
            rt_lines.extend(r_lines);
        }
        jobs.push((rt, rt_lines));
        thread::scope(|scope| {
            let handles = jobs
                .iter()
                .map(|(ns, lines)| spawn_tc_batch(scope, ns, lines))
                .collect::<Result<Vec<_>>>()?;
            let mut first = Ok(());
            for h in handles {
                let r = h.join().unwrap_or_else(|_| {
                    Err(Error::Io {
                        what: "running `tc -batch -`".into(),
                        source: std::io::Error::other("thread panicked"),
                    })
                });
                if let (Ok(()), Err(e)) = (&first, r) {
                    first = Err(e);
                }
            }
            first
        })
    }

    /// What every namespace gets from inside: fresh per-flow state (no
    /// cached ssthresh/RTT between runs), socket-buffer autotuning up to
    /// 64 MiB so large BDPs (1 Gbit/s x 200 ms = 25 MB) are never receive-
    /// window limited, loopback up; plus per role forwarding, links,
    /// offloads, addresses and routes.
    fn ns_setups(&self) -> Vec<NsSetup> {
        let c = &self.cfg;
        let v6 = c.ip == IpVersion::V6;
        let len = self.subnet_len();
        let base = |role: Role| {
            let mut s = NsSetup::new(&self.ns(role));
            s.sysctls = vec![
                ("net.ipv4.tcp_no_metrics_save".into(), "1".into()),
                ("net.ipv4.tcp_rmem".into(), "4096 131072 67108864".into()),
                ("net.ipv4.tcp_wmem".into(), "4096 16384 67108864".into()),
            ];
            s.up.push("lo".into());
            s
        };
        // IPv6: no duplicate address detection on a device (its link-local
        // address included), set before the device goes up.
        let no_dad = |s: &mut NsSetup, dev: &str| {
            if v6 {
                s.sysctls
                    .push((format!("net.ipv6.conf.{dev}.accept_dad"), "0".into()));
            }
        };
        let mut v = Vec::with_capacity(c.senders.len() + 2);

        // The userspace path forwards in the emulator: the router's kernel
        // only answers ARP and ND for its own addresses, and drops (without
        // an ICMP error, forwarding being off) the frames the emulator
        // also reads.
        let userspace = c.path == PathKind::Userspace;
        // Every veth end of the path: no DAD, up, offloads off (always on
        // the userspace path: it reads frames, not GSO super-packets), and
        // there transmit checksums computed before the frame leaves.
        let link_end = |s: &mut NsSetup, dev: &str| {
            no_dad(s, dev);
            s.up.push(dev.into());
            if c.disable_offloads || userspace {
                s.no_offloads.push(dev.into());
            }
            if userspace {
                s.no_tx_checksum.push(dev.into());
            }
        };
        let forward = if userspace { "0" } else { "1" };
        let mut rt = base(Role::Router);
        rt.sysctls
            .push(("net.ipv4.ip_forward".into(), forward.into()));
        if v6 {
            rt.sysctls
                .push(("net.ipv6.conf.all.forwarding".into(), forward.into()));
        }
        let mut rt_devs = vec![(ROUTER_RX_DEV.to_string(), self.addr(Role::Router))];
        rt_devs.extend(
            (0..c.senders.len()).map(|i| (router_sender_dev(i), self.router_sender_addr(i))),
        );
        for (dev, addr) in rt_devs {
            link_end(&mut rt, &dev);
            rt.addrs.push((dev, addr, len));
        }
        for (i, s) in c.senders.iter().enumerate() {
            if s.gate.is_some() && !s.rtt.is_zero() && !userspace {
                rt.up.push(gate_ifb_dev(i));
            }
        }
        v.push(rt);

        let mut rx = base(Role::Receiver);
        link_end(&mut rx, RECEIVER_DEV);
        if c.has_data_path_netem() && !userspace {
            rx.up.push(IFB_DEV.into());
        }
        rx.addrs
            .push((RECEIVER_DEV.into(), self.addr(Role::Receiver), len));
        rx.gateway = Some(self.addr(Role::Router));
        v.push(rx);

        for i in 0..c.senders.len() {
            let mut s = base(Role::Sender(i));
            link_end(&mut s, SENDER_DEV);
            s.addrs
                .push((SENDER_DEV.into(), self.addr(Role::Sender(i)), len));
            s.gateway = Some(self.router_sender_addr(i));
            v.push(s);
        }
        v
    }

    /// Tears down explicitly, reporting the first error (Drop ignores them).
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }

    /// Kills the processes in all of this testbed's namespaces, then deletes
    /// them with one `ip -batch` (senders first, router last; names that
    /// were never created are skipped).
    fn teardown(&mut self) -> Result<()> {
        // The gates' threads and the emulator's cells and sockets first,
        // while their devices exist.
        self.sender_gates.clear();
        drop(self.path.take());
        if self.created.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = self.created.drain(..).rev().collect();
        let res = netns::del_netns(&names);
        if let Err(e) = &res {
            tracing::warn!(prefix = %self.prefix, error = %e, "namespace teardown failed");
        }
        res
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation() {
        assert!(TestbedConfig::new(50_000_000, 62_500).validate().is_ok());
        assert!(TestbedConfig::new(50_000_000, 1000).validate().is_err());
        assert!(TestbedConfig::new(50_000_000, 62_500)
            .with_loss(1.5)
            .validate()
            .is_err());
        assert!(!TestbedConfig::new(50_000_000, 62_500).needs_netem());
        // A zero loss still installs the loss path (for set_loss).
        assert!(TestbedConfig::new(50_000_000, 62_500)
            .with_loss(0.0)
            .needs_netem());
        assert_eq!(
            data_path_netem_line("change", 0.05, None),
            "qdisc change dev ifb0 root netem loss 5% limit 100000"
        );
        let reorder = Reorder {
            share: 0.1,
            delay: Duration::from_millis(20),
        };
        // A loss burst on a reordering path keeps the reordering.
        assert_eq!(
            data_path_netem_line("change", 0.15, Some(reorder)),
            "qdisc change dev ifb0 root netem loss 15% delay 20000us reorder 10% 50% limit 100000"
        );
        let with = |share: f64, ms: u64| {
            TestbedConfig::new(50_000_000, 62_500).with_reorder(Reorder {
                share,
                delay: Duration::from_millis(ms),
            })
        };
        assert!(with(0.1, 20).validate().is_ok());
        assert!(with(0.1, 20).needs_netem());
        for (share, ms) in [(0.0, 20), (1.0, 20), (f64::NAN, 20), (0.1, 0), (0.1, 1001)] {
            assert!(with(share, ms).validate().is_err(), "{share} {ms} ms");
        }
        assert!(TestbedConfig::new(50_000_000, 62_500)
            .with_rtts(&[Duration::from_millis(20)])
            .needs_netem());
    }
}

/// Live tests on the host kernel (root; no netem needed). Those that run
/// flows are in ccctl-lab (they need its iperf3 driver).
#[cfg(test)]
mod host_tests {
    use super::netns::{self, list_netns};
    use super::*;

    /// A process exists and is not a zombie (shared with the netns tests).
    pub(crate) fn alive_not_zombie(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => !s
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    /// Builds without validating `cfg` (to make a step fail on purpose);
    /// returns the prefix too.
    fn build_unvalidated(cfg: TestbedConfig) -> (String, Result<Testbed>) {
        let prefix = next_prefix();
        let mut tb = Testbed {
            cfg,
            prefix: prefix.clone(),
            created: Vec::new(),
            next_port: AtomicU16::new(5201),
            path: None,
            sender_gates: Vec::new(),
        };
        (prefix, tb.build().map(|()| tb))
    }

    fn assert_all_gone(prefix: &str) {
        let p = format!("{prefix}-");
        let left: Vec<String> = list_netns()
            .into_iter()
            .filter(|n| n.starts_with(&p))
            .collect();
        assert!(left.is_empty(), "left after a failed build: {left:?}");
        assert!(!netns::live().iter().any(|n| n.starts_with(&p)));
    }

    #[test]
    fn failed_ip_batch_names_its_line_and_tears_down() {
        let mut cfg = TestbedConfig::new(20_000_000, 100_000);
        cfg.mtu = 70_000; // no veth takes that
        let (prefix, r) = build_unvalidated(cfg);
        let e = r.unwrap_err();
        let msg = e.to_string();
        eprintln!("{msg}");
        assert!(
            msg.contains("ip -batch - (line 4: link add to_rx mtu 70000"),
            "{msg}"
        );
        assert_all_gone(&prefix);
    }

    #[test]
    fn failed_tc_batch_names_its_line_and_tears_down() {
        let mut cfg = TestbedConfig::new(20_000_000, 100_000);
        cfg.rate_bps = 0; // tc refuses "rate 0bit"
        let (prefix, r) = build_unvalidated(cfg);
        let msg = r.unwrap_err().to_string();
        eprintln!("{msg}");
        assert!(
            msg.contains(&format!("tc -n {prefix}-rt -batch -"))
                && msg.contains("(line 1: qdisc add dev to_rx root handle 1: tbf rate 0bit"),
            "{msg}"
        );
        assert_all_gone(&prefix);
    }
}
