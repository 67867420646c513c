//! The bottleneck and the path delays as `tc` sees them: the qdisc scripts
//! (tbf, fq_codel, netem, the ifb loss path), the formulas that size them
//! (BDP, buffers, tbf's burst), probing which qdiscs this kernel has, and
//! reading the bottleneck's counters back.
//!
//! Byte counts are as the qdiscs count them on a veth: the IP packet plus
//! [`ETH_HLEN`] bytes of Ethernet header, so a full-size frame is
//! `mtu + 14` bytes.
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::exec::run;
use super::link::{IFB_DEV, RECEIVER_DEV, ROUTER_RX_DEV};
use super::netns::ScratchNs;
use super::{router_sender_dev, Error, Reorder, Result, TestbedConfig};

/// Ethernet header bytes counted by qdiscs on a veth on top of the IP packet.
pub const ETH_HLEN: u64 = 14;
/// Packet limit of the ACK-path netem queues (large: never the bottleneck).
const NETEM_LIMIT: u32 = 100_000;

/// Bandwidth-delay product in bytes.
pub fn bdp_bytes(rate_bps: u64, rtt: Duration) -> u64 {
    (rate_bps as u128 * rtt.as_nanos() / 8 / 1_000_000_000) as u64
}

/// `mult` × BDP, in bytes (never less than one full frame at `mtu`).
pub fn buffer_bdp(rate_bps: u64, rtt: Duration, mult: f64, mtu: u32) -> u64 {
    ((bdp_bytes(rate_bps, rtt) as f64 * mult).round() as u64).max(mtu as u64 + ETH_HLEN)
}

/// `n` full-size frames at `mtu`, in bytes as the qdisc counts them.
pub fn buffer_packets(n: u64, mtu: u32) -> u64 {
    n * (mtu as u64 + ETH_HLEN)
}

/// Tokens tbf may bank, in ms of the link rate. tbf discards tokens above its
/// bucket, so every ms its watchdog timer fires late beyond this is link
/// time lost for good. 1 ms was enough on an idle host; in a TCG guest on a
/// busy machine, 10 Mbit/s links carried only 68-82 % of the rate with 1 ms
/// and 93-96 % with 10 ms (same boot, same load, alternating runs).
pub const TBF_BURST_MS: u64 = 10;

/// The tbf bucket size used for `rate_bps` at `mtu`:
/// `max(2 * (mtu + 14), ceil(rate_bps / 8 * TBF_BURST_MS / 1000))` bytes.
pub fn tbf_burst(rate_bps: u64, mtu: u32) -> u64 {
    (2 * (mtu as u64 + ETH_HLEN)).max((rate_bps / 8).div_ceil(1000 / TBF_BURST_MS))
}

/// Queue management at the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Aqm {
    /// tbf's own byte FIFO of `buffer_bytes`.
    #[default]
    TailDrop,
    /// fq_codel child of tbf, `limit = ceil(buffer_bytes / (mtu + 14))` packets;
    /// on the userspace path, ccctl-path's RFC 8290 FQ-CoDel with the same
    /// byte limit.
    FqCodel,
    /// RFC 8289 CoDel over one FIFO (userspace path only).
    CoDel,
}

impl Aqm {
    /// The userspace path's queue for this discipline.
    pub fn queue_kind(self) -> ccctl_path::QueueKind {
        match self {
            Aqm::TailDrop => ccctl_path::QueueKind::TailDrop,
            Aqm::FqCodel => ccctl_path::QueueKind::FqCodel,
            Aqm::CoDel => ccctl_path::QueueKind::CoDel,
        }
    }
}

// ---------------------------------------------------------------------------
// Scripts

