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
//!   * `B = max(2 * (mtu + 14), ceil(R / 8 * 10 ms))`: at least two full frames
//!     (tbf drops a packet larger than its bucket, so small rates still work)
//!     and 10 ms worth of tokens, so a late watchdog timer (common in a TCG
//!     guest on a busy machine) does not throw link time away; see
//!     [`TBF_BURST_MS`]. The burst is tokens, not buffer: it never adds
//!     queueing, and the bucket only fills while the queue is empty.
//! * `to_sN` root (ACK path toward sender N): `netem delay RTT_N limit 100000`,
//!   only when `RTT_N > 0`. The whole base RTT sits on the ACK path so that the
//!   data path to the bottleneck has no extra queue and each sender keeps its
//!   own RTT (RTT unfairness) while sharing one bottleneck.
//! * A gated sender N ([`SenderConfig::gate`], a descheduled VM): `taprio`
//!   roots on the sender's own `eth0` and on the router's `to_sN`, one traffic
//!   class, gate open On / closed Off, CLOCK_TAI, base-time 0, so both
//!   gates open and close together. Such a sender's base RTT moves to its
//!   data path, before the bottleneck: `to_sN` ingress is redirected (u32
//!   match-all + mirred) to `ifbgN`, whose root is the netem delay (first
//!   it was a netem child under the router's taprio; taprio peeks a child
//!   and then dequeues it, and netem's peek stashes the packet, a suspected
//!   but unverified cause of trouble). Measured in the VM: the sender's
//!   taprio gates to within 1 ms; the router's lets forwarded packets (the
//!   ACKs) through during Off, cause not found. Off, the sender transmits nothing
//!   (TCP Small Queues holds the socket once its few packets wait in the
//!   closed gate) and receives nothing (its ACKs wait at the router). The
//!   sender-side qdisc is no bottleneck: it delays, and drops nothing.
//! * Random loss (optional) is applied to the data path *after* the
//!   bottleneck: in the receiver namespace, `eth0` ingress is redirected
//!   (u32 match-all + mirred) to an `ifb0` device whose root is
//!   `netem loss P%`.
//!
//! TSO/GSO/GRO are switched off on every veth end of the path, so buffer
//! sizes mean what they say.
//!
//! Building spawns at most three processes whatever the number of senders
//! (one `ip -batch`, one or two `tc -batch`) and teardown one (`ip -batch`
//! of `netns del`): inside the TCG VM every spawn costs ~300 ms. Sysctls,
//! links, offloads, addresses and routes are set from a helper thread that
//! joined the namespace (see [`Testbed::build`]).
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
use std::fs::File;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
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

/// `ip ARGS…` (tests only: the testbed batches its `ip` commands).
#[cfg(test)]
fn ip<S: AsRef<str>>(args: &[S]) -> Result<Output> {
    let mut c = Command::new("ip");
    c.args(args.iter().map(|a| a.as_ref()));
    run(&mut c)
}

/// Runs `program args… -batch -` with `lines` as its script on stdin: one
/// process for any number of `ip` or `tc` commands. Spawning processes, not
/// the commands themselves, is what makes a testbed slow to build in the
/// TCG VM (~300 ms per spawn there).
///
/// Without `-force` in `args` the tool stops at the first failing line; a
/// non-zero exit becomes [`Error::Command`] whose `cmd` names the failing
/// line, taken from the tool's `Command failed -:N` report.
fn run_batch(program: &str, args: &[&str], lines: &[String]) -> Result<Output> {
    let mut c = Command::new(program);
    c.args(args).args(["-batch", "-"]);
    let s = cmd_string(&c);
    tracing::debug!(cmd = %s, script = %lines.join("; "), "run batch");
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Spawn {
            cmd: s.clone(),
            source,
        })?;
    let mut script = lines.join("\n");
    script.push('\n');
    // Written from another thread, so a tool that fills its stderr pipe
    // before reading all of its script cannot deadlock us.
    let stdin = child.stdin.take();
    let writer = thread::spawn(move || match stdin {
        Some(mut w) => w.write_all(script.as_bytes()),
        None => Ok(()),
    });
    let out = child.wait_with_output().map_err(|source| Error::Io {
        what: format!("waiting for `{s}`"),
        source,
    })?;
    let written = writer.join();
    if !out.status.success() {
        // A failed tool may have quit before reading everything: the
        // writer's EPIPE says nothing more than the exit status.
        let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let cmd = match failed_batch_line(&stderr).and_then(|n| Some((n, lines.get(n - 1)?))) {
            Some((n, line)) => {
                // Said by `cmd` now, with the line itself.
                stderr = stderr
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("Command failed "))
                    .collect::<Vec<_>>()
                    .join("\n");
                format!("{s} (line {n}: {line})")
            }
            None => s,
        };
        return Err(Error::Command {
            cmd,
            status: status_string(&out.status),
            stderr,
        });
    }
    match written {
        Ok(Ok(())) => Ok(out),
        Ok(Err(source)) => Err(Error::Io {
            what: format!("writing the script of `{s}`"),
            source,
        }),
        Err(_) => Err(Error::Io {
            what: format!("writing the script of `{s}`"),
            source: std::io::Error::other("writer thread panicked"),
        }),
    }
}

/// The (1-based) script line of the first `Command failed -:N` that
/// `ip -batch` / `tc -batch` printed.
fn failed_batch_line(stderr: &str) -> Option<usize> {
    stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Command failed "))
        .find_map(|rest| rest.rsplit_once(':')?.1.trim().parse().ok())
        .filter(|&n| n > 0)
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

/// Where `ip netns add` bind-mounts namespace `ns`.
fn netns_path(ns: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(ns)
}

fn netns_exists(ns: &str) -> bool {
    netns_path(ns).exists()
}

/// Identity of a network namespace: `(st_dev, st_ino)` of its nsfs inode,
/// which both /run/netns/<name> (a bind mount of it) and /proc/<pid>/ns/net
/// of every process inside stat to.
type NsId = (u64, u64);

fn ns_id(path: &Path) -> Option<NsId> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Pids of processes other than this one whose network namespace is one of
/// `ids`. This is what `ip netns pids` does (compare each
/// /proc/<pid>/ns/net with the namespace file), minus the process spawn.
/// Zombies have no namespace any more and are not listed.
fn pids_in(ids: &[NsId]) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            ns_id(Path::new(&format!("/proc/{pid}/ns/net"))).is_some_and(|id| ids.contains(&id))
        })
        .collect()
}

