//! Links, addresses, routes and offloads: what each namespace needs set up
//! from inside it, without spawning a process.
//!
//! What `ip netns exec NS sysctl …`, `ip netns exec NS ethtool -K …` and
//! `ip -n NS addr/route/link …` did, done by a short-lived thread that joined
//! NS ([`ccctl_sys::netns::run_in`]): sockets a thread creates and
//! /proc/sys/net files it opens belong to the thread's network namespace,
//! not the process's. The calling thread never changes namespace.
//!
//! - rtnetlink (links up, addresses, the default route) goes through the
//!   netlink-packet-route message types over a netlink-sys socket, one
//!   acknowledged request at a time: the messages `ip` sends.
//! - Offloads are switched off with the `SIOCETHTOOL` ioctl, as `ethtool -K`
//!   does: no crate of the netlink family speaks it (the ethtool netlink
//!   family has an async-only client), so it stays ours, one `unsafe` call.
//! - Interface indexes come from rustix (`SIOCGIFINDEX`).
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::netns::netns_path;
use super::{Error, Result};

/// Device names inside the namespaces.
pub const SENDER_DEV: &str = "eth0";
pub const RECEIVER_DEV: &str = "eth0";
pub const ROUTER_RX_DEV: &str = "to_rx";

pub fn router_sender_dev(i: usize) -> String {
    format!("to_s{i}")
}

/// The ifb device in the receiver namespace that carries random loss.
pub(super) const IFB_DEV: &str = "ifb0";

/// `ip -batch` line creating a veth pair straight into its two namespaces
/// (MTU set on both ends; they are brought up from inside, since the peer
/// of a pair cannot be created up).
pub(super) fn veth_line(ns_a: &str, dev_a: &str, ns_b: &str, dev_b: &str, mtu: u32) -> String {
    format!(
        "link add {dev_a} mtu {mtu} netns {ns_a} type veth peer name {dev_b} mtu {mtu} netns {ns_b}"
    )
}

/// [`veth_line`] with the two ends' MAC addresses set.
pub(super) fn veth_line_with_macs(
    (ns_a, dev_a, mac_a): (&str, &str, &str),
    (ns_b, dev_b, mac_b): (&str, &str, &str),
    mtu: u32,
) -> String {
    format!(
        "link add {dev_a} address {mac_a} mtu {mtu} netns {ns_a} type veth peer name {dev_b} \
         address {mac_b} mtu {mtu} netns {ns_b}"
    )
}

/// Everything one namespace needs set up from inside it, in the order it
/// is applied.
#[derive(Debug, Default)]
pub(super) struct NsSetup {
    pub(super) ns: String,
    /// `(key, value)` as `sysctl -w key=value` takes them (`net.ipv4.…`).
    pub(super) sysctls: Vec<(String, String)>,
    /// Devices to bring up (`ip link set DEV up`).
    pub(super) up: Vec<String>,
    /// Devices to turn TSO, GSO and GRO off on (`ethtool -K DEV tso off gso
    /// off gro off`).
    pub(super) no_offloads: Vec<String>,
    /// Devices to turn transmit checksumming off on (`ethtool -K DEV tx
    /// off`): a frame the path emulator reads with AF_PACKET and writes out
    /// again must carry its checksum, not a CHECKSUM_PARTIAL promise.
    pub(super) no_tx_checksum: Vec<String>,
    /// `ip addr add ADDR/LEN dev DEV`.
    pub(super) addrs: Vec<(String, IpAddr, u8)>,
    /// `ip route add default via GW`.
    pub(super) gateway: Option<IpAddr>,
}

impl NsSetup {
    pub(super) fn new(ns: &str) -> Self {
        NsSetup {
            ns: ns.to_string(),
            ..Default::default()
        }
    }

    /// Applies the set-up from a helper thread inside the namespace.
    pub(super) fn apply(&self) -> Result<()> {
        ccctl_sys::netns::run_in(&netns_path(&self.ns), || self.apply_here()).map_err(|e| {
            Error::Io {
                what: format!(
                    "entering network namespace {} (setns CLONE_NEWNET)",
                    e.path.display()
                ),
                source: e.source,
            }
        })?
    }

