//! Sweeps over keyed states (kernel ABI version 2,
//! `docs/wasm-abi.md`): one level shard, in memory. A model (a
//! user's module, through the sandbox) says what a state's children and
//! weights are; this sums the counts of equal keys modulo each prime of the
//! job, adds the level's weights to the answer, and sends the children in
//! buckets by a hash of their keys, each a checked list.
//!
//! The `wasm-sweep` kind's level shards run it. It holds a level in memory
//! (the frontier kernels' spilling within a share is still to come).

use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use hashbrown::HashTable;

use crate::buckets::bucket_of;
use crate::modular::mul_mod;
use crate::{Control, Result, invalid, varint};

/// What a level shard asks of a sweep's model.
pub trait SweepModel {
    /// The children of `keys`, states of level `step`, in their parents'
    /// order, written into `out` (empty when called).
    fn expand(&mut self, step: u32, keys: &[&[u8]], out: &mut SweepChildren) -> Result<()>;
    /// The weights of `keys` (`outputs` a key, in order); `last` on the
    /// sweep's last level.
    fn weights(&mut self, step: u32, last: bool, keys: &[&[u8]]) -> Result<Vec<u64>>;
}

/// The children of a batch, flat (one allocation a batch, not one a
/// child): child `i` is `parents[i]`'s, its key `keys[ends[i - 1]..ends[i]]`,
/// its multiplier `multipliers[i]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepChildren {
    parents: Vec<u32>,
    ends: Vec<usize>,
    keys: Vec<u8>,
    multipliers: Vec<u64>,
}

impl SweepChildren {
    pub fn clear(&mut self) {
        self.parents.clear();
        self.ends.clear();
        self.keys.clear();
        self.multipliers.clear();
    }

    pub fn push(&mut self, parent: u32, key: &[u8], multiplier: u64) {
        self.parents.push(parent);
        self.keys.extend_from_slice(key);
        self.ends.push(self.keys.len());
        self.multipliers.push(multiplier);
    }

    pub fn len(&self) -> usize {
        self.parents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parents.is_empty()
    }

    /// Child `i`: its parent, its key, its multiplier.
    pub fn get(&self, i: usize) -> (u32, &[u8], u64) {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        (
            self.parents[i],
            &self.keys[start..self.ends[i]],
            self.multipliers[i],
        )
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &[u8], u64)> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// A state of a level: its key and its count modulo each prime.
pub type SweepState = (Vec<u8>, Vec<u64>);

/// What one level shard found.
#[derive(Debug, Default)]
pub struct SweepLevel {
    /// Distinct states of the level in this shard's bucket.
    pub states: u64,
    /// For each prime, the `outputs` sums of this bucket's weights times
    /// counts.
    pub answer: Vec<Vec<u64>>,
    /// What goes to each bucket of the next level (empty lists on the last).
    pub sent: Vec<Vec<u8>>,
    /// The distinct children in `sent`, over all its buckets.
    pub children: u64,
}

/// The states of a level's list, at most: a list saying more is refused
/// before anything is allocated for it.
const MAX_LIST_STATES: u128 = 1 << 40;

/// A level's states, flat: state `i`'s key is `keys[ends[i - 1]..ends[i]]`,
/// its counts `counts[i * primes..(i + 1) * primes]`, one a prime.
#[derive(Clone, Debug, Default)]
pub struct FlatStates {
    primes: usize,
    keys: Vec<u8>,
    ends: Vec<usize>,
    counts: Vec<u64>,
}

impl FlatStates {
    pub fn new(primes: usize) -> FlatStates {
        FlatStates {
            primes,
            ..FlatStates::default()
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.keys[start..self.ends[i]]
    }

    pub fn counts(&self, i: usize) -> &[u64] {
        &self.counts[i * self.primes..(i + 1) * self.primes]
    }

    fn counts_mut(&mut self, i: usize) -> &mut [u64] {
        &mut self.counts[i * self.primes..(i + 1) * self.primes]
    }

    pub fn push(&mut self, key: &[u8], counts: &[u64]) {
        debug_assert_eq!(counts.len(), self.primes);
        self.keys.extend_from_slice(key);
        self.ends.push(self.keys.len());
        self.counts.extend_from_slice(counts);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u64])> + '_ {
        (0..self.len()).map(|i| (self.key(i), self.counts(i)))
    }
}

