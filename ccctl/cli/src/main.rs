//! `ccctl`: the command line and the daemon; the work is in ccctl-core,
//! ccctl-observe and (with the default feature `lab`) ccctl-lab. A fleet
//! build, `--no-default-features`, links no lab.
mod cli;
mod daemon;
mod logging;

use clap::Parser;

/// The error and its causes, `: `-separated, each cause once: a cause
/// whose text its parent already carries (`{what}: {source}` messages) is
/// not repeated.
fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn main() -> std::process::ExitCode {
    ccctl_sys::signals::die_quietly_on_sigpipe();
    let cli = cli::Cli::parse();
    logging::init(cli.verbose);
    match cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccctl: error: {}", report(&e));
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

#[cfg(test)]
mod tests {
    use super::report;

    #[test]
    fn a_cause_is_printed_once() {
        let io = std::io::Error::from_raw_os_error(libc::EACCES);
        let inner = ccctl_core::error::Error::Io {
            what: "inspecting /sys/fs/bpf/ccctl".into(),
            source: io,
        };
        // anyhow's alternate form repeats the source the message carries.
        let e = anyhow::Error::new(inner).context("ccctl status");
        assert_eq!(format!("{e:#}").matches("os error 13").count(), 2);
        let text = report(&e);
        assert_eq!(text.matches("os error 13").count(), 1, "{text}");
        assert_eq!(
            text,
            "ccctl status: inspecting /sys/fs/bpf/ccctl: Permission denied (os error 13)"
        );
        // Causes not carried by their parent are all kept.
        let e = anyhow::anyhow!("reading x").context("loading y");
        assert_eq!(report(&e), "loading y: reading x");
    }
}
