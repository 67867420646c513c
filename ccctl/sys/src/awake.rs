//! Keeps every CPU of this machine awake while a path runs or timing tests
//! run.
//!
//! On the cloud guests we test on, a CPU with nothing to run halts, and the
//! hypervisor can be slow to give it back when a timer or a packet wakes it:
//! the wait shows up as CPU steal, and as late pacing timers and a slow
//! emulated path in the tests. On 2026-11-29 (docs/notebook/
//! 2026-11-29-host-reordering-and-quiet-retakes.md) one lab run of a Cubic
//! flow read 26-39 % steal during such an episode, and 0.4-0.7 % with two
//! spinning threads at the lowest priority beside it; busy loops alone read
//! 0.6 %. So the userspace path ([`hold`], while an emulator runs) and the
//! timing phases of `cargo xtask test` ([`Awake`]) run one such thread per
//! CPU: the CPUs never halt, and any other thread (the tests, the path
//! emulator, softirqs) takes a CPU from them at once. `CCCTL_LET_CPUS_IDLE=1`
//! turns [`hold`] off.
//!
//! The threads belong to this process: however it ends (Ctrl-C, SIGKILL),
//! they end with it. `cargo xtask bench` never uses them (it reads the
//! machine's busy time). Never in a TCG guest: there a spinning vCPU costs
//! the host a whole CPU at normal priority (the VM's lab runs on the qdisc
//! path, which does not hold them).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Why the spinning threads could not start.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct AwakeError {
    pub what: String,
    #[source]
    pub source: std::io::Error,
}

/// The environment variable that lets the CPUs halt under [`hold`].
pub const LET_CPUS_IDLE_ENV: &str = "CCCTL_LET_CPUS_IDLE";

type Result<T> = std::result::Result<T, AwakeError>;

fn error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> AwakeError {
    let what = what.into();
    move |source| AwakeError { what, source }
}

/// The spinning threads' names begin with this (`awake-0`, `awake-1`, ...).
pub const THREAD_NAME_PREFIX: &str = "awake-";

/// One spinning `SCHED_IDLE` thread per CPU until dropped.
pub struct Awake {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Their kernel thread ids, to see them gone on drop.
    tids: Vec<i32>,
}

