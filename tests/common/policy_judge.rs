//! The daemon's canary judge (issue 28, piece 6), on the userspace path
//! emulator: a harmful canary is rolled back by itself, a harmless one is
//! not; every change is an audit line; the rules show in /metrics.
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccctl_core::policy::audit::{self, Action};
use ccctl_core::policy::judge::Breach;
use ccctl_lab::testbed::{Role, SenderConfig, Testbed, TestbedConfig};

use super::policy::{by_cc, sockets_to, PolicyGuard};
use super::{ccctl, ccctl_env, tempdir, Spawned};

const RATE: u64 = 100_000_000;
const RTT: Duration = Duration::from_millis(10);

/// One sender, 100 Mbit/s, 10 ms, a 0.25 BDP buffer (31 kB, 20 packets).
fn shallow_testbed() -> Testbed {
    let bdp = RATE / 8 * RTT.as_millis() as u64 / 1000;
    let mut cfg = TestbedConfig::new(RATE, bdp / 4).userspace();
    cfg.senders = vec![SenderConfig {
        rtt: RTT,
        gate: None,
    }];
    super::flows::testbed(cfg)
}

fn ns(tb: &Testbed, role: Role) -> std::path::PathBuf {
    ccctl_sys::netns::named(&tb.ns(role))
}

/// A listener in the receiver's namespace reading and dropping everything.
struct Sink {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    addr: SocketAddr,
}

