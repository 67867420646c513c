//! The bottleneck's queue: one rattan `PacketQueue` that is tail drop,
//! CoDel (rattan's own) or FQ-CoDel (ours, RFC 8290), and that counts what
//! it was given, what it sent and so what it dropped.
//!
//! Sizes are frames as the kernel's qdiscs count them (IP packet + 14 bytes
//! of Ethernet header), so a byte limit means what the qdisc testbed's
//! `tbf ... limit` means: a buffer of N full-size frames is `N * (mtu + 14)`
//! bytes on both paths.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rattan_core::cells::bandwidth::queue::{CoDelQueue, CoDelQueueConfig, PacketQueue};
use rattan_core::cells::bandwidth::BwType;
use rattan_core::cells::Packet;
use tokio::time::Instant;

use crate::frame::{self, ETH_HLEN};

/// What the bottleneck queue does when it is full or standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueKind {
    /// A FIFO that drops arrivals when full (the qdisc testbed's bfifo).
    #[default]
    TailDrop,
    /// RFC 8289 CoDel over one FIFO (rattan's `CoDelQueue`): target 5 ms,
    /// interval 100 ms.
    CoDel,
    /// RFC 8290 FQ-CoDel: per-flow queues served by deficit round robin,
    /// CoDel on each ([`FqCodel`]).
    FqCodel,
}

impl QueueKind {
    pub const NAMES: [&'static str; 3] = ["taildrop", "codel", "fq_codel"];

    pub fn name(self) -> &'static str {
        match self {
            QueueKind::TailDrop => "taildrop",
            QueueKind::CoDel => "codel",
            QueueKind::FqCodel => "fq_codel",
        }
    }
}

/// The queue's limits; a packet that would pass either is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimit {
    /// Frames' bytes (IP packet + 14).
    pub bytes: Option<u64>,
    pub packets: Option<u64>,
}

/// Counters the emulator reads while the queue runs.
#[derive(Debug, Default)]
pub struct QueueCounters {
    pub arrived: AtomicU64,
    pub sent: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub dropped: AtomicU64,
    /// Packets and frame bytes queued now.
    pub backlog: AtomicU64,
    pub backlog_bytes: AtomicU64,
    /// Largest backlog seen, packets and bytes.
    pub max_backlog: AtomicU64,
    pub max_backlog_bytes: AtomicU64,
}

fn frame_len<P: Packet>(p: &P) -> u64 {
    (p.l3_length() + ETH_HLEN) as u64
}

/// The bottleneck queue.
pub struct Bottleneck<P: Packet> {
    inner: Inner<P>,
    counters: Arc<QueueCounters>,
}

enum Inner<P: Packet> {
    TailDrop(TailDrop<P>),
    CoDel(CoDelQueue<P>),
    FqCodel(FqCodel<P>),
}

impl<P: Packet> Bottleneck<P> {
    pub fn new(kind: QueueKind, limit: QueueLimit, mtu: u32, counters: Arc<QueueCounters>) -> Self {
        let inner = match kind {
            QueueKind::TailDrop => Inner::TailDrop(TailDrop::new(limit)),
            QueueKind::CoDel => {
                // rattan's CoDel counts IP bytes; its byte limit is the
                // frames' bytes less 14 per full-size frame.
                let per_frame = u64::from(mtu) + ETH_HLEN as u64;
                let byte_limit = limit
                    .bytes
                    .map(|b| (b / per_frame * u64::from(mtu) + b % per_frame) as usize);
                Inner::CoDel(CoDelQueue::new(CoDelQueueConfig::new(
                    limit.packets.map(|p| p as usize),
                    byte_limit,
                    Duration::from_millis(100),
                    Duration::from_millis(5),
                    mtu,
                    BwType::NetworkLayer,
                )))
            }
            QueueKind::FqCodel => Inner::FqCodel(FqCodel::new(FqCodelConfig::rfc8290(limit, mtu))),
        };
        Bottleneck { inner, counters }
    }

