//! Live tests of the testbed that run flows (they need ccctl-lab's iperf3
//! driver and socket sampler; the testbed's own are in ccctl-testbed).
use std::path::Path;
use std::thread;
use std::time::Duration;

use crate::iperf::{self, FlowSpec};
use crate::testbed::inspect::{list_netns, live, netns_pids, ns_id, NsId};
use crate::testbed::*;
use ccctl_observe::sockdiag::{Sample, Sampler, SamplerConfig};

/// A process exists and is not a zombie.
fn alive_not_zombie(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn cubic_flow_through_router_tbf() {
    let rate = 50_000_000;
    let buffer = buffer_bdp(rate, Duration::from_millis(10), 1.0, 1500); // 62 500 B
    let tb = Testbed::new(TestbedConfig::new(rate, buffer)).unwrap();
    let names: Vec<String> = [Role::Sender(0), Role::Router, Role::Receiver]
        .iter()
        .map(|&r| tb.ns(r))
        .collect();
    for n in &names {
        assert!(list_netns().contains(n), "{n} missing");
    }
    let sender = ccctl_sys::netns::named(&tb.ns(Role::Sender(0)));
    let sampler = Sampler::start(&sender, SamplerConfig::default()).unwrap();
    let r = iperf::run_flow(&tb, &FlowSpec::new(0, "cubic", Duration::from_secs(5))).unwrap();
    let samples = sampler.stop();
    let stats = tb.bottleneck_stats().unwrap();
    eprintln!(
        "goodput {:.2} Mbit/s, retrans {}, rtt min/mean/max {:?}/{:?}/{:?} us, tbf {:?}",
        r.goodput_bps / 1e6,
        r.retransmits,
        r.min_rtt_us,
        r.mean_rtt_us,
        r.max_rtt_us,
        stats
    );
    assert!(
        r.goodput_bps >= 0.85 * rate as f64,
        "goodput {}",
        r.goodput_bps
    );
    assert!(
        r.goodput_bps <= 1.02 * rate as f64,
        "goodput {} above the tbf rate",
        r.goodput_bps
    );
    assert_eq!(r.sender_cc.as_deref(), Some("cubic"));
    assert!(r.intervals.len() >= 5);
    assert_eq!(stats.kind, "tbf");
    assert!(
        stats.drops > 0,
        "cubic should overflow a 1-BDP tail-drop buffer"
    );

    let port = r.local_port.unwrap();
    let data: Vec<&Sample> = samples
        .for_local_port(port)
        .flat_map(|s| &s.samples)
        .collect();
    eprintln!(
        "inet_diag: {} ticks, {} failures, {} data-socket records",
        samples.ticks,
        samples.failures,
        data.len()
    );
    assert!(
        data.len() >= 30,
        "only {} samples of the data socket",
        data.len()
    );
    assert!(samples.for_local_port(port).all(|s| s.cc == ["cubic"]));
    let cwnds: Vec<u32> = data.iter().map(|d| d.info.snd_cwnd).collect();
    let max = *cwnds.iter().max().unwrap();
    let mean = cwnds.iter().sum::<u32>() as f64 / cwnds.len() as f64;
    eprintln!("cwnd mean {mean:.1} max {max}");
    // BDP+buffer at ~0 base RTT is ~43 packets; cwnd should be in that region.
    assert!(mean >= 4.0 && max <= 400, "cwnd mean {mean} max {max}");
    assert!(
        data.iter().any(|d| d.info.rtt_us > 1000),
        "queueing delay not visible in srtt"
    );

    // A daemonised process inside a namespace must be killed by Drop.
    tb.exec(
        Role::Receiver,
        &["iperf3", "-s", "-D", "-p", "5999", "-B", "198.18.0.2"],
    )
    .unwrap();
    thread::sleep(Duration::from_millis(200));
    let pids = netns_pids(&tb.ns(Role::Receiver));
    assert!(!pids.is_empty());
    drop(tb);
    let left = list_netns();
    for n in &names {
        assert!(!left.contains(n), "{n} survived drop");
    }
    for p in pids {
        assert!(!alive_not_zombie(p), "pid {p} survived drop");
    }
}

#[test]
fn two_senders_concurrent_with_offset() {
    let rate = 40_000_000;
    let tb = Testbed::new(
        TestbedConfig::new(rate, buffer_packets(40, 1500))
            .with_rtts(&[Duration::ZERO, Duration::ZERO]),
    )
    .unwrap();
    let specs = [
        FlowSpec::new(0, "bbr", Duration::from_secs(3)).interval(Duration::from_millis(500)),
        FlowSpec::new(1, "cubic", Duration::from_secs(2)).start_offset(Duration::from_secs(1)),
    ];
    let running = iperf::spawn_flows(&tb, &specs).unwrap();
    let res = running.wait().unwrap();
    assert_eq!(res[0].sender_cc.as_deref(), Some("bbr"));
    assert_eq!(res[1].sender_cc.as_deref(), Some("cubic"));
    assert_ne!(res[0].server_port, res[1].server_port);
    assert!(res[0].intervals.len() >= 6);
    let t1 = res[1].report.start.timestamp.timesecs as f64;
    let t0 = res[0].report.start.timestamp.timesecs as f64;
    assert!(
        t1 - t0 >= 0.0 && t1 - t0 <= 2.0,
        "offset not applied: {t0} {t1}"
    );
    let total: f64 = res
        .iter()
        .map(|r| r.receiver_bytes as f64 * 8.0)
        .sum::<f64>()
        / 3.0;
    eprintln!(
        "bbr {:.1} Mbit/s ({} retrans), cubic {:.1} Mbit/s ({} retrans), link use {:.1}%",
        res[0].goodput_bps / 1e6,
        res[0].retransmits,
        res[1].goodput_bps / 1e6,
        res[1].retransmits,
        100.0 * total / rate as f64
    );
    assert!(total >= 0.8 * rate as f64);
    assert!(res.iter().all(|r| r.goodput_bps > 1e6));
}

/// `(st_dev, st_ino)` of the calling thread's network namespace.
fn own_netns() -> NsId {
    ns_id(Path::new("/proc/thread-self/ns/net")).unwrap()
}

fn sysctl(tb: &Testbed, role: Role, key: &str) -> String {
    let out = tb.exec(role, &["sysctl", "-n", key]).unwrap();
    let v = String::from_utf8_lossy(&out.stdout);
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The process-free set-up lands inside each namespace and nowhere else:
/// sysctls (read back by `sysctl` run in the namespace), every veth end
/// up with offloads off (`ethtool -k`), addresses and routes (a flow from
/// every sender through the router), the bottleneck qdisc; the calling
/// thread's namespace and the host's sysctls are untouched; nothing is
/// left after `destroy`.
#[test]
fn three_senders_set_up_in_their_namespaces() {
    let host_rmem = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem").unwrap();
    let host_fwd = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let before = own_netns();
    let tb = Testbed::new(TestbedConfig::new(20_000_000, 100_000).with_rtts(&[Duration::ZERO; 3]))
        .unwrap();
    assert_eq!(own_netns(), before, "Testbed::new moved the calling thread");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem").unwrap(),
        host_rmem
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
        host_fwd
    );

    let mut roles = vec![Role::Router, Role::Receiver];
    roles.extend((0..3).map(Role::Sender));
    for &r in &roles {
        assert_eq!(sysctl(&tb, r, "net.ipv4.tcp_no_metrics_save"), "1", "{r}");
        assert_eq!(
            sysctl(&tb, r, "net.ipv4.tcp_rmem"),
            "4096 131072 67108864",
            "{r}"
        );
        assert_eq!(
            sysctl(&tb, r, "net.ipv4.tcp_wmem"),
            "4096 16384 67108864",
            "{r}"
        );
        let fwd = if r == Role::Router { "1" } else { "0" };
        assert_eq!(sysctl(&tb, r, "net.ipv4.ip_forward"), fwd, "{r}");
        let lo = tb.exec(r, &["ip", "-o", "link", "show", "lo"]).unwrap();
        assert!(
            String::from_utf8_lossy(&lo.stdout).contains(",UP"),
            "{r}: lo down"
        );
    }

    let mut ends = vec![
        (Role::Router, ROUTER_RX_DEV.to_string()),
        (Role::Receiver, RECEIVER_DEV.to_string()),
    ];
    for i in 0..3 {
        ends.push((Role::Sender(i), SENDER_DEV.to_string()));
        ends.push((Role::Router, router_sender_dev(i)));
    }
    for (r, dev) in &ends {
        let out = tb.exec(*r, &["ethtool", "-k", dev]).unwrap();
        let k = String::from_utf8_lossy(&out.stdout);
        for f in [
            "tcp-segmentation-offload",
            "generic-segmentation-offload",
            "generic-receive-offload",
        ] {
            let line = k
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{f}:")))
                .unwrap_or_else(|| panic!("{r} {dev}: no {f} in {k}"));
            assert!(line.contains(": off"), "{r} {dev}: {line}");
        }
        let link = tb.exec(*r, &["ip", "-o", "link", "show", dev]).unwrap();
        let link = String::from_utf8_lossy(&link.stdout);
        assert!(
            link.contains("state UP") && link.contains("mtu 1500 "),
            "{r}: {link}"
        );
    }

    let specs: Vec<FlowSpec> = (0..3)
        .map(|i| FlowSpec::new(i, "cubic", Duration::from_secs(1)))
        .collect();
    let res = iperf::spawn_flows(&tb, &specs).unwrap().wait().unwrap();
    for (i, r) in res.iter().enumerate() {
        eprintln!("sender {i}: {:.1} Mbit/s", r.goodput_bps / 1e6);
        assert!(r.receiver_bytes > 0, "sender {i}: nothing received");
    }
    let stats = tb.bottleneck_stats().unwrap();
    assert_eq!(stats.kind, "tbf");
    assert!(stats.packets > 0);

    let prefix = format!("{}-", tb.prefix());
    let names: Vec<String> = roles.iter().map(|&r| tb.ns(r)).collect();
    tb.destroy().unwrap();
    let left: Vec<String> = list_netns()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left after destroy: {left:?}");
    let live = live();
    assert!(names.iter().all(|n| !live.contains(n)), "still registered");
}

/// An IPv6 testbed: the documented unique local addresses on every
/// end, none of them (nor the link-local ones) tentative right after
/// the build (no duplicate address detection), forwarding on in the
/// router only, default routes via the router, and a flow from each
/// of two senders through it at once.
#[test]
fn ipv6_testbed_is_usable_at_once() {
    let tb = Testbed::new(
        TestbedConfig::new(20_000_000, 100_000)
            .with_rtts(&[Duration::ZERO; 2])
            .with_ip(IpVersion::V6),
    )
    .unwrap();
    let addrs = |r: Role, dev: &str| {
        let out = tb
            .exec(r, &["ip", "-6", "-o", "addr", "show", "dev", dev])
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (r, dev, want) in [
        (Role::Receiver, RECEIVER_DEV.to_string(), "fd00:ccc::2/64"),
        (Role::Router, ROUTER_RX_DEV.to_string(), "fd00:ccc::1/64"),
        (
            Role::Sender(0),
            SENDER_DEV.to_string(),
            "fd00:ccc:0:1::1/64",
        ),
        (Role::Router, router_sender_dev(0), "fd00:ccc:0:1::2/64"),
        (
            Role::Sender(1),
            SENDER_DEV.to_string(),
            "fd00:ccc:0:2::1/64",
        ),
        (Role::Router, router_sender_dev(1), "fd00:ccc:0:2::2/64"),
    ] {
        let a = addrs(r, &dev);
        assert!(a.contains(want), "{r} {dev}: {a}");
        assert!(
            a.contains("fe80::"),
            "{r} {dev}: no link-local address: {a}"
        );
        assert!(!a.contains("tentative"), "{r} {dev}: {a}");
    }
    assert_eq!(
        sysctl(&tb, Role::Router, "net.ipv6.conf.all.forwarding"),
        "1"
    );
    assert_eq!(
        sysctl(&tb, Role::Sender(0), "net.ipv6.conf.all.forwarding"),
        "0"
    );
    let route = tb
        .exec(Role::Sender(1), &["ip", "-6", "route", "show", "default"])
        .unwrap();
    assert!(
        String::from_utf8_lossy(&route.stdout).contains("via fd00:ccc:0:2::2"),
        "{}",
        String::from_utf8_lossy(&route.stdout)
    );
    assert_eq!(tb.receiver_addr().to_string(), "fd00:ccc::2");
    let specs: Vec<FlowSpec> = (0..2)
        .map(|i| FlowSpec::new(i, "cubic", Duration::from_secs(1)))
        .collect();
    let res = iperf::spawn_flows(&tb, &specs).unwrap().wait().unwrap();
    for (i, r) in res.iter().enumerate() {
        assert!(r.receiver_bytes > 0, "sender {i}: nothing received");
    }
}
