//! Network-namespace dumbbell testbed.
//!
//! ```text
//!  sender0 ns ─eth0══to_s0─┐
//!  sender1 ns ─eth0══to_s1─┤ router ns ─to_rx══eth0─ receiver ns
//!  ...                     ┘     │
//!                                └ bottleneck qdisc on to_rx egress
//! ```
//!
//! Qdisc layout (all in the router namespace, never on a sender's own egress,
//! where TCP Small Queues would throttle the sender locally and the buffer
//! would never overflow):
//!
//! * `to_rx` root: `tbf rate R burst B limit L` (handle `1:`). With
//!   [`Aqm::TailDrop`] tbf's built-in bfifo of `L` bytes is the bottleneck
//!   buffer. With [`Aqm::FqCodel`] an `fq_codel` child (handle `10:`, parent
//!   `1:1`) replaces it, its packet limit derived from the byte buffer.
//!   * `L = buffer_bytes` (bytes as the qdisc counts them: IP packet + 14 bytes
//!     of Ethernet header, so a full-size frame is `mtu + 14` bytes).
//!   * `B = max(2 * (mtu + 14), ceil(R / 8 * 1 ms))`: at least two full frames
//!     (tbf drops a packet larger than its bucket, so small rates still work)
//!     and at least 1 ms worth of tokens (so hrtimer latency does not starve
//!     high rates). The burst is tokens, not buffer: it never adds queueing.
//! * `to_sN` root (ACK path toward sender N): `netem delay RTT_N limit 100000`,
//!   only when `RTT_N > 0`. The whole base RTT sits on the ACK path so that the
//!   data path to the bottleneck has no extra queue and each sender keeps its
//!   own RTT (RTT unfairness) while sharing one bottleneck.
//! * Random loss (optional) is applied to the data path *after* the
//!   bottleneck: in the receiver namespace, `eth0` ingress is redirected
//!   (u32 match-all + mirred) to an `ifb0` device whose root is
//!   `netem loss P%`.
//!
//! TSO/GSO/GRO are switched off on every veth end of the path, so buffer
//! sizes mean what they say.
//!
//! Addresses (all in 198.18.0.0/15): receiver link 198.18.0.0/24 (router .1,
//! receiver .2), sender N link 198.18.(N+1).0/24 (sender .1, router .2).
//!
//! Namespace names are `ccctl-<pid>-<seq>-<role>`; [`sweep_stale`] removes
//! namespaces left behind by dead processes.
//!
//! Every namespace this process creates is also in a process-global registry;
//! SIGINT, SIGTERM and SIGHUP tear all of them down (processes inside first)
//! before the process dies of the signal. See [`cleanup_all`] for programs
//! that install their own handlers for those signals.

mod cleanup;
pub use cleanup::cleanup_all;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// Ethernet header bytes counted by qdiscs on a veth on top of the IP packet.
pub const ETH_HLEN: u64 = 14;
/// Where namespaces created by `ip netns add` live.
const NETNS_DIR: &str = "/run/netns";
/// Prefix of every namespace this module creates.
pub const NS_PREFIX: &str = "ccctl-";
/// Packet limit of the ACK-path netem queues (large: never the bottleneck).
const NETEM_LIMIT: u32 = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("command `{cmd}` failed ({status}): {stderr}")]
    Command {
        cmd: String,
        status: String,
        stderr: String,
    },
    #[error("cannot run `{cmd}`: {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid testbed config: {0}")]
    Config(String),
    #[error("{what} needs the netem qdisc, which this kernel lacks (run inside the VM)")]
    NetemMissing { what: String },
    #[error("{what} needs the {qdisc} qdisc, which this kernel lacks")]
    QdiscMissing { what: String, qdisc: String },
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout { what: String, timeout: Duration },
    #[error("cannot parse {what}: {detail}")]
    Parse { what: String, detail: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------
// Command helpers

fn cmd_string(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn status_string(status: &ExitStatus) -> String {
    match status.code() {
        Some(c) => format!("exit code {c}"),
        None => format!("{status}"),
    }
}

/// Runs `cmd` to completion; a non-zero exit becomes [`Error::Command`]
/// naming the command and its stderr.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let s = cmd_string(cmd);
    tracing::debug!(cmd = %s, "run");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            cmd: s.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: s,
            status: status_string(&out.status),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// `ip netns exec <ns> <argv...>` as a [`Command`] (not yet run).
pub fn ns_command<S: AsRef<str>>(ns: &str, argv: &[S]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]);
    c.args(argv.iter().map(|a| a.as_ref()));
    c
}

