//! `cargo xtask soak`: ccctl under abuse, bounded in time, stopping by
//! itself, failing (exit 1) when the kernel is not left as it was found.
//! Run it on the host (6.18) and in the VM (6.1):
//! `cargo xtask vm -- target/debug/xtask soak cycles --n 200`.
//!
//! - `cycles`: `--n` load/unload cycles over every algorithm, a live iperf3
//!   flow on the algorithm during every second cycle (unloaded mid-flow).
//!   Afterwards: the kernel's BPF programs, maps and links back to their
//!   count before (after the deferred frees settle), no pins, none of our
//!   names registered, the default congestion control unchanged, every flow
//!   completed with data acknowledged.
//! - `kill`: `--trials` SIGKILLs at uniformly random points inside `load`,
//!   `unload`, `tune`, `trace`, `daemon` and `lab run` each (`--only` picks
//!   some; the window is the command's own duration, measured first, whole
//!   for every command but the daemon, which runs until told and is hit in
//!   its first 5 s). After each kill the next
//!   command (`ccctl status`) must succeed and find a consistent state:
//!   every pinned algorithm registered and usable (`tune --json` reads it),
//!   every registered name of ours pinned, and a killed `tune` leaves the old
//!   parameter set or the new one, never a mix. Repairs it reports are
//!   counted.
//!
//! - `daemon`: `ccctl daemon` for `--minutes` (30) with a flow starting
//!   every second, SIGHUP every 10 s alternating two configs (cwnd_gain 2 and
//!   2.5), traces rotating (2 MB, 10 s). Its resident memory and open files
//!   are sampled every 10 s: after the first minute they may not grow beyond
//!   16 MiB and 4 descriptors; every flow must complete, every SIGHUP be
//!   applied, and the rotated files hold every event the trace did not
//!   count as dropped: rows in the files + the drops they record == the
//!   BPF side's `trace_produced`.
//!
//! Objects are counted machine-wide: on the host, hold /tmp/ccctl-host.lock
//! (the soak takes it) so that no test loads anything meanwhile.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use crate::proc;
use crate::vm::TempFile;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Cycles,
    Kill,
    Daemon,
}

/// The commands `kill` interrupts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Killed {
    Load,
    Unload,
    Tune,
    Trace,
    Daemon,
    LabRun,
}

impl Killed {
    /// The longest undisturbed run the kill window may span. The daemon
    /// runs until told, so its window is its first 5 s (start-up: load,
    /// attach, first trace reads); every other command ends by itself and
    /// is hit anywhere in its whole run, teardown included.
    fn window_cap(self) -> Duration {
        match self {
            Killed::Daemon => Duration::from_secs(5),
            _ => Duration::from_secs(300),
        }
    }
}

#[derive(Debug, Args)]
pub struct SoakArgs {
    #[arg(value_enum)]
    pub mode: Mode,
    /// Load/unload cycles (`cycles`).
    #[arg(long, default_value_t = 1000)]
    pub n: u32,
    /// SIGKILL trials per command (`kill`).
    #[arg(long, default_value_t = 100)]
    pub trials: u32,
    /// Only these commands (`kill`; default: all six).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Killed>,
    /// Minutes the daemon runs (`daemon`).
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// The ccctl binary to soak (default: build the debug one).
    #[arg(long)]
    pub ccctl: Option<PathBuf>,
}

pub fn main(args: SoakArgs) -> Result<i32> {
    let ccctl = match &args.ccctl {
        Some(p) => p.clone(),
        None => proc::cargo_build_json(&["build", "-p", "ccctl", "--bins"], |name, kinds, _| {
            name == "ccctl" && kinds.iter().any(|k| k == "bin")
        })?,
    };
    let _host_lock = host_lock()?;
    let copy = in_vm_copy(&ccctl)?;
    let c = Ccctl(copy.as_ref().map_or(ccctl, |c| c.0.clone()));
    c.must(&["unload", "--all"])?;
    let failures = match args.mode {
        Mode::Cycles => cycles(&c, args.n)?,
        Mode::Kill => kill(&c, args.trials, &args.only)?,
        Mode::Daemon => daemon(&c, args.minutes)?,
    };
    if failures.is_empty() {
        println!("soak: PASS");
        Ok(0)
    } else {
        println!("soak: FAIL ({} problems)", failures.len());
        for f in failures.iter().take(50) {
            println!("  - {f}");
        }
        Ok(1)
    }
}

