//! Clocks.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::time::{clock_gettime, ClockId};

/// CLOCK_MONOTONIC in ns: the clock of `ccctl_event.ts_ns`
/// (`bpf_ktime_get_ns()`).
pub fn monotonic_ns() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Time since the Unix epoch (zero if the clock is before it).
pub fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> u64 {
    since_epoch().as_secs()
}

/// Seconds since the Unix epoch, with the fraction (metadata timestamps).
pub fn now_unix_f64() -> f64 {
    since_epoch().as_secs_f64()
}

/// Nanoseconds since the Unix epoch.
pub fn now_unix_ns() -> u128 {
    since_epoch().as_nanos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
        assert!(now_unix() > 1_700_000_000);
    }
}
