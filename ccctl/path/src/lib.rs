//! ccctl-path: the lab's path emulator in userspace, on the running kernel.
//!
//! A dumbbell's router namespace holds one veth end per sender and one
//! toward the receiver. The qdisc testbed shapes and delays there with
//! tbf and netem; this crate instead takes every frame that arrives at
//! those ends with AF_PACKET (rattan-core's `VirtualEthernet` cells) and
//! passes it through a graph of rattan cells, then writes it out of the
//! far end with the peer's MAC address. The router's kernel does not
//! forward (ip_forward 0): it only answers ARP/ND for its own addresses.
//!
//! ```text
//!   data:  left{i} ─[gate_up{i}]─┐
//!                                ├─ bottleneck (rate, queue) ─[loss]─ right
//!          left{j} ──────────────┘
//!   ACKs:  right ─[ack_rate]─ demux ─┬─ ack_delay{i} ─[gate_dn{i}]─ left{i}
//!                                    └─ ack_delay{j} ─ left{j}
//! ```
//!
//! * `bottleneck`: rattan's `BwCell` at the link rate (IP bytes, see
//!   [`PathSpec::rate_bps`]) over our [`queue::Bottleneck`] (tail drop,
//!   CoDel or FQ-CoDel, limits in frames' bytes and packets). With a
//!   bandwidth trace (Mahimahi's format, [`trace`]) a task sets the cell's
//!   rate from the trace, which starts when the path does.
//! * `loss`: random loss with a seeded generator and the deterministic
//!   loss lists ([`cells::Loss`]), after the bottleneck as the qdisc
//!   testbed's netem loss is; only when asked for (each cell is one more
//!   forwarding task per packet).
//! * `ack_delay{i}`: rattan's `DelayCell` with sender i's whole base RTT,
//!   on its ACK path, so flows of different RTT share one bottleneck
//!   (as the qdisc testbed puts its netem on `to_sN`).
//! * `gate_up{i}`, `gate_dn{i}`: sender i's On/Off gate on both directions
//!   of its link ([`cells::Gate`]), aligned to CLOCK_TAI like taprio.
//!
//! The cells run on a tokio runtime of [`PathSpec::workers`] threads (one
//! by default: on a 2-core machine the other core runs the kernel's TCP).
//! [`PathEmulator::cpu`] reads those threads' CPU time.

pub mod cells;
pub mod frame;
pub mod queue;
pub mod socket;
pub mod trace;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rattan_core::cells::bandwidth::{BwCell, BwType};
use rattan_core::cells::delay::DelayCell;
use rattan_core::cells::external::{VirtualEthernet, VirtualEthernetId};
use rattan_core::cells::{Ingress, Packet, StdPacket};
use rattan_core::core::RattanCore;
use rattan_core::metal::io::af_packet::{AfPacketDriver, AfPacketReceiver, AfPacketSender};
use rattan_core::metal::io::common::InterfaceDriver;
use rattan_core::netem_trace::Bandwidth;
use rattan_env::{Env, MacAddr, NetNs, VethCell};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

pub use cells::{GateSchedule, LossList, Reorder, MAX_REORDER_DELAY};
pub use queue::{QueueKind, QueueLimit};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("path emulator: {0}")]
    Config(String),
    #[error("path emulator: {what}: {message}")]
    Rattan { what: String, message: String },
    #[error("path emulator: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn rattan(what: impl Into<String>) -> impl FnOnce(rattan_core::error::Error) -> Error {
    let what = what.into();
    move |e| Error::Rattan {
        what,
        message: format!("{e:?}"),
    }
}

/// One end of a veth pair in the router namespace and its peer's MAC.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterPort {
    /// The device in the router namespace.
    pub dev: String,
    pub mac: [u8; 6],
    /// The MAC of the other end (sender's or receiver's device).
    pub peer_mac: [u8; 6],
}

