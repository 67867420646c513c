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
fn pins_are_private_and_planted_links_refused() {
    lifecycle::pins_are_private_and_planted_links_refused();
}

#[test]
fn bad_inputs_are_refused_by_name_and_change_nothing() {
    common::catalogue::bad_inputs_are_refused_by_name_and_change_nothing();
}

#[test]
fn errors_are_clear_and_change_nothing() {
    lifecycle::errors_are_clear_and_change_nothing();
}

#[test]
fn load_from_an_object_file() {
    lifecycle::load_from_an_object_file();
}

/// The phase table's reading on drawn flows (no network): see
/// `bbr_phases::analysis_reads_the_spec_and_rejects_wrong_bbrs`.
#[test]
fn bbr_phase_analysis_rejects_wrong_bbrs() {
    common::bbr_phases::analysis_reads_the_spec_and_rejects_wrong_bbrs();
}

/// The retake of attempts the machine starved (forced steal readings):
/// see `common::starved`.
#[test]
fn starved_attempts_are_discarded_whatever_they_measured() {
    common::starved::the_protocol_discards_starved_attempts_whatever_they_measured();
}

#[test]
fn pins_under_the_old_name_move_to_the_new() {
    lifecycle::pins_under_the_old_name_move_to_the_new();
}

#[test]
fn unprivileged_commands_say_what_is_missing_once() {
    lifecycle::unprivileged_commands_say_what_is_missing_once();
}

mod flows {
    use ccctl_lab::testbed::{buffer_bdp, buffer_packets, TestbedConfig};

    use crate::common::{flows::*, Clean};

    const RATE_BPS: u64 = 50_000_000;

    /// bpf_bbr carries a flow through a router's tbf bottleneck at >= 85 %
    /// of its rate, and `ss -ti` names it on the socket.
    #[test]
    fn bpf_bbr_fills_a_tbf_bottleneck() {
        crate::common::starved::unstarved("bpf_bbr_fills_a_tbf_bottleneck", || {
            let _clean = Clean::new();
            let (flow, seen) = loaded_flow(
                "bpf-bbr",
                "bpf_bbr",
                TestbedConfig::new(RATE_BPS, buffer_packets(100, 1500)),
                10,
            );
            assert_carries("bpf_bbr", RATE_BPS as f64, &flow, &seen, 0.85);
        });
    }

    /// Unloading while a flow uses bpf_bbr is safe (see `unload_mid_flow`).
    #[test]
    fn unload_while_a_flow_runs_is_safe() {
        crate::common::starved::unstarved("unload_while_a_flow_runs_is_safe", || {
            let _clean = Clean::new();
            unload_mid_flow(
                TestbedConfig::new(RATE_BPS, buffer_packets(100, 1500)),
                Some(0.85),
            );
        });
    }

    /// modest_bbr (struct_ops link, 4-argument cong_control on this kernel)
    /// carries a flow through the same bottleneck. Its search gives up a
    /// share of BBR's window when the 100-packet buffer overflows; 70 % of
    /// the link is well clear of "does not carry traffic".
    #[test]
    fn modest_bbr_carries_a_flow() {
        crate::common::starved::unstarved("modest_bbr_carries_a_flow", || {
            crate::common::modest::modest_bbr_carries_a_flow(
                TestbedConfig::new(RATE_BPS, buffer_packets(100, 1500)),
                10,
                0.7,
            );
        });
    }

    /// patched_bbr (struct_ops link plus its tp_btf transmit tracer, pinned
    /// beside it) carries a flow through the same bottleneck at 85 %.
    #[test]
    fn patched_bbr_carries_a_flow() {
        crate::common::starved::unstarved("patched_bbr_carries_a_flow", || {
            let _clean = Clean::new();
            let (flow, seen) = loaded_flow(
                "patched-bbr",
                "patched_bbr",
                TestbedConfig::new(RATE_BPS, buffer_packets(100, 1500)),
                10,
            );
            assert_carries("patched_bbr", RATE_BPS as f64, &flow, &seen, 0.85);
        });
    }

    /// Solo, bpf_bbr's throughput within ±5 % and its mean RTT within
    /// ±10 % of the kernel's bbr: 20 Mbit/s, 40 ms, 1 BDP on the userspace
    /// path emulator (a fixed rate: no calibration, no fallback), 20 s
    /// flows in ABBA order, every run of either at >= 80 % of the rate.
    /// It was a VM test while a base RTT needed netem; the VM keeps
    /// bpf_bbr's shared-link check.
    #[test]
    fn solo_bpf_bbr_matches_native_bbr_at_40ms() {
        crate::common::starved::unstarved("solo_bpf_bbr_matches_native_bbr_at_40ms", || {
            let rtt = std::time::Duration::from_millis(40);
            let rate = 20_000_000;
            crate::common::equivalence::solo_bpf_bbr_matches_native_bbr(
                TestbedConfig::new(rate, buffer_bdp(rate, rtt, 1.0, 1500))
                    .with_rtts(&[rtt])
                    .userspace(),
                // One ABBA cycle of 12 s runs: on the host path the runs of one
                // algorithm agree within 0.2 % in goodput and 4 % in mean RTT
                // (CI, 2026-11-25: 8 runs of 20 s, 18.93-18.96 Mbit/s,
                // 44.1-47.8 ms), well inside the test's 5 % and 10 %.
                12,
                &["bbr", "bpf_bbr", "bpf_bbr", "bbr"],
                "host-equivalence-solo.txt",
            );
        });
    }

    /// bpf_bbr and the kernel's bbr sharing one link (20 Mbit/s, 40 ms,
    /// 1 BDP, userspace path): bpf_bbr's mean share 45-55 % over ABBA runs.
    /// It was a VM test (8 runs of 40 s there: sd 5-9 points a run, the
    /// start decided by late timers). Here, 2026-11-25 (61ce88f + this
    /// change, machine busy with builds): 8 runs of 20 s, mean 48.8 %, sd
    /// 3.6 points, standard error 1.3: a fair port leaves 45-55 % with
    /// probability ~1e-4, one biased to 58 % passes with ~1 %.
    #[test]
    fn bpf_bbr_and_native_bbr_share_a_link_at_40ms() {
        crate::common::starved::unstarved("bpf_bbr_and_native_bbr_share_a_link_at_40ms", || {
            let rtt = std::time::Duration::from_millis(40);
            let rate = 20_000_000;
            crate::common::equivalence::bpf_bbr_and_native_bbr_share_a_link(
                TestbedConfig::new(rate, buffer_bdp(rate, rtt, 1.0, 1500))
                    .with_rtts(&[rtt, rtt])
                    .userspace(),
                20,
                8,
                "host-equivalence-shared.txt",
            );
        });
    }

    /// bpf_bbr's modes and gains against BBR v1's (see the function): 20
    /// Mbit/s, 40 ms, 1 BDP on the userspace path, one 20 s flow (PROBE_RTT
    /// comes once min_rtt is 10 s old; 13 s were too few once, when a lower
    /// RTT sample refreshed min_rtt a few seconds in).
    #[test]
    fn bpf_bbr_phases_follow_bbr_v1_at_40ms() {
        crate::common::starved::unstarved("bpf_bbr_phases_follow_bbr_v1_at_40ms", || {
            let rtt = std::time::Duration::from_millis(40);
            let rate = 20_000_000;
            crate::common::bbr_v1_gains::bpf_bbr_phases_follow_bbr_v1(
                TestbedConfig::new(rate, buffer_bdp(rate, rtt, 1.0, 1500))
                    .with_rtts(&[rtt])
                    .userspace(),
                20,
                false,
            );
        });
    }

    /// The same under loss: every 10th data packet from packet 2000 (some
    /// 1.2 s in, after STARTUP) on is dropped, so the flow recovers from
    /// losses all along; PROBE_RTT must come, hold 4 packets for 200 ms
    /// while recovering, and at least one must see a loss.
    #[test]
    fn bpf_bbr_probe_rtt_holds_under_loss_at_40ms() {
        crate::common::starved::unstarved("bpf_bbr_probe_rtt_holds_under_loss_at_40ms", || {
            let rtt = std::time::Duration::from_millis(40);
            let rate = 20_000_000;
            let list: Vec<u64> = (200..5000).map(|k| 10 * k).collect();
            crate::common::bbr_v1_gains::bpf_bbr_phases_follow_bbr_v1(
                TestbedConfig::new(rate, buffer_bdp(rate, rtt, 1.0, 1500))
                    .with_rtts(&[rtt])
                    .userspace()
                    .with_loss_list(0, &list),
                20,
                true,
            );
        });
    }