    fn note_backlog(&self) {
        let (n, bytes) = match &self.inner {
            Inner::TailDrop(q) => (q.queue.len() as u64, q.bytes),
            Inner::CoDel(q) => (q.length() as u64, 0),
            Inner::FqCodel(q) => (q.packets as u64, q.bytes),
        };
        let c = &self.counters;
        c.backlog.store(n, Ordering::Relaxed);
        c.backlog_bytes.store(bytes, Ordering::Relaxed);
        c.max_backlog.fetch_max(n, Ordering::Relaxed);
        c.max_backlog_bytes.fetch_max(bytes, Ordering::Relaxed);
    }
}

impl<P: Packet + Send> PacketQueue<P> for Bottleneck<P> {
    /// The queue is set when the path is built; nothing reconfigures it.
    type Config = ();

    fn configure(&mut self, _config: ()) {}

    fn enqueue(&mut self, packet: P) {
        self.counters.arrived.fetch_add(1, Ordering::Relaxed);
        let dropped = match &mut self.inner {
            Inner::TailDrop(q) => u64::from(!q.push(packet)),
            Inner::CoDel(q) => {
                let before = q.length();
                q.enqueue(packet);
                u64::from(q.length() == before)
            }
            Inner::FqCodel(q) => q.enqueue(packet),
        };
        self.counters.dropped.fetch_add(dropped, Ordering::Relaxed);
        self.note_backlog();
    }

    fn dequeue(&mut self) -> Option<P> {
        let (packet, dropped) = match &mut self.inner {
            Inner::TailDrop(q) => (q.pop(), 0),
            Inner::CoDel(q) => {
                // CoDel drops at the head while it dequeues.
                let before = q.length();
                let p = q.dequeue();
                let left = before - q.length() - usize::from(p.is_some());
                (p, left as u64)
            }
            Inner::FqCodel(q) => q.dequeue_at(Instant::now()),
        };
        self.counters.dropped.fetch_add(dropped, Ordering::Relaxed);
        if let Some(p) = &packet {
            self.counters.sent.fetch_add(1, Ordering::Relaxed);
            self.counters
                .sent_bytes
                .fetch_add(frame_len(p), Ordering::Relaxed);
        }
        self.note_backlog();
        packet
    }

    fn is_empty(&self) -> bool {
        self.length() == 0
    }

    fn get_front_size(&self) -> Option<usize> {
        match &self.inner {
            Inner::TailDrop(q) => q.queue.front().map(|p| p.l3_length()),
            Inner::CoDel(q) => q.get_front_size(),
            Inner::FqCodel(q) => q.front_size(),
        }
    }

    fn length(&self) -> usize {
        match &self.inner {
            Inner::TailDrop(q) => q.queue.len(),
            Inner::CoDel(q) => q.length(),
            Inner::FqCodel(q) => q.packets,
        }
    }
}

/// A FIFO that refuses an arrival that would pass either limit.
struct TailDrop<P> {
    queue: VecDeque<P>,
    bytes: u64,
    limit: QueueLimit,
}

impl<P: Packet> TailDrop<P> {
    fn new(limit: QueueLimit) -> Self {
        TailDrop {
            queue: VecDeque::new(),
            bytes: 0,
            limit,
        }
    }

    /// Queues `p`; false when it was dropped.
    fn push(&mut self, p: P) -> bool {
        let len = frame_len(&p);
        let fits_packets = self
            .limit
            .packets
            .is_none_or(|l| (self.queue.len() as u64) < l);
        let fits_bytes = self.limit.bytes.is_none_or(|l| self.bytes + len <= l);
        if fits_packets && fits_bytes {
            self.bytes += len;
            self.queue.push_back(p);
            true
        } else {
            false
        }
    }

    fn pop(&mut self) -> Option<P> {
        let p = self.queue.pop_front()?;
        self.bytes -= frame_len(&p);
        Some(p)
    }
}

