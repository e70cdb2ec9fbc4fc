//! A pegs level shard's output: its buckets framed as `encode_buckets`
//! frames them, each a `StageBucket`, written in memory or (for a shard that
//! spilled) as a run of its spill.

use crate::{Result, Spill, StageOutput};
use tally_kernels::pegs::SentBucket;

/// A level shard's output as `encode_buckets` frames `total` buckets, each a
/// `StageBucket` (its level's length, its level, its joined positions):
/// `sent[i]` and `joined[i]` at bucket `first + i`, empty ones elsewhere.
/// Written once, in place, since a level's output can be large. `empty` is
/// an empty list in the job's form.
pub(super) fn encode_output(
    total: u32,
    first: u32,
    sent: Vec<SentBucket>,
    joined: Vec<SentBucket>,
    empty: &[u8],
) -> Vec<u8> {
    let in_memory = |buckets: Vec<SentBucket>| -> Vec<Vec<u8>> {
        (buckets.into_iter())
            .map(|bucket| match bucket {
                SentBucket::Bytes(bytes) => bytes,
                SentBucket::Spilled { .. } => {
                    unreachable!("encode_output is given buckets in memory")
                }
            })
            .collect()
    };
    let mut sent = in_memory(sent);
    let joined = in_memory(joined);
    let sent_len = sent.len();
    let own = |index: u32| {
        index
            .checked_sub(first)
            .map(|i| i as usize)
            .filter(|&i| i < sent_len)
    };
    let joined_of = |i: usize| joined.get(i).map_or(empty, |j| &j[..]);
    let frames: Vec<usize> = (0..total)
        .map(|index| match own(index) {
            Some(i) => 8 + sent[i].len() + joined_of(i).len(),
            None => 8 + 2 * empty.len(),
        })
        .collect();
    let mut out = Vec::with_capacity(4 + 8 * total as usize + frames.iter().sum::<usize>());
    out.extend_from_slice(&total.to_le_bytes());
    for &len in &frames {
        out.extend_from_slice(&(len as u64).to_le_bytes());
    }
    for index in 0..total {
        // Each bucket is let go once copied: the output and one bucket are
        // in memory at once, not the output twice.
        let (level, joined) = match own(index) {
            Some(i) => (std::mem::take(&mut sent[i]), joined_of(i)),
            None => (empty.to_vec(), empty),
        };
        out.extend_from_slice(&(level.len() as u64).to_le_bytes());
        out.extend_from_slice(&level);
        out.extend_from_slice(joined);
    }
    out
}

/// [`encode_output`]'s bytes, for a level shard that spilled, written as a
/// run of `spill` and handed on from there.
pub(super) fn write_output(
    total: u32,
    first: u32,
    sent: &[SentBucket],
    joined: &[SentBucket],
    empty: &[u8],
    spill: &mut dyn Spill,
) -> Result<StageOutput> {
    let empty = SentBucket::Bytes(empty.to_vec());
    // Bucket `i` of `of` (this shard's own), or an empty one.
    fn own<'a>(of: &'a [SentBucket], i: Option<u32>, empty: &'a SentBucket) -> &'a SentBucket {
        i.and_then(|i| of.get(i as usize)).unwrap_or(empty)
    }
    let own = |index: u32, of| own(of, index.checked_sub(first), &empty);
    let mut head = Vec::with_capacity(4 + 8 * total as usize);
    head.extend_from_slice(&total.to_le_bytes());
    for index in 0..total {
        let (level, keyed) = (own(index, sent), own(index, joined));
        head.extend_from_slice(&(8 + level.len() + keyed.len()).to_le_bytes());
    }
    spill.write(&head)?;
    for index in 0..total {
        let level = own(index, sent);
        spill.write(&level.len().to_le_bytes())?;
        level.write_to(spill)?;
        own(index, joined).write_to(spill)?;
    }
    let run = spill.end_run()?;
    Ok(StageOutput::Stored(spill.keep_run(run)?))
}
