//! The `ccctl` command line.
mod lab;
mod trace;

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use ccctl_core::{
    abi, algos, kernel,
    loader::{self, LoadOptions, LoadOutcome, UnloadOutcome},
    params,
};

#[derive(Debug, Parser)]
#[command(
    name = "ccctl",
    version,
    about = "Load, tune, trace and measure BPF TCP congestion controls"
)]
pub struct Cli {
    /// More logging (-v: debug, -vv: trace, including libbpf's messages).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Register an algorithm with the kernel and pin it under <bpffs>/ccctl/<algo>/.
    Load(LoadArgs),
    /// Unregister an algorithm and remove its pins (safe while flows use it).
    Unload(UnloadArgs),
    /// Every algorithm built into this binary, its kernel name, loaded or not.
    List(JsonArg),
    /// Show or change a loaded algorithm's parameters; running flows pick changes up at their next ACK.
    Tune(TuneArgs),
    /// What is loaded, since when, the kernel version and the ABI in use.
    Status(JsonArg),
    /// Experiments on a namespace dumbbell: throughput, delay, retransmissions, fairness, harm.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Per-ACK events of the loaded algorithms into Parquet, CSV or a live per-flow table.
    Trace(trace::TraceArgs),
    /// Load, tune and trace from a config file; SIGHUP reloads it, SIGTERM cleans up.
    Daemon(DaemonArgs),
    /// Benchmark: synthetic events through the trace decoder and Parquet writer.
    #[command(hide = true)]
    TraceBench(TraceBenchArgs),
}

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Configuration file (see examples/daemon.toml).
    #[arg(long, default_value = "/etc/ccctl/daemon.toml")]
    pub config: std::path::PathBuf,
    /// Lock file (default /run/ccctl/daemon.lock).
    #[arg(long, hide = true)]
    pub lock: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct TraceBenchArgs {
    #[arg(long, default_value_t = 5_000_000)]
    pub events: usize,
    #[arg(long)]
    pub out: std::path::PathBuf,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Algorithm to load (see `ccctl list`).
    pub algo: String,
    /// Also make it the system default (net.ipv4.tcp_congestion_control); unload restores the previous one.
    #[arg(long)]
    pub default: bool,
    /// Initial parameters (defaults for the rest), in force before the first flow can use it.
    #[command(flatten)]
    pub values: ParamFlags,
}

/// Parameter values, real numbers (fixed point in the map). Parsed as any
/// f64, NaN, infinities and negative numbers (`-1`, `-inf`) included, so range
/// checks in `params` name the parameter and what is allowed.
#[derive(Debug, Clone, Default, Args)]
pub struct ParamFlags {
    /// Modest BBR: W_min, lower end of the window search, fraction of the window BBR keeps in flight, BtlBw x RTprop (0 < W_min < W_max; default 0.75).
    #[arg(
        long,
        value_name = "X",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub wmin: Option<f64>,
    /// Modest BBR: W_max, upper end of the window search, fraction of the window BBR keeps in flight, BtlBw x RTprop (W_min < W_max <= 1; default 1.0).
    #[arg(
        long,
        value_name = "X",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub wmax: Option<f64>,
    /// Modest BBR: S_min, smallest window search step in packets (whole, 1 to 64; default 1).
    #[arg(
        long,
        value_name = "N",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub smin: Option<f64>,
    /// BBR family: PROBE_BW cwnd gain, in-flight cap in BDPs (1 to 4; default 2).
    #[arg(
        long,
        value_name = "X",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub cwnd_gain: Option<f64>,
    /// BBR family: PROBE_BW up-probe pacing gain (1 to 2; default 1.25).
    #[arg(
        long,
        value_name = "X",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub probe_up_gain: Option<f64>,
    /// Patched BBR: on-percentage Θ above which descheduling is 'little' (theta_heavy < X <= 1; default 2/3).
    #[arg(
        long,
        value_name = "X",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub theta_little: Option<f64>,
    /// Patched BBR: on-percentage Θ at or below which descheduling is 'heavy' (0 < X < theta_little; default 1/3).
    #[arg(
        long,
        value_name = "X",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub theta_heavy: Option<f64>,
    /// Patched BBR: a send gap this many ms longer than the pacing gap counts as Off (0.1 to 100; default 1).
    #[arg(
        long,
        value_name = "MS",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub off_thresh: Option<f64>,
    /// Patched BBR: eq. 38 alpha, BDPs added to the cwnd gain when Θ > theta_little (0 to 4; default 0).
    #[arg(
        long,
        value_name = "X",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub alpha_little: Option<f64>,
    /// Patched BBR: eq. 38 alpha when theta_heavy < Θ <= theta_little (0 to 4; default 1).
    #[arg(
        long,
        value_name = "X",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub alpha_medium: Option<f64>,
    /// Patched BBR: eq. 38 alpha when Θ <= theta_heavy (0 to 4; default 2).
    #[arg(
        long,
        value_name = "X",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub alpha_heavy: Option<f64>,
    /// Patched BBR: 1 leaves the whole machine's stalls out of Off (emulated testbeds only; 0 or 1; default 0).
    #[arg(
        long,
        value_name = "0|1",
        allow_hyphen_values = true,
        help_heading = "Parameters"
    )]
    pub stall_filter: Option<f64>,
}

