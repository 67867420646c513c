//! The reproduction suite's two halves, driven by `cargo xtask reproduce`
//! (research tooling: not part of the `ccctl` users install).
//!
//! usage: reproduction plan --seeds DIR --out DIR [--quick] [NAME...]
//!        reproduction report DIR
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
    /// Print the scenarios to run (JSON, one per line); with --quick, write
    /// the quick variants into OUT.
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
    /// Compute every headline from the Parquet files under DIR and write
    /// DIR/REPORT.md and DIR/report.json.
    Report { dir: PathBuf },
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Plan {
            seeds,
            quick,
            out,
            names,
        } => {
            for p in ccctl_lab::reproduce::plan(&seeds, &names, quick, &out)? {
                println!("{}", serde_json::to_string(&p)?);
            }
        }
        Cmd::Report { dir } => print!("{}", ccctl_lab::reproduce::report(&dir)?),
    }
    Ok(())
}