/// One sender's side of the path.
#[derive(Debug, Clone, PartialEq)]
pub struct SenderPath {
    pub port: RouterPort,
    /// The sender's address: ACKs to it go back through `port`.
    pub addr: IpAddr,
    /// Base round-trip time, all on the ACK path.
    pub rtt: Duration,
    pub gate: Option<GateSchedule>,
}

/// What the emulator builds in the router namespace.
#[derive(Debug, Clone)]
pub struct PathSpec {
    /// `/run/netns/NAME` of the router namespace.
    pub router_ns: PathBuf,
    pub receiver: RouterPort,
    pub senders: Vec<SenderPath>,
    /// Bottleneck rate in bit/s of IP packets (the Ethernet header is not
    /// counted, where tbf counts it: a full-size frame takes 1500 of 1514
    /// bytes' time, so a flow carries 0.93 % more here at the same rate).
    pub rate_bps: u64,
    /// The ACK direction's rate (None: unconstrained).
    pub reverse_rate_bps: Option<u64>,
    /// A bandwidth trace for the bottleneck in place of `rate_bps`.
    pub trace: Option<trace::BandwidthTrace>,
    pub queue: QueueKind,
    pub limit: QueueLimit,
    pub mtu: u32,
    /// Random loss probability on the data path, [0, 1). `Some` (0.0
    /// included) builds the loss cell, so [`PathEmulator::set_loss`] can
    /// change it while flows run; `None` with no loss list: no loss cell
    /// (one forwarding hop less per packet).
    pub loss: Option<f64>,
    pub loss_lists: Vec<LossList>,
    /// Reordering on the data path, after the losses ([`Reorder`]).
    pub reorder: Option<Reorder>,
    /// Seed of the random loss and of the reordering.
    pub seed: u64,
    /// Threads of the emulator's runtime.
    pub workers: usize,
}

/// Highest rate the emulator takes at all (a rate above what this machine
/// carries is flagged by the lab's calibration, measured, not refused).
pub const MAX_RATE_BPS: u64 = 100_000_000_000;

impl PathSpec {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.senders.is_empty() {
            return bad("no senders".into());
        }
        if !(1_000..=MAX_RATE_BPS).contains(&self.rate_bps) {
            return bad(format!(
                "rate {} bit/s not in [1 kbit/s, {} Gbit/s]",
                self.rate_bps,
                MAX_RATE_BPS / 1_000_000_000
            ));
        }
        if let Some(r) = self.reverse_rate_bps {
            if !(1_000..=MAX_RATE_BPS).contains(&r) {
                return bad(format!(
                    "reverse rate {r} bit/s not in [1 kbit/s, 100 Gbit/s]"
                ));
            }
        }
        if let Some(p) = self.loss {
            if !(0.0..1.0).contains(&p) {
                return bad(format!("loss probability {p} not in [0, 1)"));
            }
        }
        if let Some(why) = self.reorder.and_then(|r| r.problem()) {
            return bad(why);
        }
        if self.limit.bytes == Some(0) || self.limit.packets == Some(0) {
            return bad("queue limit 0: the queue must hold at least one packet".into());
        }
        for (i, s) in self.senders.iter().enumerate() {
            if let Some(g) = s.gate {
                if g.on.is_zero() || g.off.is_zero() {
                    return bad(format!(
                        "sender {i}: gate on {:?} / off {:?}: both must be above 0",
                        g.on, g.off
                    ));
                }
            }
        }
        for l in &self.loss_lists {
            if !self.senders.iter().any(|s| s.addr == l.sender) {
                return bad(format!("loss list for {}: no such sender", l.sender));
            }
            if l.packets.contains(&0) {
                return bad("loss list: packet numbers count from 1".into());
            }
        }
        if self.workers == 0 || self.workers > 16 {
            return bad(format!("{} worker threads (1..=16)", self.workers));
        }
        Ok(())
    }
}