    /// bpf_bbr against the kernel's bbr phase by phase (issue 27 item 2):
    /// 20 Mbit/s, 40 ms, 2 BDP on the userspace path emulator, 26 s runs
    /// in ABAB order; the kernel's state from inet_diag (INET_DIAG_BBRINFO)
    /// every 4 ms, bpf_bbr's from its trace. A run's second PROBE_RTT
    /// comes 10 s after the filter's last restamp (a strictly lower RTT
    /// sample restamps it): on 2026-11-29, 23 s runs showed the kernel's
    /// own bbr a second PROBE_RTT in 2 of 10 runs, and in 1 of 5 tables
    /// its side had no dated restamp; 26 s leave room for a restamp up to
    /// 15.7 s. The table is in target/ccctl-figures/host-bbr-phases.txt.
    #[test]
    fn bpf_bbr_phases_match_kernel_bbr() {
        crate::common::starved::unstarved("bpf_bbr_phases_match_kernel_bbr", || {
            let rtt = std::time::Duration::from_millis(40);
            let rate = 20_000_000;
            crate::common::bbr_phases::bpf_bbr_phases_match_kernel_bbr(
                TestbedConfig::new(rate, buffer_bdp(rate, rtt, 2.0, 1500))
                    .with_rtts(&[rtt])
                    .userspace(),
                26,
                &["bbr", "bpf_bbr", "bbr", "bpf_bbr"],
                "host-bbr-phases.txt",
                crate::common::bbr_phases::Judge::Every,
            );
        });
    }

    /// Ungated, with a base RTT (10 Mbit/s, 40 ms, 1 BDP, userspace path):
    /// Pseudocode 2 holds and the mean Θ after a 5 s warm-up is at least
    /// 0.9 (`--stall-filter 1` as in the VM, where it left out the
    /// emulated CPU's stalls).
    #[test]
    fn patched_bbr_theta_stays_near_one_ungated_at_40ms() {
        crate::common::starved::unstarved(
            "patched_bbr_theta_stays_near_one_ungated_at_40ms",
            || {
                use crate::common::patched::{pseudocode2_from_trace, Rule};
                let _clean = Clean::new();
                let rtt = std::time::Duration::from_millis(40);
                let rate = 10_000_000;
                let tb = crate::common::flows::testbed(
                    TestbedConfig::new(rate, buffer_bdp(rate, rtt, 1.0, 1500))
                        .with_rtts(&[rtt])
                        .userspace(),
                );
                let sum = pseudocode2_from_trace(
                    &tb,
                    20,
                    std::time::Duration::from_secs(5),
                    &["--stall-filter", "1"],
                    Rule::DEFAULT,
                );
                println!("patched_bbr ungated at 40 ms: {sum:?}");
                assert!(
                    sum.mean_theta >= 0.9,
                    "mean Θ {:.3} ungated",
                    sum.mean_theta
                );
            },
        );
    }

    /// Pseudocode 2 read back from patched_bbr's trace (see the function)
    /// with every threshold tuned live: the Off threshold down to 0.1 ms and
    /// both Θ thresholds up to 0.9/0.999, so that the 0-RTT link's own
    /// sub-millisecond gaps make Θ move and every event is recomputed under
    /// the tuned rule. Which levels those gaps reach is chance (CI
    /// 2026-11-27: no round above 0.999 in one run), so this test asks only
    /// that the rule was checked on the events; every level and branch is
    /// forced by the gates of `patched_theta_matches_the_gate_at_every_level`.
    #[test]
    fn patched_bbr_follows_pseudocode2() {
        crate::common::starved::unstarved("patched_bbr_follows_pseudocode2", || {
            use crate::common::patched::{pseudocode2_from_trace, Rule};
            let _clean = Clean::new();
            let tb = crate::common::flows::testbed(TestbedConfig::new(
                RATE_BPS,
                buffer_packets(100, 1500),
            ));
            let rule = Rule {
                theta_little: 1023.0 / 1024.0,
                theta_heavy: 922.0 / 1024.0,
                alpha: [2.0, 1.0, 0.0],
                divide_after_max: false,
            };
            let sum = pseudocode2_from_trace(
                &tb,
                12,
                std::time::Duration::from_secs(2),
                &[
                    "--off-thresh",
                    "0.1",
                    "--theta-little",
                    "0.999",
                    "--theta-heavy",
                    "0.9",
                ],
                rule,
            );
            assert!(
                sum.probe_bw > 1000 && sum.theta_updates > 0,
                "too little of the trace checked against the tuned rule: {sum:?}"
            );
        });
    }
}

/// TCP D* on the host kernel (6.18: struct_ops link, 4-argument
/// cong_control). No netem here: the base RTT is zero, the RTT is the tbf
/// queue D* keeps, the BDP a packet or two, and DRAIN's 4 packets are most
/// of the window; Fig. 1's order, timers and estimates hold all the same.
/// The VM tests repeat these at 40 ms.
mod dstar {
    use std::time::Duration;

    use ccctl_lab::testbed::{buffer_bdp, buffer_packets, TestbedConfig};

    use crate::common::dstar;

    const RATE_BPS: u64 = 50_000_000;

    /// `ccctl load dstar` carries a flow through a router's tbf bottleneck:
    /// 85 % of 50 Mbit/s (measured 96 %).
    #[test]
    fn dstar_carries_a_flow() {
        crate::common::starved::unstarved("dstar_carries_a_flow", || {
            dstar::dstar_carries_a_flow(
                TestbedConfig::new(RATE_BPS, buffer_packets(100, 1500)),
                10,
                0.85,
            );
        });
    }

    #[test]
    fn dstar_trace_follows_fig1() {
        crate::common::starved::unstarved("dstar_trace_follows_fig1", || {
            dstar::dstar_trace_follows_fig1(
                TestbedConfig::new(20_000_000, buffer_packets(100, 1500)),
                6,
            );
        });
    }

    /// A 50 ms min-RTT window: the RTT here is 2-3 ms, so GAIN 2 ends find
    /// it expired every 20 cycles or so.
    #[test]
    fn dstar_drains_after_a_min_rtt_timeout() {
        crate::common::starved::unstarved("dstar_drains_after_a_min_rtt_timeout", || {
            dstar::dstar_drains_after_min_rtt_timeout(
                TestbedConfig::new(20_000_000, buffer_packets(100, 1500)),
                5,
                50,
            );
        });
    }

    /// The check above fails flows run with other parameters (see the function).
    #[test]
    fn fig1_check_rejects_other_parameters() {
        dstar::fig1_check_rejects_other_parameters(
            || TestbedConfig::new(20_000_000, buffer_packets(100, 1500)),
            4,
        );
    }

    #[test]
    fn tune_dstar_refuses_bad_values_and_changes_nothing() {
        dstar::tune_dstar_refuses_bad_values();
    }

    /// The ssthresh and RTO-restart checks refuse made-up bad traces.
    #[test]
    fn dstar_checks_refuse_false_slow_start_and_old_window_exit() {
        dstar::dstar_checks_refuse_false_slow_start_and_old_window_exit();
    }

    // With a base RTT, on the userspace path emulator (these were VM tests
    // only while a base RTT needed netem): 20 Mbit/s, 40 ms (67 packets of
    // BDP).

    const RATE_40MS: u64 = 20_000_000;
    const RTT: Duration = Duration::from_millis(40);

    fn link_40ms(buffer_bdps: f64) -> TestbedConfig {
        TestbedConfig::new(RATE_40MS, buffer_bdp(RATE_40MS, RTT, buffer_bdps, 1500))
            .with_rtts(&[RTT])
            .userspace()
    }

    /// A 300 ms min-RTT window; at 40 ms a cycle is 3 RTTs, so most GAIN 2
    /// ends after the first 300 ms without a new minimum find it expired
    /// (a 10 s host run: 17 timeouts; 5 s leave some 8 for the 2 needed).
    #[test]
    fn dstar_drains_after_a_min_rtt_timeout_at_40ms() {
        crate::common::starved::unstarved("dstar_drains_after_a_min_rtt_timeout_at_40ms", || {
            dstar::dstar_drains_after_min_rtt_timeout(link_40ms(1.0), 5, 300);
        });
    }

