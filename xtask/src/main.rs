//! `cargo xtask`: developer tasks for ccctl.

mod bench;
mod bpf_object;
mod demo;
mod mutants;
mod proc;
mod reproduce;
mod setup;
mod soak;
mod test;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "ccctl developer tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what this Debian 12 machine lacks (apt packages, virtme-ng venv)
    Setup {
        /// Only report what is missing; exit non-zero if anything is
        #[arg(long)]
        check: bool,
    },
    /// Run a command as root inside a virtme-ng VM booting Debian's 6.1 kernel (TCG).
    ///
    /// Host filesystem read-only (guest-private writable overlays on /tmp, /etc,
    /// /var, ...), cargo's target dir shared read-write. Exit status is the
    /// command's; 125 if the VM failed to boot. Stdin is not forwarded.
    Vm(vm::VmArgs),
    /// Build ccctl and run every test: host tests, then VM tests in one VM boot
    Test(test::TestArgs),
    /// The main job: `ccctl lab run scenarios/bbr-vs-cubic.toml` on the namespace testbed
    Demo,
    /// Benchmarks (release build): datapath and tracing cost against native bbr, trace consumer rate, testbed emulator
    Bench(bench::BenchArgs),
    /// Every seed's headline result re-measured, side by side with the paper (REPORT.md)
    Reproduce(reproduce::ReproduceArgs),
    /// Abuse, bounded: load/unload cycles with live flows; SIGKILL at random points of every command
    Soak(soak::SoakArgs),
    /// Deliberately wrong builds of every algorithm, each run against the host test that must fail it (issue 27)
    Mutants(mutants::MutantsArgs),
}

fn main() -> ExitCode {
    proc::install_signal_handlers();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Setup { check } => setup::main(check),
        Cmd::Vm(args) => vm::main(args),
        Cmd::Test(args) => test::main(args),
        Cmd::Demo => demo::main(),
        Cmd::Bench(args) => bench::main(args),
        Cmd::Soak(args) => soak::main(args),
        Cmd::Mutants(args) => mutants::main(args),
        Cmd::Reproduce(args) => reproduce::main(args),
    };
    let code = match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            if proc::interrupted() {
                proc::EXIT_INTERRUPTED
            } else {
                1
            }
        }
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}
