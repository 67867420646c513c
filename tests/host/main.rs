//! Integration tests on the host kernel (6.18: struct_ops links, the
//! 4-argument cong_control). Run serially: they share the kernel's
//! congestion-control list. `cargo xtask test` runs them.
#[path = "../common/mod.rs"]
mod common;

use common::lifecycle;

#[test]
fn load_registers_and_unload_removes() {
    lifecycle::load_registers_and_unload_removes(true);
}

#[test]
fn load_twice_is_ok() {
    lifecycle::load_twice_is_ok();
}

#[test]
fn default_is_set_and_restored() {
    lifecycle::default_is_set_and_restored();
}

#[test]
fn errors_are_clear_and_change_nothing() {
    lifecycle::errors_are_clear_and_change_nothing();
}

mod flows {
    use ccctl::testbed::{buffer_packets, TestbedConfig};

    use crate::common::{ccctl, flows::*, Clean};

    const RATE_BPS: u64 = 50_000_000;

    /// bpf_bbr carries a flow through a router's tbf bottleneck at >= 85 %
    /// of its rate, and `ss -ti` names it on the socket.
    #[test]
    fn bpf_bbr_fills_a_tbf_bottleneck() {
        let _clean = Clean::new();
        ccctl(&["load", "bbr"]).ok();
        let tb = testbed(TestbedConfig::new(RATE_BPS, buffer_packets(100, 1500)));
        let (flow, seen) = flow_with_ss(&tb, "bpf_bbr", 10);
        println!(
            "host bpf_bbr: {:.1} Mbit/s of {} ({:.0} %), {} retransmits, ss saw {:?}",
            mbit(flow.goodput_bps),
            mbit(RATE_BPS as f64),
            100.0 * flow.goodput_bps / RATE_BPS as f64,
            flow.retransmits,
            seen
        );
        assert_eq!(flow.sender_cc.as_deref(), Some("bpf_bbr"), "iperf3 did not run bpf_bbr");
        assert!(!seen.is_empty(), "ss never saw the data socket");
        assert!(seen.iter().all(|c| c == "bpf_bbr"), "ss saw {seen:?}");
        assert!(
            flow.goodput_bps >= 0.85 * RATE_BPS as f64,
            "goodput {:.1} Mbit/s is below 85 % of {} Mbit/s",
            mbit(flow.goodput_bps),
            mbit(RATE_BPS as f64)
        );
    }

    /// Unloading while a flow uses bpf_bbr is safe (see `unload_mid_flow`).
    #[test]
    fn unload_while_a_flow_runs_is_safe() {
        let _clean = Clean::new();
        unload_mid_flow(TestbedConfig::new(RATE_BPS, buffer_packets(100, 1500)), Some(0.85));
    }
}