/// Runs `argv` inside namespace `ns` and returns its output (error on non-zero exit).
pub fn ns_exec<S: AsRef<str>>(ns: &str, argv: &[S]) -> Result<Output> {
    run(&mut ns_command(ns, argv))
}

/// Spawns `argv` inside namespace `ns` with stdout/stderr piped.
/// `ip netns exec` execs the command, so the child's pid is the command's pid.
pub fn ns_spawn<S: AsRef<str>>(ns: &str, argv: &[S]) -> Result<NsProcess> {
    ns_spawn_stdio(ns, argv, Stdio::piped(), Stdio::piped())
}

/// [`ns_spawn`] with explicit stdout/stderr (e.g. `Stdio::null()` for a
/// long-running chatty process nobody reads).
pub fn ns_spawn_stdio<S: AsRef<str>>(
    ns: &str,
    argv: &[S],
    stdout: Stdio,
    stderr: Stdio,
) -> Result<NsProcess> {
    let mut c = ns_command(ns, argv);
    let s = cmd_string(&c);
    tracing::debug!(cmd = %s, "spawn");
    let child = c
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|source| Error::Spawn {
            cmd: s.clone(),
            source,
        })?;
    Ok(NsProcess {
        child: Some(child),
        cmd: s,
    })
}

fn ip<S: AsRef<str>>(args: &[S]) -> Result<Output> {
    let mut c = Command::new("ip");
    c.args(args.iter().map(|a| a.as_ref()));
    run(&mut c)
}

/// A process spawned inside a namespace. Dropping it kills (SIGKILL) and
/// reaps it if it is still running, so no zombie or stray process survives.
#[derive(Debug)]
pub struct NsProcess {
    child: Option<Child>,
    cmd: String,
}

impl NsProcess {
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The command line, for error messages.
    pub fn cmd(&self) -> &str {
        &self.cmd
    }

