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
//!
//! A bucket's lists are in the form its job was planned with
//! ([`ListForm`]): [`encode_states`]'s varints (jobs planned before the
//! compact form), or compact lists of keys alone (`crate::compact`: the
//! states' gaps as Rice codes, in checksummed chunks).

use super::frontier::{decode_states, encode_states};
use super::puzzle::Puzzle;
use super::search::merge_states;
use crate::buckets::bucket_of;
use crate::compact::{ListForm, ListStream, encode_keys};
use crate::{Control, Result, invalid};

/// States expanded between two polls of the control.
const POLL_STATES: usize = 1024;

/// The names of a bucket's three lists, in their order.
pub(super) const LIST_NAMES: [&str; 3] = ["candidates", "current layer", "previous layer"];

/// One list of states in `form`.
pub fn encode_states_as(form: ListForm, states: &[u128]) -> Vec<u8> {
    match form {
        ListForm::Raw => encode_states(states),
        ListForm::Compact => encode_keys(states.iter().copied()),
    }
}

/// Reads [`encode_states_as`]'s bytes; `label` names the list in errors.
pub fn decode_states_as(form: ListForm, bytes: &[u8], label: &str) -> Result<Vec<u128>> {
    if form == ListForm::Raw {
        return decode_states(bytes);
    }
    let mut list = ListStream::new(bytes, label.to_string())?;
    let mut states = Vec::new();
    while let Some((state, _)) = list.pull()? {
        states.push(state);
    }
    Ok(states)
}

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
    /// little-endian): the raw form.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(ListForm::Raw)
    }

    /// The three lists in `form`, each after its length (u64, little-endian).
    pub fn encode_as(&self, form: ListForm) -> Vec<u8> {
        let mut out = Vec::new();
        for list in [&self.candidates, &self.current, &self.previous] {
            let bytes = encode_states_as(form, list);
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Reads [`LevelBucket::encode`]'s bytes; anything else is `InvalidArgument`.
    pub fn decode(bytes: &[u8]) -> Result<LevelBucket> {
        LevelBucket::decode_as(bytes, ListForm::Raw, "layer bucket")
    }

    /// Reads [`LevelBucket::encode_as`]'s bytes in `form`; anything else is
    /// `InvalidArgument`, a damaged compact list named as `label: its
    /// <list>`.
    pub fn decode_as(bytes: &[u8], form: ListForm, label: &str) -> Result<LevelBucket> {
        let mut at = 0;
        let mut lists = Vec::with_capacity(3);
        for what in LIST_NAMES {
            let len = bytes
                .get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
                .ok_or_else(|| invalid!("{label}: the length of its {what} is cut short"))?;
            let start = at + 8;
            let end = usize::try_from(len)
                .ok()
                .and_then(|len| start.checked_add(len))
                .filter(|&end| end <= bytes.len())
                .ok_or_else(|| invalid!("{label}: its {what} run past the end"))?;
            lists.push(decode_states_as(
                form,
                &bytes[start..end],
                &format!("{label}: its {what}"),
            )?);
            at = end;
        }
        if at != bytes.len() {
            return Err(invalid!(
                "{label}: {} bytes after its lists",
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

    /// Buckets of random lists (empty, dense, sparse, keys up to 128 bits)
    /// read back in both forms; a cut or a damaged byte of a compact one is refused naming the bucket and the list.
    #[test]
    fn buckets_round_trip_in_both_forms_and_damaged_compact_ones_are_refused() {
        let mut rng = crate::test_rng::Rng::new(766);
        let list = |rng: &mut crate::test_rng::Rng| {
            let len = match rng.below(4u64) {
                0 => 0,
                1 => rng.below(5u64) as usize,
                _ => rng.below(10_000u64) as usize,
            };
            let shift = rng.below(100u64);
            let mut states: Vec<u128> = (0..len)
                .map(|_| (u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64())) >> shift)
                .chain((len > 0).then_some(u128::MAX))
                .collect();
            states.sort_unstable();
            states.dedup();
            states
        };
        for round in 0..40 {
            let bucket = LevelBucket {
                candidates: list(&mut rng),
                current: list(&mut rng),
                previous: list(&mut rng),
            };
            let raw = bucket.encode_as(ListForm::Raw);
            assert_eq!(raw, bucket.encode());
            let compact = bucket.encode_as(ListForm::Compact);
            assert_eq!(LevelBucket::decode(&raw).unwrap(), bucket);
            let label = "layer 3 bucket 1";
            let back = LevelBucket::decode_as(&compact, ListForm::Compact, label).unwrap();
            assert_eq!(back, bucket, "round {round}");
            for _ in 0..20 {
                let cut = rng.below(compact.len() as u64) as usize;
                let e = LevelBucket::decode_as(&compact[..cut], ListForm::Compact, label)
                    .unwrap_err()
                    .to_string();
                assert!(e.starts_with("layer 3 bucket 1: "), "cut at {cut}: {e}");
                let mut damaged = compact.clone();
                let at = rng.below(compact.len() as u64) as usize;
                damaged[at] ^= 1 << rng.below(8u64);
                let e = LevelBucket::decode_as(&damaged, ListForm::Compact, label)
                    .unwrap_err()
                    .to_string();
                assert!(e.starts_with("layer 3 bucket 1: "), "byte {at}: {e}");
            }
        }
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
