//! The one table of the congestion controls built into this binary: each
//! algorithm's id in the BPF ABI, its names, its BPF object, the per-ACK
//! event columns it fills and its colour in plots. Every other table reads
//! this one: the loader (which object), the parameters (`CCCTL_PARAMS`'
//! rows for its id), trace decoding and the trace files (which columns),
//! the lab (names a scenario may use) and its plots (colours).
use crate::abi;
use crate::error::{Error, Result};

/// One algorithm.
#[derive(Debug)]
pub struct Algorithm {
    /// `CCCTL_ALGO_*` of `bpf/ccctl_abi.h`: what its events and parameter
    /// rows carry.
    pub id: u32,
    /// Name on the command line (`ccctl load modest-bbr`).
    pub name: &'static str,
    /// Name the kernel registers it under (`iperf3 -C modest_bbr`).
    pub kernel_name: &'static str,
    /// One line for `ccctl list`.
    pub summary: &'static str,
    /// Its embedded BPF object (`bpf/<object>.bpf.c`).
    pub object: Object,
    /// The per-ACK event columns it fills beyond the common ones.
    pub events: &'static [EventGroup],
    /// Index into the lab's plot palette: one colour in every figure.
    pub plot_colour: usize,
}

/// The BPF objects embedded in this binary, one per algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    /// `bpf/bbr.bpf.c`
    Bbr,
    /// `bpf/modest_bbr.bpf.c`
    ModestBbr,
    /// `bpf/dstar.bpf.c`
    Dstar,
    /// `bpf/patched_bbr.bpf.c`
    PatchedBbr,
}

/// A group of per-ACK event columns only some algorithms fill; on the rows
/// of the others they are null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventGroup {
    /// BBR's state: `bbr_mode`, `pacing_gain`, `cwnd_gain`, `btl_bw_bps`.
    Bbr,
    /// Modest BBR's window search: `modest_phase`, `min_win`, ...
    Modest,
    /// Patched BBR's Θ, alpha and On/Off times.
    Patched,
    /// TCP D*'s state: the `dstar_*` columns.
    Dstar,
}

/// Ordered by id, from 1: [`by_id`] indexes it.
pub static ALGORITHMS: &[Algorithm] = &[
    Algorithm {
        id: abi::CCCTL_ALGO_BBR,
        name: "bpf-bbr",
        kernel_name: "bpf_bbr",
        summary: "BBR v1 in BPF, our baseline (startup, drain, probe_bw, probe_rtt)",
        object: Object::Bbr,
        events: &[EventGroup::Bbr],
        plot_colour: 2,
    },
    Algorithm {
        id: abi::CCCTL_ALGO_MODEST_BBR,
        name: "modest-bbr",
        kernel_name: "modest_bbr",
        summary: "Modest BBR: BBR v1 plus a retransmission-driven window search in probe_bw (W_min, W_max, S_min)",
        object: Object::ModestBbr,
        events: &[EventGroup::Bbr, EventGroup::Modest],
        plot_colour: 3,
    },
    Algorithm {
        id: abi::CCCTL_ALGO_PATCHED_BBR,
        name: "patched-bbr",
        kernel_name: "patched_bbr",
        summary: "patched BBR: BBR v1 corrected in probe_bw for a descheduled sender's on-percentage Θ (bandwidth D/Θ, probe pacing /Θ, cwnd + alpha)",
        object: Object::PatchedBbr,
        events: &[EventGroup::Bbr, EventGroup::Patched],
        plot_colour: 5,
    },
    Algorithm {
        id: abi::CCCTL_ALGO_DSTAR,
        name: "dstar",
        kernel_name: "dstar",
        summary: "TCP D*: window first, no pacing; DRAIN/GAIN 1/GAIN 2 cycle sets cwnd = BDP + gain_cwnd from the BDP estimate's deviation",
        object: Object::Dstar,
        events: &[EventGroup::Dstar],
        plot_colour: 4,
    },
];

impl Algorithm {
    /// Does it fill the event columns of `group`?
    #[inline]
    pub fn fills(&self, group: EventGroup) -> bool {
        self.events.contains(&group)
    }
}

/// Names of the kernel's own congestion controls that one of ours is
/// easily mistaken for, with ours: `bbr` always means the kernel's BBR
/// (tcp_bbr), in scenarios as on the command line.
const KERNEL_LOOKALIKES: &[(&str, &str)] = &[("bbr", "bpf_bbr")];

