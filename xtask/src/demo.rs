//! `cargo xtask demo`: load bpf_bbr with ccctl, push one iperf3 flow through
//! a three-namespace testbed with a 50 Mbit/s bottleneck, show status,
//! unload.
//!
//! The flow is driven from here with plain `ip netns`/`tc`/`iperf3` for now.
//! Once ccctl grows its own testbed command (ccctl::testbed), `flow()` should
//! call the `ccctl` binary instead; the rest stays as is.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{proc, setup};

const CC: &str = "bpf_bbr";
const BOTTLENECK_MBIT: u32 = 50;
/// One-way delay added on the ACK path (router toward the sender).
const DELAY_MS: u32 = 10;
const SECONDS: u32 = 10;
const SENDER_ADDR: &str = "198.18.1.1";
const RECEIVER_ADDR: &str = "198.18.2.2";

pub fn main() -> Result<i32> {
    if !setup::check()? {
        bail!("some tools are missing: run `cargo xtask setup` first");
    }
    eprintln!("demo: building ccctl (release)");
    let ccctl = proc::cargo_build_json(
        &["build", "--release", "-p", "ccctl", "--bins"],
        |name, kinds, _| name == "ccctl" && kinds.iter().any(|k| k == "bin"),
    )?;
    ensure_bpffs()?;

    run_ccctl(&ccctl, &["load", "bbr"])?;
    // Whatever happens next, unload again.
    let res = (|| -> Result<()> {
        let available =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                .context("cannot read tcp_available_congestion_control")?;
        if !available.split_whitespace().any(|c| c == CC) {
            bail!(
                "`ccctl load bbr` succeeded but {CC} is not registered (available: {})",
                available.trim()
            );
        }
        let r = flow()?;
        let pct = r.mbit / f64::from(BOTTLENECK_MBIT) * 100.0;
        println!(
            "demo: {}: {:.1} Mbit/s received in {SECONDS} s through a {BOTTLENECK_MBIT} Mbit/s bottleneck ({pct:.0} %), RTT +{} ms, {} retransmits",
            r.cc,
            r.mbit,
            r.delay_ms.unwrap_or(0),
            r.retransmits
        );
        run_ccctl(&ccctl, &["status"])
    })();
    let unload = run_ccctl(&ccctl, &["unload", "bbr"]);
    res?;
    unload?;
    println!("demo: done");
    Ok(0)
}

fn run_ccctl(ccctl: &Path, args: &[&str]) -> Result<()> {
    println!("demo: $ ccctl {}", args.join(" "));
    proc::run(Command::new(ccctl).args(args))
}