/// Counters of a running path, read at any time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathStats {
    /// Packets that reached the bottleneck queue, left it, and were
    /// dropped by it (full, or by CoDel).
    pub arrived: u64,
    pub sent: u64,
    pub sent_bytes: u64,
    pub dropped: u64,
    /// Packets and frame bytes in the queue now, and the most seen.
    pub backlog: u64,
    pub backlog_bytes: u64,
    pub max_backlog: u64,
    pub max_backlog_bytes: u64,
    /// Data-path drops after the bottleneck.
    pub random_losses: u64,
    pub listed_losses: u64,
    /// Packets the reordering cell let overtake the ones waiting.
    pub reordered: u64,
    /// Packets the sender gates (both directions) held back for an Off
    /// window.
    pub gate_held: u64,
    /// The most packets inside the data direction's gates at once, and
    /// inside the ACK direction's.
    pub gate_max_data: u64,
    pub gate_max_acks: u64,
    /// Packets the kernel dropped at the emulator's AF_PACKET sockets
    /// before any cell saw them (the emulator fell behind): losses the
    /// scenario did not ask for. Anything but 0 means the testbed, not
    /// the path, shaped the run.
    pub socket_drops: u64,
    /// Packets that waited in the emulator's sockets longer than
    /// [`socket::ReadLag::LATE`] before its thread read them (it was
    /// descheduled or busy), and the longest wait (µs). The cells date
    /// each packet by its arrival, so a late read delays it by as much
    /// but costs the link no capacity. `reads`: every packet read with
    /// its arrival time, both directions (the late share's base).
    pub reads: u64,
    pub late_reads: u64,
    pub max_read_lag_us: u64,
    /// Every read's wait summed, µs (over `reads`: the mean delay added).
    pub read_lag_sum_us: u64,
}

impl PathStats {
    /// The mean wait of the reads since `earlier` (a snapshot of the same
    /// path): the delay the emulator added to the path meanwhile.
    pub fn mean_read_lag_since(&self, earlier: &PathStats) -> Duration {
        let reads = self.reads.saturating_sub(earlier.reads);
        let sum_us = self.read_lag_sum_us.saturating_sub(earlier.read_lag_sum_us);
        Duration::from_secs_f64(sum_us as f64 / 1e6 / reads.max(1) as f64)
    }
}

/// CPU time of the emulator's threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathCpu {
    pub threads: usize,
    /// User + system time, all threads.
    pub cpu: Duration,
}

/// AF_PACKET as rattan drives it, but the socket is closed when the cell
/// goes (rattan's driver never closes it).
struct Driver {
    fd: i32,
    sender: Arc<AfPacketSender>,
    receiver: ClosingReceiver,
}

struct ClosingReceiver {
    inner: AfPacketReceiver,
    fd: i32,
    read_lag: Arc<socket::ReadLag>,
}

impl Drop for ClosingReceiver {
    fn drop(&mut self) {
        // SAFETY: the fd is the AF_PACKET socket rattan's driver opened for
        // this cell; the receiver is its last user (the sender task is gone
        // with the runtime), and it is closed once, here.
        unsafe { libc::close(self.fd) };
    }
}

impl rattan_core::metal::io::common::InterfaceReceiver<StdPacket> for ClosingReceiver {
    /// rattan's read, the packet dated by its arrival at the socket
    /// ([`socket::arrival`]) rather than by the read.
    fn receive(&mut self) -> std::io::Result<Option<StdPacket>> {
        let mut packet = self.inner.receive()?;
        if let Some(p) = packet.as_mut() {
            if let Some((at, lag)) = socket::arrival(self.fd) {
                p.delay_until(tokio::time::Instant::from_std(at));
                self.read_lag.record(lag);
            }
        }
        Ok(packet)
    }
    fn receive_bulk(&mut self) -> std::io::Result<Vec<StdPacket>> {
        Ok(self.receive()?.into_iter().collect())
    }
}

impl InterfaceDriver for Driver {
    type Packet = StdPacket;
    type Sender = AfPacketSender;
    type Receiver = ClosingReceiver;