/// Find an algorithm by its user or kernel name. A kernel algorithm's name
/// that looks like one of ours (`bbr`) is refused with a hint.
pub fn find(name: &str) -> Result<&'static Algorithm> {
    if let Some(&(_, ours)) = KERNEL_LOOKALIKES.iter().find(|(k, _)| *k == name) {
        if let Some(a) = ALGORITHMS.iter().find(|a| a.kernel_name == ours) {
            return Err(Error::KernelAlgorithm {
                name: name.to_string(),
                ours: a.name,
                kernel_name: a.kernel_name,
            });
        }
    }
    ALGORITHMS
        .iter()
        .find(|a| a.name == name || a.kernel_name == name)
        .ok_or_else(|| Error::UnknownAlgorithm {
            name: name.to_string(),
            known: ALGORITHMS
                .iter()
                .map(|a| a.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The algorithm of a `CCCTL_ALGO_*` id (as events carry it).
#[inline]
pub fn by_id(id: u8) -> Option<&'static Algorithm> {
    ALGORITHMS
        .get((id as usize).wrapping_sub(1))
        .filter(|a| a.id == id as u32)
}

/// Kernel name of an algorithm id (`bpf_bbr`), or `unknown`.
#[inline]
pub fn kernel_name_of(id: u8) -> &'static str {
    by_id(id).map_or("unknown", |a| a.kernel_name)
}

/// Does an event of algorithm `id` fill the columns of `group`?
#[inline]
pub fn fills(id: u8, group: EventGroup) -> bool {
    by_id(id).is_some_and(|a| a.fills(group))
}

/// The `CCCTL_ALGO_*` id of an algorithm named on the command line: its
/// user name (`modest-bbr`) or its kernel name (`modest_bbr`).
pub fn id_of(name: &str) -> Option<u32> {
    ALGORITHMS
        .iter()
        .find(|a| a.name == name || a.kernel_name == name)
        .map(|a| a.id)
}

/// The names [`id_of`] accepts, for error messages: `bpf-bbr (bpf_bbr), modest-bbr (modest_bbr), dstar`.
pub fn choices() -> String {
    ALGORITHMS
        .iter()
        .map(|a| {
            if a.name == a.kernel_name {
                a.name.to_string()
            } else {
                format!("{} ({})", a.name, a.kernel_name)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_index_the_table() {
        for (i, a) in ALGORITHMS.iter().enumerate() {
            assert_eq!(a.id as usize, i + 1, "{} is out of id order", a.name);
            assert_eq!(by_id(a.id as u8).map(|b| b.name), Some(a.name));
        }
        assert!(by_id(0).is_none());
        assert!(by_id(ALGORITHMS.len() as u8 + 1).is_none());
        assert_eq!(kernel_name_of(0), "unknown");
    }

    #[test]
    fn names_and_colours_are_unique() {
        for (i, a) in ALGORITHMS.iter().enumerate() {
            for b in &ALGORITHMS[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.kernel_name, b.kernel_name);
                assert_ne!(a.plot_colour, b.plot_colour);
                assert_ne!(a.object, b.object);
            }
        }
    }

    #[test]
    fn event_groups_follow_the_family() {
        let bbr = abi::CCCTL_ALGO_BBR as u8;
        let modest = abi::CCCTL_ALGO_MODEST_BBR as u8;
        let patched = abi::CCCTL_ALGO_PATCHED_BBR as u8;
        let dstar = abi::CCCTL_ALGO_DSTAR as u8;
        for id in [bbr, modest, patched] {
            assert!(fills(id, EventGroup::Bbr));
            assert!(!fills(id, EventGroup::Dstar));
        }
        assert!(fills(modest, EventGroup::Modest) && !fills(bbr, EventGroup::Modest));
        assert!(fills(patched, EventGroup::Patched) && !fills(modest, EventGroup::Patched));
        assert!(fills(dstar, EventGroup::Dstar) && !fills(dstar, EventGroup::Bbr));
        assert!(!fills(0, EventGroup::Bbr));
    }

    #[test]
    fn finds_by_either_name() {
        assert_eq!(id_of("modest_bbr"), Some(abi::CCCTL_ALGO_MODEST_BBR));
        assert_eq!(id_of("modest-bbr"), Some(abi::CCCTL_ALGO_MODEST_BBR));
        assert_eq!(id_of("patched-bbr"), Some(abi::CCCTL_ALGO_PATCHED_BBR));
        assert_eq!(id_of("dstar"), Some(abi::CCCTL_ALGO_DSTAR));
        assert_eq!(id_of("cubic"), None);
        assert!(find("cubic").is_err());
        assert_eq!(
            find("bpf_bbr").map(|a| a.id).ok(),
            Some(abi::CCCTL_ALGO_BBR)
        );
        assert_eq!(
            find("bpf-bbr").map(|a| a.id).ok(),
            Some(abi::CCCTL_ALGO_BBR)
        );
        assert_eq!(id_of("bbr"), None, "bbr is the kernel's");
        assert!(choices().starts_with("bpf-bbr (bpf_bbr), modest-bbr (modest_bbr)"));
    }

    #[test]
    fn the_kernels_bbr_is_refused_with_a_hint() {
        let e = find("bbr").expect_err("bbr is the kernel's").to_string();
        assert!(e.contains("kernel's own") && e.contains("`bpf-bbr`"), "{e}");
        assert!(matches!(
            find("bbr"),
            Err(Error::KernelAlgorithm {
                ours: "bpf-bbr",
                ..
            })
        ));
    }
}