    /// The body of [`apply`](Self::apply), on the thread inside the namespace.
    fn apply_here(&self) -> Result<()> {
        let err = |what: String| {
            let ns = &self.ns;
            move |source| Error::Io {
                what: format!("namespace {ns}: {what}"),
                source,
            }
        };
        for (key, value) in &self.sysctls {
            // Opened by this thread, so resolved in its namespace.
            let path = format!("/proc/sys/{}", key.replace('.', "/"));
            std::fs::write(&path, value).map_err(err(format!("setting {key}={value}")))?;
        }
        let sock = IfSock::new().map_err(err("creating an AF_INET socket".into()))?;
        let mut rtnl = Rtnl::new().map_err(err("creating a NETLINK_ROUTE socket".into()))?;
        let index = |dev: &str| sock.ifindex(dev).map_err(err(format!("looking up {dev}")));
        for dev in &self.up {
            rtnl.link_up(index(dev)?)
                .map_err(err(format!("setting {dev} up (RTM_NEWLINK)")))?;
        }
        for dev in &self.no_offloads {
            sock.features_off(dev, &NO_OFFLOADS).map_err(err(format!(
                "turning tso, gso and gro off on {dev} (SIOCETHTOOL)"
            )))?;
        }
        for dev in &self.no_tx_checksum {
            sock.features_off(dev, &NO_TX_CHECKSUM)
                .map_err(err(format!(
                    "turning transmit checksumming off on {dev} (SIOCETHTOOL)"
                )))?;
        }
        for (dev, addr, len) in &self.addrs {
            rtnl.addr_add(index(dev)?, *addr, *len)
                .map_err(err(format!("adding {addr}/{len} to {dev} (RTM_NEWADDR)")))?;
        }
        if let Some(gw) = self.gateway {
            rtnl.default_route(gw)
                .map_err(err(format!("adding default route via {gw} (RTM_NEWROUTE)")))?;
        }
        Ok(())
    }
}

/// A permanent neighbour entry `ip` -> `mac` on `dev` in namespace `ns`
/// (`ip -n NS neigh replace IP lladdr MAC dev DEV nud permanent`): across a
/// sender gate, ARP requests and replies wait at closed gates, and connects
/// failed with "No route to host" in 2 of 5 gated testbeds without them.
pub(super) fn neigh_permanent(ns: &str, dev: &str, ip: IpAddr, mac: &str) -> Result<()> {
    let ip = ip.to_string();
    super::exec::run(std::process::Command::new("ip").args([
        "-n",
        ns,
        "neigh",
        "replace",
        &ip,
        "lladdr",
        mac,
        "dev",
        dev,
        "nud",
        "permanent",
    ]))?;
    Ok(())
}

/// Waits until `dev` in namespace `ns` is running (`IFF_RUNNING`, which the
/// kernel reports once linkwatch has seen its carrier on), polling every
/// 10 ms up to `timeout`.
pub(super) fn wait_running(ns: &str, dev: &str, timeout: std::time::Duration) -> Result<()> {
    let what = || format!("namespace {ns}: waiting for {dev} to be running");
    let still_down = poll_in_ns(ns, timeout, &what(), || {
        let sock = IfSock::new()?;
        Ok((sock.flags(dev)? & libc::IFF_RUNNING as u32 == 0).then_some(()))
    })?;
    match still_down {
        None => Ok(()),
        Some(()) => Err(Error::Timeout {
            what: what(),
            timeout,
        }),
    }
}

