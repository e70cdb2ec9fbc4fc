//! Shards sized for the user. Where the user chose a kind's shard count
//! (`JobKind::shard_count`: synthetic, wasm), the client times the job's first
//! shard before it submits, for at most [`TRIAL_BUDGET`], in this process (a
//! user kernel in the sandbox a worker would use): shards far shorter than the
//! runner's own cost a shard are said in the `submitted` line, and
//! `--shards auto` gets a count from the workers' slots, cut down while a
//! shard would take less than [`AUTO_SHARD_TIME`].
//!
//! The client, not the coordinator, runs the trial: a coordinator runs no
//! user kernel (its sandbox only checks modules), and the client has the
//! module in hand.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tally_kinds::Control;
use tally_kinds::cache::KernelCache;
use tally_kinds::guest::GuestRuntime;
use tally_kinds::kind::ShardCount;
use tally_kinds::spec::ValidSpec;

/// The runner's own work a shard at its defaults (`cargo bench --bench
/// runner -- defaults`: 10^5 synthetic shards of no work, per shard).
pub const RUNNER_COST_PER_SHARD: Duration = Duration::from_micros(60);

/// Shards shorter than this many times the runner's cost are called short:
/// the runner then takes a tenth of the time or more.
const SHORT_TIMES_COST: u32 = 10;

/// The longest a trial shard runs; past it the shards are long enough.
const TRIAL_BUDGET: Duration = Duration::from_millis(25);

/// `--shards auto`: shards of at least this (the runner's cost then below
/// one percent).
const AUTO_SHARD_TIME: Duration = Duration::from_millis(10);

/// Shard counts above this are not timed: planning every shard to time the
/// first would cost more than the trial's budget (a million synthetic tasks),
/// and would go on past it, since planning is not cancelled.
const MOST_SHARDS_TIMED: u64 = 100_000;

/// `--shards auto`: shards a slot, so that the last ones balance.
const AUTO_SHARDS_PER_SLOT: u64 = 4;

/// A spec with its shard count decided, and what to say about it.
pub struct Sized {
    pub spec: ValidSpec,
    pub note: Option<String>,
}

/// Sizes `spec`'s shards for `slots` live worker slots (see the module's
/// note); `attachments` are the files the job sends (a module), run in
/// `sandbox` if it is a user kernel.
pub fn size(
    spec: ValidSpec,
    attachments: &[Vec<u8>],
    slots: u64,
    sandbox: Arc<dyn GuestRuntime>,
) -> anyhow::Result<Sized> {
    if spec.shard_count().is_none() {
        return Ok(Sized { spec, note: None });
    }
    let cache = trial_cache(attachments, sandbox);
    size_by(spec, slots, |spec| trial(spec, &cache))
}

/// [`size`] with `time_first_shard` timing a spec's first shard (`None`:
/// longer than the trial allows, or it cannot run).
fn size_by(
    spec: ValidSpec,
    slots: u64,
    time_first_shard: impl Fn(&ValidSpec) -> Option<Duration>,
) -> anyhow::Result<Sized> {
    let Some(count) = spec.shard_count() else {
        return Ok(Sized { spec, note: None });
    };
    match count {
        ShardCount::Chosen(shards) if shards > MOST_SHARDS_TIMED => Ok(Sized { spec, note: None }),
        ShardCount::Chosen(shards) => {
            let note = time_first_shard(&spec)
                .filter(|t| *t < RUNNER_COST_PER_SHARD * SHORT_TIMES_COST)
                .map(|t| {
                    format!(
                        "its {shards} shards are short: the first took {}, against about {} of \
                         the runner's own work a shard; fewer shards would finish sooner{}",
                        shown(t),
                        shown(RUNNER_COST_PER_SHARD),
                        match takes_auto(&spec) {
                            true => " (--shards auto picks a count)",
                            false => "",
                        }
                    )
                });
            Ok(Sized { spec, note })
        }
        ShardCount::Auto => {
            let first = (slots.max(1) * AUTO_SHARDS_PER_SLOT).max(AUTO_SHARDS_PER_SLOT);
            let trial_spec = spec.with_shard_count(first)?;
            let (shards, why) = match time_first_shard(&trial_spec) {
                Some(t) if t < AUTO_SHARD_TIME => {
                    let scaled = (first as f64 * t.as_secs_f64() / AUTO_SHARD_TIME.as_secs_f64())
                        .ceil()
                        .max(1.0) as u64;
                    let why = format!(
                        "a shard of {first} took {}: fewer, of about {} each",
                        shown(t),
                        shown(AUTO_SHARD_TIME)
                    );
                    (scaled, why)
                }
                _ => (
                    first,
                    format!("{AUTO_SHARDS_PER_SLOT} for each of {slots} worker slot(s)"),
                ),
            };
            let spec = spec.with_shard_count(shards)?;
            Ok(Sized {
                spec,
                note: Some(format!("--shards auto: {shards} shards ({why})")),
            })
        }
    }
}

/// Whether the kind picks `spec`'s count itself when asked (`--shards auto`).
fn takes_auto(spec: &ValidSpec) -> bool {
    spec.with_shard_count(0)
        .is_ok_and(|unsized_spec| unsized_spec.shard_count() == Some(ShardCount::Auto))
}

