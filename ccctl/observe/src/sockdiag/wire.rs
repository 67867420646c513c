//! The netlink messages: the dump request, the replies' `inet_diag_msg`
//! and attributes, and one dump's accumulation across datagrams.
use std::io;
use std::net::{IpAddr, SocketAddr as IpSocketAddr};

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

/// `INET_DIAG_CGROUP_ID` (`linux/inet_diag.h`), not in the crate's constants.
const INET_DIAG_CGROUP_ID: u16 = 21;

use super::tcp_info::parse_tcp_info;
use super::{parse_err, DiagError, TcpSocket, TCP_INFO_MIN_LEN};
/// `sizeof(struct inet_diag_msg)`: the fixed part of every reply, before
/// its attributes.
pub(super) const INET_DIAG_MSG_LEN: usize = 72;

/// Rounds up to the 4-byte netlink alignment (NLMSG_ALIGN / RTA_ALIGN).
pub(super) fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

/// Builds `nlmsghdr` + `inet_diag_req_v2` for a dump of `family` TCP sockets
/// in `states`, requesting INET_DIAG_INFO and INET_DIAG_CONG.
pub(super) fn build_request(seq: u32, family: u8, states: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = seq;
    let request = InetRequest {
        family,
        protocol: IPPROTO_TCP,
        // VEGASINFO: the kernel's bbr answers it with INET_DIAG_BBRINFO.
        extensions: ExtensionFlags::INFO | ExtensionFlags::CONG | ExtensionFlags::VEGASINFO,
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
pub(super) fn parse_inet_diag_msg(p: &[u8]) -> Result<Option<TcpSocket>, DiagError> {
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
        cgroup_id: None,
        bbr: None,
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
            super::INET_DIAG_BBRINFO => sock.bbr = super::parse_bbr_info(data),
            INET_DIAG_CONG => {
                // A NUL-terminated name; a non-UTF-8 one is shown lossily
                // rather than losing the socket.
                let name = data.split(|&c| c == 0).next().unwrap_or(&[]);
                if !name.is_empty() {
                    sock.cc = Some(String::from_utf8_lossy(name).into_owned());
                }
            }
            INET_DIAG_CGROUP_ID if data.len() == 8 => {
                sock.cgroup_id = Some(u64::from_ne_bytes(data.try_into().unwrap_or([0; 8])));
            }
            _ => {}
        }
    }
    Ok(Some(sock))
}

/// Accumulates the result of one dump across reply datagrams.
pub(super) struct Dump<'a> {
    pub(super) seq: u32,
    pub(super) out: &'a mut Vec<TcpSocket>,
    /// First error seen; the reply is still read to its end.
    pub(super) err: Option<DiagError>,
    /// `NLMSG_DONE` or `NLMSG_ERROR` for our sequence number seen.
    pub(super) done: bool,
    pub(super) interrupted: bool,
}

impl<'a> Dump<'a> {
    pub(super) fn new(seq: u32, out: &'a mut Vec<TcpSocket>) -> Self {
        Dump {
            seq,
            out,
            err: None,
            done: false,
            interrupted: false,
        }
    }

    pub(super) fn record(&mut self, e: DiagError) {
        if self.err.is_none() {
            self.err = Some(e);
        }
    }

    /// Walks the netlink messages of one received datagram.
    pub(super) fn feed(&mut self, mut d: &[u8]) {
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