/// Polls `probe` every 10 ms on a thread inside namespace `ns` until it
/// finds nothing missing (`None`: ready) or `timeout` passes (then the last
/// thing it found missing). `io_what` names the probe in its I/O errors.
fn poll_in_ns<T: Send>(
    ns: &str,
    timeout: std::time::Duration,
    io_what: &str,
    probe: impl Fn() -> std::io::Result<Option<T>> + Sync,
) -> Result<Option<T>> {
    ccctl_sys::netns::run_in(&netns_path(ns), || {
        let end = std::time::Instant::now() + timeout;
        loop {
            let missing = probe()?;
            if missing.is_none() || std::time::Instant::now() >= end {
                return Ok(missing);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    })
    .map_err(|e| Error::Io {
        what: format!(
            "entering network namespace {} (setns CLONE_NEWNET)",
            e.path.display()
        ),
        source: e.source,
    })?
    .map_err(|source: std::io::Error| Error::Io {
        what: io_what.to_string(),
        source,
    })
}

/// `IFA_F_TENTATIVE`: the address is still in duplicate address detection
/// (the flags column of `/proc/net/if_inet6`).
const IFA_F_TENTATIVE: u32 = 0x40;
/// `IFA_LINK` scope: a link-local address (the scope column).
const IPV6_SCOPE_LINK: u32 = 0x20;

/// What `/proc/net/if_inet6` says of `devs`: the ones without a link-local
/// address yet, and each tentative address as `ADDR on DEV`. Its lines are
/// `ADDR IFINDEX PREFIXLEN SCOPE FLAGS DEV`, numbers in hex.
fn ipv6_not_ready(if_inet6: &str, devs: &[String]) -> (Vec<String>, Vec<String>) {
    let mut link_local = vec![false; devs.len()];
    let mut tentative = Vec::new();
    for line in if_inet6.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [addr, _, _, scope, flags, dev] = f[..] else {
            continue;
        };
        let Some(i) = devs.iter().position(|d| d == dev) else {
            continue;
        };
        let hex = |v: &str| u32::from_str_radix(v, 16).unwrap_or(0);
        if hex(scope) == IPV6_SCOPE_LINK {
            link_local[i] = true;
        }
        if hex(flags) & IFA_F_TENTATIVE != 0 {
            tentative.push(format!("{addr} on {dev}"));
        }
    }
    let missing = devs
        .iter()
        .zip(link_local)
        .filter(|(_, has)| !has)
        .map(|(d, _)| d.clone())
        .collect();
    (missing, tentative)
}

/// Waits until each of `devs` in namespace `ns` has its IPv6 link-local
/// address and no address on them is tentative, polling every 10 ms up to
/// `timeout`. With `accept_dad = 0` and `IFA_F_NODAD` no detection is run,
/// but the kernel still adds the link-local address only once linkwatch has
/// seen the carrier (up to 1 s later) and clears the tentative flag from a
/// workqueue: on a loaded machine a build was seen to return before that
/// ran.
pub(super) fn wait_ipv6_ready(
    ns: &str,
    devs: &[String],
    timeout: std::time::Duration,
) -> Result<()> {
    let io_what = format!("namespace {ns}: reading /proc/net/if_inet6");
    let last = poll_in_ns(ns, timeout, &io_what, || {
        // thread-self: /proc/net follows the process's first thread,
        // which is not in this namespace.
        let table = std::fs::read_to_string("/proc/thread-self/net/if_inet6")?;
        let (missing, tentative) = ipv6_not_ready(&table, devs);
        Ok((!missing.is_empty() || !tentative.is_empty()).then_some((missing, tentative)))
    })?;
    match last {
        None => Ok(()),
        Some((missing, tentative)) => Err(Error::Timeout {
            what: format!(
                "namespace {ns}: IPv6 link-local addresses on {} and {} tentative address(es) [{}] to be ready",
                if missing.is_empty() { "every device".to_string() } else { format!("[{}] missing", missing.join(", ")) },
                tentative.len(),
                tentative.join(", ")
            ),
            timeout,
        }),
    }
}

// ---------------------------------------------------------------------------
// Offloads: SIOCETHTOOL

/// Commands and string set of `<linux/ethtool.h>` used by
/// [`IfSock::features_off`].
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// The features `ethtool -K DEV tso off gso off gro off` switches off: its
/// legacy `tso`, `gso` and `gro` flags stand for these name patterns (`*`:
/// any run of characters). Matching by name, as ethtool does, also covers
/// TSO variants newer than the legacy `ETHTOOL_STSO` mask (6.18's
/// `tx-tcp-accecn-segmentation`).
const NO_OFFLOADS: [&str; 3] = ["tx-tcp*-segmentation", "tx-generic-segmentation", "rx-gro"];

/// The features `ethtool -K DEV tx off` switches off.
const NO_TX_CHECKSUM: [&str; 1] = ["tx-checksum*"];

/// `name` matches `pattern`, which holds at most one `*`.
fn feature_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        Some((pre, post)) => {
            name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
        None => name == pattern,
    }
}