/// Pids of processes (other than this one) whose network namespace is `ns`.
#[cfg(test)]
fn netns_pids(ns: &str) -> Vec<i32> {
    match ns_id(&netns_path(ns)) {
        Some(id) => pids_in(&[id]),
        None => Vec::new(),
    }
}

/// Kills every process inside the namespaces `names` (SIGKILL, again for
/// any that appear meanwhile, waiting up to 2 s for them to go), then
/// deletes them all with one `ip -force -batch -` of `netns del` lines,
/// which takes their veths and qdiscs along. Deleting a namespace alone
/// would not kill its processes (they keep it alive, anonymous).
///
/// Namespaces already gone (never created because a build failed early, or
/// deleted concurrently by the signal-cleanup thread) are not an error:
/// they are skipped, `-force` keeps `ip` going past any that vanish
/// meanwhile, and only a namespace that still exists afterwards counts as a
/// failure. No process at all is spawned when none of them exists.
fn destroy_netns_all(names: &[String]) -> Result<()> {
    let present: Vec<&String> = names.iter().filter(|n| netns_exists(n)).collect();
    if present.is_empty() {
        return Ok(());
    }
    let ids: Vec<NsId> = present
        .iter()
        .filter_map(|n| ns_id(&netns_path(n)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let pids = pids_in(&ids); // never lists ourselves
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
    let lines: Vec<String> = present.iter().map(|n| format!("netns del {n}")).collect();
    let res = run_batch("ip", &["-force"], &lines);
    let left: Vec<&str> = present
        .iter()
        .filter(|n| netns_exists(n))
        .map(|n| n.as_str())
        .collect();
    if left.is_empty() {
        return Ok(());
    }
    let left = left.join(" ");
    Err(match res {
        Err(Error::Command {
            cmd,
            status,
            stderr,
        }) => Error::Command {
            cmd: format!("{cmd}, leaving {left}"),
            status,
            stderr,
        },
        Err(e) => e,
        Ok(_) => Error::Io {
            what: format!("deleting namespaces {left}"),
            source: std::io::Error::other("still present after `ip netns del`"),
        },
    })
}

/// [`destroy_netns_all`] for one namespace.
#[cfg(test)]
fn destroy_netns(ns: &str) -> Result<()> {
    destroy_netns_all(&[ns.to_string()])
}

/// Removes `ccctl-<pid>-…` namespaces whose owning pid is no longer alive
/// (the after-a-crash path), killing processes left inside them; returns the
/// names removed (failures are logged and skipped). Called at the start
/// of every [`Testbed::new`]; spawns nothing unless there is something to
/// remove. A pid reused by an unrelated live process keeps its stale
/// namespaces until that process exits.
pub fn sweep_stale() -> Vec<String> {
    let me = std::process::id() as i32;
    let stale: Vec<String> = list_netns()
        .into_iter()
        .filter(|name| ns_owner_pid(name).is_some_and(|pid| pid != me && !pid_alive(pid)))
        .collect();
    if stale.is_empty() {
        return stale;
    }
    tracing::info!(namespaces = %stale.join(" "), "removing stale namespaces");
    if let Err(e) = destroy_netns_all(&stale) {
        tracing::warn!(error = %e, "cannot remove some stale namespaces");
    }
    stale.into_iter().filter(|n| !netns_exists(n)).collect()
}

/// Best-effort `modprobe` of the modules the testbed may use (once per
/// process, one process: `-a` loads every module named and carries on past
/// ones that fail or do not exist).
fn modprobe_all() {
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

/// A scratch namespace with a veth pair, deleted on drop.
struct ScratchNs(String);

impl ScratchNs {
    fn new() -> Result<Self> {
        // Built before the namespace exists: Drop deletes whatever a failed
        // batch left behind (and spawns nothing if that is nothing).
        let s = ScratchNs(format!("{}-probe", next_prefix()));
        let ns = &s.0;
        let names = [ns.clone()];
        cleanup::create_netns(&names, || {
            run_batch(
                "ip",
                &[],
                &[
                    format!("netns add {ns}"),
                    format!("link add p0 netns {ns} type veth peer name p1 netns {ns}"),
                ],
            )
        })?;
        Ok(s)
    }
}

impl Drop for ScratchNs {
    fn drop(&mut self) {
        let _ = cleanup::del_netns(std::slice::from_ref(&self.0));
    }
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

/// Whether taprio (the sender On/Off gate) works here.
pub fn taprio_available() -> Result<bool> {
    let gate = Gate {
        on: Duration::from_millis(1),
        off: Duration::from_millis(1),
    };
    let line = gate.taprio_line("x");
    let args: Vec<&str> = line
        .split_whitespace()
        .skip_while(|w| *w != "taprio")
        .skip(1)
        .collect();
    qdisc_available("taprio", &args)
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
// In-namespace configuration without processes
//
// What `ip netns exec NS sysctl …`, `ip netns exec NS ethtool -K …` and
// `ip -n NS addr/route/link …` did, done by a short-lived thread that joined
// NS: sockets a thread creates and /proc/sys/net files it opens belong to
// the thread's network namespace, not the process's. No process is spawned,
// and the calling thread never changes namespace.

/// Runs `f` on a fresh thread that has joined network namespace `ns`
/// (/run/netns/<ns>). The thread exits with `f`, so nothing else ever runs
/// in `ns` by accident.
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let path = netns_path(ns);
    thread::scope(|scope| {
        let h = thread::Builder::new()
            .name("ccctl-netns".into())
            .spawn_scoped(scope, || {
                let enter = |source| Error::Io {
                    what: format!("entering network namespace {}", path.display()),
                    source,
                };
                let file = File::open(&path).map_err(enter)?;
                // SAFETY: setns on an fd we own; CLONE_NEWNET only affects
                // this (helper) thread.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(enter(std::io::Error::last_os_error()));
                }
                drop(file);
                f()
            })
            .map_err(|source| Error::Io {
                what: format!("starting a thread for namespace {ns}"),
                source,
            })?;
        h.join().unwrap_or_else(|_| {
            Err(Error::Io {
                what: format!("configuring namespace {ns}"),
                source: std::io::Error::other("helper thread panicked"),
            })
        })
    })
}

/// Everything one namespace needs set up from inside it, in the order it
/// is applied.
#[derive(Debug, Default)]
struct NsSetup {
    ns: String,
    /// `(key, value)` as `sysctl -w key=value` takes them (`net.ipv4.…`).
    sysctls: Vec<(&'static str, &'static str)>,
    /// Devices to bring up (`ip link set DEV up`).
    up: Vec<String>,
    /// Devices to turn TSO, GSO and GRO off on (`ethtool -K DEV tso off gso
    /// off gro off`).
    no_offloads: Vec<String>,
    /// `ip addr add ADDR/LEN dev DEV`.
    addrs: Vec<(String, Ipv4Addr, u8)>,
    /// `ip route add default via GW`.
    gateway: Option<Ipv4Addr>,
}

impl NsSetup {
    fn new(ns: &str) -> Self {
        NsSetup {
            ns: ns.to_string(),
            ..Default::default()
        }
    }

    fn apply(&self) -> Result<()> {
        in_netns(&self.ns, || self.apply_here())
    }

    /// The body of [`apply`](Self::apply), on the thread inside the namespace.
    fn apply_here(&self) -> Result<()> {
        let err = |what: String| {
            let ns = &self.ns;
            move |source| Error::Io {
                what: format!("namespace {ns}: {what}"),
                source,
            }
        };
        for &(key, value) in &self.sysctls {
            // Opened by this thread, so resolved in its namespace.
            let path = format!("/proc/sys/{}", key.replace('.', "/"));
            std::fs::write(&path, value).map_err(err(format!("setting {key}={value}")))?;
        }
        let sock = IfSock::new().map_err(err("creating an AF_INET socket".into()))?;
        let mut rtnl = Rtnl::new().map_err(err("creating a NETLINK_ROUTE socket".into()))?;
        let index = |dev: &str| sock.ifindex(dev).map_err(err(format!("looking up {dev}")));
        for dev in &self.up {
            rtnl.link_up(index(dev)?)
                .map_err(err(format!("setting {dev} up (RTM_NEWLINK)")))?;
        }
        for dev in &self.no_offloads {
            sock.features_off(dev, &NO_OFFLOADS).map_err(err(format!(
                "turning tso, gso and gro off on {dev} (SIOCETHTOOL)"
            )))?;
        }
        for (dev, addr, len) in &self.addrs {
            rtnl.addr_add(index(dev)?, *addr, *len)
                .map_err(err(format!("adding {addr}/{len} to {dev} (RTM_NEWADDR)")))?;
        }
        if let Some(gw) = self.gateway {
            rtnl.default_route(gw)
                .map_err(err(format!("adding default route via {gw} (RTM_NEWROUTE)")))?;
        }
        Ok(())
    }
}

/// Commands and string set of `<linux/ethtool.h>` used by
/// [`IfSock::features_off`].
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// The features `ethtool -K DEV tso off gso off gro off` switches off: its
/// legacy `tso`, `gso` and `gro` flags stand for these name patterns (`*`:
/// any run of characters). Matching by name, as ethtool does, also covers
/// TSO variants newer than the legacy `ETHTOOL_STSO` mask (6.18's
/// `tx-tcp-accecn-segmentation`).
const NO_OFFLOADS: [&str; 3] = ["tx-tcp*-segmentation", "tx-generic-segmentation", "rx-gro"];

/// `name` matches `pattern`, which holds at most one `*`.
fn feature_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        Some((pre, post)) => {
            name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
        None => name == pattern,
    }
}

/// An AF_INET datagram socket: the handle for interface ioctls in the
/// namespace of the thread that created it.
struct IfSock(OwnedFd);

impl IfSock {
    fn new() -> std::io::Result<Self> {
        // SAFETY: plain socket(2); the fd is owned right away.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh fd nobody else owns.
        Ok(IfSock(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ifreq(dev: &str) -> std::io::Result<libc::ifreq> {
        if dev.is_empty() || dev.len() >= libc::IFNAMSIZ || dev.contains('\0') {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bad interface name {dev:?}"),
            ));
        }
        // SAFETY: ifreq is plain data (a name and a union of integers,
        // addresses and a pointer); all zeros is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, &b) in ifr.ifr_name.iter_mut().zip(dev.as_bytes()) {
            *d = b as libc::c_char;
        }
        Ok(ifr)
    }

    fn ioctl(&self, req: libc::c_ulong, ifr: &mut libc::ifreq) -> std::io::Result<()> {
        // SAFETY: `req` is an ifreq-taking ioctl and `ifr` outlives the call
        // (as does anything its union points to: callers keep it alive).
        if unsafe { libc::ioctl(self.0.as_raw_fd(), req as _, ifr as *mut libc::ifreq) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// `SIOCGIFINDEX`.
    fn ifindex(&self, dev: &str) -> std::io::Result<i32> {
        let mut ifr = Self::ifreq(dev)?;
        self.ioctl(libc::SIOCGIFINDEX, &mut ifr)?;
        // SAFETY: SIOCGIFINDEX filled in the ifindex member.
        Ok(unsafe { ifr.ifr_ifru.ifru_ifindex })
    }

    /// `SIOCETHTOOL` with the request at `data` (a `struct ethtool_*`
    /// whose first `u32` is the command); returns the ioctl's non-negative
    /// result.
    fn ethtool(&self, dev: &str, data: *mut libc::c_void) -> std::io::Result<i32> {
        let mut ifr = Self::ifreq(dev)?;
        ifr.ifr_ifru.ifru_data = data.cast();
        // SAFETY: SIOCETHTOOL reads/writes the request `data` points to,
        // which the caller keeps alive and sizes for its command.
        let r = unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SIOCETHTOOL as _,
                &mut ifr as *mut libc::ifreq,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(r)
    }

    /// The device's feature names, indexed by feature bit
    /// (`ETHTOOL_GSSET_INFO` + `ETHTOOL_GSTRINGS` of `ETH_SS_FEATURES`).
    fn feature_names(&self, dev: &str) -> std::io::Result<Vec<String>> {
        /// `struct ethtool_sset_info` with room for one count.
        #[repr(C)]
        struct SsetInfo {
            cmd: u32,
            reserved: u32,
            sset_mask: u64,
            count: u32,
        }
        let mut info = SsetInfo {
            cmd: ETHTOOL_GSSET_INFO,
            reserved: 0,
            sset_mask: 1 << ETH_SS_FEATURES,
            count: 0,
        };
        self.ethtool(dev, (&mut info as *mut SsetInfo).cast())?;
        if info.sset_mask & (1 << ETH_SS_FEATURES) == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "no feature names (ETH_SS_FEATURES)",
            ));
        }
        let n = info.count as usize;
        // struct ethtool_gstrings { u32 cmd, string_set, len; u8 data[len * 32]; }
        let mut buf = vec![0u32; 3 + n * ETH_GSTRING_LEN / 4];
        buf[..3].copy_from_slice(&[ETHTOOL_GSTRINGS, ETH_SS_FEATURES, n as u32]);
        self.ethtool(dev, buf.as_mut_ptr().cast())?;
        let bytes: Vec<u8> = buf[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(bytes
            .chunks(ETH_GSTRING_LEN)
            .map(|c| {
                let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                String::from_utf8_lossy(&c[..end]).into_owned()
            })
            .collect())
    }

    /// Switches off every feature whose name matches one of `patterns`
    /// (`ETHTOOL_SFEATURES`, as `ethtool -K` does). Features the device
    /// cannot change (`[fixed]`) stay as they are, as with ethtool.
    fn features_off(&self, dev: &str, patterns: &[&str]) -> std::io::Result<()> {
        let names = self.feature_names(dev)?;
        // struct ethtool_sfeatures { u32 cmd, size;
        //     struct { u32 valid, requested; } features[size]; }
        let words = names.len().div_ceil(32);
        let mut req = vec![0u32; 2 + 2 * words];
        req[0] = ETHTOOL_SFEATURES;
        req[1] = words as u32;
        let mut any = false;
        for (bit, name) in names.iter().enumerate() {
            if patterns.iter().any(|p| feature_matches(p, name)) {
                req[2 + 2 * (bit / 32)] |= 1 << (bit % 32); // valid; requested: 0
                any = true;
            }
        }
        if !any {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no feature named like {}", patterns.join(", ")),
            ));
        }
        self.ethtool(dev, req.as_mut_ptr().cast()).map(|_| ())
    }
}