/// The router's `tc` script: the bottleneck on `to_rx` and, for each
/// sender with a non-zero RTT, the whole base RTT on its ACK path
/// (router -> sender egress).
pub(super) fn router_qdiscs(c: &TestbedConfig) -> Vec<String> {
    let mut lines = vec![format!(
        "qdisc add dev {ROUTER_RX_DEV} root handle 1: tbf rate {}bit burst {} limit {}",
        c.rate_bps,
        tbf_burst(c.rate_bps, c.mtu),
        c.buffer_bytes
    )];
    match c.aqm {
        // CoDel is the userspace path's only (TestbedConfig::validate).
        Aqm::TailDrop | Aqm::CoDel => {}
        Aqm::FqCodel => {
            let pkts = c.buffer_bytes.div_ceil(c.mtu as u64 + ETH_HLEN).max(1);
            lines.push(format!(
                "qdisc add dev {ROUTER_RX_DEV} parent 1:1 handle 10: fq_codel limit {pkts}"
            ));
        }
    }
    for (i, s) in c.senders.iter().enumerate() {
        let dev = router_sender_dev(i);
        match s.gate {
            // The gate's taprio takes to_sN's root (added last, see
            // gate_qdiscs), so a gated sender's base RTT moves to its data
            // path before the bottleneck: to_sN ingress redirected to ifbgN,
            // whose root is the netem delay.
            Some(_) if !s.rtt.is_zero() => {
                let ifb = gate_ifb_dev(i);
                lines.push(format!(
                    "qdisc add dev {ifb} root netem delay {}us limit {NETEM_LIMIT}",
                    s.rtt.as_micros()
                ));
                lines.push(format!("qdisc add dev {dev} handle ffff: ingress"));
                lines.push(format!(
                    "filter add dev {dev} parent ffff: protocol all u32 match u32 0 0 \
                     action mirred egress redirect dev {ifb}"
                ));
            }
            None if !s.rtt.is_zero() => lines.push(format!(
                "qdisc add dev {dev} root handle 1: netem delay {}us limit {NETEM_LIMIT}",
                s.rtt.as_micros()
            )),
            _ => {}
        }
    }
    lines
}

/// The router's ifb device carrying gated sender `i`'s base RTT.
pub(super) fn gate_ifb_dev(i: usize) -> String {
    format!("ifbg{i}")
}

/// A sender host's On/Off schedule (a descheduled VM, the patched-BBR paper
/// Sec. III-C): its link carries packets, both ways, only during the first
/// `on` of every `on + off`, cycles aligned to CLOCK_TAI multiples of
/// `on + off` (taprio base-time 0). One type for both path emulators.
pub use ccctl_path::GateSchedule as Gate;

/// The `taprio` root of `dev` for gate `g`: one traffic class on queue 0
/// that every priority maps to, gate open for `on`, closed for `off`, TAI
/// clock, base-time 0 (so every gate of a testbed opens and closes
/// together).
fn taprio_line(g: &Gate, dev: &str) -> String {
    format!(
        "qdisc add dev {dev} root handle {GATE_HANDLE}: {}",
        taprio_args(g)
    )
}

fn taprio_args(g: &Gate) -> String {
    format!(
        "taprio num_tc 1 map 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 queues 1@0 base-time 0 \
         sched-entry S 01 {} sched-entry S 00 {} clockid CLOCK_TAI",
        g.on.as_nanos(),
        g.off.as_nanos()
    )
}

/// Handle of a gate's taprio root.
const GATE_HANDLE: u32 = 100;

/// The gate of sender `i`'s link, both directions, as `(namespace role,
/// tc lines)` run last in [`Testbed::build`](super::Testbed): the sender's
/// `eth0` root (its transmissions) and the router's `to_sN` root (what the
/// router sends it). It must be installed on links that are up with their
/// carrier settled and after any other qdisc of the same device: in 6.1 a
/// reset of taprio (`dev_deactivate`, which a carrier-off and the grafting
/// of an ingress qdisc on the device both run) cancels its schedule timer
/// and nothing restarts it, so the gate then stays frozen in whatever state
/// it was (measured in the VM: an ingress qdisc added after the router's
/// taprio let every packet through in one run and held every packet for
/// good in three others).
pub(super) fn gate_qdiscs(g: &Gate, i: usize) -> (Vec<String>, Vec<String>) {
    (
        vec![taprio_line(g, super::SENDER_DEV)],
        vec![taprio_line(g, &router_sender_dev(i))],
    )
}