/// `struct ifreq` as `SIOCETHTOOL` reads it: the device name and, in the
/// union, a pointer to the request. The padding covers the rest of the
/// union (24 bytes on 64-bit targets), which the kernel copies in whole.
#[repr(C)]
struct EthtoolIfreq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _union_rest: [u8; 16],
}

/// An AF_INET datagram socket: the handle for interface ioctls in the
/// namespace of the thread that created it.
struct IfSock(OwnedFd);

impl IfSock {
    fn new() -> std::io::Result<Self> {
        let fd = rustix::net::socket_with(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::DGRAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )?;
        Ok(IfSock(fd))
    }

    /// `SIOCGIFINDEX`.
    fn ifindex(&self, dev: &str) -> std::io::Result<u32> {
        check_ifname(dev)?;
        Ok(rustix::net::netdevice::name_to_index(&self.0, dev)?)
    }

    /// `SIOCGIFFLAGS`: the device's flags (`IFF_*`).
    fn flags(&self, dev: &str) -> std::io::Result<u32> {
        check_ifname(dev)?;
        // SAFETY: ifreq is plain data; zeroed is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, &b) in ifr.ifr_name.iter_mut().zip(dev.as_bytes()) {
            *d = b as libc::c_char;
        }
        // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags
        // into `ifr`, a live local of the kernel's layout.
        let r = unsafe { libc::ioctl(self.0.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut ifr) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: SIOCGIFFLAGS filled the union's flags member.
        Ok(unsafe { ifr.ifr_ifru.ifru_flags } as u16 as u32)
    }

    /// `SIOCETHTOOL` with the request `data` (a `struct ethtool_*` whose
    /// first `u32` is the command, as 32-bit words so that it is aligned);
    /// returns the ioctl's non-negative result.
    fn ethtool(&self, dev: &str, data: &mut [u32]) -> std::io::Result<i32> {
        check_ifname(dev)?;
        let mut ifr = EthtoolIfreq {
            name: [0; libc::IFNAMSIZ],
            data: data.as_mut_ptr().cast(),
            _union_rest: [0; 16],
        };
        ifr.name[..dev.len()].copy_from_slice(dev.as_bytes());
        // SAFETY: SIOCETHTOOL reads the ifreq `ifr` (laid out as the
        // kernel's, at least as large) and, through its data pointer, reads
        // and writes the request in `data`. Both outlive the call, and each
        // caller sizes `data` for what its command's length fields (count,
        // len, size) announce, which is all the kernel will touch.
        let r = unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SIOCETHTOOL as _,
                &mut ifr as *mut EthtoolIfreq,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(r)
    }