/// Netlink bits of `<linux/netlink.h>`, `<linux/if_addr.h>`,
/// `<linux/rtnetlink.h>` used by [`Rtnl`].
const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_GATEWAY: u16 = 5;

/// A minimal rtnetlink client for the calling thread's namespace: one
/// request at a time, each acknowledged; the messages are the ones `ip`
/// sends for `link set DEV up`, `addr add A/N dev DEV` and
/// `route add default via GW`.
struct Rtnl {
    fd: OwnedFd,
    seq: u32,
}

impl Rtnl {
    fn new() -> std::io::Result<Self> {
        // SAFETY: plain socket(2); the fd is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh fd nobody else owns.
        Ok(Rtnl {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            seq: 0,
        })
    }

    /// Sends `payload` (the message body after `struct nlmsghdr`) as a
    /// request of type `ty` with `NLM_F_ACK` and waits for the kernel's
    /// answer: `Ok` for a zero error, the errno otherwise.
    fn request(&mut self, ty: u16, flags: u16, payload: &[u8]) -> std::io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let len = NLMSG_HDRLEN + payload.len();
        let mut msg = Vec::with_capacity(len);
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&ty.to_ne_bytes());
        msg.extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        msg.extend_from_slice(&self.seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
        msg.extend_from_slice(payload);
        // SAFETY: sockaddr_nl is plain data; zero is "the kernel".
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let fd = self.fd.as_raw_fd();
        // SAFETY: sendto from a live buffer to a sockaddr of the size given.
        let n = unsafe {
            libc::sendto(
                fd,
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&kernel as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let u32_at = |b: &[u8], o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: recv into a live buffer of the length given.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let b = &buf[..n as usize];
            let mut off = 0;
            while off + NLMSG_HDRLEN <= b.len() {
                let mlen = u32_at(b, off) as usize;
                if mlen < NLMSG_HDRLEN || off + mlen > b.len() {
                    return Err(bad("malformed netlink answer"));
                }
                let mty = u16::from_ne_bytes([b[off + 4], b[off + 5]]);
                let mseq = u32_at(b, off + 8);
                if mty == NLMSG_ERROR && mseq == self.seq {
                    // struct nlmsgerr { int error; struct nlmsghdr msg; … }
                    if mlen < NLMSG_HDRLEN + 4 {
                        return Err(bad("truncated netlink error message"));
                    }
                    let errno = u32_at(b, off + NLMSG_HDRLEN) as i32;
                    return match errno {
                        0 => Ok(()),
                        e => Err(std::io::Error::from_raw_os_error(-e)),
                    };
                }
                off += mlen.next_multiple_of(4);
            }
        }
    }

    /// Appends a `struct rtattr` (4-byte aligned).
    fn attr(buf: &mut Vec<u8>, ty: u16, data: &[u8]) {
        buf.extend_from_slice(&(4 + data.len() as u16).to_ne_bytes());
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(data);
        buf.resize(buf.len().next_multiple_of(4), 0);
    }

    /// `ip link set DEV up`: RTM_NEWLINK changing only IFF_UP.
    fn link_up(&mut self, index: i32) -> std::io::Result<()> {
        let up = libc::IFF_UP as u32;
        // struct ifinfomsg { family, pad; u16 type; i32 index; u32 flags, change; }
        let mut p = vec![libc::AF_UNSPEC as u8, 0, 0, 0];
        p.extend_from_slice(&index.to_ne_bytes());
        p.extend_from_slice(&up.to_ne_bytes());
        p.extend_from_slice(&up.to_ne_bytes());
        self.request(libc::RTM_NEWLINK, 0, &p)
    }

    /// `ip addr add ADDR/LEN dev DEV`.
    fn addr_add(&mut self, index: i32, addr: Ipv4Addr, len: u8) -> std::io::Result<()> {
        // struct ifaddrmsg { family, prefixlen, flags, scope; u32 index; }
        let mut p = vec![libc::AF_INET as u8, len, 0, libc::RT_SCOPE_UNIVERSE];
        p.extend_from_slice(&(index as u32).to_ne_bytes());
        Self::attr(&mut p, IFA_LOCAL, &addr.octets());
        Self::attr(&mut p, IFA_ADDRESS, &addr.octets());
        self.request(libc::RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &p)
    }

    /// `ip route add default via GW` (main table).
    fn default_route(&mut self, gw: Ipv4Addr) -> std::io::Result<()> {
        // struct rtmsg { family, dst_len, src_len, tos, table, protocol,
        //                scope, type; u32 flags; }
        let mut p = vec![
            libc::AF_INET as u8,
            0,
            0,
            0,
            libc::RT_TABLE_MAIN,
            libc::RTPROT_BOOT,
            libc::RT_SCOPE_UNIVERSE,
            libc::RTN_UNICAST,
        ];
        p.extend_from_slice(&0u32.to_ne_bytes());
        Self::attr(&mut p, RTA_GATEWAY, &gw.octets());
        self.request(libc::RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &p)
    }
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
    /// fq_codel child of tbf, `limit = ceil(buffer_bytes / (mtu + 14))` packets.
    FqCodel,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SenderConfig {
    /// Base round-trip time of this sender's path (zero: no netem at all).
    pub rtt: Duration,
    /// On/Off gate of this sender host (None: always On).
    pub gate: Option<Gate>,
}

/// A sender host's On/Off schedule: its link carries packets (both ways)
/// only during the first `on` of every `on + off`, cycles aligned to
/// CLOCK_TAI multiples of `on + off` (taprio base-time 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gate {
    pub on: Duration,
    pub off: Duration,
}

