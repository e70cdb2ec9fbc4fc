//! Reading the command line: the config file's values as the defaults of the
//! global flags, and a parser error as one line.

use clap::{CommandFactory, FromArgMatches};

use crate::cmd::Cli;
use crate::config::{self, Config};

/// The command line, parsed with `config`'s defaults under the flags.
pub fn command_line(config: &Config) -> Result<Cli, clap::Error> {
    config::apply(Cli::command(), config)
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches))
}

/// A parser error as one line: clap's message and tips without the usage,
/// and where to read more (`see 'tally run hex --help'`).
pub fn error_line(error: &clap::Error) -> String {
    let path = command_path();
    if error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return format!("'{path}' needs a command; see '{path} --help'");
    }
    let mut line = String::new();
    for text in error.render().to_string().lines().map(str::trim) {
        if text.starts_with("Usage:") {
            break;
        }
        if text.is_empty() || text.starts_with("For more information") {
            continue;
        }
        match text.strip_prefix("tip: ") {
            Some(tip) => line += &format!("; {tip}"),
            None if line.is_empty() => line += text.strip_prefix("error: ").unwrap_or(text),
            None => line += &format!(" {text}"),
        }
    }
    format!("{line}; see '{path} --help'")
}

/// The subcommands this process was given, from `tally` on (`tally run hex`).
fn command_path() -> String {
    let mut command = Cli::command();
    let mut path = vec![command.get_name().to_string()];
    for arg in std::env::args_os().skip(1) {
        let Some(arg) = arg.to_str() else { continue };
        if arg == "--" {
            break;
        }
        if let Some(sub) = command.find_subcommand(arg).cloned() {
            path.push(sub.get_name().to_string());
            command = sub;
        }
    }
    path.join(" ")
}
