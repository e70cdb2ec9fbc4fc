//! The breadth-first search as a frontier plan: each layer split into buckets
//! by a hash of the state, one shard per bucket.
//!
//! The layer rule `L_(k+1) = N(L_k) \ (L_k ∪ L_(k-1))` needs, for the states
//! of one bucket of layer `k + 1`, only the same bucket of `L_k` and `L_(k-1)`
//! (a state is in a bucket or not whatever layer it is in). So a shard of
//! layer `k` hands each bucket of the next layer three sorted lists
//! ([`LevelBucket`]): the neighbours of its states that fall in that bucket
//! (candidates for `L_(k+1)`), its own states of `L_k` that fall in it, and
//! the states of `L_(k-1)` it was given, re-bucketed. The shard of bucket `q`
//! of layer `k + 1` merges what every shard of layer `k` sent for `q`, and
//! keeps the candidates that are in neither of the two earlier layers. Bucket
//! counts may differ from layer to layer: each shard writes as many buckets as
//! the next layer has shards. Each state thus travels three times: as a
//! candidate, as a member of its layer, and as a member of the layer before.

use super::frontier::{decode_states, encode_states};
use super::puzzle::Puzzle;
use super::search::merge_states;
use crate::buckets::bucket_of;
use crate::{Control, Result, invalid};

/// States expanded between two polls of the control.
const POLL_STATES: usize = 1024;

/// What one shard of a layer sends one bucket of the next layer: sorted,
/// deduplicated lists of states.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LevelBucket {
    /// Neighbours of the sender's states: candidates for the next layer.
    pub candidates: Vec<u128>,
    /// The sender's states of its own layer.
    pub current: Vec<u128>,
    /// The states of the layer before the sender's that it was given.
    pub previous: Vec<u128>,
}

impl LevelBucket {
    /// The three lists, each as [`encode_states`] bytes after its length (u64,
    /// little-endian).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for list in [&self.candidates, &self.current, &self.previous] {
            let bytes = encode_states(list);
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Reads [`LevelBucket::encode`]'s bytes; anything else is `InvalidArgument`.
    pub fn decode(bytes: &[u8]) -> Result<LevelBucket> {
        let mut at = 0;
        let mut lists = Vec::with_capacity(3);
        for what in ["candidates", "current layer", "previous layer"] {
            let len = bytes
                .get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
                .ok_or_else(|| invalid!("layer bucket: the length of its {what} is cut short"))?;
            let start = at + 8;
            let end = usize::try_from(len)
                .ok()
                .and_then(|len| start.checked_add(len))
                .filter(|&end| end <= bytes.len())
                .ok_or_else(|| invalid!("layer bucket: its {what} run past the end"))?;
            lists.push(decode_states(&bytes[start..end])?);
            at = end;
        }
        if at != bytes.len() {
            return Err(invalid!(
                "layer bucket: {} bytes after its lists",
                bytes.len() - at
            ));
        }
        let previous = lists.pop().unwrap_or_default();
        let current = lists.pop().unwrap_or_default();
        let candidates = lists.pop().unwrap_or_default();
        Ok(LevelBucket {
            candidates,
            current,
            previous,
        })
    }
}

/// What the first layer's only shard receives: the initial state as the one
/// candidate, no earlier layers.
pub fn start_bucket(puzzle: &Puzzle) -> LevelBucket {
    LevelBucket {
        candidates: vec![puzzle.initial_state()],
        ..LevelBucket::default()
    }
}

/// One shard of a layer: from what every shard of the previous layer sent this
/// bucket, the layer's states in the bucket (how many), and what this shard
/// sends each of the `buckets_out` buckets of the next layer.
///
/// Every list must be sorted and deduplicated and every state a configuration
/// of `puzzle`; otherwise `InvalidArgument`. One unit of work per state of
/// the layer. Memory: the inputs, the layer's states and their neighbours.
pub fn expand_bucket(
    puzzle: &Puzzle,
    inputs: Vec<LevelBucket>,
    buckets_out: u32,
    control: &Control,
) -> Result<(u64, Vec<LevelBucket>)> {
    if buckets_out == 0 {
        return Err(invalid!("a layer needs at least one bucket"));
    }
    let mut candidates = Vec::with_capacity(inputs.len());
    let mut current = Vec::with_capacity(inputs.len());
    let mut previous = Vec::with_capacity(inputs.len());
    for input in inputs {
        for (list, what) in [
            (&input.candidates, "candidates"),
            (&input.current, "current layer"),
            (&input.previous, "previous layer"),
        ] {
            if list.windows(2).any(|w| w[0] >= w[1]) {
                return Err(invalid!(
                    "layer bucket: its {what} are not sorted and distinct"
                ));
            }
        }
        candidates.push(input.candidates);
        current.push(input.current);
        previous.push(input.previous);
    }
    let mut layer = merge_states(candidates);
    let current = merge_states(current);
    let previous = merge_states(previous);
    remove_present(&mut layer, &current);
    remove_present(&mut layer, &previous);
    control.check()?;

    let mut out = vec![LevelBucket::default(); buckets_out as usize];
    let mut found = Vec::new();
    for chunk in layer.chunks(POLL_STATES) {
        control.check()?;
        for &state in chunk {
            found.clear();
            puzzle.push_checked_neighbours(state, &mut found)?;
            for &n in &found {
                out[bucket_of(n, buckets_out) as usize].candidates.push(n);
            }
        }
        control.add_work(chunk.len() as u64);
    }
    for bucket in &mut out {
        bucket.candidates.sort_unstable();
        bucket.candidates.dedup();
    }
    // Sorted lists stay sorted when split by bucket.
    for &state in &layer {
        out[bucket_of(state, buckets_out) as usize]
            .current
            .push(state);
    }
    for &state in &current {
        out[bucket_of(state, buckets_out) as usize]
            .previous
            .push(state);
    }
    Ok((layer.len() as u64, out))
}