/// A list of states in increasing key order as bytes: the number of states
/// and of primes, then for each state the length of the prefix it shares
/// with the key before, the length and bytes of the rest, and its counts;
/// all varints, then the CRC-32 of everything before (4 bytes,
/// little-endian).
pub fn encode_states(states: &[SweepState], primes: usize) -> Vec<u8> {
    let listed = states
        .iter()
        .map(|(key, counts)| (key.as_slice(), counts.as_slice()));
    encode_list(states.len(), primes, listed)
}

/// [`encode_states`] of `len` states given in order.
fn encode_list<'a>(
    len: usize,
    primes: usize,
    states: impl Iterator<Item = (&'a [u8], &'a [u64])>,
) -> Vec<u8> {
    let mut out = Vec::new();
    varint::push(&mut out, len as u128);
    varint::push(&mut out, primes as u128);
    let mut previous: &[u8] = &[];
    for (key, counts) in states {
        debug_assert_eq!(counts.len(), primes);
        let shared = key.iter().zip(previous).take_while(|(a, b)| a == b).count();
        varint::push(&mut out, shared as u128);
        varint::push(&mut out, (key.len() - shared) as u128);
        out.extend_from_slice(&key[shared..]);
        for &count in counts {
            varint::push(&mut out, u128::from(count));
        }
        previous = key;
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Reads [`encode_states`]'s bytes, refusing (with `label` named) a list
/// whose checksum fails, that is cut short or runs on, whose keys do not
/// increase, or whose counts are not residues of `primes`.
pub fn decode_states(bytes: &[u8], primes: &[u64], label: &str) -> Result<Vec<SweepState>> {
    let flat = decode_flat(bytes, primes, label)?;
    Ok(flat
        .iter()
        .map(|(key, counts)| (key.to_vec(), counts.to_vec()))
        .collect())
}

/// [`decode_states`] into a [`FlatStates`].
pub fn decode_flat(bytes: &[u8], primes: &[u64], label: &str) -> Result<FlatStates> {
    let Some((body, crc)) = bytes.split_last_chunk::<4>() else {
        return Err(invalid!(
            "{label}: {} bytes, too short for a list",
            bytes.len()
        ));
    };
    if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
        return Err(invalid!("{label}: damaged (its checksum fails)"));
    }
    let mut reader = varint::Reader::new(body, "a sweep level list");
    let count = reader.varint("the state count")?;
    if count > MAX_LIST_STATES {
        return Err(invalid!("{label}: {count} states, past {MAX_LIST_STATES}"));
    }
    let listed = reader.varint("the prime count")?;
    if listed != primes.len() as u128 {
        return Err(invalid!(
            "{label}: counts modulo {listed} primes, the job has {}",
            primes.len()
        ));
    }
    let mut states = FlatStates::new(primes.len());
    let mut key: Vec<u8> = Vec::new();
    for index in 0..count {
        let shared = reader.varint("a shared prefix")?;
        let rest = reader.varint("a key's length")?;
        if shared > key.len() as u128 || rest > reader.remaining() as u128 {
            return Err(invalid!("{label}: state {index} has a key cut short"));
        }
        let before = states.len().checked_sub(1).map(|i| states.key(i));
        key.truncate(shared as usize);
        key.extend_from_slice(reader.bytes(rest as usize, "a key")?);
        if before.is_some_and(|before| key.as_slice() <= before) {
            return Err(invalid!(
                "{label}: state {index} is not after the one before"
            ));
        }
        let at = states.counts.len();
        for &prime in primes {
            let count = reader.varint("a count")?;
            if count >= u128::from(prime) {
                return Err(invalid!(
                    "{label}: state {index} has a count of {count}, not below the prime {prime}"
                ));
            }
            states.counts.push(count as u64);
        }
        states.keys.extend_from_slice(&key);
        states.ends.push(states.keys.len());
        debug_assert_eq!(states.counts.len(), at + primes.len());
    }
    if reader.remaining() > 0 {
        return Err(invalid!("{label}: bytes after its {count} states"));
    }
    Ok(states)
}

/// The states of `parts` (each in increasing key order) in increasing key
/// order, the counts of equal keys summed modulo `primes`.
fn merged(mut parts: Vec<FlatStates>, primes: &[u64]) -> FlatStates {
    if parts.len() == 1 {
        return parts.pop().expect("one part");
    }
    // By the first 8 bytes of the keys (a radix sort, stable: equal keys
    // stay in part order), then runs of equal first bytes by whole keys.
    let mut order: Vec<(u64, u32, u32)> = (parts.iter().enumerate())
        .flat_map(|(p, part)| {
            (0..part.len()).map(move |i| (prefix(part.key(i)), p as u32, i as u32))
        })
        .collect();
    radsort::sort_by_key(&mut order, |&(head, _, _)| head);
    let key = |&(_, p, i): &(u64, u32, u32)| parts[p as usize].key(i as usize);
    for run in order.chunk_by_mut(|a, b| a.0 == b.0) {
        if run.len() > 1 {
            run.sort_by(|a, b| key(a).cmp(key(b)));
        }
    }
    let mut level = FlatStates::new(primes.len());
    for entry in &order {
        let (k, counts) = (key(entry), parts[entry.1 as usize].counts(entry.2 as usize));
        match level.len().checked_sub(1) {
            Some(last) if same_key(level.key(last), k) => {
                for ((sum, &count), &p) in level.counts_mut(last).iter_mut().zip(counts).zip(primes)
                {
                    *sum = add_mod(*sum, count, p);
                }
            }
            _ => level.push(k, counts),
        }
    }
    level
}

/// `a + b` modulo `p`, both below it (primes are below 2^62, so the sum
/// fits 64 bits).
fn add_mod(a: u64, b: u64, p: u64) -> u64 {
    let sum = a + b;
    if sum >= p { sum - p } else { sum }
}

/// The first 8 bytes of `key`, big-endian, zeros past its end: keys in
/// this order are in the keys' order, up to ties, which the keys settle.
fn prefix(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let len = key.len().min(8);
    bytes[..len].copy_from_slice(&key[..len]);
    u64::from_be_bytes(bytes)
}

/// Whether two keys are equal: short keys (most are) as one word each.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && if a.len() <= 8 {
            prefix(a) == prefix(b)
        } else {
            a == b
        }
}