/// Outside the VM, the soak counts the machine's BPF objects: keep the
/// host tests (which take this lock) out meanwhile.
fn host_lock() -> Result<Option<std::fs::File>> {
    if std::env::var("CCCTL_IN_VM").as_deref() == Ok("1") {
        return Ok(None);
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/ccctl-host.lock")
        .context("opening /tmp/ccctl-host.lock")?;
    eprintln!("soak: waiting for /tmp/ccctl-host.lock");
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
        .context("locking /tmp/ccctl-host.lock")?;
    Ok(Some(f))
}

/// Inside the VM the binary sits on the host's filesystem, exported over
/// 9p: every start pages it in again (2-3 s under TCG, against 0.65 s from
/// the guest's tmpfs), and the soak starts ccctl thousands of times. There
/// it runs a copy in /run (tmpfs; gone with the VM, removed on return).
fn in_vm_copy(ccctl: &Path) -> Result<Option<TempFile>> {
    if std::env::var("CCCTL_IN_VM").as_deref() != Ok("1") {
        return Ok(None);
    }
    let copy = PathBuf::from(format!("/run/ccctl-soak-{}", std::process::id()));
    std::fs::copy(ccctl, &copy)
        .with_context(|| format!("copying {} to {}", ccctl.display(), copy.display()))?;
    eprintln!(
        "soak: running a copy of {} in {}",
        ccctl.display(),
        copy.display()
    );
    Ok(Some(TempFile(copy)))
}

struct Ccctl(PathBuf);

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Ccctl {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.0);
        c.args(args).stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Result<Out> {
        let o = self
            .cmd(args)
            .output()
            .with_context(|| format!("running {}", self.0.display()))?;
        Ok(Out {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        })
    }

    fn must(&self, args: &[&str]) -> Result<Out> {
        let o = self.run(args)?;
        if !o.ok {
            bail!("ccctl {} failed:\n{}{}", args.join(" "), o.stdout, o.stderr);
        }
        Ok(o)
    }

    /// (user name, kernel name) of every algorithm this binary carries.
    fn algorithms(&self) -> Result<Vec<(String, String)>> {
        let v: serde_json::Value = serde_json::from_str(&self.must(&["list", "--json"])?.stdout)
            .context("ccctl list --json")?;
        Ok(v.as_array()
            .context("list is an array")?
            .iter()
            .filter_map(|a| {
                Some((
                    a["name"].as_str()?.to_string(),
                    a["kernel_name"].as_str()?.to_string(),
                ))
            })
            .collect())
    }
}

/// What the kernel and bpffs hold, machine-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Objects {
    progs: usize,
    maps: usize,
    links: usize,
}

fn count(kind: &str) -> Result<usize> {
    let out = Command::new("bpftool")
        .args(["-j", kind, "show"])
        .output()
        .context("running bpftool (cargo xtask setup installs it)")?;
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).with_context(|| format!("bpftool -j {kind} show"))?;
    Ok(v.as_array().map_or(0, Vec::len))
}

fn objects() -> Result<Objects> {
    Ok(Objects {
        progs: count("prog")?,
        maps: count("map")?,
        links: count("link")?,
    })
}

