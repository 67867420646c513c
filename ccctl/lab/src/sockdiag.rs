//! Socket sampling: per-socket TCP state through `NETLINK_SOCK_DIAG`
//! (inet_diag), the interface `ss` itself uses, without forking `ss`. The
//! one place ccctl looks at sockets: the lab's flow sampling, the wait for
//! iperf3 servers to listen, and the tests' checks of which congestion
//! control a socket runs.
//!
//! # What it does
//!
//! [`DiagSocket::tcp_sockets`] sends a `SOCK_DIAG_BY_FAMILY` dump request
//! (`inet_diag_req_v2`, protocol `IPPROTO_TCP`) per family, `AF_INET` then
//! `AF_INET6`, for the
//! sockets that may still send data — `ESTABLISHED`, `FIN_WAIT1`,
//! `FIN_WAIT2`, `CLOSE_WAIT`, `LAST_ACK`, `CLOSING` — asking for the
//! `INET_DIAG_INFO` (`struct tcp_info`) and `INET_DIAG_CONG` (congestion
//! control name) attributes. It reads the multipart reply until
//! `NLMSG_DONE` and returns one [`TcpSocket`] per kernel socket. One dump
//! costs a handful of syscalls, so the two are cheap enough to run every 100 ms.
//! [`DiagSocket::listening_ports`] dumps the `LISTEN` sockets instead, and
//! [`Sampler`] dumps on a fixed period in a thread of its own.
//!
//! IPv4 and IPv6 sockets are both reported (the lab runs flows over either).
//! A socket created as `AF_INET6` and carrying IPv4-mapped addresses (e.g.
//! one accepted by a dual-stack listener on `::`) is reported with the IPv4
//! addresses it talks on, as the per-ACK trace shows it.
//!
//! # What comes from crates, what is ours
//!
//! The socket is `netlink_sys::Socket`; the request is built by
//! `netlink-packet-sock-diag` (`InetRequest`) and framed by
//! `netlink-packet-core` (`NetlinkMessage`); replies are split with
//! `NetlinkBuffer`, `DoneBuffer`, `ErrorBuffer`, `InetResponseHeader` and
//! `NlasIterator`. Two things stay ours, for tolerance:
//!
//! - `struct tcp_info`: the crate reads it as one fixed layout (with
//!   `rich_nlas`, a packed 232-byte `TcpInfoBuffer` ending at `snd_wnd`,
//!   Linux 5.4's size: a shorter blob from an older kernel fails the whole
//!   attribute, and fields appended since — 6.18 sends 280 bytes — cannot
//!   be reached). Without `rich_nlas` it hands over the bytes, which
//!   [`parse_tcp_info`] reads at any length (below).
//! - The attributes: the crate's `InetResponse::parse` decodes every
//!   attribute strictly (its `MemInfo` notes fields missing on old kernels)
//!   and fails the whole socket on one it cannot read. We walk the
//!   attributes with `NlasIterator` and decode only `INET_DIAG_INFO` and
//!   `INET_DIAG_CONG`, so an attribute we do not use cannot lose a socket.
//!
//! # Network namespaces
//!
//! A netlink socket answers for the network namespace it was created in,
//! for its whole life, whichever namespace the thread using it is in later.
//! [`DiagSocket::open_in_netns`] creates the socket through
//! [`ccctl_sys::netns::run_in`] (a short-lived helper thread enters the
//! namespace, creates the socket and exits); the calling thread's namespace
//! is never touched, and the resulting [`DiagSocket`] can be used from any
//! thread afterwards.
//!
//! # `struct tcp_info` fields and units
//!
//! [`parse_tcp_info`] reads `struct tcp_info` (`linux/tcp.h`) by fixed byte
//! offsets in host byte order. The kernel sends its own
//! `sizeof(struct tcp_info)` (232 bytes on 6.1, 280 on 6.18: fields get
//! appended), so every field that lies beyond the length actually received is
//! reported as `None`. The first 104 bytes (up to and including
//! `tcpi_total_retrans`, present since Linux 2.6) are required
//! ([`TCP_INFO_MIN_LEN`]); shorter blobs are rejected.
//!
//! | offset | size | `tcp_info` field                  | [`TcpInfo`] field           | unit      | since |
//! |-------:|-----:|-----------------------------------|-----------------------------|-----------|-------|
//! |      1 |    1 | `tcpi_ca_state`                   | `ca_state`                  | enum      | 2.6   |
//! |      2 |    1 | `tcpi_retransmits`                | `retransmits`               | count     | 2.6   |
//! |      7 |    1 | `tcpi_delivery_rate_app_limited:1`| `delivery_rate_app_limited` | bit 0 (LE)| 4.9   |
//! |      8 |    4 | `tcpi_rto`                        | `rto_us`                    | µs        | 2.6   |
//! |     16 |    4 | `tcpi_snd_mss`                    | `snd_mss`                   | bytes     | 2.6   |
//! |     24 |    4 | `tcpi_unacked`                    | `unacked`                   | segments  | 2.6   |
//! |     28 |    4 | `tcpi_sacked`                     | `sacked`                    | segments  | 2.6   |
//! |     32 |    4 | `tcpi_lost`                       | `lost`                      | segments  | 2.6   |
//! |     36 |    4 | `tcpi_retrans`                    | `retrans`                   | segments  | 2.6   |
//! |     68 |    4 | `tcpi_rtt`                        | `rtt_us`                    | µs (srtt) | 2.6   |
//! |     72 |    4 | `tcpi_rttvar`                     | `rttvar_us`                 | µs        | 2.6   |
//! |     76 |    4 | `tcpi_snd_ssthresh`               | `snd_ssthresh`              | segments  | 2.6   |
//! |     80 |    4 | `tcpi_snd_cwnd`                   | `snd_cwnd`                  | segments  | 2.6   |
//! |    100 |    4 | `tcpi_total_retrans`              | `total_retrans`             | segments  | 2.6   |
//! |    104 |    8 | `tcpi_pacing_rate`                | `pacing_rate`               | bytes/s   | 3.15  |
//! |    120 |    8 | `tcpi_bytes_acked`                | `bytes_acked`               | bytes     | 4.1   |
//! |    128 |    8 | `tcpi_bytes_received`             | `bytes_received`            | bytes     | 4.1   |
//! |    136 |    4 | `tcpi_segs_out`                   | `segs_out`                  | segments  | 4.2   |
//! |    140 |    4 | `tcpi_segs_in`                    | `segs_in`                   | segments  | 4.2   |
//! |    144 |    4 | `tcpi_notsent_bytes`              | `notsent_bytes`             | bytes     | 4.6   |
//! |    148 |    4 | `tcpi_min_rtt`                    | `min_rtt_us`                | µs        | 4.6   |
//! |    156 |    4 | `tcpi_data_segs_out`              | `data_segs_out`             | segments  | 4.6   |
//! |    160 |    8 | `tcpi_delivery_rate`              | `delivery_rate`             | bytes/s   | 4.9   |
//! |    192 |    4 | `tcpi_delivered`                  | `delivered`                 | segments  | 4.18  |
//! |    200 |    8 | `tcpi_bytes_sent`                 | `bytes_sent`                | bytes     | 4.19  |
//! |    208 |    8 | `tcpi_bytes_retrans`              | `bytes_retrans`             | bytes     | 4.19  |
//!
//! `pacing_rate` is `u64::MAX` when pacing is unlimited and is kept as is.
//! `snd_cwnd`/`snd_ssthresh` are in segments (multiply by `snd_mss` for
//! bytes); an ssthresh of `0x7fff_ffff` means "infinite" (still slow start).
//!
//! # Robustness
//!
//! Nothing received from the kernel is trusted: every length is checked,
//! malformed messages become [`DiagError::Parse`], and a reply is always
//! read to its end (`NLMSG_DONE`/`NLMSG_ERROR`) even after an error, so the
//! next dump starts clean. Replies carrying another sequence number (left
//! over from an aborted dump) are ignored.

