//! The rollout policy from the outside (`ccctl policy ...`): rules by
//! port, by prefix and by cgroup take exactly the connections they name; a
//! canary takes its share; a rollback moves live connections back. Every
//! count is what inet_diag reports for the sockets (`INET_DIAG_CONG`, what
//! `ss -ti` prints), in the testbed's sender namespaces.
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccctl_lab::testbed::{Role, SenderConfig, Testbed, TestbedConfig};
use ccctl_observe::sockdiag::{DiagSocket, TcpSocket};

use super::{ccctl, registered, tempdir, Clean, Spawned};

/// Removes the policy (and what it loaded) when a test ends, pass or fail.
pub struct PolicyGuard {
    _clean: Clean,
}

impl PolicyGuard {
    pub fn new() -> PolicyGuard {
        let _ = ccctl(&["policy", "clear"]);
        PolicyGuard {
            _clean: Clean::new(),
        }
    }
}

impl Drop for PolicyGuard {
    fn drop(&mut self) {
        let _ = ccctl(&["policy", "clear"]);
        // The tests' own audit log (`ccctl()` points $CCCTL_AUDIT there).
        let _ = std::fs::remove_file(super::test_audit_log());
    }
}

/// Lowest server port a rule names: below Linux's ephemeral range
/// (`ip_local_port_range`, 32768-60999 in a new namespace). A rule matches
/// the server's passive sockets too, and a client whose source port happened
/// to equal a rule's port would count as that rule's (CI once read 41 of 40).
const RULE_PORT_BASE: u16 = 20_000;

/// A fresh server port for a rule, `offset` apart from other tests' ports.
fn rule_port(tb: &Testbed, offset: u16) -> u16 {
    let port = tb.alloc_port() + RULE_PORT_BASE + offset;
    assert!(port < 32_768, "rule port {port} inside the ephemeral range");
    port
}

/// A testbed of `senders` senders on the userspace path (10 ms, 100 Mbit/s).
pub fn testbed(senders: usize) -> Testbed {
    let mut cfg = TestbedConfig::new(100_000_000, 400 * 1514).userspace();
    cfg.senders = vec![
        SenderConfig {
            rtt: Duration::from_millis(10),
            gate: None,
        };
        senders
    ];
    super::flows::testbed(cfg)
}

fn ns_path(tb: &Testbed, role: Role) -> PathBuf {
    ccctl_sys::netns::named(&tb.ns(role))
}

/// A listener in the receiver's namespace that accepts everything and
/// holds the connections (answering "pong" to any byte) until dropped.
pub struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub addr: SocketAddr,
}

