//! Pruning by pagoda functions: which positions can no longer reach an
//! allowed end, so that a search need not expand them (see the pruning
//! section of docs/kinds/pegs.md for the proofs).
//!
//! A pagoda function gives each hole an integer weight with
//! `w(a) + w(b) >= w(c)` for every jump from `a` over `b` into `c`: the jump
//! removes the pegs on `a` and `b` and puts one on `c`, so the weighted sum of
//! a position never increases. A position whose sum is below that of an end
//! cannot reach it. The weights are found per board and per end by linear
//! programs over positions met in random play from the search's start, each
//! asked for a pagoda that rules it out (Bell's criterion); every function is
//! checked against every jump in integers before it is used, so a wrong
//! weight is refused, never used to prune.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::board::{Jump, bits, parity_signature};
use crate::{Result, invalid};

/// Random games played from each image of the search's start to find the
/// positions the linear programs rule out.
const PLAYOUTS: usize = 64;
/// Linear programs solved per end at most, and pagodas kept per end.
const PROGRAMS_PER_END: usize = 96;
const PAGODAS_PER_END: usize = 24;
/// Denominators tried to make a solution's weights integers.
const MAX_DENOMINATOR: i32 = 12;

/// A verified pagoda function: weights by bit, and their sums by byte of a
/// board for a sum in eight lookups.
#[derive(Clone)]
pub(crate) struct Pagoda {
    weights: [i32; 64],
    sums: Box<[[i32; 256]; 8]>,
}

impl std::fmt::Debug for Pagoda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set: Vec<(u32, i32)> = (0..64)
            .filter(|&b| self.weights[b as usize] != 0)
            .map(|b| (b, self.weights[b as usize]))
            .collect();
        f.debug_struct("Pagoda").field("weights", &set).finish()
    }
}

impl Pagoda {
    /// The function with `weights` (by bit; bits off the board must be 0),
    /// refused unless `w(from) + w(over) >= w(to)` holds for every jump.
    pub(crate) fn new(weights: [i32; 64], holes: u64, jumps: &[Jump]) -> Result<Pagoda> {
        if let Some(off) = (0..64).find(|&b| holes >> b & 1 == 0 && weights[b] != 0) {
            return Err(invalid!(
                "pagoda weight on bit {off}, not a hole of the board"
            ));
        }
        let w = |one: u64| weights[one.trailing_zeros() as usize] as i64;
        if let Some(jump) = jumps.iter().find(|j| w(j.from) + w(j.over) < w(j.to)) {
            return Err(invalid!(
                "not a pagoda function: the jump from bit {} over {} into {} raises its sum",
                jump.from.trailing_zeros(),
                jump.over.trailing_zeros(),
                jump.to.trailing_zeros()
            ));
        }
        let mut sums = Box::new([[0i32; 256]; 8]);
        for (k, table) in sums.iter_mut().enumerate() {
            for (value, sum) in table.iter_mut().enumerate() {
                *sum = bits(value as u64)
                    .map(|b| weights[8 * k + b as usize])
                    .sum();
            }
        }
        Ok(Pagoda { weights, sums })
    }

    /// The weighted sum of `board`.
    #[inline(always)]
    pub(crate) fn of(&self, board: u64) -> i32 {
        let mut sum = 0;
        for (k, table) in self.sums.iter().enumerate() {
            sum += table[(board >> (8 * k)) as usize & 0xff];
        }
        sum
    }

    #[cfg(test)]
    pub(crate) fn weights(&self) -> &[i32; 64] {
        &self.weights
    }
}

/// The pagodas that rule positions out for one allowed end, each with the
/// end's sum.
#[derive(Clone, Debug)]
pub(crate) struct EndRule {
    pub(crate) end: u64,
    pub(crate) pagodas: Vec<(Pagoda, i32)>,
    /// The same pagodas side by side, once the rule is complete
    /// ([`EndRule::pack`]).
    packed: Option<PackedRule>,
}

/// Lanes of pagodas summed together: 16 sums of 16 bits.
const LANES: usize = 16;

