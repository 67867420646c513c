//! The NETLINK_SOCK_DIAG socket: opening it (in a namespace), dumping,
//! draining an abandoned dump.
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6};
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

use super::wire::{build_request, Dump};
use super::{tcp_state, DiagError, TcpSocket, SENDER_STATES};
/// Receive buffer size. The kernel sizes dump datagrams to at most ~32 KiB
/// (and to the reader's buffer), so this is never expected to truncate.
pub(super) const RECV_BUF_LEN: usize = 64 * 1024;
/// Upper bound the buffer may grow to after a truncated datagram.
pub(super) const RECV_BUF_MAX: usize = 1024 * 1024;
/// A dump reply that does not arrive within this time is an error rather
/// than a hang.
pub(super) const RECV_TIMEOUT: Duration = Duration::from_secs(5);
pub(super) struct DumpState {
    seq: u32,
    buf: Vec<u8>,
    /// A dump was started and not read to its end; drain before the next.
    pub(super) dirty: bool,
}

/// A NETLINK_SOCK_DIAG socket bound to one network namespace.
///
/// `Send + Sync`; concurrent dumps on one socket are serialised.
pub struct DiagSocket {
    sock: Socket,
    pub(super) state: Mutex<DumpState>,
}

impl std::fmt::Debug for DiagSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiagSocket")
            .field("fd", &self.sock.as_raw_fd())
            .finish()
    }
}

impl AsFd for DiagSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// A NETLINK_SOCK_DIAG socket in the calling thread's network namespace.
fn netlink_socket() -> Result<Socket, DiagError> {
    Socket::new(NETLINK_SOCK_DIAG).map_err(|source| DiagError::Socket { source })
}

/// Runs `f` again while it fails with EINTR.
fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

impl DiagSocket {
    /// Socket in the caller's current network namespace.
    pub fn open() -> Result<Self, DiagError> {
        Self::from_socket(netlink_socket()?)
    }

    /// [`DiagSocket::open_in_netns`] for a namespace given by its path, or
    /// [`DiagSocket::open`] in this process's own for `None`.
    pub fn open_at(netns_path: Option<&Path>) -> Result<Self, DiagError> {
        match netns_path {
            None => Self::open(),
            Some(p) => Self::open_in_netns(p),
        }
    }

    /// Socket in the namespace at `netns_path` (e.g. `/run/netns/foo`, or
    /// `/proc/<pid>/ns/net`). The socket stays bound to that namespace for
    /// its life. The calling thread's namespace is left untouched (see the
    /// module docs).
    pub fn open_in_netns(netns_path: &Path) -> Result<Self, DiagError> {
        // Opened here first so that a missing namespace is told apart from
        // one that cannot be entered.
        std::fs::File::open(netns_path).map_err(|source| DiagError::OpenNetns {
            path: netns_path.to_path_buf(),
            source,
        })?;
        let sock = ccctl_sys::netns::run_in(netns_path, netlink_socket).map_err(|e| {
            DiagError::EnterNetns {
                path: e.path,
                source: e.source,
            }
        })??;
        tracing::debug!(netns = %netns_path.display(), "opened sock_diag socket in namespace");
        Self::from_socket(sock)
    }

    fn from_socket(sock: Socket) -> Result<Self, DiagError> {
        rustix::net::sockopt::set_socket_timeout(
            &sock,
            rustix::net::sockopt::Timeout::Recv,
            Some(RECV_TIMEOUT),
        )
        .map_err(|e| DiagError::SockOpt {
            what: "SO_RCVTIMEO",
            source: e.into(),
        })?;
        Ok(DiagSocket {
            sock,
            state: Mutex::new(DumpState {
                seq: 0,
                buf: vec![0u8; RECV_BUF_LEN],
                dirty: false,
            }),
        })
    }

    /// Dumps every IPv4 and IPv6 TCP socket in the states ESTABLISHED, FIN_WAIT1,
    /// FIN_WAIT2, CLOSE_WAIT, LAST_ACK, CLOSING ([`SENDER_STATES`]) with
    /// `tcp_info` and congestion-control name.
    pub fn tcp_sockets(&self) -> Result<Vec<TcpSocket>, DiagError> {
        self.tcp_sockets_in_states(SENDER_STATES)
    }

    /// The local ports of the IPv4 and IPv6 TCP sockets in `LISTEN`.
    pub fn listening_ports(&self) -> Result<Vec<u16>, DiagError> {
        Ok(self
            .tcp_sockets_in_states(tcp_state::bit(tcp_state::LISTEN))?
            .iter()
            .map(|s| s.local.port())
            .collect())
    }

