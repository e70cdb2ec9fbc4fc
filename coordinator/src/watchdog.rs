//! Liveness that means it: who holds the scheduler lock and since when, what
//! store flush runs and since when, and a watchdog thread that looks at both
//! every second. A hold past its limits is logged (a warning, then an error,
//! naming the call and how long), counted in `/metrics`, turns the health
//! service and `/healthz` to NOT_SERVING, and at the last limit ends the
//! process with [`STALL_EXIT_CODE`], so that systemd or Kubernetes start it
//! again and its jobs resume from the store.
//!
//! The watchdog is a plain thread, not a task: a runtime starved by the very
//! stall it watches must not silence it. It reads the holds through their own
//! small locks, never the scheduler's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::metrics::CoordinatorMetrics;

/// The exit code of a coordinator that the watchdog ended (EX_SOFTWARE).
pub const STALL_EXIT_CODE: i32 = 70;

/// How long a hold may last before the coordinator stops reporting itself
/// healthy by default: a probe that waits this long for the lock has failed.
pub const UNHEALTHY_AFTER: Duration = Duration::from_secs(5);

/// How long a hold may last before the coordinator exits by default.
pub const STALL_LIMIT: Duration = Duration::from_secs(60);

/// How often the watchdog looks.
const TICK: Duration = Duration::from_millis(500);

/// One thing that can be held: the scheduler lock or a store flush. Its
/// holder's name and the moment it took it, while held.
pub struct Hold {
    what: &'static str,
    current: Mutex<Option<(Instant, &'static str)>>,
}

/// Ends a [`Hold`] when dropped, on every path (a panic too).
pub struct Holding<'a>(&'a Hold);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        *self.0.current.lock() = None;
    }
}

impl Hold {
    fn new(what: &'static str) -> Hold {
        Hold {
            what,
            current: Mutex::new(None),
        }
    }

    /// Marks the hold taken by `by` now, until the returned guard drops.
    pub fn begin(&self, by: &'static str) -> Holding<'_> {
        self.begin_at(by, Instant::now())
    }

    fn begin_at(&self, by: &'static str, at: Instant) -> Holding<'_> {
        *self.current.lock() = Some((at, by));
        Holding(self)
    }

    /// Who holds it and for how long, at `now`.
    pub fn held(&self, now: Instant) -> Option<(&'static str, Duration)> {
        self.current
            .lock()
            .map(|(since, by)| (by, now.saturating_duration_since(since)))
    }

    /// What is held: "the scheduler lock", "a store flush".
    pub fn what(&self) -> &'static str {
        self.what
    }
}

/// What the watchdog watches.
pub struct Holds {
    pub scheduler: Hold,
    pub flush: Hold,
}

impl Default for Holds {
    fn default() -> Self {
        Holds {
            scheduler: Hold::new("the scheduler lock"),
            flush: Hold::new("a store flush"),
        }
    }
}

impl Holds {
    fn each(&self) -> [&Hold; 2] {
        [&self.scheduler, &self.flush]
    }
}

/// The watchdog's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchdogConfig {
    /// A hold longer than this makes the coordinator unhealthy.
    pub unhealthy_after: Duration,
    /// A hold longer than this ends the process; its warning comes at a
    /// sixth of it (once unhealthy), its error at half.
    pub exit_after: Duration,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            unhealthy_after: UNHEALTHY_AFTER,
            exit_after: STALL_LIMIT,
        }
    }
}

impl WatchdogConfig {
    fn warn_after(&self) -> Duration {
        (self.exit_after / 6).max(self.unhealthy_after)
    }

    fn error_after(&self) -> Duration {
        self.exit_after / 2
    }
}

/// Whether the coordinator serves, as the health service and `/healthz` say.
#[derive(Default)]
pub struct Liveness(Mutex<Option<String>>);

impl Liveness {
    /// `None` while serving; else why not.
    pub fn stalled(&self) -> Option<String> {
        self.0.lock().clone()
    }

    fn set(&self, stalled: Option<String>) {
        *self.0.lock() = stalled;
    }
}

/// What a look found beyond the health: the process must end, and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Exit(pub String);

/// How far a hold has come, so each step is said once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    #[default]
    Fine,
    Unhealthy,
    Warned,
    Errored,
}

