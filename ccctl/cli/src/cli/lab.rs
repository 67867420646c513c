//! `ccctl lab run|check|merge`: a scenario file, command-line overrides, or a
//! one-off from flags alone; `--shard K/N` and `merge` split a sweep over a
//! batch engine (Slurm job arrays, Kubernetes Indexed Jobs; see examples/).
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use ccctl_core::units::{Buffer, HumanDuration, Rate};
use ccctl_lab::scenario::Scenario;
use ccctl_lab::{self as lab, LabOptions, Where};

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Run a scenario (a TOML file, flags, or both: flags override the file).
    Run(RunArgs),
    /// Validate a scenario and print its runs, without running anything.
    Check(CheckArgs),
    /// Join the run directories of `lab run --shard K/N` (all N of one
    /// plan) into one run directory: the files, table and plots of an
    /// unsharded run, every metric recomputed from the merged records.
    Merge(MergeArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Print only the runs of shard K of N (see `lab run --shard`).
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    pub shard: Option<lab::shard::Shard>,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Shard run directories (each made by `lab run --shard K/N`).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// The merged run directory (new or empty).
    #[arg(long)]
    pub out: PathBuf,
}

fn parse_shard(s: &str) -> Result<lab::shard::Shard, String> {
    lab::shard::Shard::parse(s)
}

#[derive(Debug, Args)]
pub struct ScenarioArgs {
    /// Scenario file (see scenarios/); without it, --rate, --rtt and --flows are required.
    pub scenario: Option<PathBuf>,
    /// Bottleneck rate, e.g. 20mbit.
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| Rate::parse(s).map_err(|e| e.to_string()))]
    pub rate: Option<Rate>,
    /// Base RTT of the flows, e.g. 40ms.
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| HumanDuration::parse(s).map_err(|e| e.to_string()))]
    pub rtt: Option<HumanDuration>,
    /// Bottleneck buffer: 100pkt, 150kB or 0.5bdp (default for one-offs: 1bdp).
    #[arg(long, value_parser = |s: &str| Buffer::parse(s).map_err(|e| e.to_string()))]
    pub buffer: Option<Buffer>,
    /// Random loss probability on the data path, e.g. 0.01.
    #[arg(long, allow_hyphen_values = true)]
    pub loss: Option<f64>,
    /// Bottleneck queue: tail_drop, fq_codel or codel (codel: host path only).
    #[arg(long)]
    pub aqm: Option<String>,
    /// Run the flows over IPv6 (the testbed's fd00:ccc::/48; `ip = "v6"` in [link]).
    #[arg(long)]
    pub ipv6: bool,
    /// Flows, e.g. "cubic:1, bbr:1".
    #[arg(long)]
    pub flows: Option<String>,
    /// Length of each run, e.g. 30s.
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| HumanDuration::parse(s).map_err(|e| e.to_string()))]
    pub duration: Option<HumanDuration>,
    /// Cut from the start of every flow before measuring (default 3s).
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| HumanDuration::parse(s).map_err(|e| e.to_string()))]
    pub warmup: Option<HumanDuration>,
    /// Repetitions of every run.
    #[arg(long, allow_hyphen_values = true)]
    pub repetitions: Option<u32>,
    /// Scenario name (names the results directory).
    #[arg(long)]
    pub name: Option<String>,
    /// Skip the solo and same-algorithm baseline runs (no harm figures).
    #[arg(long)]
    pub no_baselines: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Where the testbed runs: auto (and host) is this kernel with the userspace path emulator;
    /// vm is Debian's 6.1 in a VM with the kernel's qdiscs (auto picks it for kernel = "6.1").
    #[arg(long = "where", value_enum, default_value_t = Where::Auto)]
    pub where_: Where,
    /// Results directory; each run writes <out>/<name>-<UTC time>/.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Exact run directory (used by the VM half of a run).
    #[arg(long, hide = true)]
    pub run_dir: Option<PathBuf>,
    /// Run only part K of N of the plan (K from 1): its share of the main
    /// and baseline runs plus the calibration of their links; writes
    /// <out>/<name>-shardKofN-<UTC time>/ for `ccctl lab merge`.
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    pub shard: Option<lab::shard::Shard>,
}

