//! The index of a level's children by key: an open-addressing table of
//! their places in the arena of keys, each slot beside its key's first 8
//! bytes and length, so that a probe reads the arena only for a long key
//! that matches so far. A batch of children is probed with the slots of
//! the probes a few places ahead already asked of memory: the table is
//! hundreds of megabytes, and a probe that waits for its slot alone waits
//! on memory once a child.

use crate::cache::prefetch;

/// One slot: `at` is the arena place plus one (0: empty).
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Slot {
    prefix: u64,
    len: u32,
    at: u32,
}

/// Slots at most three quarters full: a probe seldom leaves its home
/// slot's cache line (four slots a line).
const FULL_NUMERATOR: usize = 3;
const FULL_DENOMINATOR: usize = 4;
const MIN_SLOTS: usize = 16;

pub(super) struct KeyIndex {
    slots: Vec<Slot>,
    len: usize,
}

/// What [`KeyIndex::find_or_insert`] asks of the arena.
pub(super) trait Arena {
    /// Whether the key at `at` is `key` (its prefix and length already
    /// equal).
    fn holds(&self, at: u32, key: &[u8]) -> bool;
    /// The hash of the key at `at`, for a growth.
    fn hash_of(&self, at: u32) -> u64;
}

impl KeyIndex {
    /// Room for `states` keys without a growth.
    pub(super) fn with_capacity(states: usize) -> KeyIndex {
        KeyIndex {
            slots: vec![Slot::default(); slots_for(states)],
            len: 0,
        }
    }

    /// The bytes its slots take.
    pub(super) fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot>()
    }

    /// The bytes a key costs it at most: a slot, at least a quarter empty,
    /// the slots rounded up to a power of two.
    pub(super) const BYTES_A_KEY: u64 = 32;

    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        let bits = self.slots.len().trailing_zeros();
        (hash >> (64 - bits)) as usize
    }

    /// Asks memory for the home slot of `hash` before it is probed.
    #[inline(always)]
    pub(super) fn prefetch(&self, hash: u64) {
        prefetch(self.slots.as_ptr().wrapping_add(self.home(hash)));
    }

    /// The arena place of `key` (of hash `hash`, first 8 bytes `prefix`),
    /// or, when it is not there, `new_at` entered for it and `None`.
    #[inline]
    pub(super) fn find_or_insert(
        &mut self,
        hash: u64,
        prefix: u64,
        key: &[u8],
        new_at: u32,
        arena: &impl Arena,
    ) -> Option<u32> {
        let len = key.len() as u32;
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        loop {
            let slot = self.slots[i];
            if slot.at == 0 {
                break;
            }
            if slot.prefix == prefix
                && slot.len == len
                && (len <= 8 || arena.holds(slot.at - 1, key))
            {
                return Some(slot.at - 1);
            }
            i = (i + 1) & mask;
        }
        if FULL_DENOMINATOR * (self.len + 1) > FULL_NUMERATOR * self.slots.len() {
            self.grow(arena);
            return self.find_or_insert(hash, prefix, key, new_at, arena);
        }
        self.slots[i] = Slot {
            prefix,
            len,
            at: new_at + 1,
        };
        self.len += 1;
        None
    }

    fn grow(&mut self, arena: &impl Arena) {
        let doubled = vec![Slot::default(); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        let mask = self.slots.len() - 1;
        for slot in old.into_iter().filter(|s| s.at != 0) {
            let mut i = self.home(arena.hash_of(slot.at - 1));
            while self.slots[i].at != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = slot;
        }
    }
}

/// Slots for `states` keys: a power of two, at most three quarters full.
fn slots_for(states: usize) -> usize {
    (states.saturating_mul(FULL_DENOMINATOR) / FULL_NUMERATOR + 1)
        .next_power_of_two()
        .max(MIN_SLOTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys in a vector, hashed by a hash that collides often (its high
    /// bits from a few values), so probes run past other keys.
    struct Keys(Vec<Vec<u8>>);

    fn weak_hash(key: &[u8]) -> u64 {
        (key.iter().map(|&b| u64::from(b)).sum::<u64>() % 7) << 61
    }

    impl Arena for Keys {
        fn holds(&self, at: u32, key: &[u8]) -> bool {
            self.0[at as usize] == key
        }
        fn hash_of(&self, at: u32) -> u64 {
            weak_hash(&self.0[at as usize])
        }
    }

    fn head(key: &[u8]) -> u64 {
        let mut bytes = [0u8; 8];
        let len = key.len().min(8);
        bytes[..len].copy_from_slice(&key[..len]);
        u64::from_be_bytes(bytes)
    }

    /// Every key is found where it was entered, through growths, against
    /// a map; keys that share their first 8 bytes or differ only in length
    /// stay apart.
    #[test]
    fn keys_are_found_where_they_were_entered_through_growths() {
        let mut rng = crate::test_rng::Rng::new(3);
        let mut index = KeyIndex::with_capacity(1);
        let mut arena = Keys(Vec::new());
        let mut map = std::collections::HashMap::new();
        for _ in 0..20_000 {
            let len = rng.below(14) as usize;
            let key: Vec<u8> = (0..len).map(|_| rng.below(3) as u8).collect();
            let at = arena.0.len() as u32;
            let found = index.find_or_insert(weak_hash(&key), head(&key), &key, at, &arena);
            match map.get(&key) {
                Some(&known) => assert_eq!(found, Some(known), "{key:?}"),
                None => {
                    assert_eq!(found, None, "{key:?}");
                    map.insert(key.clone(), at);
                    arena.0.push(key);
                }
            }
        }
        assert!(map.len() > 1000, "{} keys", map.len());
        assert_eq!(index.len, map.len());
        assert!(4 * index.len <= 3 * index.slots.len());
    }
}
