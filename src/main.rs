//! `tally`: the one command-line binary. Runs jobs on an embedded cluster,
//! serves the coordinator, runs workers, and talks to a coordinator as a
//! client. This file parses, hands over to the command, and turns the outcome
//! into the exit code: 0, 1 for a failure, 2 for bad input, 130 after Ctrl-C,
//! 141 when the reader of stdout has gone.
//!
//! Contract: the answer is the last line of stdout, alone; progress and logs go
//! to stderr; `--json` prints one JSON object instead.
//!
//! Layer: the top. It imports the coordinator, the worker, the stage store,
//! the sandbox, the kinds and the wire, and wires them (the one wasm sandbox
//! is made here, in the binary); it names no kind's module outside its tests.
//!
//! Modules, from the top; a module imports only modules below it:
//! - `parse` (the command line over the `config` file's defaults) hands the
//!   command to `cmd`, one file per command;
//! - the commands' parts: `embedded` (the cluster of `tally run`), `sizing`
//!   (a job's first shard timed before it is sent), `spec_input` (a job's
//!   spec from its flags or a file), `credentials` and `client` (reaching a
//!   coordinator), `signals` and `logging`;
//! - `config`, `files`, `flags` and `output` are the ground.

#![forbid(unsafe_code)]
// Standard output is written through `output::out!`, which ends the command
// quietly when its reader has gone instead of panicking; standard error
// through `output::errln!`, which never panics.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod client;
mod cmd;
mod config;
mod credentials;
mod embedded;
mod files;
mod flags;
mod logging;
mod output;
mod parse;
mod signals;
mod sizing;
mod spec_input;

use std::process::ExitCode;
use std::time::Duration;

// The coordinator makes and drops many small buffers per shard (records,
// batches, protocol messages); mimalloc keeps that cheaper than the system
// allocator, which showed as a quarter of the runner's own time per shard.
// It is built not to ask for transparent huge pages (`no_thp`): a shard's
// tables are allocated, filled and freed run after run, and a huge page is
// resident whole however little of it is used (the English board spilling
// within 256 MiB peaked at 258 MB with them, 166 MB without, no slower).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long the process waits at exit for blocking work to end.
const RUNTIME_EXIT_LIMIT: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    // Known before parsing: under `--json` a parser error is one JSON object too.
    let json = std::env::args_os()
        .skip(1)
        .take_while(|arg| arg != "--")
        .any(|arg| arg == "--json");
    let (config_path, config) = match config::load() {
        Ok(loaded) => loaded,
        Err(e) => return output::failed(&e.to_string(), 2, json),
    };
    let cli = match parse::command_line(&config) {
        Ok(cli) => cli,
        Err(e) => return parser_stopped(e, json),
    };
    logging::init(&cli.global, cli.command.serves());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return output::failed(&format!("cannot start the async runtime: {e}"), 1, json);
        }
    };
    let outcome = runtime.block_on(cmd::dispatch(cli, config_path));
    // Work still running on the blocking pool (a store that will not close, a
    // kernel that has not seen its cancellation) must not hold the exit up.
    runtime.shutdown_timeout(RUNTIME_EXIT_LIMIT);
    logging::flush();
    exit_code(outcome, json)
}

/// Where the parser stopped the command: help and version are answers
/// (exit 0), and so is the help a bare `tally` prints, except where one JSON
/// object is promised; anything else is bad input (exit 2).
fn parser_stopped(e: clap::Error, json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    let answer = match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => true,
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => !json,
        _ => false,
    };
    if answer {
        e.exit();
    }
    output::failed(&parse::error_line(&e), 2, json)
}

/// The exit code of a command's outcome: its own when it ran to its end,
/// else the error's (see `output::exit_code`), said on stderr.
fn exit_code(outcome: anyhow::Result<ExitCode>, json: bool) -> ExitCode {
    match outcome {
        Ok(code) => code,
        // Nobody reads any more (`| head`): nothing to say, and no one to say it to.
        Err(e) if e.downcast_ref::<output::ReaderGone>().is_some() => {
            ExitCode::from(output::READER_GONE_EXIT)
        }
        Err(e) => output::failed(&output::error_line(&e), output::exit_code(&e), json),
    }
}
