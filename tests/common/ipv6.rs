//! IPv6: per-ACK traces of IPv6 flows filtered by IPv6 address
//! and prefix beside IPv4 flows, and the lab over IPv6. Shared by the host
//! and VM test binaries.
use std::collections::BTreeSet;
use std::time::Duration;

use ccctl_lab::iperf::{self, FlowResult, FlowSpec};
use ccctl_lab::testbed::{IpVersion, Testbed, TestbedConfig};
use polars::prelude::DataFrame;

use super::lab::{
    check_summary_against_samples, f64s, lab_run, metadata, read_parquet, rows, strs, wait_for,
};
use super::tracing::{interrupt, spawn_trace, trace_cfg_enabled, u64s};
use super::{ccctl, registered, tempdir, Clean};

/// `AF_INET` and `AF_INET6` as the trace's `family` column holds them
/// (include/linux/socket.h).
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;

/// Runs the flows of each testbed at once while `ccctl trace <filter>`
/// records them; returns the trace and the flows, per testbed.
fn trace_during(
    tag: &str,
    filter: &[&str],
    flows: &[(&Testbed, Vec<FlowSpec>)],
) -> (DataFrame, Vec<Vec<FlowResult>>) {
    let out_dir = tempdir(tag);
    let out = out_dir.join("trace.parquet");
    let mut args = vec!["--algo", "bpf-bbr"];
    args.extend_from_slice(filter);
    let tracer = spawn_trace(&args, &out);
    wait_for(
        "tracing to be switched on",
        Duration::from_secs(30),
        trace_cfg_enabled,
    );
    let running: Vec<_> = flows
        .iter()
        .map(|(tb, specs)| iperf::spawn_flows(tb, specs).expect("starting iperf3"))
        .collect();
    let results: Vec<Vec<FlowResult>> = running
        .into_iter()
        .map(|r| r.wait().expect("flows finish"))
        .collect();
    let (code, stderr) = interrupt(tracer);
    assert_eq!(code, 0, "ccctl trace after SIGINT: {stderr}");
    for (t, rs) in results.iter().enumerate() {
        for r in rs {
            println!(
                "testbed {t}: port {:?}: {:.1} Mbit/s",
                r.local_port,
                r.goodput_bps / 1e6
            );
        }
    }
    println!("{}", stderr.trim());
    (read_parquet(&out), results)
}

/// Every row's (saddr, daddr, sport, dport, family).
fn tuples(df: &DataFrame) -> Vec<(String, String, u64, u64, u64)> {
    let (saddr, daddr) = (strs(df, "saddr"), strs(df, "daddr"));
    let (sport, dport, family) = (u64s(df, "sport"), u64s(df, "dport"), u64s(df, "family"));
    (0..df.height())
        .map(|i| {
            (
                saddr[i].clone(),
                daddr[i].clone(),
                sport[i],
                dport[i],
                family[i],
            )
        })
        .collect()
}

/// Three bpf_bbr flows at once, all to port 5201 or 5202 so that ports
/// alone cannot tell them apart: A from fd00:ccc:0:1::1 and B from
/// fd00:ccc:0:2::1 (one IPv6 testbed, two senders) to [fd00:ccc::2]:5201 and
/// :5202, and C from 198.18.1.1 to 198.18.0.2:5201 (an IPv4 testbed).
///
/// 1. `--local fd00:ccc:0:1::/64 --remote fd00:ccc::2`: only A's events,
///    with A's addresses as text, port and family AF_INET6. B has A's
///    remote address and differs from A's local one only in the third
///    group, inside the /48 (a match on the first 32 bits would take it);
///    C is IPv4.
/// 2. `--remote 198.18.0.0/15:5201`: only C's, as `198.18.1.1` ->
///    `198.18.0.2`, family AF_INET (A has C's port).
///
/// Each phase carries every flow (bytes received) so an exclusion means
/// the filter, not an idle flow; the filtered flow's data connection has
/// events (`min_events`).
pub fn ipv6_and_ipv4_flows_filtered_by_address(
    rate_bps: u64,
    buffer_bytes: u64,
    secs: u64,
    min_events: usize,
) {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let tb6 = Testbed::new(
        TestbedConfig::new(rate_bps, buffer_bytes)
            .with_rtts(&[Duration::ZERO, Duration::ZERO])
            .with_ip(IpVersion::V6),
    )
    .expect("IPv6 testbed");
    let tb4 = Testbed::new(TestbedConfig::new(rate_bps, buffer_bytes)).expect("IPv4 testbed");
    assert_eq!(tb6.sender_addr(0).to_string(), "fd00:ccc:0:1::1");
    let flows = || {
        let d = Duration::from_secs(secs);
        vec![
            (
                &tb6,
                vec![
                    FlowSpec::new(0, "bpf_bbr", d).port(5201),
                    FlowSpec::new(1, "bpf_bbr", d).port(5202),
                ],
            ),
            (&tb4, vec![FlowSpec::new(0, "bpf_bbr", d).port(5201)]),
        ]
    };
    let carried = |results: &[Vec<FlowResult>]| {
        for (t, rs) in results.iter().enumerate() {
            for (i, r) in rs.iter().enumerate() {
                assert!(
                    r.receiver_bytes > 100_000,
                    "testbed {t} flow {i} carried {} bytes",
                    r.receiver_bytes
                );
            }
        }
    };

    // 1. An IPv6 prefix and an IPv6 address.
    let (df, results) = trace_during(
        "ipv6-trace",
        &["--local", "fd00:ccc:0:1::/64", "--remote", "fd00:ccc::2"],
        &flows(),
    );
    carried(&results);
    let rows = tuples(&df);
    let data_port = results[0][0].local_port.expect("A's local port") as u64;
    let mut sports = BTreeSet::new();
    for (saddr, daddr, sport, dport, family) in &rows {
        assert_eq!(
            (saddr.as_str(), daddr.as_str(), *dport, *family),
            ("fd00:ccc:0:1::1", "fd00:ccc::2", 5201, AF_INET6),
            "an event of another flow passed the IPv6 filter"
        );
        sports.insert(*sport);
    }
    let a = rows.iter().filter(|r| r.2 == data_port).count();
    println!(
        "IPv6 filter: {} events ({a} of A's data connection), local ports {sports:?}",
        rows.len()
    );
    assert!(
        a >= min_events,
        "{a} events of A's data connection (port {data_port})"
    );

    // 2. An IPv4 prefix with a port: the IPv4 flow only.
    let (df, results) = trace_during("ipv4-trace", &["--remote", "198.18.0.0/15:5201"], &flows());
    carried(&results);
    let rows = tuples(&df);
    let data_port = results[1][0].local_port.expect("C's local port") as u64;
    for (saddr, daddr, _, dport, family) in &rows {
        assert_eq!(
            (saddr.as_str(), daddr.as_str(), *dport, *family),
            ("198.18.1.1", "198.18.0.2", 5201, AF_INET),
            "an event of another flow passed the IPv4 filter"
        );
    }
    let c = rows.iter().filter(|r| r.2 == data_port).count();
    println!(
        "IPv4 filter: {} events ({c} of C's data connection)",
        rows.len()
    );
    assert!(
        c >= min_events,
        "{c} events of C's data connection (port {data_port})"
    );
}

