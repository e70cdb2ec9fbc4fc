//! Room for what a shard cannot hold: a memory share and a spill.
//!
//! A frontier shard sums its children in a table. When the table passes the
//! shard's share of its worker's memory, the shard writes it out as a sorted
//! run and starts an empty one; at the end it merges the runs with sequential
//! reads. Where runs go is the caller's: the worker gives a directory of its
//! own ([`Spill`] over files), tests and the kernel alone keep them in memory
//! ([`MemorySpill`]). Kernels only write and read bytes through the trait.
//!
//! A shard's input too may be larger than its share: the worker then writes
//! it to a file as it arrives and the kernel reads it by ranges ([`Stored`]).
//! So may its output: a shard that spilled writes its output as a run too,
//! and hands it on as [`StageOutput::Stored`], which the worker uploads from
//! the file without reading it into memory.

use std::ops::Range;
use std::sync::Arc;

use crate::{Error, Result, varint};

mod increasing;
pub use increasing::{IncreasingStream, MergedIncreasing, write_increasing, write_increasing_as};

/// Runs of bytes, each written once in order and then read by ranges.
pub trait Spill: Send {
    /// Appends `bytes` to the run being written (a new one after [`Spill::end_run`]).
    fn write(&mut self, bytes: &[u8]) -> Result<()>;
    /// Ends the run being written and returns its number (0, 1, ...).
    fn end_run(&mut self) -> Result<u32>;
    /// Fills `buf` from run `run` at `offset`: the bytes read, fewer than
    /// `buf.len()` only at the end of the run.
    fn read_at(&self, run: u32, offset: u64, buf: &mut [u8]) -> Result<usize>;
    /// Bytes written to every run so far.
    fn bytes_written(&self) -> u64;
    /// The ended run `run` as bytes that outlive the spill: a shard's output
    /// written as a run, handed on without being read into memory.
    fn keep_run(&self, run: u32) -> Result<Arc<dyn Stored>>;
    /// The spill no longer holds run `run` (reading it through the spill is
    /// then an error): its bytes live on in the handles [`Spill::keep_run`]
    /// gave, and their room is freed with the last of them. For runs made
    /// over and over by one shard (a pass's checkpoints).
    fn release_run(&mut self, run: u32) -> Result<()>;
}

/// What a shard hands to the next stage: bytes in memory, or (for an output
/// larger than the shard may hold) a run of its spill.
#[derive(Clone)]
pub enum StageOutput {
    Bytes(Vec<u8>),
    Stored(Arc<dyn Stored>),
}

impl StageOutput {
    pub fn len(&self) -> u64 {
        match self {
            StageOutput::Bytes(bytes) => bytes.len() as u64,
            StageOutput::Stored(stored) => stored.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The output in memory: read whole if it was stored.
    pub fn into_bytes(self) -> Result<Vec<u8>> {
        match self {
            StageOutput::Bytes(bytes) => Ok(bytes),
            StageOutput::Stored(stored) => stored.read_range(0..stored.len()),
        }
    }
}

impl From<Vec<u8>> for StageOutput {
    fn from(bytes: Vec<u8>) -> Self {
        StageOutput::Bytes(bytes)
    }
}

impl Default for StageOutput {
    fn default() -> Self {
        StageOutput::Bytes(Vec::new())
    }
}

impl std::fmt::Debug for StageOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StageOutput::Bytes(bytes) => write!(f, "StageOutput::Bytes({} bytes)", bytes.len()),
            StageOutput::Stored(stored) => {
                write!(f, "StageOutput::Stored({} bytes)", stored.len())
            }
        }
    }
}

/// Bytes gathered before each write to a spill.
pub const WRITE_CHUNK: usize = 1 << 20;

/// Bytes of an encoding that starts with a count (a varint): in memory, or
/// (written by a shard that spilled) the count and the rest, a range of a
/// spill run, since the count is known only once the rest is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountedList {
    Bytes(Vec<u8>),
    Spilled {
        count: u128,
        run: u32,
        body: Range<u64>,
    },
}