impl Gate {
    pub fn cycle(&self) -> Duration {
        self.on + self.off
    }

    /// Whether CLOCK_TAI time `tai_ns` falls in an On window.
    pub fn is_on_at(&self, tai_ns: u64) -> bool {
        let cycle = self.cycle().as_nanos() as u64;
        cycle == 0 || ((tai_ns % cycle) as u128) < self.on.as_nanos()
    }

    /// The `taprio` root of `dev` (handle `100:`): one traffic class on
    /// queue 0, gate open for `on`, closed for `off`, TAI clock.
    fn taprio_line(&self, dev: &str) -> String {
        format!(
            "qdisc add dev {dev} root handle {GATE_HANDLE}: taprio num_tc 1 \
             map 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 queues 1@0 base-time 0 \
             sched-entry S 01 {} sched-entry S 00 {} clockid CLOCK_TAI",
            self.on.as_nanos(),
            self.off.as_nanos()
        )
    }
}

/// Handle of a gate's taprio root; its one queue is class `100:1`.
const GATE_HANDLE: u32 = 100;

/// MAC addresses of gated sender `i`'s link: (sender end, router end).
fn gate_macs(i: usize) -> (String, String) {
    (
        format!("02:cc:00:00:{:02x}:01", i as u8),
        format!("02:cc:00:00:{:02x}:02", i as u8),
    )
}

