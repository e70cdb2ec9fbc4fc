//! The frontier states of one occupancy pattern, without a search: their
//! number, their order and the rank of each, from the pattern's runs alone.
//!
//! Adjacent frontier positions hold adjacent cells, so a maximal run of
//! occupied positions is one piece, and a state is a labelling of the
//! pattern's runs. The labellings a sweep can reach are exactly those where
//! some run carries the top piece, the other pieces do not cross (a piece's
//! runs are joined above the frontier, and two such joins cannot cross in the
//! plane), and no other piece has a top run between two of its runs (the top
//! run is joined to the top side, which that piece's join would cross). A test
//! checks this against the search of every state up to side 12, and the counts
//! it gives against the counted ones up to side 18.
//!
//! So the states of a pattern of `r` runs are the labellings of `r` runs,
//! whatever the runs' lengths and places, and their order is that of the
//! packed states (labels compared from the last position down: the last
//! run's label first). A graph built in parts ([`super::parts`]) numbers the
//! states of a pattern in this order, so that any worker finds a state's
//! place in the vector from the state alone.

use super::frontier::{Word, label};

/// The most runs a pattern of a supported side has (20 positions).
const MAX_RUNS: usize = 10;

/// The labels of a state's runs, run `i` in bits `4i..4i + 4`: comparing two
/// codes of the same number of runs compares the packed states.
type Code = u64;

/// The labellings of `r` runs, for every `r` up to [`MAX_RUNS`], each sorted.
pub(crate) struct Labellings {
    by_runs: Vec<Vec<Code>>,
}

impl Labellings {
    pub(crate) fn new() -> Labellings {
        Labellings {
            by_runs: (0..=MAX_RUNS).map(labellings).collect(),
        }
    }

    /// The number of states whose occupied positions are `pattern`.
    pub(crate) fn count(&self, pattern: u32) -> u32 {
        self.by_runs[runs(pattern)].len() as u32
    }

    /// The place of `state` among the states of its pattern (in the order of
    /// the packed states), or `None` for a labelling no sweep reaches.
    pub(crate) fn rank<W: Word>(&self, state: W, side: usize) -> Option<u32> {
        let (count, code) = run_code(state, side)?;
        let list = self.by_runs.get(count)?;
        list.binary_search(&code).ok().map(|r| r as u32)
    }

    /// The state of `pattern` at place `rank`.
    pub(crate) fn state<W: Word>(&self, pattern: u32, rank: u32) -> W {
        let mut code = self.by_runs[runs(pattern)][rank as usize];
        let mut state = W::ZERO;
        let mut previous = false;
        let mut current = 0;
        let mut rest = pattern;
        let mut pos = 0;
        while rest != 0 {
            let occupied = rest & 1 == 1;
            if occupied {
                if !previous {
                    current = (code & 0xF) as u32;
                    code >>= 4;
                }
                state = state | W::small(current) << (4 * pos);
            }
            previous = occupied;
            rest >>= 1;
            pos += 1;
        }
        state
    }
}

/// The number of runs of occupied positions in `pattern`.
pub(crate) fn runs(pattern: u32) -> usize {
    (pattern & !(pattern << 1)).count_ones() as usize
}

/// The number of runs of `state` and the code of their labels, or `None` when
/// a run holds two labels (no state of a sweep does).
fn run_code<W: Word>(state: W, side: usize) -> Option<(usize, Code)> {
    let mut code = 0;
    let mut count = 0;
    let mut previous = 0;
    for pos in 0..side {
        let l = label(state, pos);
        if l != 0 && previous == 0 {
            if count == MAX_RUNS {
                return None;
            }
            code |= Code::from(l) << (4 * count);
            count += 1;
        } else if l != 0 && l != previous {
            return None;
        }
        previous = l;
    }
    Some((count, code))
}

/// The labellings of `runs` runs (see the module's doc), sorted.
fn labellings(runs: usize) -> Vec<Code> {
    fn extend(
        runs: usize,
        at: usize,
        open: &mut Vec<u32>,
        next: u32,
        top: bool,
        code: Code,
        out: &mut Vec<Code>,
    ) {
        if at == runs {
            if top {
                out.push(code);
            }
            return;
        }
        let shift = 4 * at;
        // The top piece: no piece open so far may come back after it.
        let saved = std::mem::take(open);
        extend(runs, at + 1, open, next, true, code | 1 << shift, out);
        *open = saved;
        // A piece already open: those opened after it close for good.
        for k in 0..open.len() {
            let piece = open[k];
            let closed = open.split_off(k + 1);
            extend(
                runs,
                at + 1,
                open,
                next,
                top,
                code | Code::from(piece) << shift,
                out,
            );
            open.extend(closed);
        }
        // A new piece.
        open.push(next);
        extend(
            runs,
            at + 1,
            open,
            next + 1,
            top,
            code | Code::from(next) << shift,
            out,
        );
        open.pop();
    }
    let mut out = Vec::new();
    extend(runs, 0, &mut Vec::new(), 2, false, 0, &mut out);
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Control;
    use std::collections::BTreeMap;

    /// The states of each pattern, as the search of the graph's build finds
    /// them, sorted.
    fn searched(side: usize) -> BTreeMap<u32, Vec<u64>> {
        let (states, _) = super::super::graph::states_for_tests::<u64>(side, &Control::new());
        let mut by_pattern: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for s in states {
            let pattern = (0..side)
                .filter(|&p| label(s, p) != 0)
                .fold(0, |m, p| m | 1 << p);
            by_pattern.entry(pattern).or_default().push(s);
        }
        by_pattern.values_mut().for_each(|v| v.sort_unstable());
        by_pattern
    }

    #[test]
    fn the_labellings_are_the_states_the_search_finds() {
        let all = Labellings::new();
        for side in 1..=12 {
            let found = searched(side);
            for pattern in 1u32..1 << side {
                let listed: Vec<u64> = (0..all.count(pattern))
                    .map(|r| all.state::<u64>(pattern, r))
                    .collect();
                let expected = found.get(&pattern).cloned().unwrap_or_default();
                assert_eq!(listed, expected, "side {side}, pattern {pattern:b}");
                for (r, &s) in listed.iter().enumerate() {
                    assert_eq!(all.rank(s, side), Some(r as u32));
                }
            }
        }
    }

    #[test]
    fn the_counts_of_the_labellings_are_the_counted_states() {
        let all = Labellings::new();
        for side in 1..=18u32 {
            let total: u64 = (1u32..1 << side).map(|p| u64::from(all.count(p))).sum();
            assert_eq!(
                Some(total),
                super::super::known_state_count(side),
                "side {side}"
            );
        }
        for side in 19..=20 {
            let total: u64 = (1u32..1 << side).map(|p| u64::from(all.count(p))).sum();
            assert_eq!(
                total,
                super::super::estimated_state_count(side),
                "side {side}"
            );
        }
    }

    #[test]
    fn a_labelling_no_sweep_reaches_has_no_rank() {
        let all = Labellings::new();
        // No top piece; a piece with a top run between two of its runs; two
        // pieces crossing; one run of two labels.
        for state in [0x2u64, 0x20102, 0x3020102, 0x302030201, 0x21] {
            assert_eq!(all.rank(state, 10), None, "{state:x}");
        }
        assert_eq!(all.rank(0x1u64, 10), Some(0));
        // A piece inside another is reached.
        assert!(all.rank(0x2030201u64, 10).is_some());
    }
}