/// Whether taprio (the sender On/Off gate) works here.
pub fn taprio_available() -> Result<bool> {
    let g = Gate {
        on: Duration::from_millis(1),
        off: Duration::from_millis(1),
    };
    let args = taprio_args(&g);
    let args: Vec<&str> = args.split_whitespace().skip(1).collect();
    qdisc_available("taprio", &args)
}

/// The receiver's `tc` script for the data path after the bottleneck:
/// `eth0` ingress redirected to the ifb device, whose root netem drops a
/// fraction `loss` and reorders as `reorder` says.
pub(super) fn data_path_qdiscs(loss: f64, reorder: Option<Reorder>) -> Vec<String> {
    vec![
        data_path_netem_line("add", loss, reorder),
        format!("qdisc add dev {RECEIVER_DEV} handle ffff: ingress"),
        format!(
            "filter add dev {RECEIVER_DEV} parent ffff: protocol all u32 match u32 0 0 \
             action mirred egress redirect dev {IFB_DEV}"
        ),
    ]
}

/// `tc qdisc <verb>` of the ifb device's netem: drop a fraction `loss`,
/// reorder as `reorder` says (`add` when built, `change` for
/// [`super::Testbed::set_loss`], which must repeat the reordering: a netem
/// change resets every option it does not name).
pub(super) fn data_path_netem_line(verb: &str, loss: f64, reorder: Option<Reorder>) -> String {
    let reorder = reorder.map_or(String::new(), |r| {
        format!(
            " delay {}us reorder {}% 50%",
            r.delay.as_micros(),
            r.share * 100.0
        )
    });
    format!(
        "qdisc {verb} dev {IFB_DEV} root netem loss {}%{reorder} limit {NETEM_LIMIT}",
        loss * 100.0
    )
}

// ---------------------------------------------------------------------------
// What this kernel has

/// Best-effort `modprobe` of the modules the testbed may use (once per
/// process, one process: `-a` loads every module named and carries on past
/// ones that fail or do not exist).
pub(super) fn modprobe_all() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = Command::new("modprobe")
            .args(["-a", "-q"])
            .args([
                "sch_netem",
                "sch_tbf",
                "sch_taprio",
                "sch_htb",
                "sch_fq",
                "sch_fq_codel",
                "ifb",
                "act_mirred",
                "cls_u32",
                "sch_ingress",
                "veth",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    });
}

/// Whether the kernel accepts `tc qdisc add … root <kind> <args>` (probed
/// once per kind in a throwaway namespace, result cached).
pub fn qdisc_available(kind: &str, args: &[&str]) -> Result<bool> {
    static CACHE: OnceLock<Mutex<BTreeMap<String, bool>>> = OnceLock::new();
    let cache = || {
        CACHE
            .get_or_init(|| Mutex::new(BTreeMap::new()))
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    };
    if let Some(&b) = cache().get(kind) {
        return Ok(b);
    }
    modprobe_all();
    let ns = ScratchNs::new()?;
    // The qdisc goes away with the namespace; no `tc qdisc del` needed.
    let ok = run(Command::new("tc")
        .args([
            "-n", &ns.0, "qdisc", "add", "dev", "p0", "root", "handle", "1:", kind,
        ])
        .args(args))
    .is_ok();
    drop(ns);
    cache().insert(kind.to_string(), ok);
    Ok(ok)
}

/// Whether netem works here (false on the host kernel, true in the VM).
pub fn netem_available() -> Result<bool> {
    qdisc_available("netem", &["delay", "1ms"])
}

/// Whether fq_codel works here.
pub fn fq_codel_available() -> Result<bool> {
    qdisc_available("fq_codel", &[])
}

// ---------------------------------------------------------------------------
// Counters

/// Counters of the bottleneck qdisc (`tc -s -j qdisc show`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QdiscStats {
    pub kind: String,
    pub bytes: u64,
    pub packets: u64,
    pub drops: u64,
    pub overlimits: u64,
    pub requeues: u64,
    pub backlog: u64,
    pub qlen: u64,
}