    /// Sec. 3.3's exit on loss, forced: the loss list drops data packet 40
    /// of the flow, in its third or fourth round, while slow start's BDP
    /// estimate still grows towards 67 packets (a 1 BDP buffer drops
    /// nothing else so early). The exit must be on the ACK that brought
    /// that loss, in every run (the VM's 5-packet buffer only made it
    /// likely: an early BDP exit was accepted there).
    #[test]
    fn dstar_slow_start_exits_on_a_listed_loss_at_40ms() {
        crate::common::starved::unstarved(
            "dstar_slow_start_exits_on_a_listed_loss_at_40ms",
            || {
                dstar::dstar_slow_start_exits_on_loss(link_40ms(1.0).with_loss_list(0, &[40]), 5);
            },
        );
    }

    /// Reading 9 at 40 ms: 2 s bursts (slow start to a 67-packet BDP takes
    /// about 1 s; asserted over before each idle period), 1.5 s idle (the
    /// RTO about 250 ms, asserted below half of it).
    #[test]
    fn dstar_idle_restart_follows_the_sysctl_at_40ms() {
        crate::common::starved::unstarved("dstar_idle_restart_follows_the_sysctl_at_40ms", || {
            dstar::dstar_idle_restart_follows_the_sysctl(|| link_40ms(1.0), Duration::from_secs(2));
        });
    }

    /// Reading 11 with the RTO forced by a loss list, packet by packet.
    /// D*'s first cycle runs on the kernel's initial window of 10, constant
    /// for GAIN 1's 2 RTTs: packets 1-10 go out, their ACKs release 11-20,
    /// and the tail-loss probe after 2 RTTs of silence sends new data, 21.
    /// Dropping 11-21 leaves no ACK to come: the RTO (about 380 ms in)
    /// retransmits 11's data as packet 22. Its ACK has F-RTO send two new
    /// segments (23, 24: RFC 5682 step 2b) before the old window's other
    /// retransmissions; dropping 23 (never retransmitted) makes 24's SACK
    /// mark a loss while snd_una is still in the old window: in the Loss
    /// state, without a lost retransmission (which would move the socket
    /// to Recovery at once: the first try dropped retransmissions and saw
    /// exactly that). Host run 2026-11-25: lost 11 at the RTO, 12 on the
    /// next ACK, still in Loss and in slow start for 3 more rounds;
    /// `RtoRestarts { rtos: 1, with_old_window_losses: 1 }`. Had the probe
    /// not been sent, the RTO's retransmission (21) is dropped, the next
    /// RTO's is 22 and the numbering after it is the same.
    #[test]
    fn dstar_rto_restart_ignores_losses_in_its_loss_state_at_40ms() {
        crate::common::starved::unstarved(
            "dstar_rto_restart_ignores_losses_in_its_loss_state_at_40ms",
            || {
                let mut list: Vec<u64> = (11..=21).collect();
                list.push(23);
                dstar::dstar_rto_restart_ignores_losses_in_its_loss_state(
                    link_40ms(1.0).with_loss_list(0, &list),
                    4,
                );
            },
        );
    }

    /// TCP D*'s many-flow claim (tcp-dstar.txt Sec. 4.2, Fig. 5), issue 27
    /// item 4: 16 flows of D* at a time, then 16 of bpf_bbr, ABAB (2 pairs of
    /// 20 s runs, first 5 s left out; about 85 s), at the bundled
    /// dstar-many-flows scenario's setting (20 Mbit/s, 100 ms, a 1 BDP
    /// buffer: 10.4 packets of BDP per flow, the paper's ratios). RTT is the
    /// kernel's `tcpi_rtt` through inet_diag every 100 ms, each flow's mean,
    /// then the mean over the 16 flows and over the runs.
    ///
    /// Margin, from the study of 2026-11-27 (`dstar_many_flow_rtt_study`,
    /// 8 ABAB pairs at `9358fe5`, docs/notebook/2026-11-27-dstar-many-flow-rtt.md):
    /// D* 166.1 ms mean (sd 6.5 a run, 159.5-178.0), bpf_bbr 195.5 ms (sd
    /// 1.0, 193.8-196.6), a gap of 29.4 ms; the gap of two-pair means has an
    /// sd of 4.6 ms (sqrt(6.5^2/2 + 1.0^2/2)), and the four two-pair gaps of
    /// the study were 19.1, 34.6, 32.3 and 31.6 ms. Required: 10 ms, 4.2 sd
    /// below the measured gap (and 9 ms below the smallest two-pair gap
    /// seen), while a D* no better than bpf_bbr would need a 10 ms gap by
    /// chance (2.2 sd with D*'s run-to-run spread, some 10 with bpf_bbr's).
    /// Every run must acknowledge at least 90 % of the rate (measured 95.2-97.7
    /// %), so a D* that merely sends less fails.
    #[test]
    fn dstar_many_flow_rtt_below_bpf_bbr_at_100ms() {
        crate::common::starved::unstarved("dstar_many_flow_rtt_below_bpf_bbr_at_100ms", || {
            let rate = 20_000_000;
            let rtt = Duration::from_millis(100);
            crate::common::outcomes::many_flow_rtt_below_bpf_bbr(
                || {
                    TestbedConfig::new(rate, buffer_bdp(rate, rtt, 1.0, 1500))
                        .with_rtts(&[rtt])
                        .userspace()
                },
                "dstar",
                16,
                20,
                5.0,
                2,
                10.0,
                0.90,
                "host-dstar-many-flow-rtt.txt",
            );
        });
    }

    fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// The measurement behind the many-flow test's margin (not run by
    /// default): `CCCTL_STUDY_PAIRS` (4) ABAB pairs of `CCCTL_STUDY_FLOWS`
    /// (16) D* flows and as many bpf_bbr flows, `CCCTL_STUDY_SECS` (20) s
    /// each, at `CCCTL_STUDY_MBIT` (20) Mbit/s, `CCCTL_STUDY_RTT_MS` (100)
    /// ms, `CCCTL_STUDY_BDP` (1) BDP; the first `CCCTL_STUDY_WARMUP` (5) s
    /// left out. Table in target/ccctl-figures/host-dstar-many-flow-study.txt.
    #[test]
    #[ignore = "a measurement: cargo test -p ccctl-tests --test host dstar_many_flow_rtt_study -- --ignored --nocapture"]
    fn dstar_many_flow_rtt_study() {
        let rate: u64 = env_or("CCCTL_STUDY_MBIT", 20) * 1_000_000;
        let rtt = Duration::from_millis(env_or("CCCTL_STUDY_RTT_MS", 100));
        let bdps: f64 = env_or("CCCTL_STUDY_BDP", 1.0);
        crate::common::outcomes::many_flow_rtt_study(
            || {
                TestbedConfig::new(rate, buffer_bdp(rate, rtt, bdps, 1500))
                    .with_rtts(&[rtt])
                    .userspace()
            },
            env_or("CCCTL_STUDY_FLOWS", 16),
            env_or("CCCTL_STUDY_SECS", 20),
            env_or("CCCTL_STUDY_WARMUP", 5.0),
            env_or("CCCTL_STUDY_PAIRS", 4),
            "host-dstar-many-flow-study.txt",
        );
    }
}

/// Modest BBR with a base RTT, on the userspace path emulator (VM tests
/// only while a base RTT and loss needed netem). 40 ms.
mod modest {
    use std::time::Duration;

    use ccctl_lab::testbed::{buffer_bdp, Reorder, TestbedConfig};

    use crate::common::modest;

    const RTT: Duration = Duration::from_millis(40);

