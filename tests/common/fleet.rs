//! The daemon as a fleet agent, from the outside: its Prometheus endpoint
//! scraped during a traced flow and parsed by the reference Python client's
//! OpenMetrics parser; two daemons with different host names writing into
//! one Hive-partitioned tree, read back by DuckDB as one table (and by the
//! shipped example query).
use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ccctl_lab::iperf::{self, FlowSpec};
use ccctl_lab::testbed::{Role, Testbed, TestbedConfig};

use super::lab::wait_for;
use super::tracing::trace_cfg_enabled;
use super::{ccctl_bin, registered, tempdir, Clean, Spawned};

/// Python with prometheus-client and duckdb (installed by `cargo xtask setup`).
const PYTHON: &str = "/opt/ccctl/venv/bin/python3";
/// The port the daemon listens on inside the sender namespace (its own).
const PORT: u16 = 9560;

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// `GET /metrics` from inside the namespace at `netns`.
fn scrape(netns: &Path) -> Result<String, String> {
    ccctl_sys::netns::run_in(netns, || -> Result<String, String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", PORT)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: application/openmetrics-text\r\n\r\n")
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out).map_err(|e| e.to_string())?;
        Ok(out)
    })
    .map_err(|e| format!("{e:?}"))?
}

/// One parsed sample: metric name, labels, value.
#[derive(Debug, Clone)]
struct MetricSample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The body parsed by prometheus_client's OpenMetrics parser (strict: it
/// refuses a malformed exposition, a counter without `_total`, no `# EOF`),
/// with each family's type.
fn parse(body: &str) -> (Vec<MetricSample>, BTreeMap<String, String>) {
    let script = "import json, sys\n\
                  from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
                  out = {'samples': [], 'types': {}}\n\
                  for fam in text_string_to_metric_families(sys.stdin.read()):\n\
                  \x20   out['types'][fam.name] = fam.type\n\
                  \x20   for s in fam.samples:\n\
                  \x20       out['samples'].append({'name': s.name, 'labels': s.labels, 'value': s.value})\n\
                  print(json.dumps(out))";
    let mut child = Command::new(PYTHON)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with prometheus-client (cargo xtask setup installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("writing the body");
    let out = child.wait_with_output().expect("parser");
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the endpoint's text: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("parser output");
    let samples = v["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| MetricSample {
            name: s["name"].as_str().unwrap_or("").to_string(),
            labels: s["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default(),
            value: s["value"].as_f64().unwrap_or(f64::NAN),
        })
        .collect();
    let types = v["types"]
        .as_object()
        .expect("types")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect();
    (samples, types)
}

/// The value of `name` with exactly these labels (panics if absent or twice).
#[track_caller]
fn value(samples: &[MetricSample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let hits: Vec<&MetricSample> = samples
        .iter()
        .filter(|s| s.name == name && s.labels == want)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "{name}{want:?}: {} samples; those named {name}: {:?}",
        hits.len(),
        samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| &s.labels)
            .collect::<Vec<_>>()
    );
    hits[0].value
}

fn body_of(response: &str) -> &str {
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "metrics response: {}",
        &response[..response.len().min(300)]
    );
    assert!(
        response.contains("Content-Type: application/openmetrics-text"),
        "{response}"
    );
    response.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

fn daemon_toml(trace_dir: &Path, host: &str, metrics: bool, cwnd_gain: f64) -> String {
    let mut t = format!(
        "on_exit = \"unload\"\n[[algorithms]]\nname = \"bpf-bbr\"\nparams = {{ cwnd_gain = {cwnd_gain:.1} }}\n\
         [trace]\nout_dir = \"{}\"\nalgo = [\"bpf-bbr\"]\nlayout = \"hive\"\nhost = \"{host}\"\n",
        trace_dir.display()
    );
    if metrics {
        t += &format!("[metrics]\nlisten = \"127.0.0.1:{PORT}\"\n");
    }
    t
}

