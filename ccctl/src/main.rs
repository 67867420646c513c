use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = ccctl::cli::Cli::parse();
    ccctl::logging::init(cli.verbose);
    match ccctl::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccctl: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