    /// Alg. 1 read from modest_bbr's per-ACK trace: 10 Mbit/s, 40 ms, a
    /// 0.25 BDP buffer, beside a Cubic flow; W_min 0.6 at load, 0.5 tuned
    /// mid-flow. At 40 ms BBR's in-flight window is some 35 packets, so
    /// the two W_min give different bounds (starts from last_cwnd >= 20
    /// counted under both). The loss list forces rounds with a
    /// retransmission inside running searches: every 700 data packets
    /// (about 1.5 s of Modest's share) four drops a round's worth apart
    /// (25 packets), so besides the drop that starts a search (or falls in
    /// one) the next ones land in its later rounds; at least one step after
    /// a lossy round must be judged (max_win down to the midpoint).
    #[test]
    fn search_follows_alg1_with_lossy_rounds_forced_at_40ms() {
        crate::common::starved::unstarved(
            "search_follows_alg1_with_lossy_rounds_forced_at_40ms",
            || {
                let rate = 10_000_000;
                let list: Vec<u64> = (0..12)
                    .flat_map(|k| {
                        let base = 1500 + 700 * k;
                        [base, base + 25, base + 50, base + 75]
                    })
                    .collect();
                modest::modest_search_follows_alg1(
                    TestbedConfig::new(rate, buffer_bdp(rate, RTT, 0.25, 1500))
                        .with_rtts(&[RTT, RTT])
                        .userspace()
                        .with_loss_list(0, &list),
                    20,
                    20,
                );
            },
        );
    }

    /// Spurious losses do not hold Modest BBR down (departure 10, see
    /// `modest::reordering_does_not_hold_it_down`): 20 Mbit/s, 0.3 % of
    /// the data packets (in short runs) overtake the rest by 20 ms after
    /// the bottleneck, 20 ms more on the ACK path (40 ms), a 4 BDP buffer
    /// (STARTUP's 2.89 BDP in flight fits, so nothing overflows), the
    /// sender's RACK reordering window static so that every overtaking run
    /// brings a spurious episode (`modest::RACK_STATIC_REO_WND`), 3 pairs
    /// of 15 s flows. Host, 2026-11-29: 0.977, 0.996, 1.016 (15-27 DSACKs,
    /// 34-44 undos a run); the mutant `UNDO_IGNORED` 0.359, 0.478, 0.531.
    /// At 10 % with the static window both algorithms lost a quarter of the
    /// link to thousands of retransmissions (0.902-1.073: noise, not a
    /// test); at 10 % with the kernel's adaptive window the spurious
    /// episodes all came in the first second and the mutant passed its
    /// pairs at 0.895-0.935. It ran in the VM on netem until 2026-11-29
    /// (2026-11-25: 0.978-1.041 over 9 pairs; no undo, 2272ad6, 0.39-0.75)
    /// and failed CI four times there under TCG's late timers (seconds at
    /// 5.2 Mbit/s and at 0); netem's `reorder 10% 50%` lets ~0.1 % of the
    /// packets overtake (see `ccctl_path::Reorder`). The same function on
    /// 6.1 in the VM (10 Mbit/s, netem, static window) passed once at
    /// 1.006-1.047 with 10-17 undos per modest_bbr run.
    #[test]
    fn spurious_retransmissions_from_reordering_do_not_hold_it_down() {
        crate::common::starved::unstarved(
            "spurious_retransmissions_from_reordering_do_not_hold_it_down",
            || {
                let rate = 20_000_000;
                modest::reordering_does_not_hold_it_down(
                    TestbedConfig::new(rate, buffer_bdp(rate, RTT, 4.0, 1500))
                        .with_rtts(&[RTT / 2])
                        .userspace(),
                    Reorder {
                        share: 0.003,
                        delay: RTT / 2,
                    },
                    3,
                    15,
                );
            },
        );
    }

    /// The paper's claim on a shallow buffer: Cubic gets at least 2x the
    /// room beside Modest BBR than beside bpf_bbr, and Modest retransmits
    /// at most 0.3x as much (see the function for the measured values).
    #[test]
    fn modest_leaves_cubic_more_room_than_bpf_bbr_at_40ms() {
        crate::common::starved::unstarved(
            "modest_leaves_cubic_more_room_than_bpf_bbr_at_40ms",
            || {
                crate::common::outcomes::modest_leaves_cubic_more_room_than_bpf_bbr(20);
            },
        );
    }

    /// Sec. III-B's Proportion <= W_max, from the trace: W_max 0.8 (W_min
    /// 0.5) on 10 Mbit/s, 40 ms, a 0.25 BDP buffer beside Cubic, 15 s.
    #[test]
    fn w_max_bounds_the_searched_window_and_pacing_at_40ms() {
        crate::common::starved::unstarved(
            "w_max_bounds_the_searched_window_and_pacing_at_40ms",
            || {
                let rate = 10_000_000;
                crate::common::modest_wmax::w_max_bounds_the_search(
                    TestbedConfig::new(rate, buffer_bdp(rate, RTT, 0.25, 1500))
                        .with_rtts(&[RTT, RTT])
                        .userspace(),
                    15,
                );
            },
        );
    }
    /// No pinning: a lone modest_bbr flow (W_min 0.25) whose data path
    /// drops 15 % of its packets for 1 s, 2 s into the flow (in PROBE_BW:
    /// the loss starts searches, and every retransmission in the linear
    /// phase starts the next from the smaller window then), is back to >= 90 %
    /// of the link in the 10 s after the burst: the median of the
    /// per-second acknowledged rates over seconds 5-10 after it (the
    /// median, because BBR's own PROBE_RTT cuts one second in ten). "The
    /// link" is what a Cubic flow carries on the same path just before
    /// (its premise: at least 90 % of the rate). 20 Mbit/s, 40 ms, 1 BDP,
    /// the host path's random loss switched by `set_loss`. A design whose
    /// linear phase stops at last_cwnd for good fails it.
    #[test]
    fn a_lone_flow_is_back_to_the_link_after_an_early_loss_burst_at_40ms() {
        crate::common::starved::unstarved(
            "a_lone_flow_is_back_to_the_link_after_an_early_loss_burst_at_40ms",
            || {
                const BURST_SECS: u64 = 1;
                const BURST_LOSS: f64 = 0.15;
                // W_min 0.25: a search ends at most at (1 + W_min) / 2 = 0.625 of
                // the window in force, so a flow that keeps its searched window
                // stays well under the 90 % asked below whatever the loss timing
                // (at the default 0.75, 0.875: such a design reached 0.70-0.85 of
                // the link in 5 runs, too close to 0.9 to be sure to fail).
                const W_MIN: &str = "0.25";
                use crate::common::{ccctl, flows, Clean};
                let _clean = Clean::new();
                let rate = 20_000_000;
                let cfg = || {
                    TestbedConfig::new(rate, buffer_bdp(rate, RTT, 1.0, 1500))
                        .with_rtts(&[RTT])
                        .with_loss(0.0)
                        .userspace()
                };
                let tb = flows::testbed(cfg());
                let reference = ccctl_lab::iperf::run_flow(
                    &tb,
                    &ccctl_lab::iperf::FlowSpec::new(0, "cubic", Duration::from_secs(8)),
                )
                .expect("reference flow")
                .goodput_bps;
                drop(tb);
                assert!(
                    reference >= 0.9 * rate as f64,
                    "the reference Cubic flow carried {:.1} of {} Mbit/s: the path, not Modest",
                    reference / 1e6,
                    rate / 1_000_000
                );
                ccctl(&["load", "modest-bbr", "--wmin", W_MIN]).ok();
                let r = modest::lone_flow_through_a_loss_burst(
                    "modest_bbr",
                    cfg(),
                    Duration::from_secs(2),
                    Duration::from_secs(BURST_SECS),
                    BURST_LOSS,
                );
                let back = r.median_bps(modest::RECOVERY_SECS - 5, modest::RECOVERY_SECS);
                println!(
                "modest_bbr, 20 Mbit/s (reference Cubic {:.1}), 40 ms, 1 BDP: {:.1} before a {:.1} s burst of {:.0} % loss, {} retransmits in it; per second after: {:?}; median of seconds 5-10 {:.1} Mbit/s = {:.0} % of the link",
                reference / 1e6,
                r.before_bps / 1e6,
                r.burst_secs,
                100.0 * BURST_LOSS,
                r.retrans_in_burst,
                r.per_second_bps.iter().map(|b| (b / 1e5).round() / 10.0).collect::<Vec<_>>(),
                back / 1e6,
                100.0 * back / reference
            );
                assert!(r.retrans_in_burst > 0, "the burst forced no retransmission");
                assert!(
                back >= 0.9 * reference,
                "pinned: a median {:.1} Mbit/s over seconds 5-10 after the burst, below 90 % of the {:.1} Mbit/s the link carries",
                back / 1e6,
                reference / 1e6
            );
            },
        );
    }
}

/// `ccctl lab` on the host, on the userspace path emulator.
mod lab {
    use std::fs;

