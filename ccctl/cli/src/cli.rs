//! The `ccctl` command line.
#[cfg(feature = "lab")]
mod lab;
pub mod policy;
mod trace;

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use ccctl_core::{
    abi, kernel,
    loader::{self, LoadOptions, LoadOutcome, UnloadOutcome},
    params, pins, registry, status,
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
    #[cfg(feature = "lab")]
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Per-ACK events of the loaded algorithms into Parquet, CSV or a live per-flow table.
    Trace(trace::TraceArgs),
    /// Rollout policy: which new connections get which algorithm (by port, prefix, cgroup, netns), canaries, rollback.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Load, tune and trace from a config file; SIGHUP reloads it, SIGTERM cleans up.
    Daemon(DaemonArgs),
    /// Print a shell completion script (e.g. `ccctl completions bash > /etc/bash_completion.d/ccctl`).
    Completions(CompletionsArgs),
    /// Print the man page, roff (e.g. `ccctl man | man -l -`).
    Man,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Configuration file (see examples/daemon.toml; a fleet agent with a
    /// Prometheus endpoint and Hive-partitioned traces: examples/fleet/).
    #[arg(long, default_value = "/etc/ccctl/daemon.toml")]
    pub config: std::path::PathBuf,
    /// Lock file (default /run/ccctl/daemon.lock).
    #[arg(long, hide = true)]
    pub lock: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Algorithm to load (see `ccctl list`).
    pub algo: String,
    /// Also make it the system default (net.ipv4.tcp_congestion_control); unload restores the previous one.
    #[arg(long)]
    pub default: bool,
    /// Hot upgrade: swap the loaded algorithm for a fresh load of its object under the same
    /// name (struct_ops link update, Linux 6.4+); running connections keep the old one, new
    /// ones get the new one, the parameter set in force carries over.
    #[arg(long, conflicts_with_all = ["default", PARAM_FLAGS])]
    pub replace: bool,
    /// Load it from this BPF object file (your own build of the algorithm) instead of the object built into ccctl; it must register the algorithm's kernel name.
    #[arg(long, value_name = "FILE.bpf.o", conflicts_with = "replace")]
    pub object: Option<std::path::PathBuf>,
    /// With --replace: the audit log to record the swap in (default: $CCCTL_AUDIT, else
    /// /var/lib/ccctl/audit.jsonl).
    #[arg(long, value_name = "FILE", requires = "replace")]
    pub audit: Option<std::path::PathBuf>,
    /// Initial parameters (defaults for the rest), in force before the first flow can use it.
    #[command(flatten)]
    pub values: ParamFlags,
}

/// Parameter values, real numbers (fixed point in the map): one flag per
/// parameter of any algorithm, generated from the parameter table
/// ([`params::ALL`]), so a parameter added there is a flag here. Parsed as
/// any f64, NaN, infinities and negative numbers (`-1`, `-inf`) included, so
/// range checks in `params` name the parameter and what is allowed.
#[derive(Debug, Clone, Default)]
pub struct ParamFlags {
    values: BTreeMap<String, f64>,
}

/// The group of every parameter flag, for `--reset`'s conflict.
const PARAM_FLAGS: &str = "parameter values";

impl ParamFlags {
    /// The values given, by parameter name.
    pub fn changes(&self) -> BTreeMap<String, f64> {
        self.values.clone()
    }
}

impl clap::FromArgMatches for ParamFlags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let values = params::ALL
            .iter()
            .filter_map(|d| m.get_one::<f64>(d.flag).map(|v| (d.name.to_string(), *v)))
            .collect();
        Ok(ParamFlags { values })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for ParamFlags {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for d in params::ALL {
            cmd = cmd.arg(
                clap::Arg::new(d.flag)
                    .long(d.flag)
                    .value_name(if d.integer { "N" } else { "X" })
                    .allow_hyphen_values(true)
                    .value_parser(clap::value_parser!(f64))
                    .help_heading("Parameters")
                    .help(format!(
                        "{} ({}; {}; default {})",
                        d.summary,
                        d.unit,
                        d.allowed_in_set(),
                        d.default
                    )),
            );
        }
        cmd.group(
            clap::ArgGroup::new(PARAM_FLAGS)
                .args(params::ALL.iter().map(|d| d.flag))
                .multiple(true),
        )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
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
    #[arg(long, conflicts_with = PARAM_FLAGS)]
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

/// The completion script for `shell`, generated from the clap definition.
fn completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut cmd, "ccctl", out);
}

/// The man page (roff), generated from the clap definition.
fn man_page(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(out)
}