/// One bucket's lists split into `buckets` buckets (at least 1), for a shard
/// that computed the next layers alone and must now hand them to several.
pub fn rebucket(bucket: LevelBucket, buckets: u32) -> Vec<LevelBucket> {
    let buckets = buckets.max(1);
    let mut out = vec![LevelBucket::default(); buckets as usize];
    for state in bucket.candidates {
        out[bucket_of(state, buckets) as usize]
            .candidates
            .push(state);
    }
    for state in bucket.current {
        out[bucket_of(state, buckets) as usize].current.push(state);
    }
    for state in bucket.previous {
        out[bucket_of(state, buckets) as usize].previous.push(state);
    }
    out
}

/// Removes from the sorted `states` every element of the sorted `known`.
fn remove_present(states: &mut Vec<u128>, known: &[u128]) {
    let mut at = 0;
    states.retain(|&s| {
        at += known[at..].partition_point(|&k| k < s);
        known.get(at) != Some(&s)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{PE766, count_reachable, parse_puzzle};

    /// The whole search run as layers of `buckets(layer)` shards in this
    /// process: the layer sizes.
    fn by_layers(puzzle: &Puzzle, buckets: impl Fn(usize) -> u32) -> Vec<u64> {
        let control = Control::new();
        let mut sizes = Vec::new();
        // What each bucket of the next layer receives, from every shard.
        let mut inbox: Vec<Vec<LevelBucket>> = vec![vec![start_bucket(puzzle)]];
        loop {
            let out_buckets = buckets(sizes.len() + 1);
            let mut next: Vec<Vec<LevelBucket>> = vec![Vec::new(); out_buckets as usize];
            let mut size = 0;
            for inputs in inbox {
                // Through the bytes, as the runner ships them.
                let inputs = inputs
                    .iter()
                    .map(|b| LevelBucket::decode(&b.encode()).unwrap())
                    .collect();
                let (states, out) = expand_bucket(puzzle, inputs, out_buckets, &control).unwrap();
                size += states;
                for (q, bucket) in out.into_iter().enumerate() {
                    next[q].push(bucket);
                }
            }
            if size == 0 {
                return sizes;
            }
            sizes.push(size);
            inbox = next;
        }
    }

    #[test]
    fn layers_in_buckets_equal_the_single_process_search() {
        let small = parse_puzzle("aa1.\na23.\n4567\nsame: 1234567\n").unwrap();
        let medium = parse_puzzle("aab.\naab.\ncd..\nefgh\nsame: cdefgh\n").unwrap();
        let pe766 = parse_puzzle(PE766).unwrap();
        type Shape = fn(usize) -> u32;
        let shapes: [Shape; 4] = [|_| 1, |_| 2, |_| 7, |k| 1 + (k % 5) as u32];
        for (puzzle, shapes) in [
            (&small, &shapes[..]),
            (&medium, &shapes[..]),
            (&pe766, &shapes[2..3]),
        ] {
            let direct = count_reachable(puzzle, 1, &Control::new()).unwrap();
            for &shape in shapes {
                let sizes = by_layers(puzzle, shape);
                assert_eq!(sizes.iter().sum::<u64>(), direct.configurations);
                assert_eq!(sizes.len() as u32, direct.layers);
                assert_eq!(sizes.iter().max().copied(), Some(direct.largest_layer));
            }
        }
    }

    #[test]
    fn rebucketing_one_bucket_equals_bucketing_at_once() {
        let puzzle = parse_puzzle("aab.\naab.\ncd..\nefgh\nsame: cdefgh\n").unwrap();
        let control = Control::new();
        let (_, one) = expand_bucket(&puzzle, vec![start_bucket(&puzzle)], 1, &control).unwrap();
        let (_, one) = expand_bucket(&puzzle, one, 1, &control).unwrap();
        let (_, five) = expand_bucket(&puzzle, one.clone(), 5, &control).unwrap();
        let (_, single) = expand_bucket(&puzzle, one, 1, &control).unwrap();
        let single = single.into_iter().next().unwrap();
        assert!(!single.candidates.is_empty() && !single.previous.is_empty());
        assert_eq!(rebucket(single, 5), five);
    }

    #[test]
    fn malformed_buckets_are_refused() {
        let puzzle = parse_puzzle("aa1.\na23.\n4567\nsame: 1234567\n").unwrap();
        let good = start_bucket(&puzzle).encode();
        for cut in 0..good.len() {
            assert!(LevelBucket::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let unsorted = LevelBucket {
            candidates: vec![puzzle.initial_state()],
            current: vec![5, 5],
            previous: Vec::new(),
        };
        assert!(expand_bucket(&puzzle, vec![unsorted], 1, &Control::new()).is_err());
        let foreign = LevelBucket {
            candidates: vec![u128::MAX],
            ..LevelBucket::default()
        };
        assert!(expand_bucket(&puzzle, vec![foreign], 2, &Control::new()).is_err());
        assert!(expand_bucket(&puzzle, Vec::new(), 0, &Control::new()).is_err());
    }
}