    use super::common::{ccctl, lab::*, registered, snapshot, tempdir, Clean};

    const INTERRUPTIBLE: &[&str] = &[
        "--rate",
        "10mbit",
        "--rtt",
        "20ms",
        "--buffer",
        "1bdp",
        "--flows",
        "cubic:1, bpf_bbr:1",
        "--duration",
        "60s",
        "--no-baselines",
    ];

    /// Ctrl-C in the middle of a run on the userspace path: flows stopped,
    /// the emulator and the testbed gone, our algorithm unloaded, exit
    /// 130, the run directory says `interrupted`.
    #[test]
    fn lab_interrupted_leaves_nothing_behind() {
        let _clean = Clean::new();
        let out = tempdir("lab-host-interrupt");
        let mut child = lab_spawn(&out, INTERRUPTIBLE);
        wait_until_flows_run(&child, Some("bpf_bbr"));
        let pid = child.id();
        ccctl_sys::signals::kill(pid, rustix::process::Signal::INT);
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(130), "exit status {status}");
        assert_nothing_left(pid, "bpf_bbr", "bpf-bbr");
        let dir = run_dir_in(&out).expect("run directory");
        let status = metadata(&dir)["status"].as_str().unwrap_or("").to_string();
        assert!(status.starts_with("interrupted"), "status {status}");
    }

    /// A lab killed outright (SIGKILL: no cleanup at all; the emulator's
    /// threads die with it) leaves its testbed and its algorithm; the next
    /// `ccctl lab run` removes both first.
    #[test]
    fn lab_crash_is_cleaned_up_by_the_next_start() {
        let _clean = Clean::new();
        let out = tempdir("lab-host-crash");
        let mut child = lab_spawn(&out, INTERRUPTIBLE);
        wait_until_flows_run(&child, Some("bpf_bbr"));
        let pid = child.id();
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        // What the run writes for itself has no name in the temp dir
        // (ping's replies: an anonymous file), so a SIGKILL leaves no file
        // behind either: none named ccctl-...-PID-... (read now, asserted
        // at the end; the old prober left ccctl-lab-ping-PID-0.txt).
        let ping_files: Vec<String> = std::fs::read_dir(std::env::temp_dir())
            .expect("temp dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ccctl-") && n.contains(&format!("-{pid}-")))
            .collect();
        assert!(
            !namespaces_of(pid).is_empty(),
            "SIGKILL should leave the namespaces (else this test proves nothing)"
        );
        assert!(registered("bpf_bbr"));
        let (run, _out, _dir) = lab_run(
            "host-after-crash",
            &[
                "--rate",
                "10mbit",
                "--rtt",
                "10ms",
                "--buffer",
                "1bdp",
                "--flows",
                "cubic",
                "--duration",
                "4s",
                "--warmup",
                "1s",
                "--no-baselines",
            ],
        );
        run.ok();
        wait_for(
            "stale iperf3 to exit",
            std::time::Duration::from_secs(10),
            || iperf3_pids().is_empty(),
        );
        assert_nothing_left(pid, "bpf_bbr", "bpf-bbr");
        let _ = ccctl(&["status"]);
        // Asserted last, so that a failure here still leaves the cleanup above done.
        assert!(ping_files.is_empty(), "left behind: {ping_files:?}");
    }

    /// The whole pipeline: calibration, main run, solo and same-cc
    /// baselines, metrics, Parquet, plots; ours loaded for the run only.
    #[test]
    fn lab_runs_a_scenario_and_writes_every_output() {
        let _clean = Clean::new();
        assert!(!registered("bpf_bbr"));
        let (run, _out, dir) = lab_run(
            "host-pipeline",
            &[
                "--where",
                "host",
                "--rate",
                "50mbit",
                "--rtt",
                "0ms",
                "--buffer",
                "100pkt",
                "--flows",
                "cubic:1, bpf_bbr:1",
                "--duration",
                "6s",
                "--warmup",
                "2s",
            ],
        );
        let run = run.ok();
        let dir = dir.expect("a run directory");
        assert_run_files(&dir);
        assert!(
            run.stdout.contains("bpf_bbr") && run.stdout.contains("JFI"),
            "summary table printed:\n{}",
            run.stdout
        );
        assert!(!registered("bpf_bbr"), "the lab unloads what it loaded");
        let meta = metadata(&dir);
        assert_eq!(meta["status"], "complete");
        assert_eq!(meta["ran_on"], "host");
        assert_eq!(
            meta["planned_runs"], 7,
            "calibration (Cubic, then the paced reference), main, 2 solo, 2 same-cc"
        );
        assert_eq!(meta["loaded_for_run"][0], "bpf-bbr");

        let summary = read_parquet(&dir.join("summary.parquet"));
        let main = rows(&summary, "flow", "main");
        assert_eq!(main.len(), 2);
        let goodput = f64s(&summary, "goodput_bps");
        let harm = f64s(&summary, "harm_tput");
        let m_f = f64s(&summary, "m_f_tput");
        let m_h = f64s(&summary, "m_h_tput");
        for &i in &main {
            let g = goodput[i].expect("goodput");
            assert!(g > 1e6 && g < 50e6, "goodput {g}");
            assert!(
                harm[i].is_some() && m_f[i].is_some() && m_h[i].is_some(),
                "harm metrics for row {i}"
            );
        }
        // Every goodput, JFI, harm, m_f and m_h in the summary, recomputed
        // from the samples with the papers' formulas written in the test.
        let g = check_summary_against_samples(&dir, 2.0);
        println!("goodputs recomputed from samples.parquet: {g:?}");

        // Our algorithm's flows were traced per ACK and plotted.
        let trace = dir.join("traces/run-002.parquet");
        assert!(
            read_parquet(&trace).height() > 100,
            "per-ACK trace of the main run"
        );
        assert_eq!(meta["runs"][2]["trace"], "traces/run-002.parquet");
        assert!(
            dir.join("plots/run-002-per-ack.png").is_file()
                && dir.join("plots/run-002-per-ack.svg").is_file()
        );

        let samples = read_parquet(&dir.join("samples.parquet"));
        assert!(samples.height() > 100, "{} samples", samples.height());
        let cwnd = f64s(&samples, "cwnd_pkts");
        assert!(cwnd.iter().all(|c| c.is_some_and(|c| c >= 1.0)));
    }

    /// A run unfair by construction must score unfair. One Cubic flow has
    /// the 50 Mbit/s link alone for 7 of its 8 s; four more Cubic flows
    /// start at 7 s and are measured over their one shared second (no
    /// warm-up cut). The long flow then gets at least 7/8 of what the link
    /// carries alone; with the 85 % fill the host tests require of a single
    /// flow, x_0 >= 0.85 * 7/8 * C = 0.74 C (checked below: the premise is
    /// the testbed's, Cubic is not under test). The four late flows share
    /// at most C between them, and Jain's index over five flows with
    /// x_0 >= 0.74 C and x_1 + .. + x_4 <= C is largest when the four are
    /// equal: (0.74 + 1)^2 / (5 (0.74^2 + 4 (1/4)^2)) = 0.76. So JFI < 0.8
    /// whatever the flows did, and a fair run would score near 1. A JFI
    /// computed over shares of a wrong window, over two flows only, or
    /// inverted fails this; the recomputation catches wrong arithmetic.
    #[test]
    fn lab_scores_a_run_unfair_by_construction_as_unfair() {
        let _clean = Clean::new();
        let scenarios = tempdir("lab-unfair-scenario");
        let file = scenarios.join("unfair.toml");
        fs::write(
            &file,
            "name = \"unfair-by-construction\"\nduration = \"8s\"\nwarmup = \"0s\"\n\
             baselines = false\n[link]\nrate = \"50mbit\"\nrtt = \"0ms\"\nbuffer = \"100pkt\"\n\
             [[flows]]\ncc = \"cubic\"\n[[flows]]\ncc = \"cubic\"\ncount = 4\nstart = \"7s\"\n",
        )
        .expect("write scenario");
        let f = file.to_string_lossy().into_owned();
        let (run, _out, dir) = lab_run("unfair", &[f.as_str(), "--where", "host"]);
        run.ok();
        let dir = dir.expect("a run directory");
        let g = check_summary_against_samples(&dir, 0.0);
        let summary = read_parquet(&dir.join("summary.parquet"));
        let main_run = rows(&summary, "run", "main")[0];
        let r = f64s(&summary, "run_id")[main_run].expect("run_id") as u32;
        let xs: Vec<f64> = g.range((r, 0)..(r + 1, 0)).map(|(_, &v)| v).collect();
        let jfi = f64s(&summary, "jain_index")[main_run].expect("JFI");
        println!(
            "unfair run: goodputs {:?} Mbit/s, JFI {jfi:.3}",
            xs.iter().map(|x| x / 1e6).collect::<Vec<_>>()
        );
        assert_eq!(xs.len(), 5);
        assert!(
            xs[0] >= 0.85 * 7.0 / 8.0 * 50e6,
            "premise: the long flow carried {:.1} Mbit/s, less than 7/8 of 85 % of the link",
            xs[0] / 1e6
        );
        assert!(jfi < 0.8, "a run unfair by construction scored JFI {jfi}");
        // The four late flows run only in the last second: summing the five
        // rates would report about 1.45 of a link no flow can exceed.
        let util = f64s(&summary, "utilization")[main_run].expect("utilization");
        println!("unfair run: utilization {util:.3}");
        assert!(
            (0.7..=1.02).contains(&util),
            "utilization {util:.3}: not the bits delivered over the link's capacity in the run"
        );
    }

    /// Bad input: a clear error naming the field, and nothing created.
    #[test]
    fn lab_refuses_bad_input_before_creating_anything() {
        let _clean = Clean::new();
        let dir = tempdir("lab-bad-scenarios");
        let unknown_key = dir.join("unknown-key.toml");
        fs::write(&unknown_key, "name = \"x\"\nduration = \"10s\"\nflows = \"cubic\"\ncolour = \"red\"\n[link]\nrate = \"10mbit\"\nrtt = \"0ms\"\nbuffer = \"10pkt\"\n").expect("write");
        let late = dir.join("late-flow.toml");
        fs::write(&late, "name = \"x\"\nduration = \"10s\"\n[[flows]]\ncc = \"cubic\"\nstart = \"12s\"\n[link]\nrate = \"10mbit\"\nrtt = \"0ms\"\nbuffer = \"10pkt\"\n").expect("write");
        let (uk, lt) = (
            unknown_key.to_string_lossy().into_owned(),
            late.to_string_lossy().into_owned(),
        );
        let one_off = ["--where", "host", "--duration", "5s"];
        let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
            (
                vec!["--rate", "0mbit", "--rtt", "0ms", "--flows", "cubic"],
                vec!["--rate", "0mbit"],
            ),
            (
                vec!["--rate", "10mbit", "--rtt", "-5ms", "--flows", "cubic"],
                vec!["--rtt"],
            ),
            (
                vec![
                    "--rate", "10mbit", "--rtt", "0ms", "--buffer", "0.5pkt", "--flows", "cubic",
                ],
                vec!["link.buffer", "less than one packet"],
            ),
            (
                vec![
                    "--rate",
                    "10mbit",
                    "--rtt",
                    "0ms",
                    "--buffer",
                    "10pkt",
                    "--flows",
                    "cubic:1, nosuch:1",
                ],
                vec!["flows[1].cc", "unknown congestion control `nosuch`"],
            ),
            (
                vec![
                    "--rate", "10mbit", "--rtt", "0ms", "--buffer", "10pkt", "--flows", "cubic",
                    "--loss", "NaN",
                ],
                vec!["link.loss"],
            ),
            (
                vec![
                    "--rate", "10mbit", "--rtt", "0ms", "--buffer", "10pkt", "--flows", "cubic",
                    "--aqm", "red",
                ],
                vec!["aqm"],
            ),
            (
                vec!["--rtt", "0ms", "--flows", "cubic"],
                vec!["--rate, --rtt and --flows are required"],
            ),
            (vec![uk.as_str()], vec!["unknown field `colour`"]),
            (vec![lt.as_str()], vec!["flows[0].start"]),
            // (A base RTT with --where host was refused for want of netem
            // until the lab ran it on the userspace path emulator: not a
            // bad input any more.)
        ];
        let before = snapshot();
        let netns_before = fs::read_dir("/run/netns").map(|d| d.count()).unwrap_or(0);
        for (args, needles) in cases {
            let out = dir.join("results");
            let out_s = out.to_string_lossy().into_owned();
            let mut full = vec!["lab", "run"];
            full.extend(one_off);
            full.extend(args.iter().copied());
            full.extend(["--out", out_s.as_str()]);
            ccctl(&full).failed_with(&needles);
            assert!(!out.exists(), "{args:?} created {}", out.display());
            assert_eq!(snapshot(), before, "{args:?} changed kernel state");
            assert_eq!(
                fs::read_dir("/run/netns").map(|d| d.count()).unwrap_or(0),
                netns_before,
                "{args:?} left a namespace"
            );
        }
    }
}

