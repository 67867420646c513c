//! Namespace lifecycle: names, creation and deletion, the registry of live
//! namespaces, the sweep of stale ones, and teardown on a signal.
//!
//! Namespace names are `ccctl-<pid>-<seq>-<role>`; [`sweep_stale`] removes
//! namespaces left behind by dead processes.
//!
//! Every namespace the testbed creates is registered in [`LIVE`] before the
//! `ip -batch` that creates it runs, with the lock held until that batch is
//! done (so a cleanup never misses one that exists), and unregistered once
//! it no longer exists. The first namespaces created start, once, a thread
//! that waits (through signal-hook's self-pipe, [`Signals`]) for SIGINT,
//! SIGTERM and SIGHUP, *for those of them whose disposition is still
//! `SIG_DFL`* and only if the program does not record ending signals itself
//! ([`ccctl_sys::signals::recording`]). On such a signal the thread tears
//! down every registered namespace exactly as `Drop` does (kill the
//! processes inside, then delete), refuses further namespaces, and re-raises
//! the signal with the default disposition, unblocked on its own thread, so
//! the process still dies "killed by SIGINT" (or, should that somehow not
//! kill it, aborts).
//!
//! A signal that is ignored (`SIG_IGN`, e.g. SIGHUP under `nohup`) or already
//! has a handler (the embedding program's own, or
//! [`ccctl_sys::signals::record_ending`]'s, even one registered after the
//! testbed's) is left to the program: such a program must call
//! [`cleanup_all`] itself, e.g. from its main loop once its handler has
//! recorded the signal, or before it exits.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, Once};
use std::thread;
use std::time::{Duration, Instant};

use ccctl_sys::signals::ENDING;
use rustix::io::Errno;
use rustix::process::{kill_process, test_kill_process, Pid, Signal};
use signal_hook::iterator::Signals;

use super::exec::run_batch;
use super::{Error, Result};

/// Where `ip netns add` puts namespaces (bind mounts of their nsfs inodes).
const NETNS_DIR: &str = "/run/netns";
/// Prefix of every namespace this module creates.
pub const NS_PREFIX: &str = "ccctl-";

// ---------------------------------------------------------------------------
// Names and what is inside

static SEQ: AtomicU64 = AtomicU64::new(0);

/// `ccctl-<pid>-<seq>`: a prefix no other live testbed uses.
pub(super) fn next_prefix() -> String {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{NS_PREFIX}{}-{seq}", std::process::id())
}

/// Names of all namespaces in /run/netns.
pub fn list_netns() -> Vec<String> {
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

/// Whether process `pid` exists (kill with signal 0: `EPERM` still means
/// it exists).
fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    Pid::from_raw(pid).is_some_and(|p| !matches!(test_kill_process(p), Err(Errno::SRCH)))
}

/// Where `ip netns add` bind-mounts namespace `ns`.
pub(super) fn netns_path(ns: &str) -> PathBuf {
    ccctl_sys::netns::named(ns)
}

pub(super) fn netns_exists(ns: &str) -> bool {
    netns_path(ns).exists()
}

/// Identity of a network namespace: `(st_dev, st_ino)` of its nsfs inode,
/// which both /run/netns/<name> (a bind mount of it) and /proc/<pid>/ns/net
/// of every process inside stat to.
pub type NsId = (u64, u64);

pub fn ns_id(path: &Path) -> Option<NsId> {
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
pub fn netns_pids(ns: &str) -> Vec<i32> {
    match ns_id(&netns_path(ns)) {
        Some(id) => pids_in(&[id]),
        None => Vec::new(),
    }
}

// ---------------------------------------------------------------------------
// The registry of live namespaces

/// Namespaces of this process that exist (or may exist) right now.
static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
/// Set by the signal thread: no namespace may be created any more.
static TERMINATING: AtomicBool = AtomicBool::new(false);

pub fn live() -> MutexGuard<'static, BTreeSet<String>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers `names`, then runs `create` (the batch that creates those
/// namespaces), all under the registry lock: a signal cleanup either ran
/// before (and creation is refused) or waits for `create` and then sees
/// every name. If `create` fails the names stay registered, as some of the
/// namespaces may exist by then; deleting the others is a quiet no-op.
pub(super) fn create_netns<T>(names: &[String], create: impl FnOnce() -> Result<T>) -> Result<T> {
    install_signal_cleanup();
    let mut live = live();
    if TERMINATING.load(Ordering::SeqCst) {
        return Err(Error::Io {
            what: format!("creating namespaces {}", names.join(" ")),
            source: std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "the process is terminating on a signal",
            ),
        });
    }
    live.extend(names.iter().cloned());
    create()
}

