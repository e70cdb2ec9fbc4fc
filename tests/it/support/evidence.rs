//! Evidence of a process that missed a deadline, saved before it is killed:
//! every thread's state and stack (`/proc/PID/task/*`, and gdb's `thread
//! apply all bt` when gdb is installed) and the tail of its log, in one file
//! under `target/tmp/tally-evidence/<test>/`, whose path goes to stderr
//! (nextest shows a failing test's stderr). [`dump`] is the one function
//! that writes it; the process helpers call it through [`on_failure`] when a
//! test panics with its children alive, and the chaos driver when its
//! coordinator stops answering or its jobs miss the settle bound.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Lines of the log kept.
pub const LOG_TAIL_LINES: usize = 200;
/// The most of a log read to find its tail: a long run's log is large.
const LOG_TAIL_BYTES: u64 = 1 << 20;
/// The longest gdb may take to attach and print every stack.
const GDB_LIMIT: Duration = Duration::from_secs(60);

/// The processes a test started, by pid: what to call them, where they log,
/// the test that started them, and whether their evidence was saved.
static WATCHED: Mutex<BTreeMap<u32, Watched>> = Mutex::new(BTreeMap::new());

struct Watched {
    name: String,
    log: Option<PathBuf>,
    test: String,
    dumped: bool,
}

/// Notes a child process, so that a failing test saves its evidence.
pub fn watch(pid: u32, name: &str, log: Option<&Path>) {
    let watched = Watched {
        name: name.to_string(),
        log: log.map(Path::to_path_buf),
        test: test_name(),
        dumped: false,
    };
    lock().insert(pid, watched);
}

/// Forgets a child process (it was killed or reaped).
pub fn unwatch(pid: u32) {
    lock().remove(&pid);
}

/// Saves the evidence of every live process the current test watches (and
/// of `pid`, watched or not), each once, before the test's panic kills them.
pub fn on_failure(pid: u32) {
    let test = test_name();
    let due: Vec<(u32, String, Option<PathBuf>)> = {
        let mut watched = lock();
        watched.entry(pid).or_insert_with(|| Watched {
            name: "process".into(),
            log: None,
            test: test.clone(),
            dumped: false,
        });
        watched
            .iter_mut()
            .filter(|(other, w)| (w.test == test || **other == pid) && !w.dumped)
            .map(|(&pid, w)| {
                w.dumped = true;
                (pid, w.name.clone(), w.log.clone())
            })
            .collect()
    };
    for (pid, name, log) in due {
        if alive(pid) {
            dump(
                pid,
                &name,
                log.as_deref(),
                "the test failed with it running",
            );
        }
    }
}

fn lock() -> std::sync::MutexGuard<'static, BTreeMap<u32, Watched>> {
    // A panic while the lock was held leaves the map as it was: still usable.
    WATCHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Saves every thread's state and stack of process `pid` (called `name`),
/// why, and the last [`LOG_TAIL_LINES`] lines of `log`, in a new file under
/// [`evidence_dir`]; prints and returns its path (`None` if it could not be
/// written, said on stderr). Never panics: it runs while a test fails.
pub fn dump(pid: u32, name: &str, log: Option<&Path>, why: &str) -> Option<PathBuf> {
    let dir = evidence_dir();
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let path = dir.join(format!("{}-{pid}-{stamp}.txt", file_safe(name)));
    let mut text = format!("# {name} (pid {pid}): {why}\n");
    // /proc first: gdb's attach stops every thread, and changes what they wait on.
    text.push_str(&proc_threads(pid));
    text.push_str(&gdb_stacks(pid, &dir));
    match log {
        Some(log) => {
            let _ = writeln!(
                text,
                "\n## log tail: the last {LOG_TAIL_LINES} lines of {}",
                log.display()
            );
            text.push_str(&log_tail(log, LOG_TAIL_LINES));
        }
        None => text.push_str("\n## log tail: no log known for this process\n"),
    }
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text));
    match written {
        Ok(()) => {
            eprintln!("evidence of {name} (pid {pid}, {why}): {}", path.display());
            Some(path)
        }
        Err(e) => {
            eprintln!(
                "could not save the evidence of {name} (pid {pid}) in {}: {e}",
                path.display()
            );
            None
        }
    }
}

/// `target/tmp/tally-evidence/<test>/`: kept after the run, beside the
/// build's output.
pub fn evidence_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("tally-evidence")
        .join(file_safe(&test_name()))
}

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => format!("test-process-{}", std::process::id()),
    }
}

fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            ':' => '.',
            _ => '_',
        })
        .collect()
}

/// Whether `pid` is a process not yet exited (a zombie has no stacks).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// One entry a thread: `thread TID (comm) state wchan`, then its kernel
/// stack where it is readable (root only, on most kernels).
fn proc_threads(pid: u32) -> String {
    let mut text = format!("\n## threads, from /proc/{pid}/task\n");
    let tasks = match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => tasks,
        Err(e) => {
            let _ = writeln!(text, "cannot list the threads: {e}");
            return text;
        }
    };
    let mut tids: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    for tid in tids {
        let read = |file: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/{file}"))
                .map(|s| s.trim().to_string())
        };
        let comm = read("comm").unwrap_or_default();
        let state = read("status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("State:").map(|v| v.trim().to_string()))
            })
            .unwrap_or_else(|| "?".into());
        let wchan = read("wchan").unwrap_or_else(|_| "?".into());
        let _ = writeln!(
            text,
            "thread {tid} ({comm}) state {state} wchan {}",
            if wchan.is_empty() { "0" } else { &wchan }
        );
        match read("stack") {
            Ok(stack) if !stack.is_empty() => {
                for line in stack.lines() {
                    let _ = writeln!(text, "    {line}");
                }
            }
            Ok(_) => {}
            Err(e) => {
                let _ = writeln!(text, "    (kernel stack not readable: {e})");
            }
        }
    }
    text
}

/// Every thread's user-space stack by gdb, or why there is none. gdb writes
/// to a file (a pipe would fill and stop it) and is killed past
/// [`GDB_LIMIT`].
fn gdb_stacks(pid: u32, dir: &Path) -> String {
    let mut text = String::from("\n## stacks, by gdb: thread apply all bt\n");
    let _ = std::fs::create_dir_all(dir);
    let out = dir.join(format!("gdb-{pid}.out"));
    let (Ok(stdout), Ok(stderr)) = (
        std::fs::File::create(&out),
        std::fs::File::options()
            .append(true)
            .create(true)
            .open(&out),
    ) else {
        text.push_str("cannot create gdb's output file\n");
        return text;
    };
    let spawned = Command::new("gdb")
        .args(["-nx", "-batch", "-p", &pid.to_string()])
        .args(["-ex", "set pagination off", "-ex", "thread apply all bt"])
        // No symbol server lookups: the dump must not wait on a network.
        .env_remove("DEBUGINFOD_URLS")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn();
    let mut gdb = match spawned {
        Ok(gdb) => gdb,
        Err(e) => {
            let _ = writeln!(text, "gdb could not run ({e}): only /proc's view above");
            return text;
        }
    };
    let deadline = Instant::now() + GDB_LIMIT;
    let finished = loop {
        match gdb.try_wait() {
            Ok(Some(_)) => break true,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => break false,
        }
    };
    if !finished {
        let _ = gdb.kill();
        let _ = gdb.wait();
        let _ = writeln!(
            text,
            "gdb did not finish within {GDB_LIMIT:?}; what it wrote:"
        );
    }
    text.push_str(&std::fs::read_to_string(&out).unwrap_or_default());
    let _ = std::fs::remove_file(&out);
    text
}

