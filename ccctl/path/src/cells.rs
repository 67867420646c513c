//! Our cells on rattan's cell interface (`Cell`: an ingress that takes
//! packets, an egress the core's forwarder awaits): the ACK path's
//! demultiplexer, the sender gate and the data path's losses. rattan's own
//! cells do the rest (bandwidth, delay, the veth ends).

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rattan_core::cells::{Cell, ControlInterface, Egress, Ingress, Packet, StdPacket};
use rattan_core::error::Error as CellError;
use rattan_core::metal::timer::Timer;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::frame;

type Pkt = StdPacket;

/// Cells here have nothing to configure through rattan's control plane.
pub struct NoControl;

impl ControlInterface for NoControl {
    type Config = ();
    fn set_config(&self, _config: ()) -> Result<(), CellError> {
        Ok(())
    }
}

macro_rules! cell_impl {
    ($cell:ident, $ingress:ty, $egress:ty) => {
        impl Cell<Pkt> for $cell {
            type IngressType = $ingress;
            type EgressType = $egress;
            type ControlInterfaceType = NoControl;
            fn sender(&self) -> Arc<Self::IngressType> {
                self.ingress.clone()
            }
            fn receiver(&mut self) -> &mut Self::EgressType {
                &mut self.egress
            }
            fn into_receiver(self) -> Self::EgressType {
                self.egress
            }
            fn control_interface(&self) -> Arc<NoControl> {
                Arc::new(NoControl)
            }
        }
    };
}

// ---------------------------------------------------------------------------
// The ACK path's demultiplexer

/// Sends each packet on to the cell of the sender it is addressed to
/// (rattan's `RouterCell` reads IPv4 only); anything else is dropped.
/// Its egress is never linked: the ingress forwards directly.
pub struct Demux {
    ingress: Arc<DemuxIngress>,
    egress: NeverEgress,
}

pub struct DemuxIngress {
    routes: HashMap<IpAddr, Arc<dyn Ingress<Pkt>>>,
}

pub struct NeverEgress;

#[async_trait]
impl Egress<Pkt> for NeverEgress {
    async fn dequeue(&mut self) -> Option<Pkt> {
        std::future::pending().await
    }
}

impl Demux {
    pub fn new(routes: HashMap<IpAddr, Arc<dyn Ingress<Pkt>>>) -> Self {
        Demux {
            ingress: Arc::new(DemuxIngress { routes }),
            egress: NeverEgress,
        }
    }
}

impl Ingress<Pkt> for DemuxIngress {
    fn enqueue(&self, packet: Pkt) -> Result<(), CellError> {
        match frame::dst_addr(packet.as_slice()).and_then(|a| self.routes.get(&a)) {
            Some(next) => next.enqueue(packet),
            None => Ok(()),
        }
    }
}

cell_impl!(Demux, DemuxIngress, NeverEgress);

// ---------------------------------------------------------------------------
// The sender gate

/// A sender host's On/Off schedule (a descheduled VM, the patched-BBR paper
/// Sec. III-C): its link carries packets, both ways, only during the first
/// `on` of every `on + off`, cycles aligned to CLOCK_TAI multiples of
/// `on + off` (as the qdisc testbed's taprio with base-time 0), so the
/// schedule is known outside the emulator and is the tests' ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GateSchedule {
    pub on: Duration,
    pub off: Duration,
}

impl GateSchedule {
    pub fn cycle(&self) -> Duration {
        self.on + self.off
    }

    /// Whether CLOCK_TAI time `tai_ns` falls in an On window.
    pub fn is_on_at(&self, tai_ns: u64) -> bool {
        let cycle = self.cycle().as_nanos() as u64;
        cycle == 0 || ((tai_ns % cycle) as u128) < self.on.as_nanos()
    }

    /// How long after CLOCK_TAI time `tai_ns` the gate is next open (zero
    /// when it is open then).
    pub fn wait_at(&self, tai_ns: u64) -> Duration {
        let cycle = self.cycle().as_nanos() as u64;
        if cycle == 0 || self.is_on_at(tai_ns) {
            return Duration::ZERO;
        }
        Duration::from_nanos(cycle - tai_ns % cycle)
    }
}

