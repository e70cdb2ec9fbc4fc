//! A sweep's level lists read and written as streams: a level shard merges
//! the parts it is sent without decoding them whole, and its children's
//! sums spill as sorted runs when they pass its memory share.

use crate::spill::{Source, Spill, VarintStream, WRITE_CHUNK};
use crate::{Error, Result, invalid, varint};

use super::{COMPACT_FORM, FORM_MARK, LONG_TAIL, MAX_LIST_STATES};

/// The CRC-32 of any bytes followed by their own CRC-32 (little-endian): a
/// list's checksum is checked by hashing the list and its checksum alike as
/// they stream past, with no look-ahead for where the list ends.
const CRC_RESIDUE: u32 = 0x2144_df1c;

/// A source that hashes the bytes it gives.
struct Hashed<S> {
    source: S,
    hasher: crc32fast::Hasher,
}

impl<S: Source> Source for Hashed<S> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = self.source.fill(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// An [`super::encode_states`] list read a state at a time from a
/// [`Source`], held to what [`super::decode_flat`] holds a list to: its
/// checksum (at its end), its length, increasing keys, counts below their
/// primes; and keys of at most `key_limit` bytes.
pub struct ListStream<'p, S> {
    stream: VarintStream<Hashed<S>>,
    primes: &'p [u64],
    label: String,
    key_limit: usize,
    /// Its states are in the compact form (see `super::push_state`), not
    /// the raw form of an older release.
    compact: bool,
    count: u128,
    read: u128,
    key: Vec<u8>,
    /// The key's first 8 bytes (see `super::prefix`): most keys are told
    /// apart by it without a byte-wise comparison.
    head: u64,
    tail: Vec<u8>,
    counts: Vec<u64>,
}