/// `ccctl daemon` in the network namespace `netns` (None: this one).
fn spawn_daemon(cfg: &Path, lock: &Path, netns: Option<&Path>, log: &Path) -> Spawned {
    let mut cmd = match netns {
        // nsenter switches only the network namespace (`ip netns exec`
        // would also remount /sys, hiding the BPF filesystem).
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", ns.display())).arg(ccctl_bin());
            c
        }
        None => Command::new(ccctl_bin()),
    };
    cmd.args(["daemon", "--config"])
        .arg(cfg)
        .arg("--lock")
        .arg(lock)
        .stdin(Stdio::null())
        .stderr(fs::File::create(log).expect("daemon log"));
    Spawned::new(cmd.spawn().expect("spawning ccctl daemon"))
}

/// SIGTERM, and the daemon's exit status and log.
fn stop_daemon(d: Spawned, log: &Path) -> (bool, String) {
    let mut child = d.take();
    ccctl_sys::signals::kill(child.id(), rustix::process::Signal::TERM);
    let ok = child.wait().expect("daemon exit").success();
    (ok, fs::read_to_string(log).unwrap_or_default())
}

/// The endpoint scraped twice during a traced bpf_bbr flow: every family
/// parses, labels name the algorithm and parameter, the trace counters move
/// between the scrapes, the running flow is counted, the parameter in force
/// is the config's; a refused SIGHUP shows as `last_reload_success 0` and a
/// `refused` reload. A metrics address already in use is refused at start,
/// naming `metrics.listen`, before anything is loaded.
pub fn metrics_endpoint_during_a_traced_flow() {
    let _clean = Clean::new();
    let dir = tempdir("fleet-metrics");

    // Bind error: the port is taken (in this namespace); nothing is loaded.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("addr").port();
    let bad = dir.join("bad.toml");
    fs::write(
        &bad,
        daemon_toml(&dir.join("t0"), "h0", false, 2.0)
            + &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .expect("config");
    let run = super::ccctl(&[
        "daemon",
        "--config",
        bad.to_str().unwrap_or(""),
        "--lock",
        dir.join("bad.lock").to_str().unwrap_or(""),
    ]);
    let run = run.failed_with(&["metrics.listen", &format!("127.0.0.1:{port}")]);
    assert!(
        !registered("bpf_bbr"),
        "a bind error loaded bpf_bbr: {}",
        run.stderr
    );
    drop(taken);

    let tb = Testbed::new(TestbedConfig::new(20_000_000, 100_000)).expect("testbed");
    let netns = PathBuf::from("/run/netns").join(tb.ns(Role::Sender(0)));
    let cfg = dir.join("daemon.toml");
    let log = dir.join("daemon.log");
    fs::write(&cfg, daemon_toml(&dir.join("traces"), "fleet-a", true, 2.0)).expect("config");
    // The Hive layout closes a file when the UTC hour turns: the only
    // rotation this test can see (256 MB and 1 h are far off).
    let hour_at_start = unix_hour();
    let daemon = spawn_daemon(&cfg, &dir.join("daemon.lock"), Some(&netns), &log);
    wait_for(
        "the daemon to load bpf_bbr, trace and serve metrics",
        Duration::from_secs(30),
        || registered("bpf_bbr") && trace_cfg_enabled() && scrape(&netns).is_ok(),
    );
    let running = iperf::spawn_flows(&tb, &[FlowSpec::new(0, "bpf_bbr", Duration::from_secs(6))])
        .expect("flow");
    std::thread::sleep(Duration::from_secs(2));
    let first = scrape(&netns).expect("first scrape");
    std::thread::sleep(Duration::from_secs(2));
    let second = scrape(&netns).expect("second scrape");
    // Listed after the scrape: every file the counter had counted is there.
    let finished = files_under(&dir.join("traces"), |name| {
        name.ends_with(".parquet") && !name.starts_with('.')
    });
    let hours_turned = unix_hour() - hour_at_start;
    running.wait().expect("flow");

    // A refused reload.
    fs::write(&cfg, "[[algorithms]]\nname = \"nosuch\"\n").expect("bad config");
    ccctl_sys::signals::kill(daemon.id(), rustix::process::Signal::HUP);
    wait_for(
        "the daemon to refuse the new config",
        Duration::from_secs(10),
        || fs::read_to_string(&log).is_ok_and(|l| l.contains("config refused")),
    );
    let third = scrape(&netns).expect("third scrape");
    let (ok, log_text) = stop_daemon(daemon, &log);
    assert!(ok, "daemon: {log_text}");

    let (s1, types) = parse(body_of(&first));
    let (s2, _) = parse(body_of(&second));
    let (s3, _) = parse(body_of(&third));
    println!(
        "metrics: {} families, {} samples; e.g. {:?}",
        types.len(),
        s2.len(),
        s2.iter()
            .filter(|s| s.name.starts_with("ccctl_trace"))
            .map(|s| (&s.name, s.value))
            .collect::<Vec<_>>()
    );
    // Conventions: ccctl_ prefix; counters are counters (the parser
    // requires their samples to end in _total); units in the name.
    assert!(types.keys().all(|n| n.starts_with("ccctl_")), "{types:?}");
    for c in [
        "ccctl_trace_events_written",
        "ccctl_trace_events_produced",
        "ccctl_trace_events_dropped",
        "ccctl_trace_files_rotated",
        "ccctl_config_reloads",
    ] {
        assert_eq!(types.get(c).map(String::as_str), Some("counter"), "{c}");
    }
    assert_eq!(
        types
            .get("ccctl_config_last_reload_timestamp_seconds")
            .map(String::as_str),
        Some("gauge")
    );

    let bbr = [("algorithm", "bpf-bbr"), ("kernel_name", "bpf_bbr")];
    let modest = [("algorithm", "modest-bbr"), ("kernel_name", "modest_bbr")];
    for s in [&s1, &s2] {
        assert_eq!(value(s, "ccctl_algorithm_loaded", &bbr), 1.0);
        assert_eq!(value(s, "ccctl_algorithm_loaded", &modest), 0.0);
        assert_eq!(value(s, "ccctl_algorithm_in_config", &bbr), 1.0);
        assert_eq!(value(s, "ccctl_algorithm_in_config", &modest), 0.0);
        // The flow's data connection runs bpf_bbr in the daemon's namespace.
        assert!(value(s, "ccctl_algorithm_flows", &bbr) >= 1.0);
        assert_eq!(value(s, "ccctl_algorithm_flows", &modest), 0.0);
        assert!(value(s, "ccctl_algorithm_params_version", &bbr) >= 1.0);
        let mut gain = bbr.to_vec();
        gain.extend([("param", "cwnd_gain"), ("unit", "x BDP")]);
        let g = value(s, "ccctl_algorithm_param_value", &gain);
        assert_eq!(g, 2.0, "cwnd_gain in force");
        assert_eq!(value(s, "ccctl_trace_enabled", &[]), 1.0);
        assert_eq!(value(s, "ccctl_config_last_reload_success", &[]), 1.0);
        assert_eq!(
            value(s, "ccctl_config_reloads_total", &[("result", "refused")]),
            0.0
        );
    }
    let counter = |s: &[MetricSample], n: &str| value(s, n, &[]);
    let (w1, w2) = (
        counter(&s1, "ccctl_trace_events_written_total"),
        counter(&s2, "ccctl_trace_events_written_total"),
    );
    let (p1, p2) = (
        counter(&s1, "ccctl_trace_events_produced_total"),
        counter(&s2, "ccctl_trace_events_produced_total"),
    );
    assert!(w1 > 0.0 && w2 > w1, "events written: {w1} then {w2}");
    assert!(p2 > p1, "events produced: {p1} then {p2}");
    let d2 = counter(&s2, "ccctl_trace_events_dropped_total");
    assert!(w2 + d2 <= p2, "written {w2} + dropped {d2} > produced {p2}");
    // No rotation unless the hour turned (CI once crossed 16:00 UTC here);
    // then at most one per hour turned, each a finished file.
    let rotated = counter(&s2, "ccctl_trace_files_rotated_total");
    assert!(
        rotated <= hours_turned as f64 && rotated <= finished.len() as f64,
        "{rotated} files rotated with {hours_turned} hour(s) turned and {} finished: {finished:?}",
        finished.len()
    );

    assert_eq!(value(&s3, "ccctl_config_last_reload_success", &[]), 0.0);
    assert_eq!(
        value(&s3, "ccctl_config_reloads_total", &[("result", "refused")]),
        1.0
    );
    assert_eq!(
        value(&s3, "ccctl_config_reloads_total", &[("result", "applied")]),
        0.0
    );
    let t1 = value(&s1, "ccctl_config_last_reload_timestamp_seconds", &[]);
    let t3 = value(&s3, "ccctl_config_last_reload_timestamp_seconds", &[]);
    assert!(t3 > t1, "reload time {t1} then {t3}");
    // Still running with the old configuration.
    assert_eq!(value(&s3, "ccctl_algorithm_in_config", &bbr), 1.0);
    assert!(
        log_text.contains("metrics on http://127.0.0.1:9560/metrics"),
        "{log_text}"
    );
    let _ = tb.destroy();
}

/// The files under `root` (recursively) whose name `keep` accepts.
fn files_under(root: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("dir").flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else if keep(&e.file_name().to_string_lossy()) {
                found.push(e.path());
            }
        }
    }
    found
}

