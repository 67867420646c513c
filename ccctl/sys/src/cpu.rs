//! The machine's CPU time from `/proc/stat`, and the share of it the
//! hypervisor gave to other guests (steal): on a shared host a lab run
//! measures wall-clock behaviour, and steal shows up in it as a slow path
//! or late timers, so runs and test phases report it beside their results.

/// `/proc/stat`'s first line, all CPUs, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuTicks {
    /// Neither idle nor waiting for I/O.
    pub busy: u64,
    /// Time the hypervisor gave to other guests while this one wanted it.
    pub steal: u64,
    /// user nice system idle iowait irq softirq steal (guest time is
    /// already in user).
    pub all: u64,
}

impl CpuTicks {
    /// Parses `/proc/stat`'s text; `None` if its first line is not the
    /// `cpu` line of numbers.
    pub fn parse(stat: &str) -> Option<CpuTicks> {
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .map(|t| t.parse().ok())
            .collect::<Option<_>>()?;
        let all: u64 = ticks.iter().take(8).sum();
        let idle = ticks.get(3)? + ticks.get(4)?;
        Some(CpuTicks {
            busy: all - idle,
            steal: *ticks.get(7)?,
            all,
        })
    }

    /// The ticks now.
    pub fn now() -> std::io::Result<CpuTicks> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        CpuTicks::parse(&stat).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "/proc/stat: no `cpu` line of numbers first",
            )
        })
    }

    /// The share of all CPU time between `self` and `later` that was
    /// stolen (0 when no tick passed).
    pub fn steal_share_until(&self, later: &CpuTicks) -> f64 {
        let all = later.all.saturating_sub(self.all);
        if all == 0 {
            0.0
        } else {
            later.steal.saturating_sub(self.steal) as f64 / all as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_read_from_proc_stat_and_steal_is_a_share() {
        let a = CpuTicks::parse("cpu  100 5 20 800 3 0 2 70 9 0\ncpu0 1 2 3\n").unwrap();
        assert_eq!(
            a,
            CpuTicks {
                busy: 197,
                steal: 70,
                all: 1000
            }
        );
        assert_eq!(CpuTicks::parse("intr 1 2\n"), None);
        let b = CpuTicks {
            busy: 297,
            steal: 95,
            all: 1100,
        };
        assert!((a.steal_share_until(&b) - 0.25).abs() < 1e-12);
        assert_eq!(a.steal_share_until(&a), 0.0);
    }
}