/// The router's ifb device carrying gated sender `i`'s base RTT.
fn gate_ifb_dev(i: usize) -> String {
    format!("ifbg{i}")
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
        self.senders = rtts
            .iter()
            .map(|&rtt| SenderConfig { rtt, gate: None })
            .collect();
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
        for (i, s) in self.senders.iter().enumerate() {
            if let Some(g) = s.gate {
                if g.on.is_zero() || g.off.is_zero() {
                    return Err(Error::Config(format!(
                        "sender {i}: gate on {:?} / off {:?}: both must be above 0",
                        g.on, g.off
                    )));
                }
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
    /// Namespaces of this testbed in creation order, recorded (and in the
    /// cleanup registry) before the batch that creates them: after a failed
    /// build some may not exist, which teardown tolerates.
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

/// The ifb device in the receiver namespace that carries random loss.
const IFB_DEV: &str = "ifb0";

/// Runs `tc -n NS -batch -` with `lines` on a scoped thread, so that it
/// overlaps with other work (namespace set-up, another namespace's `tc`).
fn spawn_tc_batch<'scope, 'env>(
    scope: &'scope thread::Scope<'scope, 'env>,
    ns: &'env str,
    lines: &'env [String],
) -> Result<thread::ScopedJoinHandle<'scope, Result<Output>>> {
    thread::Builder::new()
        .name("ccctl-tc".into())
        .spawn_scoped(scope, move || run_batch("tc", &["-n", ns], lines))
        .map_err(|source| Error::Io {
            what: format!("starting a thread for `tc -n {ns} -batch -`"),
            source,
        })
}

/// `ip -batch` line creating a veth pair straight into its two namespaces
/// (MTU set on both ends; they are brought up from inside, since the peer
/// of a pair cannot be created up).
fn veth_line(ns_a: &str, dev_a: &str, ns_b: &str, dev_b: &str, mtu: u32) -> String {
    format!(
        "link add {dev_a} mtu {mtu} netns {ns_a} type veth peer name {dev_b} mtu {mtu} netns {ns_b}"
    )
}

/// The receiver's `tc` script for random loss `p`: `eth0` ingress redirected
/// to the ifb device, whose root netem drops.
fn loss_qdiscs(p: f64) -> Vec<String> {
    vec![
        format!(
            "qdisc add dev {IFB_DEV} root netem loss {}% limit {NETEM_LIMIT}",
            p * 100.0
        ),
        format!("qdisc add dev {RECEIVER_DEV} handle ffff: ingress"),
        format!(
            "filter add dev {RECEIVER_DEV} parent ffff: protocol all u32 match u32 0 0 \
             action mirred egress redirect dev {IFB_DEV}"
        ),
    ]
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
        if cfg.senders.iter().any(|s| s.gate.is_some()) && !taprio_available()? {
            return Err(Error::QdiscMissing {
                what: "a sender On/Off gate".into(),
                qdisc: "taprio".into(),
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
        tb.gate_neighbours()?;
        Ok(tb)
    }

    /// A gated link resolves no neighbour reliably (requests and replies
    /// wait at closed gates; connects failed with "No route to host" in one
    /// of four gated testbeds), so both ends get permanent entries.
    fn gate_neighbours(&self) -> Result<()> {
        for (i, s) in self.cfg.senders.iter().enumerate() {
            if s.gate.is_none() {
                continue;
            }
            let (sender_mac, router_mac) = gate_macs(i);
            let router_ip = Ipv4Addr::new(198, 18, i as u8 + 1, 2).to_string();
            let sender_ip = self.addr(Role::Sender(i)).to_string();
            let sender_ns = self.ns(Role::Sender(i));
            let router_ns = self.ns(Role::Router);
            let router_dev = router_sender_dev(i);
            for (ns, ip, mac, dev) in [
                (&sender_ns, &router_ip, &router_mac, SENDER_DEV),
                (&router_ns, &sender_ip, &sender_mac, router_dev.as_str()),
            ] {
                run(Command::new("ip").args([
                    "-n",
                    ns,
                    "neigh",
                    "replace",
                    ip,
                    "lladdr",
                    mac,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ]))?;
            }
        }
        Ok(())
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

    /// Builds the dumbbell with at most three processes whatever the number
    /// of senders (spawns cost ~300 ms each in the TCG VM):
    ///
    /// 1. one `ip -batch -`: every namespace (`netns add`, i.e. a bind mount
    ///    under /run/netns), every veth pair (created straight into its two
    ///    namespaces, MTU set), the ifb device;
    /// 2. one `tc -n <router> -batch -` for the bottleneck and ACK-path
    ///    delays, and with random loss one `tc -n <receiver> -batch -`,
    ///    running concurrently with
    /// 3. a helper thread per namespace ([`NsSetup`]): sysctls, links up,
    ///    offloads off, addresses, default route.
    ///
    /// All names are in `created` (and the cleanup registry) before the
    /// batch runs, so a failure at any step tears down whatever exists.
    fn build(&mut self) -> Result<()> {
        let c = &self.cfg;
        let rt = self.ns(Role::Router);
        let rx = self.ns(Role::Receiver);
        let senders: Vec<String> = (0..c.senders.len())
            .map(|i| self.ns(Role::Sender(i)))
            .collect();
        let loss = c.loss.filter(|&p| p > 0.0);
        let mut all = vec![rt.clone(), rx.clone()];
        all.extend(senders.iter().cloned());

        let mut lines: Vec<String> = all.iter().map(|ns| format!("netns add {ns}")).collect();
        // Router <-> receiver, with the bottleneck on the router's egress.
        lines.push(veth_line(&rt, ROUTER_RX_DEV, &rx, RECEIVER_DEV, c.mtu));
        if loss.is_some() {
            lines.push(format!("link add {IFB_DEV} netns {rx} type ifb"));
        }
        for (i, s) in senders.iter().enumerate() {
            let mut line = veth_line(s, SENDER_DEV, &rt, &router_sender_dev(i), c.mtu);
            if c.senders[i].gate.is_some() {
                // Known addresses, for the static neighbours set below.
                let (a, b) = gate_macs(i);
                line = line
                    .replacen(" mtu ", &format!(" address {a} mtu "), 1)
                    .replacen(" peer name ", " peer ", 1)
                    .replacen(
                        &format!(" {} mtu ", router_sender_dev(i)),
                        &format!(" name {} address {b} mtu ", router_sender_dev(i)),
                        1,
                    );
            }
            lines.push(line);
        }
        for (i, s) in c.senders.iter().enumerate() {
            if s.gate.is_some() && !s.rtt.is_zero() {
                lines.push(format!("link add {} netns {rt} type ifb", gate_ifb_dev(i)));
            }
        }
        let rt_tc = self.router_qdiscs();
        let rx_tc = loss.map(loss_qdiscs);
        let gated: Vec<(String, Vec<String>)> = c
            .senders
            .iter()
            .zip(&senders)
            .filter_map(|(cfg, ns)| {
                cfg.gate
                    .map(|g| (ns.clone(), vec![g.taprio_line(SENDER_DEV)]))
            })
            .collect();
        let setups = self.ns_setups();

        self.created = all.clone();
        cleanup::create_netns(&all, || run_batch("ip", &[], &lines))?;

        thread::scope(|scope| {
            let rt_job = spawn_tc_batch(scope, &rt, &rt_tc)?;
            let rx_job = rx_tc
                .as_deref()
                .map(|l| spawn_tc_batch(scope, &rx, l))
                .transpose()?;
            let gate_jobs = gated
                .iter()
                .map(|(ns, l)| spawn_tc_batch(scope, ns, l))
                .collect::<Result<Vec<_>>>()?;
            let configured = setups.iter().try_for_each(NsSetup::apply);
            let join = |h: thread::ScopedJoinHandle<'_, Result<Output>>| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::Io {
                        what: "running `tc -batch -`".into(),
                        source: std::io::Error::other("thread panicked"),
                    })
                })
            };
            let rt_res = join(rt_job);
            let rx_res = rx_job.map(join).transpose();
            let gate_res: Result<Vec<_>> = gate_jobs.into_iter().map(join).collect();
            rt_res?;
            rx_res?;
            gate_res?;
            configured
        })
    }

    /// What every namespace gets from inside: fresh per-flow state (no
    /// cached ssthresh/RTT between runs), socket-buffer autotuning up to
    /// 64 MiB so large BDPs (1 Gbit/s x 200 ms = 25 MB) are never receive-
    /// window limited, loopback up; plus per role forwarding, links,
    /// offloads, addresses and routes.
    fn ns_setups(&self) -> Vec<NsSetup> {
        let c = &self.cfg;
        let base = |role: Role| {
            let mut s = NsSetup::new(&self.ns(role));
            s.sysctls = vec![
                ("net.ipv4.tcp_no_metrics_save", "1"),
                ("net.ipv4.tcp_rmem", "4096 131072 67108864"),
                ("net.ipv4.tcp_wmem", "4096 16384 67108864"),
            ];
            s.up.push("lo".into());
            s
        };
        let mut v = Vec::with_capacity(c.senders.len() + 2);

        let mut rt = base(Role::Router);
        rt.sysctls.push(("net.ipv4.ip_forward", "1"));
        let mut rt_devs = vec![(ROUTER_RX_DEV.to_string(), self.addr(Role::Router))];
        rt_devs.extend(
            (0..c.senders.len())
                .map(|i| (router_sender_dev(i), Ipv4Addr::new(198, 18, i as u8 + 1, 2))),
        );
        for (dev, addr) in rt_devs {
            rt.up.push(dev.clone());
            if c.disable_offloads {
                rt.no_offloads.push(dev.clone());
            }
            rt.addrs.push((dev, addr, 24));
        }
        for (i, s) in c.senders.iter().enumerate() {
            if s.gate.is_some() && !s.rtt.is_zero() {
                rt.up.push(gate_ifb_dev(i));
            }
        }
        v.push(rt);

        let mut rx = base(Role::Receiver);
        rx.up.push(RECEIVER_DEV.into());
        if c.loss.is_some_and(|p| p > 0.0) {
            rx.up.push(IFB_DEV.into());
        }
        if c.disable_offloads {
            rx.no_offloads.push(RECEIVER_DEV.into());
        }
        rx.addrs
            .push((RECEIVER_DEV.into(), self.addr(Role::Receiver), 24));
        rx.gateway = Some(self.addr(Role::Router));
        v.push(rx);

        for i in 0..c.senders.len() {
            let mut s = base(Role::Sender(i));
            s.up.push(SENDER_DEV.into());
            if c.disable_offloads {
                s.no_offloads.push(SENDER_DEV.into());
            }
            s.addrs
                .push((SENDER_DEV.into(), self.addr(Role::Sender(i)), 24));
            s.gateway = Some(Ipv4Addr::new(198, 18, i as u8 + 1, 2));
            v.push(s);
        }
        v
    }

    /// The router's `tc` script: the bottleneck on `to_rx` and, for each
    /// sender with a non-zero RTT, the whole base RTT on its ACK path
    /// (router -> sender egress).
    fn router_qdiscs(&self) -> Vec<String> {
        let c = &self.cfg;
        let mut lines = vec![format!(
            "qdisc add dev {ROUTER_RX_DEV} root handle 1: tbf rate {}bit burst {} limit {}",
            c.rate_bps,
            tbf_burst(c.rate_bps, c.mtu),
            c.buffer_bytes
        )];
        match c.aqm {
            Aqm::TailDrop => {}
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
                // The gate on the ACK path; the base RTT on the data path.
                Some(g) => {
                    lines.push(g.taprio_line(&dev));
                    if !s.rtt.is_zero() {
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
                }
                None if !s.rtt.is_zero() => lines.push(format!(
                    "qdisc add dev {dev} root handle 1: netem delay {}us limit {NETEM_LIMIT}",
                    s.rtt.as_micros()
                )),
                None => {}
            }
        }
        lines
    }

    /// Tears down explicitly, reporting the first error (Drop ignores them).
    pub fn destroy(mut self) -> Result<()> {
        self.teardown()
    }

    /// Kills the processes in all of this testbed's namespaces, then deletes
    /// them with one `ip -batch` (senders first, router last; names that
    /// were never created are skipped).
    fn teardown(&mut self) -> Result<()> {
        if self.created.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = self.created.drain(..).rev().collect();
        let res = cleanup::del_netns(&names);
        if let Err(e) = &res {
            tracing::warn!(prefix = %self.prefix, error = %e, "namespace teardown failed");
        }
        res
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
    fn offload_feature_patterns() {
        let off = |n: &str| NO_OFFLOADS.iter().any(|p| feature_matches(p, n));
        for n in [
            "tx-tcp-segmentation",
            "tx-tcp-ecn-segmentation",
            "tx-tcp-mangleid-segmentation",
            "tx-tcp6-segmentation",
            "tx-tcp-accecn-segmentation",
            "tx-generic-segmentation",
            "rx-gro",
        ] {
            assert!(off(n), "{n}");
        }
        for n in [
            "rx-gro-list",
            "rx-gro-hw",
            "tx-udp-segmentation",
            "tx-tcp",
            "rx-lro",
        ] {
            assert!(!off(n), "{n}");
        }
    }

    #[test]
    fn batch_failure_line() {
        let e = "Error: ...\nCommand failed -:3\n";
        assert_eq!(failed_batch_line(e), Some(3));
        assert_eq!(failed_batch_line("RTNETLINK answers: File exists"), None);
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
        let tb =
            Testbed::new(TestbedConfig::new(20_000_000, 100_000).with_rtts(&[Duration::ZERO; 3]))
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

        let prefix = format!("{}-", tb.prefix);
        let names: Vec<String> = roles.iter().map(|&r| tb.ns(r)).collect();
        tb.destroy().unwrap();
        let left: Vec<String> = list_netns()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "left after destroy: {left:?}");
        let live = cleanup::live();
        assert!(names.iter().all(|n| !live.contains(n)), "still registered");
    }

    /// The qdisc scripts where the kernel has netem (the VM; skipped on the
    /// host): ACK-path delay per sender, fq_codel under tbf, random loss via
    /// ifb on the receiver's ingress, all doing their job in a flow.
    #[test]
    fn netem_loss_and_fq_codel_in_place() {
        if !netem_available().unwrap() || !fq_codel_available().unwrap() {
            eprintln!("skipped: needs netem and fq_codel (run inside the VM)");
            return;
        }
        let rtt = Duration::from_millis(40);
        let tb = Testbed::new(
            TestbedConfig::new(20_000_000, 100_000)
                .with_rtts(&[rtt, Duration::ZERO])
                .with_loss(0.01)
                .with_aqm(Aqm::FqCodel),
        )
        .unwrap();
        let show = |role: Role, what: &[&str]| {
            let out = tb.exec(role, what).unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let rt = show(Role::Router, &["tc", "qdisc", "show"]);
        assert!(rt.contains("qdisc tbf 1: dev to_rx root"), "{rt}");
        assert!(
            rt.contains("qdisc fq_codel 10: dev to_rx parent 1:1"),
            "{rt}"
        );
        assert!(
            rt.contains("qdisc netem 1: dev to_s0 root") && rt.contains("delay 40ms"),
            "{rt}"
        );
        assert!(!rt.contains("netem 1: dev to_s1"), "{rt}"); // zero RTT: no netem
        let rx = show(Role::Receiver, &["tc", "qdisc", "show"]);
        assert!(
            rx.contains("dev ifb0 root") && rx.contains("loss 1%"),
            "{rx}"
        );
        assert!(rx.contains("qdisc ingress ffff: dev eth0"), "{rx}");
        let filter = show(
            Role::Receiver,
            &["tc", "filter", "show", "dev", "eth0", "parent", "ffff:"],
        );
        assert!(filter.contains("Redirect to device ifb0"), "{filter}");
        let ifb = show(Role::Receiver, &["ip", "-o", "link", "show", "ifb0"]);
        assert!(ifb.contains(",UP"), "{ifb}");

        let r = iperf::run_flow(&tb, &FlowSpec::new(0, "cubic", Duration::from_secs(3))).unwrap();
        eprintln!(
            "goodput {:.1} Mbit/s, retrans {}, min rtt {:?} us",
            r.goodput_bps / 1e6,
            r.retransmits,
            r.min_rtt_us
        );
        assert!(
            r.min_rtt_us.is_some_and(|us| us >= 40_000),
            "{:?}",
            r.min_rtt_us
        );
        assert!(r.retransmits > 0, "1% loss but no retransmission");
        tb.destroy().unwrap();
    }

    /// Builds without validating `cfg` (to make a step fail on purpose);
    /// returns the prefix too.
    fn build_unvalidated(cfg: TestbedConfig) -> (String, Result<Testbed>) {
        let prefix = next_prefix();
        let mut tb = Testbed {
            cfg,
            prefix: prefix.clone(),
            created: Vec::new(),
            next_port: AtomicU16::new(5201),
        };
        (prefix, tb.build().map(|()| tb))
    }

    fn assert_all_gone(prefix: &str) {
        let p = format!("{prefix}-");
        let left: Vec<String> = list_netns()
            .into_iter()
            .filter(|n| n.starts_with(&p))
            .collect();
        assert!(left.is_empty(), "left after a failed build: {left:?}");
        assert!(!cleanup::live().iter().any(|n| n.starts_with(&p)));
    }

    #[test]
    fn failed_ip_batch_names_its_line_and_tears_down() {
        let mut cfg = TestbedConfig::new(20_000_000, 100_000);
        cfg.mtu = 70_000; // no veth takes that
        let (prefix, r) = build_unvalidated(cfg);
        let e = r.unwrap_err();
        let msg = e.to_string();
        eprintln!("{msg}");
        assert!(
            msg.contains("ip -batch - (line 4: link add to_rx mtu 70000"),
            "{msg}"
        );
        assert_all_gone(&prefix);
    }

    #[test]
    fn failed_tc_batch_names_its_line_and_tears_down() {
        let mut cfg = TestbedConfig::new(20_000_000, 100_000);
        cfg.rate_bps = 0; // tc refuses "rate 0bit"
        let (prefix, r) = build_unvalidated(cfg);
        let msg = r.unwrap_err().to_string();
        eprintln!("{msg}");
        assert!(
            msg.contains(&format!("tc -n {prefix}-rt -batch -"))
                && msg.contains("(line 1: qdisc add dev to_rx root handle 1: tbf rate 0bit"),
            "{msg}"
        );
        assert_all_gone(&prefix);
    }

    #[test]
    fn failed_ns_setup_names_namespace_and_step() {
        let ns = ScratchNs::new().unwrap();
        let mut s = NsSetup::new(&ns.0);
        s.addrs
            .push(("nodev0".into(), Ipv4Addr::new(198, 18, 0, 1), 24));
        let msg = s.apply().unwrap_err().to_string();
        assert!(
            msg.contains(&format!("namespace {}: looking up nodev0", ns.0)),
            "{msg}"
        );
        let mut s = NsSetup::new(&ns.0);
        s.gateway = Some(Ipv4Addr::new(198, 18, 0, 1)); // unreachable: no address
        let msg = s.apply().unwrap_err().to_string();
        assert!(
            msg.contains("adding default route via 198.18.0.1 (RTM_NEWROUTE)"),
            "{msg}"
        );
        let missing = NsSetup::new("ccctl-no-such-namespace").apply();
        assert!(missing
            .unwrap_err()
            .to_string()
            .contains("entering network namespace /run/netns/ccctl-no-such-namespace"),);
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
