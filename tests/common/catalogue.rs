//! Issue 14: a catalogue of bad input across every command. Each entry is
//! refused (non-zero exit) with a message that names the field or flag and
//! says what is allowed, and changes nothing: the same congestion controls
//! registered, the same default, the same pins, the same parameter sets of
//! the algorithms loaded meanwhile, no file or directory created.
use super::*;

/// A refusal: arguments, extra environment, and what stderr must say.
struct Bad {
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    says: Vec<&'static str>,
}

fn bad(args: &[&str], says: &[&'static str]) -> Bad {
    Bad {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        says: says.to_vec(),
    }
}

/// Everything a refused command must leave as it was.
#[derive(Debug, PartialEq)]
struct State {
    kernel: Snapshot,
    bbr_params: String,
    modest_params: String,
    scratch: Vec<String>,
}

fn state(scratch: &Path) -> State {
    let mut files: Vec<String> = fs::read_dir(scratch)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    State {
        kernel: snapshot(),
        bbr_params: ccctl(&["tune", "bpf-bbr", "--json"]).ok().stdout,
        modest_params: ccctl(&["tune", "modest-bbr", "--json"]).ok().stdout,
        scratch: files,
    }
}

pub fn bad_inputs_are_refused_by_name_and_change_nothing() {
    let _clean = Clean::new();
    let scratch = super::tempdir("catalogue");
    let s = |name: &str| scratch.join(name).to_string_lossy().into_owned();
    fs::write(
        s("unknown-field.toml"),
        "name = \"x\"\nflows = \"cubic:1\"\nspeed = \"fast\"\n",
    )
    .expect("write");
    fs::write(
        s("bad-rate.toml"),
        "name = \"x\"\nflows = \"cubic:1\"\n[link]\nrate = \"-3mbit\"\n",
    )
    .expect("write");
    fs::write(
        s("daemon-bad-name.toml"),
        "[[algorithms]]\nname = \"nosuch\"\n",
    )
    .expect("write");
    fs::write(
        s("daemon-bad-param.toml"),
        "[[algorithms]]\nname = \"bpf-bbr\"\nparams = { cwnd_gain = 9.0 }\n",
    )
    .expect("write");
    fs::write(
        s("daemon-small-rotation.toml"),
        "[trace]\nout_dir = \"/tmp/ccctl-catalogue-never\"\nrotate_size = \"1kB\"\n",
    )
    .expect("write");
    fs::write(
        s("daemon-bad-listen.toml"),
        "[metrics]\nlisten = \"localhost:9560\"\n",
    )
    .expect("write");
    fs::write(
        s("daemon-bad-host.toml"),
        "[trace]\nout_dir = \"/tmp/ccctl-catalogue-never\"\nlayout = \"hive\"\nhost = \"../etc\"\n",
    )
    .expect("write");
    fs::write(
        s("daemon-bad-remote.toml"),
        "[trace]\nout_dir = \"/tmp/ccctl-catalogue-never\"\nremote = \"[fd00:ccc::2/200]:5201\"\n",
    )
    .expect("write");
    fs::write(s("a-file"), "not a directory").expect("write");

    ccctl(&["load", "bpf-bbr"]).ok();
    ccctl(&["load", "modest-bbr"]).ok();
    ccctl(&["tune", "modest-bbr", "--wmin", "0.6"]).ok();

    let not_a_dir = format!("{}/x.parquet", s("a-file"));
    let csv_in_missing = s("missing/x.csv");
    let out_dir = s("results");
    let cases: Vec<Bad> = vec![
        // load
        bad(
            &["load", "nosuch"],
            &["unknown algorithm `nosuch`", "known algorithms:"],
        ),
        bad(&["load"], &["<ALGO>"]),
        bad(
            &["load", "dstar", "--gain-floor", "0"],
            &["gain_floor (--gain-floor)", "1 to 64"],
        ),
        bad(
            &["load", "dstar", "--gain-floor", "2.5"],
            &["gain_floor (--gain-floor)", "whole number"],
        ),
        bad(
            &["load", "dstar", "--sigma-factor", "-1"],
            &["sigma_factor (--sigma-factor)", "0 to 8"],
        ),
        bad(
            &["load", "dstar", "--min-rtt-win-ms", "5"],
            &["min_rtt_win_ms (--min-rtt-win-ms)", "10 to 600000"],
        ),
        bad(
            &["load", "dstar", "--wmin", "0.5"],
            &["w_min (--wmin)", "not a parameter of dstar"],
        ),
        bad(
            &["load", "dstar", "--drain-rtts", "NaN"],
            &["drain_rtts (--drain-rtts)", "not a number"],
        ),
        bad(
            &["load", "dstar", "--gain1-rtts", "inf"],
            &["gain1_rtts (--gain1-rtts)", "not a finite number"],
        ),
        bad(
            &["load", "dstar", "--gain2-rtts", "17"],
            &["gain2_rtts (--gain2-rtts)", "1 to 16"],
        ),
        bad(
            &["load", "dstar", "--gain-floor", "many"],
            &["--gain-floor", "many"],
        ),
        Bad {
            env: vec![("CCCTL_VMLINUX_BTF", "/nonexistent/vmlinux".into())],
            ..bad(
                &["load", "dstar"],
                &[
                    "no kernel BTF at /nonexistent/vmlinux",
                    "CONFIG_DEBUG_INFO_BTF",
                ],
            )
        },
        Bad {
            env: vec![("CCCTL_BPFFS", scratch.to_string_lossy().into_owned())],
            ..bad(
                &["load", "dstar"],
                &["bpffs is not mounted at", "CCCTL_BPFFS"],
            )
        },
        // unload
        bad(&["unload", "nosuch"], &["unknown algorithm `nosuch`"]),
        bad(&["unload"], &["<ALGO|--all>"]),
        bad(
            &["unload", "bpf-bbr", "--all"],
            &["--all", "cannot be used with"],
        ),
        // tune
        bad(
            &["tune", "bpf-bbr", "--cwnd-gain", "0.5"],
            &["cwnd_gain (--cwnd-gain)", "1 to 4"],
        ),
        bad(
            &["tune", "bpf-bbr", "--cwnd-gain", "4.01"],
            &["cwnd_gain (--cwnd-gain)", "1 to 4"],
        ),
        bad(
            &["tune", "bpf-bbr", "--cwnd-gain", "nan"],
            &["cwnd_gain (--cwnd-gain)", "not a number"],
        ),
        bad(
            &["tune", "bpf-bbr", "--cwnd-gain", "-inf"],
            &["cwnd_gain (--cwnd-gain)", "not a finite number"],
        ),
        bad(
            &["tune", "bpf-bbr", "--cwnd-gain", "1e999"],
            &["cwnd_gain (--cwnd-gain)", "not a finite number"],
        ),
        bad(
            &["tune", "bpf-bbr", "--cwnd-gain", "abc"],
            &["--cwnd-gain", "abc"],
        ),
        bad(&["tune", "bpf-bbr", "--cwnd-gain", ""], &["--cwnd-gain"]),
        bad(
            &["tune", "bpf-bbr", "--probe-up-gain", "2.5"],
            &["probe_up_gain (--probe-up-gain)", "1 to 2"],
        ),
        bad(
            &["tune", "bpf-bbr", "--wmin", "0.5"],
            &["w_min (--wmin)", "not a parameter of bpf-bbr"],
        ),
        bad(
            &["tune", "modest-bbr", "--wmin", "0"],
            &["w_min (--wmin)", "above 0"],
        ),
        bad(
            &["tune", "modest-bbr", "--wmin", "0.9", "--wmax", "0.8"],
            &["w_min", "w_max"],
        ),
        bad(
            &["tune", "modest-bbr", "--wmax", "1.5"],
            &["w_max (--wmax)", "up to 1"],
        ),
        bad(
            &["tune", "modest-bbr", "--wmax", "0.5"],
            &["w_max", "w_min"],
        ),
        bad(
            &["tune", "modest-bbr", "--smin", "0"],
            &["s_min (--smin)", "1 to 64"],
        ),
        bad(
            &["tune", "modest-bbr", "--smin", "1.5"],
            &["s_min (--smin)", "whole number"],
        ),
        bad(
            &["tune", "modest-bbr", "--smin", "65"],
            &["s_min (--smin)", "1 to 64"],
        ),
        bad(
            &["tune", "modest-bbr", "--quiet-rounds", "1025"],
            &["quiet_rounds (--quiet-rounds)", "0 to 1024"],
        ),
        bad(
            &["tune", "modest-bbr", "--quiet-rounds", "2.5"],
            &["quiet_rounds (--quiet-rounds)", "whole number"],
        ),
        bad(
            &["tune", "dstar", "--gain-floor", "4"],
            &["dstar", "not loaded"],
        ),
        bad(
            &["tune", "nosuch", "--cwnd-gain", "2"],
            &["unknown algorithm `nosuch`"],
        ),
        bad(
            &["tune", "bpf-bbr", "--reset", "--cwnd-gain", "2"],
            &["--reset", "cannot be used with"],
        ),
        // trace
        bad(&["trace"], &["--out", "--follow"]),
        bad(
            &["trace", "--follow", "--duration", "-5"],
            &["--duration", "not a time"],
        ),
        bad(
            &["trace", "--follow", "--duration", "5x"],
            &["--duration", "not a time"],
        ),
        bad(
            &["trace", "--follow", "--duration", "nan"],
            &["--duration", "not a time"],
        ),
        bad(
            &["trace", "--follow", "--local", "1.2.3"],
            &["--local", "IPV4"],
        ),
        bad(
            &["trace", "--follow", "--remote", ":0"],
            &["--remote", "IPV4"],
        ),
        bad(
            &["trace", "--follow", "--remote", "fd00:ccc::/129"],
            &["--remote", "an IPv6 prefix length is 0 to 128"],
        ),
        bad(
            &["trace", "--follow", "--local", "[fd00:ccc::1]:0"],
            &["--local", "port `0`", "[IPV6[/LEN]]:PORT"],
        ),
        bad(
            &["trace", "--follow", "--local", "[198.18.1.1]:5201"],
            &["--local", "brackets are for IPv6"],
        ),
        bad(
            &["trace", "--follow", "--port", "70000"],
            &["--port", "70000"],
        ),
        bad(&["trace", "--follow", "--sample", "0"], &["--sample"]),
        bad(
            &["trace", "--follow", "--algo", "nosuch"],
            &["--algo", "nosuch"],
        ),
        bad(
            &["trace", "--out", &not_a_dir, "--duration", "1"],
            &["x.parquet"],
        ),
        bad(
            &["trace", "--csv", &csv_in_missing, "--duration", "1"],
            &["x.csv"],
        ),
        // lab (check validates everything run does, without running)
        bad(
            &["lab", "check", "--flows", "cubic:1", "--rate", "0mbit"],
            &["rate", "positive number"],
        ),
        bad(
            &["lab", "check", "--flows", "cubic:1", "--rate", "fast"],
            &["rate", "mbit"],
        ),
        bad(
            &[
                "lab", "check", "--flows", "cubic:1", "--rate", "5000gbit", "--rtt", "40ms",
            ],
            &["--rate", "5000gbit", "at most 1000gbit"],
        ),
        bad(
            &["lab", "check", "--flows", "cubic:1", "--rtt", "-40ms"],
            &["rtt", "non-negative"],
        ),
        bad(
            &["lab", "check", "--flows", "cubic:1", "--buffer", "0bdp"],
            &["buffer", "positive number"],
        ),
        bad(
            &[
                "lab", "check", "--flows", "cubic:1", "--loss", "1.5", "--rate", "20mbit", "--rtt",
                "40ms",
            ],
            &["loss"],
        ),
        bad(
            &[
                "lab", "check", "--flows", "cubic:1", "--loss", "nan", "--rate", "20mbit", "--rtt",
                "40ms",
            ],
            &["loss"],
        ),
        bad(
            &[
                "lab", "check", "--flows", "cubic:1", "--aqm", "red", "--rate", "20mbit", "--rtt",
                "40ms",
            ],
            &["aqm", "unknown variant `red`", "fq_codel"],
        ),
        bad(
            &[
                "lab", "check", "--flows", "cubic:0", "--rate", "20mbit", "--rtt", "40ms",
            ],
            &["flows"],
        ),
        bad(
            &[
                "lab", "check", "--flows", "nosuch:1", "--rate", "20mbit", "--rtt", "40ms",
            ],
            &["nosuch"],
        ),
        bad(
            &[
                "lab",
                "check",
                "--flows",
                "cubic:251",
                "--rate",
                "20mbit",
                "--rtt",
                "40ms",
            ],
            &["flows", "250"],
        ),
        bad(
            &[
                "lab",
                "check",
                "--flows",
                "cubic:1",
                "--duration",
                "0s",
                "--rate",
                "20mbit",
                "--rtt",
                "40ms",
            ],
            &["duration"],
        ),
        bad(
            &[
                "lab",
                "check",
                "--flows",
                "cubic:1",
                "--repetitions",
                "0",
                "--rate",
                "20mbit",
                "--rtt",
                "40ms",
            ],
            &["repetitions"],
        ),
        bad(
            &["lab", "check", "/nonexistent/scenario.toml"],
            &["/nonexistent/scenario.toml"],
        ),
        bad(&["lab", "check", &s("unknown-field.toml")], &["speed"]),
        bad(
            &["lab", "check", &s("bad-rate.toml")],
            &["line 4 (`rate`)", "-3mbit", "positive number"],
        ),
        bad(
            &["lab", "run", &s("bad-rate.toml"), "--out", &out_dir],
            &["line 4 (`rate`)", "-3mbit", "positive number"],
        ),
        bad(
            &["lab", "run", "--flows", "cubic:1", "--where", "mars"],
            &["--where", "mars"],
        ),
        bad(
            &[
                "lab", "run", "--flows", "cubic:1", "--rate", "20mbit", "--rtt", "0ms", "--shard",
                "0/3", "--out", &out_dir,
            ],
            &["--shard", "0/3", "K must be 1 to 3"],
        ),
        bad(
            &[
                "lab", "check", "--flows", "cubic:1", "--rate", "20mbit", "--rtt", "0ms",
                "--shard", "2/x",
            ],
            &["--shard", "2/x", "N is not a whole number"],
        ),
        bad(
            &["lab", "merge", &s("a-file"), "--out", &out_dir],
            &["reading ", "a-file/metadata.json"],
        ),
        bad(&["lab", "merge", "--out", &out_dir], &["<DIRS>"]),
        // daemon
        bad(
            &["daemon", "--config", "/nonexistent/daemon.toml"],
            &["/nonexistent/daemon.toml"],
        ),
        bad(
            &["daemon", "--config", &s("daemon-bad-name.toml")],
            &["algorithms[0].name", "nosuch"],
        ),
        bad(
            &["daemon", "--config", &s("daemon-bad-param.toml")],
            &["algorithms[0].params", "cwnd_gain"],
        ),
        bad(
            &["daemon", "--config", &s("daemon-small-rotation.toml")],
            &["trace.rotate_size", "1 MiB"],
        ),
        bad(
            &["daemon", "--config", &s("daemon-bad-listen.toml")],
            &["metrics.listen", "localhost:9560", "not a host name"],
        ),
        bad(
            &["daemon", "--config", &s("daemon-bad-host.toml")],
            &["trace.host", "../etc"],
        ),
        bad(
            &["daemon", "--config", &s("daemon-bad-remote.toml")],
            &["trace.remote", "an IPv6 prefix length is 0 to 128"],
        ),
        // the rest
        bad(&["completions", "tcsh"], &["tcsh"]),
        bad(&["frobnicate"], &["frobnicate"]),
    ];
    assert!(
        cases.len() >= 50,
        "the catalogue holds {} entries",
        cases.len()
    );

    let before = state(&scratch);
    let mut failures = Vec::new();
    for c in &cases {
        let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = c.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let run = ccctl_env(&args, &env);
        let missing: Vec<&&str> = c
            .says
            .iter()
            .filter(|n| !run.stderr.contains(**n))
            .collect();
        if run.code == 0 || !missing.is_empty() {
            failures.push(format!(
                "ccctl {:?}: exit {}, stderr lacks {missing:?}:\n{}",
                c.args, run.code, run.stderr
            ));
        }
        let after = state(&scratch);
        if after != before {
            failures.push(format!(
                "ccctl {:?} changed something:\nbefore {before:?}\nafter {after:?}",
                c.args
            ));
            break;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} entries:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
