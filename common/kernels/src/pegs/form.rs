//! The forms of a level's lists of boards and counts in stage data and spill
//! runs: the raw form of [`PegBucket::encode`] (boards as 64-bit layouts,
//! gaps and counts varints), read for jobs planned before the compact form,
//! and the compact form (`crate::compact`), the default since.
//!
//! In the compact form a board's key is its rank: boards of `p` pegs on a
//! board of `n` holes are numbered from `sum C(n, j)` over `j < p` on, in
//! the order of their bit layouts (the colex order of their peg sets, the
//! holes numbered in layout order), so every key is below `2^n` and the
//! boards of a level, all of one peg count, lie in a range of `C(n, p)`
//! keys. A bucket's boards are spread over that range, so the gap between
//! two of them is about `C(n, p)` over their number: on the French board's
//! widest levels a tenth of the raw layout's gap (a diamond board's raw
//! layout is sparser still), a byte or two less per board.

use super::levels::{PegBucket, StageBucket};
use crate::compact::{ChunkWriter, ListStream, encode_list};
use crate::spill::Source;
use crate::{Result, invalid};

/// The form of a job's level lists, fixed when the job is planned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LevelForm {
    /// [`PegBucket::encode`]'s: jobs planned before the compact form.
    #[default]
    Raw,
    /// Ranks and counts in checksummed chunks (`crate::compact`).
    Compact,
}

/// Ranks of boards of a board shape, and back.
pub struct BoardRanks {
    holes: u32,
    /// The index of a hole among the holes, by its bit.
    index_of_bit: [u8; 64],
    /// The bit of the hole of each index.
    bit_of_index: [u8; 64],
    /// `by_pegs[k][n]` is C(n, k), for `n, k <= 64` (all fit in a `u64`): a
    /// row per peg count, read along the holes.
    by_pegs: Box<[[u64; 65]; 65]>,
    /// The first key of the boards of each peg count.
    first_key: [u128; 66],
    /// The patterns of the lowest [`LOW_HOLES`] holes (bit `i` the hole of
    /// index `i`), by peg count and then in increasing order, so that the
    /// one of `pegs` pegs and colex rank `r` is `low_patterns[low_first[pegs]
    /// + r]`.
    low_patterns: Vec<u16>,
    low_first: [u32; LOW_HOLES + 2],
    /// The layout bits of the low byte and the high byte of a pattern.
    low_layout: Box<[[u64; 256]; 2]>,
}

impl BoardRanks {
    /// Ranks for boards whose pegs lie in `hole_mask`.
    pub fn new(hole_mask: u64) -> BoardRanks {
        let mut binomial = Box::new([[0u64; 65]; 65]);
        for n in 0..=64 {
            binomial[n][0] = 1;
            for k in 1..=n {
                binomial[n][k] = binomial[n - 1][k - 1].saturating_add(binomial[n - 1][k]);
            }
        }
        let mut by_pegs = Box::new([[0u64; 65]; 65]);
        for (n, row) in binomial.iter().enumerate() {
            for (k, &value) in row.iter().enumerate() {
                by_pegs[k][n] = value;
            }
        }
        let mut index_of_bit = [0; 64];
        let mut bit_of_index = [0; 64];
        let mut holes = 0;
        for (bit, index) in index_of_bit.iter_mut().enumerate() {
            if hole_mask >> bit & 1 == 1 {
                *index = holes as u8;
                bit_of_index[holes] = bit as u8;
                holes += 1;
            }
        }
        let mut first_key = [0u128; 66];
        for pegs in 0..=holes {
            first_key[pegs + 1] = first_key[pegs] + u128::from(binomial[holes][pegs]);
        }
        for key in first_key.iter_mut().skip(holes + 2) {
            *key = u128::MAX;
        }
        let split = LOW_HOLES.min(holes);
        let mut low_first = [0u32; LOW_HOLES + 2];
        for pegs in 0..=split {
            low_first[pegs + 1] = low_first[pegs] + binomial[split][pegs] as u32;
        }
        let mut low_patterns = vec![0u16; 1 << split];
        let mut next = low_first;
        for pattern in 0..1u32 << split {
            let pegs = pattern.count_ones() as usize;
            low_patterns[next[pegs] as usize] = pattern as u16;
            next[pegs] += 1;
        }
        let mut low_layout = Box::new([[0u64; 256]; 2]);
        for (half, table) in low_layout.iter_mut().enumerate() {
            for (byte, bits) in table.iter_mut().enumerate() {
                for i in (0..8).filter(|i| byte >> i & 1 == 1) {
                    let index = 8 * half + i;
                    if index < split {
                        *bits |= 1 << bit_of_index[index];
                    }
                }
            }
        }
        BoardRanks {
            holes: holes as u32,
            index_of_bit,
            bit_of_index,
            by_pegs,
            first_key,
            low_patterns,
            low_first,
            low_layout,
        }
    }