/// Per-ACK tracing and the daemon on the host kernel (6.18).
mod tracing {
    use std::time::Duration;

    use super::common::tracing::*;

    #[test]
    fn traced_flow_is_one_row_per_ack_and_matches_the_socket() {
        traced_flow_matches_the_socket(50_000_000, 100 * 1514, Duration::ZERO);
    }

    #[test]
    fn ring_overflow_is_counted_not_hidden() {
        overflow_is_counted();
    }

    #[test]
    fn tracer_follows_a_reload() {
        crate::common::tracing::tracer_follows_a_reload();
    }

    #[test]
    fn killed_tracer_is_switched_off_by_the_next_command() {
        crate::common::tracing::killed_tracer_is_switched_off_by_the_next_command();
    }

    #[test]
    fn daemon_loads_reloads_on_sighup_and_cleans_up() {
        daemon_reloads_live_and_cleans_up();
    }
}

/// `ccctl tune` and `ccctl load ALGO --PARAM X` against the live params map:
/// every change is one update (version bumped), every refusal leaves the
/// map, its version and the kernel's state as they were.
mod tune {
    #[test]
    fn tune_shows_changes_resets_and_infers_the_algorithm() {
        crate::common::tune::tune_shows_changes_resets_and_infers_the_algorithm();
    }

    #[test]
    fn tune_refuses_bad_input_and_changes_nothing() {
        crate::common::tune::tune_refuses_bad_input_and_changes_nothing();
    }

    #[test]
    fn load_with_parameters_validates_first_and_refuses_when_loaded() {
        crate::common::tune::load_with_parameters_validates_first_and_refuses_when_loaded();
    }

    #[test]
    fn modest_bbr_window_parameters() {
        crate::common::tune::modest_bbr_window_parameters();
    }
    /// A traced modest_bbr flow (50 Mbit/s, 30-packet buffer) for 6 s
    /// while the two sets alternate as fast as ccctl can write them.
    #[test]
    fn parameter_sets_change_atomically() {
        use ccctl_lab::testbed::{buffer_packets, TestbedConfig};
        crate::common::atomic::parameter_sets_change_atomically(
            TestbedConfig::new(50_000_000, buffer_packets(30, 1500))
                .with_rtts(&[std::time::Duration::ZERO]),
            6,
        );
    }

    #[test]
    fn patched_bbr_parameters() {
        crate::common::patched::patched_bbr_parameters();
    }
}

/// Issue 16: the daemon as a fleet agent (Prometheus endpoint, Hive-
/// partitioned traces read by DuckDB) and lab sweeps sharded and merged.
mod fleet {
    #[test]
    fn metrics_endpoint_during_a_traced_flow() {
        crate::common::fleet::metrics_endpoint_during_a_traced_flow();
    }

    #[test]
    fn two_daemons_write_one_partitioned_table() {
        crate::common::fleet::two_daemons_write_one_partitioned_table();
    }

    #[test]
    fn shards_merge_into_the_unsharded_run_and_mismatches_are_refused() {
        crate::common::shard::shards_merge_into_the_unsharded_run_and_mismatches_are_refused();
    }
}

/// IPv6: traces filtered by IPv6 and IPv4 address beside each
/// other, the lab over IPv6.
mod ipv6 {
    use ccctl_lab::testbed::buffer_packets;

    /// Three flows of 4 s on 50 Mbit/s links, traced twice.
    #[test]
    fn ipv6_and_ipv4_flows_filtered_by_address() {
        crate::common::ipv6::ipv6_and_ipv4_flows_filtered_by_address(
            50_000_000,
            buffer_packets(100, 1500),
            4,
            200,
        );
    }