use std::io;
use std::net::{IpAddr, SocketAddr as IpSocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netlink_packet_core::{
    DoneBuffer, ErrorBuffer, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NlasIterator, Parseable, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::{
    constants::{AF_INET, AF_INET6, INET_DIAG_CONG, INET_DIAG_INFO, IPPROTO_TCP},
    inet::{ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags},
    SockDiagMessage, SOCK_DIAG_BY_FAMILY,
};
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};

/// TCP states as used in [`TcpSocket::state`] (`include/net/tcp_states.h`).
pub mod tcp_state {
    pub const ESTABLISHED: u8 = 1;
    pub const SYN_SENT: u8 = 2;
    pub const SYN_RECV: u8 = 3;
    pub const FIN_WAIT1: u8 = 4;
    pub const FIN_WAIT2: u8 = 5;
    pub const TIME_WAIT: u8 = 6;
    pub const CLOSE: u8 = 7;
    pub const CLOSE_WAIT: u8 = 8;
    pub const LAST_ACK: u8 = 9;
    pub const LISTEN: u8 = 10;
    pub const CLOSING: u8 = 11;
    pub const NEW_SYN_RECV: u8 = 12;

    /// The name `ss` prints for a state (`ESTAB`, `FIN-WAIT-1`, …).
    pub fn name(state: u8) -> &'static str {
        match state {
            ESTABLISHED => "ESTAB",
            SYN_SENT => "SYN-SENT",
            SYN_RECV => "SYN-RECV",
            FIN_WAIT1 => "FIN-WAIT-1",
            FIN_WAIT2 => "FIN-WAIT-2",
            TIME_WAIT => "TIME-WAIT",
            CLOSE => "UNCONN",
            CLOSE_WAIT => "CLOSE-WAIT",
            LAST_ACK => "LAST-ACK",
            LISTEN => "LISTEN",
            CLOSING => "CLOSING",
            NEW_SYN_RECV => "NEW-SYN-RECV",
            _ => "UNKNOWN",
        }
    }

    /// Bit of `state` in an `idiag_states` mask.
    pub const fn bit(state: u8) -> u32 {
        1u32 << (state as u32 & 31)
    }
}

/// `idiag_states` mask used by [`DiagSocket::tcp_sockets`]: the states in
/// which a connection may still send (ESTABLISHED, FIN_WAIT1, FIN_WAIT2,
/// CLOSE_WAIT, LAST_ACK, CLOSING).
pub const SENDER_STATES: u32 = tcp_state::bit(tcp_state::ESTABLISHED)
    | tcp_state::bit(tcp_state::FIN_WAIT1)
    | tcp_state::bit(tcp_state::FIN_WAIT2)
    | tcp_state::bit(tcp_state::CLOSE_WAIT)
    | tcp_state::bit(tcp_state::LAST_ACK)
    | tcp_state::bit(tcp_state::CLOSING);

/// Shortest `struct tcp_info` blob [`parse_tcp_info`] accepts: everything up
/// to and including `tcpi_total_retrans` (offset 100, 4 bytes).
pub const TCP_INFO_MIN_LEN: usize = 104;

/// `sizeof(struct inet_diag_msg)`: the fixed part of every reply, before
/// its attributes.
const INET_DIAG_MSG_LEN: usize = 72;

/// Receive buffer size. The kernel sizes dump datagrams to at most ~32 KiB
/// (and to the reader's buffer), so this is never expected to truncate.
const RECV_BUF_LEN: usize = 64 * 1024;
/// Upper bound the buffer may grow to after a truncated datagram.
const RECV_BUF_MAX: usize = 1024 * 1024;
/// A dump reply that does not arrive within this time is an error rather
/// than a hang.
const RECV_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors from opening a [`DiagSocket`] or dumping sockets through it.
#[derive(Debug, thiserror::Error)]
pub enum DiagError {
    #[error("opening network namespace {}: {source}", .path.display())]
    OpenNetns {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("entering network namespace {} (setns CLONE_NEWNET): {source}", .path.display())]
    EnterNetns {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("starting the socket sampler thread: {source}")]
    Sampler {
        #[source]
        source: io::Error,
    },
    #[error("creating NETLINK_SOCK_DIAG socket: {source}")]
    Socket {
        #[source]
        source: io::Error,
    },
    #[error("configuring NETLINK_SOCK_DIAG socket ({what}): {source}")]
    SockOpt {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("sending sock_diag dump request: {source}")]
    Send {
        #[source]
        source: io::Error,
    },
    #[error("receiving sock_diag dump reply: {source}")]
    Recv {
        #[source]
        source: io::Error,
    },
    /// The kernel answered the request with `NLMSG_ERROR` (negative errno).
    #[error("kernel rejected sock_diag dump request: {source}")]
    Kernel {
        #[source]
        source: io::Error,
    },
    #[error("sock_diag reply datagram truncated: {len} bytes, receive buffer {cap} bytes")]
    Truncated { len: usize, cap: usize },
    #[error("malformed sock_diag reply: {detail}")]
    Parse { detail: String },
}

fn parse_err(detail: impl Into<String>) -> DiagError {
    DiagError::Parse {
        detail: detail.into(),
    }
}

/// One TCP socket as reported by inet_diag.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpSocket {
    pub local: IpSocketAddr,
    pub remote: IpSocketAddr,
    /// `tcp_state::ESTABLISHED` (1), …
    pub state: u8,
    /// inet_diag socket cookie: unique per socket for the life of the
    /// kernel (not reused), so a stable identifier across samples.
    pub cookie: u64,
    /// Congestion control name from `INET_DIAG_CONG`.
    pub cc: Option<String>,
    /// `struct tcp_info` from `INET_DIAG_INFO`.
    pub info: Option<TcpInfo>,
}

/// The `struct tcp_info` fields the lab uses; see the module docs for
/// offsets and units. `Option` fields are `None` when the kernel's
/// `tcp_info` is too short to contain them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TcpInfo {
    pub ca_state: u8,
    pub retransmits: u8,
    pub delivery_rate_app_limited: bool,
    pub rto_us: u32,
    pub snd_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub total_retrans: u32,
    /// bytes/s as the kernel reports it; `u64::MAX` = unlimited.
    pub pacing_rate: Option<u64>,
    pub bytes_acked: Option<u64>,
    pub bytes_received: Option<u64>,
    pub segs_out: Option<u32>,
    /// Segments received (for a sender: ACKs).
    pub segs_in: Option<u32>,
    pub notsent_bytes: Option<u32>,
    pub min_rtt_us: Option<u32>,
    pub data_segs_out: Option<u32>,
    /// bytes/s
    pub delivery_rate: Option<u64>,
    pub delivered: Option<u32>,
    pub bytes_sent: Option<u64>,
    pub bytes_retrans: Option<u64>,
}

