//! `tally completions`: a shell completion script on stdout.

use std::process::ExitCode;

/// Prints the completion script of `command` (the whole `tally`) for `shell`.
pub fn execute(
    shell: clap_complete::Shell,
    mut command: clap::Command,
) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "tally", &mut script);
    // A reader that stops early (`| head`) is not an error.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
    Ok(ExitCode::SUCCESS)
}