/// Objects freed after a grace period (struct_ops maps, RCU): wait for the
/// count to come back, up to 60 s.
fn settle_to(before: &Objects) -> Result<Objects> {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let now = objects()?;
        if now == *before || Instant::now() > until {
            return Ok(now);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn default_cc() -> Result<String> {
    Ok(
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .context("reading the default congestion control")?
            .trim()
            .to_string(),
    )
}

fn registered() -> Result<Vec<String>> {
    Ok(
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
            .context("reading the available congestion controls")?
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

const PIN_ROOT: &str = "/sys/fs/bpf/ccctl";

const FLOW_PORTS: [u16; 4] = [5201, 5202, 5203, 5204];

/// A private namespace with loopback up and iperf3 servers; removed on drop.
struct FlowNs {
    name: String,
}

impl FlowNs {
    fn new() -> Result<FlowNs> {
        let name = format!("ccctl-soak-{}", std::process::id());
        proc::run(Command::new("ip").args(["netns", "add", &name]))?;
        let ns = FlowNs { name };
        proc::run(Command::new("ip").args(["-n", &ns.name, "link", "set", "lo", "up"]))?;
        // One iperf3 server serves one client at a time: a few ports let
        // flows overlap.
        for port in FLOW_PORTS {
            proc::run(
                Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        &ns.name,
                        "iperf3",
                        "-s",
                        "-D",
                        "-B",
                        "127.0.0.1",
                    ])
                    .args(["-p", &port.to_string()]),
            )?;
        }
        std::thread::sleep(Duration::from_millis(300));
        Ok(ns)
    }

    /// A flow of whole seconds (iperf3's -t takes an integer: `-t 0.5` is
    /// `-t 0`, no limit) to server `n` (mod the ports).
    fn client(&self, cc: &str, secs: u32, n: u32) -> Result<std::process::Child> {
        let port = FLOW_PORTS[n as usize % FLOW_PORTS.len()].to_string();
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.name,
                "iperf3",
                "-c",
                "127.0.0.1",
                "-J",
                "-C",
                cc,
            ])
            .args(["-p", &port, "-t", &secs.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting iperf3 -c")
    }
}

impl Drop for FlowNs {
    fn drop(&mut self) {
        if let Ok(o) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Bytes the receiver acknowledged in an iperf3 -J report; None on error.
fn iperf_received(json: &[u8]) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    if v.get("error").is_some() {
        return None;
    }
    v["end"]["sum_received"]["bytes"].as_f64()
}

fn cycles(c: &Ccctl, n: u32) -> Result<Vec<String>> {
    let algos = c.algorithms()?;
    let default_before = default_cc()?;
    let before = objects()?;
    let ns = FlowNs::new()?;
    let started = Instant::now();
    let mut failures = Vec::new();
    let (mut flows, mut flows_ok) = (0u32, 0u32);
    for i in 0..n {
        proc::bail_if_interrupted()?;
        let (name, kernel_name) = &algos[i as usize % algos.len()];
        if let Err(e) = c.must(&["load", name]) {
            failures.push(format!("cycle {i}: {e:#}"));
            break;
        }
        if i % 2 == 1 {
            flows += 1;
            let client = ns.client(kernel_name, 1, i)?;
            std::thread::sleep(Duration::from_millis(300));
            let unloaded = c.must(&["unload", name]);
            let out = client.wait_with_output().context("waiting for iperf3")?;
            match (unloaded, out.status.success(), iperf_received(&out.stdout)) {
                (Ok(_), true, Some(b)) if b > 0.0 => flows_ok += 1,
                (Err(e), ..) => failures.push(format!("cycle {i}: unload mid-flow: {e:#}")),
                (_, ok, b) => failures.push(format!(
                    "cycle {i}: flow on {kernel_name} did not complete (exit ok {ok}, received {b:?} B): {}",
                    String::from_utf8_lossy(&out.stderr)
                )),
            }
        } else if let Err(e) = c.must(&["unload", name]) {
            failures.push(format!("cycle {i}: {e:#}"));
            break;
        }
        if (i + 1) % 50 == 0 {
            eprintln!(
                "soak: {} cycles, {flows_ok}/{flows} flows, {:.0} s",
                i + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    drop(ns);
    let after = settle_to(&before)?;
    println!(
        "soak cycles: {n} load/unload cycles over {} algorithms, {flows_ok} of {flows} flows completed, {:.0} s",
        algos.len(),
        started.elapsed().as_secs_f64()
    );
    println!("  BPF objects before {before:?}, after {after:?}");
    if after != before {
        failures.push(format!(
            "BPF objects not back: before {before:?}, after {after:?}"
        ));
    }
    if flows_ok != flows {
        failures.push(format!(
            "{} of {flows} flows did not complete",
            flows - flows_ok
        ));
    }
    if Path::new(PIN_ROOT).exists() {
        failures.push(format!("pins left in {PIN_ROOT}"));
    }
    let ours: Vec<String> = registered()?
        .into_iter()
        .filter(|r| algos.iter().any(|(_, k)| k == r))
        .collect();
    if !ours.is_empty() {
        failures.push(format!("still registered: {ours:?}"));
    }
    let default_after = default_cc()?;
    if default_after != default_before {
        failures.push(format!(
            "default congestion control {default_before} became {default_after}"
        ));
    }
    Ok(failures)
}

/// Parameter values (name -> value) of a loaded algorithm.
fn params_of(c: &Ccctl, algo: &str) -> Result<BTreeMap<String, String>> {
    let v: serde_json::Value =
        serde_json::from_str(&c.must(&["tune", algo, "--json"])?.stdout).context("tune --json")?;
    Ok(v["params"]
        .as_array()
        .context("params array")?
        .iter()
        .filter_map(|p| Some((p["name"].as_str()?.to_string(), p["value"].to_string())))
        .collect())
}

/// Network namespaces a (dead) ccctl process `pid` made (`ccctl-<pid>-*`).
fn namespaces_of(pid: u32) -> Result<Vec<String>> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .context("ip netns list")?;
    let prefix = format!("ccctl-{pid}-");
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_string)
        .collect())
}

/// After a kill: the next command succeeds and the state is consistent.
/// Returns the repairs it reported.
fn check_consistent(
    c: &Ccctl,
    algos: &[(String, String)],
) -> Result<std::result::Result<usize, String>> {
    let status = c.run(&["status", "--json"])?;
    if !status.ok {
        return Ok(Err(format!("the next command failed: {}", status.stderr)));
    }
    let repairs = status
        .stderr
        .lines()
        .filter(|l| l.contains("repaired:"))
        .count();
    let regs = registered()?;
    for (name, kernel_name) in algos {
        let pinned = Path::new(PIN_ROOT).join(name).exists();
        let reg = regs.contains(kernel_name);
        if pinned && !reg {
            return Ok(Err(format!("{name} pinned but not registered")));
        }
        if reg && !pinned {
            return Ok(Err(format!("{kernel_name} registered without pins")));
        }
        if pinned && !c.run(&["tune", name, "--json"])?.ok {
            return Ok(Err(format!(
                "{name} pinned but its parameters cannot be read"
            )));
        }
    }
    Ok(Ok(repairs))
}

fn kill(c: &Ccctl, trials: u32, only: &[Killed]) -> Result<Vec<String>> {
    let algos = c.algorithms()?;
    let default_before = default_cc()?;
    let before = objects()?;
    // Removed when this returns, errors included.
    let scratch = ccctl_sys::scratch_dir("soak")?;
    let daemon_cfg = scratch.join("daemon.toml");
    std::fs::write(
        &daemon_cfg,
        format!(
            "[[algorithms]]\nname = \"bpf-bbr\"\n[[algorithms]]\nname = \"modest-bbr\"\n\
             [trace]\nout_dir = \"{}\"\nrotate_size = \"2MB\"\n",
            scratch.join("traces").display()
        ),
    )?;
    let set_a = ["--wmin", "0.6", "--wmax", "0.9", "--smin", "2"];
    let set_b = ["--wmin", "0.7", "--wmax", "0.95", "--smin", "3"];
    let trace_out = scratch.join("t.parquet").to_string_lossy().into_owned();
    let lab_out = scratch.join("lab").to_string_lossy().into_owned();
    let daemon_cfg = daemon_cfg.to_string_lossy().into_owned();

    // (command, setup before each trial, the command's argv)
    type Setup = fn(&Ccctl, &[&str]) -> Result<()>;
    let none: Setup = |_, _| Ok(());
    let load_bbr: Setup = |c, _| c.must(&["load", "bpf-bbr"]).map(drop);
    let load_modest_a: Setup = |c, a| {
        c.must(&["load", "modest-bbr"])?;
        let mut args = vec!["tune", "modest-bbr"];
        args.extend_from_slice(a);
        c.must(&args).map(drop)
    };
    let mut tune_b = vec!["tune", "modest-bbr"];
    tune_b.extend_from_slice(&set_b);
    let commands: Vec<(Killed, &str, Setup, Vec<&str>)> = vec![
        (
            Killed::Load,
            "load",
            none,
            vec!["load", "modest-bbr", "--default"],
        ),
        (Killed::Unload, "unload", load_bbr, vec!["unload", "--all"]),
        (Killed::Tune, "tune", load_modest_a, tune_b),
        (
            Killed::Trace,
            "trace",
            load_bbr,
            vec!["trace", "--out", &trace_out, "--duration", "1"],
        ),
        (
            Killed::Daemon,
            "daemon",
            none,
            vec!["daemon", "--config", &daemon_cfg],
        ),
        (
            Killed::LabRun,
            "lab run",
            none,
            vec![
                "lab",
                "run",
                "--flows",
                "cubic:1, bpf_bbr:1",
                "--rate",
                "10mbit",
                "--rtt",
                "10ms",
                "--buffer",
                "100pkt",
                "--duration",
                "2s",
                "--warmup",
                "0s",
                "--repetitions",
                "1",
                "--no-baselines",
                "--where",
                "host",
                "--out",
                &lab_out,
            ],
        ),
    ];
    // Set B as the map holds it (fixed point), read back once.
    load_modest_a(c, &set_a)?;
    let mut args = vec!["tune", "modest-bbr"];
    args.extend_from_slice(&set_b);
    c.must(&args)?;
    let params_b = params_of(c, "modest-bbr")?;
    c.must(&["unload", "--all"])?;

    let mut failures = Vec::new();
    let mut rng = Lcg::seeded();
    for (which, label, setup, argv) in &commands {
        if !only.is_empty() && !only.contains(which) {
            continue;
        }
        // The window: one undisturbed run (capped: the daemon runs until told).
        setup(c, &set_a)?;
        let t0 = Instant::now();
        let mut child = c
            .cmd(argv)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let cap = which.window_cap();
        while child.try_wait()?.is_none() && t0.elapsed() < cap {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
        let window = t0.elapsed();
        c.must(&["status"])?;
        c.must(&["unload", "--all"])?;
        let (mut consistent, mut repairs) = (0u32, 0usize);
        for t in 0..trials {
            proc::bail_if_interrupted()?;
            setup(c, &set_a)?;
            let params_before = if *which == Killed::Tune {
                Some(params_of(c, "modest-bbr")?)
            } else {
                None
            };
            let at = window.mul_f64(rng.unit());
            let mut child = c
                .cmd(argv)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            let child_pid = child.id();
            std::thread::sleep(at);
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
            let consistent_now = check_consistent(c, &algos)?;
            // A killed lab run's testbed (namespaces, their veths and the
            // path emulator's sockets) is gone once the next command ran.
            let left = namespaces_of(child_pid)?;
            if !left.is_empty() {
                failures.push(format!(
                    "{label} killed at {at:?} (trial {t}): namespaces left after the next command: {left:?}"
                ));
            }
            match consistent_now {
                Ok(r) => {
                    repairs += r;
                    let mut ok = true;
                    if let Some(a) = &params_before {
                        let now = params_of(c, "modest-bbr")?;
                        if now != *a && now != params_b {
                            ok = false;
                            failures.push(format!("tune killed at {at:?}: a mixed set {now:?}"));
                        }
                    }
                    if ok {
                        consistent += 1;
                    }
                }
                Err(why) => failures.push(format!("{label} killed at {at:?} (trial {t}): {why}")),
            }
            c.must(&["unload", "--all"])?;
            if default_cc()? != default_before {
                failures.push(format!(
                    "{label} killed at {at:?}: default left at {} (was {default_before})",
                    default_cc()?
                ));
                let _ =
                    std::fs::write("/proc/sys/net/ipv4/tcp_congestion_control", &default_before);
            }
        }
        println!(
            "soak kill: {label:<8} {consistent}/{trials} consistent after SIGKILL in a {:.0} ms window, {repairs} repairs reported",
            window.as_secs_f64() * 1e3
        );
    }
    let after = settle_to(&before)?;
    println!("  BPF objects before {before:?}, after {after:?}");
    if after != before {
        failures.push(format!(
            "BPF objects not back: before {before:?}, after {after:?}"
        ));
    }
    if Path::new(PIN_ROOT).exists() {
        failures.push(format!("pins left in {PIN_ROOT}"));
    }
    Ok(failures)
}

/// A small deterministic generator (the seed is printed, so a failing run
/// can be repeated with CCCTL_SOAK_SEED).
struct Lcg(u64);

impl Lcg {
    fn seeded() -> Lcg {
        let seed = std::env::var("CCCTL_SOAK_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("soak: seed {seed} (CCCTL_SOAK_SEED to repeat)");
        Lcg(seed | 1)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// (resident KiB, open descriptors) of `pid`.
fn footprint(pid: u32) -> Result<(u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("VmRSS")?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count();
    Ok((rss, fds))
}

/// (rows, events the files say were dropped while each was current) of
/// the Parquet files under `dir` (pyarrow from the setup's venv).
fn parquet_rows(dir: &Path) -> Result<(u64, u64)> {
    let script = "import sys, glob, pyarrow.parquet as pq\n\
                  rows = dropped = 0\n\
                  for f in glob.glob(sys.argv[1] + '/*.parquet'):\n\
                  \x20   md = pq.ParquetFile(f).metadata\n\
                  \x20   rows += md.num_rows\n\
                  \x20   dropped += int((md.metadata or {}).get(b'ccctl.events_dropped', b'0'))\n\
                  print(rows, dropped)";
    let out = Command::new(Path::new(ccctl_vm::VENV).join("bin/python"))
        .args(["-c", script])
        .arg(dir)
        .output()
        .context("running pyarrow (cargo xtask setup installs it)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut it = text.split_whitespace().map(str::parse::<u64>);
    match (it.next(), it.next()) {
        (Some(Ok(r)), Some(Ok(d))) => Ok((r, d)),
        _ => bail!(
            "counting rows: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Sum over CPUs of a pinned per-CPU u64 counter (bpftool's formatted dump).
fn per_cpu_sum(pin: &str) -> Result<u64> {
    let out = Command::new("bpftool")
        .args(["-j", "map", "dump", "pinned", pin])
        .output()
        .context("running bpftool")?;
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).with_context(|| format!("bpftool map dump {pin}"))?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| {
            e["formatted"]["values"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| c["value"].as_u64())
        .sum())
}

fn daemon(c: &Ccctl, minutes: f64) -> Result<Vec<String>> {
    // Removed when this returns (after the daemon is reaped), errors included.
    let scratch = ccctl_sys::scratch_dir("soak-daemon")?;
    let traces = scratch.join("traces");
    std::fs::create_dir_all(&traces)?;
    let cfg_path = scratch.join("daemon.toml");
    let config = |gain: f64| {
        format!(
            "[[algorithms]]\nname = \"bpf-bbr\"\nparams = {{ cwnd_gain = {gain:.1} }}\n\
             [trace]\nout_dir = \"{}\"\nrotate_size = \"2MB\"\nrotate_time = \"10s\"\n",
            traces.display()
        )
    };
    std::fs::write(&cfg_path, config(2.0))?;
    let ns = FlowNs::new()?;
    let cfg_arg = cfg_path.to_string_lossy().into_owned();
    // Its log goes to a file: a pipe nobody reads for 30 minutes could fill.
    let log_path = scratch.join("daemon.log");
    let log_file = std::fs::File::create(&log_path)?;
    let daemon = c
        .cmd(&["daemon", "--config", &cfg_arg])
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .context("starting ccctl daemon")?;
    let pid = daemon.id();
    // Whatever ends this function early (an error, Ctrl-C), the daemon gets
    // SIGTERM (it unloads what it loaded) and the scratch directory goes.
    let mut daemon = Reap(Some(daemon));
    let started = Instant::now();
    let total = Duration::from_secs_f64(minutes * 60.0);
    let mut failures = Vec::new();
    let (mut flows, mut flows_ok, mut hups) = (0u32, 0u32, 0u32);
    let mut samples: Vec<(f64, u64, usize)> = Vec::new();
    let mut clients: Vec<std::process::Child> = Vec::new();
    let mut next_hup = Duration::from_secs(10);
    std::thread::sleep(Duration::from_secs(2));
    // Flows start on a fixed 1 s cadence: the loop's own work (spawning a
    // client, checking a SIGHUP for up to 2 s) does not stretch it (in the
    // VM a sleep of 1 s after that work made it one flow per 1.6 s).
    let mut next_flow = Instant::now();
    while started.elapsed() < total {
        proc::bail_if_interrupted()?;
        if daemon.child().try_wait()?.is_some() {
            failures.push("the daemon exited by itself".into());
            break;
        }
        clients.push(ns.client("bpf_bbr", 1, flows)?);
        flows += 1;
        next_flow += Duration::from_secs(1);
        // Reap finished clients.
        let mut still = Vec::new();
        for mut cl in clients.drain(..) {
            match cl.try_wait()? {
                Some(_) => {
                    let out = cl.wait_with_output()?;
                    if out.status.success() && iperf_received(&out.stdout).is_some_and(|b| b > 0.0)
                    {
                        flows_ok += 1;
                    }
                }
                None => still.push(cl),
            }
        }
        clients = still;
        if started.elapsed() >= next_hup {
            hups += 1;
            std::fs::write(&cfg_path, config(if hups % 2 == 1 { 2.5 } else { 2.0 }))?;
            rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid as i32).context("daemon pid")?,
                rustix::process::Signal::HUP,
            )?;
            let (rss, fds) = footprint(pid)?;
            samples.push((started.elapsed().as_secs_f64(), rss, fds));
            next_hup += Duration::from_secs(10);
            // The SIGHUP is applied: the map shows the new gain within 2 s.
            let want = if hups % 2 == 1 { "2.5" } else { "2.0" };
            let applied = (0..20).any(|_| {
                std::thread::sleep(Duration::from_millis(100));
                params_of(c, "bpf-bbr")
                    .is_ok_and(|p| p.get("cwnd_gain").map(String::as_str) == Some(want))
            });
            if !applied {
                failures.push(format!(
                    "SIGHUP {hups} (cwnd_gain {want}) not applied within 2 s"
                ));
            }
            if hups % 6 == 0 {
                eprintln!(
                    "soak daemon: {:.0} s, rss {} KiB, {} fds, {flows_ok}/{flows} flows",
                    started.elapsed().as_secs_f64(),
                    rss,
                    fds
                );
            }
        }
        std::thread::sleep(next_flow.saturating_duration_since(Instant::now()));
    }
    for cl in clients {
        let out = cl.wait_with_output()?;
        if out.status.success() && iperf_received(&out.stdout).is_some_and(|b| b > 0.0) {
            flows_ok += 1;
        }
    }
    // Every flow is over: after a moment for the last ACKs, the BPF side's
    // count of events produced is final (read before SIGTERM: the daemon
    // unloads, and the counter goes with the maps).
    std::thread::sleep(Duration::from_secs(2));
    let produced = per_cpu_sum("/sys/fs/bpf/ccctl/shared/trace_produced")?;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).context("daemon pid")?,
        rustix::process::Signal::TERM,
    )?;
    let status = daemon.0.take().context("the daemon")?.wait()?;
    drop(ns);
    if !status.success() {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        failures.push(format!(
            "the daemon's exit after SIGTERM: {status:?}\n{log}"
        ));
    }
    let files = std::fs::read_dir(&traces)?.count();
    let (rows, dropped) = parquet_rows(&traces)?;
    // Growth after the first minute (allocator warm-up, first rotation).
    let settled: Vec<&(f64, u64, usize)> = samples.iter().filter(|s| s.0 >= 60.0).collect();
    if let (Some(first), Some(max_rss), Some(max_fds)) = (
        settled.first(),
        settled.iter().map(|s| s.1).max(),
        settled.iter().map(|s| s.2).max(),
    ) {
        println!(
            "soak daemon: {:.1} min, {flows_ok}/{flows} flows, {hups} SIGHUPs, {files} trace files, {rows} events; \
             rss {} -> max {} KiB, fds {} -> max {}",
            minutes, first.1, max_rss, first.2, max_fds
        );
        if max_rss > first.1 + 16 * 1024 {
            failures.push(format!(
                "resident memory grew from {} to {max_rss} KiB",
                first.1
            ));
        }
        if max_fds > first.2 + 4 {
            failures.push(format!("open files grew from {} to {max_fds}", first.2));
        }
    } else {
        println!("soak daemon: {minutes:.1} min is too short to judge growth (samples after the first minute)");
    }
    if flows_ok != flows {
        failures.push(format!(
            "{} of {flows} flows did not complete",
            flows - flows_ok
        ));
    }
    if rows == 0 {
        failures.push("no traced events in the rotated files".into());
    }
    // No event lost that the drop counter does not count.
    println!(
        "soak daemon: events produced {produced}, in the files {rows}, counted dropped {dropped}"
    );
    if rows + dropped != produced {
        failures.push(format!(
            "events: {rows} written + {dropped} dropped != {produced} produced"
        ));
    }
    Ok(failures)
}

/// The soaked daemon: SIGTERM and wait on drop.
struct Reap(Option<std::process::Child>);

impl Reap {
    fn child(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("the daemon is running")
    }
}

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let _ = child.wait();
        }
    }
}
