//! Keeps every CPU of this machine from halting while a path runs or timing
//! tests run.
//!
//! On the cloud guests we test on, a CPU with nothing to run halts, and the
//! hypervisor can be slow to give it back when a timer or a packet wakes it:
//! the wait shows up as CPU steal, and as late pacing timers and a slow
//! emulated path in the tests. On 2026-11-29 (docs/notebook/
//! 2026-11-29-cpus-kept-awake.md) one lab run of a Cubic flow read 24 %
//! steal and carried 68 % of its link during such an episode, and 1.0 % and
//! 97 % with the CPUs kept awake. So the userspace path ([`hold`], while an
//! emulator runs) and the timing phases of `cargo xtask test` ([`Awake`])
//! keep them awake, in the cheapest way the machine offers:
//!
//! - **Idle CPUs poll** ([`Awake::polling`]) where the cpuidle driver has a
//!   `POLL` state: a CPU latency request of 0 us, written to
//!   `/dev/cpu_dma_latency` and held open, makes every governor pick that
//!   state. An idle CPU spins in the kernel's idle loop with its polling flag
//!   set, so a wake-up needs no interrupt, and the kernel drops the request
//!   when the file closes, however the process ends.
//! - **Spinning threads** ([`Awake::spinning`]) elsewhere (no cpuidle driver:
//!   the idle loop halts whatever is requested): one thread per CPU at
//!   `SCHED_IDLE`, so any other thread takes the CPU from it at once. They
//!   belong to this process and end with it. They cost a CPU-bound loopback
//!   flow 15-25 % of its rate (a wake-up preempts a running thread);
//!   docs/notebook/2026-11-29-hour-turn-and-loopback-spinners.md.
//!
//! `CCCTL_LET_CPUS_IDLE=1` turns [`hold`] off. `cargo xtask bench` never
//! uses either (it reads the machine's busy time). Never in a TCG guest:
//! there a spinning vCPU costs the host a whole CPU at normal priority (the
//! VM's lab runs on the qdisc path, which does not hold them).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Why the CPUs could not be kept awake in the way asked.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct AwakeError {
    pub what: String,
    #[source]
    pub source: std::io::Error,
}

/// The environment variable that lets the CPUs halt under [`hold`].
pub const LET_CPUS_IDLE_ENV: &str = "CCCTL_LET_CPUS_IDLE";

/// The kernel's CPU latency request device (PM QoS): a process writes the
/// largest wake-up latency it accepts, in us, as a 32-bit integer, and the
/// request lasts while the file is open; a read gives the limit in force.
pub const CPU_LATENCY_DEVICE: &str = "/dev/cpu_dma_latency";

/// Where the CPUs and their idle states are described.
const CPUS_SYSFS: &str = "/sys/devices/system/cpu";

type Result<T> = std::result::Result<T, AwakeError>;

fn error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> AwakeError {
    let what = what.into();
    move |source| AwakeError { what, source }
}

/// The spinning threads' names begin with this (`awake-0`, `awake-1`, ...).
pub const THREAD_NAME_PREFIX: &str = "awake-";

/// The CPUs kept from halting until dropped.
pub struct Awake {
    how: How,
    cpus: usize,
}

enum How {
    /// The request of 0 us, in force while open.
    Polling { _request: std::fs::File },
    /// Stopped and joined by their drop.
    Spinning { _spinners: Spinners },
}

/// One `SCHED_IDLE` thread per CPU.
struct Spinners {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Their kernel thread ids, to see them gone on drop.
    tids: Vec<i32>,
}

impl Awake {
    /// The cheapest way this machine offers: idle CPUs poll where every
    /// CPU's idle driver has a `POLL` state, spinning threads otherwise.
    pub fn start() -> Result<Awake> {
        Awake::polling().or_else(|why| {
            tracing::debug!("idle CPUs cannot poll here ({why}); spinning threads instead");
            Awake::spinning()
        })
    }