/// Extracts the counters of the qdisc with `handle` from `tc -s -j qdisc show`.
pub fn parse_qdisc_stats(json: &str, handle: &str) -> Result<QdiscStats> {
    let perr = |detail: String| Error::Parse {
        what: "tc -s -j qdisc show output".into(),
        detail,
    };
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| perr(e.to_string()))?;
    let arr = v
        .as_array()
        .ok_or_else(|| perr("not a JSON array".into()))?;
    let q = arr
        .iter()
        .find(|q| q.get("handle").and_then(|h| h.as_str()) == Some(handle))
        .ok_or_else(|| perr(format!("no qdisc with handle {handle}")))?;
    let n = |k: &str| q.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
    Ok(QdiscStats {
        kind: q
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_string(),
        bytes: n("bytes"),
        packets: n("packets"),
        drops: n("drops"),
        overlimits: n("overlimits"),
        requeues: n("requeues"),
        backlog: n("backlog"),
        qlen: n("qlen"),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Testbed, TestbedConfig};
    use super::*;
    use crate::netns::list_netns;
    use crate::NS_PREFIX;

    #[test]
    fn burst_formula() {
        // 1 Mbit/s: two full frames dominate.
        assert_eq!(tbf_burst(1_000_000, 1500), 3028);
        // 10 Mbit/s: 10 ms = 12500 B, about 8 frames.
        assert_eq!(tbf_burst(10_000_000, 1500), 12_500);
        // 50 Mbit/s: 62.5 kB.
        assert_eq!(tbf_burst(50_000_000, 1500), 62_500);
    }

    #[test]
    fn buffer_helpers() {
        assert_eq!(bdp_bytes(50_000_000, Duration::from_millis(10)), 62_500);
        assert_eq!(
            buffer_bdp(50_000_000, Duration::from_millis(10), 2.0, 1500),
            125_000
        );
        assert_eq!(
            buffer_bdp(1_000_000, Duration::from_micros(10), 1.0, 1500),
            1514
        );
        assert_eq!(buffer_packets(100, 1500), 151_400);
    }

    #[test]
    fn qdisc_stats_json() {
        let j = r#"[{"kind":"tbf","handle":"1:","root":true,"refcnt":3,"options":{"rate":6250000,"burst":6250,"lat":9000},"bytes":123,"packets":4,"drops":5,"overlimits":6,"requeues":0,"backlog":1514,"qlen":1}]"#;
        let s = parse_qdisc_stats(j, "1:").unwrap();
        assert_eq!(
            (s.kind.as_str(), s.bytes, s.drops, s.backlog, s.qlen),
            ("tbf", 123, 5, 1514, 1)
        );
    }

    // The qdisc scripts doing their job in a flow (netem, fq_codel, ifb
    // loss) are a VM test: tests/vm/main.rs, netem_loss_and_fq_codel_in_place.

    #[test]
    fn probes_and_missing_features() {
        let netem = netem_available().unwrap();
        let fqc = fq_codel_available().unwrap();
        eprintln!("netem {netem}, fq_codel {fqc}");
        assert!(
            qdisc_available("tbf", &["rate", "1mbit", "burst", "3028", "limit", "10000"]).unwrap()
        );
        if !netem {
            let cfg =
                TestbedConfig::new(10_000_000, 100_000).with_rtts(&[Duration::from_millis(20)]);
            assert!(matches!(Testbed::new(cfg), Err(Error::NetemMissing { .. })));
        }
        if !fqc {
            let cfg = TestbedConfig::new(10_000_000, 100_000).with_aqm(Aqm::FqCodel);
            assert!(matches!(Testbed::new(cfg), Err(Error::QdiscMissing { .. })));
        }
        // No probe namespace left behind.
        let me = format!("{NS_PREFIX}{}-", std::process::id());
        assert!(!list_netns()
            .iter()
            .any(|n| n.starts_with(&me) && n.ends_with("-probe")));
    }
}
