//! Running one hex shard: a cell step's range of target states, or a points
//! shard's vectorised pass with its checkpoints.

use std::sync::{Arc, Weak};

use crate::kind::{Checkpoint, Outcome, ShardRun};
use crate::{Control, Result, Spill, StageOutput, Stored, invalid};
use tally_kernels::hex;
use tally_kernels::hex::PassPoint;

use super::{HexInput, HexPartial, HexSpec, POINTS_PER_SHARD, graph};

/// A cell-step shard: the target states of one step.
pub(super) struct StepShard {
    pub(super) step: u32,
    pub(super) states: std::ops::Range<usize>,
    pub(super) last: bool,
}

pub(super) fn execute_step(
    graph: &hex::HexGraph,
    modulus: u32,
    shard: &StepShard,
    input: Option<&[u32]>,
    control: &Control,
) -> Result<Outcome<HexPartial>> {
    control.check()?;
    let (states, stride) = (graph.num_states(), graph.stride());
    let (start, end, step) = (shard.states.start, shard.states.end, shard.step);
    if start >= end || end > states || step as usize > graph.num_steps() {
        return Err(invalid!(
            "hex shard [{start}, {end}) at step {step} does not fit {states} states and {} steps",
            graph.num_steps()
        ));
    }
    let initial;
    let previous: &[u32] = if step <= 1 {
        initial = graph.initial_vector(modulus);
        &initial
    } else {
        let words =
            input.ok_or_else(|| invalid!("hex step {step} needs the previous stage's data"))?;
        if words.len() != states * stride {
            return Err(invalid!(
                "stage data holds {} residues, expected {}",
                words.len(),
                states * stride
            ));
        }
        words
    };
    let out = if step == 0 {
        previous[start * stride..end * stride].to_vec()
    } else {
        let mut out = vec![0u32; (end - start) * stride];
        graph.step_range(step as usize, previous, start..end, modulus, &mut out);
        out
    };
    control.add_work((end - start) as u64);
    let work_done = (end - start) as u64;
    if shard.last {
        let residues = sum_polynomials(&out, stride, modulus);
        Ok(Outcome {
            output: crate::StageOutput::default(),
            partial: HexPartial::HexCrossings { residues },
            work_done,
        })
    } else {
        Ok(Outcome {
            output: hex::encode_polynomials(&out, stride).into(),
            partial: HexPartial::None,
            work_done,
        })
    }
}

pub(super) fn sum_polynomials(values: &[u32], stride: usize, modulus: u32) -> Vec<u32> {
    let mut sums = vec![0u64; stride];
    for poly in values.chunks_exact(stride) {
        for (s, &c) in sums.iter_mut().zip(poly) {
            *s = (*s + c as u64) % modulus as u64;
        }
    }
    sums.into_iter().map(|s| s as u32).collect()
}

/// The graph a points shard's pass runs on: the worker's, in memory, or
/// the job's staged graph, read a group at a time.
enum PassGraph<'a> {
    Memory(Arc<hex::HexGraph>),
    Spilled(&'a hex::SpilledGraph),
}

