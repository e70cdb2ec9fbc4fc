//! Binomials, 2-bit distance arrays over the dense board index, and a small
//! hasher for maps keyed by board indices.

use std::hash::{BuildHasherDefault, Hasher};

use crate::cache::prefetch;
use crate::{Error, Result};

/// Binomials C(p, j) for p, j <= 25.
pub(crate) type BinomTable = [[u64; 26]; 26];

pub(crate) fn binomials() -> BinomTable {
    let mut b = [[0u64; 26]; 26];
    for p in 0..26 {
        b[p][0] = 1;
        for j in 1..=p {
            b[p][j] = b[p - 1][j - 1] + if j < p { b[p - 1][j] } else { 0 };
        }
    }
    b
}

/// Number of boards (colourings) with the empty square anywhere on `cells` cells
/// and `counts[1..=3]` tiles of the three colours: `cells * multinomial`.
pub(crate) fn board_total(cells: usize, counts: &[u32; 4]) -> u128 {
    let b = binomials();
    let t = cells - 1;
    let (k1, k2) = (counts[1] as usize, counts[2] as usize);
    cells as u128 * u128::from(b[t][k1]) * u128::from(b[t - k1][k2])
}

/// Value of an unvisited entry of a [`Dist3`].
pub(crate) const UNSEEN: u8 = 3;

/// Breadth-first distances modulo 3, two bits per board; 3 = not reached.
///
/// The board graph is bipartite (every move changes the parity of the empty
/// cell), so the two neighbours' distances `d - 1` and `d + 1` of a board at
/// distance `d` differ modulo 3: that is all the shortest-path tests need.
#[derive(Clone, Debug)]
pub(crate) struct Dist3 {
    words: Vec<u64>,
}

impl Dist3 {
    pub(crate) fn new(len: u64) -> Result<Dist3> {
        let words = usize::try_from(len.div_ceil(32))
            .map_err(|_| Error::InvalidArgument("board space too large".into()))?;
        let mut v = Vec::new();
        v.try_reserve_exact(words).map_err(|_| {
            Error::InvalidArgument(format!(
                "cannot allocate {} bytes for the distances of {len} boards",
                words * 8
            ))
        })?;
        v.resize(words, u64::MAX);
        Ok(Dist3 { words: v })
    }

    #[inline]
    pub(crate) fn get(&self, i: u64) -> u8 {
        ((self.words[(i >> 5) as usize] >> ((i & 31) * 2)) & 3) as u8
    }

    /// Asks the processor to bring entry `i` into the cache (no effect on other
    /// targets).
    #[inline]
    pub(crate) fn prefetch(&self, i: u64) {
        if let Some(word) = self.words.get((i >> 5) as usize) {
            prefetch(word);
        }
    }

    /// Sets entry `i` to `value` (0..=2) if it is unseen; returns whether it was.
    /// Branch-free: the search keeps or drops the board with the result.
    #[inline]
    pub(crate) fn visit(&mut self, i: u64, value: u8) -> bool {
        let word = &mut self.words[(i >> 5) as usize];
        let shift = (i & 31) * 2;
        let unseen = u64::from((*word >> shift) & 3 == u64::from(UNSEEN));
        *word ^= (unseen * u64::from(UNSEEN ^ value)) << shift;
        unseen == 1
    }
}

/// A fast hasher for `u64` keys (board indices): the splitmix64 finaliser.
#[derive(Default, Clone, Copy)]
pub(crate) struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, x: u64) {
        let mut z = x ^ self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.0 = z ^ (z >> 31);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type IndexMap<V> = std::collections::HashMap<u64, V, BuildHasherDefault<IndexHasher>>;