/// Destroys `names` (quietly for those already gone or never created) and
/// unregisters every one that no longer exists.
pub(super) fn del_netns(names: &[String]) -> Result<()> {
    let res = destroy_netns_all(names);
    let mut live = live();
    for n in names {
        if !netns_exists(n) {
            live.remove(n);
        }
    }
    res
}

/// Tears down every namespace this process has created and not yet deleted
/// (processes inside first); returns the names removed. Failures are logged
/// and the namespace stays registered. Safe to call concurrently with
/// [`Testbed`](super::Testbed)'s `Drop`; testbeds still alive afterwards
/// are unusable, and their `Drop` is a quiet no-op.
///
/// The testbed calls this itself on SIGINT/SIGTERM/SIGHUP unless the
/// program had its own handler (or `SIG_IGN`) for that signal when the
/// first namespace was created, or records ending signals through
/// [`ccctl_sys::signals::record_ending`] (from whenever it started); such a
/// program must call `cleanup_all` itself when it is interrupted (not from
/// a signal handler: it runs `ip`).
pub fn cleanup_all() -> Vec<String> {
    teardown_locked(&mut live())
}

fn teardown_locked(live: &mut BTreeSet<String>) -> Vec<String> {
    let names: Vec<String> = live.iter().rev().cloned().collect();
    if let Err(e) = destroy_netns_all(&names) {
        tracing::warn!(error = %e, "namespace cleanup failed");
    }
    let removed: Vec<String> = names.into_iter().filter(|n| !netns_exists(n)).collect();
    for n in &removed {
        live.remove(n);
    }
    removed
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
        for p in pids.iter().filter_map(|&p| Pid::from_raw(p)) {
            let _ = kill_process(p, Signal::KILL);
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
pub(super) fn destroy_netns(ns: &str) -> Result<()> {
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

// ---------------------------------------------------------------------------
// Teardown on a signal

/// Starts the signal thread (once per process; see the module docs) for
/// the ending signals still at their default disposition.
fn install_signal_cleanup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let sigs: Vec<i32> = ENDING
            .into_iter()
            .filter(|&sig| {
                let dfl = at_default_disposition(sig);
                if !dfl {
                    tracing::debug!(
                        sig,
                        "signal already handled or ignored: leaving it; call testbed::cleanup_all()"
                    );
                }
                dfl
            })
            .collect();
        if sigs.is_empty() {
            return;
        }
        // The thread registers the handlers itself: if it cannot start,
        // nothing is registered and the signals keep their default action.
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let spawned = thread::Builder::new()
            .name("ccctl-testbed-signals".into())
            .spawn(move || match Signals::new(&sigs) {
                Ok(signals) => {
                    let _ = ready_tx.send(Ok(()));
                    signal_thread(signals);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            });
        let ready = match spawned {
            Ok(_) => ready_rx
                .recv()
                .unwrap_or_else(|_| Err(std::io::Error::other("signal thread ended"))),
            Err(e) => Err(e),
        };
        if let Err(e) = ready {
            tracing::warn!(error = %e, "no signal cleanup for testbed namespaces");
        }
    });
}

/// Whether `sig` is at `SIG_DFL`: neither ignored nor handled by the
/// program (which [`ccctl_sys::signals::recording`] also tells without
/// asking the kernel).
fn at_default_disposition(sig: i32) -> bool {
    if ccctl_sys::signals::recording() {
        return false;
    }
    // signal-hook registers handlers but has no query; rustix has none
    // either outside its unsafe runtime module.
    // SAFETY: sigaction with a null new action only reads the current
    // disposition into `old`, a zeroed plain-data struct we own.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_DFL
    }
}

