//! The one signal policy of every ccctl program.
//!
//! - SIGINT, SIGTERM and SIGHUP ([`ENDING`]) end what is running: a trace
//!   session, a lab run, a test. Long-running parts *record* them
//!   ([`record_ending`], [`received`]) and wind down at their next tick:
//!   stop flows, switch tracing off, tear down namespaces, unload. The
//!   daemon gives SIGHUP its own meaning (reload) through [`flag`].
//! - While registration state changes (a load or an unload), they are
//!   *deferred* ([`Deferred`]): a Ctrl-C lands before or after, never
//!   halfway through.
//! - At the command line SIGPIPE kills quietly, like other tools
//!   ([`die_quietly_on_sigpipe`]); a trace session ignores it while it runs
//!   ([`SigpipeIgnored`]), since it must switch tracing off before it ends.
//!
//! Handlers are registered through signal-hook, which chains them: several
//! parts of one process can watch the same signal.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Once};

/// The signals that end a session.
pub const ENDING: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

static RECEIVED: AtomicUsize = AtomicUsize::new(0);

/// Records SIGINT, SIGTERM and SIGHUP from now on (once per process); see
/// [`received`].
pub fn record_ending() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        RECORDING.store(true, Ordering::SeqCst);
        for sig in ENDING {
            // Registration fails only for forbidden signals (SIGKILL...).
            if let Err(e) = signal_hook::flag::register_usize(sig, &RECEIVED, sig as usize) {
                tracing::error!("cannot watch signal {sig}: {e}");
            }
        }
    });
}

/// Whether [`record_ending`] installed its handlers in this process.
pub fn recording() -> bool {
    RECORDING.load(Ordering::SeqCst)
}

static RECORDING: AtomicBool = AtomicBool::new(false);

/// The last ending signal received since [`record_ending`], if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s as i32),
    }
}

/// Sleeps up to `d`, waking early (within 50 ms) once an ending signal has
/// been received.
pub fn sleep(d: std::time::Duration) {
    let end = std::time::Instant::now() + d;
    while received().is_none() {
        let now = std::time::Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(std::time::Duration::from_millis(50)));
    }
}

/// Calls `f` with each ending signal, on a watcher thread (so `f` may do
/// anything: kill process groups, tear down namespaces). Also records them
/// ([`record_ending`]).
pub fn on_ending(f: impl Fn(i32) + Send + 'static) -> std::io::Result<()> {
    record_ending();
    let mut signals = signal_hook::iterator::Signals::new(ENDING)?;
    std::thread::Builder::new()
        .name("ccctl-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                f(sig);
            }
        })?;
    Ok(())
}

/// Sends `sig` to the process group `pgid` (ignoring one that is gone).
pub fn kill_group(pgid: i32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, sig);
    }
}

/// Sends `sig` to the process `pid` (ignoring one that is gone).
pub fn kill(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// A flag set whenever `sig` arrives (the daemon's SIGHUP and SIGTERM).
pub fn flag(sig: i32) -> std::io::Result<Arc<AtomicBool>> {
    let f = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(sig, f.clone())?;
    Ok(f)
}

/// Holds SIGINT, SIGTERM and SIGHUP on this thread while alive (the kernel
/// delivers them after), so registration state never changes halfway.
pub struct Deferred {
    old: libc::sigset_t,
}

impl Deferred {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Deferred {
        // SAFETY: sigemptyset/sigaddset initialise the sets we own, and
        // pthread_sigmask only changes this thread's mask, saving the old one.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in ENDING {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            Deferred { old }
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new` on the same thread.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// `ccctl ... | head` ends quietly on a closed pipe: SIGPIPE back to its
/// default action. Call first thing in `main`, before any thread exists.
pub fn die_quietly_on_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler;
    // called before other threads exist.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// SIGPIPE ignored while alive (writes to a closed pipe fail with EPIPE
/// instead), the previous disposition restored on drop.
pub struct SigpipeIgnored(libc::sighandler_t);

impl SigpipeIgnored {
    #[allow(clippy::new_without_default)]
    pub fn new() -> SigpipeIgnored {
        // SAFETY: SIG_IGN installs no handler; the old disposition is kept
        // and restored on drop.
        SigpipeIgnored(unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) })
    }
}

impl Drop for SigpipeIgnored {
    fn drop(&mut self) {
        if self.0 != libc::SIG_ERR {
            // SAFETY: restoring the disposition found at creation.
            unsafe { libc::signal(libc::SIGPIPE, self.0) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_signal_is_seen() {
        record_ending();
        assert_eq!(received(), None);
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::HUP)
            .expect("signal self");
        let t = std::time::Instant::now();
        while received().is_none() && t.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(received(), Some(libc::SIGHUP));
    }
}
