//! Parsing against hand-built replies, and live dumps of loopback sockets.
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use netlink_packet_core::{NLMSG_DONE, NLMSG_ERROR};
use netlink_packet_sock_diag::{
    constants::{INET_DIAG_CONG, INET_DIAG_INFO},
    SOCK_DIAG_BY_FAMILY,
};

use super::tcp_info::u32_ne;
use super::wire::{align4, build_request, parse_inet_diag_msg, Dump, INET_DIAG_MSG_LEN};
use super::*;

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
    assert_eq!(&r[16..19], &[2, 6, 0b1110]); // INFO | VEGASINFO | CONG
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
    p[8..12].copy_from_slice(&[198, 18, 0, 1]);
    p[24..28].copy_from_slice(&[198, 18, 0, 2]);
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
    assert_eq!(s.local, "198.18.0.1:40000".parse().expect("addr"));
    assert_eq!(s.remote, "198.18.0.2:5201".parse().expect("addr"));
    assert_eq!(s.state, 1);
    assert_eq!(s.cookie, 0x12_dead_beef);
    assert_eq!(s.cc.as_deref(), Some("bbr"));
    assert_eq!(s.info, parse_tcp_info(&info));
    assert_eq!(
        (out[1].state, out[1].cc.as_ref(), out[1].info.as_ref()),
        (8, None, None)
    );
}

/// A hand-built INET_DIAG_BBRINFO attribute (what tcp_bbr.c's get_info
/// writes: bw 2^32 + 6_250_000 bytes/s split in lo/hi, min_rtt, STARTUP's
/// gains 739/256), after INET_DIAG_INFO; a short one is dropped, and a
/// socket without one has none.
#[test]
fn parses_bbr_info_attribute() {
    let mut bbr = Vec::new();
    for v in [6_250_000u32, 1, 40_123, 739, 739] {
        bbr.extend_from_slice(&v.to_ne_bytes());
    }
    let msg = diag_msg(
        libc::AF_INET as u8,
        tcp_state::ESTABLISHED,
        &[
            rta(INET_DIAG_INFO, &sample_tcp_info()),
            rta(INET_DIAG_BBRINFO, &bbr),
        ],
    );
    let s = parse_inet_diag_msg(&msg).expect("ok").expect("some");
    let b = s.bbr.expect("bbr info");
    assert_eq!(b.bw_bytes_per_s, (1u64 << 32) + 6_250_000);
    assert_eq!(
        (b.min_rtt_us, b.pacing_gain, b.cwnd_gain),
        (40_123, 739, 739)
    );
    assert!((b.pacing_gain_f64() - 2.886_718_75).abs() < 1e-9);
    assert!(s.info.is_some());
    let short = diag_msg(
        libc::AF_INET as u8,
        1,
        &[rta(INET_DIAG_BBRINFO, &bbr[..16])],
    );
    assert_eq!(
        parse_inet_diag_msg(&short).expect("ok").expect("some").bbr,
        None
    );
    let none = diag_msg(libc::AF_INET as u8, 1, &[]);
    assert_eq!(
        parse_inet_diag_msg(&none).expect("ok").expect("some").bbr,
        None
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
    assert!(all
        .iter()
        .any(|s| s.local.port() == server_addr.port() && s.remote.port() == client_addr.port()));
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
        bbr: None,
        info: acked.map(|a| TcpInfo {
            bytes_acked: Some(a),
            ..Default::default()
        }),
        cgroup_id: None,
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

    // Ours by both ports: the sampler sees every socket of the namespace
    // over the whole run, and tests running beside this one reuse the
    // ephemeral port once this connection has closed (CI, 2026-11-27: a
    // second track on the same local port, towards another listener).
    let mine: Vec<&SocketTrack> = samples
        .for_local_port(client_port)
        .filter(|s| s.remote.port() == server_addr.port())
        .collect();
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
    // A test that cannot run fails: CI runs as root with both installed
    // (`cargo xtask setup`), and a pass here must mean it ran.
    if !is_root() || !have("ip", "-V") || !have("iperf3", "--version") {
        return Err(
            "this test needs root, ip and iperf3 (run `cargo xtask setup`, as root)".into(),
        );
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
            .any(|s| s.cookie == sock.cookie || (s.local == sock.local && s.remote == sock.remote)),
        "namespace socket visible in the host namespace"
    );
    // And the namespace socket does not see the host's sockets.
    let ns_cookies: Vec<u64> = diag.tcp_sockets()?.iter().map(|s| s.cookie).collect();
    assert!(host_socks.iter().all(|s| !ns_cookies.contains(&s.cookie)));
    assert_eq!(thread_netns()?, before);
    Ok(())
}
