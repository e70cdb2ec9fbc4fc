//! Bucketed stage output, the runner's part of frontier plans.
//!
//! A shard of a frontier plan splits what it hands to the next stage into
//! buckets, one per shard of that stage; shard `q` of the next stage reads
//! bucket `q` of every shard of this one, and nothing else. The runner routes
//! the buckets without reading them, so it fixes only their framing:
//!
//! - a shard's output: the bucket count (u32, little-endian), each bucket's
//!   length (u64, little-endian), then the buckets one after another;
//! - what shard `q` fetches: for each shard of the previous stage in order,
//!   the length of its bucket `q` (u64, little-endian), then the bucket.
//!
//! Both readers refuse anything malformed (truncated, lengths past the end,
//! trailing bytes) without panicking or allocating more than the input holds.

use std::ops::Range;

use crate::spill::Stored;
use crate::{Result, invalid};

/// The bucket of `key` among `buckets` (at least 1): a 64-bit mix of the key
/// scaled to the bucket count, so buckets are even whatever the states look
/// like. Every frontier plan routes its states with it.
pub fn bucket_of(key: u128, buckets: u32) -> u32 {
    let mixed = splitmix64(splitmix64(key as u64) ^ (key >> 64) as u64);
    ((u128::from(mixed) * u128::from(buckets)) >> 64) as u32
}

/// The buckets of the next level of a frontier plan: `fixed` when the spec
/// gives it, else one per `per_bucket` states of `states` (the size of the
/// level just found), from 1 to `max`, spread over the `slots` of the live
/// workers: a level worth splitting (shards of `worth_a_shard` states or
/// more) gets a shard per slot at least, and more shards than slots come in
/// whole rounds of them, so no slot idles while another runs a second shard.
pub fn bucket_count(
    states: u64,
    per_bucket: u64,
    worth_a_shard: u64,
    fixed: u32,
    max: u32,
    slots: u32,
) -> u32 {
    if fixed > 0 {
        return fixed;
    }
    let slots = u64::from(slots.max(1));
    let by_size = states.div_ceil(per_bucket);
    let worth_splitting = states / worth_a_shard.max(1);
    let mut count = by_size.max(slots.min(worth_splitting));
    if count > slots {
        count = count.div_ceil(slots) * slots;
    }
    count.clamp(1, u64::from(max)) as u32
}

/// Room on the stage store's disk, in multiples of the last stage's output,
/// under which a level gets fewer buckets (see [`within_room`]).
pub const SHORT_OF_ROOM: u64 = 8;

/// `count` buckets, or fewer when the stage store is short of room: a child
/// is sent once by each shard holding one of its parents, so a level's
/// stage data grows with its bucket count. When the free bytes (`room`, if
/// known) are under [`SHORT_OF_ROOM`] times the last stage's output, the
/// level gets one bucket per live slot (at least one), the fewest that keep
/// every slot busy. Only for plans whose shards spill what their memory does
/// not hold (pegs).
pub fn within_room(count: u32, slots: u32, last_stage_bytes: u64, room: Option<u64>) -> u32 {
    match room {
        Some(room) if room < last_stage_bytes.saturating_mul(SHORT_OF_ROOM) => {
            count.min(slots.max(1))
        }
        _ => count,
    }
}

/// States per shard for a frontier plan whose shards hold their bucket in
/// memory at about `bytes_per_state`: `default` when the least memory of a
/// live worker's slot is unknown (0) or large, fewer to fit a smaller slot,
/// never below `floor` (below it the runner's cost per shard would outweigh
/// the shard).
pub fn states_per_slot(slot_memory: u64, bytes_per_state: u64, floor: u64, default: u64) -> u64 {
    match slot_memory {
        0 => default,
        memory => (memory / bytes_per_state.max(1)).clamp(floor, default),
    }
}

/// Adds one shard's level sizes to a stage's sums; the shards of a stage
/// report as many levels, or the stage is refused (`level` names them).
pub fn add_level_sizes(total: &mut Vec<u64>, own: &[u64], level: &str) -> Result<()> {
    if !total.is_empty() && total.len() != own.len() {
        return Err(invalid!("the shards of one {level} disagree on its shape"));
    }
    total.resize(own.len(), 0);
    for (sum, size) in total.iter_mut().zip(own) {
        *sum += size;
    }
    Ok(())
}