/// An end's pagodas side by side: for each byte of a board and each value of
/// it, the sums of that byte's weights in every pagoda (`i16`, the pagodas
/// padded to whole lanes), so that a board's sums in all of them take eight
/// rows of adds, and a row is a few cache lines, not one per pagoda.
#[derive(Clone, Debug)]
struct PackedRule {
    /// Pagodas plus padding: a multiple of [`LANES`].
    width: usize,
    /// For byte `k` of a board holding `value`, each pagoda's sum of that
    /// byte's weights: `width` of them from `(256 k + value) * width` on.
    rows: Vec<i16>,
    /// Each pagoda's sum at the end; the padding's is below every sum.
    ends: Vec<i16>,
    /// Each hole's weight in every pagoda, `width` lanes a hole by bit: a
    /// jump changes a board's sums by three of these rows.
    by_hole: Vec<i16>,
}

impl EndRule {
    pub(crate) fn new(end: u64, pagodas: Vec<(Pagoda, i32)>) -> EndRule {
        EndRule {
            end,
            pagodas,
            packed: None,
        }
    }

    /// Packs the pagodas side by side when every sum fits 16 bits (their
    /// absolute weights add up to at most `i16::MAX`); else the rule sums
    /// them one by one.
    fn pack(&mut self) {
        let fits = |weights: &[i32; 64]| {
            weights
                .iter()
                .map(|w| i64::from(w.unsigned_abs()))
                .sum::<i64>()
                <= i64::from(i16::MAX)
        };
        if self.pagodas.is_empty() || !self.pagodas.iter().all(|(p, _)| fits(&p.weights)) {
            return;
        }
        let width = self.pagodas.len().div_ceil(LANES) * LANES;
        let mut rows = vec![0i16; 8 * 256 * width];
        let mut ends = vec![i16::MIN; width];
        let mut by_hole = vec![0i16; 64 * width];
        for (j, (pagoda, end)) in self.pagodas.iter().enumerate() {
            // The end is a board: its sum fits as well as any.
            ends[j] = i16::try_from(*end).expect("a board's pagoda sum fits 16 bits");
            for (bit, &weight) in pagoda.weights.iter().enumerate() {
                // A weight fits: the absolute weights add up to an i16.
                by_hole[bit * width + j] = weight as i16;
            }
            for k in 0..8 {
                for value in 0..256 {
                    rows[(256 * k + value) * width + j] = pagoda.sums[k][value] as i16;
                }
            }
        }
        self.packed = Some(PackedRule {
            width,
            rows,
            ends,
            by_hole,
        });
    }

    /// Whether the pagodas are packed side by side.
    #[cfg(test)]
    pub(crate) fn is_packed(&self) -> bool {
        self.packed.is_some()
    }

    /// [`EndRule::rules_out`], one pagoda after another: the rule's own way
    /// when it is not packed.
    pub(crate) fn rules_out_one_by_one(&self, board: u64) -> bool {
        self.pagodas.iter().any(|(p, end)| p.of(board) < *end)
    }

    /// Whether some pagoda shows that `board` cannot reach the end.
    #[inline]
    pub(crate) fn rules_out(&self, board: u64) -> bool {
        let Some(packed) = &self.packed else {
            return self.rules_out_one_by_one(board);
        };
        (0..packed.width).step_by(LANES).any(|lane| {
            let sums = packed.lane_sums(board, lane);
            below(&sums, &packed.ends[lane..lane + LANES])
        })
    }
}

impl PackedRule {
    /// The sums of `board` in the pagodas of lanes `lane..lane + LANES`.
    #[inline(always)]
    fn lane_sums(&self, board: u64, lane: usize) -> [i16; LANES] {
        let mut sums = [0i16; LANES];
        for k in 0..8 {
            let value = (board >> (8 * k)) as usize & 0xff;
            let at = (256 * k + value) * self.width + lane;
            let row = &self.rows[at..at + LANES];
            for (sum, add) in sums.iter_mut().zip(row) {
                // No overflow: |sum| <= the absolute weights' sum.
                *sum = sum.wrapping_add(*add);
            }
        }
        sums
    }
}

/// Whether some lane's sum is below its end's.
#[inline(always)]
fn below(sums: &[i16; LANES], ends: &[i16]) -> bool {
    sums.iter()
        .zip(ends)
        .fold(false, |hit, (s, e)| hit | (s < e))
}

/// What may be pruned: a position is pruned when every allowed end it could
/// reach is ruled out by a pagoda. With `by_signature`, the allowed ends are
/// grouped by parity signature and a position is held against those of its
/// own signature (the only ones it can reach); a position of a signature
/// without a group is kept.
#[derive(Debug)]
pub struct Pruner {
    invariants: Vec<u64>,
    by_signature: bool,
    /// Signature (0 when not by signature) and the rules of its ends.
    groups: Vec<(u64, Vec<EndRule>)>,
}

