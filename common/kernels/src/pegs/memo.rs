//! The counts of the solvable boards of one layer: an open-addressing table
//! from boards to solution counts, linear probing, key and count side by side
//! in 16 bytes so that a hit costs one cache line.

use std::collections::HashMap;

use crate::cache::prefetch;

/// The key of an empty slot: a stored board always has at least two pegs.
const EMPTY: u64 = 0;
/// Stored count meaning "the count does not fit in 64 bits, see `wide`".
const WIDE: u64 = u64::MAX;
/// Fibonacci hashing: the top bits of `board * K` index the table.
const HASH_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
/// An independent mix for the filter.
const FILTER_MULTIPLIER: u64 = 0xbf58_476d_1ce4_e5b9;
/// The table doubles when it is more than 3/4 full.
const LOAD_NUMERATOR: usize = 3;
const LOAD_DENOMINATOR: usize = 4;
const MIN_BITS: u32 = 6;

#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Slot {
    board: u64,
    count: u64,
}

pub(crate) struct Memo {
    slots: Vec<Slot>,
    /// One bit per hash value of a board, set for the stored boards: most
    /// boards looked up are not stored, and the filter (16 bits per board,
    /// small enough for the L2 cache) answers those without touching `slots`.
    filter: Vec<u64>,
    filter_shift: u32,
    /// `64 - log2(slots.len())`.
    shift: u32,
    len: usize,
    /// Grow when `len` reaches this.
    limit: usize,
    /// Counts of `2^64 - 1` and more.
    wide: HashMap<u64, u128>,
}

impl Memo {
    /// An empty table with room for about `expected` boards.
    pub(crate) fn with_capacity(expected: usize) -> Memo {
        let wanted = (expected * LOAD_DENOMINATOR / LOAD_NUMERATOR + 1).next_power_of_two();
        Memo::with_bits(wanted.trailing_zeros().max(MIN_BITS))
    }

    fn with_bits(bits: u32) -> Memo {
        let capacity = 1usize << bits;
        // 16 to 21 filter bits per board at 3/8 to 3/4 load.
        let filter_bits = bits + 4;
        Memo {
            slots: vec![Slot::default(); capacity],
            filter: vec![0; 1 << (filter_bits - 6)],
            filter_shift: 64 - filter_bits,
            shift: 64 - bits,
            len: 0,
            limit: capacity / LOAD_DENOMINATOR * LOAD_NUMERATOR,
            wide: HashMap::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn home(&self, board: u64) -> usize {
        (board.wrapping_mul(HASH_MULTIPLIER) >> self.shift) as usize
    }

    #[inline(always)]
    fn filter_bit(&self, board: u64) -> (usize, u64) {
        let h = (board.wrapping_mul(FILTER_MULTIPLIER) >> self.filter_shift) as usize;
        (h >> 6, 1 << (h & 63))
    }

    /// Starts loading the filter word of `board`.
    #[inline(always)]
    pub(crate) fn prefetch_filter(&self, board: u64) {
        let (word, _) = self.filter_bit(board);
        prefetch(self.filter.as_ptr().wrapping_add(word));
    }

    /// False when `board` is certainly not stored.
    #[inline(always)]
    pub(crate) fn may_hold(&self, board: u64) -> bool {
        let (word, bit) = self.filter_bit(board);
        self.filter[word] & bit != 0
    }

    /// Starts loading the slot where the search for `board` begins.
    #[inline(always)]
    pub(crate) fn prefetch_slot(&self, board: u64) {
        prefetch(self.slots.as_ptr().wrapping_add(self.home(board)));
    }

    /// The count stored for `board`, 0 when there is none.
    #[inline]
    pub(crate) fn get(&self, board: u64) -> u128 {
        if self.may_hold(board) {
            self.probe(board)
        } else {
            0
        }
    }

    /// [`Memo::get`] without the filter.
    #[inline]
    pub(crate) fn probe(&self, board: u64) -> u128 {
        let mask = self.slots.len() - 1;
        let mut i = self.home(board);
        loop {
            let slot = self.slots[i];
            if slot.board == board {
                return if slot.count == WIDE {
                    self.wide[&board]
                } else {
                    u128::from(slot.count)
                };
            }
            if slot.board == EMPTY {
                return 0;
            }
            i = (i + 1) & mask;
        }
    }

    /// Stores the count of a board that is not in the table yet.
    pub(crate) fn insert(&mut self, board: u64, count: u128) {
        debug_assert_ne!(board, EMPTY);
        if self.len >= self.limit {
            self.grow();
        }
        let stored = match u64::try_from(count) {
            Ok(c) if c != WIDE => c,
            _ => {
                self.wide.insert(board, count);
                WIDE
            }
        };
        let mask = self.slots.len() - 1;
        let mut i = self.home(board);
        while self.slots[i].board != EMPTY {
            debug_assert_ne!(self.slots[i].board, board);
            i = (i + 1) & mask;
        }
        self.slots[i] = Slot {
            board,
            count: stored,
        };
        let (word, bit) = self.filter_bit(board);
        self.filter[word] |= bit;
        self.len += 1;
    }

    fn grow(&mut self) {
        let mut bigger = Memo::with_bits(64 - self.shift + 1);
        let mask = bigger.slots.len() - 1;
        for slot in self.slots.iter().filter(|s| s.board != EMPTY) {
            let mut i = bigger.home(slot.board);
            while bigger.slots[i].board != EMPTY {
                i = (i + 1) & mask;
            }
            bigger.slots[i] = *slot;
            let (word, bit) = bigger.filter_bit(slot.board);
            bigger.filter[word] |= bit;
        }
        bigger.len = self.len;
        bigger.wide = std::mem::take(&mut self.wide);
        *self = bigger;
    }
}