/// The watchdog's judgement, separate from its thread so that tests give it
/// the time.
pub struct Watchdog {
    holds: Arc<Holds>,
    config: WatchdogConfig,
    metrics: Arc<CoordinatorMetrics>,
    liveness: Arc<Liveness>,
    /// Per hold: the holder last seen and the step reached in this hold.
    seen: [Option<(&'static str, Step)>; 2],
}

impl Watchdog {
    pub fn new(
        holds: Arc<Holds>,
        config: WatchdogConfig,
        metrics: Arc<CoordinatorMetrics>,
        liveness: Arc<Liveness>,
    ) -> Watchdog {
        Watchdog {
            holds,
            config,
            metrics,
            liveness,
            seen: [None; 2],
        }
    }

    /// Looks at every hold at `now`: logs and counts what crossed a limit
    /// since the last look, sets the liveness, and says whether to exit.
    pub fn look(&mut self, now: Instant) -> Option<Exit> {
        let mut unhealthy = None;
        let mut exit = None;
        let holds = self.holds.clone();
        for (i, hold) in holds.each().into_iter().enumerate() {
            let Some((by, held)) = hold.held(now) else {
                if let Some((by, step)) = self.seen[i].take()
                    && step >= Step::Warned
                {
                    tracing::warn!(what = hold.what(), by, "released after a stall");
                }
                continue;
            };
            let step = self.step(held);
            let before = match self.seen[i] {
                Some((seen_by, step)) if seen_by == by => step,
                _ => Step::Fine,
            };
            self.seen[i] = Some((by, step.max(before)));
            let secs = held.as_secs_f64();
            if step > before {
                match step {
                    Step::Fine | Step::Unhealthy => {}
                    Step::Warned => {
                        self.metrics.stalls.add(1);
                        tracing::warn!(
                            what = hold.what(),
                            by,
                            held_s = format_args!("{secs:.1}"),
                            "held for longer than it should be; the coordinator reports itself not serving"
                        );
                    }
                    Step::Errored => tracing::error!(
                        what = hold.what(),
                        by,
                        held_s = format_args!("{secs:.1}"),
                        exit_after_s = self.config.exit_after.as_secs_f64(),
                        "still held; the coordinator exits at the limit unless it is released"
                    ),
                }
            }
            if step >= Step::Unhealthy {
                unhealthy
                    .get_or_insert_with(|| format!("{} held by {by} for {secs:.1} s", hold.what()));
            }
            if held >= self.config.exit_after {
                exit.get_or_insert_with(|| {
                    Exit(format!(
                        "{} held by {by} for {secs:.1} s, past the limit of {} s: exiting so that the coordinator is started again and its jobs resume from the store",
                        hold.what(),
                        self.config.exit_after.as_secs_f64()
                    ))
                });
            }
        }
        self.liveness.set(unhealthy);
        exit
    }

    fn step(&self, held: Duration) -> Step {
        if held >= self.config.error_after() {
            Step::Errored
        } else if held >= self.config.warn_after() {
            Step::Warned
        } else if held >= self.config.unhealthy_after {
            Step::Unhealthy
        } else {
            Step::Fine
        }
    }
}

/// What the watchdog does at its limit: the binary ends the process (after
/// its logs are written); a test may only note it.
#[derive(Clone)]
pub struct OnStall(pub Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for OnStall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnStall")
    }
}

impl Default for OnStall {
    /// Logs and exits with [`STALL_EXIT_CODE`].
    fn default() -> Self {
        OnStall(Arc::new(|why| {
            tracing::error!("{why}");
            std::process::exit(STALL_EXIT_CODE);
        }))
    }
}

/// The watchdog's thread; stops when dropped.
pub struct WatchdogThread {
    stop: Arc<(Mutex<bool>, Condvar)>,
}

impl WatchdogThread {
    /// Looks every half second until dropped; at the limit calls `on_stall`
    /// once.
    pub fn spawn(mut watchdog: Watchdog, on_stall: OnStall) -> std::io::Result<WatchdogThread> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("tally-watchdog".into())
            .spawn(move || {
                let (flag, wake) = &*stopped;
                let mut fired = false;
                loop {
                    {
                        let mut stop = flag.lock();
                        if !*stop {
                            wake.wait_for(&mut stop, TICK);
                        }
                        if *stop {
                            return;
                        }
                    }
                    if let Some(Exit(why)) = watchdog.look(Instant::now())
                        && !fired
                    {
                        fired = true;
                        (on_stall.0)(&why);
                    }
                }
            })?;
        Ok(WatchdogThread { stop })
    }
}

impl Drop for WatchdogThread {
    fn drop(&mut self) {
        let (flag, wake) = &*self.stop;
        *flag.lock() = true;
        wake.notify_all();
    }
}

/// A short name for the call a closure of type `F` belongs to: the closure's
/// type name is its enclosing function's path, which is what a stalled call
/// is best known by (`WorkerApi::lease`, `server::expire_leases`).
pub fn call_name<F>() -> &'static str {
    // A process has a few dozen calls: each is shortened once.
    static NAMES: Mutex<Option<HashMap<&'static str, &'static str>>> = Mutex::new(None);
    let full = std::any::type_name::<F>();
    let mut names = NAMES.lock();
    let names = names.get_or_insert_with(HashMap::new);
    names
        .entry(full)
        .or_insert_with(|| Box::leak(shorten(full).into_boxed_str()))
}