/// Ids of the `ParamFlags` arguments, for `--reset`'s conflicts.
const PARAM_FLAG_IDS: [&str; 12] = [
    "stall_filter",
    "wmin",
    "wmax",
    "smin",
    "cwnd_gain",
    "probe_up_gain",
    "theta_little",
    "theta_heavy",
    "off_thresh",
    "alpha_little",
    "alpha_medium",
    "alpha_heavy",
];

impl ParamFlags {
    /// The values given, by parameter name.
    pub fn changes(&self) -> BTreeMap<String, f64> {
        [
            (params::W_MIN.name, self.wmin),
            (params::W_MAX.name, self.wmax),
            (params::S_MIN.name, self.smin),
            (params::CWND_GAIN.name, self.cwnd_gain),
            (params::PROBE_UP_GAIN.name, self.probe_up_gain),
            (params::THETA_LITTLE.name, self.theta_little),
            (params::THETA_HEAVY.name, self.theta_heavy),
            (params::OFF_THRESH.name, self.off_thresh),
            (params::ALPHA_LITTLE.name, self.alpha_little),
            (params::ALPHA_MEDIUM.name, self.alpha_medium),
            (params::ALPHA_HEAVY.name, self.alpha_heavy),
            (params::STALL_FILTER.name, self.stall_filter),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
        .collect()
    }
}

#[derive(Debug, Args)]
pub struct TuneArgs {
    /// Algorithm to tune; may be left out when exactly one loaded algorithm has every parameter named.
    pub algo: Option<String>,
    #[command(flatten)]
    pub values: ParamFlags,
    /// Print JSON (algorithm, version, and per parameter its value, default and bounds).
    #[arg(long)]
    pub json: bool,
    /// Restore every parameter's default.
    #[arg(long, conflicts_with_all = PARAM_FLAG_IDS)]
    pub reset: bool,
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct UnloadArgs {
    /// Algorithm to unload.
    pub algo: Option<String>,
    /// Unload every algorithm ccctl has loaded.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cli: Cli) -> Result<()> {
    if matches!(
        cli.command,
        Command::Load(_) | Command::Unload(_) | Command::Tune(_) | Command::Status(_)
    ) {
        switch_off_orphaned_tracing();
    }
    match cli.command {
        Command::Load(args) => load(args),
        Command::Unload(args) => unload(args),
        Command::List(args) => list(args),
        Command::Tune(args) => tune(args),
        Command::Status(args) => status(args),
        Command::Lab(cmd) => lab::run(cmd, cli.verbose),
        Command::Trace(args) => trace::run(args),
        Command::Daemon(args) => crate::daemon::run(crate::daemon::DaemonOptions {
            config: args.config,
            lock: args.lock,
        }),
        Command::TraceBench(args) => {
            let rate = ccctl_lab::consumer_bench::consumer_rate(args.events, &args.out)?;
            println!(
                "consumer: {} events through decode + Parquet in {:.2} s: {:.2} M events/s",
                args.events,
                args.events as f64 / rate,
                rate / 1e6
            );
            Ok(())
        }
    }
}

/// Test-only fault injection, from `CCCTL_FAULT_INJECT` (e.g. `verifier`).
fn fault_inject_from_env() -> Result<u32> {
    match std::env::var("CCCTL_FAULT_INJECT").ok().as_deref() {
        None | Some("") => Ok(0),
        Some("verifier") => Ok(abi::CCCTL_FAULT_VERIFIER),
        Some(other) => bail!("CCCTL_FAULT_INJECT={other}: allowed values are `verifier` or empty"),
    }
}

/// A tracer killed with SIGKILL leaves tracing switched on, and the
/// algorithms keep filling a ring buffer nobody reads; the next command
/// that manages algorithms switches it off and says so.
fn switch_off_orphaned_tracing() {
    match ccctl_core::trace::switch_off_orphaned() {
        Ok(Some(pid)) => tracing::warn!(
            "tracing was left on by a trace session (pid {pid}) that is gone; switched it off"
        ),
        Ok(None) => {}
        Err(e) => tracing::debug!("checking for tracing left on: {e}"),
    }
}

fn load(args: LoadArgs) -> Result<()> {
    let algo = algos::find(&args.algo)?;
    // Validated before anything is loaded: a bad value loads nothing.
    let changes = args.values.changes();
    let initial = if changes.is_empty() {
        None
    } else {
        Some(params::initial(algo, &changes)?)
    };
    let opts = LoadOptions {
        set_default: args.default,
        fault_inject: fault_inject_from_env()?,
        params: initial,
    };
    match loader::load(algo, &opts)? {
        LoadOutcome::Loaded {
            abi,
            previous_default,
        } => {
            println!(
                "loaded {} as `{}` ({}); pinned in {}",
                algo.name,
                algo.kernel_name,
                kernel::describe_abi(abi),
                loader::pin_dir(algo).display()
            );
            if let Some(p) = initial {
                let given: Vec<_> = params::view_of(algo, &p)
                    .params
                    .into_iter()
                    .filter(|v| changes.contains_key(v.name))
                    .map(|v| format!("{} {} (default {})", v.name, v.value, v.default))
                    .collect();
                println!(
                    "initial parameters: {}; the rest at their defaults",
                    given.join(", ")
                );
            }
            if let Some(prev) = previous_default {
                println!(
                    "default congestion control: {prev} -> {} (unload restores {prev})",
                    algo.kernel_name
                );
            }
        }
        LoadOutcome::AlreadyLoaded { made_default } => {
            println!(
                "{} is already loaded as `{}`; nothing to do",
                algo.name, algo.kernel_name
            );
            if made_default {
                println!("made `{}` the default congestion control", algo.kernel_name);
            }
        }
    }
    Ok(())
}

fn unload(args: UnloadArgs) -> Result<()> {
    let results = if args.all {
        loader::unload_all()?
    } else {
        let name = args.algo.context("name an algorithm or pass --all")?;
        let algo = algos::find(&name)?;
        vec![(algo.name, loader::unload(algo)?)]
    };
    if results.is_empty() {
        println!("nothing is loaded");
    }
    for (name, outcome) in results {
        match outcome {
            UnloadOutcome::Unloaded { restored_default } => {
                print!("unloaded {name}");
                match restored_default {
                    Some(d) => println!("; default congestion control restored to {d}"),
                    None => println!(),
                }
            }
            UnloadOutcome::NotLoaded => println!("{name} is not loaded; nothing to do"),
        }
    }
    Ok(())
}

fn tune(args: TuneArgs) -> Result<()> {
    kernel::check_privileges()?;
    let changes = args.values.changes();
    let algo = match &args.algo {
        Some(name) => algos::find(name)?,
        None => {
            let names: Vec<&str> = changes.keys().map(String::as_str).collect();
            params::pick(&params::loaded()?, &names).map_err(|e| anyhow!("{e}"))?
        }
    };
    let change = if args.reset {
        params::reset_change(algo)?
    } else if changes.is_empty() {
        let view = params::view(algo)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&view)?);
        } else {
            print_params(&view);
        }
        return Ok(());
    } else {
        params::update(algo, &changes)?
    };
    let (before, after) = (
        params::view_of(algo, &change.before),
        params::view_of(algo, &change.after),
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&after)?);
        return Ok(());
    }
    println!(
        "{} (`{}`): parameter set version {} -> {}{}",
        algo.name,
        algo.kernel_name,
        before.version,
        after.version,
        if args.reset {
            ", defaults restored"
        } else {
            ""
        }
    );
    let mut any = false;
    for (b, a) in before.params.iter().zip(&after.params) {
        if b.raw != a.raw {
            println!("  {:<14} {} -> {}", a.name, b.value, a.value);
            any = true;
        }
    }
    if !any {
        println!("  no value changed");
    }
    println!("running flows use the new set from their next ACK");
    Ok(())
}