impl CountedList {
    /// The length of its encoding.
    pub fn len(&self) -> u64 {
        match self {
            CountedList::Bytes(bytes) => bytes.len() as u64,
            CountedList::Spilled { count, body, .. } => {
                varint_len(*count) + (body.end - body.start)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes in memory, read from `spill` if they are there.
    pub fn to_bytes(&self, spill: &dyn Spill) -> Result<Vec<u8>> {
        match self {
            CountedList::Bytes(bytes) => Ok(bytes.clone()),
            CountedList::Spilled { count, run, body } => {
                let mut bytes = Vec::new();
                varint::push(&mut bytes, *count);
                let kept = spill.keep_run(*run)?;
                bytes.extend_from_slice(&kept.read_range(body.clone())?);
                Ok(bytes)
            }
        }
    }

    /// Appends its bytes to the run `spill` is writing, in chunks (a spilled
    /// list is read from a run of the same spill).
    pub fn write_to(&self, spill: &mut dyn Spill) -> Result<()> {
        match self {
            CountedList::Bytes(bytes) => spill.write(bytes),
            CountedList::Spilled { count, run, body } => {
                let mut head = Vec::new();
                varint::push(&mut head, *count);
                spill.write(&head)?;
                let kept = spill.keep_run(*run)?;
                let mut source = StoredSource::new(&*kept, body.clone());
                let mut buf = vec![0; WRITE_CHUNK.min((body.end - body.start) as usize)];
                loop {
                    let n = source.fill(&mut buf)?;
                    if n == 0 {
                        return Ok(());
                    }
                    spill.write(&buf[..n])?;
                }
            }
        }
    }
}

fn varint_len(value: u128) -> u64 {
    let mut bytes = Vec::with_capacity(19);
    varint::push(&mut bytes, value);
    bytes.len() as u64
}

/// A segment of a spill run or bytes in memory: what a merge reads.
pub enum RunOrSlice<'a> {
    Run(StoredSource<'a>),
    Slice(&'a [u8]),
}

impl Source for RunOrSlice<'_> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        match self {
            RunOrSlice::Run(run) => run.fill(buf),
            RunOrSlice::Slice(slice) => slice.fill(buf),
        }
    }
}

/// Bytes appended to the run a spill is writing, in chunks of
/// [`WRITE_CHUNK`], counted.
pub struct ChunkedWrite<'s> {
    spill: &'s mut dyn Spill,
    pub buf: Vec<u8>,
    written: u64,
}

impl<'s> ChunkedWrite<'s> {
    pub fn new(spill: &'s mut dyn Spill) -> Self {
        ChunkedWrite {
            spill,
            buf: Vec::with_capacity(WRITE_CHUNK + 64),
            written: 0,
        }
    }

