//! The per-ACK event's columns: one table, one line per column, from which
//! the Parquet columns and their builders, the CSV header and rows
//! (ccctl-observe) and the column table of `docs/tracing.md` are made.
//! Adding a column is one line here (after the field in `ccctl_abi.h` and
//! its decoding).
//!
//! Each line: `name: Kind, Group, |e| value, "type", "meaning";`
//! - Kind: how the value is stored: `U64`, `U32`, `F64`, `Bool`, `Addr`
//!   (a 16-byte address, written as text, dictionary-encoded), or
//!   `Enum(name_of)` (a code, written as `name_of(code)`, dictionary-encoded);
//! - Group: `All` for every row, or the [`EventGroup`] whose algorithms fill
//!   it (null on other rows, empty in CSV, never 0);
//! - `|e| value`: the value from a decoded `ccctl_event` `e`.
use crate::registry::{EventGroup, ALGORITHMS};

/// Calls `$m! { <the table> }` with every column, in file order.
#[macro_export]
macro_rules! with_event_columns {
    ($m:ident) => {
        $m! {
            ts_ns: U64, All, |e| e.ts_ns, "u64", "CLOCK_MONOTONIC, ns (`ccctl.monotonic_offset_ns` + ts_ns = Unix time, ns)";
            flow_id: U64, All, |e| e.flow_id, "u64", "stable per socket, unique across algorithms until reboot";
            saddr: Addr, All, |e| e.saddr, "categorical string", "local address as text: `198.18.0.1`, `fd00:ccc::1` (an IPv4 peer of a dual-stack IPv6 socket as IPv4)";
            daddr: Addr, All, |e| e.daddr, "categorical string", "remote address, as `saddr`";
            sport: U32, All, |e| e.sport as u32, "u32", "local port";
            dport: U32, All, |e| e.dport as u32, "u32", "remote port";
            family: U32, All, |e| e.family as u32, "u32", "AF_INET (2) or AF_INET6 (10)";
            algo: Enum($crate::registry::kernel_name_of), All, |e| e.algo, "enum string", "kernel name of the algorithm (`bpf_bbr`, `modest_bbr`, `patched_bbr`, `dstar`, `unknown`)";
            ca_state: U32, All, |e| e.ca_state as u32, "u32", "TCP_CA_Open (0) .. TCP_CA_Loss (4), as in the lab's samples.parquet";
            cwnd: U32, All, |e| e.cwnd, "u32", "packets";
            ssthresh: U32, All, |e| e.ssthresh, "u32", "packets";
            mss: U32, All, |e| e.mss, "u32", "bytes";
            pacing_rate_bps: U64, All, |e| $crate::trace::event::bits_per_s(e.pacing_rate), "u64", "bit/s (sk_pacing_rate x 8; u64::MAX: unlimited)";
            delivery_rate_bps: U64, All, |e| $crate::trace::event::bits_per_s(e.delivery_rate), "u64", "bit/s of this ACK's rate sample; 0 if none";
            srtt_us: U32, All, |e| e.srtt_us, "u32", "smoothed RTT, microseconds";
            min_rtt_us: U32, All, |e| e.min_rtt_us, "u32", "minimum RTT, microseconds";
            in_flight: U32, All, |e| e.in_flight, "u32", "packets in flight";
            edt_lead_ms: U32, All, |e| e.edt_lead_ms as u32, "u32", "ms the socket's pacing schedule (`tcp_wstamp_ns`) runs ahead of this ACK's clock: about one packet's slot while paced, more after segments left in a burst (tcp_bbr.c's DRAIN counts those as delivered)";
            delivered: U32, All, |e| e.delivered, "u32", "packets delivered";
            lost: U32, All, |e| e.lost, "u32", "packets lost";
            total_retrans: U32, All, |e| e.total_retrans, "u32", "segments retransmitted";
            param_version: U32, All, |e| e.param_version, "u32", "version of the tunable parameters in force";
            param_digest: U32, All, |e| e.param_digest, "u32", "FNV-1a of the whole parameter set this ACK used (`ccctl_abi.h`): with `param_version` it shows the set was one whole set";
            bbr_mode: Enum($crate::trace::event::bbr_mode_name), Bbr, |e| e.bbr_mode, "enum string", "BBR's mode: `startup`, `drain`, `probe_bw`, `probe_rtt`, `unknown`";
            modest_phase: Enum($crate::trace::event::modest_phase_name), Modest, |e| e.modest_phase, "enum string", "the window search's phase: `inactive`, `binary`, `linear`, `unknown`";
            pacing_gain: F64, Bbr, |e| $crate::trace::event::gain(e.pacing_gain), "f64", "pacing gain as applied on this ACK (Modest BBR: after eq. 1 scaling), a factor";
            cwnd_gain: F64, Bbr, |e| $crate::trace::event::gain(e.cwnd_gain), "f64", "cwnd gain, a factor";
            btl_bw_bps: U64, Bbr, |e| $crate::trace::event::bits_per_s(e.btl_bw), "u64", "bottleneck bandwidth estimate pacing and cwnd use, bit/s (patched BBR with divide_after_max: max filter / Θ)";
            bbr_min_rtt_us: U32, Bbr, |e| e.bbr_min_rtt_us, "u32", "BBR's own min_rtt filter (RTprop estimate), us: what sets the BDP, unlike `min_rtt_us` (the kernel's tcp_min_rtt)";
            bbr_lt_use_bw: Bool, Bbr, |e| e.bbr_lt_use_bw != 0, "bool", "BBR paces at its long-term rate `lt_bw` (a policer was detected), not btl_bw's max filter";
            bbr_min_rtt_age_ms: U32, Bbr, |e| e.bbr_min_rtt_age_ms, "u32", "ms since BBR's min_rtt filter was last refreshed; PROBE_RTT starts when it passes 10 000";
            min_win: U32, Modest, |e| e.min_win, "u32", "lower bound of the window search (Alg. 1), packets";
            max_win: U32, Modest, |e| e.max_win, "u32", "upper bound of the window search (Alg. 1), packets";
            last_cwnd: U32, Modest, |e| e.last_cwnd, "u32", "BBR's window (BtlBw x RTprop) stored when the search started, packets";
            quiet_rounds: U32, Modest, |e| e.quiet_rounds, "u32", "round trips since the last retransmission, saturating at 65535";
            theta: F64, Patched, |e| $crate::trace::event::theta(e.theta), "f64", "Θ in force, estimated over the last round";
            alpha: F64, Patched, |e| $crate::trace::event::gain(e.alpha), "f64", "eq. 38's alpha in force, BDPs added to cwnd_gain";
            on_us: U32, Patched, |e| e.on_us, "u32", "On time of the current round so far, us";
            off_us: U32, Patched, |e| e.off_us, "u32", "Off time of the current round so far, us";
            theta_on_us: U32, Patched, |e| e.theta_on_us, "u32", "On time of the round `theta` was estimated over, us";
            theta_off_us: U32, Patched, |e| e.theta_off_us, "u32", "Off time of the round `theta` was estimated over, us";
            bbr_pacing_gain: F64, Patched, |e| $crate::trace::event::gain(e.bbr_pacing_gain), "f64", "BBR's pacing gain p before eq. 37";
            stall_us: U32, Patched, |e| e.stall_us, "u32", "machine stall time left out of the current round's Off (stall_filter), us";
            bw_raw_bps: U64, Patched, |e| $crate::trace::event::bits_per_s(e.bw_raw), "u64", "this ACK's delivery-rate sample D, bit/s; 0 if no sample";
            bw_corrected_bps: U64, Patched, |e| $crate::trace::event::bits_per_s(e.bw_corrected), "u64", "what the max filter saw (D/Θ in probe_bw, eq. 36; D itself with divide_after_max), bit/s; 0 if no sample";
            dstar_mode: Enum($crate::trace::event::dstar_mode_name), Dstar, |e| e.dstar_mode, "enum string", "`drain`, `gain1`, `gain2`, `unknown`: Fig. 1's mode";
            dstar_slow_start: Bool, Dstar, |e| e.dstar_slow_start != 0, "bool", "in slow start, Sec. 3.3";
            dstar_bdp: U32, Dstar, |e| e.dstar_bdp, "u32", "the BDP estimate (eq. 2), packets";
            dstar_last_bdp: U32, Dstar, |e| e.dstar_last_bdp, "u32", "the BDP estimate before it, packets";
            dstar_gain_cwnd: U32, Dstar, |e| e.dstar_gain_cwnd, "u32", "the window above the BDP, packets";
            dstar_sigma: U32, Dstar, |e| e.dstar_sigma, "u32", "abs(bdp - last_bdp), packets";
            dstar_delivery_rate_bps: U64, Dstar, |e| $crate::trace::event::bits_per_s(e.dstar_delivery_rate), "u64", "eq. 1's estimate from the last GAIN 2, bit/s";
            dstar_min_rtt_us: U32, Dstar, |e| e.dstar_min_rtt_us, "u32", "D*'s own min RTT, us";
            dstar_rtt_us: U32, Dstar, |e| e.dstar_rtt_us, "u32", "the latest RTT sample, Fig. 1's timer unit, us";
            dstar_min_rtt_stamp_ns: U64, Dstar, |e| e.dstar_min_rtt_stamp_ns, "u64", "when `dstar_min_rtt_us` was last refreshed, the clock of `ts_ns`";
            dstar_clock_lag_us: U32, Dstar, |e| e.dstar_clock_lag_us, "u32", "`ts_ns` minus the ACK's own time (`tcp_mstamp`) that Fig. 1's timers read: subtract it to judge mode lengths by D*'s clock, us";
        }
    };
}

