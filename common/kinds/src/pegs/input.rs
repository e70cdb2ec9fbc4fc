//! What a pegs level shard reads: the buckets every shard of the previous
//! stage sent it, framed and read as streams.

use std::ops::Range;
use std::sync::Arc;

use crate::{Result, Stored, invalid};
use tally_kernels::buckets::{gathered_ranges, length_at};
use tally_kernels::spill::StoredSource;

/// What a level shard reads: bucket `q` of every shard of the previous
/// stage, framed but not decoded, in memory or in a file the worker wrote as
/// it arrived, so a level is read as a stream (`pegs::expand_level_within`)
/// and never held decoded whole.
pub struct PegInput {
    stored: Arc<dyn Stored>,
    /// Each shard's bucket: the byte ranges of its level and of its joined
    /// positions.
    parts: Vec<(Range<u64>, Range<u64>)>,
}

impl PegInput {
    /// The gathered buckets (see `tally_kernels::buckets`: each a length and
    /// a `StageBucket`), their framing checked; their contents are checked as
    /// they are read.
    pub(super) fn new(stored: Arc<dyn Stored>) -> Result<PegInput> {
        let mut parts = Vec::new();
        for segment in gathered_ranges(&*stored)? {
            let (start, end) = (segment.start, segment.end);
            let level = length_at(&*stored, start, end, "peg stage bucket: its level's length")?;
            let level_end = (start + 8)
                .checked_add(level)
                .filter(|&e| e <= end)
                .ok_or_else(|| invalid!("peg stage bucket: its level runs past the end"))?;
            parts.push((start + 8..level_end, level_end..end));
        }
        Ok(PegInput { stored, parts })
    }

    /// The input held in memory.
    pub(super) fn in_memory(gathered: &[u8]) -> Result<PegInput> {
        PegInput::new(Arc::new(gathered.to_vec()))
    }

    /// Each shard's encoded level, read in chunks.
    pub(super) fn level_sources(&self) -> impl Iterator<Item = StoredSource<'_>> {
        self.parts
            .iter()
            .map(|(level, _)| StoredSource::new(&*self.stored, level.clone()))
    }

    /// Bytes of every shard's level together.
    pub(super) fn level_bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|(level, _)| level.end - level.start)
            .sum()
    }

    /// Whether any shard sent joined positions (a level shard's input has
    /// none: each part ends with an empty bucket, `empty` in the job's form).
    pub(super) fn has_joined(&self, empty: &[u8]) -> Result<bool> {
        for (_, joined) in &self.parts {
            if joined.end - joined.start != empty.len() as u64
                || self.stored.read_range(joined.clone())? != empty
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Each shard's encoded joined positions, read in chunks.
    pub(super) fn joined_sources(&self) -> impl Iterator<Item = StoredSource<'_>> {
        self.parts
            .iter()
            .map(|(_, joined)| StoredSource::new(&*self.stored, joined.clone()))
    }
}