    #[test]
    fn lab_runs_over_ipv6() {
        crate::common::ipv6::lab_runs_over_ipv6("host", "50mbit", 50e6);
    }
}

/// The userspace path emulator's own checks (ccctl-path on this kernel).
mod path {
    use crate::common::path;

    #[test]
    fn ping_takes_the_configured_rtt_from_10_to_200_ms() {
        crate::common::starved::unstarved(
            "ping_takes_the_configured_rtt_from_10_to_200_ms",
            || {
                path::ping_takes_the_configured_rtt(&[10, 50, 200]);
            },
        );
    }

    #[test]
    fn rate_and_queue_limits_in_packets_and_bytes_hold() {
        crate::common::starved::unstarved(
            "rate_and_queue_limits_in_packets_and_bytes_hold",
            || {
                path::rate_and_queue_limits_hold();
            },
        );
    }

    #[test]
    fn loss_list_drops_exactly_the_listed_packets() {
        path::loss_list_drops_exactly_the_listed_packets();
    }

    #[test]
    fn fq_codel_isolates_a_sparse_flow_where_tail_drop_does_not() {
        crate::common::starved::unstarved(
            "fq_codel_isolates_a_sparse_flow_where_tail_drop_does_not",
            || {
                path::fq_codel_isolates_a_sparse_flow();
            },
        );
    }

    #[test]
    fn teardown_leaves_no_thread_socket_or_namespace() {
        path::teardown_leaves_no_thread_socket_or_namespace();
    }

    /// The sender gate on the host path keeps time as taprio does in the
    /// VM (On 20 / Off 60 ms, 50 Mbit/s, 40 ms): every packet onto the
    /// sender's link in an On window, within 1 ms, both directions.
    #[test]
    fn sender_gate_passes_packets_only_in_on_windows() {
        crate::common::starved::unstarved("sender_gate_passes_packets_only_in_on_windows", || {
            let _clean = crate::common::Clean::new();
            crate::common::patched::gate_passes_packets_only_in_on_windows(
                50_000_000,
                std::time::Duration::from_millis(40),
                20,
                60,
                ccctl_lab::testbed::PathKind::Userspace,
            );
        });
    }

    #[test]
    fn random_loss_follows_its_probability_and_changes_live() {
        path::random_loss_follows_its_probability_and_changes_live();
    }

    #[test]
    fn socket_drops_are_counted() {
        crate::common::path::socket_drops_are_counted();
    }

    #[test]
    fn a_descheduled_emulator_keeps_its_links_rate() {
        crate::common::starved::unstarved("a_descheduled_emulator_keeps_its_links_rate", || {
            crate::common::path::a_descheduled_emulator_keeps_its_links_rate();
        });
    }

    #[test]
    fn only_our_addresses_ipv4_and_ipv6() {
        path::only_our_addresses(false);
        path::only_our_addresses(true);
    }
}

/// patched_bbr's Θ against the sender gate's ground truth, on this kernel's
/// userspace path (real timers): 20 Mbit/s, 40 ms, 1 BDP, the gate aligned
/// to CLOCK_TAI multiples of On + Off (`path::sender_gate_...` checks it).
mod patched_host {
    use crate::common::{
        patched::{self, LEVELS},
        Clean,
    };

    /// Θ within ±0.1 of On/(On+Off) at Little, Medium and Heavy (a wrong
    /// Θ fails: Little and Medium are 0.25 apart, Heavy 0.375 from Medium).
    #[test]
    fn patched_theta_matches_the_gate_at_every_level() {
        crate::common::starved::unstarved("patched_theta_matches_the_gate_at_every_level", || {
            let _clean = Clean::new();
            let mut got = Vec::new();
            for (name, on, off) in LEVELS {
                let truth = on as f64 / (on + off) as f64;
                let sum = patched::theta_behind_gate(Some((on, off)));
                println!(
                    "{name} (On {on} / Off {off} ms): Θ {:.3}, gate {truth:.3}, {sum:?}",
                    sum.mean_theta
                );
                got.push((name, sum, truth));
            }
            // Each gate forces its level of eq. 38 under the default thresholds
            // (2/3 and 1/3; the gates' Θ 0.75, 0.5, 0.125 sit 0.08 or more from
            // them), so every branch of Pseudocode 2 is taken here, not by
            // chance: the level with most PROBE_BW events is the gate's (levels
            // are counted heavy, medium, little); below Little the probe's pacing
            // gain is boosted (eq. 37) and every gated run corrects D by Θ
            // (eq. 36). Pseudocode2's own check recomputed every event.
            for (level, (name, sum, truth)) in [2usize, 1, 0].into_iter().zip(got) {
                let theta = sum.mean_theta;
                assert!(
                    (theta - truth).abs() <= 0.1,
                    "{name}: Θ {theta:.3} against the gate's {truth:.3}"
                );
                let top = (0..3).max_by_key(|&l| sum.levels[l]).unwrap_or(0);
                assert_eq!(
                    top, level,
                    "{name}: most events at level {top} (0 heavy, 1 medium, 2 little), not {level}: {sum:?}"
                );
                assert!(
                    sum.corrected > 0,
                    "{name}: no sample corrected by Θ: {sum:?}"
                );
                if level < 2 {
                    assert!(sum.boosted > 0, "{name}: no boosted probe: {sum:?}");
                }
            }
        });
    }

    /// Pseudocode 2 read back from the trace behind the Heavy gate (On 10
    /// / Off 70 ms, Θ 0.125; 20 Mbit/s, 40 ms, 1 BDP, 20 s): every rule
    /// recomputed (eq. 11's Θ from On/Off, eq. 37's boost, eq. 38/39's
    /// alpha), and the gate forces the heavy level and the probe's boost in
    /// every run (the 0-RTT `patched_bbr_follows_pseudocode2` reaches the
    /// heavy level only by chance: a run on 2026-11-25 had none).
    #[test]
    fn patched_bbr_follows_pseudocode2_behind_a_heavy_gate() {
        crate::common::starved::unstarved(
            "patched_bbr_follows_pseudocode2_behind_a_heavy_gate",
            || {
                let _clean = Clean::new();
                let sum = patched::theta_behind_gate(Some((10, 70)));
                assert!(
                    sum.levels[0] > 0 && sum.boosted > 0,
                    "the Heavy gate gave no heavy-level event or no boosted probe: {sum:?}"
                );
                // The gate's loss bursts put the BBR core into its policer
                // mode (lt_bw) in every Heavy run measured (4 of 4 on
                // 2026-12-01: 1,827-8,287 such ACKs in 20 s, 10 Θ changes
                // among them in each of the 2 runs that counted those), so
                // departure 13's division is checked in every run.
                assert!(
                    sum.lt_divided > 0,
                    "no Θ change at the policer's rate to check departure 13 on: {sum:?}"
                );
            },
        );
    }

    /// `--divide-after-max 1` (departure 12) behind the Heavy gate: the
    /// max filter sees the raw samples and B* is its max divided by the Θ
    /// in force, recomputed at every ACK from the trace (eq. 36 as the
    /// paper writes it fails the first check at its first corrected
    /// sample); every other rule of Pseudocode 2 as by default. The gate
    /// forces Θ below 0.9 for most of PROBE_BW, so the division is taken.
    #[test]
    fn patched_divide_after_max_behind_a_heavy_gate() {
        crate::common::starved::unstarved("patched_divide_after_max_behind_a_heavy_gate", || {
            let _clean = Clean::new();
            let rule = patched::Rule {
                divide_after_max: true,
                ..patched::Rule::DEFAULT
            };
            let sum =
                patched::theta_behind_gate_with(Some((10, 70)), &["--divide-after-max", "1"], rule);
            assert!(
                sum.divided_after_max > 200 && sum.levels[0] > 0 && sum.boosted > 0,
                "the Heavy gate left too few divided events, no heavy level or no boost: {sum:?}"
            );
        });
    }