/// The children of a level as they are summed: their keys in an arena,
/// found again by a hash table of their indices, each beside its key's
/// length and first 8 bytes, so that a probe reads the arena only for a
/// long key that matches so far.
struct ChildSums {
    states: FlatStates,
    index: HashTable<Entry>,
    hasher: FixedState,
}

#[derive(Clone, Copy)]
struct Entry {
    prefix: u64,
    len: u32,
    at: u32,
}

impl ChildSums {
    /// Room for about `states` children (they grow when there are more).
    fn new(primes: usize, states: usize) -> ChildSums {
        let mut flat = FlatStates::new(primes);
        flat.ends.reserve(states);
        flat.counts.reserve(states * primes);
        ChildSums {
            states: flat,
            index: HashTable::with_capacity(states),
            hasher: FixedState::with_seed(0x7a11_5eed),
        }
    }

    /// Adds `counts` times `multiplier` to the sums of `key`.
    fn add(&mut self, key: &[u8], counts: &[u64], multiplier: u64, primes: &[u64]) {
        let hash = self.hasher.hash_one(key);
        let (head, len) = (prefix(key), key.len() as u32);
        let states = &mut self.states;
        let found = self
            .index
            .find(hash, |e| {
                e.prefix == head && e.len == len && (len <= 8 || states.key(e.at as usize) == key)
            })
            .map(|e| e.at);
        let i = match found {
            Some(i) => i as usize,
            None => {
                let i = states.len();
                states.keys.extend_from_slice(key);
                states.ends.push(states.keys.len());
                states.counts.resize(states.counts.len() + primes.len(), 0);
                let (hasher, states) = (&self.hasher, &*states);
                let entry = Entry {
                    prefix: head,
                    len,
                    at: i as u32,
                };
                self.index
                    .insert_unique(hash, entry, |e| hasher.hash_one(states.key(e.at as usize)));
                i
            }
        };
        let sums = self.states.counts_mut(i).iter_mut().zip(counts).zip(primes);
        if multiplier == 1 {
            for ((sum, &count), &p) in sums {
                *sum = add_mod(*sum, count, p);
            }
        } else {
            for ((sum, &count), &p) in sums {
                *sum = add_mod(*sum, mul_mod(count, multiplier % p, p), p);
            }
        }
    }

