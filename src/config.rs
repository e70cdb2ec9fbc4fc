//! The optional config file: defaults for the global flags, so that a cluster's
//! address and credentials need not be repeated on every command.
//!
//! Precedence: command-line flag, then environment variable, then the config
//! file, then the built-in default. The file is `$TALLY_CONFIG`, else
//! `$XDG_CONFIG_HOME/tally/config.toml`, else `~/.config/tally/config.toml`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub coordinator: Option<String>,
    pub token_file: Option<PathBuf>,
    pub worker_token_file: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_domain: Option<String>,
    pub log_level: Option<String>,
    pub log_format: Option<String>,
}

/// Where the config file is looked for.
pub fn path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TALLY_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(base.join("tally").join("config.toml"))
}

/// The config file, if there is one. A file named by `TALLY_CONFIG` must exist.
pub fn load() -> anyhow::Result<(Option<PathBuf>, Config)> {
    let Some(path) = path() else {
        return Ok((None, Config::default()));
    };
    let explicit = std::env::var_os("TALLY_CONFIG").is_some();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
            return Ok((None, Config::default()));
        }
        Err(e) => anyhow::bail!("cannot read the config file {}: {e}", path.display()),
    };
    let config: Config = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}", parse_error_line(&path, &text, &e)))?;
    Ok((Some(path), config))
}

/// A config file that does not parse, in one line: the file, the line and
/// column of the fault, and what is wrong there (toml's own message spans
/// several lines, with the source quoted).
fn parse_error_line(path: &Path, text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end().replace('\n', "; ");
    let Some(span) = error.span() else {
        return format!("config file {}: {message}", path.display());
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    format!(
        "config file {}, line {line}, column {column}: {message}",
        path.display()
    )
}

/// Makes the file's values the defaults of the matching global flags.
pub fn apply(mut command: clap::Command, config: &Config) -> clap::Command {
    let paths = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let values = [
        ("coordinator", config.coordinator.clone()),
        ("token_file", paths(&config.token_file)),
        ("worker_token_file", paths(&config.worker_token_file)),
        ("tls_ca", paths(&config.tls_ca)),
        ("tls_cert", paths(&config.tls_cert)),
        ("tls_key", paths(&config.tls_key)),
        ("tls_domain", config.tls_domain.clone()),
        ("log_level", config.log_level.clone()),
        ("log_format", config.log_format.clone()),
    ];
    for (id, value) in values {
        if let Some(value) = value {
            // Defaults must outlive the parser; one small leak per process.
            let value: &'static str = Box::leak(value.into_boxed_str());
            command = command.mut_arg(id, |arg| arg.default_value(value));
        }
    }
    command
}