    /// Idle CPUs poll: a CPU latency request of 0 us, held until the drop.
    /// An error where a CPU's idle driver has no enabled `POLL` state (the
    /// request would change nothing) or the request is refused.
    pub fn polling() -> Result<Awake> {
        let cpus = poll_state_on_every_cpu()?;
        let mut qos = std::fs::OpenOptions::new()
            .write(true)
            .open(CPU_LATENCY_DEVICE)
            .map_err(error(format!("opening {CPU_LATENCY_DEVICE}")))?;
        std::io::Write::write_all(&mut qos, &0i32.to_ne_bytes())
            .map_err(error(format!("requesting 0 us in {CPU_LATENCY_DEVICE}")))?;
        Ok(Awake {
            how: How::Polling { _request: qos },
            cpus,
        })
    }

    /// One spinning `SCHED_IDLE` thread per CPU, each on its own CPU; waits
    /// until every one has taken its policy (an error if the kernel refused
    /// one).
    pub fn spinning() -> Result<Awake> {
        let cpus = std::thread::available_parallelism()
            .map_err(error("counting the CPUs"))?
            .get();
        let stop = Arc::new(AtomicBool::new(false));
        let mut spinners = Spinners {
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
            spinners.threads.push(handle);
        }
        drop(ready_tx);
        for _ in 0..cpus {
            let tid = ready_rx.recv().map_err(|_| AwakeError {
                what: "a spinning thread ended before it started".into(),
                source: std::io::Error::other("no word from it"),
            })??;
            spinners.tids.push(tid);
        }
        Ok(Awake {
            how: How::Spinning {
                _spinners: spinners,
            },
            cpus,
        })
    }

    /// How many CPUs are kept awake.
    pub fn cpus(&self) -> usize {
        self.cpus
    }

    /// How, in words for a log line.
    pub fn how(&self) -> &'static str {
        match self.how {
            How::Polling { .. } => "idle CPUs poll (a 0 us CPU latency request)",
            How::Spinning { .. } => "one lowest-priority spinning thread per CPU",
        }
    }
}