impl<'p, S: Source> ListStream<'p, S> {
    /// The list in `source`, its head read; `label` names it in errors.
    pub fn new(
        source: S,
        primes: &'p [u64],
        key_limit: usize,
        label: String,
    ) -> Result<ListStream<'p, S>> {
        let hashed = Hashed {
            source,
            hasher: crc32fast::Hasher::new(),
        };
        let mut list = ListStream {
            stream: VarintStream::new(hashed, "a sweep level list"),
            primes,
            label,
            key_limit,
            compact: false,
            count: 0,
            read: 0,
            key: Vec::new(),
            head: 0,
            tail: Vec::new(),
            counts: vec![0; primes.len()],
        };
        list.count = list.varint("the state count")?;
        if list.count > MAX_LIST_STATES {
            return Err(list.refused(format!("{} states, past {MAX_LIST_STATES}", list.count)));
        }
        let mut listed = list.varint("the prime count")?;
        if listed == FORM_MARK {
            let form = list.varint("the list's form")?;
            if form != COMPACT_FORM {
                return Err(list.refused(format!(
                    "a list of form {form}, which this release does not know"
                )));
            }
            list.compact = true;
            listed = list.varint("the prime count")?;
        }
        if listed != primes.len() as u128 {
            return Err(list.refused(format!(
                "counts modulo {listed} primes, the job has {}",
                primes.len()
            )));
        }
        Ok(list)
    }

    /// The states the list says it holds.
    pub fn count(&self) -> u128 {
        self.count
    }

    fn refused(&self, what: String) -> Error {
        invalid!("{}: {what}", self.label)
    }

    /// A stream error, with the list named.
    fn named(&self, error: Error) -> Error {
        match error {
            Error::InvalidArgument(what) => self.refused(what),
            other => other,
        }
    }

    fn varint(&mut self, what: &str) -> Result<u128> {
        self.stream.varint(what).map_err(|e| self.named(e))
    }

    /// Reads the next state ([`Self::key`] and [`Self::counts`] hold it);
    /// false past the last, once the checksum and the end are checked.
    pub fn advance(&mut self) -> Result<bool> {
        if self.read == self.count {
            return self.finish().map(|()| false);
        }
        let index = self.read;
        let (shared, rest) = match self.compact {
            true => {
                let head = self.varint("a key's lengths")?;
                let (shared, mut rest) = (head >> 4, head & 15);
                if rest == LONG_TAIL as u128 {
                    rest = rest.saturating_add(self.varint("a key's length")?);
                }
                (shared, rest)
            }
            false => (
                self.varint("a shared prefix")?,
                self.varint("a key's length")?,
            ),
        };
        if shared > self.key.len() as u128 || shared.saturating_add(rest) > self.key_limit as u128 {
            return Err(self.refused(format!(
                "state {index} has a key cut short or past {} bytes",
                self.key_limit
            )));
        }
        let shared = shared as usize;
        self.tail.resize(rest as usize, 0);
        let read = self.stream.read_exact(&mut self.tail);
        read.map_err(|e| self.named(e))?;
        // The keys agree up to `shared`: the new one is after the one
        // before when its tail is after the one before's.
        if index > 0 && self.tail.as_slice() <= &self.key[shared..] {
            return Err(self.refused(format!("state {index} is not after the one before")));
        }
        self.key.truncate(shared);
        self.key.extend_from_slice(&self.tail);
        self.head = super::prefix(&self.key);
        match self.compact {
            true => self.compact_counts(index)?,
            false => {
                for i in 0..self.primes.len() {
                    let count = self.varint("a count")?;
                    self.counts[i] = self.residue(index, count, i)?;
                }
            }
        }
        self.read += 1;
        Ok(true)
    }

    /// The counts of a state in the compact form: the first residue, and
    /// the others when they differ from it.
    fn compact_counts(&mut self, index: u128) -> Result<()> {
        let tag = self.varint("a count")?;
        let (first, differ) = (tag >> 1, tag & 1 == 1);
        for i in 0..self.primes.len() {
            let count = match (i, differ) {
                (0, _) | (_, false) => first,
                (_, true) => self.varint("a count")?,
            };
            self.counts[i] = self.residue(index, count, i)?;
        }
        Ok(())
    }

    /// `count` as a residue of prime `i`, refused when it is not one.
    fn residue(&self, index: u128, count: u128, i: usize) -> Result<u64> {
        let prime = self.primes[i];
        if count >= u128::from(prime) {
            return Err(self.refused(format!(
                "state {index} has a count of {count}, not below the prime {prime}"
            )));
        }
        Ok(count as u64)
    }

    /// The checksum after the last state, and nothing after it.
    fn finish(&mut self) -> Result<()> {
        let mut crc = [0u8; 4];
        let read = self.stream.read_exact(&mut crc);
        read.map_err(|e| self.named(e))?;
        if !self.stream.at_end()? {
            return Err(self.refused(format!("bytes after its {} states", self.count)));
        }
        if self.stream.source().hasher.clone().finalize() != CRC_RESIDUE {
            return Err(self.refused("damaged (its checksum fails)".into()));
        }
        Ok(())
    }

    /// The key of the state [`Self::advance`] read.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Whether its key comes before `other`'s: by their first 8 bytes, then
    /// (rarely) by the whole keys. The order is the keys' own, since a key's
    /// first 8 bytes are zero past its end.
    fn before(&self, other: &Self) -> bool {
        self.head < other.head || (self.head == other.head && self.key < other.key)
    }

    /// Whether its key is `key`, whose first 8 bytes are `head`.
    fn holds(&self, head: u64, key: &[u8]) -> bool {
        self.head == head && self.key.len() == key.len() && (key.len() <= 8 || self.key == key)
    }

    /// Its counts, one a prime.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }
}

/// Lists merged into one in increasing key order, the counts of equal keys
/// summed modulo their primes: the parts with a state to give kept in a
/// binary heap by their keys (a merge of a spill's runs may have many).
pub struct MergedLists<'p, S> {
    parts: Vec<ListStream<'p, S>>,
    /// The parts with a state read and not yet merged, least key first.
    heap: Vec<usize>,
    key: Vec<u8>,
    counts: Vec<u64>,
}

