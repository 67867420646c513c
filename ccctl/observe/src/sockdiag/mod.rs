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
//! control name) attributes, and the kernel's BBR state ([`BbrInfo`]). It reads the multipart reply until
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

mod bbr_info;
mod sampler;
mod socket;
mod tcp_info;
#[cfg(test)]
mod tests;
mod wire;

pub use bbr_info::{parse_bbr_info, BbrInfo, INET_DIAG_BBRINFO};
pub use sampler::{Sample, Sampler, SamplerConfig, Samples, SocketTrack};
pub use socket::DiagSocket;
pub use tcp_info::{parse_tcp_info, TcpInfo, TCP_INFO_MIN_LEN};

use std::io;
use std::net::SocketAddr as IpSocketAddr;
use std::path::PathBuf;

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
    /// The socket's cgroup v2 id from `INET_DIAG_CGROUP_ID` (Linux 5.7+;
    /// sent unasked), for the rollout policy's cgroup rules.
    pub cgroup_id: Option<u64>,
    /// The kernel's BBR state (`INET_DIAG_BBRINFO`), on sockets running
    /// its `bbr` only: see [`BbrInfo`].
    pub bbr: Option<BbrInfo>,
}

impl TcpSocket {
    /// The 4-tuple, cgroup and namespace a rollout policy's rules match,
    /// for a socket listed in the network namespace of `netns_cookie`.
    pub fn conn(&self, netns_cookie: Option<u64>) -> ccctl_core::policy::Conn {
        ccctl_core::policy::Conn {
            local: self.local.ip(),
            local_port: self.local.port(),
            remote: self.remote.ip(),
            remote_port: self.remote.port(),
            cgroup_id: self.cgroup_id,
            netns_cookie,
        }
    }
}
