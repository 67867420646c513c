//! The AF_PACKET sockets the emulator reads the router's veths through:
//! their receive buffer, and the packets the kernel dropped at them.
//!
//! A packet the kernel drops at the socket never reaches the emulated
//! queue: a loss the scenario did not ask for, invisible in the queue's
//! counters. It happens when the emulator's thread is descheduled (a busy
//! machine) or falls behind (high rates) while a sender keeps sending: the
//! kernel's default buffer (`net.core.rmem_default`, ~208 KB of truesize,
//! about 90 full frames from a veth) holds under 2 ms at 500 Mbit/s. So the
//! buffer is made large enough for a whole window's burst, and the drops
//! that still happen are counted and reported with the run.
//!
//! Each packet is dated by the kernel's receive time at the socket
//! ([`arrival`]), not by when the emulator's thread got to read it: a
//! thread descheduled for a few ms (CPU steal on a shared host) then
//! catches up in the cells' logical time instead of leaving the emulated
//! link idle for as long, the way a link whose queue holds packets keeps
//! sending. The delay between the two is recorded ([`ReadLag`]).
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rattan_core::metal::error::MetalError;

/// Receive buffer of each socket, bytes of truesize: a burst of a whole
/// window (2 BDP at 500 Mbit/s and 20 ms is 2.5 MB of payload, ~4 MB of
/// truesize at ~2.3 KB per frame) several times over.
pub const RECEIVE_BUFFER_BYTES: i32 = 32 << 20;

thread_local! {
    /// The sockets bound on this thread since the last [`take_bound`]: the
    /// path's builder collects its cells' sockets this way (rattan binds
    /// them inside its cell constructors, which run on the caller's thread).
    pub(crate) static BOUND: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

thread_local! {
    /// Where the receivers built on this thread record their read lag
    /// (set by the path's builder, as [`BOUND`] is read by it).
    pub(crate) static READ_LAG: RefCell<std::sync::Arc<ReadLag>> = RefCell::default();
}

/// The sockets bound on this thread since the last call.
pub(crate) fn take_bound() -> Vec<i32> {
    BOUND.with(|b| std::mem::take(&mut *b.borrow_mut()))
}

/// Sets `fd`'s receive buffer to [`RECEIVE_BUFFER_BYTES`] beyond
/// `net.core.rmem_max` (SO_RCVBUFFORCE, CAP_NET_ADMIN: the path runs as
/// root), and checks that it took.
pub(crate) fn enlarge_receive_buffer(fd: i32) -> Result<(), MetalError> {
    set_receive_buffer(fd, RECEIVE_BUFFER_BYTES).map_err(MetalError::IoError)
}

/// Sets `fd`'s receive buffer to `want` bytes (SO_RCVBUFFORCE) and checks
/// that it took.
pub(crate) fn set_receive_buffer(fd: i32, want: i32) -> std::io::Result<()> {
    // SAFETY: fd is an open socket; the option value is a c_int.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&want as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::other(format!(
            "setting the AF_PACKET socket's receive buffer to {want} B (SO_RCVBUFFORCE): {}",
            std::io::Error::last_os_error()
        )));
    }
    let got = receive_buffer(fd)?;
    // The kernel doubles the value for its bookkeeping (and has a floor).
    if got < want {
        return Err(std::io::Error::other(format!(
            "the AF_PACKET socket's receive buffer is {got} B after asking for {want} B"
        )));
    }
    Ok(())
}

/// `fd`'s receive buffer as the kernel reports it (twice what was set).
pub fn receive_buffer(fd: i32) -> std::io::Result<i32> {
    let mut v: libc::c_int = 0;
    get_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &mut v)?;
    Ok(v)
}

/// Packets the kernel dropped at `fd` since the last call (reading
/// PACKET_STATISTICS resets it).
pub(crate) fn drops_since_last(fd: i32) -> std::io::Result<u64> {
    let mut st = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    get_option(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS, &mut st)?;
    Ok(u64::from(st.tp_drops))
}

/// SIOCGSTAMPNS (linux/sockios.h, 64-bit time_t): the receive time of the
/// last packet read from a socket, CLOCK_REALTIME. The first call turns
/// the socket's (and the kernel's) receive timestamps on.
const SIOCGSTAMPNS: libc::c_ulong = 0x8907;

/// The longest a packet may have waited in a socket for its kernel time to
/// be taken: a value further back (or ahead) is no receive time of this
/// packet, and the read time stands.
const MAX_READ_LAG: Duration = Duration::from_secs(2);

