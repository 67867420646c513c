//! `ccctl`: the command line and the daemon; the work is in ccctl-core,
//! ccctl-observe and (with the default feature `lab`) ccctl-lab. A fleet
//! build, `--no-default-features`, links no lab.
mod cli;
mod daemon;
mod logging;

use clap::Parser;

fn main() -> std::process::ExitCode {
    ccctl_sys::signals::die_quietly_on_sigpipe();
    let cli = cli::Cli::parse();
    logging::init(cli.verbose);
    match cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccctl: error: {e:#}");
            #[cfg(feature = "lab")]
            if let Some(ccctl_lab::LabError::Interrupted(sig)) =
                e.downcast_ref::<ccctl_lab::LabError>()
            {
                // Killed-by-signal convention, after a clean teardown.
                return std::process::ExitCode::from(128 + *sig as u8);
            }
            std::process::ExitCode::FAILURE
        }
    }
}
