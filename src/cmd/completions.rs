//! `tally completions`: a shell completion script on stdout.

use std::process::ExitCode;

use crate::output::out;

/// Prints the completion script of `command` (the whole `tally`) for `shell`.
/// A reader that stops early (`| head`) ends it as any other command: quietly,
/// with `output::READER_GONE_EXIT`.
pub fn execute(
    shell: clap_complete::Shell,
    mut command: clap::Command,
) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "tally", &mut script);
    out!("{}", String::from_utf8_lossy(&script))?;
    Ok(ExitCode::SUCCESS)
}