/// Nanoseconds on `clock` now.
pub(crate) fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// Maps tokio's (CLOCK_MONOTONIC) instants to CLOCK_TAI nanoseconds.
#[derive(Clone, Copy)]
pub struct TaiClock {
    at: Instant,
    tai_ns: i128,
}

impl TaiClock {
    pub fn now() -> Self {
        let at = Instant::now();
        TaiClock {
            at,
            tai_ns: clock_ns(libc::CLOCK_TAI),
        }
    }

    pub fn tai_ns(&self, t: Instant) -> u64 {
        let d = if t >= self.at {
            (t - self.at).as_nanos() as i128
        } else {
            -((self.at - t).as_nanos() as i128)
        };
        (self.tai_ns + d).max(0) as u64
    }
}

/// EtherType of the frame a sender's gate sends itself when it opens (IEEE
/// 802 local experimental): it restarts the sender's qdisc (see the lab's
/// sender gate) and goes no further than the emulator's gate.
pub const GATE_KICK_ETHERTYPE: u16 = 0x88b5;

/// What the gates of one direction count: packets held back for an Off
/// window, and packets inside a gate (arrived, not yet released) now and
/// at most.
#[derive(Debug, Default)]
pub struct GateCounters {
    pub held: AtomicU64,
    pub queued: AtomicU64,
    pub max_queued: AtomicU64,
}

/// Holds packets while its sender's gate is closed, releases them in order
/// when it opens. One on each direction of a gated sender's link.
pub struct Gate {
    ingress: Arc<GateIngress>,
    egress: GateEgress,
}

/// A gate's ingress: everything but the sender's kick frames.
pub struct GateIngress {
    tx: mpsc::UnboundedSender<Pkt>,
    counters: Arc<GateCounters>,
}

impl Ingress<Pkt> for GateIngress {
    fn enqueue(&self, packet: Pkt) -> Result<(), CellError> {
        let b = packet.as_slice();
        if b.len() >= 14 && u16::from_be_bytes([b[12], b[13]]) == GATE_KICK_ETHERTYPE {
            return Ok(());
        }
        self.tx
            .send(packet)
            .map_err(|_| CellError::ChannelError("cell closed".into()))?;
        let now = self.counters.queued.fetch_add(1, Ordering::Relaxed) + 1;
        self.counters.max_queued.fetch_max(now, Ordering::Relaxed);
        Ok(())
    }
}

pub struct GateEgress {
    rx: mpsc::UnboundedReceiver<Pkt>,
    schedule: GateSchedule,
    clock: TaiClock,
    timer: Timer,
    counters: Arc<GateCounters>,
}

impl Gate {
    /// `counters` are shared by the gates of one direction.
    pub fn new(schedule: GateSchedule, counters: Arc<GateCounters>) -> Result<Self, CellError> {
        let (tx, rx) = mpsc::unbounded_channel();
        Ok(Gate {
            ingress: Arc::new(GateIngress {
                tx,
                counters: counters.clone(),
            }),
            egress: GateEgress {
                rx,
                schedule,
                clock: TaiClock::now(),
                timer: Timer::new()?,
                counters,
            },
        })
    }
}

#[async_trait]
impl Egress<Pkt> for GateEgress {
    async fn dequeue(&mut self) -> Option<Pkt> {
        let mut p = self.rx.recv().await?;
        // Whether the gate was open is decided at the packet's logical
        // arrival, not when this task gets to it: a burst that arrived
        // during an On window passes even if the last of it is dequeued
        // after the window closed (a real link carried it as it came, and
        // the bottleneck's queue takes or drops it). Deciding at dequeue
        // time parked the tail of every On burst until the next On: 7,878
        // packets inside the gate behind a 10/70 ms gate at 150 Mbit/s,
        // with no drop at the bottleneck and a 2-3 s RTT (2026-11-28).
        let arrived = p.get_timestamp();
        let wait = self.schedule.wait_at(self.clock.tai_ns(arrived));
        if !wait.is_zero() {
            self.counters.held.fetch_add(1, Ordering::Relaxed);
            let open = arrived + wait;
            if open > Instant::now() {
                let _ = self.timer.sleep_until(open).await;
            }
            p.delay_until(open);
        }
        self.counters.queued.fetch_sub(1, Ordering::Relaxed);
        Some(p)
    }
}