/// A cache holding the job's attachments and, for a user kernel, the
/// sandbox to run it in (as a worker would).
fn trial_cache(attachments: &[Vec<u8>], sandbox: Arc<dyn GuestRuntime>) -> Arc<KernelCache> {
    let cache = Arc::new(KernelCache::new());
    for bytes in attachments {
        let sha256 = tally_kinds::guest::sha256_hex(bytes);
        cache.put_attachment(&sha256, bytes.clone().into());
    }
    cache.set_guest_runtime(sandbox);
    cache
}

/// How long the first shard of `spec` takes to compute, if it and the
/// planning before it finish within [`TRIAL_BUDGET`]; `None` past it, or if
/// it cannot run here. A trial past its budget is cancelled and left to stop by itself.
fn trial(spec: &ValidSpec, cache: &Arc<KernelCache>) -> Option<Duration> {
    let control = Arc::new(Control::new());
    let (done, timed) = mpsc::channel();
    let (spec, cache, running) = (spec.clone(), cache.clone(), control.clone());
    std::thread::Builder::new()
        .name("tally-trial".into())
        .spawn(move || {
            let took = spec.prepare(&cache, &running).ok().and_then(|plan| {
                let first = spec.plan_stage(&plan, 1).ok()?.into_iter().next()?;
                let started = Instant::now();
                spec.execute_once(&first.task, &cache, &running).ok()?;
                Some(started.elapsed())
            });
            let _ = done.send(took);
        })
        .ok()?;
    match timed.recv_timeout(TRIAL_BUDGET) {
        Ok(took) => took,
        Err(_) => {
            control.cancel();
            None
        }
    }
}

/// A duration as a person reads it: microseconds below a millisecond.
fn shown(t: Duration) -> String {
    match t.as_micros() {
        us if us < 1_000 => format!("{us} µs"),
        _ => format!("{:.1} ms", t.as_secs_f64() * 1e3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_kinds::synthetic::SyntheticSpec;

    fn synthetic(shards: u64) -> ValidSpec {
        ValidSpec::of(SyntheticSpec {
            shards,
            terms_per_shard: 1,
        })
        .unwrap()
    }

    /// A wasm job of `shards` (0: auto); the module need not exist to size it.
    fn wasm(shards: u64) -> ValidSpec {
        ValidSpec::of(tally_kinds::wasm::WasmSpec {
            module_sha256: "ab".repeat(32),
            shards,
            params: Vec::new(),
            modulus: 1_000_000_007,
            exact: false,
            bound_bits: 0,
            outputs: 1,
        })
        .unwrap()
    }

    const US: fn(u64) -> Duration = Duration::from_micros;

    fn sandbox() -> Arc<dyn GuestRuntime> {
        Arc::new(tally_wasm::GuestSandbox::new(tally_wasm::Limits::default()).unwrap())
    }

    #[test]
    fn short_shards_are_called_short_and_kept_as_asked() {
        let sized = size_by(synthetic(1_000), 2, |_| Some(US(5))).unwrap();
        assert_eq!(sized.spec, synthetic(1_000), "a chosen count is kept");
        let note = sized.note.expect("a shard of 5 µs is short");
        assert!(note.contains("1000 shards are short"), "{note}");
        // Synthetic counts are part of the sum: no auto to offer.
        assert!(!note.contains("auto"), "{note}");
        let note = size_by(wasm(10), 2, |_| Some(US(5))).unwrap().note.unwrap();
        assert!(note.contains("--shards auto picks"), "{note}");
        for long in [Some(RUNNER_COST_PER_SHARD * SHORT_TIMES_COST), None] {
            assert_eq!(size_by(wasm(10), 2, |_| long).unwrap().note, None);
        }
        let untimed = size_by(synthetic(MOST_SHARDS_TIMED + 1), 2, |_| {
            panic!("a count past the limit is not timed")
        });
        assert_eq!(untimed.unwrap().note, None);
    }

    #[test]
    fn shards_auto_takes_four_a_slot_and_fewer_when_they_would_be_short() {
        let timed = |t: Option<Duration>| {
            let sized = size_by(wasm(0), 3, |spec| {
                assert_eq!(
                    spec.shard_count(),
                    Some(ShardCount::Chosen(12)),
                    "timed at 4 a slot"
                );
                t
            })
            .unwrap();
            (sized.spec.shard_count(), sized.note.unwrap())
        };
        let (long, note) = timed(None);
        assert_eq!(long, Some(ShardCount::Chosen(12)), "{note}");
        assert!(note.starts_with("--shards auto: 12 shards"), "{note}");
        // A shard of 12 taking 2.5 ms: 3 shards of about 10 ms.
        let (short, note) = timed(Some(US(2_500)));
        assert_eq!(short, Some(ShardCount::Chosen(3)), "{note}");
        let (tiny, _) = timed(Some(US(1)));
        assert_eq!(tiny, Some(ShardCount::Chosen(1)), "never fewer than one");
    }

    #[test]
    fn the_trial_times_a_real_shard_within_its_budget() {
        let cache = trial_cache(&[], sandbox());
        trial(&synthetic(10), &cache).expect("a shard of one term finishes in time");
    }

    #[test]
    fn a_kind_that_decides_its_shards_is_left_alone() {
        let spec = ValidSpec::of(tally_kinds::kayles::KaylesSpec {
            pins: 10,
            digits: 9,
        })
        .unwrap();
        let sized = size(spec.clone(), &[], 2, sandbox()).unwrap();
        assert_eq!((sized.spec, sized.note), (spec, None));
    }

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(shown(Duration::from_micros(7)), "7 µs");
        assert_eq!(shown(Duration::from_micros(2_500)), "2.5 ms");
    }
}