pub fn run(cli: Cli) -> Result<()> {
    if !matches!(cli.command, Command::Completions(_) | Command::Man) {
        repair_state();
    }
    match cli.command {
        Command::Load(args) => load(args),
        Command::Unload(args) => unload(args),
        Command::List(args) => list(args),
        Command::Tune(args) => tune(args),
        Command::Status(args) => status(args),
        #[cfg(feature = "lab")]
        Command::Lab(cmd) => lab::run(cmd, cli.verbose),
        Command::Trace(args) => trace::run(args),
        Command::Policy(cmd) => policy::run(cmd),
        Command::Daemon(args) => crate::daemon::run(crate::daemon::DaemonOptions {
            config: args.config,
            lock: args.lock,
        }),
        Command::Completions(args) => {
            completions(args.shell, &mut std::io::stdout());
            Ok(())
        }
        Command::Man => man_page(&mut std::io::stdout()).context("writing the man page"),
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

/// Before any command that touches algorithms: put right what a ccctl
/// killed midway (SIGKILL, a crash) left behind, and say what was fixed.
/// - half-done loads and unloads: pins without a registration, or a
///   registration with incomplete pins ([`loader::repair`]);
/// - tracing left switched on by a dead tracer (the algorithms would keep
///   filling a ring buffer nobody reads).
///
/// What a dead `lab run` left (its algorithms, its namespaces) is the lab's
/// to clean, in `lab run` itself.
///
/// Without root nothing can be repaired; the command itself then says why
/// it cannot run.
fn repair_state() {
    let mut fixed: Vec<String> = Vec::new();
    match loader::repair() {
        Ok(r) => fixed.extend(r.into_iter().map(|r| r.what)),
        Err(e) => tracing::debug!("checking for half-done loads: {e}"),
    }
    fixed.extend(ccctl_core::policy::kernel::repair());
    fixed.extend(ccctl_core::upgrade::repair());
    match ccctl_core::trace::switch_off_orphaned() {
        Ok(Some(pid)) => fixed.push(format!(
            "switched tracing off: a trace session (pid {pid}) that is gone left it on"
        )),
        Ok(None) => {}
        Err(e) => tracing::debug!("checking for tracing left on: {e}"),
    }
    for what in fixed {
        eprintln!("ccctl: repaired: {what}");
    }
}

fn load(args: LoadArgs) -> Result<()> {
    let algo = registry::find(&args.algo)?;
    if args.replace {
        use ccctl_core::policy::audit;
        let mut log = crate::cli::policy::open_audit(&crate::cli::policy::AuditArg {
            audit: args.audit.clone(),
        })?;
        let r = ccctl_core::upgrade::replace(algo, fault_inject_from_env()?)?;
        let mut rec = audit::Record::now(
            audit::Action::Replace,
            format!("ccctl load {} --replace", algo.name),
        );
        rec.outcome = serde_json::json!({
            "algorithm": algo.name,
            "kernel_name": algo.kernel_name,
            "old_map_id": r.old_map_id,
            "new_map_id": r.new_map_id,
        });
        crate::cli::policy::record(&mut log, &rec)?;
        println!(
            "replaced {} (`{}`) in place: struct_ops map {} -> {}; running connections keep the old object, new ones get the new one",
            algo.name, algo.kernel_name, r.old_map_id, r.new_map_id
        );
        return Ok(());
    }
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
        object: args.object.clone(),
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
                pins::pin_dir(algo).display()
            );
            if let Some(path) = &args.object {
                println!("from the object file {}", path.display());
            }
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
        let algo = registry::find(&name)?;
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
        Some(name) => registry::find(name)?,
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
    let entries = status::list()?;
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
    let st = status::status()?;
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

#[cfg(test)]
mod tests {
    #[test]
    fn completions_and_man_page_name_every_command() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            super::completions(shell, &mut out);
            let text = String::from_utf8(out).expect("utf-8");
            for cmd in ["load", "unload", "tune", "trace", "daemon", "completions"] {
                assert!(text.contains(cmd), "{shell:?} completion lacks {cmd}");
            }
            // `lab` only in a build with the lab.
            assert_eq!(
                text.split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|w| w == "lab"),
                cfg!(feature = "lab"),
                "{shell:?} completion and the lab feature disagree"
            );
        }
        let mut out = Vec::new();
        super::man_page(&mut out).expect("render");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(
            text.contains(".TH ccctl"),
            "{}",
            &text[..200.min(text.len())]
        );
        assert!(text.contains("tune") && text.contains("trace"));
    }
}
