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
use std::cell::RefCell;

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