fn u32_ne(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_ne(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(8)?)?;
    Some(u64::from_ne_bytes([
        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
    ]))
}

/// Rounds up to the 4-byte netlink alignment (NLMSG_ALIGN / RTA_ALIGN).
fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

/// Parses one `struct tcp_info` blob of any length.
///
/// Returns `None` if `b` is shorter than [`TCP_INFO_MIN_LEN`] (104 bytes,
/// through `tcpi_total_retrans`). The non-`Option` fields all lie in that
/// prefix; each `Option` field is `Some` only if `b` covers it completely.
pub fn parse_tcp_info(b: &[u8]) -> Option<TcpInfo> {
    if b.len() < TCP_INFO_MIN_LEN {
        return None;
    }
    let byte = |off: usize| b.get(off).copied().unwrap_or(0);
    let u32p = |off: usize| u32_ne(b, off).unwrap_or(0);
    // `__u8 tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2;`
    // The first bitfield member is the least significant bit on
    // little-endian ABIs and the most significant one on big-endian ABIs.
    let app_limited_mask = if cfg!(target_endian = "little") {
        0x01
    } else {
        0x80
    };
    Some(TcpInfo {
        ca_state: byte(1),
        retransmits: byte(2),
        delivery_rate_app_limited: byte(7) & app_limited_mask != 0,
        rto_us: u32p(8),
        snd_mss: u32p(16),
        unacked: u32p(24),
        sacked: u32p(28),
        lost: u32p(32),
        retrans: u32p(36),
        rtt_us: u32p(68),
        rttvar_us: u32p(72),
        snd_ssthresh: u32p(76),
        snd_cwnd: u32p(80),
        total_retrans: u32p(100),
        pacing_rate: u64_ne(b, 104),
        bytes_acked: u64_ne(b, 120),
        bytes_received: u64_ne(b, 128),
        segs_out: u32_ne(b, 136),
        segs_in: u32_ne(b, 140),
        notsent_bytes: u32_ne(b, 144),
        min_rtt_us: u32_ne(b, 148),
        data_segs_out: u32_ne(b, 156),
        delivery_rate: u64_ne(b, 160),
        delivered: u32_ne(b, 192),
        bytes_sent: u64_ne(b, 200),
        bytes_retrans: u64_ne(b, 208),
    })
}

/// Builds `nlmsghdr` + `inet_diag_req_v2` for a dump of `family` TCP sockets
/// in `states`, requesting INET_DIAG_INFO and INET_DIAG_CONG.
fn build_request(seq: u32, family: u8, states: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = seq;
    let request = InetRequest {
        family,
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::INFO | ExtensionFlags::CONG,
        // Retained as given: the crate's flags have no NEW_SYN_RECV bit.
        states: StateFlags::from_bits_retain(states),
        // All zero: no filter (cookie 0 = none).
        socket_id: SocketId::new_v4(),
    };
    let mut msg = NetlinkMessage::new(
        header,
        NetlinkPayload::InnerMessage(SockDiagMessage::InetRequest(request)),
    );
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// Parses the payload of one `SOCK_DIAG_BY_FAMILY` reply message:
/// `struct inet_diag_msg` followed by attributes. Returns `Ok(None)` for a
/// socket of another address family.
fn parse_inet_diag_msg(p: &[u8]) -> Result<Option<TcpSocket>, DiagError> {
    if p.len() < INET_DIAG_MSG_LEN {
        return Err(parse_err(format!(
            "inet_diag_msg payload of {} bytes, expected at least {INET_DIAG_MSG_LEN}",
            p.len()
        )));
    }
    let family = p[0];
    if family != AF_INET && family != AF_INET6 {
        tracing::trace!(family, "sock_diag: skipping socket of another family");
        return Ok(None);
    }
    let h = InetResponseHeader::parse(&p[..INET_DIAG_MSG_LEN])
        .map_err(|e| parse_err(format!("inet_diag_msg: {e}")))?;
    let id = &h.socket_id;
    // An IPv6 socket talking IPv4 (::ffff:a.b.c.d) as the IPv4 it talks.
    let (src, dst) = match (family, id.source_address, id.destination_address) {
        (AF_INET, s @ IpAddr::V4(_), d @ IpAddr::V4(_)) => (s, d),
        (AF_INET6, IpAddr::V6(s), IpAddr::V6(d)) => (s.to_canonical(), d.to_canonical()),
        _ => {
            return Err(parse_err(
                "socket addresses of another family than the socket's",
            ))
        }
    };
    // `__u32 idiag_cookie[2]`, each in host order, low word first.
    let c = id.cookie;
    let cookie_lo = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
    let cookie_hi = u32::from_ne_bytes([c[4], c[5], c[6], c[7]]);
    let mut sock = TcpSocket {
        local: IpSocketAddr::new(src, id.source_port),
        remote: IpSocketAddr::new(dst, id.destination_port),
        state: h.state,
        cookie: u64::from(cookie_hi) << 32 | u64::from(cookie_lo),
        cc: None,
        info: None,
    };

    for attr in NlasIterator::new(&p[INET_DIAG_MSG_LEN..]) {
        let attr = attr.map_err(|e| parse_err(format!("inet_diag attribute: {e}")))?;
        let data = attr.value();
        match attr.kind() {
            INET_DIAG_INFO => {
                sock.info = parse_tcp_info(data);
                if sock.info.is_none() {
                    tracing::debug!(
                        len = data.len(),
                        "sock_diag: INET_DIAG_INFO shorter than {TCP_INFO_MIN_LEN} bytes, ignored"
                    );
                }
            }
            INET_DIAG_CONG => {
                // A NUL-terminated name; a non-UTF-8 one is shown lossily
                // rather than losing the socket.
                let name = data.split(|&c| c == 0).next().unwrap_or(&[]);
                if !name.is_empty() {
                    sock.cc = Some(String::from_utf8_lossy(name).into_owned());
                }
            }
            _ => {}
        }
    }
    Ok(Some(sock))
}

/// Accumulates the result of one dump across reply datagrams.
struct Dump<'a> {
    seq: u32,
    out: &'a mut Vec<TcpSocket>,
    /// First error seen; the reply is still read to its end.
    err: Option<DiagError>,
    /// `NLMSG_DONE` or `NLMSG_ERROR` for our sequence number seen.
    done: bool,
    interrupted: bool,
}

impl<'a> Dump<'a> {
    fn new(seq: u32, out: &'a mut Vec<TcpSocket>) -> Self {
        Dump {
            seq,
            out,
            err: None,
            done: false,
            interrupted: false,
        }
    }

    fn record(&mut self, e: DiagError) {
        if self.err.is_none() {
            self.err = Some(e);
        }
    }

