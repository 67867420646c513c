//! The sender's own side of an On/Off gate on the userspace path.
//!
//! A descheduled VM transmits nothing during Off: its packets wait in the
//! guest, and TCP Small Queues stops the socket once a few of them wait.
//! The emulator's gate in the router holds what reaches it, but a veth
//! hands every packet over at once (no queue, the skb orphaned), so a
//! sender would go on sending into the held queue for a whole window.
//! Here the sender's `eth0` gets a `tbf` root (a qdisc this host has, where
//! taprio is missing) and a thread in the sender's namespace switches its
//! rate at every On/Off boundary of the CLOCK_TAI-aligned schedule: 10
//! Gbit/s (no shaping) while On, 1 kbit/s while Off (a full-size packet
//! then takes 12 s: the queue holds), each by one RTM_NEWQDISC change.
//! `tbf_change` refills the bucket, so one packet of at most one MTU may
//! leave right at the start of an Off window; the emulator's gate holds it.
//! Nor does `tbf_change` restart a throttled queue (its watchdog stays set
//! for the Off rate's 12 s), so on opening the thread also sends one small
//! frame of EtherType [`ccctl_path::cells::GATE_KICK_ETHERTYPE`] through
//! `eth0` with AF_PACKET: its enqueue runs the qdisc, which sends what
//! waited; the emulator's gate drops the frame.
//! The thread runs SCHED_FIFO when it may, so a boundary is kept to tens
//! of microseconds on an idle machine.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::{Error, Gate, Result};

/// Rate while On: well above any link the lab emulates.
const ON_BYTES_PER_SEC: u64 = 10_000_000_000 / 8;
/// Bucket while On: 10 ms at the On rate, so nothing is shaped.
const ON_BURST: u32 = 12_500_000;
/// Rate while Off: 1 kbit/s.
const OFF_BYTES_PER_SEC: u64 = 125;
/// Bytes the gate's queue holds (TSQ keeps each socket far below).
const LIMIT: u32 = 64 << 20;

const RTM_NEWQDISC: u16 = 36;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
const TCA_TBF_BURST: u16 = 6;
const TC_LINKLAYER_ETHERNET: u8 = 1;
const TC_H_ROOT: u32 = 0xffff_ffff;
/// `1:`, the gate's tbf.
const HANDLE: u32 = 0x0001_0000;

fn attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// RTM_NEWQDISC for a `tbf` root on `ifindex` at `bytes_per_sec` with a
/// bucket of `burst` bytes: created (`create`) or changed in place.
pub(super) fn tbf_request(
    ifindex: u32,
    bytes_per_sec: u64,
    burst: u32,
    create: bool,
    seq: u32,
) -> Vec<u8> {
    // struct tc_tbf_qopt: rate and peakrate (struct tc_ratespec: cell_log,
    // linklayer, overhead, cell_align, mpu, rate), limit, buffer, mtu.
    let mut qopt = Vec::with_capacity(36);
    qopt.push(0); // cell_log
    qopt.push(TC_LINKLAYER_ETHERNET); // no rate table needed
    qopt.extend_from_slice(&0u16.to_ne_bytes()); // overhead
    qopt.extend_from_slice(&0i16.to_ne_bytes()); // cell_align
    qopt.extend_from_slice(&0u16.to_ne_bytes()); // mpu
    qopt.extend_from_slice(&(bytes_per_sec.min(u64::from(u32::MAX)) as u32).to_ne_bytes());
    qopt.extend_from_slice(&[0u8; 12]); // no peak rate
    qopt.extend_from_slice(&LIMIT.to_ne_bytes());
    qopt.extend_from_slice(&0u32.to_ne_bytes()); // buffer: from TCA_TBF_BURST
    qopt.extend_from_slice(&0u32.to_ne_bytes()); // mtu: no peak rate
    let mut opts = Vec::new();
    attr(&mut opts, TCA_TBF_PARMS, &qopt);
    if bytes_per_sec > u64::from(u32::MAX) {
        attr(&mut opts, TCA_TBF_RATE64, &bytes_per_sec.to_ne_bytes());
    }
    attr(&mut opts, TCA_TBF_BURST, &burst.to_ne_bytes());
    let mut body = Vec::new();
    // struct tcmsg: family, pads, ifindex, handle, parent, info.
    body.extend_from_slice(&[0u8; 4]);
    body.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    body.extend_from_slice(&HANDLE.to_ne_bytes());
    body.extend_from_slice(&TC_H_ROOT.to_ne_bytes());
    body.extend_from_slice(&0u32.to_ne_bytes());
    attr(&mut body, TCA_KIND, b"tbf\0");
    attr(&mut body, TCA_OPTIONS, &opts);
    let flags = NLM_F_REQUEST | NLM_F_ACK | if create { NLM_F_CREATE | NLM_F_EXCL } else { 0 };
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&RTM_NEWQDISC.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend(body);
    msg
}