impl Sink {
    fn start(tb: &Testbed, port: u16) -> Sink {
        let addr = SocketAddr::new(tb.receiver_addr(), port);
        let l = ccctl_sys::netns::run_in(&ns(tb, Role::Receiver), || TcpListener::bind(addr))
            .expect("entering the receiver namespace")
            .expect("listening");
        l.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            let mut readers = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut c, _)) => {
                        let s = s.clone();
                        let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
                        readers.push(std::thread::spawn(move || {
                            let mut b = vec![0u8; 1 << 16];
                            while !s.load(Ordering::Relaxed) {
                                match c.read(&mut b) {
                                    Ok(0) => break,
                                    Ok(_) => {}
                                    Err(e)
                                        if e.kind() == std::io::ErrorKind::WouldBlock
                                            || e.kind() == std::io::ErrorKind::TimedOut => {}
                                    Err(_) => break,
                                }
                            }
                        }));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for r in readers {
                let _ = r.join();
            }
        });
        Sink {
            stop,
            threads: vec![t],
            addr,
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Bulk senders: each connection writes until dropped.
struct Bulk {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Bulk {
    fn start(conns: Vec<TcpStream>) -> Bulk {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = conns
            .into_iter()
            .map(|mut c| {
                let s = stop.clone();
                std::thread::spawn(move || {
                    let _ = c.set_write_timeout(Some(Duration::from_millis(200)));
                    let buf = vec![0x5au8; 1 << 16];
                    while !s.load(Ordering::Relaxed) {
                        match c.write(&buf) {
                            Ok(_) => {}
                            Err(e)
                                if e.kind() == std::io::ErrorKind::WouldBlock
                                    || e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(e) => panic!("a bulk connection failed (reset?): {e}"),
                        }
                    }
                })
            })
            .collect();
        Bulk { stop, threads }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().expect("a bulk sender panicked");
        }
    }
}

impl Drop for Bulk {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// `per_side` local ports on each side of a 50 % canary toward `to`.
fn split_ports(from: IpAddr, to: SocketAddr, first: u16, per_side: usize) -> Vec<u16> {
    let (mut can, mut ctl) = (Vec::new(), Vec::new());
    for p in first.. {
        let h = ccctl_core::policy::canary_hash(from, p, to.ip(), to.port());
        let side = if ccctl_core::policy::in_canary(h, 5000) {
            &mut can
        } else {
            &mut ctl
        };
        if side.len() < per_side {
            side.push(p);
        }
        if can.len() == per_side && ctl.len() == per_side {
            break;
        }
    }
    can.into_iter().chain(ctl).collect()
}

fn connect_ports(tb: &Testbed, to: SocketAddr, ports: &[u16]) -> Vec<TcpStream> {
    ports
        .iter()
        .flat_map(|&p| super::policy::connect(tb, 0, to, 1, Some(p)))
        .collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn scrape(port: u16) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("metrics endpoint");
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut out = String::new();
    c.read_to_string(&mut out).expect("answer");
    out
}

/// The value of the metric line starting with `prefix` (name and labels).
fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn state(rule: &str) -> String {
    let v: serde_json::Value =
        serde_json::from_str(&ccctl(&["policy", "show", "--json"]).ok().stdout).expect("json");
    v["policy"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == rule)
        .map(|r| r["state"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// How long after now the rule was seen rolled back (polled every 250 ms),
/// or None if it was not within `limit`.
fn rolled_back_within(rule: &str, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if state(rule) == "rolled_back" {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

/// The audit log's one automatic rollback (fails unless there is exactly
/// one), its reason printed.
fn the_auto_rollback(recs: &[audit::Record]) -> &audit::Record {
    let auto: Vec<_> = recs
        .iter()
        .filter(|r| r.action == Action::AutoRollback)
        .collect();
    assert_eq!(auto.len(), 1, "{recs:?}");
    println!("decided: {}", auto[0].why);
    auto[0]
}

/// A daemon with two canary rules on the sender's namespace, both 50 % with
/// Cubic as the control and the same judge (`thresholds`, then hold 3 s,
/// interval 1 s, at least 2 connections a group): "harmful" (`bpf-bbr`
/// with cwnd_gain 3) on remote port `ports.0`, "harmless" (Reno) on
/// `ports.1`. `extra`: more of the daemon's config. Returns once the
/// harmless rule is in `state` (the daemon applied them).
fn harmful_and_harmless_daemon(
    tb: &Testbed,
    dir: &Path,
    audit_path: &Path,
    (bad_port, good_port): (u16, u16),
    extra: &str,
    thresholds: &str,
    state_after_apply: &str,
) -> Spawned {
    let judge =
        format!("[rule.judge]\n{thresholds}hold = \"3s\"\ninterval = \"1s\"\nmin_flows = 2\n");
    let cfg = format!(
        "on_exit = \"unload\"\naudit = \"{audit}\"\n{extra}\n\
         [[rule]]\nname = \"harmful\"\nmatch = {{ remote_port = {bad_port}, netns = \"{ns}\" }}\n\
         algorithm = \"bpf-bbr\"\nparams = {{ cwnd_gain = 3.0 }}\nshare = 0.5\ncontrol = \"cubic\"\n{judge}\n\
         [[rule]]\nname = \"harmless\"\nmatch = {{ remote_port = {good_port}, netns = \"{ns}\" }}\n\
         algorithm = \"reno\"\nshare = 0.5\ncontrol = \"cubic\"\n{judge}",
        audit = audit_path.display(),
        ns = ns(tb, Role::Sender(0)).display(),
    );
    let cfg_path = dir.join("daemon.toml");
    std::fs::write(&cfg_path, &cfg).expect("config");
    let daemon = spawn_daemon(&cfg_path, dir);
    super::lab::wait_for(
        "the daemon to apply its rules",
        Duration::from_secs(30),
        || state("harmless") == state_after_apply,
    );
    daemon
}

/// The harmful canary: ccctl's BBR (`bpf-bbr`, loss-blind) with cwnd_gain 3 beside
/// Cubic on a 0.25 BDP buffer takes most of the path and retransmits more
/// than Cubic; the judge (goodput ratio at most 2.5, retransmission ratio
/// at most 5, held 3 s, sampled every 1 s) rolls it back within 15 s,
/// its live connections moved to Cubic (none reset), and the audit line has the thresholds and the numbers. Then the
/// harmless canary (Reno beside Cubic, same judge, same window) stays.
pub fn judge_rolls_back_a_harmful_canary_and_keeps_a_harmless_one() {
    let _g = PolicyGuard::new();
    let tb = shallow_testbed();
    let dir = tempdir("policy-judge");
    let audit_path = dir.join("audit.jsonl");
    let (bad_port, good_port) = (tb.alloc_port(), tb.alloc_port());
    let metrics_port = free_port();
    let daemon = harmful_and_harmless_daemon(
        &tb,
        &dir,
        &audit_path,
        (bad_port, good_port),
        &format!("[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"),
        "max_rtt_ratio = 2.0\nmax_retrans_ratio = 5.0\nmin_goodput_ratio = 0.2\nmax_goodput_ratio = 2.5\n",
        "canary",
    );
    let window = Duration::from_secs(15);

    // 1. Harmful: 4 canary + 4 control bulk connections.
    let sink = Sink::start(&tb, bad_port);
    let ports = split_ports(tb.sender_addr(0), sink.addr, 42000, 4);
    let bulk = Bulk::start(connect_ports(&tb, sink.addr, &ports));
    let rolled_after = rolled_back_within("harmful", window + Duration::from_secs(5));
    let socks = sockets_to(&tb, 0, Some(bad_port), 8);
    let after = by_cc(&socks);
    let m = scrape(metrics_port);
    bulk.stop();
    drop(sink);
    let rolled_after = rolled_after.expect("the harmful canary was not rolled back");
    println!("harmful canary rolled back after {rolled_after:?}; its connections now {after:?}");
    assert!(
        rolled_after <= window,
        "rolled back after {rolled_after:?}, window {window:?}"
    );
    assert_eq!(
        after.get("cubic"),
        Some(&8),
        "live canary connections moved to the control: {after:?}"
    );
    assert_eq!(
        metric(
            &m,
            "ccctl_policy_rule_state{rule=\"harmful\",state=\"rolled_back\"}"
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "ccctl_policy_rule_auto_rollbacks_total{rule=\"harmful\"}"
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "ccctl_policy_rule_connections_total{rule=\"harmful\",group=\"canary\"}"
        ),
        Some(4.0),
        "{m}"
    );
    let recs = audit::read(&audit_path).expect("the audit log");
    assert_eq!(recs[0].action, Action::Apply, "{recs:?}");
    assert_eq!(recs[0].rules.len(), 2);
    assert_eq!(recs[0].rules[0].kernel_name, "bpf_bbr_p1");
    let auto = the_auto_rollback(&recs);
    assert_eq!(auto.rules[0].name, "harmful");
    let d = auto.decision.as_ref().expect("the numbers that decided");
    println!(
        "ratios: retransmission {:.2}, RTT {:.2}, goodput {:.2}",
        d.retrans_ratio, d.rtt_ratio, d.goodput_ratio
    );
    assert!(d.held_s >= 3.0, "{d:?}");
    assert_eq!(d.thresholds.max_retrans_ratio, 5.0);
    assert!(d.canary.flows >= 2 && d.control.flows >= 2, "{d:?}");
    assert!(!d.breaches.is_empty(), "{d:?}");
    for b in &d.breaches {
        match *b {
            Breach::RetransRatio { measured, limit } | Breach::GoodputShare { measured, limit } => {
                assert!(measured > limit, "{b:?}")
            }
            _ => panic!("a harmful canary breaches by retransmissions or by its share: {b:?}"),
        }
    }
    assert_eq!(auto.outcome["moved"], 4, "{:?}", auto.outcome);
    assert!(auto.why.contains("canary judge"), "{}", auto.why);

    // 2. Harmless: the same split, judge and window; stays a canary.
    let sink = Sink::start(&tb, good_port);
    let ports = split_ports(tb.sender_addr(0), sink.addr, 43000, 4);
    let bulk = Bulk::start(connect_ports(&tb, sink.addr, &ports));
    let started = Instant::now();
    let mut worst: Option<(f64, f64, f64)> = None;
    while started.elapsed() < window {
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(
            state("harmless"),
            "canary",
            "a harmless canary was rolled back"
        );
        let m = scrape(metrics_port);
        let g = |name: &str, group: &str| {
            metric(
                &m,
                &format!("ccctl_policy_group_{name}{{rule=\"harmless\",group=\"{group}\"}}"),
            )
        };
        if let (Some(rc), Some(rl), Some(gc), Some(gl)) = (
            g("retransmission_ratio", "canary"),
            g("retransmission_ratio", "control"),
            g("goodput_bits_per_second", "canary"),
            g("goodput_bits_per_second", "control"),
        ) {
            let r = rc / rl.max(ccctl_core::policy::judge::RETRANS_FLOOR);
            let gr = gc / gl.max(1.0);
            println!("harmless: retransmission ratio {r:.2}, goodput ratio {gr:.2} (canary {:.1} Mbit/s/flow, control {:.1})", gc / 1e6, gl / 1e6);
            let w = worst.get_or_insert((r, gr, 0.0));
            w.0 = w.0.max(r);
            w.1 = w.1.min(gr);
            w.2 += 1.0;
        }
    }
    let socks = sockets_to(&tb, 0, Some(good_port), 8);
    let counts = by_cc(&socks);
    bulk.stop();
    drop(sink);
    let (worst_r, worst_g, n) = worst.expect("the harmless rule's groups in /metrics");
    println!("harmless over {n} samples: worst retransmission ratio {worst_r:.2}, worst goodput ratio {worst_g:.2}; {counts:?}");
    assert!(n >= 5.0, "the judge sampled the harmless groups");
    assert_eq!(counts.get("reno"), Some(&4), "{counts:?}");
    assert_eq!(state("harmless"), "canary");

    ccctl_sys::signals::kill(daemon.id(), rustix::process::Signal::TERM);
    let out = daemon.take().wait_with_output().expect("daemon exit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stderr}");
    assert!(out.status.success(), "daemon: {stderr}");
    let recs = audit::read(&audit_path).expect("the audit log");
    let actions: Vec<Action> = recs.iter().map(|r| r.action).collect();
    assert_eq!(
        actions,
        vec![Action::Apply, Action::AutoRollback, Action::Clear],
        "no rollback of the harmless rule; the exit's clear recorded"
    );
    let _ = tb.destroy();
}

/// The harm to the control against its baseline (issue 28: harm as the
/// lab computes it, against the control with no canary beside it). Both
/// rules' judges measure 4 s of their connections all on Cubic first
/// (state `baseline`), and every other threshold is loose, so only the
/// harm against that baseline can roll a canary back. Harmful: 4 Cubic
/// connections alone, then, once the canary started, 4 more on the
/// canary's side of the hash, which get ccctl's BBR with cwnd_gain 3 on a
/// 0.25 BDP buffer: the control's goodput per connection falls far below
/// the baseline's total over today's 8 connections (harm > 0.6 held 3 s:
/// rolled back, the audit line names the control's harm and carries the
/// baseline). Harmless: the same with Reno as the canary: 8 connections
/// share the path as 8 Cubic ones would, no rollback in 15 s.
///
/// The limit sits between the two cases with room on both sides: the
/// harmful canary's goodput harm read 0.94-0.95 (2026-11-28, three idle
/// runs); the harmless one's stayed below 0.05 for every 3 s hold (an idle
/// run with the limit at 0.05). At 0.3 the test failed once in CI, during
/// a minute of 29.7 % CPU steal (CI's excerpt does not say which check):
/// the path emulator runs in userspace, so a busy host thins the path for
/// both groups, and the control then reads as harmed against its idle
/// baseline; 0.6 asks for twice that before a harmless canary goes.
pub fn judge_holds_the_control_harm_against_its_baseline() {
    let _g = PolicyGuard::new();
    let tb = shallow_testbed();
    let dir = tempdir("policy-baseline");
    let audit_path = dir.join("audit.jsonl");
    let (bad_port, good_port) = (tb.alloc_port(), tb.alloc_port());
    let daemon = harmful_and_harmless_daemon(
        &tb,
        &dir,
        &audit_path,
        (bad_port, good_port),
        "",
        "baseline = \"4s\"\nmax_control_harm = 0.6\nmax_rtt_ratio = 100.0\nmax_retrans_ratio = 1000.0\nmin_goodput_ratio = 0.01\n",
        "baseline",
    );
    let window = Duration::from_secs(15);

    // Control connections alone until the canary starts, then the canary's.
    let run = |port: u16, first_local: u16| {
        let sink = Sink::start(&tb, port);
        let ports = split_ports(tb.sender_addr(0), sink.addr, first_local, 4);
        let (canary_ports, control_ports) = ports.split_at(4);
        let control = Bulk::start(connect_ports(&tb, sink.addr, control_ports));
        let alone = Instant::now();
        let rule = if port == bad_port {
            "harmful"
        } else {
            "harmless"
        };
        super::lab::wait_for(
            "the daemon to measure the baseline and start the canary",
            Duration::from_secs(20),
            || state(rule) == "canary",
        );
        let baseline_took = alone.elapsed();
        let canary = Bulk::start(connect_ports(&tb, sink.addr, canary_ports));
        let counts = by_cc(&sockets_to(&tb, 0, Some(port), 8));
        (sink, control, canary, baseline_took, counts)
    };

    // 1. Harmful.
    let (sink, control, canary, took, counts) = run(bad_port, 44000);
    println!("harmful: baseline measured in {took:?}; connections {counts:?}");
    assert!(
        took >= Duration::from_secs(4),
        "the canary started {took:?} after its control connections: before its 4 s baseline"
    );
    assert_eq!(counts.get("cubic"), Some(&4), "{counts:?}");
    assert_eq!(counts.get("bpf_bbr_p1"), Some(&4), "{counts:?}");
    let rolled_after = rolled_back_within("harmful", window + Duration::from_secs(5));
    canary.stop();
    control.stop();
    drop(sink);
    let rolled_after = rolled_after.expect("the harmful canary was not rolled back");
    println!("harmful canary rolled back after {rolled_after:?}");
    assert!(rolled_after <= window, "rolled back after {rolled_after:?}");
    let recs = audit::read(&audit_path).expect("the audit log");
    let start = recs
        .iter()
        .find(|r| r.action == Action::CanaryStart && r.rules[0].name == "harmful")
        .unwrap_or_else(|| panic!("no canary_start line for the harmful rule: {recs:?}"));
    println!("canary start: {}", start.why);
    assert!(
        start.outcome["secs"].as_f64().is_some_and(|s| s >= 4.0),
        "{:?}",
        start.outcome
    );
    assert!(
        start.outcome["flows"]
            .as_f64()
            .is_some_and(|f| (f - 4.0).abs() < 0.5),
        "{:?}",
        start.outcome
    );
    let auto = the_auto_rollback(&recs);
    let d = auto.decision.as_ref().expect("the numbers that decided");
    let b = d.baseline.expect("the baseline in the decision");
    let h = d.baseline_harm.expect("the harm against it");
    assert!(
        b.total_goodput_bps > 0.5 * RATE as f64,
        "the baseline's 4 Cubic connections carried the path: {b:?}"
    );
    assert!(!d.breaches.is_empty(), "{d:?}");
    for br in &d.breaches {
        match *br {
            Breach::ControlHarm {
                measured, limit, ..
            } => assert!(measured > limit, "{br:?}"),
            _ => panic!("only the harm against the baseline may decide here: {br:?}"),
        }
    }
    // The decision's harm follows from its own numbers and the baseline.
    let expected = b.total_goodput_bps / f64::from(d.canary.flows + d.control.flows);
    assert!(
        (h.goodput_harm - (1.0 - d.control.goodput_bps / expected)).abs() < 1e-9,
        "{h:?}"
    );
    assert!(auto.why.contains("against its baseline"), "{}", auto.why);

    // 2. Harmless.
    let (sink, control, canary, took, counts) = run(good_port, 45000);
    println!("harmless: baseline measured in {took:?}; connections {counts:?}");
    assert!(took >= Duration::from_secs(4), "{took:?}");
    assert_eq!(counts.get("reno"), Some(&4), "{counts:?}");
    let started = Instant::now();
    while started.elapsed() < window {
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(
            state("harmless"),
            "canary",
            "a harmless canary was rolled back"
        );
    }
    canary.stop();
    control.stop();
    drop(sink);

    ccctl_sys::signals::kill(daemon.id(), rustix::process::Signal::TERM);
    let out = daemon.take().wait_with_output().expect("daemon exit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stderr}");
    assert!(out.status.success(), "daemon: {stderr}");
    let recs = audit::read(&audit_path).expect("the audit log");
    let actions: Vec<(Action, String)> = recs
        .iter()
        .map(|r| {
            (
                r.action,
                r.rules.first().map(|x| x.name.clone()).unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        actions.iter().map(|a| a.0).collect::<Vec<_>>(),
        vec![
            Action::Apply,
            Action::CanaryStart,
            Action::AutoRollback,
            Action::CanaryStart,
            Action::Clear
        ],
        "{actions:?}"
    );
    let _ = tb.destroy();
}

/// `ccctl policy apply` and `rollback` by hand each append one line to
/// `--audit FILE`; an audit log that cannot be written refuses the change.
pub fn apply_and_rollback_write_audit_lines() {
    let _g = PolicyGuard::new();
    let dir = tempdir("policy-audit");
    let log = dir.join("audit.jsonl");
    let file = dir.join("policy.toml");
    std::fs::write(
        &file,
        "[[rule]]\nname = \"a\"\nmatch = { remote_port = 45999 }\nalgorithm = \"reno\"\nshare = 0.5\ncontrol = \"cubic\"\n",
    )
    .expect("policy");
    let f = file.to_str().expect("utf-8");
    let l = log.to_str().expect("utf-8");
    ccctl(&["policy", "apply", f, "--audit", l]).ok();
    ccctl(&[
        "policy",
        "rollback",
        "a",
        "--why",
        "test says so",
        "--audit",
        l,
    ])
    .ok();
    // $CCCTL_AUDIT is the fallback.
    ccctl_env(&["policy", "clear"], &[(audit::AUDIT_ENV, l)]).ok();
    let recs = audit::read(&log).expect("audit log");
    let actions: Vec<Action> = recs.iter().map(|r| r.action).collect();
    assert_eq!(
        actions,
        vec![Action::Apply, Action::Rollback, Action::Clear]
    );
    assert_eq!(recs[0].rules[0].name, "a");
    assert_eq!(recs[0].rules[0].share, 0.5);
    assert_eq!(recs[0].rules[0].control.as_deref(), Some("cubic"));
    assert_eq!(recs[1].why, "test says so");
    assert_eq!(recs[1].outcome["to"], "cubic");
    assert!(recs.iter().all(|r| r.who.uid == 0 && r.at.ends_with('Z')));
    assert!(recs[1].who.command.iter().any(|a| a == "rollback"));
    // An unwritable log: refused, nothing applied.
    let bad = Path::new("/proc/ccctl-no/audit.jsonl");
    ccctl(&[
        "policy",
        "apply",
        f,
        "--audit",
        bad.to_str().expect("utf-8"),
    ])
    .failed_with(&["audit log", "nothing changed"]);
    assert!(
        !super::pin_root().join("policy").exists(),
        "nothing applied"
    );
}

/// Python (the venv `cargo xtask setup` makes) for a client that must run
/// as its own process, in a cgroup of the test's choosing.
const PYTHON: &str = "/opt/ccctl/venv/bin/python3";

/// Connects from `SRC` to `DST:DPORT` from the local ports `IDLE` (then
/// left idle) and `BULK` (then each written 16 KiB every 20 ms, a few
/// Mbit/s) and holds them for `SECS`. argv: SRC DST DPORT IDLE,... BULK,... SECS.
const CLIENT_PY: &str = r#"
import socket, sys, time
src, dst, dport = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in src else socket.AF_INET
def conn(p):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((src, p))
    s.connect((dst, dport))
    return s
idle = [conn(int(p)) for p in sys.argv[4].split(",")]
bulk = [conn(int(p)) for p in sys.argv[5].split(",")]
for s in bulk:
    s.setblocking(False)
buf = b"x" * 16384
end = time.time() + float(sys.argv[6])
while time.time() < end:
    for s in bulk:
        try:
            s.send(buf)
        except BlockingIOError:
            pass
    time.sleep(0.02)
"#;

/// [`CLIENT_PY`] as a process of `cgroup`, in sender 0's namespace.
fn client_in_cgroup(
    tb: &Testbed,
    cgroup: &Path,
    to: SocketAddr,
    idle: &[u16],
    bulk: &[u16],
    secs: u32,
) -> Spawned {
    let list = |ps: &[u16]| ps.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
    Spawned::new(
        Command::new("sh")
            .args([
                "-c",
                &format!(
                    "echo $$ > {}/cgroup.procs && exec ip netns exec {} {PYTHON} -c \"$0\" \"$@\"",
                    cgroup.display(),
                    tb.ns(Role::Sender(0))
                ),
                CLIENT_PY,
                &tb.sender_addr(0).to_string(),
                &to.ip().to_string(),
                &to.port().to_string(),
                &list(idle),
                &list(bulk),
                &secs.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the python client"),
    )
}

/// The judge sees what the rule takes: a rule on a *parent* cgroup judges
/// the connections of a process in a *child* cgroup (as the BPF side and
/// the dry run put them under the rule). Two idle canary connections
/// (Reno) and two bulk control connections (Cubic), picked by the canary
/// hash, from a process in `<test cgroup>/app`; the rule names the test
/// cgroup. `/metrics` shows 2 + 2 flows in the rule's groups, the judge
/// (canary goodput at least 0.5 of the control's, held 2 s) rolls the
/// idle canary back with a goodput-ratio breach over those 2 + 2 flows,
/// and its 2 live connections move to Cubic. A judge blind to child
/// cgroups sees no flows and never decides (this test then times out).
pub fn judge_takes_the_connections_of_child_cgroups() {
    let _g = PolicyGuard::new();
    let parent = super::policy::TestCgroup::new();
    let child = parent.child("app");
    let tb = super::policy::testbed(1);
    let dir = tempdir("policy-judge-cgroup");
    let audit_path = dir.join("audit.jsonl");
    let port = tb.alloc_port();
    let metrics_port = free_port();
    let cfg = format!(
        "on_exit = \"unload\"\naudit = \"{audit}\"\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n\n\
         [[rule]]\nname = \"by-cgroup\"\nmatch = {{ cgroup = \"{cg}\", netns = \"{ns}\" }}\n\
         algorithm = \"reno\"\nshare = 0.5\ncontrol = \"cubic\"\n\
         [rule.judge]\nmin_goodput_ratio = 0.5\nmax_rtt_ratio = 50.0\nmax_retrans_ratio = 1000.0\n\
         hold = \"2s\"\ninterval = \"1s\"\nmin_flows = 2\n",
        audit = audit_path.display(),
        cg = parent.0.display(),
        ns = ns(&tb, Role::Sender(0)).display(),
    );
    let cfg_path = dir.join("daemon.toml");
    std::fs::write(&cfg_path, &cfg).expect("config");
    let daemon = spawn_daemon(&cfg_path, &dir);
    super::lab::wait_for(
        "the daemon to apply its rule",
        Duration::from_secs(30),
        || state("by-cgroup") == "canary",
    );
    let sink = Sink::start(&tb, port);
    let ports = split_ports(tb.sender_addr(0), sink.addr, 44000, 2);
    let (canary_ports, control_ports) = ports.split_at(2);
    let client = client_in_cgroup(&tb, &child.0, sink.addr, canary_ports, control_ports, 40);
    let socks = sockets_to(&tb, 0, Some(port), 4);
    let child_id = child.id();
    println!(
        "from the child cgroup ({child_id}): {:?}",
        socks
            .iter()
            .map(|s| (s.local.port(), s.cc.clone(), s.cgroup_id))
            .collect::<Vec<_>>()
    );
    assert_eq!(socks.len(), 4, "the client's 4 connections");
    assert!(
        socks.iter().all(|s| s.cgroup_id == Some(child_id)),
        "inet_diag puts them in the child cgroup"
    );
    for s in &socks {
        let want = if canary_ports.contains(&s.local.port()) {
            "reno"
        } else {
            "cubic"
        };
        assert_eq!(
            s.cc.as_deref(),
            Some(want),
            "port {}: the BPF side takes the child cgroup's connections",
            s.local.port()
        );
    }
    // The judge's groups, as /metrics shows them.
    let mut flows = (None, None);
    super::lab::wait_for(
        "the judge to count the child cgroup's connections",
        Duration::from_secs(10),
        || {
            let m = scrape(metrics_port);
            let f = |g: &str| {
                metric(
                    &m,
                    &format!("ccctl_policy_group_flows{{rule=\"by-cgroup\",group=\"{g}\"}}"),
                )
            };
            flows = (f("canary"), f("control"));
            flows == (Some(2.0), Some(2.0)) || state("by-cgroup") == "rolled_back"
        },
    );
    println!("judged flows (canary, control): {flows:?}");
    let started = Instant::now();
    super::lab::wait_for(
        "the judge to roll the idle canary back",
        Duration::from_secs(15),
        || state("by-cgroup") == "rolled_back",
    );
    println!(
        "rolled back {:?} after the flows were counted",
        started.elapsed()
    );
    // The state flips first; the live connections move after it, then the
    // audit line is written.
    super::lab::wait_for(
        "the automatic rollback's audit line",
        Duration::from_secs(10),
        || {
            audit::read(&audit_path)
                .is_ok_and(|rs| rs.iter().any(|r| r.action == Action::AutoRollback))
        },
    );
    let after = by_cc(&sockets_to(&tb, 0, Some(port), 4));
    assert_eq!(
        after.get("cubic"),
        Some(&4),
        "the canary's live connections moved to the control: {after:?}"
    );
    let recs = audit::read(&audit_path).expect("the audit log");
    let auto = the_auto_rollback(&recs);
    let d = auto.decision.as_ref().expect("the numbers that decided");
    assert_eq!(
        (d.canary.flows, d.control.flows),
        (2, 2),
        "the child cgroup's connections were judged: {d:?}"
    );
    assert!(
        d.breaches
            .iter()
            .any(|b| matches!(b, Breach::GoodputRatio { measured, .. } if *measured < 0.5)),
        "an idle canary breaches by goodput: {d:?}"
    );
    assert_eq!(auto.outcome["moved"], 2, "{:?}", auto.outcome);
    drop(client);
    drop(sink);
    ccctl_sys::signals::kill(daemon.id(), rustix::process::Signal::TERM);
    let out = daemon.take().wait_with_output().expect("daemon exit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "daemon: {stderr}");
    let _ = tb.destroy();
}

/// `ccctl daemon` on `cfg`, its lock in `dir`, the audit log where the
/// config says (not the environment's), stderr kept for the test.
fn spawn_daemon(cfg: &std::path::Path, dir: &std::path::Path) -> Spawned {
    Spawned::new(
        Command::new(super::ccctl_bin())
            .args(["daemon", "--config"])
            .arg(cfg)
            .arg("--lock")
            .arg(dir.join("daemon.lock"))
            .env_remove(audit::AUDIT_ENV)
            .stderr(Stdio::piped())
            .spawn()
            .expect("ccctl daemon"),
    )
}