    /// The device's feature names, indexed by feature bit
    /// (`ETHTOOL_GSSET_INFO` + `ETHTOOL_GSTRINGS` of `ETH_SS_FEATURES`).
    fn feature_names(&self, dev: &str) -> std::io::Result<Vec<String>> {
        // struct ethtool_sset_info { u32 cmd, reserved; u64 sset_mask;
        //     u32 data[]; } with room for one count.
        let mask = (1u64 << ETH_SS_FEATURES).to_ne_bytes();
        let mut info = [0u32; 5];
        info[0] = ETHTOOL_GSSET_INFO;
        info[2] = u32::from_ne_bytes([mask[0], mask[1], mask[2], mask[3]]);
        info[3] = u32::from_ne_bytes([mask[4], mask[5], mask[6], mask[7]]);
        self.ethtool(dev, &mut info)?;
        let mut answered = [0u8; 8];
        answered[..4].copy_from_slice(&info[2].to_ne_bytes());
        answered[4..].copy_from_slice(&info[3].to_ne_bytes());
        if u64::from_ne_bytes(answered) & (1 << ETH_SS_FEATURES) == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "no feature names (ETH_SS_FEATURES)",
            ));
        }
        let n = info[4] as usize;
        // struct ethtool_gstrings { u32 cmd, string_set, len; u8 data[len * 32]; }
        let mut buf = vec![0u32; 3 + n * ETH_GSTRING_LEN / 4];
        buf[..3].copy_from_slice(&[ETHTOOL_GSTRINGS, ETH_SS_FEATURES, n as u32]);
        self.ethtool(dev, &mut buf)?;
        let bytes: Vec<u8> = buf[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(bytes
            .chunks(ETH_GSTRING_LEN)
            .map(|c| {
                let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                String::from_utf8_lossy(&c[..end]).into_owned()
            })
            .collect())
    }

    /// Switches off every feature whose name matches one of `patterns`
    /// (`ETHTOOL_SFEATURES`, as `ethtool -K` does). Features the device
    /// cannot change (`[fixed]`) stay as they are, as with ethtool.
    fn features_off(&self, dev: &str, patterns: &[&str]) -> std::io::Result<()> {
        let names = self.feature_names(dev)?;
        // struct ethtool_sfeatures { u32 cmd, size;
        //     struct { u32 valid, requested; } features[size]; }
        let words = names.len().div_ceil(32);
        let mut req = vec![0u32; 2 + 2 * words];
        req[0] = ETHTOOL_SFEATURES;
        req[1] = words as u32;
        let mut any = false;
        for (bit, name) in names.iter().enumerate() {
            if patterns.iter().any(|p| feature_matches(p, name)) {
                req[2 + 2 * (bit / 32)] |= 1 << (bit % 32); // valid; requested: 0
                any = true;
            }
        }
        if !any {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no feature named like {}", patterns.join(", ")),
            ));
        }
        self.ethtool(dev, &mut req).map(|_| ())
    }
}