    /// Writes what is gathered once it reaches a chunk.
    pub fn flush_if_full(&mut self) -> Result<()> {
        if self.buf.len() >= WRITE_CHUNK {
            self.spill.write(&self.buf)?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes the rest: the bytes written in all.
    pub fn finish(self) -> Result<u64> {
        self.spill.write(&self.buf)?;
        Ok(self.written + self.buf.len() as u64)
    }
}

/// `buckets::encode_buckets`'s framing of buckets made of pieces (each
/// bucket its pieces one after another), written as a run of `spill`: a
/// shard's output, handed on from there.
pub fn write_framed(buckets: &[Vec<CountedList>], spill: &mut dyn Spill) -> Result<StageOutput> {
    spill.write(&framing_head(buckets))?;
    for piece in buckets.iter().flatten() {
        piece.write_to(spill)?;
    }
    let run = spill.end_run()?;
    Ok(StageOutput::Stored(spill.keep_run(run)?))
}

/// The head of `buckets::encode_buckets`'s framing: the bucket count and
/// each bucket's length.
fn framing_head(buckets: &[Vec<CountedList>]) -> Vec<u8> {
    let mut head = Vec::with_capacity(4 + 8 * buckets.len());
    head.extend_from_slice(&(buckets.len() as u32).to_le_bytes());
    for pieces in buckets {
        let len: u64 = pieces.iter().map(CountedList::len).sum();
        head.extend_from_slice(&len.to_le_bytes());
    }
    head
}

/// The buckets made of pieces, each in memory (read from `spill` where
/// they are there).
pub fn pieces_to_bytes(buckets: &[Vec<CountedList>], spill: &dyn Spill) -> Result<Vec<Vec<u8>>> {
    (buckets.iter())
        .map(|pieces| {
            let mut bytes = Vec::new();
            for piece in pieces {
                bytes.extend_from_slice(&piece.to_bytes(spill)?);
            }
            Ok(bytes)
        })
        .collect()
}

/// Each bucket's three lists' byte ranges in a run.
pub type BucketRanges = Vec<[Range<u64>; 3]>;

/// Three encoded lists of each outgoing bucket written as one run of
/// `spill`: the run, each list's byte range in it, and the bytes written.
pub fn write_bucket_lists(
    spill: &mut dyn Spill,
    buckets: impl IntoIterator<Item = Result<[Vec<u8>; 3]>>,
) -> Result<(u32, BucketRanges, u64)> {
    let mut ranges = Vec::new();
    let mut at = 0;
    for lists in buckets {
        let mut bucket: [Range<u64>; 3] = Default::default();
        for (range, bytes) in bucket.iter_mut().zip(&lists?) {
            spill.write(bytes)?;
            *range = at..at + bytes.len() as u64;
            at += bytes.len() as u64;
        }
        ranges.push(bucket);
    }
    Ok((spill.end_run()?, ranges, at))
}

/// A frontier shard's output from its buckets of pieces: framed in memory
/// when nothing spilled, else written as a run of `spill` and handed on from
/// there.
pub fn stage_output(buckets: &[Vec<CountedList>], spill: &mut dyn Spill) -> Result<StageOutput> {
    match any_spilled(buckets) {
        false => {
            let mut framed = framing_head(buckets);
            framed.reserve(buckets.iter().flatten().map(|p| p.len() as usize).sum());
            for piece in buckets.iter().flatten() {
                // Copied once, not through a copy of its own.
                match piece {
                    CountedList::Bytes(bytes) => framed.extend_from_slice(bytes),
                    spilled => framed.extend_from_slice(&spilled.to_bytes(spill)?),
                }
            }
            Ok(framed.into())
        }
        true => write_framed(buckets, spill),
    }
}

/// Whether any piece of any bucket is in the spill.
pub fn any_spilled(buckets: &[Vec<CountedList>]) -> bool {
    (buckets.iter().flatten()).any(|piece| matches!(piece, CountedList::Spilled { .. }))
}

/// What a shard may use besides its input and output: `memory` bytes for its
/// tables, and the spill for the rest.
pub struct Room<'a> {
    pub memory: u64,
    pub spill: &'a mut dyn Spill,
}

impl Room<'_> {
    /// `room` itself, or without one (the kernel alone) all of memory, and
    /// `in_memory` for what would spill.
    pub fn or_in_memory<'b>(
        room: Option<&'b mut Room<'_>>,
        in_memory: &'b mut MemorySpill,
    ) -> Room<'b> {
        match room {
            Some(room) => Room {
                memory: room.memory,
                spill: &mut *room.spill,
            },
            None => Room {
                memory: u64::MAX,
                spill: in_memory,
            },
        }
    }
}

/// Runs kept in memory: for tests, and for a shard run where nothing gave a
/// place on disk (the kernel alone).
#[derive(Default)]
pub struct MemorySpill {
    /// The runs, `None` once released.
    runs: Vec<Option<Vec<u8>>>,
    open: Vec<u8>,
    written: u64,
}