impl<'p, S: Source> MergedLists<'p, S> {
    pub fn new(mut parts: Vec<ListStream<'p, S>>) -> Result<MergedLists<'p, S>> {
        let primes = parts.first().map_or(0, |p| p.primes.len());
        let mut live = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter_mut().enumerate() {
            if part.advance()? {
                live.push(i);
            }
        }
        let mut merged = MergedLists {
            parts,
            heap: Vec::with_capacity(live.len()),
            key: Vec::new(),
            counts: vec![0; primes],
        };
        for part in live {
            merged.heap.push(part);
            merged.sift_up(merged.heap.len() - 1);
        }
        Ok(merged)
    }

    /// The states the parts say they hold, at most the merge's.
    pub fn listed(&self) -> u128 {
        self.parts.iter().map(ListStream::count).sum()
    }

    fn before(&self, a: usize, b: usize) -> bool {
        self.parts[self.heap[a]].before(&self.parts[self.heap[b]])
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if !self.before(at, parent) {
                break;
            }
            self.heap.swap(at, parent);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let left = 2 * at + 1;
            if left >= self.heap.len() {
                break;
            }
            let right = left + 1;
            let least = match right < self.heap.len() && self.before(right, left) {
                true => right,
                false => left,
            };
            if !self.before(least, at) {
                break;
            }
            self.heap.swap(at, least);
            at = least;
        }
    }

    /// Moves the least part on to its next state, or out of the heap past
    /// its last.
    fn advance_least(&mut self) -> Result<()> {
        if self.parts[self.heap[0]].advance()? {
            self.sift_down(0);
        } else {
            self.heap.swap_remove(0);
            self.sift_down(0);
        }
        Ok(())
    }

    /// The next key and its summed counts; `None` past the last (every
    /// part's checksum and end then checked).
    pub fn next_state(&mut self) -> Result<Option<(&[u8], &[u64])>> {
        let Some(&least) = self.heap.first() else {
            return Ok(None);
        };
        let part = &self.parts[least];
        let head = part.head;
        self.key.clear();
        self.key.extend_from_slice(&part.key);
        self.counts.copy_from_slice(&part.counts);
        self.advance_least()?;
        while let Some(&next) = self.heap.first() {
            let part = &self.parts[next];
            if !part.holds(head, &self.key) {
                break;
            }
            for ((sum, &count), &p) in self.counts.iter_mut().zip(&part.counts).zip(part.primes) {
                *sum = super::add_mod(*sum, count, p);
            }
            self.advance_least()?;
        }
        Ok(Some((&self.key, &self.counts)))
    }
}

/// An [`super::encode_states`] list written to the run a spill is writing
/// as its states come, in chunks: its count, which the list starts with and
/// is known only at its end, is returned instead of written (a
/// `CountedList::Spilled` of the bytes written), and its checksum, which
/// covers the count too, is the checksum of the count's bytes combined with
/// that of the rest.
pub struct ListWriter<'s> {
    spill: &'s mut dyn Spill,
    buf: Vec<u8>,
    hasher: crc32fast::Hasher,
    previous: Vec<u8>,
    count: u128,
    written: u64,
}

impl<'s> ListWriter<'s> {
    pub fn new(spill: &'s mut dyn Spill, primes: usize) -> ListWriter<'s> {
        let mut buf = Vec::with_capacity(WRITE_CHUNK + 1024);
        super::push_list_head(&mut buf, primes);
        ListWriter {
            spill,
            buf,
            hasher: crc32fast::Hasher::new(),
            previous: Vec::new(),
            count: 0,
            written: 0,
        }
    }

    /// Appends a state, its key after the one before's.
    pub fn push(&mut self, key: &[u8], counts: &[u64]) -> Result<()> {
        debug_assert!(self.count == 0 || key > self.previous.as_slice());
        let shared = super::push_state(&mut self.buf, &self.previous, key, counts);
        self.previous.truncate(shared);
        self.previous.extend_from_slice(&key[shared..]);
        self.count += 1;
        if self.buf.len() >= WRITE_CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.hasher.update(&self.buf);
        self.spill.write(&self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Ends the list: its state count and the bytes written (all of the
    /// list but the count).
    pub fn finish(mut self) -> Result<(u128, u64)> {
        self.flush()?;
        let mut head = Vec::new();
        varint::push(&mut head, self.count);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head);
        crc.combine(&self.hasher);
        self.spill.write(&crc.finalize().to_le_bytes())?;
        Ok((self.count, self.written + 4))
    }
}
