//! Ctrl-C for the lab: SIGINT, SIGTERM and SIGHUP only record themselves;
//! the lab notices at its next 100 ms tick, stops its flows, tears down the
//! testbed, unloads what it loaded and exits. Because these signals then have
//! a handler, the testbed's own last-resort handler leaves them alone.
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(sig: libc::c_int) {
    // Async-signal-safe: one atomic store.
    SIGNAL.store(sig, Ordering::SeqCst);
}

/// Installs the recording handlers (once per process).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a zeroed sigaction with a plain handler that only
            // stores to an atomic; SA_RESTART keeps blocking calls going.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = record as extern "C" fn(libc::c_int) as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
}

/// The signal received, if any.
pub fn received() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Sleeps up to `d`, waking early when a signal has been received.
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