// ---------------------------------------------------------------------------
// FQ-CoDel (RFC 8290)

/// FQ-CoDel's parameters; [`FqCodelConfig::rfc8290`] gives the RFC's
/// defaults (Sec. 5.1, and Linux's `fq_codel`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FqCodelConfig {
    /// Number of flow queues a flow hashes into (RFC: 1024).
    pub flows: usize,
    /// Bytes a queue may send per round (RFC: one MTU-sized frame, 1514).
    pub quantum: u64,
    /// CoDel's acceptable standing delay (RFC 8289: 5 ms).
    pub target: Duration,
    /// CoDel's window for the minimum sojourn time (RFC 8289: 100 ms).
    pub interval: Duration,
    /// Total limit, over all queues: when passed, packets are dropped from
    /// the head of the queue holding the most bytes (RFC 8290 Sec. 4.1).
    pub limit: QueueLimit,
    /// A queue of at most this many bytes is never dropped from by CoDel
    /// (one MTU: RFC 8289's `maxpacket`).
    pub mtu_bytes: u64,
}

impl FqCodelConfig {
    pub fn rfc8290(limit: QueueLimit, mtu: u32) -> Self {
        let frame = u64::from(mtu) + ETH_HLEN as u64;
        FqCodelConfig {
            flows: 1024,
            quantum: frame,
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            limit,
            mtu_bytes: frame,
        }
    }
}

/// One flow queue with its CoDel state and DRR deficit.
struct FlowQueue<P> {
    packets: VecDeque<P>,
    bytes: u64,
    deficit: i64,
    /// In the new or old list (an inactive queue is in neither).
    listed: bool,
    codel: CodelState,
}

#[derive(Default)]
struct CodelState {
    first_above_time: Option<Instant>,
    drop_next: Option<Instant>,
    count: u32,
    lastcount: u32,
    dropping: bool,
}

/// RFC 8290 FQ-CoDel over rattan's packet type.
pub struct FqCodel<P> {
    cfg: FqCodelConfig,
    queues: Vec<FlowQueue<P>>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    packets: usize,
    bytes: u64,
}

impl<P: Packet> FqCodel<P> {
    pub fn new(cfg: FqCodelConfig) -> Self {
        let queues = (0..cfg.flows.max(1))
            .map(|_| FlowQueue {
                packets: VecDeque::new(),
                bytes: 0,
                deficit: 0,
                listed: false,
                codel: CodelState::default(),
            })
            .collect();
        FqCodel {
            cfg,
            queues,
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            packets: 0,
            bytes: 0,
        }
    }

    /// The queue a packet's flow hashes into: the TCP connection's
    /// addresses and ports, or for anything else its destination.
    fn classify(&self, p: &P) -> usize {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match frame::tcp_segment(p.as_slice()) {
            Some(s) => (s.src, s.dst).hash(&mut h),
            None => frame::dst_addr(p.as_slice()).hash(&mut h),
        }
        (h.finish() % self.queues.len() as u64) as usize
    }

    fn over_limit(&self) -> bool {
        let l = self.cfg.limit;
        l.packets.is_some_and(|n| self.packets as u64 > n)
            || l.bytes.is_some_and(|b| self.bytes > b)
    }

    /// Queues `p`; returns how many packets were dropped to make room
    /// (from the head of the fattest queue, RFC 8290 Sec. 4.1).
    pub fn enqueue(&mut self, p: P) -> u64 {
        let i = self.classify(&p);
        let len = frame_len(&p);
        let q = &mut self.queues[i];
        q.packets.push_back(p);
        q.bytes += len;
        if !q.listed {
            q.listed = true;
            q.deficit = self.cfg.quantum as i64;
            self.new_flows.push_back(i);
        }
        self.packets += 1;
        self.bytes += len;
        let mut dropped = 0;
        while self.over_limit() {
            let fattest = (0..self.queues.len())
                .max_by_key(|&j| self.queues[j].bytes)
                .unwrap_or(i);
            if self.pop_head(fattest).is_none() {
                break;
            }
            dropped += 1;
        }
        dropped
    }