    fn bind_cell(cell: Arc<VethCell>) -> Result<Vec<Self>, rattan_core::metal::error::MetalError> {
        let drivers = AfPacketDriver::bind_cell(cell)?;
        let mut out = Vec::with_capacity(drivers.len());
        for inner in drivers {
            let (fd, sender) = (inner.raw_fd(), inner.sender());
            // Owned by the receiver from here: closed if the rest fails.
            let receiver = ClosingReceiver {
                inner: inner.into_receiver(),
                fd,
                read_lag: socket::READ_LAG.with(|l| l.borrow().clone()),
            };
            socket::enlarge_receive_buffer(fd)?;
            socket::enable_arrival_times(fd)
                .map_err(rattan_core::metal::error::MetalError::IoError)?;
            socket::BOUND.with(|b| b.borrow_mut().push(fd));
            out.push(Driver {
                fd,
                sender,
                receiver,
            });
        }
        Ok(out)
    }
    fn raw_fd(&self) -> i32 {
        self.fd
    }
    fn sender(&self) -> Arc<AfPacketSender> {
        self.sender.clone()
    }
    fn receiver(&mut self) -> &mut ClosingReceiver {
        &mut self.receiver
    }
    fn into_receiver(self) -> ClosingReceiver {
        self.receiver
    }
}

/// What the cells and the emulator's owner both hold.
#[derive(Clone, Default)]
struct Shared {
    stop_trace: CancellationToken,
    queue: Arc<queue::QueueCounters>,
    loss: Arc<cells::LossCounters>,
    reorder: Arc<cells::ReorderCounters>,
    probability: Arc<AtomicU64>,
    gate_data: Arc<cells::GateCounters>,
    gate_acks: Arc<cells::GateCounters>,
    read_lag: Arc<socket::ReadLag>,
}

/// A running path; dropping it stops the cells and their threads and
/// closes their sockets (the namespaces are the testbed's).
pub struct PathEmulator {
    core: Option<RattanCore<Driver>>,
    runtime: Option<Arc<Runtime>>,
    runtime_thread: Option<JoinHandle<()>>,
    rt_cancel: CancellationToken,
    shared: Shared,
    has_loss_cell: bool,
    tids: Arc<Mutex<Vec<i32>>>,
    /// The cells' AF_PACKET sockets (owned by the cells; read for drops
    /// while the cells run).
    packet_fds: Vec<i32>,
    /// Packets the kernel dropped at those sockets, summed over reads.
    socket_drops: AtomicU64,
    /// The veth ends the AF_PACKET cells are bound to, with their peers
    /// (rattan holds weak references to the peers).
    _veths: Vec<Arc<VethCell>>,
    /// The CPUs are kept from halting while the path runs: a halted vCPU
    /// of a cloud guest can come back late, and the path's packets with it
    /// (ccctl_sys::awake).
    _awake: ccctl_sys::awake::AwakeHold,
}

impl std::fmt::Debug for PathEmulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathEmulator")
            .field("stats", &self.stats())
            .finish()
    }
}

fn veth(name: &str, index: u32, mac: [u8; 6], ns: &Arc<NetNs>) -> VethCell {
    VethCell {
        name: name.to_string(),
        index,
        mac_addr: MacAddr::new(mac),
        // Unused by the AF_PACKET driver; the testbed owns the addresses.
        ip_addr: (IpAddr::from([0, 0, 0, 0]), 0),
        peer: once_cell::sync::OnceCell::new(),
        namespace: ns.clone(),
    }
}

/// A router-side veth end bound for rattan: the end and its peer, the peer
/// known by its MAC only (it lives in another namespace).
fn bind_pair(port: &RouterPort, ns: &Arc<NetNs>) -> Result<(Arc<VethCell>, Arc<VethCell>)> {
    let index = rustix::net::netdevice::name_to_index(
        &rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::DGRAM,
            None,
        )
        .map_err(|e| Error::Io {
            what: "creating an AF_INET socket in the router namespace".into(),
            source: e.into(),
        })?,
        &port.dev,
    )
    .map_err(|e| Error::Io {
        what: format!("looking up {} in the router namespace", port.dev),
        source: e.into(),
    })?;
    let end = Arc::new(veth(&port.dev, index, port.mac, ns));
    let peer = Arc::new(veth(&format!("{}-peer", port.dev), 0, port.peer_mac, ns));
    let _ = end.peer.set(Arc::downgrade(&peer));
    let _ = peer.peer.set(Arc::downgrade(&end));
    Ok((end, peer))
}