impl MemorySpill {
    fn run(&self, run: u32) -> Result<&Vec<u8>> {
        self.runs
            .get(run as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::Internal(format!("spill: no run {run}")))
    }
}

impl Spill for MemorySpill {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.open.extend_from_slice(bytes);
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn end_run(&mut self) -> Result<u32> {
        self.runs.push(Some(std::mem::take(&mut self.open)));
        Ok(self.runs.len() as u32 - 1)
    }

    fn read_at(&self, run: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.run(run)?.read_at(offset, buf)
    }

    fn bytes_written(&self) -> u64 {
        self.written
    }

    fn keep_run(&self, run: u32) -> Result<Arc<dyn Stored>> {
        Ok(Arc::new(self.run(run)?.clone()))
    }

    fn release_run(&mut self, run: u32) -> Result<()> {
        self.run(run)?;
        self.runs[run as usize] = None;
        Ok(())
    }
}

/// Bytes a kernel rewrites in place, at offsets, kept where its caller
/// chooses (a file of the worker's spill directory, say): a hex pass's vector
/// past its memory share. Threads may read and write disjoint ranges at once.
pub trait Scratch: Sync {
    /// Fills `buf` with the bytes at `offset`, all of them written before.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Writes `bytes` at `offset`.
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<()>;
    /// Makes the first `len` bytes read as zeros. A file does better than
    /// this default (truncated and extended, it is holes: nothing written
    /// now, nothing to write back while a pass rewrites it).
    fn clear(&self, len: u64) -> Result<()> {
        let zeros = vec![0u8; 1 << 22];
        let mut at = 0;
        while at < len {
            let n = zeros.len().min((len - at) as usize);
            self.write_at(at, &zeros[..n])?;
            at += n as u64;
        }
        Ok(())
    }
}

/// Bytes written once, then read by ranges: a shard's input, in memory or
/// in a file the worker wrote as it arrived.
pub trait Stored: Send + Sync {
    /// How many bytes there are.
    fn len(&self) -> u64;
    /// Fills `buf` from `offset`: the bytes read, fewer than `buf.len()` only
    /// at the end.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize>;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes themselves, when they are in memory: read in place instead
    /// of copied (a stage's input may be hundreds of megabytes).
    fn in_memory(&self) -> Option<&[u8]> {
        None
    }

    /// Fills `buf` from `offset`, all of it; an error if the bytes end first.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.read_at(offset + filled as u64, &mut buf[filled..])? {
                0 => return Err(too_far(offset + buf.len() as u64)),
                n => filled += n,
            }
        }
        Ok(())
    }

    /// The bytes `range`, read into memory; an error if they run past the end.
    fn read_range(&self, range: std::ops::Range<u64>) -> Result<Vec<u8>> {
        let len = range.end.saturating_sub(range.start);
        let mut bytes = vec![0; usize::try_from(len).map_err(|_| too_far(range.end))?];
        self.read_exact_at(range.start, &mut bytes)?;
        Ok(bytes)
    }
}

fn too_far(end: u64) -> Error {
    Error::Failed(format!("stored input: byte {end} is past its end"))
}

impl Stored for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.as_slice().len());
        let n = buf.len().min(self.as_slice().len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }

    fn in_memory(&self) -> Option<&[u8]> {
        Some(self)
    }
}

/// A byte range of [`Stored`] bytes, read in chunks.
pub struct StoredSource<'a> {
    stored: &'a dyn Stored,
    at: u64,
    end: u64,
}

impl<'a> StoredSource<'a> {
    pub fn new(stored: &'a dyn Stored, range: std::ops::Range<u64>) -> Self {
        StoredSource {
            stored,
            at: range.start,
            end: range.end,
        }
    }
}

impl Source for StoredSource<'_> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let want = buf.len().min((self.end - self.at) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.stored.read_at(self.at, &mut buf[..want])?;
        if n == 0 {
            return Err(too_far(self.end));
        }
        self.at += n as u64;
        Ok(n)
    }
}