/// `a::b::<impl Trait for a::b::Type>::method::{{closure}}` is
/// `Type::method`; `a::b::function::{{closure}}` is `b::function`.
fn shorten(name: &str) -> String {
    let mut name = name;
    while let Some(outer) = name.strip_suffix("::{{closure}}") {
        name = outer;
    }
    if let Some((inside, method)) = name.rsplit_once(">::")
        && let Some(open) = inside.find('<')
    {
        // `<Type as Trait>` or `<impl Trait for Type>`.
        let ty = &inside[open + 1..];
        let ty = match ty.split_once(" as ") {
            Some((ty, _)) => ty,
            None => ty.rsplit(" for ").next().unwrap_or(ty),
        };
        // The type's last segment, without its generic arguments.
        let ty = ty.split('<').next().unwrap_or(ty);
        let ty = ty.rsplit("::").next().unwrap_or(ty);
        // An async trait method's lifetimes: `lease<'_, '_>`.
        let method = method.split('<').next().unwrap_or(method);
        return format!("{ty}::{method}");
    }
    let mut segments = name.rsplit("::");
    match (segments.next(), segments.next()) {
        (Some(last), Some(parent)) => format!("{parent}::{last}"),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watchdog(config: WatchdogConfig) -> (Watchdog, Arc<Holds>, Arc<Liveness>) {
        let holds = Arc::new(Holds::default());
        let liveness = Arc::new(Liveness::default());
        let metrics = Arc::new(CoordinatorMetrics::default());
        let dog = Watchdog::new(holds.clone(), config, metrics, liveness.clone());
        (dog, holds, liveness)
    }

    #[test]
    fn a_hold_goes_unhealthy_then_exits_at_the_limit_naming_its_holder() {
        let config = WatchdogConfig {
            unhealthy_after: Duration::from_secs(5),
            exit_after: Duration::from_secs(60),
        };
        let (mut dog, holds, liveness) = watchdog(config);
        let t0 = Instant::now();
        let held = holds.scheduler.begin_at("WorkerApi::lease", t0);
        assert_eq!(dog.look(t0 + Duration::from_secs(4)), None);
        assert_eq!(liveness.stalled(), None);
        assert_eq!(dog.look(t0 + Duration::from_secs(6)), None);
        let why = liveness.stalled().expect("unhealthy past 5 s");
        assert!(
            why.contains("scheduler lock held by WorkerApi::lease"),
            "{why}"
        );
        assert_eq!(dog.metrics.stalls.get(), 0);
        assert_eq!(dog.look(t0 + Duration::from_secs(11)), None);
        assert_eq!(dog.metrics.stalls.get(), 1, "counted once it warned");
        assert_eq!(dog.look(t0 + Duration::from_secs(31)), None);
        assert_eq!(dog.look(t0 + Duration::from_secs(45)), None);
        assert_eq!(dog.metrics.stalls.get(), 1, "one stall, counted once");
        let Exit(why) = dog
            .look(t0 + Duration::from_secs(60))
            .expect("exit at 60 s");
        assert!(
            why.contains("WorkerApi::lease") && why.contains("60.0 s"),
            "{why}"
        );
        drop(held);
        assert_eq!(dog.look(t0 + Duration::from_secs(61)), None);
        assert_eq!(liveness.stalled(), None, "serving again once released");
    }

    #[test]
    fn a_slow_flush_counts_as_a_stall_and_a_new_holder_starts_afresh() {
        let (mut dog, holds, liveness) = watchdog(WatchdogConfig::default());
        let t0 = Instant::now();
        {
            let _flush = holds.flush.begin_at("a group commit", t0);
            assert_eq!(dog.look(t0 + Duration::from_secs(12)), None);
            assert!(liveness.stalled().unwrap().contains("store flush"));
            assert_eq!(dog.metrics.stalls.get(), 1);
        }
        // A later, short hold by another call is fine.
        let _lock = holds
            .scheduler
            .begin_at("expire_leases", t0 + Duration::from_secs(20));
        assert_eq!(dog.look(t0 + Duration::from_secs(21)), None);
        assert_eq!(liveness.stalled(), None);
        assert_eq!(dog.metrics.stalls.get(), 1);
    }

    #[test]
    fn a_holding_guard_ends_the_hold_on_a_panic() {
        let holds = Holds::default();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = holds.scheduler.begin("panicking call");
            panic!("a call panicked");
        }));
        assert!(caught.is_err());
        assert_eq!(holds.scheduler.held(Instant::now()), None);
    }

    struct Api;
    trait Service {
        fn lease(&self) -> &'static str;
    }
    impl Service for Api {
        fn lease(&self) -> &'static str {
            named(|| ())
        }
    }
    fn named<F: FnOnce()>(_: F) -> &'static str {
        call_name::<F>()
    }
    fn expire_leases() -> &'static str {
        named(|| ())
    }

    #[test]
    fn a_call_is_named_by_its_enclosing_function() {
        assert_eq!(Api.lease(), "Api::lease");
        assert_eq!(expire_leases(), "tests::expire_leases");
        assert_eq!(
            shorten(
                "a::b::<impl x::Service for a::b::WorkerApi>::report::{{closure}}::{{closure}}"
            ),
            "WorkerApi::report"
        );
        assert_eq!(
            shorten("<a::b::WorkerApi<'_, '_> as x::Service>::lease<'_, '_>::{{closure}}"),
            "WorkerApi::lease"
        );
        assert_eq!(shorten("plain"), "plain");
    }
}
