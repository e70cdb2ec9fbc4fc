//! What both ends of the wire agree on besides the proto contract: the message
//! size limit, the chunk size of stage output and the batch limits.

/// Largest gRPC message either side may send (one output chunk is 1 MiB).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Stage output is sent and stored in chunks of at most this size.
pub const OUTPUT_CHUNK: usize = 1 << 20;

/// A checkpoint up to this size comes with its lease; a larger one the worker
/// fetches in chunks (`FetchCheckpoint`), and sends in chunks of
/// [`OUTPUT_CHUNK`] (`CheckpointChunk`).
pub const INLINE_CHECKPOINT_BYTES: usize = 4 << 20;

/// One lease response carries at most this many bytes of checkpoints (half of
/// [`MAX_MESSAGE_BYTES`]); the leases beyond announce theirs to be fetched.
pub const MAX_INLINE_CHECKPOINTS_PER_RESPONSE: usize = 8 << 20;

/// The largest checkpoint state a report may carry (a hex pass vector of side
/// 17 at 16 points is about 0.9 GB).
pub const MAX_CHECKPOINT_BYTES: usize = 1 << 30;

/// The largest stage output a report may carry to a coordinator that keeps
/// stage data itself; a larger one needs a stage store, where workers write
/// it directly.
pub const MAX_REPORT_OUTPUT_BYTES: usize = 1 << 30;

/// At most this many reports in one `ReportBatch` call.
pub const MAX_BATCH_REPORTS: usize = 1_024;

/// At most this much stage output in one `ReportBatch` call (far below
/// [`MAX_MESSAGE_BYTES`]); a larger output goes through `Report` in chunks.
pub const MAX_BATCH_OUTPUT: usize = 4 << 20;

/// With a stage store, a coordinator takes stage outputs up to the size it
/// says at registration inline with their reports and keeps them itself; it
/// says at most this much (a batched report's share of
/// [`MAX_BATCH_OUTPUT`]), and by default [`DEFAULT_INLINE_STAGE_OUTPUT`].
pub const MAX_INLINE_STAGE_OUTPUT: usize = 1 << 20;

/// The inline stage output a coordinator takes by default: a blob of its own
/// costs a file or a request, more than this many bytes cost through the
/// coordinator.
pub const DEFAULT_INLINE_STAGE_OUTPUT: usize = 256 << 10;