impl Pruner {
    /// False when `board` can reach no allowed end (proven by the pagodas).
    #[inline]
    pub fn may_finish(&self, board: u64) -> bool {
        self.rules_for(board)
            .is_none_or(|rules| !rules.iter().all(|rule| rule.rules_out(board)))
    }

    /// The rules `board` is held to: those of the ends of its signature
    /// (`None` when no rule applies and it is kept).
    #[inline]
    fn rules_for(&self, board: u64) -> Option<&[EndRule]> {
        let rules = if self.by_signature {
            let signature = parity_signature(&self.invariants, board);
            &self.groups.iter().find(|(s, _)| *s == signature)?.1
        } else {
            &self.groups.first()?.1
        };
        (!rules.is_empty()).then_some(&rules[..])
    }

    /// The number of pagoda functions held.
    pub fn pagodas(&self) -> usize {
        (self.groups.iter())
            .flat_map(|(_, rules)| rules)
            .map(|r| r.pagodas.len())
            .sum()
    }

    #[cfg(test)]
    pub(crate) fn rules(&self) -> impl Iterator<Item = &EndRule> {
        self.groups.iter().flat_map(|(_, rules)| rules)
    }
}

/// A board's pagoda sums for the rules of its signature, so that each child
/// is held to the rules as it is made: a jump changes a sum by the weights of
/// its three holes, a few vector additions where summing the child afresh
/// takes eight lookups a lane group. A jump keeps the parity signature, so a
/// board's children are held to its own group of rules; and it never raises
/// a pagoda's sum, so a rule that rules the board out rules out every child.
/// The rules are summed for the board only when a child needs them, and a
/// child is held first to the rule its sibling last passed.
///
/// A child the filter rejects has no solution: the pagodas rule it out as
/// they would if it were expanded. The child itself is tested, not its
/// canonical image, which the same rules may judge otherwise; either way a
/// rejected child's count would have been multiplied by 0.
pub(crate) struct ChildFilter<'p> {
    pruner: &'p Pruner,
    /// The loaded board's rules; empty when every child is kept.
    rules: &'p [EndRule],
    /// Whether every rule of `rules` is packed (else each child is summed).
    packed: bool,
    board: u64,
    /// The first lane of each rule in `sums`, and the lanes of all.
    offsets: Vec<usize>,
    /// The loaded board's sums, the lanes of each rule after the last's.
    sums: Vec<i16>,
    /// What each rule says of the loaded board, once summed.
    verdicts: Vec<Verdict>,
    /// The rule to try first.
    first: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    NotSummed,
    Passes,
    RulesOut,
}