    fn pop_head(&mut self, i: usize) -> Option<P> {
        let q = &mut self.queues[i];
        let p = q.packets.pop_front()?;
        let len = frame_len(&p);
        q.bytes -= len;
        self.packets -= 1;
        self.bytes -= len;
        Some(p)
    }

    fn front_size(&self) -> Option<usize> {
        let i = *self.new_flows.front().or(self.old_flows.front())?;
        self.queues[i].packets.front().map(|p| p.l3_length())
    }

    /// RFC 8289's `dodequeue`: the head of queue `i` and whether CoDel may
    /// drop it (its sojourn time has been above target for an interval).
    fn codel_head(&mut self, i: usize, now: Instant) -> (Option<P>, bool) {
        let p = self.pop_head(i);
        let (target, interval, mtu) = (self.cfg.target, self.cfg.interval, self.cfg.mtu_bytes);
        let backlog = self.bytes;
        let c = &mut self.queues[i].codel;
        let Some(p) = p else {
            c.first_above_time = None;
            return (None, false);
        };
        let sojourn = now.saturating_duration_since(p.get_timestamp());
        if sojourn < target || backlog <= mtu {
            c.first_above_time = None;
            return (Some(p), false);
        }
        match c.first_above_time {
            None => {
                c.first_above_time = Some(now + interval);
                (Some(p), false)
            }
            Some(t) => (Some(p), now >= t),
        }
    }

    fn control_law(&self, t: Instant, count: u32) -> Instant {
        t + self.cfg.interval.div_f64(f64::from(count.max(1)).sqrt())
    }

    /// RFC 8289's CoDel dequeue on queue `i`: the packet to send (if any)
    /// and how many it dropped.
    fn codel_dequeue(&mut self, i: usize, now: Instant) -> (Option<P>, u64) {
        let mut dropped = 0;
        let (mut p, mut ok) = self.codel_head(i, now);
        if p.is_none() {
            self.queues[i].codel.dropping = false;
            return (None, 0);
        }
        if self.queues[i].codel.dropping {
            if !ok {
                self.queues[i].codel.dropping = false;
            }
            while self.queues[i].codel.dropping
                && self.queues[i].codel.drop_next.is_some_and(|t| now >= t)
            {
                dropped += 1; // p is dropped
                self.queues[i].codel.count += 1;
                (p, ok) = self.codel_head(i, now);
                if !ok || p.is_none() {
                    self.queues[i].codel.dropping = false;
                } else {
                    let (next, count) = {
                        let c = &self.queues[i].codel;
                        (c.drop_next.unwrap_or(now), c.count)
                    };
                    self.queues[i].codel.drop_next = Some(self.control_law(next, count));
                }
            }
        } else if ok {
            dropped += 1; // p is dropped
            (p, _) = self.codel_head(i, now);
            let interval = self.cfg.interval;
            let c = &self.queues[i].codel;
            let delta = c.count.saturating_sub(c.lastcount);
            let recent = c
                .drop_next
                .is_some_and(|t| now.saturating_duration_since(t) < interval * 16);
            let count = if delta > 1 && recent { delta } else { 1 };
            let next = self.control_law(now, count);
            let c = &mut self.queues[i].codel;
            c.dropping = true;
            c.count = count;
            c.lastcount = count;
            c.drop_next = Some(next);
        }
        (p, dropped)
    }

