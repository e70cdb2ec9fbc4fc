//! The set of boards of one layer, built from the children of the layer above
//! with many duplicates. Boards are spread over partitions by hash; a partition
//! collects boards in a buffer and adds them to its own small hash set a batch
//! at a time, so that the cache lines of the set, once loaded, serve several
//! inserts even when the layer holds millions of boards.

/// Partition of a board: the high word of `board * PARTITION_MULTIPLIER` scaled
/// to the number of partitions.
const PARTITION_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
/// Slot within a partition's set: a second, independent mix.
const SLOT_MULTIPLIER: u64 = 0xd6e8_feb8_6659_fd93;
/// Boards buffered per partition before they are added to its set: at least
/// this many, and at least half as many as the set has slots, so that a flush
/// touches each cache line of the set several times.
const MIN_BATCH: usize = 256;
/// A partition for about this many inserts: its set stays in the L2 cache.
const INSERTS_PER_PARTITION: usize = 1 << 15;
const MAX_PARTITIONS: usize = 1 << 12;
/// The key of an empty slot: boards in a set always have pegs.
const EMPTY: u64 = 0;

pub(crate) struct BoardSet {
    partitions: Vec<Partition>,
}

struct Partition {
    batch: Vec<u64>,
    /// Open addressing, linear probing, at most half full.
    slots: Vec<u64>,
    len: usize,
}

impl Partition {
    fn new() -> Partition {
        Partition {
            batch: Vec::with_capacity(MIN_BATCH),
            slots: vec![EMPTY; 64],
            len: 0,
        }
    }

    fn flush(&mut self) {
        for i in 0..self.batch.len() {
            let board = self.batch[i];
            if 2 * (self.len + 1) > self.slots.len() {
                self.grow();
            }
            if place(&mut self.slots, board) {
                self.len += 1;
            }
        }
        self.batch.clear();
    }

    fn grow(&mut self) {
        let doubled = vec![EMPTY; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        for board in old.into_iter().filter(|&b| b != EMPTY) {
            place(&mut self.slots, board);
        }
    }
}

/// Puts `board` into `slots` (a power of two long, not full); false when it
/// was there already.
#[inline]
fn place(slots: &mut [u64], board: u64) -> bool {
    let mask = slots.len() - 1;
    let bits = slots.len().trailing_zeros();
    let mut i = (board.wrapping_mul(SLOT_MULTIPLIER) >> (64 - bits)) as usize;
    loop {
        let slot = slots[i];
        if slot == board {
            return false;
        }
        if slot == EMPTY {
            slots[i] = board;
            return true;
        }
        i = (i + 1) & mask;
    }
}

impl BoardSet {
    /// The number of partitions for about `inserts` inserts (duplicates
    /// included).
    pub(crate) fn partitions_for(inserts: usize) -> usize {
        (inserts / INSERTS_PER_PARTITION).clamp(1, MAX_PARTITIONS)
    }

    pub(crate) fn new(partitions: usize) -> BoardSet {
        BoardSet {
            partitions: (0..partitions).map(|_| Partition::new()).collect(),
        }
    }

    #[inline]
    pub(crate) fn insert(&mut self, board: u64) {
        debug_assert_ne!(board, EMPTY);
        let n = self.partitions.len() as u128;
        let index = ((u128::from(board.wrapping_mul(PARTITION_MULTIPLIER)) * n) >> 64) as usize;
        let partition = &mut self.partitions[index];
        partition.batch.push(board);
        if partition.batch.len() >= MIN_BATCH.max(partition.slots.len() / 2) {
            partition.flush();
        }
    }

    /// The distinct boards of all `sets` (built with the same number of
    /// partitions), in an unspecified but reproducible order. Partitions are
    /// merged on up to `threads` threads.
    pub(crate) fn union(sets: Vec<BoardSet>, threads: usize) -> Vec<u64> {
        let count = sets[0].partitions.len();
        debug_assert!(sets.iter().all(|s| s.partitions.len() == count));
        // by_partition[i] holds partition i of every set.
        let mut by_partition: Vec<Vec<Partition>> = (0..count).map(|_| Vec::new()).collect();
        for set in sets {
            for (i, partition) in set.partitions.into_iter().enumerate() {
                by_partition[i].push(partition);
            }
        }
        let merge_group = |group: Vec<Vec<Partition>>| -> Vec<u64> {
            let mut boards = Vec::new();
            for copies in group {
                let mut copies = copies.into_iter();
                let mut merged = copies.next().expect("one copy per set");
                for other in copies {
                    merged
                        .batch
                        .extend(other.slots.into_iter().filter(|&b| b != EMPTY));
                    merged.batch.extend(other.batch);
                    merged.flush();
                }
                merged.flush();
                boards.extend(merged.slots.into_iter().filter(|&b| b != EMPTY));
            }
            boards
        };
        if threads <= 1 || count < threads {
            return merge_group(by_partition);
        }
        let share = count.div_ceil(threads);
        let mut groups = Vec::new();
        while !by_partition.is_empty() {
            let rest = by_partition.split_off(share.min(by_partition.len()));
            groups.push(std::mem::replace(&mut by_partition, rest));
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = groups
                .into_iter()
                .map(|group| scope.spawn(move || merge_group(group)))
                .collect();
            let mut boards = Vec::new();
            for handle in handles {
                boards.extend(handle.join().expect("pegs merge thread panicked"));
            }
            boards
        })
    }
}