/// A byte range of a spill run, read in chunks.
pub struct RunSource<'a> {
    spill: &'a dyn Spill,
    run: u32,
    at: u64,
    end: u64,
}

impl<'a> RunSource<'a> {
    pub fn new(spill: &'a dyn Spill, run: u32, range: std::ops::Range<u64>) -> Self {
        RunSource {
            spill,
            run,
            at: range.start,
            end: range.end,
        }
    }
}

/// Bytes arriving in pieces: a slice, a range of a spill run or of a stored
/// input.
pub trait Source {
    /// Fills the start of `buf`; 0 only at the end.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize>;
}

impl<S: Source + ?Sized> Source for Box<S> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        (**self).fill(buf)
    }
}

impl Source for &[u8] {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = buf.len().min(self.len());
        buf[..n].copy_from_slice(&self[..n]);
        *self = &self[n..];
        Ok(n)
    }
}

impl Source for RunSource<'_> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let want = buf.len().min((self.end - self.at) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self.spill.read_at(self.run, self.at, &mut buf[..want])?;
        if n == 0 {
            return Err(Error::Failed(format!(
                "spill: run {} ends at byte {} of {}",
                self.run, self.at, self.end
            )));
        }
        self.at += n as u64;
        Ok(n)
    }
}

/// A [`Source`] whose bytes must have the CRC-32 their writer recorded:
/// its end is an error when they do not (a spill run damaged on disk is
/// refused, never read as other counts). Without a CRC (bytes that never
/// left memory) it passes them on unchecked.
pub struct CheckedSource<S> {
    source: S,
    hasher: crc32fast::Hasher,
    expected: Option<u32>,
    label: String,
}

impl<S: Source> CheckedSource<S> {
    /// `label` names the bytes in the error.
    pub fn new(source: S, expected: Option<u32>, label: String) -> Self {
        CheckedSource {
            source,
            hasher: crc32fast::Hasher::new(),
            expected,
            label,
        }
    }
}

impl<S: Source> Source for CheckedSource<S> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = self.source.fill(buf)?;
        let Some(expected) = self.expected else {
            return Ok(n);
        };
        if n > 0 {
            self.hasher.update(&buf[..n]);
        } else if self.hasher.clone().finalize() != expected {
            return Err(Error::Failed(format!(
                "{}: damaged (its checksum fails)",
                self.label
            )));
        }
        Ok(n)
    }
}

/// The longest varint of a `u128`.
const MAX_VARINT: usize = 19;
const CHUNK: usize = 64 * 1024;

/// Varints (as `varint::push` writes them) read from a [`Source`] through a
/// buffer of 64 KiB, so a run is never read whole.
pub struct VarintStream<S> {
    source: S,
    buf: Box<[u8]>,
    at: usize,
    len: usize,
    done: bool,
    label: &'static str,
}

impl<S: Source> VarintStream<S> {
    pub fn new(source: S, label: &'static str) -> Self {
        VarintStream {
            source,
            buf: vec![0; CHUNK].into_boxed_slice(),
            at: 0,
            len: 0,
            done: false,
            label,
        }
    }

    fn refill(&mut self) -> Result<()> {
        self.buf.copy_within(self.at..self.len, 0);
        self.len -= self.at;
        self.at = 0;
        while !self.done && self.len < self.buf.len() {
            let n = self.source.fill(&mut self.buf[self.len..])?;
            self.done = n == 0;
            self.len += n;
        }
        Ok(())
    }

    /// The source the bytes come from.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Whether every byte has been read.
    pub fn at_end(&mut self) -> Result<bool> {
        if self.at == self.len {
            self.refill()?;
        }
        Ok(self.at == self.len)
    }