/// The hour since the Unix epoch: a Hive-layout trace file ends with it.
fn unix_hour() -> u64 {
    ccctl_core::sys::time::now_unix() / 3600
}

/// DuckDB (Python) over `tree`: JSON of `sql`'s rows.
fn duckdb(cwd: &Path, sql: &str) -> serde_json::Value {
    let script = "import duckdb, json, sys\n\
                  rel = duckdb.sql(sys.stdin.read())\n\
                  cols = rel.columns\n\
                  print(json.dumps([dict(zip(cols, r)) for r in rel.fetchall()], default=str))";
    let mut child = Command::new(PYTHON)
        .args(["-c", script])
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with duckdb (cargo xtask setup installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(sql.as_bytes())
        .expect("sql");
    let out = child.wait_with_output().expect("duckdb");
    assert!(
        out.status.success(),
        "duckdb: {}\n{sql}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("duckdb output")
}

/// Two daemons, one after the other, with different host names and one
/// output directory: DuckDB reads the tree as one table with both hosts
/// (from the partition path and, separately, from the data's own `host`
/// column), and the shipped fleet query counts the retransmissions of both
/// (each flow loses three listed packets on the userspace path).
pub fn two_daemons_write_one_partitioned_table() {
    let _clean = Clean::new();
    let dir = tempdir("fleet-hive");
    let traces = dir.join("traces");
    // Each flow's data connection loses packets 40, 41 and 300 (the loss
    // list counts per connection): every flow has retransmissions, so the
    // query's count is checked against a known non-zero total.
    let tb = Testbed::new(
        TestbedConfig::new(20_000_000, 30_000)
            .userspace()
            .with_loss_list(0, &[40, 41, 300]),
    )
    .expect("testbed");
    let mut ports = BTreeMap::new();
    for host in ["fleet-a", "fleet-b"] {
        let cfg = dir.join(format!("{host}.toml"));
        let log = dir.join(format!("{host}.log"));
        fs::write(&cfg, daemon_toml(&traces, host, false, 2.0)).expect("config");
        let d = spawn_daemon(&cfg, &dir.join(format!("{host}.lock")), None, &log);
        wait_for(
            "the daemon to load bpf_bbr and trace",
            Duration::from_secs(30),
            || registered("bpf_bbr") && trace_cfg_enabled(),
        );
        let r = iperf::run_flows(&tb, &[FlowSpec::new(0, "bpf_bbr", Duration::from_secs(2))])
            .expect("flow");
        ports.insert(host, r[0].local_port.expect("local port"));
        let (ok, log_text) = stop_daemon(d, &log);
        assert!(ok, "{host}: {log_text}");
        assert!(!registered("bpf_bbr"), "{host} unloads on exit");
    }
    // Nothing half-written is left where a collector looks.
    let partial = files_under(&traces, |name| name.ends_with(".partial"));
    assert!(partial.is_empty(), "{partial:?}");

    let by_partition = duckdb(
        &dir,
        "SELECT host, algo, count(*) AS events, count(DISTINCT sport) AS ports, \
                min(date) AS date, min(hour) AS hour \
         FROM read_parquet('traces/**/*.parquet', hive_partitioning = true) \
         GROUP BY ALL ORDER BY host",
    );
    println!("by host (partition): {by_partition}");
    let rows = by_partition.as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{by_partition}");
    for (row, host) in rows.iter().zip(["fleet-a", "fleet-b"]) {
        assert_eq!(row["host"], host);
        assert_eq!(row["algo"], "bpf_bbr");
        assert!(row["events"].as_u64().unwrap_or(0) > 100, "{row}");
    }
    // The data's own column, without the path's help; and each host's
    // events are its own flow's.
    let by_column = duckdb(
        &dir,
        "SELECT host, list(DISTINCT sport ORDER BY sport) AS sports \
         FROM read_parquet('traces/**/*.parquet', hive_partitioning = false) \
         GROUP BY host ORDER BY host",
    );
    println!("by host (column): {by_column}");
    let rows = by_column.as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{by_column}");
    for (row, host) in rows.iter().zip(["fleet-a", "fleet-b"]) {
        assert_eq!(row["host"], host);
        let sports = row["sports"].to_string();
        assert!(
            sports.contains(&ports[host].to_string()),
            "{host}'s flow (port {}) in {sports}",
            ports[host]
        );
    }
    // The example query, as shipped.
    let sql = fs::read_to_string(repo_file("examples/fleet/query.sql")).expect("query.sql");
    let result = duckdb(&dir, &sql);
    println!("examples/fleet/query.sql: {result}");
    let rows = result.as_array().expect("rows");
    assert!(!rows.is_empty(), "{result}");
    let hosts: u64 = rows
        .iter()
        .filter(|r| r["algo"] == "bpf_bbr")
        .map(|r| r["hosts"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let flows: u64 = rows.iter().map(|r| r["flows"].as_u64().unwrap_or(0)).sum();
    // Both hosts' flows (the hour may have turned between the two runs).
    assert!(hosts >= 1 && flows >= 2, "{result}");
    // Hour by hour it adds up to each flow's whole count (first to last
    // traced ACK), computed here without the query's hour logic.
    let whole = duckdb(
        &dir,
        "SELECT sum(r) AS retransmissions FROM (\
           SELECT max(total_retrans) - min(total_retrans) AS r \
           FROM read_parquet('traces/**/*.parquet', hive_partitioning = true) \
           GROUP BY host, flow_id)",
    );
    let expect = whole[0]["retransmissions"].as_f64().unwrap_or(-1.0);
    // Three listed drops in each of the two flows: never 0 == 0.
    assert!(
        expect >= 6.0,
        "the two flows' traces show {expect} retransmissions for 2 x 3 listed drops: {whole}"
    );
    let got: f64 = rows
        .iter()
        .map(|r| r["retransmissions"].as_f64().unwrap_or(f64::NAN))
        .sum();
    assert_eq!(got, expect, "query.sql {result} vs whole flows {whole}");
    let _ = tb.destroy();
}
