//! Property tests of ccctl-core's parsers: units (rates, times,
//! buffers, command-line seconds), trace endpoints and every tunable
//! parameter's value check, fed arbitrary text (any Unicode, control bytes),
//! near-valid text from a grammar of numbers and units, and any f64 bit
//! pattern (NaN, infinities, subnormals). Properties: no panic; an accepted
//! value is finite and inside the bounds the docs state; a refusal names what
//! was expected; valid input round-trips to the value computed here from the
//! documented unit factors (never with the code under test).
//!
//! Cases per property: `CCCTL_FUZZ_CASES` (default 20,000 in CI's budget;
//! `CCCTL_FUZZ_CASES=1000000 cargo test -p ccctl-core --test parsers_fuzz
//! --release` for a million).
use std::collections::BTreeMap;

use ccctl_core::{
    params, registry,
    trace::Endpoint,
    units::{Buffer, HumanDuration, Rate},
};
use proptest::prelude::*;

#[path = "common/documented_params.rs"]
#[allow(dead_code)] // defaults and flags serve params.rs's unit test
mod documented_params;
use documented_params::{documented, in_range};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: ccctl_core::fuzz::cases(20_000),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Numbers as people (and typos) write them, followed by a unit or junk.
const NEAR_VALID: &str = "[ \t]{0,2}[+-]{0,2}[0-9]{0,12}(\\.[0-9]{0,6})?([eE][+-]?[0-9]{1,4})?[ ]?\
(bit|kbit|mbit|gbit|Mbit|GBIT|bps|kbps|mbps|gbps|us|ms|s|min|h|pkt|pkts|p|packets|B|b|bytes|kB|KB|kb|MB|mb|bdp|BDP|x|µs|)(/s)?[ \t]{0,2}";