    /// The key of `board`, whose pegs lie in the hole mask.
    #[inline]
    pub fn rank(&self, board: u64) -> u128 {
        let mut rank = 0u64;
        let mut rest = board;
        let mut i = 1;
        while rest != 0 {
            let hole = self.index_of_bit[rest.trailing_zeros() as usize] as usize;
            rank += self.by_pegs[i][hole];
            rest &= rest - 1;
            i += 1;
        }
        self.first_key[board.count_ones() as usize] + u128::from(rank)
    }

    /// The board of `key`, if it is the key of one.
    #[inline]
    pub fn board(&self, key: u128) -> Option<u64> {
        self.board_near(key, &mut NearKeys::default())
    }

    /// [`BoardRanks::board`] for keys read in increasing order: `near`
    /// remembers the pegs of the previous key on the holes above the lowest
    /// [`LOW_HOLES`], which the next key keeps while it stays in their
    /// block of keys (the gaps of a level's keys are far smaller than a
    /// block), so only the low holes are worked out again.
    #[inline]
    pub fn board_near(&self, key: u128, near: &mut NearKeys) -> Option<u64> {
        let split = LOW_HOLES.min(self.holes as usize);
        if key >= near.base && key - near.base < u128::from(near.len) {
            let low = self.low_board(split, near.low_pegs, (key - near.base) as u64);
            return Some(near.high | low);
        }
        if key >= self.first_key[self.holes as usize + 1] {
            return None;
        }
        let pegs = self.first_key[1..].partition_point(|&first| first <= key);
        let mut rank = (key - self.first_key[pegs]) as u64;
        // Colex order, from the top hole down: a hole holds the i-th peg of
        // the i left when C(hole, i) <= the rank left.
        let mut high = 0u64;
        let mut left = pegs;
        for hole in (split..self.holes as usize).rev() {
            if left > 0 && self.by_pegs[left][hole] <= rank {
                rank -= self.by_pegs[left][hole];
                high |= 1 << self.bit_of_index[hole];
                left -= 1;
            }
        }
        // The keys whose pegs above the split are these: C(split, left) of
        // them, from `key - rank` on.
        *near = NearKeys {
            base: key - u128::from(rank),
            len: self.by_pegs[left][split],
            high,
            low_pegs: left,
        };
        Some(high | self.low_board(split, left, rank))
    }

    /// The board of the holes below `split` (the lowest [`LOW_HOLES`])
    /// holding `pegs` pegs of colex rank `rank` among them (below
    /// `C(split, pegs)`): looked up, as the choices of a scan would be as
    /// good as random.
    #[inline]
    fn low_board(&self, split: usize, pegs: usize, rank: u64) -> u64 {
        debug_assert!(split == LOW_HOLES.min(self.holes as usize));
        let pattern = self.low_patterns[self.low_first[pegs] as usize + rank as usize];
        let [low, high] = pattern.to_le_bytes();
        self.low_layout[0][usize::from(low)] | self.low_layout[1][usize::from(high)]
    }
}

/// The holes [`BoardRanks::board_near`] works out again from key to key:
/// blocks of up to C(16, 8) = 12,870 keys, more than the gap between two
/// keys of a level nearly always.
const LOW_HOLES: usize = 16;