    /// Like [`tcp_sockets`](Self::tcp_sockets) for an arbitrary
    /// `idiag_states` mask (bit `1 << state`, see [`tcp_state::bit`]).
    /// One dump per address family (`AF_INET`, then `AF_INET6`).
    pub fn tcp_sockets_in_states(&self, states: u32) -> Result<Vec<TcpSocket>, DiagError> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all = self.dump_family(&mut st, AF_INET, states)?;
        all.extend(self.dump_family(&mut st, AF_INET6, states)?);
        Ok(all)
    }

    fn dump_family(
        &self,
        st: &mut DumpState,
        family: u8,
        states: u32,
    ) -> Result<Vec<TcpSocket>, DiagError> {
        match self.dump_once(st, family, states) {
            // Another dump on this socket is still in progress (one abandoned
            // without our knowledge, e.g. through a duplicated fd): finish
            // reading it, then ask again once.
            Err(DiagError::Kernel { source }) if source.raw_os_error() == Some(libc::EBUSY) => {
                tracing::debug!("sock_diag dump refused with EBUSY; draining and retrying");
                st.dirty = true;
                self.dump_once(st, family, states)
            }
            r => r,
        }
    }

    /// Receives one datagram into `buf`; returns its full length, which is
    /// larger than `buf` if it was truncated (`MSG_TRUNC`).
    fn recv(&self, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
        retry_eintr(|| {
            let mut window: &mut [u8] = &mut *buf;
            self.sock.recv(&mut window, flags | libc::MSG_TRUNC)
        })
    }

    fn dump_once(
        &self,
        st: &mut DumpState,
        family: u8,
        states: u32,
    ) -> Result<Vec<TcpSocket>, DiagError> {
        if st.dirty {
            self.drain(st);
        }
        st.seq = st.seq.wrapping_add(1);
        let seq = st.seq;
        let req = build_request(seq, family, states);
        self.send(&req)?;
        st.dirty = true;

        let mut out = Vec::new();
        let mut dump = Dump::new(seq, &mut out);
        while !dump.done {
            let cap = st.buf.len();
            let n = self
                .recv(&mut st.buf, 0)
                .map_err(|source| DiagError::Recv { source });
            let n = match n {
                Ok(n) => n,
                // A recorded error (e.g. truncation that swallowed NLMSG_DONE)
                // explains more than the timeout it led to.
                Err(e) => return Err(dump.err.take().unwrap_or(e)),
            };
            if n == 0 {
                return Err(dump.err.take().unwrap_or(DiagError::Recv {
                    source: io::Error::new(io::ErrorKind::UnexpectedEof, "empty datagram"),
                }));
            }
            let got = n.min(cap);
            if n > cap {
                dump.record(DiagError::Truncated { len: n, cap });
            }
            dump.feed(&st.buf[..got]);
            if n > cap && cap < RECV_BUF_MAX {
                let new_len = n.checked_next_power_of_two().unwrap_or(RECV_BUF_MAX);
                st.buf.resize(new_len.min(RECV_BUF_MAX), 0);
            }
        }
        st.dirty = false;
        if dump.interrupted {
            tracing::debug!(
                "sock_diag dump interrupted by concurrent changes; may be inconsistent"
            );
        }
        match dump.err.take() {
            Some(e) => Err(e),
            None => {
                tracing::trace!(sockets = out.len(), "sock_diag dump");
                Ok(out)
            }
        }
    }

    pub(super) fn send(&self, req: &[u8]) -> Result<(), DiagError> {
        // Port 0 is the kernel.
        let kernel = SocketAddr::new(0, 0);
        let sent = retry_eintr(|| self.sock.send_to(req, &kernel, 0))
            .map_err(|source| DiagError::Send { source })?;
        if sent != req.len() {
            return Err(DiagError::Send {
                source: io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("sent {sent} of {} bytes", req.len()),
                ),
            });
        }
        Ok(())
    }

    /// Discards whatever an earlier, abandoned dump left queued. Reading
    /// also lets the kernel finish that dump, so a new one is not refused
    /// with EBUSY.
    pub(super) fn drain(&self, st: &mut DumpState) {
        let mut discarded = 0usize;
        for _ in 0..100_000 {
            match self.recv(&mut st.buf, libc::MSG_DONTWAIT) {
                Ok(0) | Err(_) => break,
                Ok(_) => discarded += 1,
            }
        }
        tracing::debug!(datagrams = discarded, "sock_diag: drained abandoned dump");
        st.dirty = false;
    }
}