impl Drop for Spinners {
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

/// The number of CPUs with an idle driver, if each one's state 0 is an
/// enabled `POLL`; an error naming the first that is not.
fn poll_state_on_every_cpu() -> Result<usize> {
    let not_here = |what: String| AwakeError {
        what,
        source: std::io::Error::from(std::io::ErrorKind::Unsupported),
    };
    let driver = std::fs::read_to_string(format!("{CPUS_SYSFS}/cpuidle/current_driver"))
        .map_err(error("reading the cpuidle driver"))?;
    if driver.trim() == "none" {
        return Err(not_here("no cpuidle driver: an idle CPU halts".into()));
    }
    let mut cpus = 0;
    for entry in std::fs::read_dir(CPUS_SYSFS)
        .map_err(error(format!("listing {CPUS_SYSFS}")))?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_cpu = name
            .strip_prefix("cpu")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let state0 = entry.path().join("cpuidle/state0");
        if !is_cpu || !state0.exists() {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(state0.join(f)).unwrap_or_default();
        if read("name").trim() != "POLL" || read("disable").trim() != "0" {
            return Err(not_here(format!(
                "{name}: idle state 0 is {:?}, not an enabled POLL",
                read("name").trim()
            )));
        }
        cpus += 1;
    }
    if cpus == 0 {
        return Err(not_here("no CPU lists idle states".into()));
    }
    Ok(cpus)
}

/// The CPU latency limit in force, in us (the least of every request; the
/// kernel's default 2,000,000,000 when none is held).
pub fn cpu_latency_limit_us() -> std::io::Result<i32> {
    let mut b = [0u8; 4];
    std::io::Read::read_exact(&mut std::fs::File::open(CPU_LATENCY_DEVICE)?, &mut b)?;
    Ok(i32::from_ne_bytes(b))
}

/// Whether this process keeps the CPUs awake now, either way: spinning
/// threads, or the latency device held open.
pub fn kept_awake_here() -> bool {
    let holds_request = std::fs::read_dir("/proc/self/fd").is_ok_and(|d| {
        d.flatten().any(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|t| t == std::path::Path::new(CPU_LATENCY_DEVICE))
        })
    });
    holds_request || awake_threads() > 0
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
                tracing::debug!(cpus = a.cpus(), "CPUs kept awake: {}", a.how());
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

    /// The tests below change what this process holds; one at a time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    /// Every thread runs at SCHED_IDLE, one per CPU, and all are gone when
    /// the drop returns.
    #[test]
    fn spinning_is_one_idle_thread_per_cpu_and_none_after_drop() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let awake = Awake::spinning().expect("start");
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(awake.cpus(), cpus);
        assert_eq!(awake_threads(), cpus, "one awake-* thread per CPU");
        let How::Spinning {
            _spinners: spinners,
        } = &awake.how
        else {
            panic!("spinning() did not spin")
        };
        let policies: Vec<String> = spinners.tids.iter().map(|&t| policy(t)).collect();
        assert!(
            policies.iter().all(|p| p == "5"),
            "every awake-* thread at policy 5 (SCHED_IDLE): {policies:?}"
        );
        assert!(kept_awake_here());
        drop(awake);
        assert_eq!(awake_threads(), 0, "none after drop");
        assert!(!kept_awake_here());
    }

    /// Where every CPU's idle driver offers POLL (read here from sysfs, not
    /// through the code under test): the request reads 0 us while held,
    /// no CPU enters a deeper idle state meanwhile, and the limit is what
    /// it was after the drop. Elsewhere `polling` refuses and `start` spins.
    /// Either way `hold` is shared: started by the first holder, ended with
    /// the last.
    #[test]
    fn idle_cpus_poll_where_the_driver_can_and_spin_elsewhere() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let driver = std::fs::read_to_string(format!("{CPUS_SYSFS}/cpuidle/current_driver"))
            .unwrap_or_default();
        // Each CPU's state 0 as "name disable" ("POLL 0": an enabled POLL).
        let state0s: Vec<String> = std::fs::read_dir(CPUS_SYSFS)
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let state0 = e.path().join("cpuidle/state0");
                let name = std::fs::read_to_string(state0.join("name")).ok()?;
                let disable = std::fs::read_to_string(state0.join("disable")).ok()?;
                Some(format!("{} {}", name.trim(), disable.trim()))
            })
            .collect();
        let can_poll =
            driver.trim() != "none" && !state0s.is_empty() && state0s.iter().all(|n| n == "POLL 0");
        println!(
            "cpuidle driver {:?}, state 0 {state0s:?}: poll {can_poll}",
            driver.trim()
        );
        if can_poll {
            let before = cpu_latency_limit_us().expect("reading the limit");
            let deeper = || -> u64 {
                let mut n = 0;
                for cpu in std::fs::read_dir(CPUS_SYSFS).unwrap().flatten() {
                    for st in std::fs::read_dir(cpu.path().join("cpuidle"))
                        .into_iter()
                        .flatten()
                        .flatten()
                    {
                        let read = |f: &str| {
                            std::fs::read_to_string(st.path().join(f)).unwrap_or_default()
                        };
                        if read("latency").trim().parse::<u64>().unwrap_or(0) > 0 {
                            n += read("usage").trim().parse::<u64>().unwrap_or(0);
                        }
                    }
                }
                n
            };
            let awake = Awake::polling().expect("polling where state 0 is POLL");
            assert!(matches!(awake.how, How::Polling { .. }));
            assert_eq!(cpu_latency_limit_us().unwrap(), 0, "0 us in force");
            assert_eq!(awake_threads(), 0, "no thread needed");
            assert!(kept_awake_here());
            // The request takes effect at once (the kernel kicks every idle
            // CPU); the test then sleeps, so the CPUs have idle time.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let d0 = deeper();
            std::thread::sleep(std::time::Duration::from_millis(300));
            assert_eq!(deeper(), d0, "a CPU entered a deeper idle state than POLL");
            drop(awake);
            assert_eq!(
                cpu_latency_limit_us().unwrap(),
                before,
                "the request outlived the drop"
            );
            assert!(!kept_awake_here());
        } else {
            assert!(
                Awake::polling().is_err(),
                "polling() where the driver cannot poll"
            );
            let awake = Awake::start().expect("start");
            assert!(matches!(awake.how, How::Spinning { .. }));
        }
        let (a, b) = (hold(), hold());
        assert!(kept_awake_here() || let_cpus_idle());
        drop(a);
        assert!(kept_awake_here() || let_cpus_idle(), "b still holds");
        drop(b);
        assert!(!kept_awake_here(), "held after the last");
    }

    /// The scheduling policy of this process's thread `tid` (`sched`).
    fn policy(tid: i32) -> String {
        let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).unwrap();
        let line = sched.lines().find(|l| l.starts_with("policy")).unwrap();
        line.rsplit(':').next().unwrap().trim().to_string()
    }
}
