//! Sweeps over keyed states (kernel ABI version 2,
//! `docs/wasm-abi.md`): one level shard. A model (a user's module, through
//! the sandbox) says what a state's children and weights are; this sums the
//! counts of equal keys modulo each prime of the job, adds the level's
//! weights to the answer, and sends the children in buckets by a hash of
//! their keys, each a checked list.
//!
//! The `wasm-sweep` kind's level shards run it, within their memory share:
//! the parts of a level are read as streams and merged, and the children's
//! tables spill as sorted runs, as the frontier kernels' do.

use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::Arc;

use foldhash::fast::FixedState;

use crate::buckets::bucket_of;
use crate::cache::prefetch;
use crate::modular::mul_mod;
use crate::spill::{CountedList, MemorySpill, Room, RunOrSlice, Source, Stored, StoredSource};
use crate::{Control, Result, invalid, varint};

mod key_index;
mod stream;
use key_index::{Arena, KeyIndex};
pub use stream::{ListStream, ListWriter, MergedLists};

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
    /// What goes to each bucket of the next level (empty lists on the
    /// last): in memory, or in a run of the shard's spill.
    pub sent: Vec<CountedList>,
    /// The distinct children in `sent`, over all its buckets.
    pub children: u64,
    /// Sorted runs the children's tables spilled (the worker counts the
    /// bytes).
    pub runs: u32,
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

    pub fn clear(&mut self) {
        self.keys.clear();
        self.ends.clear();
        self.counts.clear();
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

/// A list of states in increasing key order as bytes: the number of
/// states, a 0 and the list's form (1, compact) and the number of primes,
/// then each state ([`push_state`]), then the CRC-32 of everything before
/// (4 bytes, little-endian); the numbers are varints. Lists an older
/// release wrote have the number of primes where the 0 is, and states in
/// the raw form ([`ListStream`] reads both).
pub fn encode_states(states: &[SweepState], primes: usize) -> Vec<u8> {
    let listed = states
        .iter()
        .map(|(key, counts)| (key.as_slice(), counts.as_slice()));
    encode_list(states.len(), primes, listed)
}

/// Marks the compact form where a list of the raw form has its number of
/// primes (never 0).
const FORM_MARK: u128 = 0;
/// The compact form's number.
const COMPACT_FORM: u128 = 1;
/// A key's tail of this many bytes or more has its length in a varint of
/// its own.
const LONG_TAIL: usize = 15;

/// The head of a list after its state count: its form and its primes.
fn push_list_head(out: &mut Vec<u8>, primes: usize) {
    varint::push(out, FORM_MARK);
    varint::push(out, COMPACT_FORM);
    varint::push(out, primes as u128);
}

/// [`encode_states`] of `len` states given in order.
fn encode_list<'a>(
    len: usize,
    primes: usize,
    states: impl Iterator<Item = (&'a [u8], &'a [u64])>,
) -> Vec<u8> {
    let mut out = Vec::new();
    varint::push(&mut out, len as u128);
    push_list_head(&mut out, primes);
    let mut previous: &[u8] = &[];
    for (key, counts) in states {
        debug_assert_eq!(counts.len(), primes);
        push_state(&mut out, previous, key, counts);
        previous = key;
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Appends one state of a list in the compact form: the length of the
/// prefix its key shares with `previous` (the key before) times 16 plus
/// the length of the rest (15 and the length past 15 for a longer rest),
/// the rest's bytes, then its counts: the first residue times 2, plus 1
/// when the other residues differ from it, which then follow. A count
/// below every prime is the same residue of each, so most states of a
/// level write their count once. Returns the length shared.
fn push_state(out: &mut Vec<u8>, previous: &[u8], key: &[u8], counts: &[u64]) -> usize {
    let shared = key.iter().zip(previous).take_while(|(a, b)| a == b).count();
    let rest = key.len() - shared;
    varint::push(out, ((shared as u128) << 4) | rest.min(LONG_TAIL) as u128);
    if rest >= LONG_TAIL {
        varint::push(out, (rest - LONG_TAIL) as u128);
    }
    out.extend_from_slice(&key[shared..]);
    let first = counts.first().copied().unwrap_or(0);
    let differ = counts.iter().any(|&count| count != first);
    varint::push(out, (u128::from(first) << 1) | u128::from(differ));
    if differ {
        for &count in &counts[1..] {
            varint::push(out, u128::from(count));
        }
    }
    shared
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
    let mut list = ListStream::new(bytes, primes, usize::MAX, label.to_string())?;
    let mut states = FlatStates::new(primes.len());
    while list.advance()? {
        states.keys.extend_from_slice(list.key());
        states.ends.push(states.keys.len());
        states.counts.extend_from_slice(list.counts());
    }
    Ok(states)
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

/// The children of a level as they are summed: their keys in an arena,
/// found again by an index of their places ([`KeyIndex`]), probed a batch
/// at a time.
struct ChildSums {
    states: FlatStates,
    index: KeyIndex,
    hasher: FixedState,
    /// A batch's hashes and the places its children were found at (kept
    /// between batches for their room).
    hashes: Vec<u64>,
    found: Vec<u32>,
}

/// The arena the index asks about keys.
struct Keys<'a> {
    states: &'a FlatStates,
    hasher: &'a FixedState,
}

impl Arena for Keys<'_> {
    fn holds(&self, at: u32, key: &[u8]) -> bool {
        self.states.key(at as usize) == key
    }

    fn hash_of(&self, at: u32) -> u64 {
        self.hasher.hash_one(self.states.key(at as usize))
    }
}

/// Children added to the tables at a time: each can be a new state, so a
/// table spills before a piece that could take it past its most.
const CHILDREN_A_PIECE: usize = 1024;

/// Probes between the fetch of a slot (or of a state's sums) and its use.
const FETCH_AHEAD: usize = 8;

impl ChildSums {
    /// Room for about `states` children (they grow when there are more).
    fn new(primes: usize, states: usize) -> ChildSums {
        let mut flat = FlatStates::new(primes);
        flat.keys.reserve(8 * states);
        flat.ends.reserve(states);
        flat.counts.reserve(states * primes);
        ChildSums {
            states: flat,
            index: KeyIndex::with_capacity(states),
            hasher: FixedState::with_seed(0x7a11_5eed),
            hashes: Vec::new(),
            found: Vec::new(),
        }
    }

    /// Adds children `range` of `children` to the sums of their keys: each
    /// its parent's counts in `level` times its multiplier. First every
    /// child's place (a new key entered), then every sum, each pass asking
    /// memory for what it needs a few children ahead.
    fn add_children(
        &mut self,
        children: &SweepChildren,
        range: Range<usize>,
        level: &FlatStates,
        primes: &[u64],
    ) {
        let ChildSums {
            states,
            index,
            hasher,
            hashes,
            found,
        } = self;
        hashes.clear();
        hashes.extend(range.clone().map(|i| hasher.hash_one(children.get(i).1)));
        found.clear();
        for (n, i) in range.clone().enumerate() {
            if let Some(&ahead) = hashes.get(n + FETCH_AHEAD) {
                index.prefetch(ahead);
            }
            let key = children.get(i).1;
            let new_at = states.len() as u32;
            let arena = Keys { states, hasher };
            match index.find_or_insert(hashes[n], prefix(key), key, new_at, &arena) {
                Some(at) => found.push(at),
                None => {
                    states.keys.extend_from_slice(key);
                    states.ends.push(states.keys.len());
                    states.counts.resize(states.counts.len() + primes.len(), 0);
                    found.push(new_at);
                }
            }
        }
        for (n, i) in range.enumerate() {
            if let Some(&ahead) = found.get(n + FETCH_AHEAD) {
                prefetch(
                    states
                        .counts
                        .as_ptr()
                        .wrapping_add(ahead as usize * primes.len()),
                );
            }
            let (parent, _, multiplier) = children.get(i);
            let counts = level.counts(parent as usize);
            let sums = states
                .counts_mut(found[n] as usize)
                .iter_mut()
                .zip(counts)
                .zip(primes);
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
    }

    /// About what a state costs the tables: 8 bytes of key, its end, its
    /// counts and its index slot (with the index's spare room).
    fn bytes_a_state(primes: usize) -> u64 {
        8 + 8 + 8 * primes as u64 + KeyIndex::BYTES_A_KEY
    }

    /// The bytes the tables hold, room to grow included.
    fn bytes(&self) -> u64 {
        let flat = &self.states;
        let lists = flat.keys.capacity() + 8 * (flat.ends.capacity() + flat.counts.capacity());
        (lists + self.index.bytes()) as u64
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

/// Where a level shard stands in its sweep and what it sends.
#[derive(Clone, Copy, Debug)]
pub struct LevelShard {
    /// The level's number (0 for the start states).
    pub step: u32,
    /// Whether it is the sweep's last level (its states are weighed, not
    /// expanded).
    pub last: bool,
    /// The weights a state.
    pub outputs: usize,
    /// The buckets of the next level.
    pub buckets_out: u32,
    /// States the model is asked about at once.
    pub batch: usize,
    /// The longest key the model may give.
    pub key_limit: usize,
}

/// One level shard of a sweep, in memory: [`sweep_level_within`] of lists
/// in memory, without a memory limit, its output lists in memory.
pub fn sweep_level(
    model: &mut dyn SweepModel,
    shard: &LevelShard,
    primes: &[u64],
    parts: &[&[u8]],
    control: &Control,
) -> Result<SweepLevel> {
    let mut spill = MemorySpill::default();
    let mut room = Room {
        memory: u64::MAX,
        spill: &mut spill,
    };
    sweep_level_within(model, shard, primes, parts.to_vec(), &mut room, control)
}

/// One level shard of a sweep: the states of level `shard.step` that the
/// shards of the level before sent this bucket (`parts`, each an
/// [`encode_states`] list, read as streams and merged, equal keys summed);
/// their weights added up (`shard.outputs` a state); unless `shard.last`,
/// their children summed into `shard.buckets_out` buckets for the next
/// level, in tables that spill as sorted runs to `room.spill` past a quarter
/// of `room.memory` (the rest is for the lists a table is sorted into as it
/// spills, the input's buffers and the output). The model is asked
/// `shard.batch` states at a time.
pub fn sweep_level_within<S: Source>(
    model: &mut dyn SweepModel,
    shard: &LevelShard,
    primes: &[u64],
    parts: Vec<S>,
    room: &mut Room<'_>,
    control: &Control,
) -> Result<SweepLevel> {
    let LevelShard {
        step,
        last,
        outputs,
        buckets_out,
        batch,
        key_limit,
    } = *shard;
    if buckets_out == 0 || batch == 0 || outputs == 0 || primes.is_empty() {
        return Err(invalid!(
            "a sweep level needs buckets, a batch, outputs and primes"
        ));
    }
    let streams = (parts.into_iter().enumerate())
        .map(|(i, part)| {
            let label = format!("sweep level {step}: the part of shard {i}");
            ListStream::new(part, primes, key_limit, label)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut input = MergedLists::new(streams)?;
    let mut outcome = SweepLevel {
        answer: vec![vec![0; outputs]; primes.len()],
        ..SweepLevel::default()
    };
    // The next level is about as large as this one, and up to twice as
    // large on the way to the widest: room for twice, so the table seldom
    // grows (a growth rehashes every entry), within the share.
    let listed = usize::try_from(input.listed()).unwrap_or(usize::MAX);
    let mut next = SpillingChildren::new(room, primes.len(), buckets_out, listed.saturating_mul(2));
    let mut level = FlatStates::new(primes.len());
    let mut children = SweepChildren::default();
    loop {
        control.check()?;
        level.clear();
        while level.len() < batch {
            match input.next_state()? {
                Some((key, counts)) => level.push(key, counts),
                None => break,
            }
        }
        if level.is_empty() {
            break;
        }
        outcome.states += level.len() as u64;
        let keys: Vec<&[u8]> = (0..level.len()).map(|i| level.key(i)).collect();
        let weights = model.weights(step, last, &keys)?;
        if weights.len() != outputs * keys.len() {
            return Err(invalid!(
                "sweep level {step}: {} weights for {} states of {outputs}",
                weights.len(),
                keys.len()
            ));
        }
        for (i, weights) in weights.chunks_exact(outputs).enumerate() {
            for ((sums, &count), &p) in outcome.answer.iter_mut().zip(level.counts(i)).zip(primes) {
                for (sum, &w) in sums.iter_mut().zip(weights) {
                    *sum = add_mod(*sum, mul_mod(count, w % p, p), p);
                }
            }
        }
        if !last {
            children.clear();
            model.expand(step, &keys, &mut children)?;
            if let Some((parent, _, _)) = children.iter().find(|c| c.0 as usize >= keys.len()) {
                return Err(invalid!(
                    "sweep level {step}: a child of state {parent} of a batch of {}",
                    keys.len()
                ));
            }
            next.add(&children, &level, primes)?;
            next.spill_if_full()?;
        }
        control.add_work(keys.len() as u64);
        if level.len() < batch {
            break;
        }
    }
    // The input ended: each part's checksum was checked as it ended.
    let label = format!("sweep level {}", step + 1);
    let sent = next.finish(primes, key_limit, &label)?;
    (outcome.sent, outcome.children) = (sent.lists, sent.children);
    outcome.runs = sent.runs;
    Ok(outcome)
}

/// A level's children as they are summed, spilled as sorted runs (one
/// [`encode_states`] list a bucket, each checked by its own checksum) when
/// the tables pass their share.
struct SpillingChildren<'r, 's> {
    sums: ChildSums,
    primes: usize,
    buckets: u32,
    hint: usize,
    /// The most states a table takes before it spills: it is made with room
    /// for them, and never grows while its limit binds (a growth would hold
    /// the old table and the new at once).
    most: usize,
    limit: u64,
    room: &'r mut Room<'s>,
    /// For each run: its number and each bucket's list in it.
    runs: Vec<(u32, Vec<Range<u64>>)>,
}

/// What [`SpillingChildren::finish`] sends, and what it took.
struct SentChildren {
    lists: Vec<CountedList>,
    children: u64,
    runs: u32,
}

impl<'r, 's> SpillingChildren<'r, 's> {
    fn new(room: &'r mut Room<'s>, primes: usize, buckets: u32, wanted: usize) -> Self {
        // A table at its limit and the lists it is sorted into take under
        // twice the limit while it spills; the rest of the share is for the
        // input's buffers (a quarter) and the output.
        let limit = room.memory / 4;
        let most = usize::try_from(limit / ChildSums::bytes_a_state(primes)).unwrap_or(usize::MAX);
        let hint = wanted.min(most).max(1);
        let sums = ChildSums::new(primes, hint);
        // The room a fresh table is made with may pass the limit by the
        // index's rounding: a table spills by its bytes only past both.
        let limit = limit.max(sums.bytes());
        SpillingChildren {
            sums,
            primes,
            buckets,
            hint,
            most: most.max(1),
            limit,
            room,
            runs: Vec::new(),
        }
    }

    /// Adds `children` (of states of `level`) to the sums, a piece at a
    /// time, the tables spilled first when a piece could take them past
    /// their most.
    fn add(&mut self, children: &SweepChildren, level: &FlatStates, primes: &[u64]) -> Result<()> {
        let piece = CHILDREN_A_PIECE.min(self.most);
        let mut at = 0;
        while at < children.len() {
            let end = (at + piece).min(children.len());
            let held = self.sums.states.len();
            if held > 0 && held + (end - at) > self.most {
                self.spill()?;
            }
            self.sums.add_children(children, at..end, level, primes);
            at = end;
        }
        Ok(())
    }

    /// Spills the tables when their bytes pass the limit (long keys: the
    /// states alone are held to `most` as they are added).
    fn spill_if_full(&mut self) -> Result<()> {
        match self.sums.bytes() > self.limit {
            true => self.spill(),
            false => Ok(()),
        }
    }

    fn spill(&mut self) -> Result<()> {
        let full = std::mem::replace(&mut self.sums, ChildSums::new(self.primes, self.hint));
        let mut ranges = Vec::with_capacity(self.buckets as usize);
        let mut at = 0;
        for list in full.into_lists(self.buckets) {
            self.room.spill.write(&list)?;
            ranges.push(at..at + list.len() as u64);
            at += list.len() as u64;
        }
        let run = self.room.spill.end_run()?;
        self.runs.push((run, ranges));
        Ok(())
    }

    /// Each outgoing bucket's list: what the tables hold merged with every
    /// run's part, written to one run of the spill as it is merged; in
    /// memory when nothing spilled.
    fn finish(self, primes: &[u64], key_limit: usize, label: &str) -> Result<SentChildren> {
        let children = self.sums.states.len() as u64;
        let held = self.sums.into_lists(self.buckets);
        if self.runs.is_empty() {
            return Ok(SentChildren {
                lists: held.into_iter().map(CountedList::Bytes).collect(),
                children,
                runs: 0,
            });
        }
        let kept = (self.runs.iter())
            .map(|(run, _)| self.room.spill.keep_run(*run))
            .collect::<Result<Vec<Arc<dyn Stored>>>>()?;
        let mut sent = SentChildren {
            lists: Vec::with_capacity(held.len()),
            children: 0,
            runs: self.runs.len() as u32,
        };
        let mut bodies = Vec::with_capacity(held.len());
        let mut at = 0;
        for (q, in_memory) in held.iter().enumerate() {
            let mut parts = Vec::with_capacity(self.runs.len() + 1);
            for (i, (stored, (_, ranges))) in kept.iter().zip(&self.runs).enumerate() {
                let source = RunOrSlice::Run(StoredSource::new(&**stored, ranges[q].clone()));
                let label = format!("{label}: spill run {i} of bucket {q}");
                parts.push(ListStream::new(source, primes, key_limit, label)?);
            }
            let label = format!("{label}: bucket {q} in memory");
            let source = RunOrSlice::Slice(in_memory);
            parts.push(ListStream::new(source, primes, key_limit, label)?);
            let mut merged = MergedLists::new(parts)?;
            let mut writer = ListWriter::new(&mut *self.room.spill, primes.len());
            while let Some((key, counts)) = merged.next_state()? {
                writer.push(key, counts)?;
            }
            let (count, len) = writer.finish()?;
            bodies.push((count, at..at + len));
            sent.children += count as u64;
            at += len;
        }
        let run = self.room.spill.end_run()?;
        sent.lists = (bodies.into_iter())
            .map(|(count, body)| CountedList::Spilled { count, run, body })
            .collect();
        Ok(sent)
    }
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
    use crate::spill::Spill;

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
    /// What [`by_level_shards`] found: the answer's residues, every list
    /// sent (level by level, shard by shard), and the runs spilled.
    struct ShardsRun {
        answer: Vec<Vec<u64>>,
        sent: Vec<Vec<u8>>,
        runs: u32,
    }

    /// A sweep run level by level as shards, `buckets(step)` of them for
    /// level `step`, each within `memory` (its runs in memory).
    fn by_level_shards<S: Sweep>(
        params: &str,
        buckets: impl Fn(u32) -> u32,
        batch: usize,
        memory: u64,
    ) -> ShardsRun {
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
        let mut found = ShardsRun {
            answer: vec![vec![0; plan.outputs]; PRIMES.len()],
            sent: Vec::new(),
            runs: 0,
        };
        for step in 0..=steps {
            let shard = LevelShard {
                step,
                last: step == steps,
                outputs: plan.outputs,
                buckets_out: buckets(step + 1),
                batch,
                key_limit: plan.key_limit,
            };
            let mut next: Vec<Vec<Vec<u8>>> = vec![Vec::new(); shard.buckets_out as usize];
            for parts in &inbox {
                let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                let mut spill = MemorySpill::default();
                let mut room = Room {
                    memory,
                    spill: &mut spill,
                };
                let control = Control::new();
                let level =
                    sweep_level_within(&mut model, &shard, &PRIMES, parts, &mut room, &control)
                        .unwrap();
                for ((sums, level), &p) in found.answer.iter_mut().zip(&level.answer).zip(&PRIMES) {
                    for (sum, &f) in sums.iter_mut().zip(level) {
                        *sum = (*sum + f) % p;
                    }
                }
                found.runs += level.runs;
                for (q, list) in level.sent.into_iter().enumerate() {
                    let bytes = list.to_bytes(&spill).unwrap();
                    found.sent.push(bytes.clone());
                    next[q].push(bytes);
                }
            }
            inbox = next;
        }
        found
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
                    u64::MAX,
                );
                assert_eq!(
                    shards.answer, native.residues,
                    "{params}: {buckets} {batch}"
                );
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
                    let shards =
                        by_level_shards::<PegsSweep>(&params, |step| 1 + step % 3, 64, u64::MAX);
                    let expected: Vec<Vec<u64>> = PRIMES
                        .iter()
                        .map(|&p| vec![(built_in % u128::from(p)) as u64])
                        .collect();
                    assert_eq!(shards.answer, expected, "{params}");
                    solvable += usize::from(built_in > 0);
                }
            }
        }
        assert!(solvable > 20, "{solvable}");
    }

    /// A list as an older release wrote it: the prime count after the
    /// state count, then for each state the shared prefix, the rest's
    /// length and bytes and every count, all varints.
    fn raw_list(states: &[SweepState], primes: usize) -> Vec<u8> {
        let mut out = Vec::new();
        varint::push(&mut out, states.len() as u128);
        varint::push(&mut out, primes as u128);
        let mut previous: &[u8] = &[];
        for (key, counts) in states {
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

    /// The compact form holds what the raw form of an older release held
    /// (both read, as wholes and as streams), in fewer bytes: a count
    /// below every prime is written once, and a key's two lengths share a
    /// byte. A form this release does not know is refused by name.
    #[test]
    fn compact_lists_hold_what_raw_lists_held_in_fewer_bytes_and_raw_ones_still_read() {
        let mut rng = crate::test_rng::Rng::new(5);
        let mut keys: Vec<Vec<u8>> = (0..5000)
            .map(|_| {
                // Long keys too, past the tail length that fits the head.
                match rng.below(50) {
                    0 => (0..15 + rng.below(40))
                        .map(|_| rng.below(256) as u8)
                        .collect(),
                    // A board of 37 holes in 8 bytes, as a peg kernel's.
                    _ => rng.below(1u64 << 37).to_be_bytes().to_vec(),
                }
            })
            .collect();
        keys.sort();
        keys.dedup();
        let states: Vec<SweepState> = (keys.into_iter())
            .map(|key| {
                let counts = match rng.below(4) {
                    // A count past the primes: its residues differ.
                    0 => PRIMES.iter().map(|&p| rng.below(p)).collect(),
                    _ => vec![rng.below(1 << 20); PRIMES.len()],
                };
                (key, counts)
            })
            .collect();
        let compact = encode_states(&states, PRIMES.len());
        let raw = raw_list(&states, PRIMES.len());
        for bytes in [&compact, &raw] {
            assert_eq!(decode_states(bytes, &PRIMES, "list").unwrap(), states);
            let mut list = ListStream::new(bytes.as_slice(), &PRIMES, 64, "list".into()).unwrap();
            let mut streamed = Vec::new();
            while list.advance().unwrap() {
                streamed.push((list.key().to_vec(), list.counts().to_vec()));
            }
            assert_eq!(streamed, states);
        }
        assert!(
            (compact.len() as f64) < 0.8 * raw.len() as f64,
            "compact {} bytes, raw {}",
            compact.len(),
            raw.len()
        );
        // A form past this release's: the mark, form 2.
        let mut unknown = Vec::new();
        for n in [1, 0, 2, PRIMES.len() as u128] {
            varint::push(&mut unknown, n);
        }
        let crc = crc32fast::hash(&unknown);
        unknown.extend_from_slice(&crc.to_le_bytes());
        let refused = decode_states(&unknown, &PRIMES, "the list of shard 4").unwrap_err();
        assert!(
            refused.to_string().contains(
                "the list of shard 4: a list of form 2, which this release does not know"
            ),
            "{refused}"
        );
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

    /// Levels whose children's tables spill as runs (a memory share of a
    /// few kilobytes) send the very bytes of levels held in memory.
    #[test]
    fn levels_that_spill_send_what_levels_in_memory_send() {
        let cases = [
            (
                "board=o/oo/ooo/oooo/ooooo/oooooo\nmoves=triangle\nstart=5",
                64,
            ),
            ("n=14\nm=5", 50),
        ];
        for (params, batch) in cases {
            let run = |memory| match params.starts_with("board") {
                true => by_level_shards::<PegsSweep>(params, |step| 1 + step % 3, batch, memory),
                false => {
                    by_level_shards::<IndependentRows>(params, |step| 1 + step % 2, batch, memory)
                }
            };
            let held = run(u64::MAX);
            assert_eq!(held.runs, 0);
            for memory in [12_000, 60_000] {
                let spilled = run(memory);
                assert!(spilled.runs > 3, "{params}: {} runs", spilled.runs);
                assert_eq!(spilled.answer, held.answer, "{params}");
                assert!(spilled.sent == held.sent, "{params}: the lists differ");
            }
        }
    }

    /// A list read as a stream holds what it holds decoded, and a damaged,
    /// cut or overlong one is refused by name, as the decoder refuses it.
    #[test]
    fn lists_read_as_streams_are_checked_as_decoded_lists_are() {
        let mut rng = crate::test_rng::Rng::new(11);
        let mut keys: Vec<Vec<u8>> = (0..3000)
            .map(|_| {
                let len = rng.below(12) as usize;
                (0..len).map(|_| rng.below(4) as u8).collect()
            })
            .collect();
        keys.sort();
        keys.dedup();
        let states: Vec<SweepState> = (keys.into_iter())
            .map(|key| (key, PRIMES.iter().map(|&p| rng.below(p)).collect()))
            .collect();
        let bytes = encode_states(&states, PRIMES.len());
        let streamed = |bytes: &[u8], key_limit: usize| -> Result<Vec<SweepState>> {
            let mut list =
                ListStream::new(bytes, &PRIMES, key_limit, "the list of shard 2".into())?;
            let mut read = Vec::new();
            while list.advance()? {
                read.push((list.key().to_vec(), list.counts().to_vec()));
            }
            Ok(read)
        };
        assert_eq!(streamed(&bytes, 16).unwrap(), states);
        let refused = |bytes: &[u8]| streamed(bytes, 16).unwrap_err().to_string();
        for at in (0..bytes.len()).step_by(97).chain([bytes.len() - 1]) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x04;
            assert!(
                refused(&damaged).contains("the list of shard 2"),
                "byte {at}"
            );
        }
        for cut in [0, 1, bytes.len() / 3, bytes.len() - 4, bytes.len() - 1] {
            assert!(
                refused(&bytes[..cut]).contains("the list of shard 2"),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(refused(&longer).contains("bytes after its"));
        assert!(
            streamed(&bytes, 8)
                .unwrap_err()
                .to_string()
                .contains("past 8 bytes")
        );
        let out_of_order = encode_states(&[states[1].clone(), states[0].clone()], 2);
        assert!(refused(&out_of_order).contains("state 1 is not after the one before"));
        let too_big = encode_states(&[(b"a".to_vec(), vec![PRIMES[0], 0])], 2);
        assert!(refused(&too_big).contains("not below the prime"));
    }

    /// A list written to a spill as its states come is, with its count put
    /// in front, the list [`encode_states`] makes; merged lists sum equal
    /// keys.
    #[test]
    fn lists_written_to_a_spill_and_merged_are_the_lists_encoded() {
        let part = |keys: &[&str], count: u64| -> Vec<SweepState> {
            (keys.iter())
                .map(|k| (k.as_bytes().to_vec(), vec![count, PRIMES[1] - count]))
                .collect()
        };
        let a = part(&["", "ab", "b", "ba"], 2);
        let b = part(&["ab", "abc", "ba", "c"], 5);
        let lists = [encode_states(&a, 2), encode_states(&b, 2)];
        let streams = (lists.iter())
            .map(|l| ListStream::new(l.as_slice(), &PRIMES, 8, "part".into()).unwrap())
            .collect();
        let mut merged = MergedLists::new(streams).unwrap();
        assert_eq!(merged.listed(), 8);
        let mut spill = MemorySpill::default();
        spill.write(b"before").unwrap();
        let mut writer = ListWriter::new(&mut spill, 2);
        let mut expected: Vec<SweepState> = Vec::new();
        while let Some((key, counts)) = merged.next_state().unwrap() {
            writer.push(key, counts).unwrap();
            expected.push((key.to_vec(), counts.to_vec()));
        }
        let (count, len) = writer.finish().unwrap();
        let run = spill.end_run().unwrap();
        let sums: Vec<(&str, u64)> = (expected.iter())
            .map(|(k, c)| (std::str::from_utf8(k).unwrap(), c[0]))
            .collect();
        let want = [
            ("", 2),
            ("ab", 7),
            ("abc", 5),
            ("b", 2),
            ("ba", 7),
            ("c", 5),
        ];
        assert_eq!(sums, want);
        assert!(
            expected
                .iter()
                .all(|(_, c)| c[1] == (2 * PRIMES[1] - c[0]) % PRIMES[1])
        );
        let listed = CountedList::Spilled {
            count,
            run,
            body: 6..6 + len,
        };
        assert_eq!(
            listed.to_bytes(&spill).unwrap(),
            encode_states(&expected, 2)
        );
    }
}