impl Server {
    pub fn start(tb: &Testbed, port: u16) -> Server {
        let addr = SocketAddr::new(tb.receiver_addr(), port);
        let l = ccctl_sys::netns::run_in(&ns_path(tb, Role::Receiver), || TcpListener::bind(addr))
            .expect("entering the receiver namespace")
            .expect("listening in the receiver namespace");
        l.set_nonblocking(true).expect("nonblocking listener");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => {
                        let _ = c.set_nonblocking(true);
                        held.push(c);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
                for c in &mut held {
                    let mut b = [0u8; 64];
                    if let Ok(n) = c.read(&mut b) {
                        if n > 0 {
                            let _ = c.write_all(b"pong");
                        }
                    }
                }
            }
        });
        Server {
            stop,
            thread: Some(thread),
            addr,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `n` connections from sender `i` to `to`, bound to local ports
/// `first_port..first_port + n` when given (so the 4-tuples, hence the
/// canary split, are the same on every run), made in the sender's namespace.
pub fn connect(
    tb: &Testbed,
    i: usize,
    to: SocketAddr,
    n: usize,
    first_port: Option<u16>,
) -> Vec<TcpStream> {
    connect_with(tb, i, to, n, first_port, None)
}

/// [`connect`], the application choosing `app_cc` (TCP_CONGESTION) before connecting.
pub fn connect_with(
    tb: &Testbed,
    i: usize,
    to: SocketAddr,
    n: usize,
    first_port: Option<u16>,
    app_cc: Option<&'static str>,
) -> Vec<TcpStream> {
    let from = tb.sender_addr(i);
    ccctl_sys::netns::run_in(&ns_path(tb, Role::Sender(i)), move || {
        (0..n)
            .map(|k| {
                let sock = match from {
                    IpAddr::V4(_) => rustix::net::socket(
                        rustix::net::AddressFamily::INET,
                        rustix::net::SocketType::STREAM,
                        None,
                    ),
                    IpAddr::V6(_) => rustix::net::socket(
                        rustix::net::AddressFamily::INET6,
                        rustix::net::SocketType::STREAM,
                        None,
                    ),
                }
                .expect("socket");
                rustix::net::sockopt::set_socket_reuseaddr(&sock, true).expect("SO_REUSEADDR");
                if let Some(cc) = app_cc {
                    rustix::net::sockopt::set_tcp_congestion(&sock, cc).expect("TCP_CONGESTION");
                }
                let port = first_port.map_or(0, |p| p + k as u16);
                rustix::net::bind(&sock, &SocketAddr::new(from, port)).expect("bind");
                rustix::net::connect(&sock, &to).expect("connect");
                TcpStream::from(sock)
            })
            .collect::<Vec<_>>()
    })
    .expect("entering the sender namespace")
}

/// Every TCP socket inet_diag lists in sender `i`'s namespace, waiting until
/// at least `want` of them are established toward `port` (`None`: any port).
pub fn sockets_to(tb: &Testbed, i: usize, port: Option<u16>, want: usize) -> Vec<TcpSocket> {
    let diag = DiagSocket::open_in_netns(&ns_path(tb, Role::Sender(i))).expect("inet_diag");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let all: Vec<TcpSocket> = diag
            .tcp_sockets()
            .expect("dumping sockets")
            .into_iter()
            .filter(|s| port.is_none_or(|p| s.remote.port() == p))
            .collect();
        if all.len() >= want || Instant::now() > deadline {
            return all;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Congestion control -> number of sockets.
pub fn by_cc(socks: &[TcpSocket]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for s in socks {
        *m.entry(s.cc.clone().unwrap_or_default()).or_insert(0) += 1;
    }
    m
}

fn write_policy(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("policy.toml");
    std::fs::write(&p, text).expect("writing the policy file");
    p
}

/// Each connection still answers: a byte out, "pong" back (none was reset).
fn all_alive(conns: &mut [TcpStream]) {
    for c in conns.iter_mut() {
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        c.write_all(b"p").expect("writing on a live connection");
        let mut b = [0u8; 4];
        c.read_exact(&mut b).expect("reading the answer");
        assert_eq!(&b, b"pong");
    }
}

/// A rule by remote port and a rule by local prefix (with a port, so as
/// not to touch other sockets of the machine at the testbed's addresses),
/// two senders, three server ports: every connection a rule names runs its
/// algorithm, every other one does not.
pub fn rules_by_port_and_prefix_take_exactly_theirs() {
    let _g = PolicyGuard::new();
    let tb = testbed(2);
    let (p1, p2, p3) = (rule_port(&tb, 0), rule_port(&tb, 0), rule_port(&tb, 0));
    let dir = tempdir("policy-port-prefix");
    let file = write_policy(
        &dir,
        &format!(
            r#"
[[rule]]
name = "by-port"
match = {{ remote_port = {p1} }}
algorithm = "bpf-bbr"

[[rule]]
name = "by-prefix"
match = {{ local = "198.18.2.0/24", remote_port = {p2} }}
algorithm = "dstar"
"#
        ),
    );
    let dry = ccctl(&[
        "policy",
        "apply",
        file.to_str().expect("utf-8"),
        "--dry-run",
    ])
    .ok();
    assert!(dry.stdout.contains("nothing changed"), "{}", dry.stdout);
    assert!(!registered("bpf_bbr"), "a dry run loads nothing");
    let out = ccctl(&["policy", "apply", file.to_str().expect("utf-8")]).ok();
    println!("{}", out.stdout);
    assert!(
        registered("bpf_bbr") && registered("dstar"),
        "apply loads what the rules name"
    );
    let servers: Vec<Server> = [p1, p2, p3]
        .iter()
        .map(|p| Server::start(&tb, *p))
        .collect();
    let n = 20;
    let mut held = Vec::new();
    for i in 0..2 {
        for s in &servers {
            held.extend(connect(&tb, i, s.addr, n, None));
        }
    }
    let show = ccctl(&["policy", "show"]).ok();
    println!("{}", show.stdout);
    assert!(show.stdout.contains("first match wins"));
    for i in 0..2 {
        for (port, want) in [
            (p1, Some("bpf_bbr")),
            (p2, if i == 1 { Some("dstar") } else { None }),
            (p3, None),
        ] {
            let socks = sockets_to(&tb, i, Some(port), n);
            let counts = by_cc(&socks);
            println!("sender {i} -> port {port}: {counts:?}");
            assert_eq!(socks.len(), n, "sender {i} port {port}: {counts:?}");
            match want {
                Some(cc) => {
                    assert_eq!(counts.get(cc), Some(&n), "sender {i} -> {port}: {counts:?}")
                }
                None => assert!(
                    !counts.contains_key("bpf_bbr") && !counts.contains_key("dstar"),
                    "sender {i} -> {port} is no rule's: {counts:?}"
                ),
            }
        }
    }
    // The counters agree: 40 by port, 20 by prefix.
    let json = ccctl(&["policy", "show", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("show --json");
    assert_eq!(v["counters"]["by-port"]["canary"], 2 * n as u64);
    assert_eq!(v["counters"]["by-prefix"]["canary"], n as u64);
    assert_eq!(v["policy"]["order"], "first match wins");
    drop(held);
    drop(servers);
    ccctl(&["policy", "clear"]).ok();
    assert!(
        !super::pin_root().join("policy").exists(),
        "clear removes the pins"
    );
    assert!(
        !registered("bpf_bbr") && !registered("dstar"),
        "clear unloads what apply loaded"
    );
    let _ = tb.destroy();
}

/// A cgroup v2 directory for one test, removed (its processes gone) on drop.
pub struct TestCgroup(pub PathBuf);

impl TestCgroup {
    pub fn new() -> TestCgroup {
        let root = ccctl_core::policy::kernel::cgroup2_mount().expect("cgroup v2 mounted");
        TestCgroup::at(root.join(format!("ccctl-test-policy-{}", std::process::id())))
    }

    /// A cgroup below this one (drop it before its parent).
    pub fn child(&self, name: &str) -> TestCgroup {
        TestCgroup::at(self.0.join(name))
    }

    fn at(dir: PathBuf) -> TestCgroup {
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).expect("creating a cgroup");
        TestCgroup(dir)
    }

    /// Its cgroup id (the directory's inode number, as inet_diag reports it).
    pub fn id(&self) -> u64 {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&self.0).expect("cgroup"))
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// iperf3 with 4 parallel connections from sender 0, started inside `cgroup`
/// (or the test's own cgroup).
fn iperf_client(tb: &Testbed, port: u16, cgroup: Option<&Path>) -> Spawned {
    let enter = cgroup
        .map(|c| format!("echo $$ > {}/cgroup.procs && ", c.display()))
        .unwrap_or_default();
    let script = format!(
        "{enter}exec ip netns exec {} iperf3 -c {} -p {port} -P 4 -t 8 -b 2M",
        tb.ns(Role::Sender(0)),
        tb.receiver_addr()
    );
    Spawned::new(
        Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting iperf3"),
    )
}

/// A rule by cgroup takes the connections of processes in that cgroup
/// (iperf3 started there: 4 data and 1 control connection), and not those
/// of the same program outside it, from the same host to the same receiver.
pub fn rule_by_cgroup_takes_exactly_its_processes() {
    let _g = PolicyGuard::new();
    let cg = TestCgroup::new();
    let tb = testbed(1);
    let (pa, pb) = (tb.alloc_port(), tb.alloc_port());
    let _servers: Vec<_> = [pa, pb]
        .iter()
        .map(|p| {
            tb.spawn(
                Role::Receiver,
                &["iperf3", "-s", "-1", "-p", &p.to_string()],
            )
            .expect("iperf3 server")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let dir = tempdir("policy-cgroup");
    let file = write_policy(
        &dir,
        &format!(
            "[[rule]]\nname = \"by-cgroup\"\nmatch = {{ cgroup = \"{}\" }}\nalgorithm = \"dstar\"\n",
            cg.0.display()
        ),
    );
    ccctl(&["policy", "apply", file.to_str().expect("utf-8")]).ok();
    let inside = iperf_client(&tb, pa, Some(&cg.0));
    let outside = iperf_client(&tb, pb, None);
    std::thread::sleep(Duration::from_secs(2));
    let cg_id = cg.id();
    let a = sockets_to(&tb, 0, Some(pa), 5);
    let b = sockets_to(&tb, 0, Some(pb), 5);
    println!("in the cgroup: {:?}; outside: {:?}", by_cc(&a), by_cc(&b));
    assert_eq!(a.len(), 5, "iperf3 -P 4: 4 data + 1 control connection");
    assert!(
        a.iter().all(|s| s.cgroup_id == Some(cg_id)),
        "inet_diag puts them in the cgroup"
    );
    assert_eq!(by_cc(&a).get("dstar"), Some(&5), "{:?}", by_cc(&a));
    assert_eq!(b.len(), 5);
    assert!(b.iter().all(|s| s.cgroup_id != Some(cg_id)));
    assert!(!by_cc(&b).contains_key("dstar"), "{:?}", by_cc(&b));
    drop(inside);
    drop(outside);
    ccctl(&["policy", "clear"]).ok();
    let _ = tb.destroy();
}

fn canary_policy(tb: &Testbed, port: u16, share: f64) -> String {
    format!(
        r#"
[[rule]]
name = "canary"
match = {{ remote_port = {port}, netns = "{}" }}
algorithm = "modest-bbr"
params = {{ w_min = 0.6 }}
share = {share}
control = "reno"
"#,
        ns_path(tb, Role::Sender(0)).display()
    )
}

/// 200 connections under a 25 % canary: 25 % +- 5 % of them run the canary
/// (a derived registration for the rule's parameter set), the rest the
/// control, and each one on the side ccctl's own copy of the hash puts it.
/// Then a rollback moves the canary's live connections to the control (none
/// reset) and new connections no longer get the canary.
pub fn canary_takes_its_share_and_rollback_moves_live_flows_back() {
    let _g = PolicyGuard::new();
    let tb = testbed(1);
    let port = tb.alloc_port();
    let dir = tempdir("policy-canary");
    let file = write_policy(&dir, &canary_policy(&tb, port, 0.25));
    let out = ccctl(&["policy", "apply", file.to_str().expect("utf-8")]).ok();
    assert!(out.stdout.contains("modest_bbr_p1"), "{}", out.stdout);
    let server = Server::start(&tb, port);
    let n = 200;
    let first = 41000u16;
    let mut conns = connect(&tb, 0, server.addr, n, Some(first));
    let socks = sockets_to(&tb, 0, Some(port), n);
    let counts = by_cc(&socks);
    println!("200 connections, 25 % canary: {counts:?}");
    assert_eq!(socks.len(), n);
    let canary = counts.get("modest_bbr_p1").copied().unwrap_or(0);
    assert_eq!(
        canary + counts.get("reno").copied().unwrap_or(0),
        n,
        "{counts:?}"
    );
    assert!((40..=60).contains(&canary), "25 % +- 5 % of 200: {canary}");
    for s in &socks {
        let predicted = predicted_canary(s, 2500);
        let got = s.cc.as_deref() == Some("modest_bbr_p1");
        assert_eq!(
            got, predicted,
            "{} -> {}: BPF and ccctl disagree on its side",
            s.local, s.remote
        );
    }
    // The derived registration carries the rule's own set.
    let params = std::fs::read_dir(super::pin_root())
        .expect("pins")
        .flatten()
        .any(|e| e.file_name().to_string_lossy() == "modest-bbr@p1");
    assert!(
        params,
        "the parameter set's registration is pinned as modest-bbr@p1"
    );

    let rb = ccctl(&["policy", "rollback", "canary", "--why", "test"]).ok();
    println!("{}", rb.stdout);
    assert!(
        rb.stdout.contains(&format!(
            "{canary} live canary connection(s) moved back to reno (0 failed)"
        )),
        "{}",
        rb.stdout
    );
    let after = by_cc(&sockets_to(&tb, 0, Some(port), n));
    println!("after the rollback: {after:?}");
    assert_eq!(
        after.get("reno"),
        Some(&n),
        "every live connection on the control: {after:?}"
    );
    all_alive(&mut conns);
    let more = connect(&tb, 0, server.addr, 40, Some(first + n as u16));
    let all = by_cc(&sockets_to(&tb, 0, Some(port), n + 40));
    assert_eq!(
        all.get("reno"),
        Some(&(n + 40)),
        "new connections get the control: {all:?}"
    );
    let show = ccctl(&["policy", "show", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&show.stdout).expect("json");
    assert_eq!(v["policy"]["rules"][0]["state"], "rolled_back");
    assert_eq!(v["policy"]["rules"][0]["rolled_back"]["why"], "test");
    assert_eq!(v["counters"]["canary"]["rolled_back"], canary as u64);
    drop(more);
    drop(conns);
    drop(server);
    ccctl(&["policy", "clear"]).ok();
    assert!(
        !registered("modest_bbr_p1"),
        "clear unloads the derived registration"
    );
    let _ = tb.destroy();
}

/// Bad files are refused with the field named and change nothing; policy
/// commands need privileges.
pub fn bad_policies_change_nothing() {
    let _g = PolicyGuard::new();
    let dir = tempdir("policy-bad");
    let before = super::snapshot();
    for (text, needle) in [
        ("[[rule]]\nname = \"a\"\nalgorithm = \"bpf-bbr\"\nshare = 2", "rule[0].share: 2 is outside (0, 1]"),
        ("[[rule]]\nname = \"a\"\nalgorithm = \"nosuch\"", "rule[0].algorithm: unknown algorithm `nosuch`"),
        ("[[rule]]\nname = \"a\"\nalgorithm = \"bpf-bbr\"\nmatch = { cgroup = \"/ccctl-no-such-cgroup\" }", "rule[0].match.cgroup"),
        ("[[rule]]\nname = \"a\"\nalgorithm = \"bpf-bbr\"\nmatch = { remote = \"198.18.0.0/99\" }", "rule[0].match.remote"),
        ("[[rule]]\nname = \"a\"\nalgorithm = \"modest-bbr\"\nparams = { w_min = 2 }", "rule[0].params"),
    ] {
        let f = write_policy(&dir, text);
        ccctl(&["policy", "apply", f.to_str().expect("utf-8")]).failed_with(&[needle, "nothing applied"]);
        assert_eq!(super::snapshot(), before, "{text}: changed something");
    }
}

/// The daemon takes `[[rule]]` tables from its config: applied at start,
/// replaced on SIGHUP (a bad rule refused whole, the running policy kept),
/// cleared on SIGTERM with `on_exit = "unload"`.
pub fn daemon_applies_rules_and_reloads_them_on_sighup() {
    let _g = PolicyGuard::new();
    let dir = tempdir("policy-daemon");
    let cfg = dir.join("daemon.toml");
    let lock = dir.join("daemon.lock");
    let rule = |port: u16, share: &str| {
        format!("on_exit = \"unload\"\n[[rule]]\nname = \"web\"\nmatch = {{ remote_port = {port} }}\nalgorithm = \"reno\"\nshare = {share}\ncontrol = \"cubic\"\n")
    };
    std::fs::write(&cfg, rule(45443, "0.5")).expect("config");
    let daemon = Spawned::new(
        Command::new(super::ccctl_bin())
            .args(["daemon", "--config"])
            .arg(&cfg)
            .arg("--lock")
            .arg(&lock)
            .env("CCCTL_AUDIT", super::test_audit_log())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ccctl daemon"),
    );
    let show = || -> serde_json::Value {
        serde_json::from_str(&ccctl(&["policy", "show", "--json"]).ok().stdout).expect("json")
    };
    super::lab::wait_for(
        "the daemon to apply its rules",
        Duration::from_secs(30),
        || show()["policy"]["rules"][0]["remote_port"] == 45443,
    );
    assert_eq!(show()["policy"]["rules"][0]["state"], "canary");
    std::fs::write(&cfg, rule(45444, "1.0")).expect("new config");
    ccctl_sys::signals::kill(daemon.id(), rustix::process::Signal::HUP);
    super::lab::wait_for(
        "the SIGHUP to replace the rules",
        Duration::from_secs(30),
        || show()["policy"]["rules"][0]["remote_port"] == 45444,
    );
    assert_eq!(show()["policy"]["rules"][0]["state"], "active");
    // A bad rule: refused whole, the running policy stays.
    std::fs::write(&cfg, rule(45445, "7")).expect("bad config");
    ccctl_sys::signals::kill(daemon.id(), rustix::process::Signal::HUP);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(show()["policy"]["rules"][0]["remote_port"], 45444);
    ccctl_sys::signals::kill(daemon.id(), rustix::process::Signal::TERM);
    let out = daemon.take().wait_with_output().expect("daemon exit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "daemon: {stderr}");
    assert!(
        stderr.contains("rule[0].share: 7 is outside (0, 1]"),
        "{stderr}"
    );
    assert!(
        !super::pin_root().join("policy").exists(),
        "on_exit = unload clears the policy"
    );
}

/// An application's own TCP_CONGESTION wins over a rule unless the rule
/// says `enforce = true`; under enforce the rule's algorithm is set anyway
/// and a later change by the application is refused (EPERM).
pub fn enforce_overrides_the_applications_choice_only_when_set() {
    let _g = PolicyGuard::new();
    let tb = testbed(1);
    let (pk, pe) = (rule_port(&tb, 1000), rule_port(&tb, 1000));
    let dir = tempdir("policy-enforce");
    let file = write_policy(
        &dir,
        &format!(
            "[[rule]]\nname = \"kept\"\nmatch = {{ remote_port = {pk} }}\nalgorithm = \"dstar\"\n\
             [[rule]]\nname = \"enforced\"\nmatch = {{ remote_port = {pe} }}\nalgorithm = \"dstar\"\nenforce = true\n"
        ),
    );
    ccctl(&["policy", "apply", file.to_str().expect("utf-8")]).ok();
    let (sk, se) = (Server::start(&tb, pk), Server::start(&tb, pe));
    let n = 10;
    let _plain = connect(&tb, 0, sk.addr, n, None);
    let _app = connect_with(&tb, 0, sk.addr, n, None, Some("reno"));
    let enforced = connect_with(&tb, 0, se.addr, n, None, Some("reno"));
    let kept = by_cc(&sockets_to(&tb, 0, Some(pk), 2 * n));
    let enf = by_cc(&sockets_to(&tb, 0, Some(pe), n));
    println!("without enforce: {kept:?}; with enforce: {enf:?}");
    assert_eq!(
        kept.get("dstar"),
        Some(&n),
        "the rule takes those that did not choose: {kept:?}"
    );
    assert_eq!(
        kept.get("reno"),
        Some(&n),
        "the application's own choice is kept: {kept:?}"
    );
    assert_eq!(
        enf.get("dstar"),
        Some(&n),
        "enforce overrides the application: {enf:?}"
    );
    let e = rustix::net::sockopt::set_tcp_congestion(&enforced[0], "reno").expect_err("refused");
    assert_eq!(
        e,
        rustix::io::Errno::PERM,
        "a change under enforce is refused with EPERM"
    );
    let v: serde_json::Value =
        serde_json::from_str(&ccctl(&["policy", "show", "--json"]).ok().stdout).expect("json");
    assert_eq!(v["counters"]["kept"]["app_kept"], n as u64);
    assert_eq!(v["counters"]["enforced"]["app_refused"], 1);
    drop((sk, se));
    ccctl(&["policy", "clear"]).ok();
    let _ = tb.destroy();
}

/// `ccctl load modest-bbr --replace` during 50 live iperf3 flows of
/// modest_bbr: none is reset (iperf3 ends cleanly and every data socket
/// keeps delivering after the swap), the parameter set in force carries
/// over, the link runs a new struct_ops map, new connections get the name,
/// and the old object goes away once the old flows have closed while the
/// new connections stay open: they are not on it.
pub fn hot_upgrade_keeps_50_live_flows() {
    use ccctl_lab::iperf::{self, FlowSpec};
    let _c = Clean::new();
    ccctl(&["load", "modest-bbr", "--wmin", "0.6"]).ok();
    let tb = testbed(1);
    let port = tb.alloc_port();
    let mut spec = FlowSpec::new(0, "modest_bbr", Duration::from_secs(10)).port(port);
    spec.extra_args = vec!["-P".into(), "50".into()];
    let running = iperf::spawn_flows(&tb, &[spec]).expect("iperf3 -P 50");
    let before = sockets_to(&tb, 0, Some(port), 51);
    assert_eq!(
        before.len(),
        51,
        "50 data connections and iperf3's control one"
    );
    std::thread::sleep(Duration::from_secs(2));
    let acked = |socks: &[TcpSocket]| -> BTreeMap<u64, u64> {
        socks
            .iter()
            .map(|s| {
                let a = s.info.as_ref().and_then(|i| i.bytes_acked).unwrap_or(0);
                (s.cookie, a)
            })
            .collect()
    };
    let at_swap = acked(&sockets_to(&tb, 0, Some(port), 51));
    let dir = super::pin_root().join("modest-bbr");
    let old_id = ccctl_core::upgrade::link_map_id(&dir).expect("link");
    let out = ccctl(&["load", "modest-bbr", "--replace"]).ok();
    println!("{}", out.stdout);
    let new_id = ccctl_core::upgrade::link_map_id(&dir).expect("link");
    assert_ne!(old_id, new_id, "the link runs a new struct_ops map");
    assert!(registered("modest_bbr"));
    assert!(
        libbpf_rs_map_exists(old_id),
        "the old object still serves the running flows"
    );
    let tune = ccctl(&["tune", "modest-bbr", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&tune.stdout).expect("json");
    let w_min = v["params"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "w_min"))
        .map(|p| p["value"].clone());
    assert_eq!(
        w_min,
        Some(serde_json::json!(0.6)),
        "the set in force carries over"
    );
    std::thread::sleep(Duration::from_secs(2));
    let after = sockets_to(&tb, 0, Some(port), 51);
    let after_acked = acked(&after);
    let mut grew = 0;
    for (cookie, a0) in &at_swap {
        let a1 = after_acked.get(cookie).copied();
        assert!(a1.is_some(), "connection {cookie} is gone after the swap");
        if a1.unwrap_or(0) > *a0 {
            grew += 1;
        }
    }
    assert!(
        grew >= 50,
        "every data connection keeps delivering: {grew} of 51 grew"
    );
    // iperf3 -C sets the data connections' algorithm, not its control one's.
    assert_eq!(
        by_cc(&after).get("modest_bbr"),
        Some(&50),
        "{:?}",
        by_cc(&after)
    );
    let server = Server::start(&tb, tb.alloc_port());
    let fresh = connect_with(&tb, 0, server.addr, 10, None, Some("modest_bbr"));
    assert_eq!(
        by_cc(&sockets_to(&tb, 0, Some(server.addr.port()), 10)).get("modest_bbr"),
        Some(&10)
    );
    let results = running
        .wait()
        .expect("iperf3 ended cleanly: no connection was reset");
    println!(
        "50 flows through the swap: {:.1} Mbit/s in all",
        results.iter().map(|r| r.goodput_bps).sum::<f64>() / 1e6
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while libbpf_rs_map_exists(old_id) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !libbpf_rs_map_exists(old_id),
        "the old object outlived its flows while 10 new connections stayed open: they run on it"
    );
    drop(fresh);
    drop(server);
    let _ = tb.destroy();
}

fn libbpf_rs_map_exists(id: u32) -> bool {
    ccctl_core::upgrade::map_exists(id)
}

/// On a kernel without struct_ops links (6.1) `--replace` is refused with
/// the reason, and the loaded algorithm is left as it was.
pub fn replace_is_refused_without_struct_ops_links() {
    let _c = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let before = super::snapshot();
    ccctl(&["load", "bpf-bbr", "--replace"]).failed_with(&[
        "cannot replace bpf-bbr in place",
        "needs a struct_ops link (Linux 6.4+)",
        "Nothing changed",
    ]);
    assert_eq!(super::snapshot(), before);
}

/// `ccctl policy apply` killed (SIGKILL) at 40 points of the second half of its run, between
/// two policies whose rules need different parameter sets (so derived
/// registrations come and go): after each kill the next command's repair
/// leaves the policy applied whole or not at all, every derived
/// registration in the kernel pinned and named by the applied policy, and
/// no pin without a registration. `clear` then leaves nothing.
pub fn policy_apply_survives_sigkill_anywhere() {
    let _g = PolicyGuard::new();
    let dir = tempdir("policy-kill");
    let text = |w: &str| {
        format!(
            "[[rule]]\nname = \"soak\"\nmatch = {{ remote_port = 45999 }}\nalgorithm = \"modest-bbr\"\nparams = {{ w_min = {w} }}\nshare = 0.5\ncontrol = \"reno\"\n"
        )
    };
    let files = [("a", text("0.6")), ("b", text("0.5"))].map(|(n, t)| {
        let p = dir.join(format!("{n}.toml"));
        std::fs::write(&p, t).expect("policy file");
        p
    });
    ccctl(&["policy", "apply", files[0].to_str().expect("utf-8")]).ok();
    // How long one change of set takes here (the first apply also
    // installs the programs), to spread the kills over it.
    let t0 = Instant::now();
    ccctl(&["policy", "apply", files[1].to_str().expect("utf-8")]).ok();
    let full = t0.elapsed();
    println!("one apply (loading a registration): {full:?}");
    let mut repairs = 0;
    for k in 0..40u32 {
        let file = &files[(k % 2) as usize];
        let mut child = Spawned::new(
            Command::new(super::ccctl_bin())
                .args(["policy", "apply", file.to_str().expect("utf-8")])
                .env("CCCTL_AUDIT", super::test_audit_log())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("ccctl policy apply"),
        );
        std::thread::sleep(full.mul_f64(0.5 + f64::from(k) / 40.0 * 0.6));
        let _ = child.kill();
        let _ = child.take().wait();
        // Any command repairs first; show then reads the state.
        let show = ccctl(&["policy", "show", "--json"]).ok();
        for line in show.stderr.lines().filter(|l| l.contains("repaired")) {
            println!("  {line}");
            repairs += 1;
        }
        let v: serde_json::Value = serde_json::from_str(&show.stdout).expect("json");
        let derived: Vec<String> = v["policy"]["derived"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let pinned: Vec<String> = std::fs::read_dir(super::pin_root())
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("modest-bbr@p"))
                    .collect()
            })
            .unwrap_or_default();
        let in_kernel: Vec<String> = super::available()
            .into_iter()
            .filter(|n| n.starts_with("modest_bbr_p"))
            .collect();
        println!(
            "kill {k} after {:?}: applied {derived:?}, pinned {pinned:?}, kernel {in_kernel:?}",
            full.mul_f64(0.5 + f64::from(k) / 40.0 * 0.6)
        );
        assert_eq!(
            v["policy"]["rules"].as_array().map(Vec::len),
            Some(1),
            "the policy is applied whole"
        );
        assert_eq!(derived.len(), 1, "one registration for the rule's set");
        let mut p = pinned.clone();
        p.sort();
        assert_eq!(
            p, derived,
            "only the applied policy's registration is pinned"
        );
        assert_eq!(in_kernel.len(), 1, "only it is registered: {in_kernel:?}");
        let kernel_name = v["policy"]["rules"][0]["algorithm"]["kernel_name"]
            .as_str()
            .unwrap_or("");
        assert_eq!(
            in_kernel[0], kernel_name,
            "the rule names the registration that exists"
        );
    }
    println!("{repairs} repair(s) after 40 kills");
    ccctl(&["policy", "clear"]).ok();
    assert!(!super::pin_root().join("policy").exists());
    assert!(!super::available()
        .iter()
        .any(|n| n.starts_with("modest_bbr")));
}

/// The policy over IPv6. One IPv6 testbed (senders fd00:ccc:0:1::1 and
/// fd00:ccc:0:2::1, receiver fd00:ccc::2) and one IPv4 testbed (198.18.1.1
/// -> 198.18.0.2), a server on the same port in each, 20 connections from
/// each of the three senders. Rules (first match wins):
///
/// 1. `v6-sender0`: `local fd00:ccc:0:1::/64`, the port -> dstar: takes
///    sender 0's 20 and not sender 1's (which differs only in the fourth
///    group, inside the /48).
/// 2. `v6-all`: `remote fd00:ccc::/48`, the port -> bpf-bbr on a 50 %
///    canary, the rest reno: takes sender 1's 20, each on the side
///    ccctl's copy of the hash over the full IPv6 addresses predicts.
///
/// The IPv4 connections to the same port match neither (an IPv4 address
/// is ::ffff:a.b.c.d to the rules, outside fd00:ccc::/48) and keep their
/// namespace's default. Counted by inet_diag and by the BPF side's
/// per-rule counters; the dry run, run in each sender's namespace, lists
/// the IPv6 connections under their rule with the algorithm they got and
/// none of the IPv4 ones; the audit line of the apply names the prefixes.
/// A rollback of `v6-all` then moves its live IPv6 canary connections to
/// reno and leaves `v6-sender0`'s on dstar.
pub fn rules_by_ipv6_prefix_take_ipv6_connections_only() {
    use ccctl_lab::testbed::IpVersion;
    let _g = PolicyGuard::new();
    let cfg = TestbedConfig::new(100_000_000, 400 * 1514)
        .with_rtts(&[Duration::ZERO, Duration::ZERO])
        .with_ip(IpVersion::V6);
    let tb6 = Testbed::new(cfg).expect("IPv6 testbed");
    let tb4 = super::flows::testbed(TestbedConfig::new(100_000_000, 400 * 1514));
    assert_eq!(tb6.sender_addr(1).to_string(), "fd00:ccc:0:2::1");
    let port = rule_port(&tb6, 2000);
    let dir = tempdir("policy-ipv6");
    let file = write_policy(
        &dir,
        &format!(
            r#"
[[rule]]
name = "v6-sender0"
match = {{ local = "fd00:ccc:0:1::/64", remote_port = {port} }}
algorithm = "dstar"

[[rule]]
name = "v6-all"
match = {{ remote = "fd00:ccc::/48", remote_port = {port} }}
algorithm = "bpf-bbr"
share = 0.5
control = "reno"
"#
        ),
    );
    let f = file.to_str().expect("utf-8");
    let out = ccctl(&["policy", "apply", f]).ok();
    println!("{}{}", out.stdout, out.stderr);
    let (s6, s4) = (Server::start(&tb6, port), Server::start(&tb4, port));
    let n = 20;
    let _held: Vec<TcpStream> = [
        connect(&tb6, 0, s6.addr, n, None),
        connect(&tb6, 1, s6.addr, n, None),
        connect(&tb4, 0, s4.addr, n, None),
    ]
    .into_iter()
    .flatten()
    .collect();

    let (a, b, v4) = (
        sockets_to(&tb6, 0, Some(port), n),
        sockets_to(&tb6, 1, Some(port), n),
        sockets_to(&tb4, 0, Some(port), n),
    );
    println!(
        "IPv6 sender 0: {:?}; IPv6 sender 1: {:?}; IPv4: {:?}",
        by_cc(&a),
        by_cc(&b),
        by_cc(&v4)
    );
    assert_eq!((a.len(), b.len(), v4.len()), (n, n, n));
    assert!(a
        .iter()
        .chain(&b)
        .all(|s| s.local.is_ipv6() && s.remote.is_ipv6()));
    assert!(v4.iter().all(|s| s.local.is_ipv4()));
    assert_eq!(by_cc(&a).get("dstar"), Some(&n), "{:?}", by_cc(&a));
    let canary = assert_split_as_hashed(
        &b,
        5000,
        "bpf_bbr",
        "reno",
        "BPF and ccctl disagree on its side",
    );
    let default4 = run_in_ns(&tb4, Role::Sender(0), || {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .expect("the namespace's default")
            .trim()
            .to_string()
    });
    assert_eq!(
        by_cc(&v4).get(&default4),
        Some(&n),
        "IPv4 connections keep the default ({default4}): {:?}",
        by_cc(&v4)
    );
    let v: serde_json::Value =
        serde_json::from_str(&ccctl(&["policy", "show", "--json"]).ok().stdout).expect("json");
    assert_eq!(v["counters"]["v6-sender0"]["canary"], n as u64);
    assert_eq!(v["counters"]["v6-all"]["canary"], canary as u64);
    assert_eq!(v["counters"]["v6-all"]["control"], (n - canary) as u64);

    // The dry run, from inside each sender's namespace (its own is the
    // one it lists): every IPv6 connection under its rule, predicted to
    // get what it got; the IPv4 ones under none.
    let dry = |tb: &Testbed, i: usize, json: bool| -> String {
        let mut args = vec!["policy", "apply", f, "--dry-run"];
        if json {
            args.push("--json");
        }
        run_in_ns(tb, Role::Sender(i), || ccctl(&args).ok().stdout)
    };
    for (i, socks, rule) in [(0, &a, "v6-sender0"), (1, &b, "v6-all")] {
        let takes: serde_json::Value =
            serde_json::from_str(&dry(&tb6, i, true)).expect("dry run json");
        let list = takes[rule].as_array().cloned().unwrap_or_default();
        assert_eq!(list.len(), n, "IPv6 sender {i}, {rule}: {takes}");
        assert_eq!(
            takes.as_object().map(|o| o.len()),
            Some(1),
            "IPv6 sender {i}: only {rule} takes them: {takes}"
        );
        for t in &list {
            let local: SocketAddr = t["local"].as_str().unwrap_or("").parse().expect("addr");
            assert_eq!(local.ip(), tb6.sender_addr(i), "{t}");
            assert_eq!(
                t["gets"], t["cc"],
                "the dry run predicts what BPF gave: {t}"
            );
            assert!(socks.iter().any(|s| s.local == local), "{t}");
        }
    }
    let text = dry(&tb6, 1, false);
    println!("{text}");
    assert!(
        text.contains(&format!(
            "rule v6-all (remote fd00:ccc::/48, remote_port {port}) -> bpf-bbr on 50.0 % (canary), the rest reno; would take {n} current connection(s)"
        )),
        "{text}"
    );
    assert!(text.contains("[fd00:ccc:0:2::1]:"), "{text}");
    let takes4: serde_json::Value =
        serde_json::from_str(&dry(&tb4, 0, true)).expect("dry run json");
    assert_eq!(
        takes4,
        serde_json::json!({}),
        "no rule takes an IPv4 connection"
    );

    // The audit line of the apply names the rules and what they match.
    let recs = ccctl_core::policy::audit::read(&super::test_audit_log()).expect("audit log");
    let apply = recs
        .iter()
        .rev()
        .find(|r| r.action == ccctl_core::policy::audit::Action::Apply)
        .expect("an apply line");
    let rules: Vec<(String, String, String)> = apply
        .rules
        .iter()
        .map(|r| (r.name.clone(), r.kernel_name.clone(), r.matches.clone()))
        .collect();
    let want = |a: &str, b: &str, c: String| (a.to_string(), b.to_string(), c);
    assert_eq!(
        rules,
        vec![
            want(
                "v6-sender0",
                "dstar",
                format!("local fd00:ccc:0:1::/64, remote_port {port}")
            ),
            want(
                "v6-all",
                "bpf_bbr",
                format!("remote fd00:ccc::/48, remote_port {port}")
            ),
        ]
    );

    // A rollback run in sender 1's namespace (it walks its own) moves the
    // IPv6 canary's live connections to the control.
    let rb = run_in_ns(&tb6, Role::Sender(1), || {
        ccctl(&["policy", "rollback", "v6-all", "--why", "ipv6 test"])
            .ok()
            .stdout
    });
    println!("{rb}");
    assert!(
        rb.contains(&format!(
            "{canary} live canary connection(s) moved back to reno (0 failed)"
        )),
        "{rb}"
    );
    let b = sockets_to(&tb6, 1, Some(port), n);
    assert_eq!(by_cc(&b).get("reno"), Some(&n), "{:?}", by_cc(&b));
    let a = sockets_to(&tb6, 0, Some(port), n);
    assert_eq!(by_cc(&a).get("dstar"), Some(&n), "the other rule's stay");
    drop((s6, s4));
    ccctl(&["policy", "clear"]).ok();
    let _ = tb6.destroy();
    let _ = tb4.destroy();
}

/// `f` on a thread in the testbed namespace of `role` (commands it runs
/// start there: their own namespace is that one).
fn run_in_ns<T: Send>(tb: &Testbed, role: Role, f: impl FnOnce() -> T + Send) -> T {
    ccctl_sys::netns::run_in(&ns_path(tb, role), f).expect("entering the namespace")
}

/// Whether ccctl's own hash (the dry run's) puts `s` in a canary of
/// `share_bp` basis points: what the BPF side must have decided.
pub fn predicted_canary(s: &TcpSocket, share_bp: u32) -> bool {
    ccctl_core::policy::in_canary(
        ccctl_core::policy::canary_hash(
            s.local.ip(),
            s.local.port(),
            s.remote.ip(),
            s.remote.port(),
        ),
        share_bp,
    )
}

/// Opt-in migration of live connections onto the rules (`policy apply
/// --migrate`, issue 28 item 4). Before any policy, sender 0 opens 40
/// connections to port `pm` (on the namespace's default), 10 to `pm`
/// whose application chose `app_cc` (dstar) itself, 10 more such to `pe`, and 10
/// to an unmatched port `po`. Rules: `live` (`pm`, bpf-bbr on a 50 %
/// canary, the rest reno) and `enforced` (`pe`, bpf-bbr, `enforce`).
///
/// - Applied without `--migrate`: no live connection changes.
/// - The dry run with `--migrate` lists what would move: the 40 and the
///   10 enforced ones; the 10 application-chosen ones of `live` kept.
/// - Applied with `--migrate`: each of the 40 runs exactly what ccctl's
///   hash predicts for its 4-tuple (both sides taken), the 10 chosen ones
///   keep `app_cc`, the 10 under `enforce` run bpf_bbr, the 10 unmatched
///   keep the default; the report, the audit line and `policy show` count
///   the same numbers; every connection still answers.
/// - A rollback of `live` then moves its migrated canary connections back
///   to reno.
pub fn migrate_moves_live_connections_only_when_asked() {
    let _g = PolicyGuard::new();
    let tb = testbed(1);
    let (pm, pe, po) = (
        rule_port(&tb, 3000),
        rule_port(&tb, 3000),
        rule_port(&tb, 3000),
    );
    let default = run_in_ns(&tb, Role::Sender(0), || {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .expect("the namespace's default")
            .trim()
            .to_string()
    });
    // The applications' own choice: one of ours, so it is there on any
    // kernel (the VM's has no guarantee of the kernel's bbr module).
    let app_cc: &'static str = "dstar";
    ccctl(&["load", "dstar"]).ok();
    assert!(
        !["reno", "bpf_bbr", app_cc].contains(&default.as_str()),
        "the test needs a default other than the rules' and the applications' algorithms: {default}"
    );
    let dir = tempdir("policy-migrate");
    let file = write_policy(
        &dir,
        &format!(
            r#"
[[rule]]
name = "live"
match = {{ remote_port = {pm}, netns = "{ns}" }}
algorithm = "bpf-bbr"
share = 0.5
control = "reno"

[[rule]]
name = "enforced"
match = {{ remote_port = {pe}, netns = "{ns}" }}
algorithm = "bpf-bbr"
enforce = true
"#,
            ns = ns_path(&tb, Role::Sender(0)).display()
        ),
    );
    let f = file.to_str().expect("utf-8");
    let servers: Vec<Server> = [pm, pe, po]
        .iter()
        .map(|p| Server::start(&tb, *p))
        .collect();
    let n = 40;
    let first = 44000u16;
    let mut held = connect(&tb, 0, servers[0].addr, n, Some(first));
    held.extend(connect_with(
        &tb,
        0,
        servers[0].addr,
        10,
        Some(first + n as u16),
        Some(app_cc),
    ));
    held.extend(connect_with(
        &tb,
        0,
        servers[1].addr,
        10,
        None,
        Some(app_cc),
    ));
    held.extend(connect(&tb, 0, servers[2].addr, 10, None));
    let snapshot = || {
        (
            by_cc(&sockets_to(&tb, 0, Some(pm), n + 10)),
            by_cc(&sockets_to(&tb, 0, Some(pe), 10)),
            by_cc(&sockets_to(&tb, 0, Some(po), 10)),
        )
    };
    let before = snapshot();
    println!("before any policy: {before:?}");
    let want_before = (
        BTreeMap::from([(default.clone(), n), (app_cc.to_string(), 10)]),
        BTreeMap::from([(app_cc.to_string(), 10)]),
        BTreeMap::from([(default.clone(), 10)]),
    );
    assert_eq!(before, want_before);

    // Without --migrate nothing live changes.
    let out = ccctl(&["policy", "apply", f]).ok();
    println!("{}", out.stdout);
    assert!(registered("bpf_bbr"));
    assert_eq!(
        snapshot(),
        want_before,
        "an apply without --migrate moved live connections"
    );

    // The dry run says what a migration would move, and moves nothing.
    let dry = ccctl(&["policy", "apply", f, "--dry-run", "--migrate", "--json"]).ok();
    let takes: serde_json::Value = serde_json::from_str(&dry.stdout).expect("dry run json");
    let verdicts = |rule: &str| -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for t in takes[rule].as_array().cloned().unwrap_or_default() {
            *m.entry(t["migration"].as_str().unwrap_or("?").to_string())
                .or_insert(0) += 1;
        }
        m
    };
    println!(
        "dry run: live {:?}, enforced {:?}",
        verdicts("live"),
        verdicts("enforced")
    );
    assert_eq!(
        verdicts("live"),
        BTreeMap::from([("moves".to_string(), n), ("app_kept".to_string(), 10)])
    );
    assert_eq!(
        verdicts("enforced"),
        BTreeMap::from([("moves".to_string(), 10)])
    );
    let dry_text = ccctl(&["policy", "apply", f, "--dry-run", "--migrate"]).ok();
    println!("{}", dry_text.stdout);
    assert!(
        dry_text.stdout.contains(&format!(
            "--migrate would move {} live connection(s)",
            n + 10
        )),
        "{}",
        dry_text.stdout
    );
    assert_eq!(
        snapshot(),
        want_before,
        "the dry run moved live connections"
    );

    // With --migrate: each matched one ends where the hash puts it.
    let out = ccctl(&["policy", "apply", f, "--migrate"]).ok();
    println!("{}", out.stdout);
    let socks = sockets_to(&tb, 0, Some(pm), n + 10);
    let (chose, plain): (Vec<_>, Vec<_>) = socks
        .iter()
        .cloned()
        .partition(|s| s.local.port() >= first + n as u16);
    for s in &chose {
        assert_eq!(
            s.cc.as_deref(),
            Some(app_cc),
            "{} -> {}: the application's own choice is kept without enforce",
            s.local,
            s.remote
        );
    }
    assert_eq!(plain.len(), n, "the plain connections");
    let canary = assert_split_as_hashed(
        &plain,
        5000,
        "bpf_bbr",
        "reno",
        "migrated where the hash does not put it",
    );
    let (_, enf, other) = snapshot();
    println!(
        "after --migrate: {:?}, enforced {enf:?}, unmatched {other:?}",
        by_cc(&socks)
    );
    assert_eq!(
        enf,
        BTreeMap::from([("bpf_bbr".to_string(), 10)]),
        "enforce moves them"
    );
    assert_eq!(
        other,
        BTreeMap::from([(default.clone(), 10)]),
        "unmatched ones stay"
    );
    assert!(
        out.stdout.contains(&format!(
            "rule live: {canary} moved to the canary, {} to the control, 0 left (no control), 10 kept the application's choice, 0 failed",
            n - canary
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "rule enforced: 10 moved to the canary, 0 to the control, 0 left (no control), 0 kept the application's choice, 0 failed"
        ),
        "{}",
        out.stdout
    );
    all_alive(&mut held);

    // The audit line of the migrating apply has the numbers.
    let recs = ccctl_core::policy::audit::read(&super::test_audit_log()).expect("audit log");
    let apply = recs
        .iter()
        .rev()
        .find(|r| r.action == ccctl_core::policy::audit::Action::Apply)
        .expect("an apply line");
    let m = &apply.outcome["migration"];
    println!("audit: {m}");
    assert_eq!(m["rules"][0]["rule"], "live");
    assert_eq!(m["rules"][0]["canary"], canary as u64);
    assert_eq!(m["rules"][0]["control"], (n - canary) as u64);
    assert_eq!(m["rules"][0]["app_kept"], 10);
    assert_eq!(m["rules"][1]["canary"], 10);
    assert_eq!(m["moved"], (n + 10) as u64);
    let v: serde_json::Value =
        serde_json::from_str(&ccctl(&["policy", "show", "--json"]).ok().stdout).expect("json");
    assert_eq!(v["counters"]["live"]["migrated_canary"], canary as u64);
    assert_eq!(
        v["counters"]["live"]["migrated_control"],
        (n - canary) as u64
    );

    // A rollback moves the migrated canary connections back.
    let rb = ccctl(&["policy", "rollback", "live", "--why", "migrate test"]).ok();
    println!("{}", rb.stdout);
    assert!(
        rb.stdout.contains(&format!(
            "{canary} live canary connection(s) moved back to reno (0 failed)"
        )),
        "{}",
        rb.stdout
    );
    let after = by_cc(&sockets_to(&tb, 0, Some(pm), n + 10));
    assert_eq!(
        after,
        BTreeMap::from([("reno".to_string(), n), (app_cc.to_string(), 10)]),
        "after the rollback"
    );
    all_alive(&mut held);
    drop(held);
    drop(servers);
    ccctl(&["policy", "clear"]).ok();
    let _ = tb.destroy();
}

/// Every socket of `socks` runs `canary` where ccctl's hash puts it in a
/// canary of `share_bp`, else `control` (`why` names the failure), and both
/// sides are taken. Returns how many are in the canary.
pub fn assert_split_as_hashed(
    socks: &[TcpSocket],
    share_bp: u32,
    canary: &str,
    control: &str,
    why: &str,
) -> usize {
    let mut taken = 0;
    for s in socks {
        let predicted = predicted_canary(s, share_bp);
        let want = if predicted { canary } else { control };
        assert_eq!(
            s.cc.as_deref(),
            Some(want),
            "{} -> {}: {why}",
            s.local,
            s.remote
        );
        taken += usize::from(predicted);
    }
    let n = socks.len();
    assert!(
        (1..n).contains(&taken),
        "both sides of the canary are taken: {taken} of {n}"
    );
    taken
}
