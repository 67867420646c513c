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
        let mut out = String::new();
        let _ = writeln!(
            out,
            "ccctl trace --follow: {} flows, {:.0} events/s, {} events, {dropped} dropped (Ctrl-C stops)",
            self.flows.len(),
            self.in_window as f64 / secs,
            self.total,
        );
        let widths: Vec<usize> = SHOWN.iter().map(|n| header(n).len().max(9)).collect();
        let mut head = format!("{:>6} {:<21} {:<21}", "FLOW", "LOCAL", "REMOTE");
        let mut units = format!("{:>6} {:<21} {:<21}", "", "", "");
        for (n, w) in SHOWN.iter().zip(&widths) {
            let _ = write!(head, " {:>w$}", header(n));
            let _ = write!(units, " {:>w$}", unit(n));
        }
        let _ = writeln!(head, " {:>9} {:>8}", "DELIVERY", "EVENTS/S");
        let _ = writeln!(units, " {:>9} {:>8}", "Mbit/s", "");
        out.push_str(&head);
        out.push_str(&units);
        for (id, row) in &self.flows {
            let e = &row.last;
            let _ = write!(
                out,
                "{:>6} {:<21} {:<21}",
                id,
                endpoint(e.saddr, e.sport),
                endpoint(e.daddr, e.dport)
            );
            for (n, w) in SHOWN.iter().zip(&widths) {
                let _ = write!(out, " {:>w$}", cell(n, e).unwrap_or_default());
            }
            let _ = writeln!(
                out,
                " {:>9.2} {:>8.0}",
                event::bits_per_s(row.delivery_rate) as f64 / 1e6,
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

/// The event columns the table shows for each flow, in order, between its
/// endpoints and the last non-zero delivery rate: values from the one event
/// schema ([`crate::trace::schema`]), rates in Mbit/s and times in ms.
/// Showing another column is one name here.
pub const SHOWN: &[&str] = &[
    "algo",
    "bbr_mode",
    "modest_phase",
    "cwnd",
    "pacing_rate_bps",
    "btl_bw_bps",
    "srtt_us",
    "min_rtt_us",
    "in_flight",
    "total_retrans",
];

/// `pacing_rate_bps` -> `PACING_RATE`.
fn header(name: &str) -> String {
    name.trim_end_matches("_bps")
        .trim_end_matches("_us")
        .to_ascii_uppercase()
}

fn unit(name: &str) -> &'static str {
    if name.ends_with("_bps") {
        "Mbit/s"
    } else if name.ends_with("_us") {
        "ms"
    } else {
        ""
    }
}

/// One value as the table shows it.
macro_rules! follow_value {
    ($name:ident, Addr, $v:expr) => {
        event::addr_string($v)
    };
    ($name:ident, Enum($f:path), $v:expr) => {
        $f($v).to_string()
    };
    ($name:ident, $kind:ident, $v:expr) => {
        scaled(stringify!($name), $v)
    };
}

macro_rules! follow_fills {
    ($e:ident, All) => {
        true
    };
    ($e:ident, $g:ident) => {
        registry::fills($e.algo, EventGroup::$g)
    };
}

/// A number in the table's unit for its column (`-` for rows of another
/// algorithm, `unlim` for an unlimited pacing rate).
fn scaled<T: Into<Scaled>>(name: &str, v: T) -> String {
    match v.into() {
        Scaled::Int(u64::MAX) if name.ends_with("_bps") => "unlim".into(),
        Scaled::Int(x) if name.ends_with("_bps") => format!("{:.2}", x as f64 / 1e6),
        Scaled::Int(x) if name.ends_with("_us") => format!("{:.2}", x as f64 / 1e3),
        Scaled::Int(x) => x.to_string(),
        Scaled::Float(x) => format!("{x:.2}"),
        Scaled::Bool(b) => b.to_string(),
    }
}

enum Scaled {
    Int(u64),
    Float(f64),
    Bool(bool),
}

impl From<u64> for Scaled {
    fn from(v: u64) -> Scaled {
        Scaled::Int(v)
    }
}
impl From<u32> for Scaled {
    fn from(v: u32) -> Scaled {
        Scaled::Int(v.into())
    }
}
impl From<f64> for Scaled {
    fn from(v: f64) -> Scaled {
        Scaled::Float(v)
    }
}
impl From<bool> for Scaled {
    fn from(v: bool) -> Scaled {
        Scaled::Bool(v)
    }
}

macro_rules! define_cell {
    ($( $name:ident : $kind:ident $(($f:path))?, $group:ident, |$e:ident| $val:expr, $ty:literal, $doc:literal; )*) => {
        /// A column's value in `e` as the table shows it; `None` for a name
        /// the schema does not have.
        fn cell(name: &str, e: &ccctl_event) -> Option<String> {
            match name {
                $( stringify!($name) => Some(if follow_fills!(e, $group) {
                    let $e = e;
                    follow_value!($name, $kind $(($f))?, $val)
                } else {
                    "-".to_string()
                }), )*
                _ => None,
            }
        }
    };
}
crate::with_event_columns!(define_cell);

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
        // Every shown column is one of the schema's.
        for n in SHOWN {
            assert!(cell(n, &last).is_some(), "{n} is not an event column");
        }
        assert!(
            lines[1].contains("PACING_RATE") && lines[2].contains("Mbit/s"),
            "{text}"
        );
        assert_eq!(t.total(), 64);
        // Idle flows age out.
        for _ in 0..IDLE_REFRESHES {
            t.render(Duration::from_secs(1), 0);
        }
        assert_eq!(t.render(Duration::from_secs(1), 0).lines().count(), 3);
    }
}
