//! Teardown of every live namespace on SIGINT/SIGTERM/SIGHUP.
//!
//! Every namespace the testbed creates is registered in [`LIVE`] before the
//! `ip -batch` that creates it runs, with the lock held until that batch is
//! done (so a cleanup never misses one that exists), and unregistered once
//! it no longer exists. The first namespaces created install, once,
//! handlers for SIGINT, SIGTERM and SIGHUP *whose current disposition is
//! `SIG_DFL`*. The handler only writes the signal number to a
//! self-pipe; a dedicated thread reads it, tears down every registered
//! namespace exactly as `Drop` does (kill the processes inside, then delete),
//! refuses further namespaces, and re-raises the signal with the default
//! disposition, so the process still dies "killed by SIGINT" (or, should
//! that somehow not kill it, `_exit(128 + sig)`).
//!
//! A signal that is ignored (`SIG_IGN`, e.g. SIGHUP under `nohup`) or already
//! has a handler (the embedding program's own) is left alone: such a program
//! must call [`cleanup_all`] itself, e.g. from its main loop once its handler
//! has recorded the signal, or before it exits.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::thread;
use std::time::Duration;

use super::{destroy_netns_all, netns_exists, Error, Result};

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Namespaces of this process that exist (or may exist) right now.
static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
/// Set by the signal thread: no namespace may be created any more.
static TERMINATING: AtomicBool = AtomicBool::new(false);
/// Write end of the self-pipe (-1 until installed).
static PIPE_W: AtomicI32 = AtomicI32::new(-1);
/// Pid that installed the handlers (a forked child before exec must not
/// write to our pipe).
static OWNER: AtomicI32 = AtomicI32::new(0);

pub(super) fn live() -> MutexGuard<'static, BTreeSet<String>> {
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
/// first namespace was created; such a program must call `cleanup_all`
/// itself when it is interrupted (not from the signal handler: it runs `ip`).
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

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe calls here: getpid, write; errno is preserved.
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe {
        let errno = *libc::__errno_location();
        let fd = PIPE_W.load(Ordering::SeqCst);
        if fd >= 0 && libc::getpid() == OWNER.load(Ordering::SeqCst) {
            let b = sig as u8;
            libc::write(fd, &b as *const u8 as *const libc::c_void, 1);
        }
        *libc::__errno_location() = errno;
    }
}

/// Installs the handlers (once per process; see the module docs).
fn install_signal_cleanup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two fds into `fds`; fcntl on the fd just made.
        unsafe {
            if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                tracing::warn!(
                    error = %std::io::Error::last_os_error(),
                    "no signal cleanup for testbed namespaces: pipe2 failed"
                );
                return;
            }
            let fl = libc::fcntl(fds[1], libc::F_GETFL);
            libc::fcntl(fds[1], libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let rd = fds[0];
        if let Err(e) = thread::Builder::new()
            .name("ccctl-testbed-signals".into())
            .spawn(move || signal_thread(rd))
        {
            tracing::warn!(error = %e, "no signal cleanup for testbed namespaces");
            return;
        }
        OWNER.store(std::process::id() as i32, Ordering::SeqCst);
        PIPE_W.store(fds[1], Ordering::SeqCst);
        for sig in SIGNALS {
            // SAFETY: querying, then setting, a disposition with a handler
            // that is async-signal-safe.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    continue;
                }
                if old.sa_sigaction != libc::SIG_DFL {
                    tracing::debug!(
                        sig,
                        "signal already handled or ignored: leaving it; call testbed::cleanup_all()"
                    );
                    continue;
                }
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                sa.sa_flags = libc::SA_RESTART;
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
}

fn signal_thread(rd: libc::c_int) {
    // SAFETY: signal-mask and fd calls on this thread / our own pipe.
    unsafe {
        // The creating thread may have had them blocked (loader does that);
        // this thread must be able to take, and re-raise, them.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        let sig = loop {
            let mut b = 0u8;
            let n = libc::read(rd, &mut b as *mut u8 as *mut libc::c_void, 1);
            if n == 1 {
                break b as libc::c_int;
            }
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            return;
        };
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
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
        libc::raise(sig);
        thread::sleep(Duration::from_millis(200));
        libc::_exit(128 + sig);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        destroy_netns, ip, list_netns, netns_pids, next_prefix, Role, Testbed, TestbedConfig,
    };
    use super::*;
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc;
    use std::time::Instant;

    const CHILD_ENV: &str = "CCCTL_TESTBED_SIGNAL_CHILD";
    const CHILD_TEST: &str = "testbed::cleanup::tests::signal_child";

    use crate::testbed::host_tests::alive_not_zombie;

    /// Not a test by itself: the body of the child process of
    /// `signal_tears_down_everything` (a no-op unless `CHILD_ENV` is set).
    /// Builds a testbed, starts a daemonised iperf3 server in the receiver
    /// and a `sleep` child in the sender, reports the pids, then blocks.
    #[test]
    fn signal_child() {
        if std::env::var_os(CHILD_ENV).is_none() {
            return;
        }
        let tb = Testbed::new(TestbedConfig::new(10_000_000, 100_000)).unwrap();
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
            let prefix = format!("{}{}-", super::super::NS_PREFIX, self.0.id());
            for ns in list_netns().into_iter().filter(|n| n.starts_with(&prefix)) {
                let _ = destroy_netns(&ns);
            }
        }
    }

    fn run_and_signal(sig: libc::c_int) {
        let exe = std::env::current_exe().unwrap();
        let child = Command::new(exe)
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
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
        let prefix = format!("{}{pid}-", super::super::NS_PREFIX);
        let mine: Vec<String> = list_netns()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert!(mine.len() >= 3, "child namespaces: {mine:?}");
        for &p in &pids {
            assert!(alive_not_zombie(p), "pid {p} not running before the signal");
        }

        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, sig) };
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
        run_and_signal(libc::SIGINT);
        run_and_signal(libc::SIGTERM);
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
