//! N queens: the number of ways to place n non-attacking queens on an n x n
//! board (OEIS A000170), by depth-first search over rows with the occupied
//! columns and diagonals as bit masks.
//!
//! A placement is cut into a prefix (the columns of the queens of the first few
//! rows) and its completions. The mirror image of a solution in the board's
//! vertical axis is another solution whose first queen stands in the mirrored
//! column, so only prefixes whose first queen is in the left half (or the
//! middle column of an odd board) are searched; those in the left half count
//! twice.

#[cfg(test)]
mod tests;

use crate::{Control, Result, invalid};

/// Largest board: masks are `u32` and the counts stay far below `u64::MAX`.
pub const MAX_N: u32 = 24;

pub fn validate(n: u32) -> Result<()> {
    if !(1..=MAX_N).contains(&n) {
        return Err(invalid!("n must be between 1 and {MAX_N}, got {n}"));
    }
    Ok(())
}

/// The columns of the queens of the first rows, one per row, non-attacking.
pub type Prefix = Vec<u8>;

/// Rows a prefix of an n x n board fixes so that there are at least `wanted`
/// prefixes (fewer rows on small boards, never all of them).
pub fn prefix_depth(n: u32, wanted: usize) -> u32 {
    let mut depth = 1;
    while depth + 1 < n && prefixes(n, depth).len() < wanted {
        depth += 1;
    }
    depth.min(n)
}

/// Every non-attacking placement of the first `depth` rows whose first queen
/// stands in the left half or the middle column, in lexicographic order.
pub fn prefixes(n: u32, depth: u32) -> Vec<Prefix> {
    let mut out = Vec::new();
    let mut current = Vec::with_capacity(depth as usize);
    let first_columns = n.div_ceil(2);
    for column in 0..first_columns {
        current.push(column as u8);
        extend(n, depth, &mut current, &mut out);
        current.pop();
    }
    out
}

fn extend(n: u32, depth: u32, current: &mut Prefix, out: &mut Vec<Prefix>) {
    if current.len() as u32 == depth {
        out.push(current.clone());
        return;
    }
    let Ok(board) = Board::place(n, current) else {
        return;
    };
    let mut free = board.free();
    while free != 0 {
        let bit = free & free.wrapping_neg();
        free ^= bit;
        current.push(bit.trailing_zeros() as u8);
        extend(n, depth, current, out);
        current.pop();
    }
}

/// How many times the completions of `prefix` count: twice when its first
/// queen is left of the middle (its mirror image is not searched), else once.
pub fn prefix_weight(n: u32, prefix: &[u8]) -> u64 {
    match prefix.first() {
        Some(&c) if 2 * (c as u32) + 1 < n => 2,
        _ => 1,
    }
}

/// The occupied columns and diagonals after some rows, seen from the next row.
#[derive(Clone, Copy, Debug)]
struct Board {
    all: u32,
    columns: u32,
    /// Attacked squares of the next row along the two diagonal directions.
    left: u32,
    right: u32,
    row: u32,
}

impl Board {
    fn empty(n: u32) -> Board {
        Board {
            all: if n == 32 { u32::MAX } else { (1 << n) - 1 },
            columns: 0,
            left: 0,
            right: 0,
            row: 0,
        }
    }

    /// The board after the queens of `prefix`; refuses attacking or
    /// off-board placements.
    fn place(n: u32, prefix: &[u8]) -> Result<Board> {
        let mut board = Board::empty(n);
        for &column in prefix {
            let bit = 1u32
                .checked_shl(column as u32)
                .filter(|b| b & board.free() != 0)
                .ok_or_else(|| invalid!("prefix {prefix:?} is not a placement on {n} x {n}"))?;
            board = board.with(bit);
        }
        Ok(board)
    }

    fn free(&self) -> u32 {
        self.all & !(self.columns | self.left | self.right)
    }

    fn with(&self, bit: u32) -> Board {
        Board {
            all: self.all,
            columns: self.columns | bit,
            left: ((self.left | bit) << 1) & self.all,
            right: (self.right | bit) >> 1,
            row: self.row + 1,
        }
    }

    /// The number of ways to fill the remaining rows.
    fn completions(&self, n: u32) -> u64 {
        if self.row == n {
            return 1;
        }
        let mut free = self.free();
        let mut count = 0;
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free ^= bit;
            count += self.with(bit).completions(n);
        }
        count
    }
}

/// The solutions extending `prefix`, weighted by [`prefix_weight`].
pub fn count_prefix(n: u32, prefix: &[u8]) -> Result<u64> {
    validate(n)?;
    if prefix.is_empty() || prefix.len() as u32 > n {
        return Err(invalid!(
            "a prefix fixes 1 to {n} rows, got {}",
            prefix.len()
        ));
    }
    let board = Board::place(n, prefix)?;
    // The completions are leaves of the search counted one by one (far from
    // 2^63 in any run that ends); the mirror weight is checked all the same.
    board
        .completions(n)
        .checked_mul(prefix_weight(n, prefix))
        .ok_or_else(|| crate::Error::Internal("queens count overflows".into()))
}

/// The number of solutions, over `threads` threads (the kernel's own driver:
/// one task per placement of the first two rows, without the runner).
pub fn count(n: u32, threads: usize, control: &Control) -> Result<u64> {
    validate(n)?;
    let tasks = prefixes(n, n.min(2));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let total = std::sync::atomic::AtomicU64::new(0);
    let work = || -> Result<()> {
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(prefix) = tasks.get(i) else {
                return Ok(());
            };
            control.check()?;
            let found = count_prefix(n, prefix)?;
            total.fetch_add(found, std::sync::atomic::Ordering::Relaxed);
        }
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.clamp(1, tasks.len().max(1)))
            .map(|_| scope.spawn(work))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(crate::Error::Internal("a queens thread panicked".into())))
        })
    })?;
    Ok(total.into_inner())
}