impl ScenarioArgs {
    /// The scenario file (or a one-off skeleton) with the flags applied,
    /// validated with the offending field named.
    pub fn scenario(&self) -> Result<Scenario> {
        let (mut table, origin) = match &self.scenario {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading scenario {}", path.display()))?;
                // Validate the file as written first, so its errors name its lines.
                Scenario::from_toml(&text)
                    .with_context(|| format!("scenario {}", path.display()))?;
                let table: toml::Table = toml::from_str(&text)
                    .with_context(|| format!("scenario {}", path.display()))?;
                (table, path.display().to_string())
            }
            None => {
                if self.rate.is_none() || self.rtt.is_none() || self.flows.is_none() {
                    bail!("without a scenario file, --rate, --rtt and --flows are required (e.g. --rate 20mbit --rtt 40ms --flows \"cubic:1, bbr:1\")");
                }
                let mut t = toml::Table::new();
                t.insert("name".into(), "oneoff".into());
                t.insert("duration".into(), "30s".into());
                let mut link = toml::Table::new();
                link.insert("buffer".into(), "1bdp".into());
                t.insert("link".into(), link.into());
                (t, "the command line".to_string())
            }
        };
        let set = |t: &mut toml::Table, k: &str, v: toml::Value| {
            t.insert(k.into(), v);
        };
        if let Some(v) = &self.name {
            set(&mut table, "name", v.clone().into());
        }
        if let Some(v) = self.duration {
            set(&mut table, "duration", v.to_string().into());
        }
        if let Some(v) = self.warmup {
            set(&mut table, "warmup", v.to_string().into());
        }
        if let Some(v) = self.repetitions {
            set(&mut table, "repetitions", i64::from(v).into());
        }
        if let Some(v) = &self.flows {
            set(&mut table, "flows", v.clone().into());
        }
        if self.no_baselines {
            set(&mut table, "baselines", false.into());
        }
        let link = table
            .entry("link")
            .or_insert_with(|| toml::Table::new().into())
            .as_table_mut()
            .context("`link` must be a table")?;
        if let Some(v) = self.rate {
            link.insert("rate".into(), v.to_string().into());
        }
        if let Some(v) = self.rtt {
            link.insert("rtt".into(), v.to_string().into());
        }
        if let Some(v) = self.buffer {
            link.insert("buffer".into(), v.to_string().into());
        }
        if let Some(v) = self.loss {
            link.insert("loss".into(), v.into());
        }
        if let Some(v) = &self.aqm {
            link.insert("aqm".into(), v.clone().into());
        }
        if self.ipv6 {
            link.insert("ip".into(), "v6".into());
        }
        let text = toml::to_string(&table).context("re-serializing the scenario")?;
        Scenario::from_toml(&text)
            .with_context(|| format!("scenario from {origin} with the command-line flags"))
    }
}

pub fn run(cmd: LabCommand, verbose: u8) -> Result<()> {
    match cmd {
        LabCommand::Check(args) => check(args),
        LabCommand::Merge(args) => {
            let outcome = lab::merge(&args.dirs, &args.out)?;
            if outcome.limited_links > 0 {
                eprintln!(
                    "ccctl lab: warning: {} link setting(s) were testbed-limited on a shard (reference Cubic below 85 % of the rate); \
                     see summary.txt",
                    outcome.limited_links
                );
            }
            Ok(())
        }
        LabCommand::Run(args) => {
            let scenario = args.scenario.scenario()?;
            for what in lab::repair_stale_runs() {
                eprintln!("ccctl: repaired: {what}");
            }
            let outcome = lab::run(LabOptions {
                scenario,
                out_root: args.out,
                run_dir: args.run_dir,
                where_: args.where_,
                verbose,
                shard: args.shard,
            })?;
            if outcome.limited_links > 0 {
                eprintln!(
                    "ccctl lab: warning: {} link setting(s) were testbed-limited (reference Cubic below 85 % of the rate); \
                     see summary.txt",
                    outcome.limited_links
                );
            }
            Ok(())
        }
    }
}

fn check(args: CheckArgs) -> Result<()> {
    let sc = args.scenario.scenario()?;
    // Names no kernel (here or in the test VM) nor ccctl could provide are
    // refused here, as `lab run` would refuse them.
    lab::provision::precheck(&sc)?;
    let plan = lab::plan::plan(&sc);
    let jobs: Vec<&lab::plan::Job> = match args.shard {
        None => plan.jobs.iter().collect(),
        Some(s) => lab::shard::select(&plan, s)
            .into_iter()
            .map(|i| &plan.jobs[i])
            .collect(),
    };
    let secs: f64 = jobs.iter().map(|j| j.expected_secs()).sum();
    println!(
        "scenario `{}` is valid: {} runs, about {:.0} s of testbed time{}",
        sc.name,
        jobs.len(),
        secs,
        args.shard
            .map(|s| format!(" (shard {s} of a plan of {} runs)", plan.jobs.len()))
            .unwrap_or_default()
    );
    for j in jobs {
        let flows: Vec<String> = j
            .flows
            .iter()
            .map(|f| {
                format!(
                    "{} (rtt {}, {}..{}{})",
                    f.cc,
                    HumanDuration(f.rtt),
                    HumanDuration(f.start),
                    HumanDuration(f.start + f.duration),
                    f.schedule
                        .map(|s| format!(", sender {s}, Θ {:.3}", s.theta()))
                        .unwrap_or_default()
                )
            })
            .collect();
        println!(
            "  run {:>3}: {:<11} link {} ({} / {} / {} = {} B{}) {}",
            j.id,
            j.kind.as_str(),
            j.link_index + 1,
            j.link.rate,
            j.link.rtt,
            j.link.buffer,
            j.link.buffer_bytes,
            if j.link.ip == ccctl_lab::scenario::IpVersion::V6 {
                ", IPv6"
            } else {
                ""
            },
            flows.join(", ")
        );
    }
    Ok(())
}