    /// Walks the netlink messages of one received datagram.
    fn feed(&mut self, mut d: &[u8]) {
        while !d.is_empty() && !self.done {
            let msg = match NetlinkBuffer::new_checked(d) {
                Ok(m) => m,
                Err(e) => {
                    self.record(parse_err(format!(
                        "netlink message in a datagram of {} bytes: {e}",
                        d.len()
                    )));
                    return;
                }
            };
            let (len, typ, flags, seq) = (
                msg.length() as usize,
                msg.message_type(),
                msg.flags(),
                msg.sequence_number(),
            );
            let payload = msg.payload();
            d = d.get(align4(len)..).unwrap_or(&[]);

            if seq != self.seq {
                tracing::trace!(
                    seq,
                    want = self.seq,
                    typ,
                    "sock_diag: skipping stale message"
                );
                continue;
            }
            if flags & NLM_F_DUMP_INTR != 0 {
                self.interrupted = true;
            }
            match typ {
                NLMSG_NOOP => {}
                NLMSG_DONE => {
                    self.done = true;
                    // Payload is an int: 0, or a negative errno if the dump
                    // failed part-way.
                    if let Ok(done) = DoneBuffer::new_checked(payload) {
                        if done.code() < 0 {
                            self.record(DiagError::Kernel {
                                source: io::Error::from_raw_os_error(done.code().saturating_neg()),
                            });
                        }
                    }
                }
                NLMSG_ERROR => match ErrorBuffer::new_checked(payload).map(|e| e.code()) {
                    Ok(None) => {} // an ACK; not requested, harmless
                    Ok(Some(errno)) => {
                        self.done = true;
                        self.record(DiagError::Kernel {
                            source: io::Error::from_raw_os_error(errno.get().saturating_neg()),
                        });
                    }
                    Err(_) => {
                        self.done = true;
                        self.record(parse_err("NLMSG_ERROR without an error code"));
                    }
                },
                NLMSG_OVERRUN => {
                    self.record(parse_err("NLMSG_OVERRUN: data lost"));
                }
                SOCK_DIAG_BY_FAMILY => match parse_inet_diag_msg(payload) {
                    Ok(Some(s)) => self.out.push(s),
                    Ok(None) => {}
                    Err(e) => self.record(e),
                },
                other => {
                    tracing::trace!(typ = other, "sock_diag: ignoring unexpected message type");
                }
            }
        }
    }
}

struct DumpState {
    seq: u32,
    buf: Vec<u8>,
    /// A dump was started and not read to its end; drain before the next.
    dirty: bool,
}

/// A NETLINK_SOCK_DIAG socket bound to one network namespace.
///
/// `Send + Sync`; concurrent dumps on one socket are serialised.
pub struct DiagSocket {
    sock: Socket,
    state: Mutex<DumpState>,
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

    fn send(&self, req: &[u8]) -> Result<(), DiagError> {
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
    fn drain(&self, st: &mut DumpState) {
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

/// One reading of one socket's `tcp_info`: the lab's record of a socket
/// over time (a flow's samples, a [`Sampler`]'s).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// Seconds since sampling started.
    pub t: f64,
    pub info: TcpInfo,
}

/// Everything a [`Sampler`] saw of one socket (one inet_diag cookie).
#[derive(Debug, Clone, PartialEq)]
pub struct SocketTrack {
    pub local: IpSocketAddr,
    pub remote: IpSocketAddr,
    pub cookie: u64,
    /// Congestion-control names in the order they were reported
    /// (`INET_DIAG_CONG`), repeats in a row collapsed: `["bpf_bbr"]` for a
    /// socket that ran bpf_bbr throughout.
    pub cc: Vec<String>,
    /// The readings that carried a `tcp_info`.
    pub samples: Vec<Sample>,
}

/// What a [`Sampler`] collected.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    /// In the order the sockets were first seen.
    pub sockets: Vec<SocketTrack>,
    /// Dumps attempted.
    pub ticks: u64,
    /// Dumps that failed, and the last error seen.
    pub failures: u64,
    pub last_error: Option<String>,
}

impl Samples {
    /// The sockets whose local port is `port` (e.g.
    /// `FlowResult::local_port`, to keep only an iperf3 data connection).
    pub fn for_local_port(&self, port: u16) -> impl Iterator<Item = &SocketTrack> {
        self.sockets.iter().filter(move |s| s.local.port() == port)
    }

    /// The sockets whose peer port is `port` (data and control connections
    /// of an iperf3 flow both match).
    pub fn for_peer_port(&self, port: u16) -> impl Iterator<Item = &SocketTrack> {
        self.sockets.iter().filter(move |s| s.remote.port() == port)
    }

    fn add(&mut self, t: f64, sock: TcpSocket) {
        let i = match self.sockets.iter().position(|s| s.cookie == sock.cookie) {
            Some(i) => i,
            None => {
                self.sockets.push(SocketTrack {
                    local: sock.local,
                    remote: sock.remote,
                    cookie: sock.cookie,
                    cc: Vec::new(),
                    samples: Vec::new(),
                });
                self.sockets.len() - 1
            }
        };
        let track = &mut self.sockets[i];
        if let Some(cc) = sock.cc {
            if track.cc.last() != Some(&cc) {
                track.cc.push(cc);
            }
        }
        if let Some(info) = sock.info {
            track.samples.push(Sample { t, info });
        }
    }
}

/// [`Sampler`] options.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Sampling period (default 100 ms). Ticks on a fixed schedule; a tick
    /// that overruns skips the missed ones.
    pub interval: Duration,
    /// `idiag_states` mask of the sockets to sample (default
    /// [`SENDER_STATES`]).
    pub states: u32,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            interval: Duration::from_millis(100),
            states: SENDER_STATES,
        }
    }
}

/// Samples every TCP socket of one network namespace on a fixed period,
/// in a thread of its own; [`Sampler::stop`] returns what it saw. Dropping
/// it without `stop` stops the thread too.
#[derive(Debug)]
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<Samples>>,
}

