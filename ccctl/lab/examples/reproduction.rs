//! The reproduction suite's two halves, driven by `cargo xtask reproduce`
//! (research tooling: not part of the `ccctl` users install).
//!
//! usage: reproduction plan --seeds DIR --out DIR [--quick] [NAME...]
//!        reproduction part --out DIR --scenario NAME --file FILE --wall-secs S [--failed]
//!        reproduction report DIR
//!        reproduction docs --root DIR --out DIR
//!        reproduction budget [--seeds DIR] [--quick]
use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "reproduction")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Start (or resume) the reproduction in OUT (its suite.json, refused
    /// when OUT holds the other mode) and print the scenarios to run (JSON,
    /// one per line, each saying whether OUT already holds it complete);
    /// with --quick, write the quick variants into OUT.
    Plan {
        /// Directory of the suite's scenario files.
        #[arg(long, default_value = "scenarios/seeds")]
        seeds: PathBuf,
        /// Fewer repetitions, shorter runs (each effect kept).
        #[arg(long)]
        quick: bool,
        /// The reproduction directory.
        #[arg(long)]
        out: PathBuf,
        /// Scenario names (default: the whole suite).
        names: Vec<String>,
    },
    /// Record one scenario's `ccctl lab run` in OUT/suite.json.
    Part {
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        scenario: String,
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        wall_secs: f64,
        /// The run did not exit successfully.
        #[arg(long)]
        failed: bool,
    },
    /// Compute every headline from the Parquet files under DIR and write
    /// DIR/REPORT.md and DIR/report.json.
    Report { dir: PathBuf },
    /// Write ROOT/docs/reproduction.md (and its plots) from OUT's report.
    Docs {
        #[arg(long)]
        root: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the suite's budget: runs and testbed time per scenario (as
    /// `ccctl lab check` counts them) and the expected wall time.
    Budget {
        #[arg(long, default_value = "scenarios/seeds")]
        seeds: PathBuf,
        #[arg(long)]
        quick: bool,
    },
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Plan {
            seeds,
            quick,
            out,
            names,
        } => {
            ccctl_lab::reproduce::begin_suite(&out, quick)?;
            let planned = ccctl_lab::reproduce::plan(&seeds, &names, quick, &out)?;
            for n in &names {
                if !planned.iter().any(|p| &p.name == n) {
                    eprintln!("reproduction: {n} is not part of --quick (the full suite runs it)");
                }
            }
            for p in planned {
                println!("{}", serde_json::to_string(&p)?);
            }
        }
        Cmd::Part {
            out,
            scenario,
            file,
            wall_secs,
            failed,
        } => ccctl_lab::reproduce::record_part(
            &out,
            ccctl_lab::reproduce::SuitePart {
                scenario,
                file,
                wall_secs,
                ok: !failed,
            },
        )?,
        Cmd::Report { dir } => print!("{}", ccctl_lab::reproduce::report(&dir)?),
        Cmd::Docs { root, out } => {
            let path = ccctl_lab::reproduce::write_docs(&root, &out)?;
            println!("{}", path.display());
        }
        Cmd::Budget { seeds, quick } => {
            use ccctl_lab::reproduce as r;
            let lines = r::budget(&seeds, quick)?;
            println!("| scenario | runs | testbed time (s) | + overhead (s) |");
            println!("|---|---|---|---|");
            for l in &lines {
                println!(
                    "| {} | {} | {:.0} | {:.0} |",
                    l.name,
                    l.runs,
                    l.testbed_secs,
                    l.testbed_secs + r::SCENARIO_OVERHEAD_SECS
                );
            }
            let runs: usize = lines.iter().map(|l| l.runs).sum();
            let testbed: f64 = lines.iter().map(|l| l.testbed_secs).sum();
            let wall = r::budget_wall_secs(&lines);
            let limit = if quick {
                r::QUICK_BUDGET_SECS
            } else {
                r::FULL_BUDGET_SECS
            };
            println!(
                "| total | {runs} | {testbed:.0} | {wall:.0} ({:.1} min of {:.0}) |",
                wall / 60.0,
                limit / 60.0
            );
        }
    }
    Ok(())
}