/// A NETLINK_ROUTE socket that sends tbf requests and waits for each ACK,
/// and an AF_PACKET socket for the kick frame.
struct Tc {
    sock: Socket,
    seq: u32,
    ifindex: u32,
    kick: std::os::fd::OwnedFd,
    kick_frame: [u8; 60],
}

impl Tc {
    fn new(dev: &str, src: [u8; 6], dst: [u8; 6]) -> std::io::Result<Tc> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        let probe = rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::DGRAM,
            None,
        )?;
        let ifindex = rustix::net::netdevice::name_to_index(&probe, dev)?;
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let kick = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let mut kick_frame = [0u8; 60];
        kick_frame[0..6].copy_from_slice(&dst);
        kick_frame[6..12].copy_from_slice(&src);
        kick_frame[12..14].copy_from_slice(&ccctl_path::cells::GATE_KICK_ETHERTYPE.to_be_bytes());
        Ok(Tc {
            sock,
            seq: 0,
            ifindex,
            kick,
            kick_frame,
        })
    }

    /// Sends the kick frame out of the gated device (through its qdisc).
    fn kick(&self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: sockaddr_ll is plain data; zeroed is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = self.ifindex as i32;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&self.kick_frame[0..6]);
        // SAFETY: the frame and the address are live locals of the sizes
        // passed.
        let n = unsafe {
            libc::sendto(
                self.kick.as_raw_fd(),
                self.kick_frame.as_ptr().cast(),
                self.kick_frame.len(),
                0,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn set(&mut self, bytes_per_sec: u64, burst: u32, create: bool) -> std::io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let msg = tbf_request(self.ifindex, bytes_per_sec, burst, create, self.seq);
        self.sock.send(&msg, 0)?;
        loop {
            let (answer, _) = self.sock.recv_from_full()?;
            let mut off = 0;
            while off + 16 <= answer.len() {
                let len = u32::from_ne_bytes(answer[off..off + 4].try_into().unwrap_or_default())
                    as usize;
                let kind = u16::from_ne_bytes([answer[off + 4], answer[off + 5]]);
                let seq =
                    u32::from_ne_bytes(answer[off + 8..off + 12].try_into().unwrap_or_default());
                if kind == NLMSG_ERROR && seq == self.seq && off + 20 <= answer.len() {
                    let code = i32::from_ne_bytes(
                        answer[off + 16..off + 20].try_into().unwrap_or_default(),
                    );
                    return if code == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::from_raw_os_error(-code))
                    };
                }
                if len < 16 {
                    break;
                }
                off += len.next_multiple_of(4);
            }
        }
    }
}