/// Waits for an ending signal, tears everything down and dies of it.
fn signal_thread(mut signals: Signals) {
    for sig in signals.forever() {
        if ccctl_sys::signals::recording() {
            // The program started recording ending signals after the
            // testbed registered: winding down is its call.
            tracing::debug!(sig, "ending signal left to the program's own handling");
            continue;
        }
        let removed = {
            let mut live = live();
            TERMINATING.store(true, Ordering::SeqCst);
            // Keep the lock: no namespace can be created from here on.
            let removed = teardown_locked(&mut live);
            std::mem::forget(live);
            removed
        };
        tracing::info!(
            sig,
            namespaces = removed.len(),
            "testbed torn down on signal"
        );
        // Default disposition back, the signal unblocked on this thread (the
        // thread that created the first namespace may have had it blocked,
        // as the loader does) and raised: the process dies of `sig`; if it
        // somehow survives, this aborts.
        let _ = signal_hook::low_level::emulate_default_handler(sig);
    }
}

/// A scratch namespace with a veth pair, deleted on drop.
pub(super) struct ScratchNs(pub(super) String);

impl ScratchNs {
    pub(super) fn new() -> Result<Self> {
        // Built before the namespace exists: Drop deletes whatever a failed
        // batch left behind (and spawns nothing if that is nothing).
        let s = ScratchNs(format!("{}-probe", next_prefix()));
        let ns = &s.0;
        let names = [ns.clone()];
        create_netns(&names, || {
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
        let _ = del_netns(std::slice::from_ref(&self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::super::exec::ip;
    use super::super::{Role, Testbed, TestbedConfig};
    use super::*;
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc;
    use std::time::Instant;

    const CHILD_ENV: &str = "CCCTL_TESTBED_SIGNAL_CHILD";
    const CHILD_TEST: &str = "netns::tests::signal_child";

    use crate::host_tests::alive_not_zombie;

    /// Not a test by itself: the body of the child process of
    /// `signal_tears_down_everything` and
    /// `a_program_recording_ending_signals_keeps_them` (a no-op unless
    /// `CHILD_ENV` is set). Builds a testbed, starts a daemonised iperf3
    /// server in the receiver and a `sleep` child in the sender, reports the
    /// pids, then blocks. With `CHILD_ENV` set to `record-before` or
    /// `record-after` the child records ending signals itself
    /// ([`ccctl_sys::signals::record_ending`]) before or after the testbed
    /// is built.
    #[test]
    fn signal_child() {
        let Some(mode) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        if mode == "record-before" {
            ccctl_sys::signals::record_ending();
        }
        let tb = Testbed::new(TestbedConfig::new(10_000_000, 100_000)).unwrap();
        if mode == "record-after" {
            ccctl_sys::signals::record_ending();
        }
        tb.exec(
            Role::Receiver,
            &["iperf3", "-s", "-D", "-p", "5201", "-B", "198.18.0.2"],
        )
        .unwrap();
        let _sleeper = tb
            .spawn_stdio(
                Role::Sender(0),
                &["sleep", "600"],
                Stdio::null(),
                Stdio::null(),
            )
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let pids = loop {
            let mut p = netns_pids(&tb.ns(Role::Receiver));
            p.extend(netns_pids(&tb.ns(Role::Sender(0))));
            if p.len() >= 2 || Instant::now() > deadline {
                break p;
            }
            thread::sleep(Duration::from_millis(50));
        };
        let pids: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
        println!("READY {}", pids.join(" "));
        loop {
            thread::sleep(Duration::from_secs(60));
        }
    }

    /// Kills the child and removes its namespaces if the test fails midway.
    struct ChildGuard(Child);

    impl Drop for ChildGuard {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
            let prefix = format!("{}{}-", NS_PREFIX, self.0.id());
            for ns in list_netns().into_iter().filter(|n| n.starts_with(&prefix)) {
                let _ = destroy_netns(&ns);
            }
        }
    }

    /// A `signal_child` started in `mode` and ready: its testbed built,
    /// its processes running.
    struct Started {
        guard: ChildGuard,
        pid: i32,
        /// The processes inside its namespaces.
        pids: Vec<i32>,
        /// `ccctl-<pid>-`: the prefix of its namespaces.
        prefix: String,
        stderr: thread::JoinHandle<String>,
    }

    fn start_child(mode: &str) -> Started {
        let exe = std::env::current_exe().unwrap();
        let child = Command::new(exe)
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, mode)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut guard = ChildGuard(child);
        let pid = guard.0.id() as i32;
        let stdout = guard.0.stdout.take().unwrap();
        let mut stderr = guard.0.stderr.take().unwrap();
        let err_thread = thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                // libtest's "test … " may precede it on the same line.
                if let Some((_, rest)) = line.split_once("READY ") {
                    let _ = tx.send(rest.to_string());
                }
            }
        });
        let ready = rx.recv_timeout(Duration::from_secs(120));
        let Ok(ready) = ready else {
            let _ = guard.0.kill();
            panic!("child never got ready: {}", err_thread.join().unwrap());
        };
        let pids: Vec<i32> = ready
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert!(pids.len() >= 2, "expected iperf3 and sleep pids: {pids:?}");
        let prefix = format!("{}{pid}-", NS_PREFIX);
        let mine: Vec<String> = list_netns()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert!(mine.len() >= 3, "child namespaces: {mine:?}");
        for &p in &pids {
            assert!(alive_not_zombie(p), "pid {p} not running before the signal");
        }
        Started {
            guard,
            pid,
            pids,
            prefix,
            stderr: err_thread,
        }
    }