cell_impl!(Gate, GateIngress, GateEgress);

// ---------------------------------------------------------------------------
// The data path's losses

/// Which data packets of a sender's connections to drop: numbers count
/// the TCP segments with payload of one connection in the order they reach
/// the loss cell (after the bottleneck), from 1; a retransmission is a new
/// packet. Every connection from the sender counts on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LossList {
    pub sender: IpAddr,
    pub packets: BTreeSet<u64>,
}

/// Counters of the loss cell.
#[derive(Debug, Default)]
pub struct LossCounters {
    pub random: AtomicU64,
    pub listed: AtomicU64,
}

/// Random loss (a probability changed while flows run) and the
/// deterministic loss lists, on the data path after the bottleneck.
pub struct Loss {
    ingress: Arc<LossIngress>,
    egress: PassEgress,
}

pub struct LossIngress {
    tx: mpsc::UnboundedSender<Pkt>,
    probability: Arc<AtomicU64>,
    lists: HashMap<IpAddr, BTreeSet<u64>>,
    state: Mutex<LossState>,
    counters: Arc<LossCounters>,
}

struct LossState {
    rng: u64,
    seen: HashMap<(SocketAddr, SocketAddr), u64>,
}

pub struct PassEgress {
    rx: mpsc::UnboundedReceiver<Pkt>,
}

#[async_trait]
impl Egress<Pkt> for PassEgress {
    async fn dequeue(&mut self) -> Option<Pkt> {
        self.rx.recv().await
    }
}

/// xorshift64*: a fixed sequence per seed, so a random loss is the same
/// loss run after run.
fn next_unit(state: &mut u64) -> f64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
}

impl Loss {
    /// `probability` holds an f64's bits (set it to change the loss).
    pub fn new(
        probability: Arc<AtomicU64>,
        lists: &[LossList],
        seed: u64,
        counters: Arc<LossCounters>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let lists = lists
            .iter()
            .map(|l| (l.sender, l.packets.clone()))
            .collect();
        Loss {
            ingress: Arc::new(LossIngress {
                tx,
                probability,
                lists,
                state: Mutex::new(LossState {
                    rng: seed | 1,
                    seen: HashMap::new(),
                }),
                counters,
            }),
            egress: PassEgress { rx },
        }
    }
}