    /// The sums as `buckets` lists, each in increasing key order.
    fn into_lists(self, buckets: u32) -> Vec<Vec<u8>> {
        let states = self.states;
        // Each bucket's states by the first 8 bytes of their keys (a radix
        // sort), then runs of equal first bytes by their whole keys.
        let mut by_bucket: Vec<Vec<(u64, u32)>> = vec![Vec::new(); buckets as usize];
        for i in 0..states.len() {
            let key = states.key(i);
            by_bucket[key_bucket(key, buckets) as usize].push((prefix(key), i as u32));
        }
        let key = |i: u32| states.key(i as usize);
        let mut lists = Vec::with_capacity(buckets as usize);
        for mut bucket in by_bucket {
            radsort::sort_by_key(&mut bucket, |&(head, _)| head);
            for run in bucket.chunk_by_mut(|a, b| a.0 == b.0) {
                if run.len() > 1 {
                    run.sort_unstable_by(|a, b| key(a.1).cmp(key(b.1)));
                }
            }
            let listed = bucket
                .iter()
                .map(|&(_, i)| (states.key(i as usize), states.counts(i as usize)));
            lists.push(encode_list(bucket.len(), states.primes, listed));
        }
        lists
    }
}

/// The bucket of `key` among `buckets`: FNV-1a of its bytes, mixed as every
/// frontier kernel's bucket is.
pub fn key_bucket(key: &[u8], buckets: u32) -> u32 {
    let hash = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    bucket_of(u128::from(hash), buckets)
}