impl PassGraph<'_> {
    fn num_states(&self) -> usize {
        match self {
            PassGraph::Memory(graph) => graph.num_states(),
            PassGraph::Spilled(graph) => graph.num_states(),
        }
    }

    fn pass_bytes(&self, points: usize) -> usize {
        match self {
            PassGraph::Memory(graph) => graph.pass_bytes(points),
            PassGraph::Spilled(graph) => graph.vector_bytes(points) as usize,
        }
    }

    fn evaluate_pass(
        &self,
        points: &[u32],
        modulus: u32,
        control: &Control,
        resume: Option<hex::Resume<'_>>,
        after_round: &(dyn Fn(PassPoint<'_>) + Sync),
    ) -> Result<Vec<u32>> {
        match self {
            PassGraph::Memory(graph) => {
                graph.evaluate_pass(points, modulus, 1, control, resume, after_round)
            }
            PassGraph::Spilled(graph) => {
                let options = hex::PassOptions {
                    resume,
                    after_round,
                    ..hex::PassOptions::new(1, control)
                };
                graph.evaluate_pass(points, modulus, &options)
            }
        }
    }
}

pub(super) fn execute_points(
    h: &HexSpec,
    modulus: u32,
    points: &[u32],
    run: &mut ShardRun<'_, HexInput, HexPartial>,
) -> Result<Outcome<HexPartial>> {
    run.control.check()?;
    let valid = modulus == h.modulus || (h.exact && hex::exact_primes(h.side).contains(&modulus));
    if !valid || points.is_empty() || points.len() > POINTS_PER_SHARD {
        return Err(invalid!("hex points shard does not belong to this job"));
    }
    let graph = match (h.staged(), run.input) {
        (false, _) => PassGraph::Memory(graph(run.cache, h.side)?),
        (true, Some(HexInput::Graph(graph))) => PassGraph::Spilled(graph),
        (true, _) => {
            return Err(invalid!(
                "a hex points shard of a staged graph needs the graph"
            ));
        }
    };
    let lanes = points.len().next_power_of_two();
    let resume = PassCheckpoint::resume(run.checkpoint, graph.num_states(), lanes)?;
    let vector_bytes = graph.pass_bytes(points.len());
    let interval = pass_checkpoint_interval(run.checkpoint_every, vector_bytes);
    let control = run.control;
    let graph = &graph;
    // Where the worker gives a spill, each checkpoint is written there from
    // the pass's vector, not copied in memory: the shard holds one vector,
    // whatever its checkpoints.
    let sink = match run.room.as_mut() {
        Some(room) => CheckpointSink::Spill {
            spill: &mut *room.spill,
            in_flight: None,
        },
        None => CheckpointSink::Memory,
    };
    // The work of a shard is its points: counted in proportion to the rounds
    // done, so that a pass of hours shows progress (and is not taken for
    // stalled), from where it resumed.
    let points_done = |at: &PassPoint<'_>| (points.len() * at.rounds_done / at.rounds) as u64;
    // Only the thread between two rounds touches this; the lock is for the
    // borrow checker's sake.
    let progress = parking_lot::Mutex::new(PassProgress {
        last_checkpoint: std::time::Instant::now(),
        work_counted: 0,
        sink,
    });
    let progress = &progress;
    // The pass runs on a thread of its own and hands its checkpoints here,
    // where the shard's callback lives; at most one waits at a time.
    let (sender, checkpoints) = std::sync::mpsc::sync_channel::<(StageOutput, u64)>(1);
    let on_checkpoint = &mut *run.on_checkpoint;
    let values = std::thread::scope(|scope| {
        let pass = scope.spawn(move || {
            let after_round = |at: PassPoint<'_>| {
                let done = points_done(&at);
                let mut progress = progress.lock();
                control.add_work(done.saturating_sub(progress.work_counted));
                progress.work_counted = done;
                let due = progress.last_checkpoint.elapsed() >= interval;
                if (due || control.checkpoint_asked())
                    && let Some(state) = progress.sink.make(&at, lanes)
                {
                    let _ = sender.send((state, done));
                    progress.last_checkpoint = std::time::Instant::now();
                }
            };
            graph.evaluate_pass(points, modulus, control, resume, &after_round)
        });
        for (state, work_done) in checkpoints {
            on_checkpoint(Checkpoint {
                state,
                partial: None,
                work_done,
            });
        }
        pass.join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })?;
    control.check()?;
    let counted = progress.lock().work_counted;
    control.add_work((points.len() as u64).saturating_sub(counted));
    Ok(Outcome {
        output: crate::StageOutput::default(),
        partial: HexPartial::HexEvaluations {
            modulus,
            evaluations: points.iter().copied().zip(values).collect(),
        },
        work_done: points.len() as u64,
    })
}

/// Where a points shard's pass stands, as its rounds end.
struct PassProgress<'s> {
    last_checkpoint: std::time::Instant,
    /// The points counted as work so far.
    work_counted: u64,
    sink: CheckpointSink<'s>,
}

/// Where a points shard makes its checkpoints.
enum CheckpointSink<'s> {
    /// Bytes in memory, where there is no spill (the kernel alone).
    Memory,
    /// Runs of the shard's spill, each released by the spill as soon as it
    /// is made, so that the last handle to it (the worker's, once it has
    /// sent it on) frees it. A new one is made only when the last one is
    /// gone: one checkpoint at a time on disk, and a slow upload is never
    /// queued behind.
    Spill {
        spill: &'s mut dyn Spill,
        in_flight: Option<Weak<dyn Stored>>,
    },
}