impl LossIngress {
    /// Whether this packet is one the path drops.
    fn drops(&self, packet: &Pkt) -> bool {
        let p = f64::from_bits(self.probability.load(Ordering::Relaxed));
        let listed = !self.lists.is_empty();
        if p <= 0.0 && !listed {
            return false;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if listed {
            if let Some(seg) = frame::tcp_segment(packet.as_slice()) {
                if let (true, Some(list)) = (seg.payload > 0, self.lists.get(&seg.src.ip())) {
                    let n = st.seen.entry((seg.src, seg.dst)).or_insert(0);
                    *n += 1;
                    if list.contains(n) {
                        self.counters.listed.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                }
            }
        }
        if p > 0.0 && next_unit(&mut st.rng) < p {
            self.counters.random.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }
}

impl Ingress<Pkt> for LossIngress {
    fn enqueue(&self, packet: Pkt) -> Result<(), CellError> {
        if self.drops(&packet) {
            return Ok(());
        }
        self.tx
            .send(packet)
            .map_err(|_| CellError::ChannelError("cell closed".into()))
    }
}

cell_impl!(Loss, LossIngress, PassEgress);

// ---------------------------------------------------------------------------
// The data path's reordering

/// Reordering on the data path, after the bottleneck (as on a path whose
/// parallel links, ECMP or link aggregation, differ in delay): a share
/// `share` of the packets leaves at once and overtakes the others, which
/// wait `delay` (so `delay` adds to the path's RTT for most packets).
/// Overtaking packets come in short runs: whether a packet overtakes is
/// correlated 50 % with the one before (a two-state chain whose long-run
/// share is `share`). With a `delay` of many packets' transmission times
/// the overtaken ones look lost to SACK and RACK until the sender learns
/// the reordering: spurious retransmissions, which DSACKs then reveal and
/// the kernel undoes.
///
/// netem's `reorder P% 50%`, which the qdisc testbed uses, draws
/// `0.5 * fresh + 0.5 * last` and compares it with P: that draw centres on
/// 0.5, so far fewer packets overtake than P says (10 % asked, 0.11 %
/// overtook in a simulation of its formula over 10^6 packets). Here the
/// share is the share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reorder {
    /// Share of the packets that overtake, (0, 1).
    pub share: f64,
    /// How long the others wait.
    pub delay: Duration,
}

/// Longest wait a reordering path takes.
pub const MAX_REORDER_DELAY: Duration = Duration::from_secs(1);

impl Reorder {
    /// What is wrong with these values, if anything (share in (0, 1),
    /// delay in (0, [`MAX_REORDER_DELAY`]]).
    pub fn problem(&self) -> Option<String> {
        if !(self.share > 0.0 && self.share < 1.0) {
            return Some(format!("reorder share {} not in (0, 1)", self.share));
        }
        if self.delay.is_zero() || self.delay > MAX_REORDER_DELAY {
            return Some(format!(
                "reorder delay {:?} not in (0, {MAX_REORDER_DELAY:?}]",
                self.delay
            ));
        }
        None
    }
}

/// Correlation of one packet's choice with the one before (netem's `50%`).
const REORDER_CORRELATION: f64 = 0.5;

/// Counters of the reordering cell.
#[derive(Debug, Default)]
pub struct ReorderCounters {
    /// Packets that left at once, ahead of those waiting.
    pub overtook: AtomicU64,
}

/// The reordering cell: the ingress draws each packet's lane, the egress
/// sends the fast lane's packets as they come and the slow lane's when
/// their `delay` is up, whichever is due first.
pub struct Reordering {
    ingress: Arc<ReorderIngress>,
    egress: ReorderEgress,
}

pub struct ReorderIngress {
    fast: mpsc::UnboundedSender<Pkt>,
    slow: mpsc::UnboundedSender<Pkt>,
    share: f64,
    /// The generator's state and the last packet's choice.
    state: Mutex<(u64, bool)>,
    counters: Arc<ReorderCounters>,
}

impl ReorderIngress {
    /// Whether this packet overtakes: a chain that keeps the last choice
    /// with probability [`REORDER_CORRELATION`] and otherwise draws afresh
    /// with probability `share`, so its long-run share is `share` and one
    /// packet's choice is correlated 50 % with the next's.
    fn overtakes(&self) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let keep = next_unit(&mut st.0) < REORDER_CORRELATION;
        let fresh = next_unit(&mut st.0) < self.share;
        let overtakes = if keep { st.1 } else { fresh };
        st.1 = overtakes;
        overtakes
    }
}

impl Ingress<Pkt> for ReorderIngress {
    fn enqueue(&self, packet: Pkt) -> Result<(), CellError> {
        let lane = if self.overtakes() {
            self.counters.overtook.fetch_add(1, Ordering::Relaxed);
            &self.fast
        } else {
            &self.slow
        };
        lane.send(packet)
            .map_err(|_| CellError::ChannelError("cell closed".into()))
    }
}

pub struct ReorderEgress {
    fast: mpsc::UnboundedReceiver<Pkt>,
    slow: mpsc::UnboundedReceiver<Pkt>,
    delay: Duration,
    /// The slow lane's first packet and when it is due (the lane is FIFO:
    /// one delay for all, arrivals in order).
    waiting: Option<(Pkt, Instant)>,
    timer: Timer,
}

#[async_trait]
impl Egress<Pkt> for ReorderEgress {
    async fn dequeue(&mut self) -> Option<Pkt> {
        loop {
            if self.waiting.is_none() {
                if let Ok(p) = self.slow.try_recv() {
                    let due = p.get_timestamp() + self.delay;
                    self.waiting = Some((p, due));
                }
            }
            match self.waiting.as_ref().map(|(_, due)| *due) {
                Some(due) if due <= Instant::now() => {
                    let (mut p, due) = self.waiting.take()?;
                    p.delay_until(due);
                    return Some(p);
                }
                Some(due) => {
                    tokio::select! {
                        biased;
                        p = self.fast.recv() => return p,
                        _ = self.timer.sleep_until(due) => {}
                    }
                }
                None => {
                    tokio::select! {
                        biased;
                        p = self.fast.recv() => return p,
                        p = self.slow.recv() => {
                            let p = p?;
                            let due = p.get_timestamp() + self.delay;
                            self.waiting = Some((p, due));
                        }
                    }
                }
            }
        }
    }
}

impl Reordering {
    pub fn new(
        reorder: Reorder,
        seed: u64,
        counters: Arc<ReorderCounters>,
    ) -> Result<Self, CellError> {
        let (fast_tx, fast_rx) = mpsc::unbounded_channel();
        let (slow_tx, slow_rx) = mpsc::unbounded_channel();
        Ok(Reordering {
            ingress: Arc::new(ReorderIngress {
                fast: fast_tx,
                slow: slow_tx,
                share: reorder.share,
                // Another stream than the loss cell's from the same seed.
                state: Mutex::new(((seed ^ 0x9e37_79b9_7f4a_7c15) | 1, false)),
                counters,
            }),
            egress: ReorderEgress {
                fast: fast_rx,
                slow: slow_rx,
                delay: reorder.delay,
                waiting: None,
                timer: Timer::new()?,
            },
        })
    }
}

cell_impl!(Reordering, ReorderIngress, ReorderEgress);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::tests::tcp4;

