use clap::Parser;

fn main() -> std::process::ExitCode {
    // Like other CLI tools: `ccctl ... | head` ends quietly on a closed pipe.
    // SAFETY: restoring the default disposition before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = ccctl::cli::Cli::parse();
    ccctl::logging::init(cli.verbose);
    match ccctl::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccctl: error: {e:#}");
            match e.downcast_ref::<ccctl::lab::LabError>() {
                // Killed-by-signal convention, after a clean teardown.
                Some(ccctl::lab::LabError::Interrupted(sig)) => {
                    std::process::ExitCode::from(128 + *sig as u8)
                }
                _ => std::process::ExitCode::FAILURE,
            }
        }
    }
}