/// The previous key's block for [`BoardRanks::board_near`] (empty at first).
#[derive(Clone, Copy, Debug, Default)]
pub struct NearKeys {
    base: u128,
    len: u64,
    high: u64,
    low_pegs: usize,
}

impl PegBucket {
    /// The bucket's bytes in `form` (`ranks` for the compact one).
    pub fn encode_as(&self, form: LevelForm, ranks: &BoardRanks) -> Vec<u8> {
        let entries = self.boards.iter().copied().zip(self.counts.iter().copied());
        encode_entries(form, ranks, self.len(), entries)
    }

    /// Reads [`PegBucket::encode_as`]'s bytes, refusing what
    /// [`PegBucket::decode`] refuses and, in the compact form, damaged
    /// chunks; `label` names the list in errors.
    pub fn decode_as(
        bytes: &[u8],
        form: LevelForm,
        ranks: &BoardRanks,
        label: &str,
    ) -> Result<PegBucket> {
        if form == LevelForm::Raw {
            return PegBucket::decode(bytes);
        }
        let mut stream = BoardStream::new(bytes, form, ranks, label.to_string())?;
        let mut bucket = PegBucket::default();
        while let Some((board, ways)) = stream.pull()? {
            bucket.boards.push(board);
            bucket.counts.push(ways);
        }
        Ok(bucket)
    }
}

impl StageBucket {
    /// Reads [`StageBucket::encode`]'s framing of two lists in `form`;
    /// `label` names the bucket in errors.
    pub fn decode_as(
        bytes: &[u8],
        form: LevelForm,
        ranks: &BoardRanks,
        label: &str,
    ) -> Result<StageBucket> {
        let (level, joined) = StageBucket::split(bytes)?;
        Ok(StageBucket {
            level: PegBucket::decode_as(level, form, ranks, &format!("{label}: its level"))?,
            joined: PegBucket::decode_as(joined, form, ranks, &format!("{label}: its joined"))?,
        })
    }
}

/// The boards of one compact list, read as they come and checked: keys of
/// boards, nonzero counts.
pub struct BoardStream<'r, S> {
    list: ListStream<S>,
    ranks: &'r BoardRanks,
    label: String,
    index: u64,
    near: NearKeys,
}

impl<'r, S: Source> BoardStream<'r, S> {
    pub fn new(
        source: S,
        form: LevelForm,
        ranks: &'r BoardRanks,
        label: String,
    ) -> Result<BoardStream<'r, S>> {
        debug_assert_eq!(form, LevelForm::Compact);
        Ok(BoardStream {
            list: ListStream::new(source, label.clone())?,
            ranks,
            label,
            index: 0,
            near: NearKeys::default(),
        })
    }

    #[inline]
    pub fn pull(&mut self) -> Result<Option<(u64, u128)>> {
        let Some((key, ways)) = self.list.pull()? else {
            return Ok(None);
        };
        let index = self.index;
        let board = self.ranks.board_near(key, &mut self.near).ok_or_else(|| {
            invalid!(
                "{}: board {index} has key {key}, past the board's",
                self.label
            )
        })?;
        if ways == 0 {
            return Err(invalid!("{}: board {index} has a zero count", self.label));
        }
        self.index += 1;
        Ok(Some((board, ways)))
    }
}

/// [`PegBucket::encode_as`]'s bytes for the `len` boards `entries` gives,
/// in increasing order with their counts.
pub(super) fn encode_entries(
    form: LevelForm,
    ranks: &BoardRanks,
    len: usize,
    entries: impl Iterator<Item = (u64, u128)>,
) -> Vec<u8> {
    match form {
        LevelForm::Raw => super::levels::encode_raw(len, entries),
        LevelForm::Compact => encode_list(entries.map(|(board, ways)| (ranks.rank(board), ways))),
    }
}

/// A list of boards in increasing order written in `form` as they come (the
/// count, which comes first, is [`FormWriter::finish`]'s).
pub enum FormWriter<'r> {
    Raw { previous: u64, count: u128 },
    Compact(ChunkWriter, &'r BoardRanks),
}