    /// Fills `buf` with the next bytes; an error if they end first.
    pub fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut filled = 0;
        while filled < buf.len() {
            if self.at == self.len {
                self.refill()?;
                if self.at == self.len {
                    return Err(crate::invalid!(
                        "{}: cut short in {} bytes",
                        self.label,
                        buf.len()
                    ));
                }
            }
            let n = (buf.len() - filled).min(self.len - self.at);
            buf[filled..filled + n].copy_from_slice(&self.buf[self.at..self.at + n]);
            self.at += n;
            filled += n;
        }
        Ok(())
    }

    /// The next varint; `what` names it in the error of a truncated or
    /// overlong one.
    pub fn varint(&mut self, what: &str) -> Result<u128> {
        if self.len - self.at < MAX_VARINT && !self.done {
            self.refill()?;
        }
        let mut value: u128 = 0;
        for (i, &byte) in self.buf[self.at..self.len].iter().enumerate() {
            let bits = u128::from(byte & 0x7f);
            let shift = 7 * i as u32;
            if shift >= 128 || (shift > 0 && bits >> (128 - shift) != 0) {
                break;
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                self.at += i + 1;
                return Ok(value);
            }
        }
        Err(crate::invalid!(
            "{}: {what} is cut short or longer than 128 bits",
            self.label
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::varint;

    /// An output framed in memory and one written to the spill hold the
    /// bytes `buckets::encode_buckets` gives for the same buckets.
    #[test]
    fn stage_outputs_are_framed_as_encoded_buckets_in_memory_or_in_the_spill() {
        let bodies: [&[u8]; 3] = [b"abc", b"", b"defgh"];
        for spilled in [false, true] {
            let mut spill = MemorySpill::default();
            let mut expected = Vec::new();
            let mut buckets = Vec::new();
            for (i, body) in bodies.iter().enumerate() {
                let mut bytes = vec![i as u8];
                varint::push(&mut bytes, 300 + i as u128);
                bytes.extend_from_slice(body);
                expected.push(bytes.clone());
                let counted = match spilled {
                    false => CountedList::Bytes(bytes[1..].to_vec()),
                    true => {
                        spill.write(body).unwrap();
                        let run = spill.end_run().unwrap();
                        CountedList::Spilled {
                            count: 300 + i as u128,
                            run,
                            body: 0..body.len() as u64,
                        }
                    }
                };
                buckets.push(vec![CountedList::Bytes(vec![i as u8]), counted]);
            }
            let output = stage_output(&buckets, &mut spill).unwrap();
            assert_eq!(
                output.into_bytes().unwrap(),
                crate::buckets::encode_buckets(&expected),
                "spilled {spilled}"
            );
        }
    }

    #[test]
    fn varints_cross_chunk_boundaries_and_runs_read_back_by_ranges() {
        let values: Vec<u128> = (0..40_000u128)
            .map(|i| i * i * 0x1_0000_0001 + (i << 100))
            .collect();
        let mut bytes = Vec::new();
        for &v in &values {
            varint::push(&mut bytes, v);
        }
        assert!(bytes.len() > 3 * CHUNK, "spans several chunks");
        let mut spill = MemorySpill::default();
        spill.write(b"xyz").unwrap();
        spill.end_run().unwrap();
        spill.write(&bytes[..1000]).unwrap();
        spill.write(&bytes[1000..]).unwrap();
        assert_eq!(spill.end_run().unwrap(), 1);
        assert_eq!(spill.bytes_written(), 3 + bytes.len() as u64);
        let from_run = RunSource::new(&spill, 1, 0..bytes.len() as u64);
        let mut stream = VarintStream::new(from_run, "test");
        for &v in &values {
            assert_eq!(stream.varint("a value").unwrap(), v);
        }
        assert!(stream.at_end().unwrap());
        // A cut stream is an error, not a short value.
        let cut = &bytes[..bytes.len() - 1];
        let mut stream = VarintStream::new(cut, "test");
        let read = (0..values.len())
            .map(|_| stream.varint("v"))
            .collect::<Vec<_>>();
        assert!(read.last().unwrap().is_err());
        // A range past a run's end is refused.
        let mut past = VarintStream::new(RunSource::new(&spill, 0, 0..10), "test");
        assert!(past.varint("v").is_err());
    }
}
