//! One shard's kernel call on a compute thread (with its checkpoints sent out
//! as it makes them), and its output read into memory for a report.

use std::sync::Arc;
use std::time::Duration;

use tally_kinds::cache::KernelCache;
use tally_kinds::dynamic::{ShardContext, StageInput};
use tally_kinds::spec::ValidSpec;
use tally_kinds::values::{EncodedTask, ShardEvent, ShardOutcome};
use tally_kinds::{Error as KindError, Result as KindResult, Room, Spill, StageOutput, Stored};
use tally_wire::limits::MAX_REPORT_OUTPUT_BYTES;
use tokio::sync::{mpsc, oneshot};

use crate::context::ShardHandle;
use crate::error::Result;
use crate::reports::Checkpoint;
use crate::spill::FileSpill;

/// One shard's kernel call, with all it needs, for a compute thread.
pub(super) struct Kernel {
    pub(super) spec: ValidSpec,
    pub(super) task: EncodedTask,
    pub(super) input: Option<StageInput>,
    /// The last accepted checkpoint of an earlier attempt, or empty.
    pub(super) checkpoint: Arc<dyn Stored>,
    pub(super) cache: Arc<KernelCache>,
    pub(super) handle: Arc<ShardHandle>,
    pub(super) checkpoint_every: Duration,
    /// Fault injection: see `WorkerConfig::pause_after_checkpoint`.
    pub(super) pause_after_checkpoint: Duration,
    /// The shard's part of the worker's memory budget, and where it spills
    /// past it (removed when the kernel returns).
    pub(super) memory_share: u64,
    pub(super) spill: FileSpill,
}

impl Kernel {
    /// Runs the kernel on this thread, sending its checkpoints to
    /// `checkpoints`: its outcome and the bytes it spilled.
    pub(super) fn run(
        mut self,
        checkpoints: mpsc::UnboundedSender<Checkpoint>,
    ) -> KindResult<(ShardOutcome, u64)> {
        let mut paused = false;
        let mut on_event = |event: ShardEvent| {
            let ShardEvent {
                state,
                partial,
                work_done,
            } = event;
            let _ = checkpoints.send(Checkpoint {
                state,
                partial: partial.map(|p| p.to_bytes()).unwrap_or_default(),
                work_done,
                state_blob: None,
            });
            if !self.pause_after_checkpoint.is_zero() && !paused {
                paused = true;
                std::thread::sleep(self.pause_after_checkpoint);
            }
        };
        let outcome = self.spec.execute(
            &self.task,
            ShardContext {
                input: self.input.as_ref(),
                checkpoint: &*self.checkpoint,
                cache: &self.cache,
                control: &self.handle.control,
                checkpoint_every: self.checkpoint_every,
                on_event: &mut on_event,
                room: Some(Room {
                    memory: self.memory_share,
                    spill: &mut self.spill,
                }),
            },
        )?;
        // The output written to the spill is counted as written, not spilled.
        let output_in_file = match &outcome.output {
            StageOutput::Stored(stored) => stored.len(),
            StageOutput::Bytes(_) => 0,
        };
        Ok((outcome, self.spill.bytes_written() - output_in_file))
    }
}

/// The value a compute thread sends back.
pub(super) async fn computed<T>(receiver: oneshot::Receiver<KindResult<T>>) -> Result<T> {
    let result = receiver
        .await
        .map_err(|_| KindError::Internal("the compute thread stopped".into()))?;
    Ok(result?)
}

/// A shard's output for a report to a coordinator that keeps stage data:
/// read from its file if it was written to one, up to what a report holds.
pub(super) async fn output_in_memory(output: StageOutput) -> Result<Vec<u8>> {
    let stored = match output {
        StageOutput::Bytes(bytes) => return Ok(bytes),
        StageOutput::Stored(stored) => stored,
    };
    if stored.len() > MAX_REPORT_OUTPUT_BYTES as u64 {
        return Err(KindError::InvalidArgument(format!(
            "a shard's output of {} bytes is more than the {MAX_REPORT_OUTPUT_BYTES} a report \
             carries to a coordinator that keeps stage data itself; give the coordinator a \
             --stage-store",
            stored.len()
        ))
        .into());
    }
    tokio::task::spawn_blocking(move || stored.read_range(0..stored.len()))
        .await
        .map_err(|e| KindError::Internal(format!("reading a shard's output: {e}")))?
        .map_err(Into::into)
}
