//! `ccctl tune` and `ccctl load ALGO --PARAM X` against the live params map:
//! every change is one update (version bumped), every refusal leaves the
//! map, its version and the kernel's state as they were.
//! Shared by the host and VM test binaries.
use serde_json::Value;

use super::{ccctl, registered, snapshot, Clean};

/// `ccctl tune ALGO --json`, parsed.
pub fn view(algo: &str) -> Value {
    let out = ccctl(&["tune", algo, "--json"]).ok();
    serde_json::from_str(&out.stdout).expect("tune --json is JSON")
}

pub fn value(v: &Value, name: &str) -> f64 {
    v["params"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .and_then(|p| p["value"].as_f64())
        .unwrap_or_else(|| panic!("no {name} in {v}"))
}

pub fn version(v: &Value) -> u64 {
    v["version"]
        .as_u64()
        .unwrap_or_else(|| panic!("no version in {v}"))
}

/// Is this build's algorithm list carrying `name`?
fn built_in(name: &str) -> bool {
    let out = ccctl(&["list", "--json"]).ok();
    let v: Value = serde_json::from_str(&out.stdout).expect("list --json is JSON");
    v.as_array()
        .is_some_and(|a| a.iter().any(|e| e["name"] == name))
}

/// Each case must fail naming `needles`, with `algo`'s whole view
/// (values and version) and the kernel's state unchanged.
pub fn refused_without_change(algo: &str, cases: &[(&[&str], &[&str])]) {
    let before = view(algo);
    let state = snapshot();
    for (args, needles) in cases {
        let mut full = vec!["tune"];
        full.extend_from_slice(args);
        let out = ccctl(&full).failed_with(needles);
        assert!(out.stdout.is_empty(), "{args:?} printed {}", out.stdout);
        assert_eq!(view(algo), before, "{args:?} changed the map");
        assert_eq!(snapshot(), state, "{args:?} changed kernel state");
    }
}

pub fn tune_shows_changes_resets_and_infers_the_algorithm() {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    let v = view("bpf-bbr");
    assert_eq!(v["algorithm"], "bpf-bbr");
    assert_eq!(v["kernel_name"], "bpf_bbr");
    assert_eq!(version(&v), 1, "load writes version 1: {v}");
    assert_eq!(
        (value(&v, "cwnd_gain"), value(&v, "probe_up_gain")),
        (2.0, 1.25)
    );
    let cwnd = &v["params"][0];
    assert_eq!(
        (
            cwnd["default"].as_f64(),
            cwnd["min"].as_f64(),
            cwnd["max"].as_f64()
        ),
        (Some(2.0), Some(1.0), Some(4.0))
    );
    assert_eq!(
        v["params"].as_array().map(Vec::len),
        Some(2),
        "bbr has the two gains only: {v}"
    );

    let table = ccctl(&["tune", "bpf-bbr"]).ok();
    for needle in [
        "version 1",
        "cwnd_gain",
        "--probe-up-gain",
        "DEFAULT",
        "1 to 4",
    ] {
        assert!(
            table.stdout.contains(needle),
            "{needle:?} missing:\n{}",
            table.stdout
        );
    }

    let out = ccctl(&["tune", "bpf-bbr", "--cwnd-gain", "3"]).ok();
    assert!(
        out.stdout.contains("cwnd_gain") && out.stdout.contains("2 -> 3"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("version 1 -> 2"), "{}", out.stdout);
    let v = view("bpf-bbr");
    assert_eq!(
        (
            version(&v),
            value(&v, "cwnd_gain"),
            value(&v, "probe_up_gain")
        ),
        (2, 3.0, 1.25)
    );

    // No algorithm named: bbr is the only one loaded with that parameter.
    let out = ccctl(&[
        "tune",
        "--probe-up-gain",
        "1.5",
        "--cwnd-gain",
        "2.5",
        "--json",
    ])
    .ok();
    let printed: Value =
        serde_json::from_str(&out.stdout).expect("tune --json after a change is JSON");
    assert_eq!(printed, view("bpf-bbr"), "--json prints the resulting view");
    assert_eq!(
        (
            version(&printed),
            value(&printed, "cwnd_gain"),
            value(&printed, "probe_up_gain")
        ),
        (3, 2.5, 1.5)
    );
    let table = ccctl(&["tune"]).ok();
    assert!(
        table.stdout.contains("bpf-bbr (`bpf_bbr`)") && table.stdout.contains("version 3"),
        "{}",
        table.stdout
    );

    let out = ccctl(&["tune", "--reset"]).ok();
    assert!(
        out.stdout.contains("defaults restored") && out.stdout.contains("2.5 -> 2"),
        "{}",
        out.stdout
    );
    let v = view("bpf-bbr");
    assert_eq!(
        (
            version(&v),
            value(&v, "cwnd_gain"),
            value(&v, "probe_up_gain")
        ),
        (4, 2.0, 1.25)
    );

    // A parameter no loaded algorithm has: nothing to infer.
    refused_without_change(
        "bpf-bbr",
        &[(
            &["--wmin", "0.75"],
            &[
                "no loaded algorithm has",
                "w_min (--wmin)",
                "bpf-bbr (cwnd_gain, probe_up_gain)",
            ],
        )],
    );
}

pub fn tune_refuses_bad_input_and_changes_nothing() {
    let _clean = Clean::new();
    ccctl(&["load", "bpf-bbr"]).ok();
    ccctl(&["tune", "bpf-bbr", "--cwnd-gain", "3"]).ok();
    let range = ["cwnd_gain (--cwnd-gain)", "1 to 4"];
    refused_without_change(
        "bpf-bbr",
        &[
            (
                &["bpf-bbr", "--cwnd-gain", "nan"],
                &["not a number", range[0], range[1]],
            ),
            (
                &["bpf-bbr", "--cwnd-gain", "NaN"],
                &["not a number", range[0]],
            ),
            (
                &["bpf-bbr", "--cwnd-gain", "inf"],
                &["not a finite number", range[0], range[1]],
            ),
            (
                &["bpf-bbr", "--cwnd-gain", "-inf"],
                &["not a finite number", range[0]],
            ),
            (
                &["bpf-bbr", "--cwnd-gain", "-1"],
                &["-1 is out of range", range[0], range[1]],
            ),
            (
                &["bpf-bbr", "--cwnd-gain", "5.0"],
                &["5 is out of range", range[0], range[1]],
            ),
            (
                &["bpf-bbr", "--cwnd-gain", "0.5"],
                &["out of range", range[0]],
            ),
            (
                &["bpf-bbr", "--probe-up-gain", "2.5"],
                &["probe_up_gain (--probe-up-gain)", "1 to 2"],
            ),
            // Several values, one bad: none is written.
            (
                &["bpf-bbr", "--cwnd-gain", "2", "--probe-up-gain", "9"],
                &["probe_up_gain (--probe-up-gain)", "1 to 2"],
            ),
            (
                &["--cwnd-gain", "4", "--probe-up-gain", "nan"],
                &["probe_up_gain (--probe-up-gain)", "not a number"],
            ),
            // Parameters bbr does not have, valid ones listed.
            (
                &["bpf-bbr", "--wmin", "0.5"],
                &[
                    "w_min (--wmin)",
                    "not a parameter of bpf-bbr",
                    "valid: cwnd_gain (--cwnd-gain), probe_up_gain (--probe-up-gain)",
                ],
            ),
            (
                &["bpf-bbr", "--smin", "2", "--cwnd-gain", "2"],
                &["s_min (--smin)", "not a parameter of bpf-bbr"],
            ),
            (
                &["bpf-bbr", "--wmin", "0.9", "--wmax", "0.8"],
                &["not a parameter of bpf-bbr"],
            ),
            // clap: not a number at all, and --reset with values.
            (
                &["bpf-bbr", "--cwnd-gain", "abc"],
                &["--cwnd-gain", "invalid float"],
            ),
            (&["bpf-bbr", "--cwnd-gain", ""], &["--cwnd-gain"]),
            (
                &["bpf-bbr", "--reset", "--cwnd-gain", "2"],
                &["--reset", "cannot be used with", "--cwnd-gain"],
            ),
            (
                &["nosuch", "--cwnd-gain", "2"],
                &["unknown algorithm `nosuch`"],
            ),
        ],
    );
    assert_eq!(value(&view("bpf-bbr"), "cwnd_gain"), 3.0);
    assert_eq!(version(&view("bpf-bbr")), 2);

    // Not loaded: a clear error, and still nothing loaded.
    ccctl(&["unload", "bpf-bbr"]).ok();
    let state = snapshot();
    ccctl(&["tune", "bpf-bbr", "--cwnd-gain", "3"])
        .failed_with(&["bpf-bbr is not loaded", "ccctl load bpf-bbr"]);
    ccctl(&["tune", "bpf-bbr"]).failed_with(&["bpf-bbr is not loaded"]);
    ccctl(&["tune", "bpf-bbr", "--reset"]).failed_with(&["bpf-bbr is not loaded"]);
    ccctl(&["tune", "--cwnd-gain", "3"]).failed_with(&["no ccctl algorithm is loaded"]);
    assert_eq!(snapshot(), state);
    assert!(!registered("bpf_bbr"));
}

pub fn load_with_parameters_validates_first_and_refuses_when_loaded() {
    let _clean = Clean::new();
    let state = snapshot();
    for (args, needles) in [
        (
            &["load", "bpf-bbr", "--wmin", "0.5"][..],
            &[
                "w_min (--wmin)",
                "not a parameter of bpf-bbr",
                "valid: cwnd_gain",
            ][..],
        ),
        (
            &["load", "bpf-bbr", "--cwnd-gain", "9"],
            &["cwnd_gain (--cwnd-gain)", "1 to 4"],
        ),
        (
            &["load", "bpf-bbr", "--cwnd-gain", "nan", "--default"],
            &["not a number"],
        ),
        (
            &["load", "bpf-bbr", "--probe-up-gain", "-1"],
            &["probe_up_gain (--probe-up-gain)", "out of range"],
        ),
    ] {
        ccctl(args).failed_with(needles);
        assert!(!registered("bpf_bbr"), "{args:?} loaded bpf_bbr");
        assert_eq!(snapshot(), state, "{args:?} changed kernel state");
    }

    let out = ccctl(&[
        "load",
        "bpf-bbr",
        "--cwnd-gain",
        "3",
        "--probe-up-gain",
        "1.1",
    ])
    .ok();
    assert!(
        out.stdout.contains("initial parameters: cwnd_gain 3"),
        "{}",
        out.stdout
    );
    let v = view("bpf-bbr");
    assert_eq!(
        (
            version(&v),
            value(&v, "cwnd_gain"),
            value(&v, "probe_up_gain")
        ),
        (1, 3.0, 1.1)
    );

    // Already loaded: the values are not silently dropped.
    let state = snapshot();
    ccctl(&["load", "bpf-bbr", "--cwnd-gain", "2", "--default"])
        .failed_with(&["already loaded", "ccctl tune bpf-bbr"]);
    assert_eq!(view("bpf-bbr"), v);
    assert_eq!(snapshot(), state);
    // Without values, loading twice is still fine.
    ccctl(&["load", "bpf-bbr"]).ok();
    assert_eq!(view("bpf-bbr"), v);
}

/// Modest BBR's window parameters (w_min, w_max, s_min) and the gains.
pub fn modest_bbr_window_parameters() {
    let _clean = Clean::new();
    assert!(
        built_in("modest-bbr"),
        "this build has no modest-bbr: `ccctl list`"
    );
    let state = snapshot();
    for (args, needles) in [
        (
            &["load", "modest-bbr", "--wmin", "0.9", "--wmax", "0.8"][..],
            &["w_min 0.9 must be below w_max 0.8"][..],
        ),
        (
            &["load", "modest-bbr", "--smin", "65"],
            &["s_min (--smin)", "1 to 64"],
        ),
        (
            &["load", "modest-bbr", "--wmin", "0"],
            &["w_min (--wmin)", "above 0, below 1"],
        ),
    ] {
        ccctl(args).failed_with(needles);
        assert!(!registered("modest_bbr"), "{args:?} loaded modest_bbr");
        assert_eq!(snapshot(), state, "{args:?} changed kernel state");
    }

    ccctl(&["load", "modest-bbr", "--wmin", "0.6"]).ok();
    let v = view("modest-bbr");
    assert_eq!(v["kernel_name"], "modest_bbr");
    assert_eq!(version(&v), 1);
    assert_eq!(value(&v, "w_min"), 0.6, "{v}");
    assert_eq!(
        (
            value(&v, "w_max"),
            value(&v, "s_min"),
            value(&v, "cwnd_gain"),
            value(&v, "probe_up_gain")
        ),
        (1.0, 1.0, 2.0, 1.25)
    );

    // The example, inferred: only modest-bbr has w_min.
    ccctl(&[
        "tune",
        "--wmin",
        "0.75",
        "--smin",
        "1",
        "--wmax",
        "1.0",
        "--cwnd-gain",
        "2",
    ])
    .ok();
    ccctl(&["tune", "--wmin", "0.5", "--wmax", "0.7", "--smin", "8"]).ok();
    let v = view("modest-bbr");
    assert_eq!(
        (
            version(&v),
            value(&v, "w_min"),
            value(&v, "w_max"),
            value(&v, "s_min")
        ),
        (3, 0.5, 0.7, 8.0)
    );

    let w = ["w_min (--wmin)", "0 < w_min < w_max <= 1"];
    refused_without_change(
        "modest-bbr",
        &[
            (
                &["modest-bbr", "--wmin", "0.9", "--wmax", "0.8"],
                &["w_min 0.9 must be below w_max 0.8", w[1]],
            ),
            // Against the set in force (w_max 0.7).
            (
                &["modest-bbr", "--wmin", "0.7"],
                &["w_min 0.7 must be below w_max 0.7", w[1]],
            ),
            (&["--wmax", "0.4"], &["w_min 0.5 must be below w_max 0.4"]),
            (&["modest-bbr", "--wmin", "0"], &[w[0], "above 0"]),
            (
                &["modest-bbr", "--wmin", "0.0001"],
                &[w[0], "rounds to 0", "above 0"],
            ),
            (&["modest-bbr", "--wmin", "-1"], &[w[0], "out of range"]),
            (&["modest-bbr", "--wmin", "nan"], &[w[0], "not a number"]),
            (
                &["modest-bbr", "--wmax", "inf"],
                &["w_max (--wmax)", "not a finite number"],
            ),
            (
                &["modest-bbr", "--wmax", "1.5"],
                &["w_max (--wmax)", "up to 1"],
            ),
            (
                &["modest-bbr", "--smin", "1.5"],
                &["s_min (--smin)", "whole number", "1 to 64"],
            ),
            (
                &["modest-bbr", "--smin", "65"],
                &["s_min (--smin)", "1 to 64"],
            ),
            (
                &["modest-bbr", "--smin", "0"],
                &["s_min (--smin)", "1 to 64"],
            ),
            (
                &[
                    "modest-bbr",
                    "--smin",
                    "4",
                    "--wmin",
                    "0.6",
                    "--cwnd-gain",
                    "5",
                ],
                &["cwnd_gain (--cwnd-gain)", "1 to 4"],
            ),
        ],
    );

    // With bpf-bbr loaded too, a gain alone names two candidates.
    ccctl(&["load", "bpf-bbr"]).ok();
    ccctl(&["tune", "--cwnd-gain", "3"]).failed_with(&[
        "several loaded algorithms",
        "bpf-bbr (",
        "modest-bbr (",
    ]);
    ccctl(&["tune"]).failed_with(&["several loaded algorithms"]);
    ccctl(&["tune", "--smin", "2"]).ok();
    assert_eq!(value(&view("modest-bbr"), "s_min"), 2.0);
    assert_eq!(value(&view("bpf-bbr"), "cwnd_gain"), 2.0);

    ccctl(&["tune", "modest-bbr", "--reset"]).ok();
    let v = view("modest-bbr");
    assert_eq!(
        (value(&v, "w_min"), value(&v, "w_max"), value(&v, "s_min")),
        (0.75, 1.0, 1.0)
    );
    ccctl(&["load", "modest-bbr", "--wmin", "0.6"])
        .failed_with(&["already loaded", "ccctl tune modest-bbr"]);
    assert_eq!(view("modest-bbr"), v);
}
