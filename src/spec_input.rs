//! A job spec from the command line: the kind and its flags, or a spec file
//! (JSON or TOML), with the runner flags over it and the files they name
//! (a wasm module) to send along.

use std::path::Path;

use clap::parser::ValueSource;

use tally_kinds as kinds;
use tally_kinds::guest::{MAX_MODULE_BYTES, sha256_hex};
use tally_kinds::invalid;
use tally_kinds::kind::FileReader;
use tally_kinds::spec::{JobSpec, RunnerOptions, ValidSpec};

use crate::files::read_bounded;
use crate::flags::{KindArgs, SpecArgs};

/// The checked job spec from the kind flags or the spec file, and the
/// attachments its flags named (a wasm module), to send with it.
pub fn job_spec(flags: &SpecArgs) -> anyhow::Result<(ValidSpec, Vec<Vec<u8>>)> {
    let files = Files::default();
    let mut spec = match (&flags.spec_file, &flags.kind) {
        (Some(path), Some(kind)) => spec_file_of_kind(path, kind)?,
        (None, None) => {
            return Err(invalid!(
                "name a job kind ({}) or give --spec-file",
                kinds::names().join(", ")
            )
            .into());
        }
        (Some(path), None) => read_spec_file(path)?,
        (None, Some(kind)) => JobSpec {
            kind: kind.name.clone(),
            params: kinds::lookup(&kind.name)?.params_from_matches(&kind.matches, &files)?,
            options: RunnerOptions::default(),
        },
    };
    let o = &flags.options;
    spec.options.priority = o.priority.unwrap_or(spec.options.priority);
    spec.options.max_attempts = o.max_attempts.unwrap_or(spec.options.max_attempts);
    spec.options.lease_ttl_ms = o.lease_ttl_ms.unwrap_or(spec.options.lease_ttl_ms);
    spec.options.force |= o.force;
    spec.options.replicas = o.replicas.unwrap_or(spec.options.replicas);
    spec.options.max_slots = o.max_slots.unwrap_or(spec.options.max_slots);
    for path in &flags.attach {
        files.attach(path)?;
    }
    let attachments = files.attachments.into_inner();
    Ok((ValidSpec::new(spec)?, attachments))
}

/// Largest file a kind's option may name (a puzzle, say): read no further.
const MAX_KIND_FILE_BYTES: u64 = 1 << 20;

/// Reads the files kinds' options name, up to [`MAX_KIND_FILE_BYTES`], and
/// keeps those that go with the job as attachments.
#[derive(Default)]
struct Files {
    attachments: parking_lot::Mutex<Vec<Vec<u8>>>,
}

impl FileReader for Files {
    fn read_to_string(&self, path: &Path) -> tally_kinds::Result<String> {
        let bytes = read_bounded(path, MAX_KIND_FILE_BYTES, "")
            .map_err(|e| invalid!("{}", crate::output::error_line(&e)))?;
        String::from_utf8(bytes).map_err(|_| invalid!("{} is not UTF-8 text", path.display()))
    }

    fn attach(&self, path: &Path) -> tally_kinds::Result<String> {
        let bytes = read_bounded(path, MAX_MODULE_BYTES as u64, "")
            .map_err(|e| invalid!("{}", crate::output::error_line(&e)))?;
        let sha256 = sha256_hex(&bytes);
        self.attachments.lock().push(bytes);
        Ok(sha256)
    }
}

/// The spec file of `tally run KIND --spec-file FILE`: the kind named
/// without its flags (the file gives them) must be the file's.
fn spec_file_of_kind(path: &Path, kind: &KindArgs) -> anyhow::Result<JobSpec> {
    let flags_given = kinds::lookup(&kind.name)?
        .command()
        .get_arguments()
        .any(|arg| {
            kind.matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine)
        });
    if flags_given {
        return Err(invalid!("give either a job kind with flags or --spec-file, not both").into());
    }
    let spec = read_spec_file(path)?;
    if spec.kind != kind.name {
        return Err(invalid!(
            "{} is a spec of a {} job, not {}: drop `{}` from the command line or give a {} spec",
            path.display(),
            spec.kind,
            kind.name,
            kind.name,
            kind.name
        )
        .into());
    }
    Ok(spec)
}

fn read_spec_file(path: &Path) -> anyhow::Result<JobSpec> {
    let text = Files::default().read_to_string(path)?;
    let is_toml = path.extension().is_some_and(|e| e == "toml");
    // A spec file that does not parse is bad input (exit code 2), like a bad flag.
    let spec: JobSpec = if is_toml {
        toml::from_str(&text).map_err(|e| invalid!("{}: {e}", path.display()))?
    } else {
        serde_json::from_str(&text).map_err(|e| invalid!("{}: {e}", path.display()))?
    };
    Ok(spec)
}