fn refusal_names(msg: &str, input: &str, what: &str) -> bool {
    msg.contains(&format!("is not a {what}")) && msg.contains(input)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn rates_accept_only_finite_positive_bounded(s in prop_oneof!["\\PC{0,24}", ".{0,24}", NEAR_VALID]) {
        match Rate::parse(&s) {
            Ok(r) => prop_assert!(r.0.is_finite() && r.0 > 0.0 && r.0 <= 1e12, "{s:?} -> {r:?}"),
            Err(e) => prop_assert!(refusal_names(&e.to_string(), &s, "rate"), "{e}"),
        }
    }

    #[test]
    fn times_accept_only_finite_nonnegative_bounded(s in prop_oneof!["\\PC{0,24}", ".{0,24}", NEAR_VALID]) {
        match HumanDuration::parse(&s) {
            Ok(d) => prop_assert!(d.0.as_secs_f64() <= 1e7, "{s:?} -> {d:?}"),
            Err(e) => prop_assert!(refusal_names(&e.to_string(), &s, "time"), "{e}"),
        }
        match HumanDuration::parse_seconds_default(&s) {
            Ok(d) => prop_assert!(d.0.as_secs_f64() <= 1e7, "{s:?} -> {d:?}"),
            Err(e) => prop_assert!(refusal_names(&e.to_string(), &s, "time"), "{e}"),
        }
    }

    #[test]
    fn buffers_accept_only_finite_positive_bounded(s in prop_oneof!["\\PC{0,24}", ".{0,24}", NEAR_VALID]) {
        match Buffer::parse(&s) {
            Ok(Buffer::Packets(v)) => prop_assert!(v.is_finite() && v > 0.0 && v <= 1e9, "{s:?} -> {v}"),
            Ok(Buffer::Bytes(v)) => prop_assert!(v.is_finite() && v > 0.0 && v <= 1e12, "{s:?} -> {v}"),
            Ok(Buffer::Bdp(v)) => prop_assert!(v.is_finite() && v > 0.0 && v <= 1e4, "{s:?} -> {v}"),
            Err(e) => prop_assert!(refusal_names(&e.to_string(), &s, "buffer"), "{e}"),
        }
    }

    /// `{v}{unit}` means v times the unit's documented factor.
    #[test]
    fn valid_quantities_round_trip(v in 0.001f64..100_000.0, u in 0usize..4, t in 0usize..5, b in 0usize..4) {
        let (rate_unit, rate_factor) = [("bit", 1.0), ("kbit", 1e3), ("mbit", 1e6), ("gbit", 1e9)][u];
        // Rates are documented up to 1000gbit.
        match Rate::parse(&format!("{v}{rate_unit}")) {
            Ok(r) => prop_assert!((r.0 - v * rate_factor).abs() <= 1e-9 * v * rate_factor),
            Err(e) => prop_assert!(v * rate_factor > 1e12, "{v}{rate_unit} refused: {e}"),
        }
        let (time_unit, secs) = [("us", 1e-6), ("ms", 1e-3), ("s", 1.0), ("min", 60.0), ("h", 3600.0)][t];
        // Times are documented up to 1e7 s (115 days).
        match HumanDuration::parse(&format!("{v}{time_unit}")) {
            Ok(d) => prop_assert!((d.0.as_secs_f64() - v * secs).abs() <= 1e-6 + 1e-9 * v * secs),
            Err(e) => prop_assert!(v * secs > 1e7, "{v}{time_unit} refused: {e}"),
        }
        let v = v / 10.0; // within every buffer unit's bound (bdp: 10,000)
        let want = v * [1.0, 1.0, 1e3, 1.0][b];
        match (b, Buffer::parse(&format!("{v}{}", ["pkt", "B", "kB", "bdp"][b])).expect("valid buffer")) {
            (0, Buffer::Packets(x)) | (1 | 2, Buffer::Bytes(x)) | (3, Buffer::Bdp(x)) => {
                prop_assert!((x - want).abs() <= 1e-9 * want)
            }
            (_, other) => prop_assert!(false, "{v} unit {b} parsed as {other:?}"),
        }
    }

    #[test]
    fn endpoints_never_panic_and_name_the_forms(s in prop_oneof!["\\PC{0,30}", "[0-9.:]{0,24}", "(\\[[0-9a-f:]{0,20}(/[0-9]{0,3})?\\])?:?[0-9]{0,6}", "[0-9a-f:]{0,30}(/[0-9]{0,3})?"]) {
        match Endpoint::parse(&s) {
            Ok(e) => prop_assert!(e.addr.is_some() || e.port.is_some_and(|p| p != 0)),
            Err(m) => prop_assert!(m.contains("expected") && m.contains(&s), "{m}"),
        }
    }

    #[test]
    fn valid_endpoints_round_trip(a: [u8; 4], port in 1u16..) {
        let ip = std::net::Ipv4Addr::from(a);
        let e = Endpoint::parse(&format!("{ip}:{port}")).expect("valid endpoint");
        prop_assert_eq!((e.addr, e.port), (Some(ip.into()), Some(port)));
    }

    #[test]
    fn valid_ipv6_endpoints_round_trip(a: u128, port in 1u16.., len in 0u8..=128) {
        let ip = std::net::Ipv6Addr::from(a);
        let e = Endpoint::parse(&format!("[{ip}]:{port}")).expect("valid endpoint");
        prop_assert_eq!((e.addr, e.prefix, e.port), (Some(ip.into()), None, Some(port)));
        let e = Endpoint::parse(&format!("{ip}/{len}")).expect("valid prefix");
        prop_assert_eq!((e.addr, e.prefix, e.port), (Some(ip.into()), Some(len), None));
    }

    /// Every parameter of every algorithm, any f64: accepted only inside its
    /// documented bounds (and whole where it must be); refused naming the
    /// algorithm and the parameter with its flag.
    #[test]
    fn parameter_values_are_bounded_or_refused_by_name(bits: u64, pick: usize, near in -1e3f64..1e3) {
        let defs: Vec<(&registry::Algorithm, &params::ParamDef)> = registry::ALGORITHMS
            .iter()
            .flat_map(|a| params::defs_for(a).iter().map(move |d| (a, d)))
            .collect();
        let (algo, def) = defs[pick % defs.len()];
        // The bounds the docs state, written out by hand: never the table
        // under test.
        let doc = documented(def.name);
        // Half arbitrary bit patterns, half values near the bounds.
        let v = if bits % 2 == 0 { f64::from_bits(bits) } else { near / 100.0 * doc.max.abs().max(1.0) };
        let changes = BTreeMap::from([(def.name.to_string(), v)]);
        let current = params::defaults();
        // Pairs checked together (w_min < w_max, theta_heavy < theta_little)
        // refuse some in-range values against the other's default.
        let paired = matches!(def.name, "w_min" | "w_max" | "theta_little" | "theta_heavy");
        match params::validate(algo, &changes, &current) {
            Ok(_) => {
                prop_assert!(in_range(doc, v), "{} accepted {v}, documented {}{}..{}{}{}", def.name,
                    if doc.min_exclusive { "(" } else { "[" }, doc.min, doc.max,
                    if doc.max_exclusive { ")" } else { "]" }, if doc.whole { ", whole" } else { "" });
            }
            Err(e) => {
                let m = e.to_string();
                prop_assert!(m.contains(algo.name) && m.contains(&format!("--{}", def.flag)), "{m}");
                prop_assert!(!in_range(doc, v) || paired, "{} refused {v}, documented as valid: {m}", def.name);
            }
        }
    }
}