/// One column, as documented.
#[derive(Debug, Clone, Copy)]
pub struct ColumnDoc {
    pub name: &'static str,
    pub ty: &'static str,
    /// `None`: every row; else the algorithms filling it.
    pub group: Option<EventGroup>,
    pub meaning: &'static str,
}

#[doc(hidden)]
#[macro_export]
macro_rules! __event_column_group {
    (All) => {
        None
    };
    ($g:ident) => {
        Some($crate::registry::EventGroup::$g)
    };
}

macro_rules! column_docs {
    ($( $name:ident : $kind:ident $(($f:path))?, $group:ident, |$e:ident| $val:expr, $ty:literal, $doc:literal; )*) => {
        /// Every column, in file order.
        pub const COLUMNS: &[ColumnDoc] = &[
            $( ColumnDoc {
                name: stringify!($name),
                ty: $ty,
                group: $crate::__event_column_group!($group),
                meaning: $doc,
            }, )*
        ];
        /// Every column's name, in file order.
        pub const COLUMN_NAMES: &[&str] = &[ $( stringify!($name), )* ];
    };
}
with_event_columns!(column_docs);

/// The algorithms (kernel names) filling a group's columns.
fn whose(group: EventGroup) -> String {
    ALGORITHMS
        .iter()
        .filter(|a| a.fills(group))
        .map(|a| format!("`{}`", a.kernel_name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The column table of `docs/tracing.md` (Markdown, one row per column).
pub fn markdown_table() -> String {
    let mut out = String::from("| column | type | meaning | rows |\n|---|---|---|---|\n");
    for c in COLUMNS {
        let rows = c.group.map_or_else(|| "all".to_string(), whose);
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            c.name, c.ty, c.meaning, rows
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_the_table_has_a_row_each() {
        for (i, a) in COLUMN_NAMES.iter().enumerate() {
            assert!(!COLUMN_NAMES[i + 1..].contains(a), "{a} twice");
        }
        let table = markdown_table();
        assert_eq!(table.lines().count(), COLUMNS.len() + 2);
        assert!(table.contains("| `theta` | f64 |"), "{table}");
        assert!(table.contains("`patched_bbr` |"), "{table}");
        assert_eq!(COLUMNS[0].name, "ts_ns");
        assert!(COLUMNS
            .iter()
            .any(|c| c.name == "dstar_slow_start" && c.group == Some(EventGroup::Dstar)));
    }

    /// `docs/tracing.md` carries [`markdown_table`] between its markers.
    /// `CCCTL_WRITE_DOCS=1 cargo test -p ccctl-core docs_column_table`
    /// rewrites it.
    #[test]
    fn docs_column_table_matches_the_schema() {
        crate::generated_docs::check_block(
            "tracing.md",
            "<!-- columns: generated from ccctl_core::trace::schema -->\n",
            "<!-- end of columns -->",
            &markdown_table(),
            "docs_column_table",
        );
    }
}