/// The stage event's note for the levels found from level `first` on:
/// `layer 3: 12 configurations`, `layers 3 to 5: 40 configurations`, or
/// nothing.
pub fn levels_note(level: &str, first: usize, found: &[u64], unit: &str) -> String {
    match found {
        [] => String::new(),
        [one] => format!("{level} {first}: {one} {unit}"),
        many => format!(
            "{level}s {first} to {}: {} {unit}",
            first + many.len() - 1,
            many.iter().sum::<u64>()
        ),
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Frames `buckets` as one shard's output.
pub fn encode_buckets(buckets: &[Vec<u8>]) -> Vec<u8> {
    let body: usize = buckets.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(4 + 8 * buckets.len() + body);
    out.extend_from_slice(&(buckets.len() as u32).to_le_bytes());
    for bucket in buckets {
        out.extend_from_slice(&(bucket.len() as u64).to_le_bytes());
    }
    for bucket in buckets {
        out.extend_from_slice(bucket);
    }
    out
}

/// The buckets of one shard's output, as slices of it.
pub fn split_buckets(output: &[u8]) -> Result<Vec<&[u8]>> {
    let count = output
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
        .ok_or_else(|| invalid!("bucketed output: shorter than its bucket count"))?;
    let lengths_end = count
        .checked_mul(8)
        .and_then(|n| n.checked_add(4))
        .filter(|&end| end <= output.len())
        .ok_or_else(|| {
            invalid!("bucketed output: {count} buckets announced, their lengths missing")
        })?;
    let mut buckets = Vec::with_capacity(count);
    let mut at = lengths_end;
    for i in 0..count {
        let field = &output[4 + 8 * i..12 + 8 * i];
        let len = u64::from_le_bytes(field.try_into().unwrap());
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| at.checked_add(len))
            .filter(|&end| end <= output.len())
            .ok_or_else(|| invalid!("bucketed output: bucket {i} runs past the end"))?;
        buckets.push(&output[at..end]);
        at = end;
    }
    if at != output.len() {
        return Err(invalid!(
            "bucketed output: {} bytes after the last bucket",
            output.len() - at
        ));
    }
    Ok(buckets)
}

/// Bucket `q` of each output in `outputs`, framed as one shard's input.
pub fn gather_bucket(outputs: &[&[u8]], q: u32) -> Result<Vec<u8>> {
    let mut input = Vec::new();
    for (shard, output) in outputs.iter().enumerate() {
        let buckets = split_buckets(output)?;
        let bucket = buckets.get(q as usize).ok_or_else(|| {
            invalid!(
                "shard {shard} wrote {} buckets; bucket {q} was asked for",
                buckets.len()
            )
        })?;
        input.extend_from_slice(&(bucket.len() as u64).to_le_bytes());
        input.extend_from_slice(bucket);
    }
    Ok(input)
}

/// The little-endian `u64` at byte `at` of `stored`, which must end by
/// `end`; `what` names it in the error.
pub fn length_at(stored: &dyn Stored, at: u64, end: u64, what: &str) -> Result<u64> {
    if at.checked_add(8).is_none_or(|e| e > end) {
        return Err(invalid!("{what} is cut short at byte {at}"));
    }
    let bytes = stored.read_range(at..at + 8)?;
    Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
}

/// The byte ranges of the segments of a gathered input (what
/// [`split_gathered`] splits) in `stored`, read without the segments.
pub fn gathered_ranges(stored: &dyn Stored) -> Result<Vec<Range<u64>>> {
    let len = stored.len();
    let mut segments = Vec::new();
    let mut at = 0;
    while at < len {
        let segment = length_at(stored, at, len, "gathered input: a length")?;
        let end = (at + 8)
            .checked_add(segment)
            .filter(|&end| end <= len)
            .ok_or_else(|| {
                invalid!(
                    "gathered input: segment {} runs past the end",
                    segments.len()
                )
            })?;
        segments.push(at + 8..end);
        at = end;
    }
    Ok(segments)
}

/// The segments of a gathered input: one bucket from each shard, in order.
pub fn split_gathered(input: &[u8]) -> Result<Vec<&[u8]>> {
    let mut segments = Vec::new();
    let mut at = 0;
    while at < input.len() {
        let field = input
            .get(at..at + 8)
            .ok_or_else(|| invalid!("gathered input: a length cut short at byte {at}"))?;
        let len = u64::from_le_bytes(field.try_into().unwrap());
        let start = at + 8;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| start.checked_add(len))
            .filter(|&end| end <= input.len())
            .ok_or_else(|| {
                invalid!(
                    "gathered input: segment {} runs past the end",
                    segments.len()
                )
            })?;
        segments.push(&input[start..end]);
        at = end;
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard fits the smallest slot: the default for an unknown or large
    /// slot, fewer states for a small one, never below the floor.
    #[test]
    fn shards_are_sized_to_the_smallest_slot_between_the_floor_and_the_default() {
        let (floor, default) = (50_000, 2_000_000);
        assert_eq!(states_per_slot(0, 600, floor, default), default, "unknown");
        assert_eq!(states_per_slot(64 << 30, 600, floor, default), default);
        let small = 300 << 20;
        let fits = states_per_slot(small, 600, floor, default);
        assert!(fits < default && fits * 600 <= small && (fits + 1) * 600 > small);
        assert_eq!(states_per_slot(1 << 20, 600, floor, default), floor);
    }

    #[test]
    fn short_of_room_a_level_gets_one_bucket_a_slot() {
        let gib = 1 << 30;
        assert_eq!(within_room(24, 2, gib, None), 24, "room unknown");
        assert_eq!(within_room(24, 2, gib, Some(100 * gib)), 24, "room enough");
        assert_eq!(within_room(24, 2, gib, Some(7 * gib)), 2, "short of room");
        assert_eq!(within_room(24, 0, gib, Some(0)), 1, "no live slot");
        assert_eq!(within_room(1, 4, gib, Some(0)), 1, "never more than asked");
    }

    #[test]
    fn bucket_counts_follow_the_size_and_fill_the_live_slots_in_whole_rounds() {
        let per = 1_000_000;
        // With one slot (or none known): one bucket per `per` states.
        for slots in [0, 1] {
            assert_eq!(bucket_count(0, per, per / 4, 0, 64, slots), 1);
            assert_eq!(bucket_count(900_000, per, per / 4, 0, 64, slots), 1);
            assert_eq!(bucket_count(2_500_000, per, per / 4, 0, 64, slots), 3);
        }
        // A level too small to be worth splitting stays whole.
        assert_eq!(bucket_count(200_000, per, per / 4, 0, 64, 8), 1);
        // Worth splitting: a shard per slot, up to shards of a quarter of `per`.
        assert_eq!(bucket_count(900_000, per, per / 4, 0, 64, 2), 2);
        assert_eq!(bucket_count(900_000, per, per / 4, 0, 64, 8), 3);
        // A plan whose shards are worth it at fewer states splits smaller levels.
        assert_eq!(bucket_count(200_000, per, 50_000, 0, 64, 2), 2);
        assert_eq!(bucket_count(200_000, per, 50_000, 0, 64, 8), 4);
        assert_eq!(bucket_count(40_000, per, 50_000, 0, 64, 8), 1);
        // More shards than slots come in whole rounds.
        assert_eq!(bucket_count(2_500_000, per, per / 4, 0, 64, 2), 4);
        assert_eq!(bucket_count(9_500_000, per, per / 4, 0, 64, 4), 12);
        // The most buckets and a count the spec fixes win.
        assert_eq!(bucket_count(u64::MAX, per, per / 4, 0, 64, 3), 64);
        assert_eq!(bucket_count(9_500_000, per, per / 4, 5, 64, 4), 5);
        for states in (0..40).map(|i| i * 250_001) {
            for slots in 0..6 {
                let n = bucket_count(states, per, per / 4, 0, 64, slots);
                assert!(
                    n >= states.div_ceil(per).max(1) as u32,
                    "never fewer than the size asks"
                );
                assert!(n as u64 <= (states / (per / 4)).max(states.div_ceil(per)).max(1) + 5);
            }
        }
    }

    #[test]
    fn buckets_are_even_and_stable() {
        let counts = (0..70_000u128).fold([0u32; 7], |mut c, s| {
            c[bucket_of(s * 8, 7) as usize] += 1;
            c
        });
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
        assert!((0..1000u128).all(|s| bucket_of(s, 1) == 0));
        assert_eq!(bucket_of(12345, 7), bucket_of(12345, 7));
    }

    #[test]
    fn buckets_round_trip_and_gather_by_index() {
        let a = encode_buckets(&[b"a0".to_vec(), Vec::new(), b"a2!".to_vec()]);
        let b = encode_buckets(&[b"b0".to_vec(), b"b1".to_vec(), Vec::new()]);
        assert_eq!(split_buckets(&a).unwrap(), [b"a0".as_slice(), b"", b"a2!"]);
        let gathered = gather_bucket(&[&a, &b], 2).unwrap();
        assert_eq!(split_gathered(&gathered).unwrap(), [b"a2!".as_slice(), b""]);
        assert!(gather_bucket(&[&a], 3).is_err());
        assert_eq!(split_gathered(&[]).unwrap(), Vec::<&[u8]>::new());
        assert_eq!(split_buckets(&encode_buckets(&[])).unwrap().len(), 0);
    }

    #[test]
    fn malformed_framing_is_refused_without_panicking() {
        let good = encode_buckets(&[b"xyz".to_vec(), b"w".to_vec()]);
        for cut in 0..good.len() {
            assert!(split_buckets(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(split_buckets(&long).is_err());
        let mut huge = good.clone();
        huge[4..12].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(split_buckets(&huge).is_err());
        let mut many = good.clone();
        many[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(split_buckets(&many).is_err());
        let gathered = gather_bucket(&[&good], 0).unwrap();
        for cut in 1..gathered.len() {
            assert!(split_gathered(&gathered[..cut]).is_err(), "cut at {cut}");
        }
    }
}