impl<'p> ChildFilter<'p> {
    pub(crate) fn new(pruner: &'p Pruner) -> ChildFilter<'p> {
        ChildFilter {
            pruner,
            rules: &[],
            packed: true,
            board: 0,
            offsets: Vec::new(),
            sums: Vec::new(),
            verdicts: Vec::new(),
            first: 0,
        }
    }

    /// Takes `board` as the parent of the children to come: false when the
    /// pagodas rule `board` itself out (as [`Pruner::may_finish`] does).
    #[inline]
    pub(crate) fn load(&mut self, board: u64) -> bool {
        self.board = board;
        let Some(rules) = self.pruner.rules_for(board) else {
            self.rules = &[];
            return true;
        };
        if !std::ptr::eq(rules, self.rules) {
            self.rules = rules;
            self.packed = rules.iter().all(|rule| rule.packed.is_some());
            self.offsets.clear();
            let mut lanes = 0;
            for rule in rules {
                self.offsets.push(lanes);
                lanes += rule.packed.as_ref().map_or(0, |p| p.width);
            }
            self.offsets.push(lanes);
            self.sums.resize(lanes, 0);
            self.first = 0;
        }
        if !self.packed {
            return !rules.iter().all(|rule| rule.rules_out(board));
        }
        self.verdicts.clear();
        self.verdicts.resize(rules.len(), Verdict::NotSummed);
        let first = self.first;
        if self.verdict(first) == Verdict::Passes {
            return true;
        }
        for r in 0..rules.len() {
            if self.verdict(r) == Verdict::Passes {
                self.first = r;
                return true;
            }
        }
        false
    }

    /// Rule `r`'s verdict on the loaded board, summing it the first time.
    #[inline]
    fn verdict(&mut self, r: usize) -> Verdict {
        if self.verdicts[r] != Verdict::NotSummed {
            return self.verdicts[r];
        }
        let packed = self.rules[r].packed.as_ref().expect("packed rules");
        // A rule that rules the board out is never asked of its children,
        // so its sums are left unfinished.
        self.verdicts[r] = Verdict::RulesOut;
        for lane in (0..packed.width).step_by(LANES) {
            let sums = packed.lane_sums(self.board, lane);
            if below(&sums, &packed.ends[lane..lane + LANES]) {
                return Verdict::RulesOut;
            }
            self.sums[self.offsets[r] + lane..][..LANES].copy_from_slice(&sums);
        }
        self.verdicts[r] = Verdict::Passes;
        Verdict::Passes
    }

    /// Whether rule `r`, which the loaded board passes, passes its child by
    /// the jump whose holes are the rows `from`, `over` and `to`.
    #[inline]
    fn child_passes(&self, r: usize, from: u32, over: u32, to: u32) -> bool {
        let packed = self.rules[r].packed.as_ref().expect("packed rules");
        let width = packed.width;
        let row = |bit: u32| &packed.by_hole[bit as usize * width..][..width];
        let (from, over, to) = (row(from), row(over), row(to));
        let parent = &self.sums[self.offsets[r]..][..width];
        let groups = (parent.as_chunks::<LANES>().0.iter())
            .zip(to.as_chunks::<LANES>().0)
            .zip(
                from.as_chunks::<LANES>()
                    .0
                    .iter()
                    .zip(over.as_chunks::<LANES>().0),
            )
            .zip(packed.ends.as_chunks::<LANES>().0);
        for (((parent, to), (from, over)), ends) in groups {
            let mut sums = [0i16; LANES];
            for i in 0..LANES {
                // The child's sum fits as any board's does; the steps on
                // the way may wrap and come back.
                sums[i] = parent[i]
                    .wrapping_add(to[i])
                    .wrapping_sub(from[i])
                    .wrapping_sub(over[i]);
            }
            if below(&sums, ends) {
                return false;
            }
        }
        true
    }

    /// Whether the child of the loaded board by the jump from hole bit
    /// `from` over `over` into `to` may reach an allowed end.
    #[inline]
    pub(crate) fn child_may_finish(&mut self, from: u32, over: u32, to: u32) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        if !self.packed {
            let child = self.board ^ (1 << from | 1 << over | 1 << to);
            return !self.rules.iter().all(|rule| rule.rules_out(child));
        }
        let first = self.first;
        if self.verdicts[first] == Verdict::Passes && self.child_passes(first, from, over, to) {
            return true;
        }
        for r in (0..self.rules.len()).filter(|&r| r != first) {
            if self.verdict(r) == Verdict::Passes && self.child_passes(r, from, over, to) {
                self.first = r;
                return true;
            }
        }
        false
    }
}

/// What a pruner is built from: the board, the symmetries in use (as the
/// images of each bit), the search's start and the allowed ends.
pub(crate) struct PrunerSpec<'a> {
    pub(crate) holes: u64,
    pub(crate) jumps: &'a [Jump],
    pub(crate) invariants: &'a [u64],
    /// For each symmetry in use, the image of each bit.
    pub(crate) symmetries: Vec<[u64; 64]>,
    pub(crate) start: u64,
    pub(crate) ends: Vec<u64>,
    pub(crate) by_signature: bool,
}

type CacheKey = (u64, Vec<[u64; 64]>, u64, Vec<u64>, bool);

/// Pruners already built in this process: every shard of a job builds the
/// same one.
fn cache() -> &'static Mutex<HashMap<CacheKey, Arc<Pruner>>> {
    static CACHE: OnceLock<Mutex<HashMap<CacheKey, Arc<Pruner>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The pruner for `spec`, built once per process.
pub(crate) fn pruner(spec: &PrunerSpec<'_>) -> Arc<Pruner> {
    let key: CacheKey = (
        spec.holes,
        spec.symmetries.clone(),
        spec.start,
        spec.ends.clone(),
        spec.by_signature,
    );
    if let Some(p) = cache().lock().get(&key) {
        return p.clone();
    }
    let built = Arc::new(build(spec));
    cache().lock().insert(key, built.clone());
    built
}

/// The image of `board` under the symmetry whose bit images are `map`.
fn image(map: &[u64; 64], board: u64) -> u64 {
    bits(board).fold(0, |m, b| m | map[b as usize])
}