impl CheckpointSink<'_> {
    /// The checkpoint of the pass at `at`, or none now (the last is still
    /// being sent, or the spill refused it: the pass goes on, and a later
    /// round makes one).
    fn make(&mut self, at: &PassPoint<'_>, lanes: usize) -> Option<StageOutput> {
        match self {
            CheckpointSink::Memory => {
                let mut bytes = Vec::with_capacity(PassCheckpoint::len(at.states(), lanes));
                PassCheckpoint::write(at, lanes, &mut |chunk| {
                    bytes.extend_from_slice(chunk);
                    Ok(())
                })
                .expect("writing to memory does not fail");
                Some(bytes.into())
            }
            CheckpointSink::Spill { spill, in_flight } => {
                if in_flight
                    .as_ref()
                    .is_some_and(|last| last.strong_count() > 0)
                {
                    return None;
                }
                // The spill buffers its runs' writes itself: the pieces go
                // to it as they are made.
                let made = (|| {
                    PassCheckpoint::write(at, lanes, &mut |bytes| spill.write(bytes))?;
                    let run = spill.end_run()?;
                    let kept = spill.keep_run(run)?;
                    spill.release_run(run)?;
                    Ok::<_, crate::Error>(kept)
                })();
                match made {
                    Ok(kept) => {
                        *in_flight = Some(Arc::downgrade(&kept));
                        Some(StageOutput::Stored(kept))
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "a hex pass checkpoint was not written to the spill; the pass goes on");
                        None
                    }
                }
            }
        }
    }
}

/// How far apart a points shard checkpoints: `every` for a vector that could
/// come with a lease, and as much longer as the vector is larger, so that
/// checkpoints cost about the same part of the pass at any size; but at most
/// a minute apart for each gigabyte of vector, or `every` if that is longer.
/// (A checkpoint of gigabytes takes seconds to write and to send: once a
/// minute, side 20's 10.5 GB vector of 8 points would move 10 GB a minute
/// a shard; a shard loses at most the interval's work either way.)
pub(super) fn pass_checkpoint_interval(
    every: std::time::Duration,
    bytes: usize,
) -> std::time::Duration {
    let scale = bytes as f64 / tally_wire::limits::INLINE_CHECKPOINT_BYTES as f64;
    let scaled = every.mul_f64(scale.max(1.0));
    let most = CHECKPOINTS_APART_PER_GB.mul_f64((bytes as f64 / 1e9).max(1.0));
    every.max(scaled.min(most))
}

/// The longest time between a points shard's checkpoints, for each
/// gigabyte of its vector (and for a smaller one).
const CHECKPOINTS_APART_PER_GB: std::time::Duration = std::time::Duration::from_secs(60);

/// The resumable state of a points shard: the rounds of its pass done and
/// the pass vector. Encoded as `HXP1`, the rounds done (u32), the lanes (u32),
/// the states (u64), then the vector's residues, all little-endian.
pub(super) struct PassCheckpoint;

impl PassCheckpoint {
    const MAGIC: &'static [u8; 4] = b"HXP1";
    const HEADER: usize = 20;

    fn len(states: usize, lanes: usize) -> usize {
        Self::HEADER + 4 * states * lanes
    }

    /// Hands the checkpoint of the pass at `at` to `out`, a piece at a time.
    fn write(
        at: &PassPoint<'_>,
        lanes: usize,
        out: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut header = Vec::with_capacity(Self::HEADER);
        header.extend_from_slice(Self::MAGIC);
        header.extend_from_slice(&(at.rounds_done as u32).to_le_bytes());
        header.extend_from_slice(&(lanes as u32).to_le_bytes());
        header.extend_from_slice(&(at.states() as u64).to_le_bytes());
        out(&header)?;
        let mut piece = Vec::with_capacity(1 << 16);
        for run in at.residues() {
            for residues in run.chunks(1 << 14) {
                piece.clear();
                piece.extend(residues.iter().flat_map(|r| r.to_le_bytes()));
                out(&piece)?;
            }
        }
        Ok(())
    }

    /// Where the shard resumes from the checkpoint `stored` (none if empty),
    /// checked against the shard: its graph's states and its lanes (the
    /// pass checks its rounds and residues as it reads the vector).
    fn resume(stored: &dyn Stored, states: usize, lanes: usize) -> Result<Option<hex::Resume<'_>>> {
        if stored.is_empty() {
            return Ok(None);
        }
        let expected = Self::len(states, lanes);
        let mut header = [0u8; Self::HEADER];
        let fits = stored.len() == expected as u64 && stored.read_exact_at(0, &mut header).is_ok();
        let word = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
        if !fits
            || &header[..4] != Self::MAGIC
            || word(8) as usize != lanes
            || u64::from_le_bytes(header[12..20].try_into().expect("8 bytes")) != states as u64
        {
            return Err(invalid!(
                "the checkpoint is not one of this hex points shard ({} bytes, expected \
                 {expected} for {states} states of {lanes} lanes)",
                stored.len(),
            ));
        }
        Ok(Some(hex::Resume {
            rounds_done: word(4) as usize,
            vector: stored,
            from: Self::HEADER as u64,
        }))
    }
}