fn print_params(v: &params::SetView) {
    println!(
        "{} (`{}`): parameter set version {}{}",
        v.algorithm,
        v.kernel_name,
        v.version,
        if v.version == 0 {
            " (never written: defaults in force)"
        } else {
            ""
        }
    );
    if v.params.is_empty() {
        println!("no tunable parameters");
        return;
    }
    println!(
        "{:<14} {:<16} {:>8} {:>8}  {:<22} UNIT",
        "PARAMETER", "FLAG", "VALUE", "DEFAULT", "ALLOWED"
    );
    for p in &v.params {
        println!(
            "{:<14} {:<16} {:>8} {:>8}  {:<22} {}",
            p.name, p.flag, p.value, p.default, p.allowed, p.unit
        );
    }
}

fn list(args: JsonArg) -> Result<()> {
    let entries = loader::list()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(());
    }
    println!(
        "{:<14} {:<14} {:<8} DESCRIPTION",
        "NAME", "KERNEL NAME", "LOADED"
    );
    for e in entries {
        println!(
            "{:<14} {:<14} {:<8} {}",
            e.name,
            e.kernel_name,
            if e.loaded { "yes" } else { "no" },
            e.summary
        );
    }
    Ok(())
}

fn status(args: JsonArg) -> Result<()> {
    let st = loader::status()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&st)?);
        return Ok(());
    }
    println!("kernel:  {}", st.kernel_release);
    println!("abi:     {}", st.kernel_abi);
    println!("default: {}", st.default_congestion_control);
    if st.loaded.is_empty() {
        println!("loaded:  nothing");
        return Ok(());
    }
    println!();
    println!(
        "{:<14} {:<14} {:<10} {:<33} {:<8} ABI",
        "NAME", "KERNEL NAME", "STATE", "LOADED AT (UTC)", "DEFAULT"
    );
    for l in st.loaded {
        println!(
            "{:<14} {:<14} {:<10} {:<33} {:<8} {}",
            l.name,
            l.kernel_name,
            if l.registered { "loaded" } else { "stale-pins" },
            format!("{} ({})", utc(l.loaded_at_unix_s), ago(l.loaded_for_s)),
            if l.is_default { "yes" } else { "no" },
            l.abi
        );
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS` in UTC.
fn utc(unix_s: u64) -> String {
    ccctl_core::units::utc(unix_s, "-", " ", ":", "")
}

fn ago(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s ago"),
        60..=3599 => format!("{}m ago", s / 60),
        _ => format!("{}h{}m ago", s / 3600, (s % 3600) / 60),
    }
}