impl PathEmulator {
    /// Builds the cell graph in the router namespace and starts it.
    pub fn start(spec: &PathSpec) -> Result<Self> {
        spec.validate()?;
        let rt_cancel = CancellationToken::new();
        let tids = Arc::new(Mutex::new(Vec::new()));
        let ns_file = std::fs::File::open(&spec.router_ns).map_err(|e| Error::Io {
            what: format!("opening {}", spec.router_ns.display()),
            source: e,
        })?;
        // The runtime's threads are started from a thread inside the router
        // namespace, so they are in it too (threads inherit it).
        let (tx, rx) = std::sync::mpsc::channel();
        let (cancel, workers, thread_tids) = (rt_cancel.clone(), spec.workers, tids.clone());
        let runtime_thread = std::thread::Builder::new()
            .name("ccctl-path".into())
            .spawn(move || {
                let built = rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&ns_file),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(|e| Error::Io {
                    what: "entering the router namespace (setns)".into(),
                    source: e.into(),
                })
                .and_then(|()| {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(workers)
                        .thread_name("ccctl-path-cells")
                        .enable_all()
                        .on_thread_start(move || {
                            let tid = rustix::thread::gettid().as_raw_nonzero().get();
                            thread_tids
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(tid);
                        })
                        .build()
                        .map(Arc::new)
                        .map_err(|e| Error::Io {
                            what: "starting the emulator's runtime".into(),
                            source: e,
                        })
                });
                match built {
                    Ok(rt) => {
                        let _ = tx.send(Ok(rt.clone()));
                        rt.block_on(cancel.cancelled());
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| Error::Io {
                what: "spawning the emulator's thread".into(),
                source: e,
            })?;
        let runtime = match rx.recv() {
            Ok(Ok(rt)) => rt,
            Ok(Err(e)) => {
                let _ = runtime_thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = runtime_thread.join();
                return Err(Error::Config("the emulator's thread died".into()));
            }
        };
        let mut emu = PathEmulator {
            core: None,
            runtime: Some(runtime.clone()),
            runtime_thread: Some(runtime_thread),
            rt_cancel: rt_cancel.clone(),
            shared: Shared {
                probability: Arc::new(AtomicU64::new(spec.loss.unwrap_or(0.0).to_bits())),
                ..Shared::default()
            },
            has_loss_cell: spec.loss.is_some() || !spec.loss_lists.is_empty(),
            tids,
            packet_fds: Vec::new(),
            socket_drops: AtomicU64::new(0),
            _veths: Vec::new(),
            _awake: ccctl_sys::awake::hold(),
        };
        // The AF_PACKET sockets are opened by this helper thread inside the
        // router namespace (a socket binds to a device of its own namespace).
        let shared = emu.shared.clone();
        let built = std::thread::scope(|s| {
            s.spawn(|| -> Result<_> {
                let ns_file = std::fs::File::open(&spec.router_ns).map_err(|e| Error::Io {
                    what: format!("opening {}", spec.router_ns.display()),
                    source: e,
                })?;
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&ns_file),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(|e| Error::Io {
                    what: "entering the router namespace (setns)".into(),
                    source: e.into(),
                })?;
                socket::take_bound();
                socket::READ_LAG.with(|l| *l.borrow_mut() = shared.read_lag.clone());
                let built = build(&shared, spec, runtime.clone(), rt_cancel.clone());
                // This thread's AF_PACKET sockets: one per veth cell.
                let fds = socket::take_bound();
                built.and_then(|(core, veths)| {
                    if fds.len() == spec.senders.len() + 1 {
                        Ok((core, veths, fds))
                    } else {
                        Err(Error::Config(format!(
                            "the path bound {} AF_PACKET sockets for {} veth cells",
                            fds.len(),
                            spec.senders.len() + 1
                        )))
                    }
                })
            })
            .join()
            .unwrap_or_else(|_| Err(Error::Config("building the cells panicked".into())))
        });
        match built {
            Ok((core, veths, fds)) => {
                emu.core = Some(core);
                emu._veths = veths;
                emu.packet_fds = fds;
                Ok(emu)
            }
            Err(e) => Err(e), // Drop stops what was started
        }
    }
}

/// Builds, links and starts the cells (on a thread in the router namespace).
fn build(
    shared: &Shared,
    spec: &PathSpec,
    runtime: Arc<Runtime>,
    rt_cancel: CancellationToken,
) -> Result<(RattanCore<Driver>, Vec<Arc<VethCell>>)> {
    let ns = Arc::new(rattan_env::DefaultEnv)
        .current()
        .map_err(|e| Error::Rattan {
            what: "opening the router namespace for rattan".into(),
            message: format!("{e:?}"),
        })?;
    // Cells open timers and spawn tasks as they are built: in the runtime.
    let _in_runtime = runtime.enter();
    let mut core: RattanCore<Driver> =
        RattanCore::new(runtime.clone(), CancellationToken::new(), rt_cancel);
    let mut veths = Vec::new();
    let mut external = |core: &mut RattanCore<Driver>, id: String, port: &RouterPort, n: u8| {
        let (end, peer) = bind_pair(port, &ns)?;
        veths.push(end.clone());
        veths.push(peer);
        core.build_cell(id.clone(), move |rt| {
            let _guard = rt.enter();
            let mut vid = VirtualEthernetId::new();
            vid.set_ns_id(1);
            vid.set_veth_id(n);
            VirtualEthernet::<Driver>::new(end, vid)
        })
        .map_err(rattan(format!("binding AF_PACKET to {}", port.dev)))
    };
    for (i, s) in spec.senders.iter().enumerate() {
        external(&mut core, format!("left{i}"), &s.port, i as u8)?;
    }
    external(&mut core, "right".into(), &spec.receiver, 255)?;

    // Data path.
    let bottleneck = queue::Bottleneck::new(spec.queue, spec.limit, spec.mtu, shared.queue.clone());
    let rate = spec.trace.as_ref().map_or(spec.rate_bps, |t| t.first_bps());
    let bw_ctl = core
        .build_cell("bottleneck".into(), move |_| {
            BwCell::new(Bandwidth::from_bps(rate), bottleneck, BwType::NetworkLayer)
        })
        .map_err(rattan("building the bottleneck"))?;
    let mut data_chain = vec!["bottleneck".to_string()];
    if spec.loss.is_some() || !spec.loss_lists.is_empty() {
        let (prob, lists, seed, lc) = (
            shared.probability.clone(),
            spec.loss_lists.clone(),
            spec.seed,
            shared.loss.clone(),
        );
        core.build_cell("loss".into(), move |_| {
            Ok(cells::Loss::new(prob, &lists, seed, lc))
        })
        .map_err(rattan("building the loss cell"))?;
        data_chain.push("loss".into());
    }
    if let Some(r) = spec.reorder {
        let (seed, rc) = (spec.seed, shared.reorder.clone());
        core.build_cell("reorder".into(), move |_| {
            cells::Reordering::new(r, seed, rc)
        })
        .map_err(rattan("building the reordering cell"))?;
        data_chain.push("reorder".into());
    }
    data_chain.push("right".into());
    for w in data_chain.windows(2) {
        core.link_cell(w[0].clone(), w[1].clone());
    }
    for (i, s) in spec.senders.iter().enumerate() {
        let mut first = "bottleneck".to_string();
        if let Some(g) = s.gate {
            let counters = shared.gate_data.clone();
            core.build_cell(format!("gate_up{i}"), move |_| {
                cells::Gate::new(g, counters)
            })
            .map_err(rattan("building a gate"))?;
            core.link_cell(format!("gate_up{i}"), first);
            first = format!("gate_up{i}");
        }
        core.link_cell(format!("left{i}"), first);
    }

    // ACK path.
    let mut routes: HashMap<IpAddr, Arc<dyn Ingress<StdPacket>>> = HashMap::new();
    for (i, s) in spec.senders.iter().enumerate() {
        let mut chain = Vec::new();
        if !s.rtt.is_zero() {
            let rtt = s.rtt;
            core.build_cell(format!("ack_delay{i}"), move |_| {
                DelayCell::<StdPacket>::new(rtt)
            })
            .map_err(rattan("building a delay"))?;
            chain.push(format!("ack_delay{i}"));
        }
        if let Some(g) = s.gate {
            let counters = shared.gate_acks.clone();
            core.build_cell(format!("gate_dn{i}"), move |_| {
                cells::Gate::new(g, counters)
            })
            .map_err(rattan("building a gate"))?;
            chain.push(format!("gate_dn{i}"));
        }
        chain.push(format!("left{i}"));
        for w in chain.windows(2) {
            core.link_cell(w[0].clone(), w[1].clone());
        }
        let entry = core.get_receiver(&chain[0]).map_err(|e| Error::Rattan {
            what: format!("finding cell {}", chain[0]),
            message: format!("{e:?}"),
        })?;
        routes.insert(s.addr, entry);
    }
    core.build_cell("demux".into(), move |_| Ok(cells::Demux::new(routes)))
        .map_err(rattan("building the ACK demultiplexer"))?;
    match spec.reverse_rate_bps {
        Some(r) => {
            core.build_cell("ack_rate".into(), move |_| {
                BwCell::new(
                    Bandwidth::from_bps(r),
                    queue::Bottleneck::<StdPacket>::new(
                        QueueKind::TailDrop,
                        QueueLimit {
                            bytes: None,
                            packets: Some(10_000),
                        },
                        1500,
                        Arc::default(),
                    ),
                    BwType::NetworkLayer,
                )
            })
            .map_err(rattan("building the ACK path's rate"))?;
            core.link_cell("right".into(), "ack_rate".into());
            core.link_cell("ack_rate".into(), "demux".into());
        }
        None => core.link_cell("right".into(), "demux".into()),
    }
    core.spawn_rattan().map_err(|e| Error::Rattan {
        what: "starting the cells".into(),
        message: format!("{e:?}"),
    })?;
    core.start_rattan().map_err(rattan("starting the cells"))?;
    if let Some(t) = &spec.trace {
        runtime.spawn(trace::drive(t.clone(), bw_ctl, shared.stop_trace.clone()));
    }
    Ok((core, veths))
}

impl PathEmulator {
    pub fn stats(&self) -> PathStats {
        let q = &self.shared.queue;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PathStats {
            arrived: r(&q.arrived),
            sent: r(&q.sent),
            sent_bytes: r(&q.sent_bytes),
            dropped: r(&q.dropped),
            backlog: r(&q.backlog),
            backlog_bytes: r(&q.backlog_bytes),
            max_backlog: r(&q.max_backlog),
            max_backlog_bytes: r(&q.max_backlog_bytes),
            random_losses: r(&self.shared.loss.random),
            listed_losses: r(&self.shared.loss.listed),
            reordered: r(&self.shared.reorder.overtook),
            gate_held: r(&self.shared.gate_data.held) + r(&self.shared.gate_acks.held),
            gate_max_data: r(&self.shared.gate_data.max_queued),
            gate_max_acks: r(&self.shared.gate_acks.max_queued),
            socket_drops: self.socket_drops(),
            reads: r(&self.shared.read_lag.reads),
            late_reads: r(&self.shared.read_lag.late),
            max_read_lag_us: r(&self.shared.read_lag.max_us),
            read_lag_sum_us: r(&self.shared.read_lag.sum_us),
        }
    }