fn ensure_bpffs() -> Result<()> {
    let mounts = std::fs::read_to_string("/proc/mounts").context("cannot read /proc/mounts")?;
    if mounts.lines().any(|l| l.contains(" /sys/fs/bpf bpf ")) {
        return Ok(());
    }
    eprintln!("demo: mounting bpffs at /sys/fs/bpf");
    proc::run(Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"]))
}

struct FlowResult {
    cc: String,
    delay_ms: Option<u32>,
    mbit: f64,
    retransmits: u64,
}

/// Network namespaces sender - router - receiver, deleted on drop.
struct Testbed {
    sender: String,
    router: String,
    receiver: String,
    created: Vec<String>,
    /// Added one-way delay on the ACK path, if netem was available.
    delay_ms: Option<u32>,
}

impl Testbed {
    fn create() -> Result<Testbed> {
        let pid = std::process::id();
        let mut tb = Testbed {
            sender: format!("ccctl-{pid}-snd"),
            router: format!("ccctl-{pid}-rtr"),
            receiver: format!("ccctl-{pid}-rcv"),
            created: Vec::new(),
            delay_ms: None,
        };
        for ns in [tb.sender.clone(), tb.router.clone(), tb.receiver.clone()] {
            ip(&["netns", "add", &ns])?;
            tb.created.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        let (s, r, v) = (&tb.sender, &tb.router, &tb.receiver);
        // Links are created directly inside the namespaces: no host names used.
        ip(&[
            "link", "add", "eth0", "netns", s, "type", "veth", "peer", "name", "snd0", "netns", r,
        ])?;
        ip(&[
            "link", "add", "rcv0", "netns", r, "type", "veth", "peer", "name", "eth0", "netns", v,
        ])?;
        for (ns, dev, addr) in [
            (s, "eth0", "198.18.1.1/24"),
            (r, "snd0", "198.18.1.2/24"),
            (r, "rcv0", "198.18.2.1/24"),
            (v, "eth0", "198.18.2.2/24"),
        ] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        ip(&["-n", s, "route", "add", "default", "via", "198.18.1.2"])?;
        ip(&["-n", v, "route", "add", "default", "via", "198.18.2.1"])?;
        proc::run(&mut tb.exec(r, &["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]))?;
        // Bottleneck on the router's egress toward the receiver.
        let rate = format!("{BOTTLENECK_MBIT}mbit");
        proc::run(&mut tb.exec(
            r,
            &[
                "tc", "qdisc", "add", "dev", "rcv0", "root", "tbf", "rate", &rate, "burst", "64kb",
                "latency", "50ms",
            ],
        ))?;
        // Extra RTT on the ACK path; best effort: some kernels lack sch_netem.
        let _ = Command::new("modprobe")
            .arg("sch_netem")
            .stderr(Stdio::null())
            .status();
        let delay = format!("{DELAY_MS}ms");
        let netem = tb
            .exec(
                r,
                &[
                    "tc", "qdisc", "add", "dev", "snd0", "root", "netem", "delay", &delay,
                ],
            )
            .stderr(Stdio::null())
            .status()
            .context("cannot run tc")?;
        proc::bail_if_interrupted()?;
        if netem.success() {
            tb.delay_ms = Some(DELAY_MS);
        } else {
            eprintln!("demo: note: sch_netem is not available on this kernel, no delay added");
        }
        Ok(tb)
    }

    fn exec(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for ns in self.created.iter().rev() {
            let st = Command::new("ip").args(["netns", "del", ns]).status();
            if !matches!(st, Ok(s) if s.success()) {
                eprintln!("demo: warning: could not delete namespace {ns}");
            }
        }
    }
}

fn ip(args: &[&str]) -> Result<()> {
    proc::run(Command::new("ip").args(args))
}

/// One iperf3 flow sender -> receiver with congestion control CC.
fn flow() -> Result<FlowResult> {
    let tb = Testbed::create()?;
    eprintln!(
        "demo: testbed {} -> {} ({BOTTLENECK_MBIT} Mbit/s tbf toward the receiver, +{} ms on the ACK path) -> {}",
        tb.sender,
        tb.router,
        tb.delay_ms.unwrap_or(0),
        tb.receiver
    );
    // Dropping the group kills the server should the client fail.
    let _server = proc::Group::spawn(
        tb.exec(&tb.receiver, &["iperf3", "-s", "-1", "-B", RECEIVER_ADDR])
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    )?;
    wait_listening(&tb)?;

    let secs = SECONDS.to_string();
    let mut client = proc::Group::spawn(
        tb.exec(
            &tb.sender,
            &[
                "iperf3",
                "-c",
                RECEIVER_ADDR,
                "-B",
                SENDER_ADDR,
                "-t",
                &secs,
                "-C",
                CC,
                "-J",
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped()),
    )?;
    let mut json = String::new();
    if let Some(mut out) = client.child_mut().stdout.take() {
        out.read_to_string(&mut json)
            .context("reading iperf3 output")?;
    }
    let st = client.wait(Some(Duration::from_secs(u64::from(SECONDS) + 30)))?;
    proc::bail_if_interrupted()?;
    let mut r = parse_iperf3(&json)
        .with_context(|| format!("iperf3 exit code {}", proc::exit_code(&st)))?;
    r.delay_ms = tb.delay_ms;
    Ok(r)
}

fn wait_listening(tb: &Testbed) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        proc::bail_if_interrupted()?;
        let out = tb
            .exec(&tb.receiver, &["ss", "-Hltn", "sport = :5201"])
            .output()
            .context("cannot run ss")?;
        if !out.stdout.is_empty() {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(100));
    }
    bail!("iperf3 server did not start listening")
}

fn parse_iperf3(json: &str) -> Result<FlowResult> {
    let v: serde_json::Value = serde_json::from_str(json).context("cannot parse iperf3 JSON")?;
    if let Some(e) = v["error"].as_str() {
        bail!("iperf3: {e}");
    }
    let end = &v["end"];
    let bps = end["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 JSON has no end.sum_received.bits_per_second")?;
    Ok(FlowResult {
        cc: end["sender_tcp_congestion"]
            .as_str()
            .unwrap_or(CC)
            .to_string(),
        delay_ms: None,
        mbit: bps / 1e6,
        retransmits: end["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
    })
}