/// A tiny lab run over IPv6 (`--ipv6`): Cubic and bpf_bbr through the IPv6
/// testbed, no baselines. Its samples and summary must be complete: every
/// flow sampled through inet_diag (the AF_INET6 dump), goodputs in the
/// summary recomputed from those samples, the scenario as run saying
/// `ip = "v6"`, and the per-ACK trace of the bpf_bbr flow showing it ran
/// between the testbed's IPv6 addresses.
pub fn lab_runs_over_ipv6(where_: &str, rate: &str, rate_bps: f64) {
    let _clean = Clean::new();
    let (run, _out, dir) = lab_run(
        "ipv6",
        &[
            "--where",
            where_,
            "--ipv6",
            "--rate",
            rate,
            "--rtt",
            "0ms",
            "--buffer",
            "100pkt",
            "--flows",
            "cubic:1, bpf_bbr:1",
            "--duration",
            "5s",
            "--warmup",
            "1s",
            "--no-baselines",
        ],
    );
    let run = run.ok();
    let dir = dir.expect("a run directory");
    assert!(
        run.stdout.contains("/ IPv6"),
        "summary names IPv6:\n{}",
        run.stdout
    );
    assert!(!registered("bpf_bbr"), "the lab unloads what it loaded");
    let meta = metadata(&dir);
    assert_eq!(meta["status"], "complete");
    assert_eq!(
        meta["planned_runs"], 3,
        "calibration (Cubic, then the paced reference) and main"
    );
    let scenario = std::fs::read_to_string(dir.join("scenario.toml")).expect("scenario.toml");
    assert!(scenario.contains("ip = \"v6\""), "{scenario}");

    // Complete: both flows of the main run and the calibration flows sampled
    // all along, every summary goodput recomputed from the samples.
    let samples = read_parquet(&dir.join("samples.parquet"));
    let (run_id, flow) = (f64s(&samples, "run_id"), f64s(&samples, "flow"));
    for key in [(0.0, 0.0), (1.0, 0.0), (2.0, 0.0), (2.0, 1.0)] {
        let n = (0..samples.height())
            .filter(|&i| (run_id[i], flow[i]) == (Some(key.0), Some(key.1)))
            .count();
        // 5 s sampled every 100 ms: 50 readings; allow for start and end.
        assert!(n >= 35, "{n} samples of run {} flow {}", key.0, key.1);
    }
    let summary = read_parquet(&dir.join("summary.parquet"));
    let main = rows(&summary, "flow", "main");
    assert_eq!(main.len(), 2);
    let goodput = f64s(&summary, "goodput_bps");
    let total: f64 = main.iter().map(|&i| goodput[i].expect("goodput")).sum();
    for &i in &main {
        assert!(goodput[i].expect("goodput") > 0.0, "row {i}");
    }
    assert!(
        total > 0.5 * rate_bps && total < 1.02 * rate_bps,
        "main run carried {total} bit/s"
    );
    let g = check_summary_against_samples(&dir, 1.0);
    println!("IPv6 lab goodputs recomputed from samples.parquet: {g:?}");

    // Events of the sender's socket, and of the receiver's (iperf3 sets the
    // algorithm on both ends; the receiver's sees ACKs too): all between
    // the two IPv6 addresses.
    let trace = read_parquet(&dir.join("traces/run-002.parquet"));
    let (saddr, daddr, family) = (
        strs(&trace, "saddr"),
        strs(&trace, "daddr"),
        u64s(&trace, "family"),
    );
    let (sender, receiver) = ("fd00:ccc:0:1::1", "fd00:ccc::2");
    let mut from_sender = 0;
    for i in 0..trace.height() {
        let tuple = (saddr[i].as_str(), daddr[i].as_str(), family[i]);
        assert!(
            tuple == (sender, receiver, AF_INET6) || tuple == (receiver, sender, AF_INET6),
            "event {i} of the bpf_bbr flow: {tuple:?}"
        );
        from_sender += usize::from(tuple.0 == sender);
    }
    println!(
        "IPv6 lab trace: {} events, {from_sender} of the sender",
        trace.height()
    );
    assert!(
        from_sender > 100,
        "{from_sender} events of the sender's socket"
    );
}