    /// Sets every cell socket's receive buffer to `bytes` (the path sets
    /// [`socket::RECEIVE_BUFFER_BYTES`]): for a test that needs the kernel
    /// to drop at the emulator's sockets, to see them counted.
    #[doc(hidden)]
    pub fn set_socket_receive_buffer(&self, bytes: i32) -> Result<()> {
        if self.core.is_none() {
            return Err(Error::Config("the path is stopped".into()));
        }
        for &fd in &self.packet_fds {
            socket::set_receive_buffer(fd, bytes).map_err(|e| Error::Io {
                what: format!("resizing the receive buffer of fd {fd}"),
                source: e,
            })?;
        }
        Ok(())
    }

    /// Packets the kernel dropped at the cells' sockets so far.
    fn socket_drops(&self) -> u64 {
        // The fds are the cells' until the core stops; never read after.
        if self.core.is_some() {
            for &fd in &self.packet_fds {
                match socket::drops_since_last(fd) {
                    Ok(n) => {
                        self.socket_drops.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => tracing::warn!("reading PACKET_STATISTICS of fd {fd}: {e}"),
                }
            }
        }
        self.socket_drops.load(Ordering::Relaxed)
    }

    /// Changes the data path's random loss while flows run (a path built
    /// with a loss, 0.0 will do).
    pub fn set_loss(&self, p: f64) -> Result<()> {
        if !self.has_loss_cell {
            return Err(Error::Config(
                "set_loss: this path has no loss cell (build it with a loss, 0.0 will do)".into(),
            ));
        }
        if !(0.0..1.0).contains(&p) {
            return Err(Error::Config(format!("loss probability {p} not in [0, 1)")));
        }
        self.shared
            .probability
            .store(p.to_bits(), Ordering::Relaxed);
        Ok(())
    }

    /// The runtime's threads and their CPU time so far.
    pub fn cpu(&self) -> PathCpu {
        let tids = self.tids.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // SAFETY: sysconf only reads a constant of the system.
        let tick = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64;
        let mut ticks = 0u64;
        for tid in &tids {
            // utime and stime: fields 14 and 15 of /proc/self/task/TID/stat.
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) {
                if let Some((_, rest)) = stat.rsplit_once(')') {
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    ticks += get(11) + get(12);
                }
            }
        }
        PathCpu {
            threads: tids.len(),
            cpu: Duration::from_nanos(ticks.saturating_mul(1_000_000_000 / tick)),
        }
    }