/// Turns the kernel's receive timestamps on for `fd` (and the kernel), so
/// the first packets read are dated too. Before any packet the kernel
/// answers ENOENT (no time yet), having turned them on.
pub(crate) fn enable_arrival_times(fd: i32) -> std::io::Result<()> {
    match kernel_receive_time(fd) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
        _ => Ok(()),
    }
}

/// The kernel's receive time of the last packet read from `fd`, ns since
/// the epoch (CLOCK_REALTIME).
fn kernel_receive_time(fd: i32) -> std::io::Result<i128> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fd is an open socket; SIOCGSTAMPNS writes one timespec.
    let rc = unsafe { libc::ioctl(fd, SIOCGSTAMPNS as _, &mut ts as *mut libc::timespec) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec))
}

/// How long `kernel_ns` (CLOCK_REALTIME) lies before `now_ns`, if it is a
/// receive time at all (0 to [`MAX_READ_LAG`] back).
pub(crate) fn lag_of(kernel_ns: i128, now_ns: i128) -> Option<Duration> {
    let lag = now_ns - kernel_ns;
    (0..=MAX_READ_LAG.as_nanos() as i128)
        .contains(&lag)
        .then(|| Duration::from_nanos(lag as u64))
}

/// The instant the last packet read from `fd` arrived at its socket, and
/// how long it waited there; `None` when the kernel has no usable time
/// for it (the caller keeps the read time).
pub(crate) fn arrival(fd: i32) -> Option<(Instant, Duration)> {
    let kernel = kernel_receive_time(fd).ok()?;
    let (now, now_ns) = (Instant::now(), crate::cells::clock_ns(libc::CLOCK_REALTIME));
    let lag = lag_of(kernel, now_ns)?;
    Some((now.checked_sub(lag)?, lag))
}

/// Packets read late: how many waited in their socket longer than
/// [`ReadLag::LATE`], and the longest wait (µs), over all sockets; and
/// how many were read with a receive time at all, the share's base.
#[derive(Debug, Default)]
pub struct ReadLag {
    pub reads: AtomicU64,
    pub late: AtomicU64,
    /// Every read's wait summed, µs: the mean delay the emulator added.
    pub sum_us: AtomicU64,
    pub max_us: AtomicU64,
}

impl ReadLag {
    /// A packet that waited longer than this was read late: at 20 Mbit/s
    /// a full frame takes 0.6 ms on the link.
    pub const LATE: Duration = Duration::from_millis(1);

    pub(crate) fn record(&self, lag: Duration) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(lag.as_micros() as u64, Ordering::Relaxed);
        if lag > Self::LATE {
            self.late.fetch_add(1, Ordering::Relaxed);
        }
        self.max_us
            .fetch_max(lag.as_micros() as u64, Ordering::Relaxed);
    }
}

/// getsockopt(fd, level, name) into `value`, a plain C struct or integer.
fn get_option<T: Copy>(
    fd: i32,
    level: libc::c_int,
    name: libc::c_int,
    value: &mut T,
) -> std::io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: fd is an open socket; value and len are valid for writing
    // size_of::<T>() bytes, and T is plain data.
    let rc = unsafe { libc::getsockopt(fd, level, name, (value as *mut T).cast(), &mut len) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_time_is_taken_only_from_the_recent_past() {
        let now = 1_800_000_000_000_000_000i128;
        assert_eq!(lag_of(now - 3_000_000, now), Some(Duration::from_millis(3)));
        assert_eq!(lag_of(now, now), Some(Duration::ZERO));
        // Ahead of now, or older than MAX_READ_LAG: not this packet's time.
        assert_eq!(lag_of(now + 1, now), None);
        assert_eq!(lag_of(now - 2_000_000_001, now), None);
        // A monotonic-clock value (seconds since boot) read as realtime.
        assert_eq!(lag_of(40_000_000_000_000, now), None);
    }

    #[test]
    fn read_lag_counts_late_packets_and_keeps_the_longest() {
        let lag = ReadLag::default();
        lag.record(Duration::from_micros(300));
        lag.record(Duration::from_millis(7));
        lag.record(Duration::from_millis(2));
        assert_eq!(lag.reads.load(Ordering::Relaxed), 3);
        assert_eq!(lag.sum_us.load(Ordering::Relaxed), 9300);
        assert_eq!(lag.late.load(Ordering::Relaxed), 2);
        assert_eq!(lag.max_us.load(Ordering::Relaxed), 7000);
    }
}