/// One level shard of a sweep: the states of level `step` that the shards
/// of the level before sent this bucket (`parts`, each an
/// [`encode_states`] list), summed; their weights added up (`outputs` a
/// state); unless `last`, their children summed into `buckets_out` buckets
/// for the next level. The model is asked `batch` states at a time.
// The model, the level and its place, the primes and the buckets are each
// the caller's.
#[allow(clippy::too_many_arguments)]
pub fn sweep_level(
    model: &mut dyn SweepModel,
    step: u32,
    last: bool,
    outputs: usize,
    primes: &[u64],
    parts: &[&[u8]],
    buckets_out: u32,
    batch: usize,
    control: &Control,
) -> Result<SweepLevel> {
    if buckets_out == 0 || batch == 0 || outputs == 0 || primes.is_empty() {
        return Err(invalid!(
            "a sweep level needs buckets, a batch, outputs and primes"
        ));
    }
    let mut decoded = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let label = format!("sweep level {step}: the part of shard {i}");
        decoded.push(decode_flat(part, primes, &label)?);
    }
    let level = merged(decoded, primes);
    let mut outcome = SweepLevel {
        states: level.len() as u64,
        answer: vec![vec![0; outputs]; primes.len()],
        sent: Vec::new(),
        children: 0,
    };
    // The next level is about as large as this one, and up to twice as
    // large on the way to the widest: room for twice, so the table seldom
    // grows (a growth rehashes every entry).
    let mut next = ChildSums::new(primes.len(), 2 * level.len());
    let mut children = SweepChildren::default();
    let mut keys: Vec<&[u8]> = Vec::with_capacity(batch);
    for first in (0..level.len()).step_by(batch) {
        control.check()?;
        let states = first..(first + batch).min(level.len());
        keys.clear();
        keys.extend(states.clone().map(|i| level.key(i)));
        let weights = model.weights(step, last, &keys)?;
        if weights.len() != outputs * keys.len() {
            return Err(invalid!(
                "sweep level {step}: {} weights for {} states of {outputs}",
                weights.len(),
                keys.len()
            ));
        }
        for (i, weights) in states.clone().zip(weights.chunks_exact(outputs)) {
            for ((sums, &count), &p) in outcome.answer.iter_mut().zip(level.counts(i)).zip(primes) {
                for (sum, &w) in sums.iter_mut().zip(weights) {
                    *sum = add_mod(*sum, mul_mod(count, w % p, p), p);
                }
            }
        }
        if last {
            control.add_work(keys.len() as u64);
            continue;
        }
        children.clear();
        model.expand(step, &keys, &mut children)?;
        for (parent, key, multiplier) in children.iter() {
            if parent as usize >= keys.len() {
                return Err(invalid!(
                    "sweep level {step}: a child of state {parent} of a batch of {}",
                    keys.len()
                ));
            }
            next.add(
                key,
                level.counts(first + parent as usize),
                multiplier,
                primes,
            );
        }
        control.add_work(keys.len() as u64);
    }
    outcome.children = next.states.len() as u64;
    outcome.sent = next.into_lists(buckets_out);
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tally_example_independent_sets_sweep::IndependentRows;
    use tally_example_pegs_sweep::PegsSweep;
    use tally_guest::Params;
    use tally_guest::sweep::{Sweep, SweepEnd, run_sweep};

    use super::*;
    use crate::Error;

    const PRIMES: [u64; 2] = [(1 << 61) - 1, 1_000_000_007];

    /// A model of the guest SDK called natively, as a module's session
    /// would call it through the sandbox.
    struct Native<S>(S);

    impl<S: Sweep> SweepModel for Native<S> {
        fn expand(&mut self, step: u32, keys: &[&[u8]], out: &mut SweepChildren) -> Result<()> {
            for (parent, key) in keys.iter().enumerate() {
                let mut emit = |key: &[u8], multiplier| out.push(parent as u32, key, multiplier);
                (self.0.expand(step, key, &mut emit)).map_err(|e| Error::Failed(e.to_string()))?;
            }
            Ok(())
        }

        fn weights(&mut self, step: u32, last: bool, keys: &[&[u8]]) -> Result<Vec<u64>> {
            let outputs = self.0.plan().outputs;
            let mut all = Vec::new();
            for key in keys {
                let mut weights = vec![0; outputs];
                self.0.weights(step, key, last, &mut weights);
                all.extend(weights);
            }
            Ok(all)
        }
    }

    /// The sweep of `params` run as level shards: `buckets(step)` buckets a
    /// level, each shard's output shipped as bytes, the model asked `batch`
    /// states at a time. The answer's residues for each prime.
    fn by_level_shards<S: Sweep>(
        params: &str,
        buckets: impl Fn(u32) -> u32,
        batch: usize,
    ) -> Vec<Vec<u64>> {
        let model = S::new(&Params::parse(params).unwrap()).unwrap();
        let plan = model.plan();
        let SweepEnd::Steps(steps) = plan.end else {
            panic!("a sweep of fixed steps");
        };
        let mut starts: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        model.starts(&mut |key, count| *starts.entry(key.to_vec()).or_default() += count);
        let mut inbox: Vec<Vec<Vec<u8>>> = vec![Vec::new(); buckets(0) as usize];
        let mut first: Vec<Vec<SweepState>> = vec![Vec::new(); buckets(0) as usize];
        for (key, count) in starts {
            let counts = PRIMES.iter().map(|&p| count % p).collect();
            first[key_bucket(&key, buckets(0)) as usize].push((key, counts));
        }
        for (q, states) in first.iter().enumerate() {
            inbox[q].push(encode_states(states, PRIMES.len()));
        }
        let mut model = Native(model);
        let mut answer = vec![vec![0; plan.outputs]; PRIMES.len()];
        for step in 0..=steps {
            let last = step == steps;
            let out = buckets(step + 1);
            let mut next: Vec<Vec<Vec<u8>>> = vec![Vec::new(); out as usize];
            for parts in &inbox {
                let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                let level = sweep_level(
                    &mut model,
                    step,
                    last,
                    plan.outputs,
                    &PRIMES,
                    &parts,
                    out,
                    batch,
                    &Control::new(),
                )
                .unwrap();
                for ((sums, found), &p) in answer.iter_mut().zip(&level.answer).zip(&PRIMES) {
                    for (sum, &f) in sums.iter_mut().zip(found) {
                        *sum = (*sum + f) % p;
                    }
                }
                for (q, list) in level.sent.into_iter().enumerate() {
                    next[q].push(list);
                }
            }
            inbox = next;
        }
        answer
    }

    #[test]
    fn level_shards_find_what_the_guests_native_run_finds() {
        for params in ["n=3", "n=5\nm=7", "n=8", "n=11"] {
            let native = run_sweep::<IndependentRows>(params, &PRIMES).unwrap();
            for (buckets, batch) in [(1, 1000), (3, 7), (5, 1)] {
                let shards = by_level_shards::<IndependentRows>(
                    params,
                    |step| 1 + (step * buckets) % 4,
                    batch,
                );
                assert_eq!(shards, native.residues, "{params}: {buckets} {batch}");
            }
        }
    }

    /// The example pegs module, its levels run as shards here, counts what
    /// the built-in pegs kernel counts (its own search, its own symmetries)
    /// on triangles from every start, with and without a final hole.
    #[test]
    fn a_guest_peg_sweep_counts_what_the_built_in_kernel_counts() {
        use crate::pegs::{BoardShape, PegGame};
        let triangles = [
            (5, "o/oo/ooo/oooo/ooooo"),
            (6, "o/oo/ooo/oooo/ooooo/oooooo"),
        ];
        let mut solvable = 0;
        for (side, picture) in triangles {
            let holes = side * (side + 1) / 2;
            for start in 1..=holes {
                for end in [None, Some(start)] {
                    let game = PegGame::new(BoardShape::Triangle(side), Some(start), end).unwrap();
                    let built_in = game.count(&Control::new()).unwrap().solutions;
                    let mut params = format!("board={picture}\nmoves=triangle\nstart={start}");
                    if let Some(end) = end {
                        params.push_str(&format!("\nend={end}"));
                    }
                    let shards = by_level_shards::<PegsSweep>(&params, |step| 1 + step % 3, 64);
                    let expected: Vec<Vec<u64>> = PRIMES
                        .iter()
                        .map(|&p| vec![(built_in % u128::from(p)) as u64])
                        .collect();
                    assert_eq!(shards, expected, "{params}");
                    solvable += usize::from(built_in > 0);
                }
            }
        }
        assert!(solvable > 20, "{solvable}");
    }

    #[test]
    fn level_lists_round_trip_and_refuse_what_is_damaged_by_name() {
        let states: Vec<SweepState> = vec![
            (b"".to_vec(), vec![0, 5]),
            (b"ab".to_vec(), vec![1, 2]),
            (b"abc".to_vec(), vec![PRIMES[0] - 1, 0]),
            (b"b".to_vec(), vec![3, PRIMES[1] - 1]),
        ];
        let bytes = encode_states(&states, 2);
        assert_eq!(decode_states(&bytes, &PRIMES, "list").unwrap(), states);
        let refused = |bytes: &[u8], primes: &[u64]| {
            decode_states(bytes, primes, "the list of shard 2")
                .unwrap_err()
                .to_string()
        };
        for at in [0, 3, bytes.len() / 2, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(
                refused(&damaged, &PRIMES).contains("the list of shard 2"),
                "byte {at}"
            );
        }
        for cut in [0, 3, bytes.len() - 1] {
            assert!(refused(&bytes[..cut], &PRIMES).contains("the list of shard 2"));
        }
        assert!(refused(&bytes, &PRIMES[..1]).contains("modulo 2 primes, the job has 1"));
        let out_of_order = encode_states(&[states[1].clone(), states[0].clone()], 2);
        assert!(refused(&out_of_order, &PRIMES).contains("state 1 is not after the one before"));
        let too_big = encode_states(&[(b"a".to_vec(), vec![PRIMES[0], 0])], 2);
        assert!(refused(&too_big, &PRIMES).contains("not below the prime"));
        let empty = encode_states(&[], 2);
        assert_eq!(decode_states(&empty, &PRIMES, "list").unwrap(), vec![]);
    }
}