    /// The thread ids of the emulator's runtime (for tests: none may be
    /// left after drop).
    pub fn thread_ids(&self) -> Vec<i32> {
        self.tids.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for PathEmulator {
    fn drop(&mut self) {
        self.shared.stop_trace.cancel();
        if let Some(mut core) = self.core.take() {
            core.cancel_rattan();
        }
        self.rt_cancel.cancel();
        if let Some(t) = self.runtime_thread.take() {
            let _ = t.join();
        }
        // The last handle on the runtime: shutting it down ends its worker
        // threads and every cell task (and so closes the sockets).
        if let Some(rt) = self.runtime.take() {
            if let Ok(rt) = Arc::try_unwrap(rt) {
                rt.shutdown_timeout(Duration::from_secs(2));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_read_lag_counts_only_the_reads_between_two_snapshots() {
        let earlier = PathStats {
            reads: 1_000,
            read_lag_sum_us: 50_000_000,
            ..Default::default()
        };
        // 400 reads since, 800,000 us of waiting among them: 2 ms each.
        let later = PathStats {
            reads: 1_400,
            read_lag_sum_us: 50_800_000,
            ..Default::default()
        };
        assert_eq!(
            later.mean_read_lag_since(&earlier),
            Duration::from_millis(2)
        );
        assert_eq!(
            later.mean_read_lag_since(&later),
            Duration::ZERO,
            "no reads since"
        );
    }
}