    /// RFC 8290 Sec. 4.2: new queues first, each sends up to its deficit
    /// of bytes per round; a queue that empties leaves the lists (a new
    /// one goes to the old list first, so it cannot jump back at once).
    pub fn dequeue_at(&mut self, now: Instant) -> (Option<P>, u64) {
        let mut dropped = 0;
        loop {
            let (from_new, i) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(&i), _) => (true, i),
                (None, Some(&i)) => (false, i),
                (None, None) => return (None, dropped),
            };
            if self.queues[i].deficit <= 0 {
                self.queues[i].deficit += self.cfg.quantum as i64;
                if from_new {
                    self.new_flows.pop_front();
                } else {
                    self.old_flows.pop_front();
                }
                self.old_flows.push_back(i);
                continue;
            }
            let (p, d) = self.codel_dequeue(i, now);
            dropped += d;
            match p {
                Some(p) => {
                    self.queues[i].deficit -= frame_len(&p) as i64;
                    return (Some(p), dropped);
                }
                None => {
                    if from_new {
                        self.new_flows.pop_front();
                    } else {
                        self.old_flows.pop_front();
                    }
                    if from_new && !self.old_flows.is_empty() {
                        self.old_flows.push_back(i);
                    } else {
                        self.queues[i].listed = false;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::tests::tcp4;
    use rattan_core::cells::StdPacket;

    fn pkt(flow: u16, payload: usize, at: Instant) -> StdPacket {
        let mut p = StdPacket::from_raw_buffer(&tcp4(
            [198, 18, 1, 1],
            flow,
            [198, 18, 0, 2],
            5201,
            payload,
        ));
        p.delay_until(at);
        p
    }

    fn port(p: &StdPacket) -> u16 {
        frame::tcp_segment(p.as_slice()).unwrap().src.port()
    }

    fn fq(limit_packets: u64) -> FqCodel<StdPacket> {
        FqCodel::new(FqCodelConfig::rfc8290(
            QueueLimit {
                bytes: None,
                packets: Some(limit_packets),
            },
            1500,
        ))
    }

    /// Distinct ports that hash into distinct queues (the test's flows).
    fn ports(q: &FqCodel<StdPacket>, n: usize) -> Vec<u16> {
        let now = Instant::now();
        let mut seen = std::collections::HashSet::new();
        (1000..u16::MAX)
            .filter(|&p| seen.insert(q.classify(&pkt(p, 0, now))))
            .take(n)
            .collect()
    }

    #[test]
    fn tail_drop_counts_frames_and_packets() {
        let c = Arc::new(QueueCounters::default());
        let frame = 1514;
        let mut q: Bottleneck<StdPacket> = Bottleneck::new(
            QueueKind::TailDrop,
            QueueLimit {
                bytes: Some(3 * frame),
                packets: None,
            },
            1500,
            c.clone(),
        );
        let now = Instant::now();
        for _ in 0..5 {
            q.enqueue(pkt(1, 1460, now)); // 20 + 20 + 1460 = 1500 B IP
        }
        assert_eq!(q.length(), 3, "3 full frames fit 3 x 1514 B");
        assert_eq!(c.dropped.load(Ordering::Relaxed), 2);
        assert_eq!(c.backlog_bytes.load(Ordering::Relaxed), 3 * frame);
        assert!(q.dequeue().is_some());
        assert_eq!(c.sent.load(Ordering::Relaxed), 1);
        assert_eq!(c.sent_bytes.load(Ordering::Relaxed), frame);
        let mut q: Bottleneck<StdPacket> = Bottleneck::new(
            QueueKind::TailDrop,
            QueueLimit {
                bytes: None,
                packets: Some(2),
            },
            1500,
            Arc::new(QueueCounters::default()),
        );
        for _ in 0..4 {
            q.enqueue(pkt(1, 0, now));
        }
        assert_eq!(q.length(), 2, "packet limit");
    }

    /// RFC 8290 Sec. 4.2: a sparse flow's packet goes before a bulk flow's
    /// standing queue.
    #[test]
    fn fq_codel_serves_a_new_sparse_flow_first() {
        let mut q = fq(1000);
        let [bulk, sparse] = ports(&q, 2)[..] else {
            unreachable!()
        };
        let now = Instant::now();
        for _ in 0..20 {
            q.enqueue(pkt(bulk, 1460, now));
        }
        assert_eq!(port(&q.dequeue_at(now).0.unwrap()), bulk);
        q.enqueue(pkt(sparse, 100, now));
        // The bulk queue still has deficit for this round's remaining
        // bytes (its quantum is one frame, just spent): the sparse flow,
        // in the new list, goes next.
        assert_eq!(port(&q.dequeue_at(now).0.unwrap()), sparse);
    }

    /// Two bulk flows of equal packets take turns: over many dequeues
    /// their counts differ by at most one quantum's worth.
    #[test]
    fn fq_codel_drr_shares_equally() {
        let mut q = fq(10_000);
        let p = ports(&q, 2);
        let now = Instant::now();
        for _ in 0..500 {
            q.enqueue(pkt(p[0], 1460, now));
            q.enqueue(pkt(p[1], 700, now));
        }
        let mut bytes = [0u64; 2];
        for _ in 0..300 {
            let out = q.dequeue_at(now).0.unwrap();
            let k = usize::from(port(&out) == p[1]);
            bytes[k] += frame_len(&out);
        }
        let diff = bytes[0].abs_diff(bytes[1]);
        assert!(diff <= 1514, "byte shares {bytes:?} differ by {diff}");
    }

    /// Overflow drops from the head of the queue holding the most bytes,
    /// not the arrival's own (RFC 8290 Sec. 4.1).
    #[test]
    fn fq_codel_drops_from_the_fattest_queue() {
        let mut q = fq(10);
        let p = ports(&q, 2);
        let now = Instant::now();
        for _ in 0..10 {
            q.enqueue(pkt(p[0], 1000, now));
        }
        let d = q.enqueue(pkt(p[1], 100, now));
        assert_eq!(d, 1);
        let fat = q.classify(&pkt(p[0], 0, now));
        let thin = q.classify(&pkt(p[1], 0, now));
        assert_eq!(q.queues[fat].packets.len(), 9);
        assert_eq!(q.queues[thin].packets.len(), 1);
    }

    /// CoDel on a flow queue: a standing queue whose sojourn time stays
    /// above 5 ms is left alone for the first 100 ms, then dropped from,
    /// at intervals shrinking as 100 ms / sqrt(count); a queue below
    /// target is never dropped from.
    #[test]
    fn fq_codel_codel_drops_after_an_interval_above_target() {
        let mut q = fq(100_000);
        let p = ports(&q, 1)[0];
        let t0 = Instant::now();
        // Arrived 20 ms before each dequeue: sojourn 20 ms > 5 ms target.
        let mut drops = Vec::new();
        let mut t = t0;
        for _ in 0..4000 {
            q.enqueue(pkt(p, 1460, t - Duration::from_millis(20)));
            q.enqueue(pkt(p, 1460, t - Duration::from_millis(20)));
            let (_, d) = q.dequeue_at(t);
            if d > 0 {
                drops.push(t - t0);
            }
            t += Duration::from_millis(1);
        }
        let first = drops[0];
        assert!(
            first >= Duration::from_millis(100) && first <= Duration::from_millis(102),
            "first CoDel drop at {first:?}"
        );
        // Drop spacing shrinks: 100 ms / sqrt(n).
        let gaps: Vec<Duration> = drops.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps[0] >= Duration::from_millis(99) && gaps[0] <= Duration::from_millis(101),
            "{gaps:?}"
        );
        assert!(gaps[8] < gaps[0] / 2, "spacing does not shrink: {gaps:?}");

        // Below target: no drop however long.
        let mut q = fq(100_000);
        let mut t = Instant::now();
        let mut dropped = 0;
        for _ in 0..1000 {
            q.enqueue(pkt(p, 1460, t - Duration::from_millis(2)));
            q.enqueue(pkt(p, 1460, t - Duration::from_millis(2)));
            dropped += q.dequeue_at(t).1;
            dropped += q.dequeue_at(t).1;
            t += Duration::from_millis(1);
        }
        assert_eq!(dropped, 0);
    }
}