    /// Ungated (no stall filter), Θ stays at or above 0.95: on average
    /// after the warm-up, and at every PROBE_BW event of the first 2 s,
    /// where Θ's window still holds the flow's start (STARTUP's wait for
    /// its first ACKs, booked as Off, left Θ 0.86-0.95 there and btl_bw
    /// 1.1x the link: departure 7 of docs/algorithms/patched_bbr.md).
    /// Θ measures the sender's stalls, and a hypervisor's steal is such
    /// stalls (the cloud's, which patched BBR was written for): a clean
    /// clone here read Θ 0.945 under 11.0 % steal (2026-11-29). So an
    /// attempt counts only at 5 % steal or less, the test's own tolerance.
    #[test]
    fn patched_theta_ungated_is_near_one() {
        crate::common::starved::unstarved_within("patched_theta_ungated_is_near_one", 0.05, || {
            let _clean = Clean::new();
            let sum = patched::theta_behind_gate(None);
            println!("ungated: {sum:?}");
            assert!(sum.mean_theta >= 0.95, "ungated Θ {:.3}", sum.mean_theta);
            assert!(
                sum.min_theta_entering_probe_bw >= 0.95,
                "ungated Θ {:.3} in the first 2 s of PROBE_BW",
                sum.min_theta_entering_probe_bw
            );
        });
    }

    /// Heavy gate (On 10 / Off 70 ms): patched_bbr's goodput against
    /// bpf_bbr's, both on the same gated path, in the same test, and its
    /// mean RTT (the sender's, iperf3's) at most 1.25x bpf_bbr's (issue 26:
    /// the throughput must not come from a standing queue). At 30 Mbit/s:
    /// the emulator's mean read wait after the warm-up must stay within the
    /// 0.5 ms the lab allows a 10 ms window, or the gate measured was not
    /// the scenario's. Measured on 2026-12-02: 0.031-0.035 ms at 30 Mbit/s
    /// (3 runs); at 50 Mbit/s, the seed's rate, 0.048 and 0.618 ms.
    #[test]
    fn patched_beats_bpf_bbr_under_a_heavy_gate() {
        crate::common::starved::unstarved("patched_beats_bpf_bbr_under_a_heavy_gate", || {
            let _clean = Clean::new();
            let heavy = Some((10, 70));
            let rate = 30_000_000;
            let (bbr, bbr_lag) = patched::flow_behind_gate("bpf-bbr", "bpf_bbr", rate, heavy, 20);
            let (ours, our_lag) =
                patched::flow_behind_gate("patched-bbr", "patched_bbr", rate, heavy, 20);
            println!("path emulator's mean read wait after 5 s: {bbr_lag:.3} ms (bpf_bbr), {our_lag:.3} ms (patched_bbr)");
            for (cc, lag) in [("bpf_bbr", bbr_lag), ("patched_bbr", our_lag)] {
                assert!(
                    lag <= 0.5,
                    "the path emulator's reads waited {lag:.3} ms on average during {cc}'s flow: \
                     the gate's timing was the emulator's (testbed-limited at {} Mbit/s)",
                    rate / 1_000_000
                );
            }
            let rtt = |f: &ccctl_lab::iperf::FlowResult| {
                f.mean_rtt_us
                    .expect("iperf3 reported the sender's mean RTT") as f64
                    / 1e3
            };
            println!(
                "Heavy gate: patched_bbr {:.2} Mbit/s, RTT {:.1} ms, {} retransmissions; \
                 bpf_bbr {:.2} Mbit/s, RTT {:.1} ms, {} retransmissions; goodput ratio {:.2}, RTT ratio {:.2}",
                ours.goodput_bps / 1e6,
                rtt(&ours),
                ours.retransmits,
                bbr.goodput_bps / 1e6,
                rtt(&bbr),
                bbr.retransmits,
                ours.goodput_bps / bbr.goodput_bps.max(1.0),
                rtt(&ours) / rtt(&bbr)
            );
            assert!(
                ours.goodput_bps >= 3.0 * bbr.goodput_bps,
                "patched_bbr {:.0} bit/s, bpf_bbr {:.0}",
                ours.goodput_bps,
                bbr.goodput_bps
            );
            assert!(
                rtt(&ours) <= 1.25 * rtt(&bbr),
                "patched_bbr's mean RTT {:.1} ms, bpf_bbr's {:.1} ms: more than 1.25x",
                rtt(&ours),
                rtt(&bbr)
            );
        });
    }

    /// Unloaded during a Heavy-gated flow, patched_bbr's socket keeps its
    /// ops but loses its transmit tracer: from 1 s after the unload on
    /// every traced ACK has Θ = 1 (the tracer-lost rule, departure 10).
    #[test]
    fn patched_theta_returns_to_one_after_unload() {
        crate::common::starved::unstarved("patched_theta_returns_to_one_after_unload", || {
            let _clean = Clean::new();
            let r = patched::unload_during_a_gated_flow();
            assert!(
                r.theta_before < 0.5,
                "Θ before the unload {:.3}: the gate was not seen",
                r.theta_before
            );
            assert!(
                r.events_after > 100,
                "{} events after the unload",
                r.events_after
            );
            assert_eq!(
                r.stale_after, 0,
                "{} of {} ACKs after the unload ran with Θ != 1",
                r.stale_after, r.events_after
            );
        });
    }
}

/// `cargo xtask reproduce --quick fabric-fig6-fqcodel` on this kernel's path
/// emulator (FQ-CoDel in userspace): the report holds what its Parquet
/// files hold.
#[test]
fn reproduce_quick_reports_what_its_parquet_files_hold() {
    common::reproduce::reproduce_quick_reports_what_its_parquet_files_hold("host");
}

/// The rollout policy (`ccctl policy`, issue 28): rules by port, prefix and
/// cgroup take exactly the connections they name, over IPv4 and IPv6; a
/// 25 % canary of 200 connections; rollback of live connections; the
/// judge takes a parent cgroup's rule to its child cgroups; live
/// connections move onto the rules only with `apply --migrate`.
mod policy {
    #[test]
    fn policy_rules_by_port_and_prefix_take_exactly_theirs() {
        crate::common::policy::rules_by_port_and_prefix_take_exactly_theirs();
    }

    #[test]
    fn policy_rule_by_cgroup_takes_exactly_its_processes() {
        crate::common::policy::rule_by_cgroup_takes_exactly_its_processes();
    }

    #[test]
    fn policy_canary_takes_its_share_and_rollback_moves_live_flows_back() {
        crate::common::policy::canary_takes_its_share_and_rollback_moves_live_flows_back();
    }

    #[test]
    fn policy_daemon_applies_rules_and_reloads_them_on_sighup() {
        crate::common::policy::daemon_applies_rules_and_reloads_them_on_sighup();
    }

    #[test]
    fn policy_enforce_overrides_the_applications_choice_only_when_set() {
        crate::common::policy::enforce_overrides_the_applications_choice_only_when_set();
    }

    #[test]
    fn hot_upgrade_keeps_50_live_flows() {
        crate::common::policy::hot_upgrade_keeps_50_live_flows();
    }

    #[test]
    fn policy_apply_survives_sigkill_anywhere() {
        crate::common::policy::policy_apply_survives_sigkill_anywhere();
    }

    #[test]
    fn policy_judge_rolls_back_a_harmful_canary_and_keeps_a_harmless_one() {
        crate::common::starved::unstarved(
            "policy_judge_rolls_back_a_harmful_canary_and_keeps_a_harmless_one",
            || {
                crate::common::policy_judge::judge_rolls_back_a_harmful_canary_and_keeps_a_harmless_one();
            },
        );
    }

    #[test]
    fn policy_judge_holds_the_control_harm_against_its_baseline() {
        crate::common::starved::unstarved(
            "policy_judge_holds_the_control_harm_against_its_baseline",
            || {
                crate::common::policy_judge::judge_holds_the_control_harm_against_its_baseline();
            },
        );
    }

    #[test]
    fn policy_apply_and_rollback_write_audit_lines() {
        crate::common::policy_judge::apply_and_rollback_write_audit_lines();
    }

    #[test]
    fn policy_bad_files_change_nothing() {
        crate::common::policy::bad_policies_change_nothing();
    }

    #[test]
    fn policy_judge_takes_the_connections_of_child_cgroups() {
        crate::common::policy_judge::judge_takes_the_connections_of_child_cgroups();
    }

    #[test]
    fn policy_rules_by_ipv6_prefix_take_ipv6_connections_only() {
        crate::common::policy::rules_by_ipv6_prefix_take_ipv6_connections_only();
    }

    #[test]
    fn policy_migrate_moves_live_connections_only_when_asked() {
        crate::common::policy::migrate_moves_live_connections_only_when_asked();
    }
}