impl<'r> FormWriter<'r> {
    pub fn new(form: LevelForm, ranks: &'r BoardRanks) -> FormWriter<'r> {
        match form {
            LevelForm::Raw => FormWriter::Raw {
                previous: 0,
                count: 0,
            },
            LevelForm::Compact => FormWriter::Compact(ChunkWriter::new(), ranks),
        }
    }

    /// Appends `board` (above the previous one) with its count to `out`.
    #[inline]
    pub fn push(&mut self, board: u64, ways: u128, out: &mut Vec<u8>) {
        match self {
            FormWriter::Raw { previous, count } => {
                crate::varint::push(out, u128::from(board - *previous));
                crate::varint::push(out, ways);
                *previous = board;
                *count += 1;
            }
            FormWriter::Compact(writer, ranks) => writer.push(ranks.rank(board), ways, out),
        }
    }

    /// Writes what is left to `out`: the boards written.
    pub fn finish(self, out: &mut Vec<u8>) -> u128 {
        match self {
            FormWriter::Raw { count, .. } => count,
            FormWriter::Compact(writer, _) => writer.finish(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pegs::{BoardShape, PegGame};
    use crate::test_rng::Rng;

    #[test]
    fn ranks_number_the_boards_of_each_peg_count_in_layout_order() {
        for shape in [
            BoardShape::Triangle(5),
            BoardShape::English,
            BoardShape::Diamond,
        ] {
            let game = PegGame::new(shape, None, None).unwrap();
            let mask = game.hole_mask();
            let ranks = BoardRanks::new(mask);
            let holes = mask.count_ones();
            let mut rng = Rng::new(u64::from(holes));
            let mut boards: Vec<u64> = (0..3000)
                .map(|_| rng.next_u64() & mask & rng.next_u64())
                .chain([0, mask])
                .collect();
            boards.sort_unstable_by_key(|&b| (b.count_ones(), b));
            boards.dedup();
            let keys: Vec<u128> = boards.iter().map(|&b| ranks.rank(b)).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "{shape:?}");
            assert_eq!(keys[0], 0);
            assert_eq!(*keys.last().unwrap(), (1u128 << holes) - 1);
            let mut near = NearKeys::default();
            for (&board, &key) in boards.iter().zip(&keys) {
                assert_eq!(ranks.board(key), Some(board));
                assert_eq!(ranks.board_near(key, &mut near), Some(board), "{shape:?}");
            }
            // Keys close together, as a level's are: each block's first,
            // inner and last keys, read in order with the block remembered.
            let mut near = NearKeys::default();
            let mut key = ranks.rank(mask >> (holes / 2) & mask);
            let mut read = 0;
            for _ in 0..20_000 {
                let Some(board) = ranks.board_near(key, &mut near) else {
                    break;
                };
                assert_eq!(ranks.board(key), Some(board), "{shape:?} key {key}");
                assert_eq!(ranks.rank(board), key);
                read += 1;
                key += 1 + u128::from(rng.below(3u64));
            }
            assert!(read > 1000, "{shape:?}: {read} keys");
            assert_eq!(ranks.board(1 << holes), None);
        }
        // Every board of the triangle of side 4, in order: keys 0 to 2^10 - 1.
        let mask = PegGame::new(BoardShape::Triangle(4), None, None)
            .unwrap()
            .hole_mask();
        let ranks = BoardRanks::new(mask);
        let mut all: Vec<u64> = (0..1u64 << 10)
            .map(|i| {
                let (mut board, mut rest) = (0, mask);
                for bit in 0..10 {
                    let low = rest & rest.wrapping_neg();
                    rest ^= low;
                    board |= low * (i >> bit & 1);
                }
                board
            })
            .collect();
        all.sort_unstable_by_key(|&b| (b.count_ones(), b));
        for (key, &board) in all.iter().enumerate() {
            assert_eq!(ranks.rank(board), key as u128);
        }
    }
}
