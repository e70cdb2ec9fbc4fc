//! The process's log: tracing to stderr through a non-blocking writer, so
//! that a stalled stderr (a full pipe, a stopped log collector) never holds
//! up the thread that logs, least of all one holding the scheduler lock.
//! Lines that find the writer's buffer full are dropped and counted, not
//! waited for.

use std::sync::Mutex;

use tracing_appender::non_blocking::WorkerGuard;

use crate::flags::GlobalArgs;

/// Lines the writer's buffer holds before new ones are dropped.
const BUFFERED_LINES: usize = 64 * 1024;

/// The writer's guard: dropping it writes what is buffered (waiting a
/// bounded time) and stops the writer thread.
static WRITER: Mutex<Option<WorkerGuard>> = Mutex::new(None);

pub fn init(global: &GlobalArgs, serves: bool) {
    // Servers log what they do; one-shot commands only warn.
    let default = if serves { "info" } else { "warn" };
    let filter =
        tracing_subscriber::EnvFilter::try_new(global.log_level.as_deref().unwrap_or(default))
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(BUFFERED_LINES)
        .lossy(true)
        .thread_name("tally-log")
        .finish(std::io::stderr());
    if let Ok(mut slot) = WRITER.lock() {
        *slot = Some(guard);
    }
    // Colours only on a terminal: a log file or a collector gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer);
    if global.log_format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Writes what the log holds, before the process exits.
pub fn flush() {
    let guard = WRITER.lock().ok().and_then(|mut slot| slot.take());
    drop(guard);
}

/// Logs `why`, writes the log out and exits with `code`: for an exit that
/// cannot wait for the runtime (the watchdog's, with the scheduler stuck).
pub fn exit_now(why: &str, code: i32) -> ! {
    tracing::error!("{why}");
    flush();
    std::process::exit(code)
}

/// The coordinator's watchdog at its limit: the process exits with the
/// stall's code once its log is written, so that a supervisor starts it
/// again and its jobs resume from the store.
pub fn on_stall() -> tally_coordinator::watchdog::OnStall {
    tally_coordinator::watchdog::OnStall(std::sync::Arc::new(|why| {
        exit_now(why, tally_coordinator::watchdog::STALL_EXIT_CODE)
    }))
}