impl Sampler {
    /// Starts sampling in the namespace at `netns_path` (e.g.
    /// `ccctl_sys::netns::named(&tb.ns(role))`). The socket is opened and
    /// dumped once before this returns, so a missing namespace fails here
    /// rather than silently.
    pub fn start(netns_path: &Path, cfg: SamplerConfig) -> Result<Self, DiagError> {
        let diag = DiagSocket::open_in_netns(netns_path)?;
        diag.tcp_sockets_in_states(cfg.states)?;
        let interval = cfg.interval.max(Duration::from_millis(1));
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("sockdiag-sampler".into())
            .spawn(move || {
                let mut s = Samples::default();
                let t0 = Instant::now();
                let mut k: u32 = 0;
                loop {
                    let t = t0.elapsed().as_secs_f64();
                    s.ticks += 1;
                    match diag.tcp_sockets_in_states(cfg.states) {
                        Ok(socks) => socks.into_iter().for_each(|sock| s.add(t, sock)),
                        Err(e) => {
                            s.failures += 1;
                            s.last_error = Some(e.to_string());
                        }
                    }
                    // Next tick on the fixed schedule, skipping missed ones.
                    let el = t0.elapsed();
                    k = k.max((el.as_nanos() / interval.as_nanos()) as u32) + 1;
                    let wait = (interval * k).saturating_sub(t0.elapsed());
                    match stopped.recv_timeout(wait) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return s,
                    }
                }
            })
            .map_err(|source| DiagError::Sampler { source })?;
        Ok(Sampler {
            stop: Some(stop),
            handle: Some(handle),
        })
    }

    /// Stops the thread and returns everything sampled.
    pub fn stop(mut self) -> Samples {
        self.finish().unwrap_or_default()
    }

    fn finish(&mut self) -> Option<Samples> {
        drop(self.stop.take());
        let h = self.handle.take()?;
        Some(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener, TcpStream};
    use std::process::{Child, Command, Stdio};
    use std::time::Instant;

    /// `sizeof(struct nlmsghdr)`, `sizeof(struct rtattr)`.
    const NLMSG_HDRLEN: usize = 16;
    const RTA_HDRLEN: usize = 4;

    fn u16_ne(b: &[u8], off: usize) -> Option<u16> {
        let s = b.get(off..off.checked_add(2)?)?;
        Some(u16::from_ne_bytes([s[0], s[1]]))
    }

    fn put32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn put64(b: &mut [u8], off: usize, v: u64) {
        b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }

    /// A 232-byte tcp_info (the Linux 6.1 size) with distinct values.
    fn sample_tcp_info() -> Vec<u8> {
        let mut b = vec![0u8; 232];
        b[0] = 1; // state
        b[1] = 4; // ca_state = TCP_CA_Loss
        b[2] = 3; // retransmits
        b[7] = if cfg!(target_endian = "little") {
            0x01
        } else {
            0x80
        }; // app_limited
        put32(&mut b, 8, 204_000); // rto
        put32(&mut b, 12, 40_000); // ato (not parsed)
        put32(&mut b, 16, 1448); // snd_mss
        put32(&mut b, 24, 10); // unacked
        put32(&mut b, 28, 2); // sacked
        put32(&mut b, 32, 1); // lost
        put32(&mut b, 36, 5); // retrans
        put32(&mut b, 64, 64_000); // rcv_ssthresh (neighbour of rtt)
        put32(&mut b, 68, 12_345); // rtt
        put32(&mut b, 72, 678); // rttvar
        put32(&mut b, 76, 0x7fff_ffff); // snd_ssthresh
        put32(&mut b, 80, 42); // snd_cwnd
        put32(&mut b, 84, 65_483); // advmss (neighbour of cwnd)
        put32(&mut b, 100, 77); // total_retrans
        put64(&mut b, 104, u64::MAX); // pacing_rate
        put64(&mut b, 112, 9); // max_pacing_rate (not parsed)
        put64(&mut b, 120, 1_000_000_007); // bytes_acked
        put64(&mut b, 128, 3_000); // bytes_received
        put32(&mut b, 136, 900); // segs_out
        put32(&mut b, 140, 800); // segs_in
        put32(&mut b, 144, 4096); // notsent_bytes
        put32(&mut b, 148, 11_000); // min_rtt
        put32(&mut b, 152, 7); // data_segs_in
        put32(&mut b, 156, 880); // data_segs_out
        put64(&mut b, 160, 125_000_000); // delivery_rate
        put64(&mut b, 168, 99); // busy_time
        put32(&mut b, 192, 870); // delivered
        put32(&mut b, 196, 3); // delivered_ce
        put64(&mut b, 200, 1_300_000_000); // bytes_sent
        put64(&mut b, 208, 7_240); // bytes_retrans
        put32(&mut b, 216, 1); // dsack_dups
        b
    }

    #[test]
    fn parses_full_tcp_info() {
        let i = parse_tcp_info(&sample_tcp_info()).expect("232 bytes parse");
        assert_eq!(
            i,
            TcpInfo {
                ca_state: 4,
                retransmits: 3,
                delivery_rate_app_limited: true,
                rto_us: 204_000,
                snd_mss: 1448,
                unacked: 10,
                sacked: 2,
                lost: 1,
                retrans: 5,
                rtt_us: 12_345,
                rttvar_us: 678,
                snd_ssthresh: 0x7fff_ffff,
                snd_cwnd: 42,
                total_retrans: 77,
                pacing_rate: Some(u64::MAX),
                bytes_acked: Some(1_000_000_007),
                bytes_received: Some(3_000),
                segs_out: Some(900),
                segs_in: Some(800),
                notsent_bytes: Some(4096),
                min_rtt_us: Some(11_000),
                data_segs_out: Some(880),
                delivery_rate: Some(125_000_000),
                delivered: Some(870),
                bytes_sent: Some(1_300_000_000),
                bytes_retrans: Some(7_240),
            }
        );
        // Longer blobs (newer kernels append fields) parse the same.
        let mut longer = sample_tcp_info();
        longer.resize(320, 0xee);
        assert_eq!(parse_tcp_info(&longer), Some(i));
    }

    #[test]
    fn app_limited_is_only_the_first_bit() {
        let mut b = sample_tcp_info();
        // tcpi_fastopen_client_fail (next two bits) set, app_limited clear.
        b[7] = if cfg!(target_endian = "little") {
            0x06
        } else {
            0x60
        };
        assert!(!parse_tcp_info(&b)
            .map(|i| i.delivery_rate_app_limited)
            .unwrap_or(true));
    }

    #[test]
    fn short_tcp_info_from_old_kernels() {
        let full = sample_tcp_info();
        assert_eq!(parse_tcp_info(&full[..TCP_INFO_MIN_LEN - 1]), None);
        assert_eq!(parse_tcp_info(&[]), None);

        // Linux 2.6-3.14: only the fixed prefix.
        let i = parse_tcp_info(&full[..TCP_INFO_MIN_LEN]).expect("prefix parses");
        assert_eq!((i.snd_cwnd, i.rtt_us, i.total_retrans), (42, 12_345, 77));
        assert_eq!(i.pacing_rate, None);
        assert_eq!(i.bytes_acked, None);
        assert_eq!(i.bytes_retrans, None);

        // Linux 4.6-4.8 (160 bytes, through data_segs_out).
        let i = parse_tcp_info(&full[..160]).expect("parses");
        assert_eq!(i.pacing_rate, Some(u64::MAX));
        assert_eq!(i.bytes_acked, Some(1_000_000_007));
        assert_eq!(i.min_rtt_us, Some(11_000));
        assert_eq!(i.data_segs_out, Some(880));
        assert_eq!(i.delivery_rate, None);
        assert_eq!(i.delivered, None);
        assert_eq!(i.bytes_sent, None);

        // A field cut in half is absent, not half-read.
        let i = parse_tcp_info(&full[..124]).expect("parses");
        assert_eq!(i.pacing_rate, Some(u64::MAX));
        assert_eq!(i.bytes_acked, None);

        // Linux 4.18 (through delivered_ce, 200 bytes).
        let i = parse_tcp_info(&full[..200]).expect("parses");
        assert_eq!(i.delivered, Some(870));
        assert_eq!(i.bytes_sent, None);
        assert_eq!(i.bytes_retrans, None);
    }

    #[test]
    fn request_layout() {
        let r = build_request(7, libc::AF_INET as u8, SENDER_STATES);
        assert_eq!(r.len(), 72);
        assert_eq!(u32_ne(&r, 0), Some(72));
        assert_eq!(u16_ne(&r, 4), Some(20));
        assert_eq!(u16_ne(&r, 6), Some(0x301));
        assert_eq!(u32_ne(&r, 8), Some(7));
        assert_eq!(&r[16..19], &[2, 6, 0b1010]);
        assert_eq!(u32_ne(&r, 20), Some(0b1011_0011_0010));
        assert!(r[24..].iter().all(|&b| b == 0));
    }

    // --- synthetic netlink replies ---------------------------------------

    fn nlmsg(typ: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&typ.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&4242u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m.resize(align4(m.len()), 0);
        m
    }

    fn rta(typ: u16, data: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((RTA_HDRLEN + data.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&typ.to_ne_bytes());
        a.extend_from_slice(data);
        a.resize(align4(a.len()), 0);
        a
    }

    fn diag_msg(family: u8, state: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![0u8; INET_DIAG_MSG_LEN];
        p[0] = family;
        p[1] = state;
        p[4..6].copy_from_slice(&40000u16.to_be_bytes());
        p[6..8].copy_from_slice(&5201u16.to_be_bytes());
        p[8..12].copy_from_slice(&[10, 0, 0, 1]);
        p[24..28].copy_from_slice(&[10, 0, 0, 2]);
        put32(&mut p, 44, 0xdead_beef);
        put32(&mut p, 48, 0x12);
        put32(&mut p, 68, 987_654); // inode
        for a in attrs {
            p.extend_from_slice(a);
        }
        p
    }

    #[test]
    fn parses_reply_datagram() {
        let info = sample_tcp_info();
        let msg = diag_msg(
            libc::AF_INET as u8,
            tcp_state::ESTABLISHED,
            &[
                rta(1, &[0; 20]),
                rta(INET_DIAG_CONG, b"bbr\0"),
                rta(INET_DIAG_INFO, &info),
            ],
        );
        let mut d = nlmsg(SOCK_DIAG_BY_FAMILY, 2, 9, &msg);
        d.extend(nlmsg(SOCK_DIAG_BY_FAMILY, 2, 8, &msg)); // stale seq: skipped
        d.extend(nlmsg(
            SOCK_DIAG_BY_FAMILY,
            2,
            9,
            &diag_msg(libc::AF_INET as u8, 8, &[]),
        ));
        d.extend(nlmsg(NLMSG_DONE, 2, 9, &0i32.to_ne_bytes()));
        let mut out = Vec::new();
        let mut dump = Dump::new(9, &mut out);
        dump.feed(&d);
        assert!(dump.done);
        assert!(dump.err.is_none(), "{:?}", dump.err);
        assert_eq!(out.len(), 2);
        let s = &out[0];
        assert_eq!(s.local, "10.0.0.1:40000".parse().expect("addr"));
        assert_eq!(s.remote, "10.0.0.2:5201".parse().expect("addr"));
        assert_eq!(s.state, 1);
        assert_eq!(s.cookie, 0x12_dead_beef);
        assert_eq!(s.cc.as_deref(), Some("bbr"));
        assert_eq!(s.info, parse_tcp_info(&info));
        assert_eq!(
            (out[1].state, out[1].cc.as_ref(), out[1].info.as_ref()),
            (8, None, None)
        );
    }

    /// AF_INET6 replies: IPv6 addresses as they are, an IPv4-mapped pair
    /// (a dual-stack socket talking IPv4) as the IPv4 it talks.
    #[test]
    fn parses_ipv6_replies() {
        let v6 = |src: [u8; 16], dst: [u8; 16]| {
            let mut p = diag_msg(libc::AF_INET6 as u8, tcp_state::ESTABLISHED, &[]);
            p[8..24].copy_from_slice(&src);
            p[24..40].copy_from_slice(&dst);
            p
        };
        let mut ula = [0u8; 16];
        ula[..4].copy_from_slice(&[0xfd, 0, 0x0c, 0xcc]);
        let (mut a, mut b) = (ula, ula);
        a[15] = 1;
        b[7] = 1;
        b[15] = 2;
        let mut mapped = [0u8; 16];
        mapped[10..12].copy_from_slice(&[0xff, 0xff]);
        let mut m1 = mapped;
        m1[12..].copy_from_slice(&[198, 18, 0, 2]);
        let mut d = nlmsg(SOCK_DIAG_BY_FAMILY, 2, 4, &v6(a, b));
        d.extend(nlmsg(SOCK_DIAG_BY_FAMILY, 2, 4, &v6(m1, m1)));
        d.extend(nlmsg(NLMSG_DONE, 2, 4, &0i32.to_ne_bytes()));
        let mut out = Vec::new();
        let mut dump = Dump::new(4, &mut out);
        dump.feed(&d);
        assert!(dump.done && dump.err.is_none(), "{:?}", dump.err);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].local, "[fd00:ccc::1]:40000".parse().expect("addr"));
        assert_eq!(
            out[0].remote,
            "[fd00:ccc:0:1::2]:5201".parse().expect("addr")
        );
        assert_eq!(out[1].local, "198.18.0.2:40000".parse().expect("addr"));
        assert_eq!(
            build_request(1, libc::AF_INET6 as u8, SENDER_STATES)[16],
            libc::AF_INET6 as u8
        );
    }

    /// An IPv6 connection over ::1 is in the dump, its listener among the
    /// listening ports.
    #[test]
    fn live_ipv6_loopback_connection() -> Result<(), Box<dyn std::error::Error>> {
        let Ok(listener) = TcpListener::bind("[::1]:0") else {
            panic!("no IPv6 loopback on this machine (::1)");
        };
        let server_addr = listener.local_addr()?;
        let client = TcpStream::connect(server_addr)?;
        let (_server, _) = listener.accept()?;
        let diag = DiagSocket::open()?;
        assert!(diag.listening_ports()?.contains(&server_addr.port()));
        let all = diag.tcp_sockets()?;
        let sock = all
            .iter()
            .find(|s| s.local == client.local_addr().expect("local") && s.remote == server_addr)
            .ok_or("IPv6 client socket not in the dump")?;
        assert_eq!(sock.local.ip(), IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
        assert_eq!(sock.state, tcp_state::ESTABLISHED);
        Ok(())
    }

    #[test]
    fn kernel_error_reply() {
        let mut payload = (-libc::EBUSY).to_ne_bytes().to_vec();
        payload.extend_from_slice(&[0; 16]); // echoed request header
        let d = nlmsg(NLMSG_ERROR, 0, 3, &payload);
        let mut out = Vec::new();
        let mut dump = Dump::new(3, &mut out);
        dump.feed(&d);
        assert!(dump.done);
        match dump.err {
            Some(DiagError::Kernel { source }) => {
                assert_eq!(source.raw_os_error(), Some(libc::EBUSY))
            }
            other => panic!("unexpected {other:?}"),
        }
        // DONE carrying a negative errno
        let d = nlmsg(NLMSG_DONE, 2, 4, &(-libc::ENOMEM).to_ne_bytes());
        let mut dump = Dump::new(4, &mut out);
        dump.feed(&d);
        assert!(dump.done);
        assert!(matches!(dump.err, Some(DiagError::Kernel { .. })));
    }

    #[test]
    fn malformed_replies_do_not_panic() {
        let good = diag_msg(libc::AF_INET as u8, 1, &[rta(INET_DIAG_CONG, b"cubic\0")]);
        let mut cases: Vec<Vec<u8>> = Vec::new();
        // nlmsg_len 0, too large, shorter than header, short trailing bytes
        let mut m = nlmsg(SOCK_DIAG_BY_FAMILY, 2, 1, &good);
        m[0..4].copy_from_slice(&0u32.to_ne_bytes());
        cases.push(m);
        let mut m = nlmsg(SOCK_DIAG_BY_FAMILY, 2, 1, &good);
        m[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        cases.push(m);
        let mut m = nlmsg(SOCK_DIAG_BY_FAMILY, 2, 1, &good);
        m[0..4].copy_from_slice(&10u32.to_ne_bytes());
        cases.push(m);
        cases.push(vec![1, 2, 3]);
        // inet_diag_msg too short
        cases.push(nlmsg(SOCK_DIAG_BY_FAMILY, 2, 1, &good[..40]));
        // rtattr length beyond payload, and below header size
        for bad_len in [0u16, 3, 200, u16::MAX] {
            let mut p = good.clone();
            p[72..74].copy_from_slice(&bad_len.to_ne_bytes());
            cases.push(nlmsg(SOCK_DIAG_BY_FAMILY, 2, 1, &p));
        }
        // NLMSG_ERROR without an errno
        cases.push(nlmsg(NLMSG_ERROR, 0, 1, &[0xff, 0xff]));
        for (i, c) in cases.iter().enumerate() {
            let mut out = Vec::new();
            let mut dump = Dump::new(1, &mut out);
            dump.feed(c);
            assert!(
                matches!(dump.err, Some(DiagError::Parse { .. })),
                "case {i}: {:?}",
                dump.err
            );
            // every prefix of every case, too
            for cut in 0..c.len() {
                let mut out = Vec::new();
                Dump::new(1, &mut out).feed(&c[..cut]);
            }
        }
        // A short or empty INET_DIAG_INFO is just absent.
        let p = diag_msg(
            libc::AF_INET as u8,
            1,
            &[rta(INET_DIAG_INFO, &[1; 50]), rta(INET_DIAG_CONG, b"")],
        );
        let s = parse_inet_diag_msg(&p).expect("ok").expect("some");
        assert_eq!((s.info, s.cc), (None, None));
    }

    // --- live tests ---------------------------------------------------------

    #[test]
    fn recovers_from_abandoned_dump() -> Result<(), Box<dyn std::error::Error>> {
        // Enough sockets that a dump spans several datagrams.
        let listeners = (0..200)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<Vec<_>, _>>()?;
        let _conns = listeners
            .iter()
            .map(|l| TcpStream::connect(l.local_addr()?))
            .collect::<Result<Vec<_>, _>>()?;
        let d = DiagSocket::open()?;
        let n = d.tcp_sockets()?.len();
        assert!(n >= 400, "{n}");
        // A dump the DiagSocket does not know about: the kernel answers the
        // next request with EBUSY, which must be drained and retried.
        d.send(&build_request(0xdead, libc::AF_INET as u8, SENDER_STATES))?;
        assert!(d.tcp_sockets()?.len() >= 400);
        // A dump abandoned part-way (as after a receive error) is drained.
        d.send(&build_request(0xbeef, libc::AF_INET as u8, SENDER_STATES))?;
        d.state.lock().unwrap_or_else(PoisonError::into_inner).dirty = true;
        assert!(d.tcp_sockets()?.len() >= 400);
        assert!(d.tcp_sockets()?.len() >= 400);
        Ok(())
    }

    #[test]
    fn live_loopback_connection() -> Result<(), Box<dyn std::error::Error>> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let server_addr = listener.local_addr()?;
        let mut client = TcpStream::connect(server_addr)?;
        let client_addr = client.local_addr()?;
        let (mut server, _) = listener.accept()?;
        const N: usize = 1 << 20;
        let writer = std::thread::spawn(move || -> std::io::Result<TcpStream> {
            client.write_all(&vec![0x5a; N])?;
            client.flush()?;
            Ok(client)
        });
        let mut got = vec![0u8; N];
        server.read_exact(&mut got)?;
        let _client = writer.join().map_err(|_| "writer panicked")??;

        let diag = DiagSocket::open()?;
        let deadline = Instant::now() + Duration::from_secs(3);
        let sock = loop {
            let all = diag.tcp_sockets()?;
            let found = all.into_iter().find(|s| {
                s.local.port() == client_addr.port() && s.remote.port() == server_addr.port()
            });
            if let Some(s) = &found {
                if s.info.as_ref().and_then(|i| i.bytes_acked).unwrap_or(0) > 0 {
                    break found;
                }
            }
            if Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let sock = sock.ok_or("client socket not in dump")?;
        eprintln!("client socket: {sock:#?}");
        assert_eq!(sock.local.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(sock.state, tcp_state::ESTABLISHED);
        assert_ne!(sock.cookie, 0);
        assert!(
            sock.cc.as_deref().is_some_and(|c| !c.is_empty()),
            "{:?}",
            sock.cc
        );
        let info = sock.info.ok_or("no tcp_info")?;
        assert!(info.snd_cwnd > 0);
        assert!(info.rtt_us > 0);
        assert!(info.snd_mss > 0);
        assert!(info.bytes_acked.unwrap_or(0) > 0, "{info:?}");
        assert!(info.bytes_sent.unwrap_or(0) >= N as u64, "{info:?}");

        // The server side is there too, with the ports swapped.
        let all = diag.tcp_sockets()?;
        assert!(
            all.iter()
                .any(|s| s.local.port() == server_addr.port()
                    && s.remote.port() == client_addr.port())
        );
        // Listeners are not sender states; they show up only when asked for.
        assert!(!all.iter().any(|s| s.state == tcp_state::LISTEN));
        let listening = diag.tcp_sockets_in_states(tcp_state::bit(tcp_state::LISTEN))?;
        assert!(listening
            .iter()
            .any(|s| s.local.port() == server_addr.port() && s.state == tcp_state::LISTEN));
        Ok(())
    }

    fn socket(cookie: u64, local_port: u16, cc: Option<&str>, acked: Option<u64>) -> TcpSocket {
        TcpSocket {
            local: IpSocketAddr::new(Ipv4Addr::new(198, 18, 1, 1).into(), local_port),
            remote: IpSocketAddr::new(Ipv4Addr::new(198, 18, 0, 2).into(), 5201),
            state: tcp_state::ESTABLISHED,
            cookie,
            cc: cc.map(str::to_string),
            info: acked.map(|a| TcpInfo {
                bytes_acked: Some(a),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn samples_follow_each_socket_by_cookie() {
        let mut s = Samples::default();
        s.add(0.0, socket(7, 40000, Some("cubic"), Some(1)));
        s.add(0.0, socket(8, 40001, Some("cubic"), Some(5)));
        s.add(0.1, socket(7, 40000, Some("cubic"), None)); // no tcp_info
        s.add(0.2, socket(7, 40000, Some("bpf_bbr"), Some(3)));
        s.add(0.3, socket(7, 40000, None, Some(4))); // no name
        s.add(0.4, socket(7, 40000, Some("bpf_bbr"), Some(9)));
        // A later socket on the same local port is another socket.
        s.add(0.5, socket(9, 40000, Some("reno"), Some(2)));

        let mine: Vec<&SocketTrack> = s.for_local_port(40000).collect();
        assert_eq!(mine.len(), 2);
        assert_eq!(mine[0].cookie, 7);
        assert_eq!(mine[0].cc, ["cubic", "bpf_bbr"]);
        let seen: Vec<(f64, Option<u64>)> = mine[0]
            .samples
            .iter()
            .map(|x| (x.t, x.info.bytes_acked))
            .collect();
        assert_eq!(
            seen,
            [
                (0.0, Some(1)),
                (0.2, Some(3)),
                (0.3, Some(4)),
                (0.4, Some(9))
            ]
        );
        assert_eq!(
            (mine[1].cookie, mine[1].cc.as_slice()),
            (9, &["reno".to_string()][..])
        );
        assert_eq!(s.for_local_port(40001).count(), 1);
        assert_eq!(s.for_peer_port(5201).count(), 3);
        assert_eq!(s.for_peer_port(40000).count(), 0);
    }

    #[test]
    fn sampler_fails_fast_on_missing_namespace() {
        let e = Sampler::start(
            Path::new("/run/netns/ccctl-no-such-ns"),
            SamplerConfig::default(),
        )
        .expect_err("no such namespace");
        assert!(e.to_string().contains("ccctl-no-such-ns"), "{e}");
    }

    #[test]
    fn live_sampler_follows_a_loopback_connection() -> Result<(), Box<dyn std::error::Error>> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let server_addr = listener.local_addr()?;
        let sampler = Sampler::start(
            Path::new("/proc/self/ns/net"),
            SamplerConfig {
                interval: Duration::from_millis(20),
                ..Default::default()
            },
        )?;
        let mut client = TcpStream::connect(server_addr)?;
        let client_port = client.local_addr()?.port();
        let (mut server, _) = listener.accept()?;
        // What the kernel says the socket runs, asked without inet_diag.
        let cc = rustix::net::sockopt::tcp_congestion(&client)?;
        const N: usize = 1 << 20;
        let reader = std::thread::spawn(move || -> std::io::Result<()> {
            let mut got = vec![0u8; N];
            server.read_exact(&mut got)
        });
        for _ in 0..8 {
            client.write_all(&vec![0x5a; N / 8])?;
            std::thread::sleep(Duration::from_millis(30));
        }
        reader.join().map_err(|_| "reader panicked")??;
        std::thread::sleep(Duration::from_millis(100));
        let samples = sampler.stop();

        let mine: Vec<&SocketTrack> = samples.for_local_port(client_port).collect();
        assert_eq!(mine.len(), 1, "{samples:#?}");
        let track = mine[0];
        assert_eq!(track.remote.port(), server_addr.port());
        assert_eq!(track.cc, [cc]);
        assert!(track.samples.len() >= 5, "{} samples", track.samples.len());
        assert!(track.samples.windows(2).all(|w| w[0].t < w[1].t));
        let acked: Vec<u64> = track
            .samples
            .iter()
            .map(|x| x.info.bytes_acked.unwrap_or(0))
            .collect();
        assert!(acked.windows(2).all(|w| w[0] <= w[1]), "{acked:?}");
        assert!(acked.last().is_some_and(|&a| a >= N as u64), "{acked:?}");
        assert!(samples.ticks >= track.samples.len() as u64);
        assert_eq!(samples.failures, 0, "{:?}", samples.last_error);
        Ok(())
    }

    #[test]
    fn listening_ports_are_the_listeners_only() -> Result<(), Box<dyn std::error::Error>> {
        let diag = DiagSocket::open()?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let client = TcpStream::connect(listener.local_addr()?)?;
        let (_server, _) = listener.accept()?;
        let ports = diag.listening_ports()?;
        assert!(ports.contains(&port), "{port} not in {ports:?}");
        assert!(!ports.contains(&client.local_addr()?.port()));
        drop(listener);
        assert!(!diag.listening_ports()?.contains(&port));
        Ok(())
    }

    #[test]
    fn open_in_netns_errors() {
        match DiagSocket::open_in_netns(Path::new("/run/netns/diag-does-not-exist")) {
            Err(DiagError::OpenNetns { source, .. }) => {
                assert_eq!(source.kind(), io::ErrorKind::NotFound)
            }
            other => panic!("unexpected {other:?}"),
        }
        // Not a namespace file: setns refuses (EINVAL).
        match DiagSocket::open_in_netns(Path::new("/proc/self/status")) {
            Err(DiagError::EnterNetns { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::EINVAL))
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    fn is_root() -> bool {
        rustix::process::geteuid().is_root()
    }

    fn have(cmd: &str, arg: &str) -> bool {
        Command::new(cmd)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    }

    /// Deletes the namespace and kills the processes started in it on drop.
    struct NetnsGuard {
        name: String,
        children: Vec<Child>,
    }

    impl NetnsGuard {
        fn path(&self) -> PathBuf {
            Path::new("/run/netns").join(&self.name)
        }

        fn spawn(&mut self, args: &[&str]) -> std::io::Result<()> {
            let child = Command::new("ip")
                .args(["netns", "exec", &self.name])
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            self.children.push(child);
            Ok(())
        }
    }

    impl Drop for NetnsGuard {
        fn drop(&mut self) {
            for c in &mut self.children {
                let _ = c.kill();
                let _ = c.wait();
            }
            let _ = Command::new("ip")
                .args(["netns", "del", &self.name])
                .stderr(Stdio::null())
                .status();
        }
    }

    fn run(args: &[&str]) -> Result<(), String> {
        let st = Command::new(args[0])
            .args(&args[1..])
            .status()
            .map_err(|e| format!("{args:?}: {e}"))?;
        if st.success() {
            Ok(())
        } else {
            Err(format!("{args:?}: {st}"))
        }
    }

    fn thread_netns() -> std::io::Result<PathBuf> {
        std::fs::read_link("/proc/thread-self/ns/net")
    }

    #[test]
    fn live_in_network_namespace() -> Result<(), Box<dyn std::error::Error>> {
        if !is_root() || !have("ip", "-V") || !have("iperf3", "--version") {
            eprintln!("skipping: needs root, ip and iperf3");
            return Ok(());
        }
        const PORT: u16 = 5999;
        let name = format!("diagtest-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        run(&["ip", "netns", "add", &name])?;
        let mut ns = NetnsGuard {
            name: name.clone(),
            children: Vec::new(),
        };
        run(&["ip", "-n", &name, "link", "set", "lo", "up"])?;

        let before = thread_netns()?;
        let diag = DiagSocket::open_in_netns(&ns.path())?;
        assert_eq!(thread_netns()?, before, "caller's namespace changed");
        let host = DiagSocket::open()?;

        let port = PORT.to_string();
        ns.spawn(&["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", &port])?;
        // Wait for the listener, seen through the namespace's socket.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !diag
            .tcp_sockets_in_states(tcp_state::bit(tcp_state::LISTEN))?
            .iter()
            .any(|s| s.local.port() == PORT)
        {
            if Instant::now() > deadline {
                return Err("iperf3 server did not start listening".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        ns.spawn(&["iperf3", "-c", "127.0.0.1", "-p", &port, "-t", "3"])?;

        let deadline = Instant::now() + Duration::from_secs(10);
        let sock = loop {
            let found = diag.tcp_sockets()?.into_iter().find(|s| {
                s.remote.port() == PORT
                    && s.info.as_ref().and_then(|i| i.bytes_acked).unwrap_or(0) > 100_000
            });
            if let Some(s) = found {
                break s;
            }
            if Instant::now() > deadline {
                return Err("iperf3 data connection not seen in namespace".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        eprintln!("namespace socket: {sock:#?}");
        assert_eq!(sock.state, tcp_state::ESTABLISHED);
        assert!(sock.cc.as_deref().is_some_and(|c| !c.is_empty()));
        assert!(sock
            .info
            .as_ref()
            .is_some_and(|i| i.snd_cwnd > 0 && i.rtt_us > 0));

        let host_socks = host.tcp_sockets()?;
        assert!(
            !host_socks
                .iter()
                .any(|s| s.cookie == sock.cookie
                    || (s.local == sock.local && s.remote == sock.remote)),
            "namespace socket visible in the host namespace"
        );
        // And the namespace socket does not see the host's sockets.
        let ns_cookies: Vec<u64> = diag.tcp_sockets()?.iter().map(|s| s.cookie).collect();
        assert!(host_socks.iter().all(|s| !ns_cookies.contains(&s.cookie)));
        assert_eq!(thread_netns()?, before);
        Ok(())
    }
}
