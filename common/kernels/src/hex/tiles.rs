//! The order of a points pass's vector: the states by their occupancy pattern
//! (a "tile" of the vector), inside a pattern by state index.
//!
//! Every block orders a group's states by their whole occupancy pattern, then
//! by index (see `graph::group_states`), so a group of any block is a set of
//! whole tiles, each in the same order as in the vector: a block's group is
//! read and written back tile by tile, one contiguous copy each, whatever the
//! block. The first block's columns are the low bits of a pattern, so its
//! groups are contiguous runs of tiles: it works on the vector in place. No
//! per-state map between the blocks' orders is needed.

use std::ops::Range;

use super::HexGraph;
use super::graph::Block;

pub(crate) struct Tiles {
    /// Where the states of each occupancy pattern start in the vector, in
    /// increasing pattern order (`2^side + 1` entries).
    start: Vec<u32>,
    /// Per block, per group: the occupancy outside the block's columns that
    /// its states share.
    keys: Vec<Vec<usize>>,
}

impl Tiles {
    pub fn new(graph: &HexGraph) -> Tiles {
        let side = graph.side as usize;
        let pattern = |i: u32| graph.masks[i as usize] as u32 as usize;
        let mut start = vec![0u32; (1 << side) + 1];
        for &mask in &graph.masks {
            start[mask as u32 as usize + 1] += 1;
        }
        for p in 1..start.len() {
            start[p] += start[p - 1];
        }
        let keys = graph
            .blocks
            .iter()
            .map(|block| {
                let window = window(block);
                block.group_offsets[..block.groups()]
                    .iter()
                    .map(|&first| pattern(block.members[first as usize]) & !window)
                    .collect()
            })
            .collect();
        Tiles { start, keys }
    }

    /// Tiles as [`Tiles::starts`] and [`Tiles::keys`] gave them, unchecked:
    /// `graph_file` checks what it decodes before it hands them to a pass.
    pub fn from_parts(start: Vec<u32>, keys: Vec<Vec<usize>>) -> Tiles {
        Tiles { start, keys }
    }

    /// Where each occupancy pattern's states start in the vector, and the end.
    pub fn starts(&self) -> &[u32] {
        &self.start
    }

    /// Per block, per group: [`Tiles::key`].
    pub fn keys(&self) -> &[Vec<usize>] {
        &self.keys
    }

    /// The occupancy outside block `b`'s columns shared by its group `g`.
    pub fn key(&self, b: usize, g: usize) -> usize {
        self.keys[b][g]
    }

    /// The vector's entries of the first block's group `g`, in the order of
    /// the block's positions `group_offsets[g]..group_offsets[g + 1]`.
    pub fn first_block_group(&self, block: &Block, g: usize) -> Range<usize> {
        debug_assert_eq!(block.first_col, 0);
        let key = self.keys[0][g];
        self.start[key] as usize..self.start[key + (1 << block.cols.len())] as usize
    }

    /// The tiles of a group whose states share the occupancy `key` outside
    /// `block`'s columns: for each chunk `m` of the group (its occupancy of the
    /// block's columns), the chunk's positions minus `first` (positions as
    /// `chunks`, which starts at the group's first chunk, gives them) and the
    /// chunk's entries of the vector.
    pub fn group_tiles<'a>(
        &'a self,
        block: &'a Block,
        chunks: &'a [u32],
        key: usize,
        first: usize,
    ) -> impl Iterator<Item = (Range<usize>, Range<usize>)> + 'a {
        (0..1usize << block.cols.len()).map(move |m| {
            let p = key | m << block.first_col;
            let positions = chunks[m] as usize - first..chunks[m + 1] as usize - first;
            let tile = self.start[p] as usize..self.start[p + 1] as usize;
            debug_assert_eq!(positions.len(), tile.len());
            (positions, tile)
        })
    }
}

/// The pattern bits of a block's columns.
fn window(block: &Block) -> usize {
    ((1usize << block.cols.len()) - 1) << block.first_col
}
