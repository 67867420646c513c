//! `ccctl trace --follow`: a live table, one line per flow, refreshed every
//! second from the last event of each flow.
use std::{collections::BTreeMap, fmt::Write as _, time::Duration};

use super::event;
use crate::abi::ccctl_event;
use crate::registry::{self, EventGroup};

/// Flows without an event for this many refreshes leave the table.
const IDLE_REFRESHES: u32 = 10;

struct FlowRow {
    last: ccctl_event,
    /// Last non-zero delivery rate (most ACKs carry no rate sample).
    delivery_rate: u64,
    in_window: u64,
    idle: u32,
}

/// The state behind the table.
#[derive(Default)]
pub struct FollowTable {
    flows: BTreeMap<u64, FlowRow>,
    total: u64,
    in_window: u64,
}

impl FollowTable {
    #[inline]
    pub fn push(&mut self, ev: &ccctl_event) {
        self.total += 1;
        self.in_window += 1;
        let row = self.flows.entry(ev.flow_id).or_insert_with(|| FlowRow {
            last: *ev,
            delivery_rate: 0,
            in_window: 0,
            idle: 0,
        });
        row.last = *ev;
        row.in_window += 1;
        row.idle = 0;
        if ev.delivery_rate != 0 {
            row.delivery_rate = ev.delivery_rate;
        }
    }

    /// Events seen since the start.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The table for the `elapsed` since the previous one; starts a new window.
    pub fn render(&mut self, elapsed: Duration, dropped: u64) -> String {
        let secs = elapsed.as_secs_f64().max(1e-3);
        let mbit = |bytes_per_s: u64| bytes_per_s as f64 * 8.0 / 1e6;
        let ms = |us: u32| us as f64 / 1e3;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "ccctl trace --follow: {} flows, {:.0} events/s, {} events, {dropped} dropped (Ctrl-C stops)",
            self.flows.len(),
            self.in_window as f64 / secs,
            self.total,
        );
        let _ = writeln!(
            out,
            "{:>6} {:<21} {:<21} {:<11} {:<15} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "FLOW",
            "LOCAL",
            "REMOTE",
            "ALGO",
            "MODE",
            "CWND",
            "PACING",
            "DELIVERY",
            "BTL_BW",
            "SRTT",
            "MIN_RTT",
            "INFLIGHT",
            "RETRANS",
            "EVENTS/S"
        );
        let _ = writeln!(
            out,
            "{:>6} {:<21} {:<21} {:<11} {:<15} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "", "", "", "", "", "pkts", "Mbit/s", "Mbit/s", "Mbit/s", "ms", "ms", "pkts", "segs", ""
        );
        for (id, row) in &self.flows {
            let e = &row.last;
            let local = endpoint(e.saddr, e.sport);
            let remote = endpoint(e.daddr, e.dport);
            let (mode, btl_bw) = if registry::fills(e.algo, EventGroup::Bbr) {
                let mut mode = event::bbr_mode_name(e.bbr_mode).to_string();
                if e.modest_phase != 0 {
                    mode = format!("{mode}/{}", event::modest_phase_name(e.modest_phase));
                }
                (mode, format!("{:.2}", mbit(e.btl_bw)))
            } else {
                ("-".to_string(), "-".to_string())
            };
            let pacing = if e.pacing_rate == u64::MAX {
                "unlim".to_string()
            } else {
                format!("{:.2}", mbit(e.pacing_rate))
            };
            let _ = writeln!(
                out,
                "{:>6} {:<21} {:<21} {:<11} {:<15} {:>7} {:>9} {:>9.2} {:>9} {:>8.2} {:>8.2} {:>8} {:>8} {:>8.0}",
                id,
                local,
                remote,
                registry::kernel_name_of(e.algo),
                mode,
                e.cwnd,
                pacing,
                mbit(row.delivery_rate),
                btl_bw,
                ms(e.srtt_us),
                ms(e.min_rtt_us),
                e.in_flight,
                e.total_retrans,
                row.in_window as f64 / secs,
            );
        }
        // New window; forget flows idle for a while.
        self.in_window = 0;
        self.flows.retain(|_, row| {
            if row.in_window == 0 {
                row.idle += 1;
            }
            row.in_window = 0;
            row.idle < IDLE_REFRESHES
        });
        out
    }
}

/// `198.18.0.1:5201` or `[fd00:ccc::1]:5201`, as `ss` writes them.
fn endpoint(addr: [u8; 16], port: u16) -> String {
    std::net::SocketAddr::new(event::addr(addr), port).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::synthetic::synthetic_event;

    #[test]
    fn one_line_per_flow_with_rates() {
        let mut t = FollowTable::default();
        for i in 0..64 {
            t.push(&synthetic_event(i));
        }
        let text = t.render(Duration::from_secs(2), 5);
        let lines: Vec<&str> = text.lines().collect();
        let flows: std::collections::BTreeSet<u64> =
            (0..64).map(|i| synthetic_event(i).flow_id).collect();
        assert_eq!(lines.len(), 3 + flows.len(), "{text}");
        assert!(
            lines[0].contains("32 events/s") && lines[0].contains("5 dropped"),
            "{text}"
        );
        let last = synthetic_event(63);
        let line = lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(&last.flow_id.to_string()))
            .unwrap();
        assert!(
            line.contains(&format!("[fd00:ccc::f:1]:{}", last.sport)),
            "{line}"
        );
        assert!(line.contains(registry::kernel_name_of(last.algo)), "{line}");
        assert_eq!(t.total(), 64);
        // Idle flows age out.
        for _ in 0..IDLE_REFRESHES {
            t.render(Duration::from_secs(1), 0);
        }
        assert_eq!(t.render(Duration::from_secs(1), 0).lines().count(), 3);
    }
}