    #[test]
    fn gate_schedule_waits_for_the_next_on() {
        let g = GateSchedule {
            on: Duration::from_millis(10),
            off: Duration::from_millis(70),
        };
        let ms = 1_000_000u64;
        assert_eq!(g.wait_at(0), Duration::ZERO);
        assert_eq!(g.wait_at(9 * ms), Duration::ZERO);
        assert_eq!(g.wait_at(10 * ms), Duration::from_millis(70));
        assert_eq!(g.wait_at(79 * ms), Duration::from_millis(1));
        assert_eq!(g.wait_at(80 * ms), Duration::ZERO);
        assert!(g.is_on_at(160 * ms + 5) && !g.is_on_at(175 * ms));
    }

    /// Whether the gate was open is decided at a packet's arrival: a packet
    /// that arrived during an On window passes untouched even when it is
    /// dequeued in the Off window after it (deciding at dequeue time parked
    /// the tail of every On burst until the next On, 2026-11-28); one that
    /// arrived during Off leaves at the next open, at once if that is past.
    #[test]
    fn gate_decides_at_arrival_not_at_dequeue() {
        let g = GateSchedule {
            on: Duration::from_millis(20),
            off: Duration::from_millis(280),
        };
        let cycle_ns = g.cycle().as_nanos() as u64;
        // Start 100 ms into a cycle: 80 ms after its On window closed,
        // 200 ms before the next opens.
        let phase = (clock_ns(libc::CLOCK_TAI) as u64) % cycle_ns;
        let target = 100_000_000u64;
        std::thread::sleep(Duration::from_nanos((target + cycle_ns - phase) % cycle_ns));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let counters = Arc::new(GateCounters::default());
            let mut gate = Gate::new(g, counters.clone()).unwrap();
            let ms = Duration::from_millis;
            // Where `now` falls in the cycle, read rather than assumed: the
            // sleep above may wake late (3.4 ms under CPU steal, a clean
            // clone of 2026-11-29).
            let now = Instant::now();
            let phase = Duration::from_nanos(clock_ns(libc::CLOCK_TAI) as u64 % cycle_ns);
            assert!(
                (ms(25)..ms(250)).contains(&phase),
                "premise: now {phase:?} into the cycle, inside its Off window"
            );
            let last_open = now - phase;
            let next_open = last_open + g.cycle();
            let pk = |at: Instant| {
                let mut p = StdPacket::from_raw_buffer(&tcp4([1, 1, 1, 1], 1, [2, 2, 2, 2], 2, 10));
                p.delay_until(at);
                p
            };
            // Arrived 5 ms into the last On window.
            let in_on = last_open + ms(5);
            // Arrived 30 ms into the previous cycle's Off: its open (the
            // last On's start) is past.
            let in_past_off = last_open - ms(250);
            gate.ingress.enqueue(pk(in_on)).unwrap();
            gate.ingress.enqueue(pk(in_past_off)).unwrap();
            gate.ingress.enqueue(pk(now)).unwrap();
            assert_eq!(counters.max_queued.load(Ordering::Relaxed), 3);

            let a = gate.egress.dequeue().await.unwrap();
            assert!(now.elapsed() < ms(40), "held {:?}", now.elapsed());
            assert_eq!(a.get_timestamp(), in_on, "passed untouched");
            assert_eq!(counters.held.load(Ordering::Relaxed), 0);

            let b = gate.egress.dequeue().await.unwrap();
            assert!(now.elapsed() < ms(40), "held {:?}", now.elapsed());
            let d = b.get_timestamp().max(last_open) - b.get_timestamp().min(last_open);
            assert!(d < ms(2), "left at its open, {d:?} off");
            assert_eq!(counters.held.load(Ordering::Relaxed), 1);

            let c = gate.egress.dequeue().await.unwrap();
            let (waited, wait) = (now.elapsed(), next_open - now);
            assert!(
                waited + ms(10) >= wait && waited < wait + ms(60),
                "arrived during Off: waits for the next open, {wait:?}; {waited:?}"
            );
            assert!(c.get_timestamp() + ms(2) >= next_open);
            assert_eq!(counters.held.load(Ordering::Relaxed), 2);
            assert_eq!(counters.queued.load(Ordering::Relaxed), 0);
        });
    }

    #[test]
    fn loss_list_drops_exactly_the_numbered_data_packets() {
        let (probability, counters) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(LossCounters::default()),
        );
        let list = LossList {
            sender: "198.18.2.1".parse().unwrap(),
            packets: [3, 4, 7].into_iter().collect(),
        };
        let loss = Loss::new(probability, &[list], 1, counters.clone());
        let data = |src: [u8; 4], port: u16| {
            StdPacket::from_raw_buffer(&tcp4(src, port, [198, 18, 0, 2], 5201, 1000))
        };
        let ack = StdPacket::from_raw_buffer(&tcp4([198, 18, 2, 1], 1, [198, 18, 0, 2], 5201, 0));
        let mut dropped = Vec::new();
        for n in 1..=8u64 {
            assert!(!loss.ingress.drops(&ack), "a pure ACK is not a data packet");
            if loss.ingress.drops(&data([198, 18, 2, 1], 40000)) {
                dropped.push(n);
            }
            // Another connection of the same sender counts on its own,
            // another sender's is never dropped.
            assert!(!loss.ingress.drops(&data([198, 18, 1, 1], 40000)));
        }
        assert_eq!(dropped, [3, 4, 7]);
        assert!(!loss.ingress.drops(&data([198, 18, 2, 1], 40001)));
        assert_eq!(counters.listed.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn random_loss_follows_its_probability_and_seed() {
        let run = |p: f64, seed: u64| {
            let prob = Arc::new(AtomicU64::new(p.to_bits()));
            let loss = Loss::new(prob, &[], seed, Arc::new(LossCounters::default()));
            let pk = StdPacket::from_raw_buffer(&tcp4([1, 1, 1, 1], 1, [2, 2, 2, 2], 2, 10));
            (0..100_000)
                .map(|_| loss.ingress.drops(&pk))
                .collect::<Vec<bool>>()
        };
        let a = run(0.02, 7);
        let share = a.iter().filter(|&&d| d).count() as f64 / a.len() as f64;
        assert!((0.018..0.022).contains(&share), "{share}");
        assert_eq!(a, run(0.02, 7), "same seed, same losses");
        assert_ne!(a, run(0.02, 8));
        assert!(run(0.0, 7).iter().all(|&d| !d));
    }

    /// The chain's long-run share is the share asked for, its overtaking
    /// packets come in runs (a packet after an overtaking one overtakes
    /// with probability 0.5 + 0.5 x share), and netem's formula would fail
    /// both (it lets 0.11 % through for 10 %).
    #[test]
    fn reordering_overtakes_the_share_asked_for_in_short_runs() {
        // The cell's timer needs a runtime to be built in.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _in_runtime = rt.enter();
        let cell = Reordering::new(
            Reorder {
                share: 0.1,
                delay: Duration::from_millis(20),
            },
            7,
            Arc::new(ReorderCounters::default()),
        )
        .unwrap();
        let n = 200_000;
        let choices: Vec<bool> = (0..n).map(|_| cell.ingress.overtakes()).collect();
        let share = choices.iter().filter(|&&c| c).count() as f64 / n as f64;
        assert!((0.095..0.105).contains(&share), "share {share}");
        let after: Vec<bool> = choices.windows(2).filter(|w| w[0]).map(|w| w[1]).collect();
        let stay = after.iter().filter(|&&c| c).count() as f64 / after.len() as f64;
        assert!(
            (0.52..0.58).contains(&stay),
            "kept after overtaking {stay}, 0.55 expected"
        );
        assert_eq!(
            Reorder {
                share: 0.0,
                delay: Duration::from_millis(1)
            }
            .problem()
            .unwrap(),
            "reorder share 0 not in (0, 1)"
        );
        assert!(Reorder {
            share: 0.5,
            delay: Duration::ZERO
        }
        .problem()
        .unwrap()
        .contains("reorder delay"));
        assert!(Reorder {
            share: f64::NAN,
            delay: Duration::from_millis(1)
        }
        .problem()
        .is_some());
    }

    /// A packet that overtakes leaves at once, ahead of one that arrived
    /// before it and waits its delay, dated by its arrival plus the delay.
    #[test]
    fn reordering_lets_the_fast_lane_overtake_the_waiting_one() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let delay = Duration::from_millis(50);
            let mut cell = Reordering::new(
                Reorder { share: 0.5, delay },
                1,
                Arc::new(ReorderCounters::default()),
            )
            .unwrap();
            let pk = |port: u16| {
                let mut p =
                    StdPacket::from_raw_buffer(&tcp4([1, 1, 1, 1], port, [2, 2, 2, 2], 2, 10));
                p.delay_until(Instant::now());
                p
            };
            // Lanes chosen here, not drawn: slow (1), fast (2), slow (3).
            let slow = pk(1);
            let arrived = slow.get_timestamp();
            cell.ingress.slow.send(slow).unwrap();
            cell.ingress.fast.send(pk(2)).unwrap();
            cell.ingress.slow.send(pk(3)).unwrap();
            let port = |p: &StdPacket| frame::tcp_segment(p.as_slice()).unwrap().src.port();
            let first = cell.egress.dequeue().await.unwrap();
            assert_eq!(port(&first), 2, "the fast packet overtakes");
            assert!(
                arrived.elapsed() < delay,
                "and leaves before the delay is up"
            );
            let second = cell.egress.dequeue().await.unwrap();
            assert_eq!(port(&second), 1);
            assert!(arrived.elapsed() >= delay, "the slow one waits its delay");
            assert_eq!(
                second.get_timestamp(),
                arrived + delay,
                "dated by arrival + delay"
            );
            assert_eq!(
                port(&cell.egress.dequeue().await.unwrap()),
                3,
                "the slow lane keeps its order"
            );
        });
    }
}
