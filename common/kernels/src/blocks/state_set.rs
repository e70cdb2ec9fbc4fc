//! A set of states for one layer step of the single-process search: open
//! addressing with linear probing in a power-of-two table at most half full.
//! `u128::MAX` marks a free slot; no configuration has that value (every
//! puzzle has an empty cell, whose field is 0), so it is never stored.

const FREE: u128 = u128::MAX;

pub(crate) struct StateSet {
    slots: Vec<u128>,
    /// Shift taking a 64-bit hash to a slot index.
    shift: u32,
    len: usize,
}

impl StateSet {
    /// An empty set that holds `expected` states without growing.
    pub(crate) fn with_capacity(expected: usize) -> StateSet {
        let slots = (expected.max(8) * 2).next_power_of_two();
        StateSet {
            slots: vec![FREE; slots],
            shift: 64 - slots.trailing_zeros(),
            len: 0,
        }
    }

    #[inline]
    fn home(&self, state: u128) -> usize {
        let folded = (state as u64) ^ ((state >> 64) as u64).rotate_left(29);
        (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    pub(crate) fn contains(&self, state: u128) -> bool {
        let mask = self.slots.len() - 1;
        let mut i = self.home(state);
        loop {
            match self.slots[i] {
                s if s == state => return state != FREE,
                FREE => return false,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Adds `state`; true if it was not there yet.
    #[inline]
    pub(crate) fn insert(&mut self, state: u128) -> bool {
        if state == FREE {
            return false;
        }
        if 2 * (self.len + 1) > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(state);
        loop {
            match self.slots[i] {
                s if s == state => return false,
                FREE => {
                    self.slots[i] = state;
                    self.len += 1;
                    return true;
                }
                _ => i = (i + 1) & mask,
            }
        }
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        *self = StateSet::with_capacity(old.len());
        for state in old.into_iter().filter(|&s| s != FREE) {
            self.insert(state);
        }
    }
}