impl Awake {
    /// Starts the threads, each on its own CPU, and waits until every one
    /// has taken its policy (an error if the kernel refused one).
    pub fn start() -> Result<Awake> {
        let cpus = std::thread::available_parallelism()
            .map_err(error("counting the CPUs"))?
            .get();
        let stop = Arc::new(AtomicBool::new(false));
        let mut awake = Awake {
            stop: stop.clone(),
            threads: Vec::new(),
            tids: Vec::new(),
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for cpu in 0..cpus {
            let stop = stop.clone();
            let ready = ready_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("{THREAD_NAME_PREFIX}{cpu}"))
                .spawn(move || {
                    let set = lowest_priority_on(cpu);
                    let ok = set.is_ok();
                    let tid = rustix::thread::gettid().as_raw_nonzero().get();
                    let _ = ready.send(set.map(|()| tid));
                    if !ok {
                        return;
                    }
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
                .map_err(error("starting a spinning thread"))?;
            awake.threads.push(handle);
        }
        drop(ready_tx);
        for _ in 0..cpus {
            let tid = ready_rx.recv().map_err(|_| AwakeError {
                what: "a spinning thread ended before it started".into(),
                source: std::io::Error::other("no word from it"),
            })??;
            awake.tids.push(tid);
        }
        Ok(awake)
    }

    /// How many CPUs are kept awake.
    pub fn cpus(&self) -> usize {
        self.threads.len()
    }
}

impl Drop for Awake {
    /// Stops and joins the threads, then waits (at most a second) until the
    /// kernel has reaped them too: a join returns when a thread's tid is
    /// cleared, a moment before its `/proc/self/task` entry goes.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
        for tid in self.tids.drain(..) {
            let entry = format!("/proc/self/task/{tid}");
            while std::path::Path::new(&entry).exists() && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
}

/// How many spinning threads this process runs now (by their names in
/// `/proc/self/task`).
pub fn awake_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("comm"))
                        .is_ok_and(|c| c.starts_with(THREAD_NAME_PREFIX))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Holders of [`hold`] in this process, and the threads while any holds.
static HOLDERS: Mutex<(usize, Option<Awake>)> = Mutex::new((0, None));

/// While a returned [`AwakeHold`] lives, this process keeps every CPU awake
/// (one [`Awake`] shared by all holders), unless `CCCTL_LET_CPUS_IDLE=1`.
/// A refusal is logged and the caller runs on without them.
pub fn hold() -> AwakeHold {
    let mut held = HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
    if held.0 == 0 && !let_cpus_idle() {
        match Awake::start() {
            Ok(a) => {
                tracing::debug!(
                    cpus = a.cpus(),
                    "CPUs kept awake by lowest-priority threads"
                );
                held.1 = Some(a);
            }
            Err(e) => tracing::warn!("CPUs not kept awake: {e}"),
        }
    }
    held.0 += 1;
    AwakeHold { _private: () }
}

/// See [`hold`].
#[derive(Debug)]
pub struct AwakeHold {
    _private: (),
}

impl Drop for AwakeHold {
    fn drop(&mut self) {
        let mut held = HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
        held.0 = held.0.saturating_sub(1);
        if held.0 == 0 {
            held.1 = None;
        }
    }
}

/// Whether the CPUs may halt: `CCCTL_LET_CPUS_IDLE=1` (any value but 1, 0
/// or empty is named in a warning and ignored), or this is ccctl's VM
/// (`CCCTL_IN_VM=1`, a TCG guest).
pub fn let_cpus_idle() -> bool {
    if std::env::var_os("CCCTL_IN_VM").is_some_and(|v| v == "1") {
        return true;
    }
    match std::env::var(LET_CPUS_IDLE_ENV) {
        Ok(v) if v == "1" => true,
        Ok(v) if v.is_empty() || v == "0" => false,
        Ok(v) => {
            tracing::warn!(
                "{LET_CPUS_IDLE_ENV}={v:?} ignored: 1 lets the CPUs halt, 0 or unset keeps them awake"
            );
            false
        }
        Err(_) => false,
    }
}

/// Pins the calling thread to `cpu` and gives it `SCHED_IDLE`: it runs only
/// when nothing else on that CPU wants to.
fn lowest_priority_on(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it;
    // both calls read only the structures passed, for the calling thread (0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(error(format!("pinning a spinning thread to CPU {cpu}"))(
                std::io::Error::last_os_error(),
            ));
        }
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
            return Err(error("giving a spinning thread SCHED_IDLE")(
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every thread runs at SCHED_IDLE, one per CPU, and all are gone when
    /// the drop returns.
    #[test]
    fn one_idle_thread_per_cpu_and_none_after_drop() {
        let awake = Awake::start().expect("start");
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(awake.cpus(), cpus);
        assert_eq!(awake_threads(), cpus, "one awake-* thread per CPU");
        let policies: Vec<String> = awake.tids.iter().map(|&t| policy(t)).collect();
        assert!(
            policies.iter().all(|p| p == "5"),
            "every awake-* thread at policy 5 (SCHED_IDLE): {policies:?}"
        );
        drop(awake);
        assert_eq!(awake_threads(), 0, "none after drop");
        // Shared by holders: started by the first, ended with the last.
        let (a, b) = (hold(), hold());
        assert_eq!(awake_threads(), cpus);
        drop(a);
        assert_eq!(awake_threads(), cpus, "b still holds");
        drop(b);
        assert_eq!(awake_threads(), 0, "none after the last");
    }

    /// The scheduling policy of this process's thread `tid` (`sched`).
    fn policy(tid: i32) -> String {
        let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).unwrap();
        let line = sched.lines().find(|l| l.starts_with("policy")).unwrap();
        line.rsplit(':').next().unwrap().trim().to_string()
    }
}
