//! Sweeps over keyed states (kernel ABI version 2,
//! `docs/wasm-abi.md`): one level shard, in memory. A model (a
//! user's module, through the sandbox) says what a state's children and
//! weights are; this sums the counts of equal keys modulo each prime of the
//! job, adds the level's weights to the answer, and sends the children in
//! buckets by a hash of their keys, each a checked list.
//!
//! The `wasm-sweep` kind's level shards run it. It holds a level in memory
//! (the frontier kernels' spilling within a share is still to come).

use std::collections::{BTreeMap, HashMap};

use crate::buckets::bucket_of;
use crate::modular::mul_mod;
use crate::{Control, Result, invalid, varint};

/// What a level shard asks of a sweep's model.
pub trait SweepModel {
    /// The children of `keys`, states of level `step`, in their parents'
    /// order.
    fn expand(&mut self, step: u32, keys: &[&[u8]]) -> Result<Vec<SweepChild>>;
    /// The weights of `keys` (`outputs` a key, in order); `last` on the
    /// sweep's last level.
    fn weights(&mut self, step: u32, last: bool, keys: &[&[u8]]) -> Result<Vec<u64>>;
}

/// A child: its parent's index in the batch, its key, its multiplier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepChild {
    pub parent: u32,
    pub key: Vec<u8>,
    pub multiplier: u64,
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

/// A list of states in increasing key order as bytes: the number of states
/// and of primes, then for each state the length of the prefix it shares
/// with the key before, the length and bytes of the rest, and its counts;
/// all varints, then the CRC-32 of everything before (4 bytes,
/// little-endian).
pub fn encode_states(states: &[SweepState], primes: usize) -> Vec<u8> {
    let mut out = Vec::new();
    varint::push(&mut out, states.len() as u128);
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
    let mut states: Vec<SweepState> = Vec::new();
    for index in 0..count {
        let previous: &[u8] = states.last().map_or(&[], |(key, _)| key);
        let shared = reader.varint("a shared prefix")?;
        let rest = reader.varint("a key's length")?;
        if shared > previous.len() as u128 || rest > reader.remaining() as u128 {
            return Err(invalid!("{label}: state {index} has a key cut short"));
        }
        let mut key = previous[..shared as usize].to_vec();
        key.extend_from_slice(reader.bytes(rest as usize, "a key")?);
        if index > 0 && key.as_slice() <= previous {
            return Err(invalid!(
                "{label}: state {index} is not after the one before"
            ));
        }
        let mut counts = Vec::with_capacity(primes.len());
        for &prime in primes {
            let count = reader.varint("a count")?;
            if count >= u128::from(prime) {
                return Err(invalid!(
                    "{label}: state {index} has a count of {count}, not below the prime {prime}"
                ));
            }
            counts.push(count as u64);
        }
        states.push((key, counts));
    }
    if reader.remaining() > 0 {
        return Err(invalid!("{label}: bytes after its {count} states"));
    }
    Ok(states)
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
    let mut level: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
    for (i, part) in parts.iter().enumerate() {
        let label = format!("sweep level {step}: the part of shard {i}");
        for (key, counts) in decode_states(part, primes, &label)? {
            let sums = level.entry(key).or_insert_with(|| vec![0; primes.len()]);
            for ((sum, count), &p) in sums.iter_mut().zip(counts).zip(primes) {
                *sum = (*sum + count) % p;
            }
        }
    }
    let mut outcome = SweepLevel {
        states: level.len() as u64,
        answer: vec![vec![0; outputs]; primes.len()],
        sent: Vec::new(),
        children: 0,
    };
    let states: Vec<(&Vec<u8>, &Vec<u64>)> = level.iter().collect();
    let mut next: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
    for chunk in states.chunks(batch) {
        control.check()?;
        let keys: Vec<&[u8]> = chunk.iter().map(|(key, _)| key.as_slice()).collect();
        let weights = model.weights(step, last, &keys)?;
        if weights.len() != outputs * keys.len() {
            return Err(invalid!(
                "sweep level {step}: {} weights for {} states of {outputs}",
                weights.len(),
                keys.len()
            ));
        }
        for ((_, counts), weights) in chunk.iter().zip(weights.chunks_exact(outputs)) {
            for ((sums, &count), &p) in outcome.answer.iter_mut().zip(*counts).zip(primes) {
                for (sum, &w) in sums.iter_mut().zip(weights) {
                    *sum = (*sum + mul_mod(count, w % p, p)) % p;
                }
            }
        }
        if last {
            continue;
        }
        for child in model.expand(step, &keys)? {
            let Some((_, counts)) = chunk.get(child.parent as usize) else {
                return Err(invalid!(
                    "sweep level {step}: a child of state {} of a batch of {}",
                    child.parent,
                    keys.len()
                ));
            };
            let sums = next
                .entry(child.key)
                .or_insert_with(|| vec![0; primes.len()]);
            for ((sum, &count), &p) in sums.iter_mut().zip(*counts).zip(primes) {
                *sum = (*sum + mul_mod(count, child.multiplier % p, p)) % p;
            }
        }
        control.add_work(keys.len() as u64);
    }
    outcome.children = next.len() as u64;
    let mut buckets: Vec<Vec<SweepState>> = vec![Vec::new(); buckets_out as usize];
    for (key, counts) in next {
        buckets[key_bucket(&key, buckets_out) as usize].push((key, counts));
    }
    outcome.sent = (buckets.into_iter())
        .map(|mut bucket| {
            bucket.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            encode_states(&bucket, primes.len())
        })
        .collect();
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use tally_example_independent_sets_sweep::IndependentRows;
    use tally_guest::Params;
    use tally_guest::sweep::{Sweep, SweepEnd, run_sweep};

    use super::*;
    use crate::Error;

    const PRIMES: [u64; 2] = [(1 << 61) - 1, 1_000_000_007];

    /// A model of the guest SDK called natively, as a module's session
    /// would call it through the sandbox.
    struct Native<S>(S);

    impl<S: Sweep> SweepModel for Native<S> {
        fn expand(&mut self, step: u32, keys: &[&[u8]]) -> Result<Vec<SweepChild>> {
            let mut children = Vec::new();
            for (parent, key) in keys.iter().enumerate() {
                let mut emit = |key: &[u8], multiplier| {
                    children.push(SweepChild {
                        parent: parent as u32,
                        key: key.to_vec(),
                        multiplier,
                    })
                };
                (self.0.expand(step, key, &mut emit)).map_err(|e| Error::Failed(e.to_string()))?;
            }
            Ok(children)
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
    fn by_level_shards(params: &str, buckets: impl Fn(u32) -> u32, batch: usize) -> Vec<Vec<u64>> {
        let model = IndependentRows::new(&Params::parse(params).unwrap()).unwrap();
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
                let shards = by_level_shards(params, |step| 1 + (step * buckets) % 4, batch);
                assert_eq!(shards, native.residues, "{params}: {buckets} {batch}");
            }
        }
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