fn tai_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_TAI, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn sleep_until_tai(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: an absolute sleep on CLOCK_TAI; EINTR only shortens it, and
    // the caller's loop re-reads the clock.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_TAI,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

/// The next boundary after `now` and whether the gate opens there.
pub(super) fn next_boundary(gate: &Gate, now: u64) -> (u64, bool) {
    let cycle = gate.cycle().as_nanos() as u64;
    let on = gate.on.as_nanos() as u64;
    let start = now - now % cycle;
    if now - start < on {
        (start + on, false)
    } else {
        (start + cycle, true)
    }
}

/// A running sender-side gate; dropping it stops the thread (the tbf goes
/// with the namespace).
#[derive(Debug)]
pub(super) struct SenderGate {
    stop: Arc<AtomicBool>,
    /// Why the thread stopped switching, if it failed.
    failure: Arc<std::sync::Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl SenderGate {
    /// Installs the tbf on `dev` in the namespace at `ns` and starts
    /// switching it on `gate`'s schedule.
    /// `macs` are the device's own address and its peer's (the kick
    /// frame's source and destination).
    pub(super) fn start(
        ns: PathBuf,
        dev: &str,
        macs: ([u8; 6], [u8; 6]),
        gate: Gate,
    ) -> Result<SenderGate> {
        let io = |what: String| move |source| Error::Io { what, source };
        let ns_file = std::fs::File::open(&ns).map_err(io(format!("opening {}", ns.display())))?;
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let failure = Arc::new(std::sync::Mutex::new(None));
        let (dev, stop2, failure2) = (dev.to_string(), stop.clone(), failure.clone());
        let thread = std::thread::Builder::new()
            .name("ccctl-gate".into())
            .spawn(move || {
                let setup = rustix::thread::move_into_link_name_space(
                    ns_file.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(std::io::Error::from)
                .and_then(|()| Tc::new(&dev, macs.0, macs.1))
                .and_then(|mut tc| {
                    let now = tai_ns();
                    let (_, opens) = next_boundary(&gate, now);
                    // Off now if the next boundary opens the gate.
                    if opens {
                        tc.set(OFF_BYTES_PER_SEC, 1514, true)?;
                    } else {
                        tc.set(ON_BYTES_PER_SEC, ON_BURST, true)?;
                    }
                    Ok(tc)
                });
                let mut tc = match setup {
                    Ok(tc) => {
                        let _ = tx.send(Ok(()));
                        tc
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let param = libc::sched_param { sched_priority: 50 };
                // SAFETY: sets this thread's own policy; failure leaves it
                // SCHED_OTHER, which only costs precision.
                unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
                while !stop2.load(Ordering::Relaxed) {
                    let (at, opens) = next_boundary(&gate, tai_ns());
                    sleep_until_tai(at);
                    if tai_ns() < at {
                        continue; // woken early: re-read the schedule
                    }
                    let r = if opens {
                        tc.set(ON_BYTES_PER_SEC, ON_BURST, false)
                            .and_then(|()| tc.kick())
                    } else {
                        tc.set(OFF_BYTES_PER_SEC, 1514, false)
                    };
                    if let Err(e) = r {
                        let why = format!("switching the sender's tbf failed: {e}");
                        tracing::warn!("sender gate: {why}; the gate stops");
                        *failure2.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
                        return;
                    }
                }
            })
            .map_err(io("spawning the sender gate's thread".into()))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(SenderGate {
                stop,
                failure,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(Error::Io {
                    what: "installing the sender gate's tbf (RTM_NEWQDISC)".into(),
                    source: e,
                })
            }
            Err(_) => Err(Error::Config("the sender gate's thread died".into())),
        }
    }
}

impl SenderGate {
    /// Why the gate stopped keeping its schedule, if it did.
    pub(super) fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for SenderGate {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            // At most one cycle (<= 1 s, Schedule::check) to its next wakeup.
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn boundaries_follow_the_tai_aligned_cycle() {
        let g = Gate {
            on: Duration::from_millis(10),
            off: Duration::from_millis(70),
        };
        let ms = 1_000_000;
        assert_eq!(next_boundary(&g, 0), (10 * ms, false));
        assert_eq!(next_boundary(&g, 9 * ms), (10 * ms, false));
        assert_eq!(next_boundary(&g, 10 * ms), (80 * ms, true));
        assert_eq!(next_boundary(&g, 79 * ms), (80 * ms, true));
        assert_eq!(next_boundary(&g, 80 * ms), (90 * ms, false));
    }

    #[test]
    fn tbf_request_is_what_the_kernel_parses() {
        let m = tbf_request(7, 125, 1514, false, 9);
        assert_eq!(
            u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize,
            m.len()
        );
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), RTM_NEWQDISC);
        assert_eq!(
            u16::from_ne_bytes([m[6], m[7]]),
            NLM_F_REQUEST | NLM_F_ACK,
            "a change, not a create"
        );
        assert_eq!(
            i32::from_ne_bytes(m[20..24].try_into().unwrap()),
            7,
            "ifindex"
        );
        assert_eq!(u32::from_ne_bytes(m[24..28].try_into().unwrap()), HANDLE);
        assert_eq!(u32::from_ne_bytes(m[28..32].try_into().unwrap()), TC_H_ROOT);
        assert_eq!(&m[40..44], b"tbf\0", "TCA_KIND");
        let c = tbf_request(7, ON_BYTES_PER_SEC, ON_BURST, true, 1);
        assert_eq!(
            u16::from_ne_bytes([c[6], c[7]]),
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        );
    }
}