    pub fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("child present until consumed")
    }

    /// `Some(status)` if the process has exited.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let cmd = self.cmd.clone();
        self.child_mut().try_wait().map_err(|source| Error::Io {
            what: format!("waiting for `{cmd}`"),
            source,
        })
    }

    pub fn kill(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for exit (killing it after `timeout`, if given) and returns its
    /// output whatever the exit status; pipes are drained concurrently.
    pub fn wait_output(mut self, timeout: Option<Duration>) -> Result<Output> {
        let mut child = self.child.take().expect("child present");
        let mut so = child.stdout.take();
        let mut se = child.stderr.take();
        let t_out = thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(s) = so.as_mut() {
                let _ = s.read_to_end(&mut b);
            }
            b
        });
        let t_err = thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(s) = se.as_mut() {
                let _ = s.read_to_end(&mut b);
            }
            b
        });
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) => {}
                Err(source) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::Io {
                        what: format!("waiting for `{}`", self.cmd),
                        source,
                    });
                }
            }
            if let Some(t) = timeout {
                if start.elapsed() > t {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::Timeout {
                        what: format!("`{}`", self.cmd),
                        timeout: t,
                    });
                }
            }
            thread::sleep(Duration::from_millis(20));
        };
        let stdout = t_out.join().unwrap_or_default();
        let stderr = t_err.join().unwrap_or_default();
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }

    /// Like [`wait_output`](Self::wait_output) but a non-zero exit is an [`Error::Command`].
    pub fn wait_success(self, timeout: Option<Duration>) -> Result<Output> {
        let cmd = self.cmd.clone();
        let out = self.wait_output(timeout)?;
        if !out.status.success() {
            return Err(Error::Command {
                cmd,
                status: status_string(&out.status),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(out)
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// Namespaces: naming, stale sweep, teardown

static SEQ: AtomicU64 = AtomicU64::new(0);

fn next_prefix() -> String {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{NS_PREFIX}{}-{seq}", std::process::id())
}

/// Names of all namespaces in /run/netns.
fn list_netns() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(NETNS_DIR)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The pid embedded in a `ccctl-<pid>-…` namespace name.
fn ns_owner_pid(name: &str) -> Option<i32> {
    name.strip_prefix(NS_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence/permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Pids of processes whose network namespace is `ns`.
fn netns_pids(ns: &str) -> Vec<i32> {
    match ip(&["netns", "pids", ns]) {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Kills every process inside `ns` (SIGKILL, again for any that appear
/// meanwhile, waiting up to 2 s for them to go), then deletes the namespace,
/// which takes its veths and qdiscs along. Deleting the namespace alone would
/// not kill its processes (they keep it alive, anonymous). A namespace that
/// is already gone (e.g. deleted concurrently by the signal-cleanup thread)
/// is not an error.
fn destroy_netns(ns: &str) -> Result<()> {
    let me = std::process::id() as i32; // never SIGKILL ourselves
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let pids: Vec<i32> = netns_pids(ns).into_iter().filter(|&p| p != me).collect();
        if pids.is_empty() || Instant::now() >= deadline {
            break;
        }
        for &p in &pids {
            // SAFETY: plain kill(2) on pids that live in our own namespace.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    match ip(&["netns", "del", ns]) {
        Ok(_) => Ok(()),
        Err(_) if !std::path::Path::new(NETNS_DIR).join(ns).exists() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes `ccctl-<pid>-…` namespaces whose owning pid is no longer alive
/// (the after-a-crash path), killing processes left inside them; returns the
/// names removed (failures are logged and skipped). Called at the start
/// of every [`Testbed::new`]. A pid reused by an unrelated live process keeps
/// its stale namespaces until that process exits.
pub fn sweep_stale() -> Vec<String> {
    let me = std::process::id() as i32;
    let mut removed = Vec::new();
    for name in list_netns() {
        let Some(pid) = ns_owner_pid(&name) else {
            continue;
        };
        if pid == me || pid_alive(pid) {
            continue;
        }
        tracing::info!(ns = %name, pid, "removing stale namespace");
        match destroy_netns(&name) {
            Ok(()) => removed.push(name),
            Err(e) => tracing::warn!(ns = %name, error = %e, "cannot remove stale namespace"),
        }
    }
    removed
}

/// Best-effort `modprobe` of the modules the testbed may use (once per process).
fn modprobe_all() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        for m in [
            "sch_netem",
            "sch_tbf",
            "sch_htb",
            "sch_fq",
            "sch_fq_codel",
            "ifb",
            "act_mirred",
            "cls_u32",
            "sch_ingress",
            "veth",
        ] {
            let _ = Command::new("modprobe")
                .args(["-q", m])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    });
}

/// A scratch namespace with a veth pair, deleted on drop.
struct ScratchNs(String);

impl ScratchNs {
    fn new() -> Result<Self> {
        let name = format!("{}-probe", next_prefix());
        cleanup::add_netns(&name)?;
        let s = ScratchNs(name);
        ip(&[
            "-n", &s.0, "link", "add", "p0", "type", "veth", "peer", "name", "p1",
        ])?;
        Ok(s)
    }
}

impl Drop for ScratchNs {
    fn drop(&mut self) {
        let _ = cleanup::del_netns(&self.0);
    }
}

/// Whether the kernel accepts `tc qdisc add … root <kind> <args>` (probed
/// once per kind in a throwaway namespace, result cached).
pub fn qdisc_available(kind: &str, args: &[&str]) -> Result<bool> {
    static CACHE: OnceLock<Mutex<BTreeMap<String, bool>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    if let Some(&b) = cache.lock().unwrap().get(kind) {
        return Ok(b);
    }
    modprobe_all();
    let ns = ScratchNs::new()?;
    let mut argv = vec![
        "tc", "qdisc", "add", "dev", "p0", "root", "handle", "1:", kind,
    ];
    argv.extend_from_slice(args);
    let ok = ns_exec(&ns.0, &argv).is_ok();
    if ok {
        let _ = ns_exec(&ns.0, &["tc", "qdisc", "del", "dev", "p0", "root"]);
    }
    drop(ns);
    cache.lock().unwrap().insert(kind.to_string(), ok);
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
// Configuration

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

/// The tbf bucket size used for `rate_bps` at `mtu`:
/// `max(2 * (mtu + 14), ceil(rate_bps / 8 / 1000))` bytes.
pub fn tbf_burst(rate_bps: u64, mtu: u32) -> u64 {
    (2 * (mtu as u64 + ETH_HLEN)).max(rate_bps.div_ceil(8 * 1000))
}

/// Queue management at the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Aqm {
    /// tbf's own byte FIFO of `buffer_bytes`.
    #[default]
    TailDrop,
    /// fq_codel child of tbf, `limit = ceil(buffer_bytes / (mtu + 14))` packets.
    FqCodel,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SenderConfig {
    /// Base round-trip time of this sender's path (zero: no netem at all).
    pub rtt: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestbedConfig {
    /// Bottleneck rate in bit/s.
    pub rate_bps: u64,
    /// Bottleneck buffer in bytes (frames count as `mtu + 14`); see
    /// [`buffer_bdp`], [`buffer_packets`].
    pub buffer_bytes: u64,
    pub senders: Vec<SenderConfig>,
    /// Random loss probability on the data path, 0.0..1.0 (needs netem).
    pub loss: Option<f64>,
    pub aqm: Aqm,
    pub mtu: u32,
    /// Turn TSO/GSO/GRO off on every veth of the path (default true).
    pub disable_offloads: bool,
}

impl TestbedConfig {
    /// One sender with zero base RTT, tail drop, MTU 1500.
    pub fn new(rate_bps: u64, buffer_bytes: u64) -> Self {
        TestbedConfig {
            rate_bps,
            buffer_bytes,
            senders: vec![SenderConfig::default()],
            loss: None,
            aqm: Aqm::TailDrop,
            mtu: 1500,
            disable_offloads: true,
        }
    }

    /// Replaces the senders by one per RTT given.
    pub fn with_rtts(mut self, rtts: &[Duration]) -> Self {
        self.senders = rtts.iter().map(|&rtt| SenderConfig { rtt }).collect();
        self
    }

    pub fn with_loss(mut self, p: f64) -> Self {
        self.loss = Some(p);
        self
    }

    pub fn with_aqm(mut self, aqm: Aqm) -> Self {
        self.aqm = aqm;
        self
    }

    fn needs_netem(&self) -> bool {
        self.loss.is_some_and(|p| p > 0.0) || self.senders.iter().any(|s| !s.rtt.is_zero())
    }

    fn validate(&self) -> Result<()> {
        let frame = self.mtu as u64 + ETH_HLEN;
        if self.rate_bps < 8_000 {
            return Err(Error::Config(format!(
                "rate {} bit/s is below 8 kbit/s",
                self.rate_bps
            )));
        }
        if self.buffer_bytes < frame {
            return Err(Error::Config(format!(
                "buffer {} B is smaller than one frame ({frame} B)",
                self.buffer_bytes
            )));
        }
        if self.senders.is_empty() || self.senders.len() > 250 {
            return Err(Error::Config(format!(
                "{} senders (need 1..=250)",
                self.senders.len()
            )));
        }
        if let Some(p) = self.loss {
            if !(0.0..1.0).contains(&p) {
                return Err(Error::Config(format!("loss probability {p} not in [0, 1)")));
            }
        }
        if !(576..=9000).contains(&self.mtu) {
            return Err(Error::Config(format!("mtu {} not in 576..=9000", self.mtu)));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Testbed

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Sender(usize),
    Router,
    Receiver,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Sender(i) => write!(f, "s{i}"),
            Role::Router => f.write_str("rt"),
            Role::Receiver => f.write_str("rx"),
        }
    }
}

/// Counters of the bottleneck qdisc (`tc -s -j qdisc show`).
#[derive(Debug, Clone, Default, PartialEq)]
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

/// A dumbbell testbed; `Drop` kills every process inside its namespaces and
/// deletes them (so does SIGINT/SIGTERM/SIGHUP, see [`cleanup_all`]).
#[derive(Debug)]
pub struct Testbed {
    cfg: TestbedConfig,
    prefix: String,
    /// Namespaces created so far, in creation order.
    created: Vec<String>,
    next_port: AtomicU16,
}

/// Device names inside the namespaces.
pub const SENDER_DEV: &str = "eth0";
pub const RECEIVER_DEV: &str = "eth0";
pub const ROUTER_RX_DEV: &str = "to_rx";

pub fn router_sender_dev(i: usize) -> String {
    format!("to_s{i}")
}

impl Testbed {
    /// Sweeps stale namespaces, then builds the testbed; on any failure,
    /// what was created so far is torn down.
    pub fn new(cfg: TestbedConfig) -> Result<Self> {
        cfg.validate()?;
        sweep_stale();
        modprobe_all();
        if cfg.needs_netem() && !netem_available()? {
            return Err(Error::NetemMissing {
                what: "a non-zero base RTT or random loss".into(),
            });
        }
        if cfg.aqm == Aqm::FqCodel && !fq_codel_available()? {
            return Err(Error::QdiscMissing {
                what: "Aqm::FqCodel".into(),
                qdisc: "fq_codel".into(),
            });
        }
        let mut tb = Testbed {
            cfg,
            prefix: next_prefix(),
            created: Vec::new(),
            next_port: AtomicU16::new(5201),
        };
        tb.build()?; // on error, Drop cleans up
        Ok(tb)
    }

    pub fn config(&self) -> &TestbedConfig {
        &self.cfg
    }

    pub fn num_senders(&self) -> usize {
        self.cfg.senders.len()
    }

    /// Namespace name of `role`.
    pub fn ns(&self, role: Role) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// Address of a host: sender N's own address, the receiver's address, or
    /// the router's receiver-facing address.
    pub fn addr(&self, role: Role) -> Ipv4Addr {
        match role {
            Role::Sender(i) => Ipv4Addr::new(198, 18, i as u8 + 1, 1),
            Role::Router => Ipv4Addr::new(198, 18, 0, 1),
            Role::Receiver => Ipv4Addr::new(198, 18, 0, 2),
        }
    }

    pub fn receiver_addr(&self) -> Ipv4Addr {
        self.addr(Role::Receiver)
    }

    pub fn sender_addr(&self, i: usize) -> Ipv4Addr {
        self.addr(Role::Sender(i))
    }

    /// A fresh TCP port number for a server in this testbed (5201, 5202, …).
    pub fn alloc_port(&self) -> u16 {
        self.next_port.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs `argv` in `role`'s namespace; non-zero exit is an error.
    pub fn exec<S: AsRef<str>>(&self, role: Role, argv: &[S]) -> Result<Output> {
        ns_exec(&self.ns(role), argv)
    }

    /// Spawns `argv` in `role`'s namespace (stdout/stderr piped).
    pub fn spawn<S: AsRef<str>>(&self, role: Role, argv: &[S]) -> Result<NsProcess> {
        ns_spawn(&self.ns(role), argv)
    }

    /// [`spawn`](Self::spawn) with explicit stdout/stderr.
    pub fn spawn_stdio<S: AsRef<str>>(
        &self,
        role: Role,
        argv: &[S],
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<NsProcess> {
        ns_spawn_stdio(&self.ns(role), argv, stdout, stderr)
    }

    /// `tc -s -j qdisc show` of the bottleneck's root qdisc.
    pub fn bottleneck_stats(&self) -> Result<QdiscStats> {
        let out = self.exec(
            Role::Router,
            &["tc", "-s", "-j", "qdisc", "show", "dev", ROUTER_RX_DEV],
        )?;
        parse_qdisc_stats(&String::from_utf8_lossy(&out.stdout), "1:")
    }

    fn add_ns(&mut self, role: Role) -> Result<String> {
        let ns = self.ns(role);
        cleanup::add_netns(&ns)?;
        self.created.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        // Fresh per-flow state (no cached ssthresh/RTT between runs), and
        // socket-buffer autotuning up to 64 MiB so large BDPs (1 Gbit/s x
        // 200 ms = 25 MB) are never receive-window limited.
        ns_exec(
            &ns,
            &[
                "sysctl",
                "-qw",
                "net.ipv4.tcp_no_metrics_save=1",
                "net.ipv4.tcp_rmem=4096 131072 67108864",
                "net.ipv4.tcp_wmem=4096 16384 67108864",
            ],
        )?;
        Ok(ns)
    }

    fn veth(&self, ns_a: &str, dev_a: &str, ns_b: &str, dev_b: &str) -> Result<()> {
        ip(&[
            "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns",
            ns_b,
        ])?;
        let mtu = self.cfg.mtu.to_string();
        for (ns, dev) in [(ns_a, dev_a), (ns_b, dev_b)] {
            ip(&["-n", ns, "link", "set", dev, "mtu", &mtu, "up"])?;
            if self.cfg.disable_offloads {
                ns_exec(
                    ns,
                    &[
                        "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off",
                    ],
                )?;
            }
        }
        Ok(())
    }

    fn build(&mut self) -> Result<()> {
        let rt = self.add_ns(Role::Router)?;
        ns_exec(&rt, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        let rx = self.add_ns(Role::Receiver)?;

        // Router <-> receiver, with the bottleneck on the router's egress.
        self.veth(&rt, ROUTER_RX_DEV, &rx, RECEIVER_DEV)?;
        ip(&[
            "-n",
            &rt,
            "addr",
            "add",
            "198.18.0.1/24",
            "dev",
            ROUTER_RX_DEV,
        ])?;
        ip(&[
            "-n",
            &rx,
            "addr",
            "add",
            "198.18.0.2/24",
            "dev",
            RECEIVER_DEV,
        ])?;
        ip(&["-n", &rx, "route", "add", "default", "via", "198.18.0.1"])?;
        self.add_bottleneck(&rt)?;
        if let Some(p) = self.cfg.loss.filter(|&p| p > 0.0) {
            self.add_loss(&rx, p)?;
        }

        for i in 0..self.cfg.senders.len() {
            let s = self.add_ns(Role::Sender(i))?;
            let rdev = router_sender_dev(i);
            self.veth(&s, SENDER_DEV, &rt, &rdev)?;
            let net = i + 1;
            ip(&[
                "-n",
                &s,
                "addr",
                "add",
                &format!("198.18.{net}.1/24"),
                "dev",
                SENDER_DEV,
            ])?;
            ip(&[
                "-n",
                &rt,
                "addr",
                "add",
                &format!("198.18.{net}.2/24"),
                "dev",
                &rdev,
            ])?;
            ip(&[
                "-n",
                &s,
                "route",
                "add",
                "default",
                "via",
                &format!("198.18.{net}.2"),
            ])?;
            let rtt = self.cfg.senders[i].rtt;
            if !rtt.is_zero() {
                // Whole base RTT on the ACK path (router -> sender egress).
                ns_exec(
                    &rt,
                    &[
                        "tc",
                        "qdisc",
                        "add",
                        "dev",
                        &rdev,
                        "root",
                        "handle",
                        "1:",
                        "netem",
                        "delay",
                        &format!("{}us", rtt.as_micros()),
                        "limit",
                        &NETEM_LIMIT.to_string(),
                    ],
                )?;
            }
        }
        Ok(())
    }

    fn add_bottleneck(&self, rt: &str) -> Result<()> {
        let c = &self.cfg;
        let burst = tbf_burst(c.rate_bps, c.mtu);
        ns_exec(
            rt,
            &[
                "tc",
                "qdisc",
                "add",
                "dev",
                ROUTER_RX_DEV,
                "root",
                "handle",
                "1:",
                "tbf",
                "rate",
                &format!("{}bit", c.rate_bps),
                "burst",
                &burst.to_string(),
                "limit",
                &c.buffer_bytes.to_string(),
            ],
        )?;
        match c.aqm {
            Aqm::TailDrop => {}
            Aqm::FqCodel => {
                let pkts = c.buffer_bytes.div_ceil(c.mtu as u64 + ETH_HLEN).max(1);
                ns_exec(
                    rt,
                    &[
                        "tc",
                        "qdisc",
                        "add",
                        "dev",
                        ROUTER_RX_DEV,
                        "parent",
                        "1:1",
                        "handle",
                        "10:",
                        "fq_codel",
                        "limit",
                        &pkts.to_string(),
                    ],
                )?;
            }
        }
        Ok(())
    }

    fn add_loss(&self, rx: &str, p: f64) -> Result<()> {
        ip(&["-n", rx, "link", "add", "ifb0", "type", "ifb"])?;
        ip(&["-n", rx, "link", "set", "ifb0", "up"])?;
        ns_exec(
            rx,
            &[
                "tc",
                "qdisc",
                "add",
                "dev",
                "ifb0",
                "root",
                "netem",
                "loss",
                &format!("{}%", p * 100.0),
                "limit",
                &NETEM_LIMIT.to_string(),
            ],
        )?;
        ns_exec(
            rx,
            &[
                "tc",
                "qdisc",
                "add",
                "dev",
                RECEIVER_DEV,
                "handle",
                "ffff:",
                "ingress",
            ],
        )?;
        ns_exec(
            rx,
            &[
                "tc",
                "filter",
                "add",
                "dev",
                RECEIVER_DEV,
                "parent",
                "ffff:",
                "protocol",
                "all",
                "u32",
                "match",
                "u32",
                "0",
                "0",
                "action",
                "mirred",
                "egress",
                "redirect",
                "dev",
                "ifb0",
            ],
        )?;
        Ok(())
    }

    /// Tears down explicitly, reporting the first error (Drop ignores them).
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first = None;
        // Senders first (they are created last), router last.
        while let Some(ns) = self.created.pop() {
            if let Err(e) = cleanup::del_netns(&ns) {
                tracing::warn!(ns = %ns, error = %e, "namespace teardown failed");
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
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
    use super::*;

    #[test]
    fn burst_formula() {
        // 1 Mbit/s: two full frames dominate.
        assert_eq!(tbf_burst(1_000_000, 1500), 3028);
        // 50 Mbit/s: 1 ms = 6250 B.
        assert_eq!(tbf_burst(50_000_000, 1500), 6250);
        // 1 Gbit/s: 125 kB.
        assert_eq!(tbf_burst(1_000_000_000, 1500), 125_000);
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
    fn owner_pid_parse() {
        assert_eq!(ns_owner_pid("ccctl-1234-0-rt"), Some(1234));
        assert_eq!(ns_owner_pid("ccctl-1234-7-probe"), Some(1234));
        assert_eq!(ns_owner_pid("ccctl-x-0-rt"), None);
        assert_eq!(ns_owner_pid("other-1234"), None);
    }

    #[test]
    fn config_validation() {
        assert!(TestbedConfig::new(50_000_000, 62_500).validate().is_ok());
        assert!(TestbedConfig::new(50_000_000, 1000).validate().is_err());
        assert!(TestbedConfig::new(50_000_000, 62_500)
            .with_loss(1.5)
            .validate()
            .is_err());
        assert!(!TestbedConfig::new(50_000_000, 62_500).needs_netem());
        assert!(TestbedConfig::new(50_000_000, 62_500)
            .with_rtts(&[Duration::from_millis(20)])
            .needs_netem());
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
}

/// Live tests on the host kernel (root; no netem needed).
#[cfg(test)]
mod host_tests {
    use super::*;
    use crate::iperf::{self, FlowSpec};
    use crate::ss::{SamplerConfig, SsSampler};

    /// A process exists and is not a zombie (shared with the cleanup tests).
    pub(crate) fn alive_not_zombie(pid: i32) -> bool {
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
        let sampler = SsSampler::start(&tb.ns(Role::Sender(0)), SamplerConfig::default()).unwrap();
        let r = iperf::run_flow(&tb, &FlowSpec::new(0, "cubic", Duration::from_secs(5))).unwrap();
        let samples = sampler.stop().unwrap();
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
        let data: Vec<_> = samples.for_local_port(port).collect();
        eprintln!(
            "ss: {} ticks, {} failures, {} data-socket records",
            samples.ticks,
            samples.failures,
            data.len()
        );
        assert!(
            data.len() >= 30,
            "only {} samples of the data socket",
            data.len()
        );
        assert!(data.iter().all(|d| d.sock.cc.as_deref() == Some("cubic")));
        let cwnds: Vec<u32> = data.iter().filter_map(|d| d.sock.cwnd).collect();
        let max = *cwnds.iter().max().unwrap();
        let mean = cwnds.iter().sum::<u32>() as f64 / cwnds.len() as f64;
        eprintln!("cwnd mean {mean:.1} max {max}");
        // BDP+buffer at ~0 base RTT is ~43 packets; cwnd should be in that region.
        assert!(mean >= 4.0 && max <= 400, "cwnd mean {mean} max {max}");
        assert!(
            data.iter().any(|d| d.sock.rtt_ms.is_some_and(|r| r > 1.0)),
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

    #[test]
    fn sweep_removes_namespaces_of_dead_pids() {
        let mut c = Command::new("true");
        let mut child = c.spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let name = format!("{NS_PREFIX}{dead}-0-rt");
        ip(&["netns", "add", &name]).unwrap();
        let mine = format!("{}-rt", next_prefix());
        ip(&["netns", "add", &mine]).unwrap();
        let removed = sweep_stale();
        let left = list_netns();
        let _ = destroy_netns(&mine);
        assert!(removed.contains(&name), "{removed:?}");
        assert!(!left.contains(&name));
        assert!(
            left.contains(&mine),
            "sweep removed a live process's namespace"
        );
    }

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