    fn run_and_signal(signal: Signal) {
        let sig = signal.as_raw();
        let Started {
            mut guard,
            pid,
            pids,
            prefix,
            stderr: err_thread,
        } = start_child("1");
        kill_process(Pid::from_raw(pid).expect("child pid"), signal).expect("signal the child");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(st) = guard.0.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < deadline, "child ignored signal {sig}");
            thread::sleep(Duration::from_millis(20));
        };
        let err = err_thread.join().unwrap();
        assert_eq!(
            status.signal(),
            Some(sig),
            "child exit {status:?}, stderr: {err}"
        );
        let left: Vec<String> = list_netns()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert!(
            left.is_empty(),
            "namespaces survived signal {sig}: {left:?}"
        );
        // The daemonised iperf3 is reparented to init; give it a moment to be reaped.
        thread::sleep(Duration::from_millis(100));
        for p in pids {
            assert!(!alive_not_zombie(p), "pid {p} survived signal {sig}");
        }
    }

    #[test]
    fn signal_tears_down_everything() {
        run_and_signal(Signal::INT);
        run_and_signal(Signal::TERM);
    }

    /// A program that records ending signals itself, from before the
    /// testbed or only from after it, keeps them: SIGINT neither kills it
    /// nor tears its testbed down behind its back (it winds down itself,
    /// calling `cleanup_all`).
    #[test]
    fn a_program_recording_ending_signals_keeps_them() {
        for mode in ["record-before", "record-after"] {
            let mut c = start_child(mode);
            kill_process(Pid::from_raw(c.pid).expect("child pid"), Signal::INT)
                .expect("signal the child");
            // The teardown and the re-raise take well under a second on the
            // host (signal_tears_down_everything); wait three.
            thread::sleep(Duration::from_secs(3));
            let status = c.guard.0.try_wait().unwrap();
            assert!(status.is_none(), "{mode}: the child died: {status:?}");
            let left: Vec<String> = list_netns()
                .into_iter()
                .filter(|n| n.starts_with(&c.prefix))
                .collect();
            assert!(left.len() >= 3, "{mode}: namespaces torn down: {left:?}");
            for &p in &c.pids {
                assert!(alive_not_zombie(p), "{mode}: pid {p} killed");
            }
            drop(c.guard); // kills the child, removes its namespaces
            let _ = c.stderr.join();
        }
    }

    #[test]
    fn owner_pid_parse() {
        assert_eq!(ns_owner_pid("ccctl-1234-0-rt"), Some(1234));
        assert_eq!(ns_owner_pid("ccctl-1234-7-probe"), Some(1234));
        assert_eq!(ns_owner_pid("ccctl-x-0-rt"), None);
        assert_eq!(ns_owner_pid("other-1234"), None);
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
    fn double_delete_is_quiet() {
        let name = format!("{}-dbl", next_prefix());
        let names = [name.clone()];
        create_netns(&names, || ip(&["netns", "add", &name])).unwrap();
        assert!(live().contains(&name));
        // The signal thread and a Drop racing on the same namespace.
        let a = {
            let n = name.clone();
            thread::spawn(move || destroy_netns(&n))
        };
        let b = destroy_netns(&name);
        let a = a.join().unwrap();
        assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
        del_netns(&names).unwrap();
        assert!(!live().contains(&name));
        assert!(!list_netns().contains(&name));
    }
}