/// The last `lines` lines of `log` (of its last [`LOG_TAIL_BYTES`]).
fn log_tail(log: &Path, lines: usize) -> String {
    let mut bytes = Vec::new();
    let read = std::fs::File::open(log).and_then(|mut file| {
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))?;
        file.read_to_end(&mut bytes)
    });
    if let Err(e) = read {
        return format!("cannot read the log: {e}\n");
    }
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    let mut tail = all[all.len().saturating_sub(lines)..].join("\n");
    tail.push('\n');
    tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::{free_port, spawn_coordinator};

    /// The thread ids of process `pid` now.
    fn threads(pid: u32) -> std::collections::BTreeSet<u32> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse().ok())
            .collect()
    }

    /// A live coordinator's evidence: an entry for each of its threads (every
    /// thread alive before and after the dump is in it: threads may come and
    /// go meanwhile), gdb's stack of each when gdb is installed, and the tail
    /// of its log.
    #[test]
    fn a_live_processes_evidence_has_each_threads_stack_and_its_log_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("coordinator.log");
        let port = free_port();
        let coordinator = spawn_coordinator(port, &dir.path().join("data"), &log);
        let pid = coordinator.pid();
        // Up once it says it serves: its threads are started.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("coordinator listening on")
        {
            assert!(Instant::now() < deadline, "the coordinator never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        // More lines of the test's own than the tail keeps.
        let markers: String = (0..250).map(|i| format!("marker {i}\n")).collect();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| std::io::Write::write_all(&mut f, markers.as_bytes()))
            .unwrap();

        let before = threads(pid);
        let path = dump(pid, "coordinator", Some(&log), "a test of the dump").unwrap();
        let after = threads(pid);
        assert!(path.starts_with(evidence_dir()), "{}", path.display());
        let text = std::fs::read_to_string(&path).unwrap();
        let section = |title: &str| {
            let start = text
                .find(title)
                .unwrap_or_else(|| panic!("no {title}:\n{text}"));
            let rest = &text[start + title.len()..];
            rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
        };
        let listed = |section: &str, pattern: &str| -> std::collections::BTreeSet<u32> {
            section
                .split(pattern)
                .skip(1)
                .filter_map(|s| s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
                .collect()
        };
        let in_both: Vec<u32> = before.intersection(&after).copied().collect();
        assert!(in_both.len() > 1, "a coordinator runs several threads");
        let from_proc = listed(&section("## threads, from /proc"), "\nthread ");
        for tid in &in_both {
            assert!(from_proc.contains(tid), "thread {tid} missing:\n{text}");
        }
        assert!(from_proc.is_subset(&before.union(&after).copied().collect()));
        if which_gdb() {
            let from_gdb = listed(&section("## stacks, by gdb"), "(LWP ");
            for tid in &in_both {
                assert!(from_gdb.contains(tid), "gdb left out thread {tid}:\n{text}");
            }
            assert!(text.contains("#0 "), "no frame in gdb's stacks:\n{text}");
        }
        // The last lines of the log when it was read: the coordinator may
        // have added some after the markers, never 200 while idle.
        let tail: Vec<String> = section("## log tail")
            .lines()
            .skip(1)
            .map(String::from)
            .collect();
        assert_eq!(tail.len(), LOG_TAIL_LINES);
        assert!(tail.iter().any(|l| l == "marker 249"), "{tail:?}");
        let whole = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = whole.lines().collect();
        assert!(
            lines.windows(tail.len()).any(|w| w == tail.as_slice()),
            "the tail is not a run of the log's lines: {tail:?}"
        );
        assert!(alive(pid), "the dump leaves the process running");
        std::fs::remove_file(path).unwrap();
    }

    /// A test that panics with a child running saves the child's evidence
    /// before its guard kills it.
    #[test]
    fn a_test_that_fails_with_a_child_running_saves_its_evidence_first() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sleeper.log");
        std::fs::write(&log, "a line of the child's log\n").unwrap();
        let child = Command::new("sleep").arg("600").spawn().unwrap();
        let pid = child.id();
        // A test of its own name, failing on its thread.
        let test = format!("evidence-of-a-failing-test-{}", std::process::id());
        let failed = std::thread::Builder::new()
            .name(test.clone())
            .spawn(move || {
                watch(child.id(), "sleeper", Some(&log));
                let _guard = crate::support::ChildGuard(child);
                panic!("the test fails with its child running");
            })
            .unwrap()
            .join();
        assert!(failed.is_err());
        assert!(!alive(pid), "the guard killed the child after the dump");
        let saved = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("tally-evidence")
            .join(&test);
        let files: Vec<PathBuf> = std::fs::read_dir(&saved)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let text = std::fs::read_to_string(&files[0]).unwrap();
        assert!(text.contains(&format!("\nthread {pid} (sleep) ")), "{text}");
        assert!(text.contains("a line of the child's log"), "{text}");
        std::fs::remove_dir_all(saved).unwrap();
    }

    fn which_gdb() -> bool {
        Command::new("gdb")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    #[test]
    fn a_log_tail_is_its_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let text: String = (0..500).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, text).unwrap();
        let tail = log_tail(&log, LOG_TAIL_LINES);
        assert_eq!(tail.lines().count(), LOG_TAIL_LINES);
        assert_eq!(tail.lines().next(), Some("line 300"));
        assert_eq!(tail.lines().last(), Some("line 499"));
        let missing = log_tail(&dir.path().join("none"), 10);
        assert!(missing.starts_with("cannot read the log"), "{missing}");
    }
}