/// An interface name the kernel can take: 1 to 15 bytes, no NUL.
fn check_ifname(dev: &str) -> std::io::Result<()> {
    if dev.is_empty() || dev.len() >= libc::IFNAMSIZ || dev.contains('\0') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("bad interface name {dev:?}"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// rtnetlink

/// A minimal rtnetlink client for the calling thread's namespace: one
/// request at a time, each acknowledged; the messages are the ones `ip`
/// sends for `link set DEV up`, `addr add A/N dev DEV` and
/// `route add default via GW`.
struct Rtnl {
    sock: Socket,
    seq: u32,
}

impl Rtnl {
    fn new() -> std::io::Result<Self> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Ok(Rtnl { sock, seq: 0 })
    }

    /// Sends `msg` as a request with `NLM_F_ACK` (plus `flags`) and waits
    /// for the kernel's answer to it: `Ok` for an acknowledgement, the
    /// errno of a refusal otherwise.
    fn request(&mut self, msg: RouteNetlinkMessage, flags: u16) -> std::io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags | NLM_F_REQUEST | NLM_F_ACK;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.sock.send(&buf, 0)?;
        let bad = |e: netlink_packet_core::DecodeError| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("malformed netlink answer: {e}"),
            )
        };
        loop {
            let answer = match self.sock.recv_from_full() {
                Ok((b, _)) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let mut off = 0;
            while off < answer.len() {
                let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&answer[off..])
                    .map_err(bad)?;
                let len = m.header.length as usize;
                if m.header.sequence_number == self.seq {
                    if let NetlinkPayload::Error(e) = m.payload {
                        return match e.code {
                            None => Ok(()),
                            Some(_) => Err(e.to_io()),
                        };
                    }
                }
                if len == 0 {
                    break;
                }
                off += len.next_multiple_of(4);
            }
        }
    }

    /// `ip link set DEV up`: RTM_NEWLINK changing only IFF_UP.
    fn link_up(&mut self, index: u32) -> std::io::Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        self.request(RouteNetlinkMessage::NewLink(m), 0)
    }

    /// `ip addr add ADDR/LEN dev DEV` (IPv6: `... nodad`, usable at once).
    fn addr_add(&mut self, index: u32, addr: IpAddr, len: u8) -> std::io::Result<()> {
        let mut m = AddressMessage::default();
        m.header.family = match addr {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        };
        m.header.prefix_len = len;
        m.header.scope = AddressScope::Universe;
        m.header.index = index;
        m.attributes = vec![
            AddressAttribute::Local(addr),
            AddressAttribute::Address(addr),
        ];
        if addr.is_ipv6() {
            m.header.flags = AddressHeaderFlags::Nodad;
            m.attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
        self.request(
            RouteNetlinkMessage::NewAddress(m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// `ip route add default via GW` (main table).
    fn default_route(&mut self, gw: IpAddr) -> std::io::Result<()> {
        let mut m = RouteMessage::default();
        m.header.address_family = match gw {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        };
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.header.protocol = RouteProtocol::Boot;
        m.header.scope = RouteScope::Universe;
        m.header.kind = RouteType::Unicast;
        m.attributes = vec![RouteAttribute::Gateway(RouteAddress::from(gw))];
        self.request(RouteNetlinkMessage::NewRoute(m), NLM_F_CREATE | NLM_F_EXCL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_readiness_from_if_inet6() {
        let devs = vec!["eth0".to_string(), "rt-s0".to_string()];
        let ready = "00000000000000000000000000000001 01 80 10 80       lo\n\
                     fd000ccc000000000000000000000002 02 40 00 82     eth0\n\
                     fe80000000000000b89390fffed51071 02 40 20 80     eth0\n\
                     fe800000000000000000000000000009 03 40 20 80    rt-s0\n";
        assert_eq!(ipv6_not_ready(ready, &devs), (vec![], vec![]));
        // The failed CI run: the link-local address still tentative (0xc0).
        let tentative = ready.replace("20 80     eth0", "20 c0     eth0");
        assert_eq!(
            ipv6_not_ready(&tentative, &devs),
            (
                vec![],
                vec!["fe80000000000000b89390fffed51071 on eth0".to_string()]
            )
        );
        // Before linkwatch: no link-local address on rt-s0 yet.
        let no_ll: String = ready
            .lines()
            .filter(|l| !l.ends_with("rt-s0"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            ipv6_not_ready(&no_ll, &devs),
            (vec!["rt-s0".to_string()], vec![])
        );
        // Other devices (lo, an unrelated one) are not judged.
        assert_eq!(ipv6_not_ready("", &[]), (vec![], vec![]));
    }

    #[test]
    fn offload_feature_patterns() {
        let off = |n: &str| NO_OFFLOADS.iter().any(|p| feature_matches(p, n));
        for n in [
            "tx-tcp-segmentation",
            "tx-tcp-ecn-segmentation",
            "tx-tcp-mangleid-segmentation",
            "tx-tcp6-segmentation",
            "tx-tcp-accecn-segmentation",
            "tx-generic-segmentation",
            "rx-gro",
        ] {
            assert!(off(n), "{n}");
        }
        for n in [
            "rx-gro-list",
            "rx-gro-hw",
            "tx-udp-segmentation",
            "tx-tcp",
            "rx-lro",
        ] {
            assert!(!off(n), "{n}");
        }
    }

    #[test]
    fn failed_ns_setup_names_namespace_and_step() {
        use std::net::Ipv4Addr;
        let ns = super::super::netns::ScratchNs::new().unwrap();
        let mut s = NsSetup::new(&ns.0);
        s.addrs
            .push(("nodev0".into(), Ipv4Addr::new(198, 18, 0, 1).into(), 24));
        let msg = s.apply().unwrap_err().to_string();
        assert!(
            msg.contains(&format!("namespace {}: looking up nodev0", ns.0)),
            "{msg}"
        );
        let mut s = NsSetup::new(&ns.0);
        s.gateway = Some(Ipv4Addr::new(198, 18, 0, 1).into()); // unreachable: no address
        let msg = s.apply().unwrap_err().to_string();
        assert!(
            msg.contains("adding default route via 198.18.0.1 (RTM_NEWROUTE)"),
            "{msg}"
        );
        let missing = NsSetup::new("ccctl-no-such-namespace").apply();
        assert!(missing
            .unwrap_err()
            .to_string()
            .contains("entering network namespace /run/netns/ccctl-no-such-namespace"),);
    }
}
