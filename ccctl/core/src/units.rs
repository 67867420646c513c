//! Quantities as people write them in scenario files and flags: rates
//! (`30mbit`, `1.5Gbit/s`), times (`40ms`, `3s`) and buffers (`100pkt`,
//! `150kB`, `0.5bdp`). Parsing rejects anything ambiguous, negative or not
//! finite, and says what it expected.
use std::{fmt, time::Duration};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{input}` is not a {what}: {expected}")]
pub struct ParseError {
    pub input: String,
    pub what: &'static str,
    pub expected: &'static str,
}

fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|(_, c)| {
            !(c.is_ascii_digit() || *c == '.' || *c == '-' || *c == '+' || *c == 'e' || *c == 'E')
        })
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let v: f64 = num.parse().ok()?;
    v.is_finite().then_some((v, unit.trim()))
}

/// A bit rate in bit/s.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Rate(pub f64);

impl Rate {
    const EXPECTED: &'static str =
        "a positive number with a unit: bit, kbit, mbit or gbit (per second), at most 1000gbit, e.g. `30mbit`";

    /// 1 Tbit/s: above any link a namespace testbed or a host NIC carries;
    /// larger values are typos, and 1e308gbit would overflow to infinity.
    const MAX_BPS: f64 = 1e12;

    pub fn parse(s: &str) -> Result<Rate, ParseError> {
        let err = || ParseError {
            input: s.into(),
            what: "rate",
            expected: Self::EXPECTED,
        };
        let (v, unit) = split_number(s).ok_or_else(err)?;
        let unit = unit.to_ascii_lowercase();
        let mult = match unit.trim_end_matches("/s") {
            "bit" | "bps" => 1.0,
            "kbit" | "kbps" => 1e3,
            "mbit" | "mbps" => 1e6,
            "gbit" | "gbps" => 1e9,
            _ => return Err(err()),
        };
        let bps = v * mult;
        (bps > 0.0 && bps <= Self::MAX_BPS)
            .then_some(Rate(bps))
            .ok_or_else(err)
    }

    pub fn bps(self) -> u64 {
        self.0.round() as u64
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 1e9 && self.0 % 1e9 == 0.0 {
            write!(f, "{}gbit", self.0 / 1e9)
        } else if self.0 >= 1e6 {
            write!(f, "{}mbit", self.0 / 1e6)
        } else if self.0 >= 1e3 {
            write!(f, "{}kbit", self.0 / 1e3)
        } else {
            write!(f, "{}bit", self.0)
        }
    }
}

/// A non-negative time span.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    const EXPECTED: &'static str =
        "a non-negative number with a unit: us, ms, s, min or h, e.g. `40ms`";

    pub fn parse(s: &str) -> Result<HumanDuration, ParseError> {
        let err = || ParseError {
            input: s.into(),
            what: "time",
            expected: Self::EXPECTED,
        };
        let (v, unit) = split_number(s).ok_or_else(err)?;
        let secs = match unit.to_ascii_lowercase().as_str() {
            "us" => v / 1e6,
            "ms" => v / 1e3,
            "s" => v,
            "min" => v * 60.0,
            "h" => v * 3600.0,
            _ => return Err(err()),
        };
        if !(0.0..=1e7).contains(&secs) {
            return Err(err());
        }
        Ok(HumanDuration(Duration::from_secs_f64(secs)))
    }

    const EXPECTED_CLI: &'static str =
        "a non-negative number of seconds, or a number with a unit: us, ms, s, min or h, e.g. `30` or `1.5min`";

    /// Like [`parse`](Self::parse), but a bare number means seconds, as it
    /// does to `iperf3 -t 6` and `timeout 6`. For command-line durations
    /// only: scenario files keep the unit required, since a bare `40` meant
    /// as an RTT in ms would be 40 s there.
    pub fn parse_seconds_default(s: &str) -> Result<HumanDuration, ParseError> {
        let err = || ParseError {
            input: s.into(),
            what: "time",
            expected: Self::EXPECTED_CLI,
        };
        match s.trim().parse::<f64>() {
            Ok(v) if (0.0..=1e7).contains(&v) => Ok(HumanDuration(Duration::from_secs_f64(v))),
            Ok(_) => Err(err()),
            Err(_) => Self::parse(s).map_err(|_| err()),
        }
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_secs_f64() * 1e3;
        if ms >= 1000.0 && ms % 1000.0 == 0.0 {
            write!(f, "{}s", ms / 1000.0)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

/// A bottleneck buffer, in one of three units; [`Buffer::bytes`] resolves it
/// for a given link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Buffer {
    Packets(f64),
    Bytes(f64),
    /// Multiples of the bandwidth-delay product of the link it is used on.
    Bdp(f64),
}

impl Buffer {
    const EXPECTED: &'static str =
        "a positive number with a unit: pkt (full-size packets, at most 1e9), B, kB, MB (bytes, at most 1e12) or bdp (at most 10000), e.g. `100pkt` or `0.5bdp`";

    pub fn parse(s: &str) -> Result<Buffer, ParseError> {
        let err = || ParseError {
            input: s.into(),
            what: "buffer",
            expected: Self::EXPECTED,
        };
        let (v, unit) = split_number(s).ok_or_else(err)?;
        if v <= 0.0 {
            return Err(err());
        }
        // Bounds far above any real queue; past them a value is a typo (and
        // the byte count of a huge buffer would overflow the qdisc's u32).
        let b = match unit {
            "pkt" | "pkts" | "p" | "packets" => Buffer::Packets(v),
            "B" | "b" | "bytes" => Buffer::Bytes(v),
            "kB" | "KB" | "kb" => Buffer::Bytes(v * 1e3),
            "MB" | "mb" => Buffer::Bytes(v * 1e6),
            "bdp" | "BDP" => Buffer::Bdp(v),
            _ => return Err(err()),
        };
        let in_range = match b {
            Buffer::Packets(p) => p <= 1e9,
            Buffer::Bytes(b) => b <= 1e12,
            Buffer::Bdp(x) => x <= 1e4,
        };
        in_range.then_some(b).ok_or_else(err)
    }

    /// Bytes as the bottleneck qdisc counts them (`frame` = MTU + Ethernet
    /// header per full-size packet), for a link of `rate` and base `rtt`.
    pub fn bytes(self, rate: Rate, rtt: Duration, frame: u64) -> u64 {
        let b = match self {
            Buffer::Packets(n) => n * frame as f64,
            Buffer::Bytes(b) => b,
            Buffer::Bdp(m) => m * rate.0 / 8.0 * rtt.as_secs_f64(),
        };
        b.round() as u64
    }
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Buffer::Packets(n) => write!(f, "{n}pkt"),
            Buffer::Bytes(b) => write!(f, "{b}B"),
            Buffer::Bdp(m) => write!(f, "{m}bdp"),
        }
    }
}

macro_rules! serde_via_str {
    ($t:ty) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                <$t>::parse(&s).map_err(de::Error::custom)
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
    };
}
serde_via_str!(Rate);
serde_via_str!(HumanDuration);
serde_via_str!(Buffer);

/// A Unix time in UTC as `YYYY<d>MM<d>DD<sep>hh<t>mm<t>ss<end>`
/// (`-`, ` `, `:`, `` for display; ``, `T`, ``, `Z` for file names).
pub fn utc(unix_s: u64, d: &str, sep: &str, t: &str, end: &str) -> String {
    let (year, month, day) = civil_date(unix_s / 86_400);
    let secs = unix_s % 86_400;
    format!(
        "{year:04}{d}{month:02}{d}{day:02}{sep}{:02}{t}{:02}{t}{:02}{end}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The proleptic Gregorian date `days` days after 1970-01-01. Counted in
/// 400-year eras (146,097 days each) of years starting on 1 March, so the
/// leap day is the last day of a year and needs no special case.
fn civil_date(days: u64) -> (u64, u64, u64) {
    // 719,468 days from 0000-03-01 to 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months counted from March: 0 = March .. 11 = February.
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(Rate::parse("30mbit").map(Rate::bps), Ok(30_000_000));
        assert_eq!(Rate::parse("1.5Gbit/s").map(Rate::bps), Ok(1_500_000_000));
        assert_eq!(Rate::parse("500kbit").map(Rate::bps), Ok(500_000));
        assert_eq!(Rate::parse("20mbps").map(Rate::bps), Ok(20_000_000));
        for bad in [
            "0mbit",
            "-5mbit",
            "30",
            "30 furlongs",
            "NaNmbit",
            "infmbit",
            "",
        ] {
            let e = Rate::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("e.g. `30mbit`"), "{e}");
        }
    }

    #[test]
    fn spans() {
        assert_eq!(
            HumanDuration::parse("40ms").map(|s| s.0),
            Ok(Duration::from_millis(40))
        );
        assert_eq!(
            HumanDuration::parse("3s").map(|s| s.0),
            Ok(Duration::from_secs(3))
        );
        assert_eq!(HumanDuration::parse("0s").map(|s| s.0), Ok(Duration::ZERO));
        assert_eq!(
            HumanDuration::parse("1.5min").map(|s| s.0),
            Ok(Duration::from_secs(90))
        );
        for bad in ["-10ms", "10", "10 parsecs", "NaNs"] {
            assert!(HumanDuration::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn buffers_resolve_per_link() {
        let rate = Rate(20e6);
        let rtt = Duration::from_millis(40);
        // 1 BDP of 20 Mbit/s x 40 ms = 100 000 bytes.
        assert_eq!(
            Buffer::parse("1bdp").map(|b| b.bytes(rate, rtt, 1514)),
            Ok(100_000)
        );
        assert_eq!(
            Buffer::parse("0.3bdp").map(|b| b.bytes(rate, rtt, 1514)),
            Ok(30_000)
        );
        assert_eq!(
            Buffer::parse("100pkt").map(|b| b.bytes(rate, rtt, 1514)),
            Ok(151_400)
        );
        assert_eq!(
            Buffer::parse("150kB").map(|b| b.bytes(rate, rtt, 1514)),
            Ok(150_000)
        );
        for bad in ["0pkt", "-1bdp", "12", "3 bananas"] {
            assert!(Buffer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["30mbit", "40ms", "3s", "100pkt", "0.5bdp"] {
            let shown = match s {
                _ if s.ends_with("bit") => Rate::parse(s).map(|r| r.to_string()),
                _ if s.ends_with('s') => HumanDuration::parse(s).map(|r| r.to_string()),
                _ => Buffer::parse(s).map(|r| r.to_string()),
            };
            assert_eq!(shown.as_deref(), Ok(s));
        }
    }

    #[test]
    fn utc_matches_known_dates() {
        assert_eq!(utc(0, "-", " ", ":", ""), "1970-01-01 00:00:00");
        // 2000-02-29 (a leap day in a century year divisible by 400).
        assert_eq!(utc(951_782_400, "-", " ", ":", ""), "2000-02-29 00:00:00");
        assert_eq!(utc(951_868_799, "-", " ", ":", ""), "2000-02-29 23:59:59");
        assert_eq!(utc(951_955_199, "-", " ", ":", ""), "2000-03-01 23:59:59");
        // 2026-11-24 04:42:10.
        assert_eq!(utc(1_795_495_330, "", "T", "", "Z"), "20261124T044210Z");
        assert_eq!(utc(4_102_444_800, "-", " ", ":", ""), "2100-01-01 00:00:00");
    }

    #[test]
    fn command_line_durations_take_bare_seconds_and_units() {
        let secs = |s: &str| HumanDuration::parse_seconds_default(s).map(|d| d.0.as_secs_f64());
        assert_eq!(secs("6"), Ok(6.0));
        assert_eq!(secs("1.5"), Ok(1.5));
        assert_eq!(secs("30s"), Ok(30.0));
        assert_eq!(secs("40ms"), Ok(0.04));
        assert_eq!(secs("2min"), Ok(120.0));
        for bad in ["-1", "nan", "inf", "1e9", "soon", "6 apples", ""] {
            let e = HumanDuration::parse_seconds_default(bad).expect_err(bad);
            assert!(e.to_string().contains("number of seconds"), "{bad}: {e}");
        }
        // Scenario files keep the unit required.
        assert!(HumanDuration::parse("40").is_err());
    }
}