fn build(spec: &PrunerSpec<'_>) -> Pruner {
    let signature = |b: u64| parity_signature(spec.invariants, b);
    // Random games from each image of the start, every position kept.
    let mut starts: Vec<u64> = (spec.symmetries.iter())
        .map(|m| image(m, spec.start))
        .collect();
    starts.sort_unstable();
    starts.dedup();
    let mut seed = 0x243f_6a88_85a3_08d3u64 ^ spec.start;
    let games: Vec<Vec<u64>> = (0..PLAYOUTS * starts.len())
        .map(|i| playout(spec.holes, spec.jumps, starts[i % starts.len()], &mut seed))
        .collect();
    // One end of each orbit is solved for; the others take the images.
    let mut rules: HashMap<u64, EndRule> = HashMap::new();
    for &end in &spec.ends {
        if rules.contains_key(&end) {
            continue;
        }
        let mut found = rule_for(spec, end, &games, &signature);
        // The images of each pagoda under the symmetries fixing the end are
        // pagodas for it too.
        let fixing: Vec<&[u64; 64]> = (spec.symmetries.iter())
            .filter(|m| image(m, end) == end)
            .collect();
        let mut images = Vec::new();
        for (pagoda, at_end) in &found.pagodas {
            for map in &fixing {
                if let Some(moved) = moved_pagoda(spec, pagoda, map) {
                    images.push((moved, *at_end));
                }
            }
        }
        found.pagodas = Vec::new();
        for (pagoda, at_end) in images {
            if !found
                .pagodas
                .iter()
                .any(|(p, _)| p.weights == pagoda.weights)
            {
                found.pagodas.push((pagoda, at_end));
            }
        }
        for map in &spec.symmetries {
            let moved = image(map, end);
            if !spec.ends.contains(&moved) || rules.contains_key(&moved) {
                continue;
            }
            let pagodas = (found.pagodas.iter())
                .filter_map(|(p, _)| {
                    let moved_pagoda = moved_pagoda(spec, p, map)?;
                    let at_end = moved_pagoda.of(moved);
                    Some((moved_pagoda, at_end))
                })
                .collect();
            rules.insert(moved, EndRule::new(moved, pagodas));
        }
    }
    let mut groups: Vec<(u64, Vec<EndRule>)> = Vec::new();
    for &end in &spec.ends {
        let mut rule = (rules.get(&end).cloned()).unwrap_or(EndRule::new(end, Vec::new()));
        rule.pack();
        let key = if spec.by_signature {
            signature(rule.end)
        } else {
            0
        };
        match groups.iter_mut().find(|(s, _)| *s == key) {
            Some((_, group)) => group.push(rule),
            None => groups.push((key, vec![rule])),
        }
    }
    Pruner {
        invariants: spec.invariants.to_vec(),
        by_signature: spec.by_signature,
        groups,
    }
}

/// The image of `pagoda` under the symmetry whose bit images are `map`,
/// checked again.
fn moved_pagoda(spec: &PrunerSpec<'_>, pagoda: &Pagoda, map: &[u64; 64]) -> Option<Pagoda> {
    let mut weights = [0i32; 64];
    for b in bits(spec.holes) {
        weights[map[b as usize].trailing_zeros() as usize] = pagoda.weights[b as usize];
    }
    Pagoda::new(weights, spec.holes, spec.jumps).ok()
}

/// One random game from `start` until no jump is left: its positions.
fn playout(holes: u64, jumps: &[Jump], start: u64, seed: &mut u64) -> Vec<u64> {
    let mut game = vec![start];
    let mut board = start;
    let mut moves: Vec<&Jump> = Vec::new();
    loop {
        moves.clear();
        moves.extend(jumps.iter().filter(|j| {
            board & j.from != 0 && board & j.over != 0 && (holes & !board) & j.to != 0
        }));
        if moves.is_empty() {
            return game;
        }
        let pick = next_random(seed) % moves.len() as u64;
        board ^= moves[pick as usize].mask();
        game.push(board);
    }
}

