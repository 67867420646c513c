//! The few header fields the path reads from an Ethernet frame: the
//! destination address (which sender an ACK goes back to), and a TCP
//! segment's connection and payload length (which data packet of which
//! connection a loss list names, which flow an FQ-CoDel queue holds).
//!
//! Only untagged Ethernet II frames carrying IPv4, or IPv6 whose first next
//! header is TCP, are read: the testbed's hosts send nothing else through
//! the path (no VLANs, no extension headers), and anything else is simply
//! "not TCP" to the callers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Length of an Ethernet II header (no VLAN tag): what a frame adds to the
/// IP packet, as the kernel's qdiscs count it.
pub const ETH_HLEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_TCP: u8 = 6;
const IPV6_HLEN: usize = 40;

/// The IP packet inside `frame` and its version, if it carries one.
fn ip_packet(frame: &[u8]) -> Option<(u8, &[u8])> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = frame.get(ETH_HLEN..)?;
    match ethertype {
        ETHERTYPE_IPV4 if ip.len() >= 20 && ip[0] >> 4 == 4 => Some((4, ip)),
        ETHERTYPE_IPV6 if ip.len() >= IPV6_HLEN && ip[0] >> 4 == 6 => Some((6, ip)),
        _ => None,
    }
}

fn v4(b: &[u8]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
}

fn v6(b: &[u8]) -> IpAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    IpAddr::V6(Ipv6Addr::from(a))
}

/// The destination address of the IP packet in `frame`.
pub fn dst_addr(frame: &[u8]) -> Option<IpAddr> {
    match ip_packet(frame)? {
        (4, ip) => Some(v4(&ip[16..20])),
        (_, ip) => Some(v6(&ip[24..40])),
    }
}

/// A TCP segment as the path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// Bytes of TCP payload (0 for a pure ACK, SYN or FIN).
    pub payload: usize,
    pub seq: u32,
}

/// The TCP segment in `frame`, if it is one (and not a fragment).
pub fn tcp_segment(frame: &[u8]) -> Option<Segment> {
    let (version, ip) = ip_packet(frame)?;
    let (src, dst, tcp, ip_payload) = if version == 4 {
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff; // MF + offset
        if ip[9] != IPPROTO_TCP || ihl < 20 || frag != 0 || total < ihl || total > ip.len() {
            return None;
        }
        (
            v4(&ip[12..16]),
            v4(&ip[16..20]),
            &ip[ihl..total],
            total - ihl,
        )
    } else {
        let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
        if ip[6] != IPPROTO_TCP || IPV6_HLEN + payload > ip.len() {
            return None;
        }
        (
            v6(&ip[8..24]),
            v6(&ip[24..40]),
            &ip[IPV6_HLEN..IPV6_HLEN + payload],
            payload,
        )
    };
    if tcp.len() < 20 {
        return None;
    }
    let doff = usize::from(tcp[12] >> 4) * 4;
    if doff < 20 || doff > ip_payload {
        return None;
    }
    Some(Segment {
        src: SocketAddr::new(src, u16::from_be_bytes([tcp[0], tcp[1]])),
        dst: SocketAddr::new(dst, u16::from_be_bytes([tcp[2], tcp[3]])),
        payload: ip_payload - doff,
        seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet frame with an IPv4 TCP segment of `payload` bytes.
    pub(crate) fn tcp4(
        src: [u8; 4],
        sport: u16,
        dst: [u8; 4],
        dport: u16,
        payload: usize,
    ) -> Vec<u8> {
        let mut f = vec![0u8; ETH_HLEN];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let total = 20 + 20 + payload;
        let mut ip = vec![0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 64;
        ip[9] = IPPROTO_TCP;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        let mut tcp = vec![0u8; 20 + payload];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[4..8].copy_from_slice(&7u32.to_be_bytes());
        tcp[12] = 5 << 4;
        f.extend(ip);
        f.extend(tcp);
        f
    }

    /// The same for IPv6.
    pub(crate) fn tcp6(
        src: Ipv6Addr,
        sport: u16,
        dst: Ipv6Addr,
        dport: u16,
        payload: usize,
    ) -> Vec<u8> {
        let mut f = vec![0u8; ETH_HLEN];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        let mut ip = vec![0u8; IPV6_HLEN];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&((20 + payload) as u16).to_be_bytes());
        ip[6] = IPPROTO_TCP;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&src.octets());
        ip[24..40].copy_from_slice(&dst.octets());
        let mut tcp = vec![0u8; 20 + payload];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[12] = 5 << 4;
        f.extend(ip);
        f.extend(tcp);
        f
    }

    #[test]
    fn reads_ipv4_and_ipv6_segments() {
        let f = tcp4([198, 18, 1, 1], 40000, [198, 18, 0, 2], 5201, 1448);
        let s = tcp_segment(&f).unwrap();
        assert_eq!(s.src, "198.18.1.1:40000".parse().unwrap());
        assert_eq!(s.dst, "198.18.0.2:5201".parse().unwrap());
        assert_eq!(s.payload, 1448);
        assert_eq!(s.seq, 7);
        assert_eq!(dst_addr(&f), Some("198.18.0.2".parse().unwrap()));

        let a: Ipv6Addr = "fd00:ccc:0:1::1".parse().unwrap();
        let b: Ipv6Addr = "fd00:ccc::2".parse().unwrap();
        let f = tcp6(a, 1, b, 2, 0);
        let s = tcp_segment(&f).unwrap();
        assert_eq!(s.payload, 0);
        assert_eq!(s.dst.ip(), IpAddr::V6(b));
        assert_eq!(dst_addr(&f), Some(IpAddr::V6(b)));
    }

    #[test]
    fn refuses_what_is_not_a_whole_tcp_segment() {
        let mut f = tcp4([1, 1, 1, 1], 1, [2, 2, 2, 2], 2, 10);
        f[ETH_HLEN + 9] = 17; // UDP
        assert_eq!(tcp_segment(&f), None);
        let mut f = tcp4([1, 1, 1, 1], 1, [2, 2, 2, 2], 2, 10);
        f[ETH_HLEN + 7] = 1; // a fragment
        assert_eq!(tcp_segment(&f), None);
        let f = tcp4([1, 1, 1, 1], 1, [2, 2, 2, 2], 2, 10);
        assert_eq!(tcp_segment(&f[..f.len() - 1]), None, "truncated");
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(tcp_segment(&arp), None);
        assert_eq!(dst_addr(&arp), None);
        assert_eq!(dst_addr(&[0u8; 5]), None);
    }
}