/// SplitMix64: a fixed sequence, so every process builds the same pagodas.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The pagodas for `end`: along each random game (whose positions a pagoda
/// rules out from some move on, since sums never increase), the earliest
/// position a linear program rules out before the pagodas found so far do.
fn rule_for(
    spec: &PrunerSpec<'_>,
    end: u64,
    games: &[Vec<u64>],
    signature: &dyn Fn(u64) -> u64,
) -> EndRule {
    let mut rule = EndRule::new(end, Vec::new());
    let mut programs = 0;
    for game in games {
        if rule.pagodas.len() >= PAGODAS_PER_END || programs >= PROGRAMS_PER_END {
            break;
        }
        // Games of another signature cannot reach this end at all.
        if spec.by_signature && signature(game[0]) != signature(end) {
            continue;
        }
        let known = game
            .iter()
            .position(|&b| rule.rules_out(b))
            .unwrap_or(game.len());
        // The last position before the known ones: if no pagoda rules it
        // out, none rules out an earlier one.
        let (mut lo, mut hi) = (0, known);
        let mut best = None;
        while lo < hi && programs < PROGRAMS_PER_END {
            let mid = if best.is_none() {
                hi - 1
            } else {
                (lo + hi) / 2
            };
            programs += 1;
            match separating_pagoda(spec, game[mid], end) {
                Some(found) => {
                    best = Some(found);
                    hi = mid;
                }
                None if best.is_none() => break,
                None => lo = mid + 1,
            }
        }
        if let Some(pagoda) = best {
            let at_end = pagoda.of(end);
            rule.pagodas.push((pagoda, at_end));
        }
    }
    rule
}

/// A pagoda whose sum on `board` is below its sum on `end`, from the linear
/// program `max w(end) - w(board)` over pagodas with weights in [-1, 1],
/// made integer and checked; `None` when the program finds none.
fn separating_pagoda(spec: &PrunerSpec<'_>, board: u64, end: u64) -> Option<Pagoda> {
    use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOutcome};
    let mut problem = Problem::new(OptimizationDirection::Maximize);
    let mut vars = [None; 64];
    for b in bits(spec.holes) {
        let one = 1u64 << b;
        let cost = f64::from(u8::from(end & one != 0)) - f64::from(u8::from(board & one != 0));
        vars[b as usize] = Some(problem.add_var(cost, (-1.0, 1.0)));
    }
    let var = |one: u64| vars[one.trailing_zeros() as usize].expect("a jump's holes are holes");
    for jump in spec.jumps {
        problem.add_constraint(
            [
                (var(jump.to), 1.0),
                (var(jump.from), -1.0),
                (var(jump.over), -1.0),
            ],
            ComparisonOp::Le,
            0.0,
        );
    }
    let SolveOutcome::Solution(solution) = problem.solve().ok()? else {
        return None;
    };
    if solution.objective() < 1e-6 {
        return None;
    }
    let values: Vec<(u32, f64)> = bits(spec.holes)
        .map(|b| (b, solution.var_value(vars[b as usize].expect("a hole"))))
        .collect();
    // The smallest denominator that makes every weight an integer, else the
    // largest, rounded and lowered until it is a pagoda.
    let denominator = (1..=MAX_DENOMINATOR)
        .find(|&d| {
            values
                .iter()
                .all(|&(_, v)| (v * f64::from(d) - (v * f64::from(d)).round()).abs() < 1e-6)
        })
        .unwrap_or(MAX_DENOMINATOR);
    let mut weights = [0i32; 64];
    for &(b, v) in &values {
        weights[b as usize] = (v * f64::from(denominator)).round() as i32;
    }
    if !lower_to_pagoda(&mut weights, spec.jumps, -2 * denominator) {
        return None;
    }
    let pagoda = Pagoda::new(weights, spec.holes, spec.jumps).ok()?;
    (pagoda.of(board) < pagoda.of(end)).then_some(pagoda)
}

/// Lowers the weight of each jump's landing hole to what its two other holes
/// allow, until every jump keeps the inequality (rounding may have broken
/// some); false when a weight would fall below `floor`, or after a bounded
/// number of rounds.
fn lower_to_pagoda(weights: &mut [i32; 64], jumps: &[Jump], floor: i32) -> bool {
    let w = |weights: &[i32; 64], one: u64| weights[one.trailing_zeros() as usize];
    for _ in 0..64 {
        let mut changed = false;
        for j in jumps {
            let allowed = w(weights, j.from).saturating_add(w(weights, j.over));
            if w(weights, j.to) > allowed {
                if allowed < floor {
                    return false;
                }
                weights[j.to.trailing_zeros() as usize] = allowed;
                changed = true;
            }
        }
        if !changed {
            return true;
        }
    }
    false
}
