//! The searches: distances from the start and the target, the shortest-path
//! graph, prefix tasks, enumeration and the layer-by-layer count.

use super::arith::Arith;
use super::index::{Dist3, IndexMap};
use super::state::{Layout, NO_MOVE, State};
use super::{DpTotals, PathSums, SliderParams, parse_params};
use crate::{Control, Error, Result, invalid};

/// Boards expanded between two polls of the control.
const POLL_EVERY: usize = 1 << 14;
/// Boards whose neighbours are generated (and their distance entries
/// prefetched) before the entries are visited.
const BLOCK: usize = 32;

/// The shortest-path graph: its boards in layers `0..=D` (layer `i` holds the
/// boards at distance `i` from the start on some shortest sequence; the start
/// is node 0, the target the last node), with the useful moves as successor
/// lists in ASCII order of their letters.
#[derive(Clone, Debug)]
struct Dag {
    /// Layer `i` is `layer_start[i]..layer_start[i + 1]`.
    layer_start: Vec<usize>,
    /// Successors of node `v` are `succ[succ_start[v]..succ_start[v + 1]]`.
    succ_start: Vec<u32>,
    succ: Vec<(u32, u8)>,
    /// Number of shortest sequences from the start to each node (saturating).
    paths: Vec<u128>,
    /// Number of shortest sequences from each node to the target (saturating):
    /// the weight of a prefix ending on the node.
    to_target: Vec<u128>,
}

impl Dag {
    /// Number of boards; the target is the last one.
    fn nodes(&self) -> usize {
        self.paths.len()
    }

    fn successors(&self, v: usize) -> &[(u32, u8)] {
        &self.succ[self.succ_start[v] as usize..self.succ_start[v + 1] as usize]
    }
}

/// The search from the start of one job and its shortest-path graph.
#[derive(Clone, Debug)]
pub struct SliderSpace {
    params: SliderParams,
    layout: Layout,
    arith: Arith,
    start: State,
    target: State,
    /// Distances from the start, modulo 3, for every reachable board; `None`
    /// for a graph rebuilt from its layers ([`SliderSpace::from_layers`]).
    dist_start: Option<Dist3>,
    reachable: usize,
    edges: usize,
    shortest: u32,
    dag: Dag,
}

/// Breadth-first search from `root`, layer by layer, until the frontier is empty
/// or `max_depth` layers are done; calls `on_layer(boards, depth)` with the new
/// boards of every layer (each with a packed index the callback ignores).
/// Returns the number of boards found.
///
/// The move back to the board a board was found from is skipped (that board is
/// one layer closer). Neighbours are generated a block at a time with their
/// distance entries prefetched, then visited without an unpredictable branch:
/// every one is written to the next frontier and the write kept only if new.
fn bfs(
    layout: &Layout,
    dist: &mut Dist3,
    root: State,
    max_depth: u32,
    control: &Control,
    mut on_layer: impl FnMut(&[(State, u64)], u32),
) -> Result<usize> {
    // Frontier entries: the board and its index, with the code of the move back
    // to the board it was found from in the top bits.
    const BACK_SHIFT: u32 = 60;
    const INDEX_MASK: u64 = (1 << BACK_SHIFT) - 1;
    let root_index = layout.index(root);
    dist.visit(root_index, 0);
    let mut frontier = vec![(root, root_index | u64::from(NO_MOVE) << BACK_SHIFT)];
    let mut frontier_len = 1usize;
    on_layer(&[(root, root_index)], 0);
    let mut found = 1usize;
    let mut next: Vec<(State, u64)> = Vec::new();
    // Four moves at most from the root, three from any other board.
    let mut candidates = [(root, 0u64); 4 * BLOCK];
    let mut depth = 0u32;
    while frontier_len > 0 && depth < max_depth {
        control.check()?;
        depth += 1;
        let tag = (depth % 3) as u8;
        let mut n = 0usize;
        for chunk in frontier[..frontier_len].chunks(POLL_EVERY) {
            control.check()?;
            for block in chunk.chunks(BLOCK) {
                // All neighbours of a block first, with their distance entries
                // prefetched; then the entries are visited and the new boards
                // kept.
                let mut c = 0;
                for &(v, packed) in block {
                    let iv = packed & INDEX_MASK;
                    let back = (packed >> BACK_SHIFT) as u8;
                    for m in layout.moves_except(v.blank(), back) {
                        let w = layout.apply(m, v);
                        let iw = match m.index_step {
                            Some(step) => iv.wrapping_add(step),
                            None => layout.index(w),
                        };
                        dist.prefetch(iw);
                        candidates[c] = (w, iw | u64::from(m.back) << BACK_SHIFT);
                        c += 1;
                    }
                }
                if next.len() < n + c {
                    grow(&mut next, n + c, root)?;
                }
                for &entry in &candidates[..c] {
                    let new = dist.visit(entry.1 & INDEX_MASK, tag);
                    next[n] = entry;
                    n += usize::from(new);
                }
            }
            control.add_work(chunk.len() as u64);
        }
        on_layer(&next[..n], depth);
        found += n;
        std::mem::swap(&mut frontier, &mut next);
        frontier_len = n;
    }
    Ok(found)
}

/// Grows a frontier buffer to at least `len` entries (doubling), or fails with
/// `InvalidArgument` if the memory is not available.
fn grow(buf: &mut Vec<(State, u64)>, len: usize, fill: State) -> Result<()> {
    let target = len.max(2 * buf.len()).max(1024);
    buf.try_reserve_exact(target - buf.len())
        .map_err(|_| invalid!("cannot allocate a search frontier of {target} boards"))?;
    buf.resize(target, (fill, 0));
    Ok(())
}

/// The shortest-path graph, from the target backwards: layer `D` is the target,
/// and layer `i - 1` holds the neighbours `u` of the boards of layer `i` with
/// `dS(u) = i - 1`. A board at distance `i` from the start has neighbours at
/// distances `i - 1` and `i + 1` only (the graph is bipartite), so `dS` modulo 3
/// tells them apart. These are exactly the boards `v` with `dS(v) + dT(v) = D`,
/// and the moves found are the useful moves of the seed.
fn extract_dag(
    layout: &Layout,
    dist_start: &Dist3,
    start: State,
    target: State,
    shortest: u32,
    control: &Control,
) -> Result<Dag> {
    let d = shortest as usize;
    let mut layers: Vec<Vec<State>> = vec![Vec::new(); d + 1];
    layers[d].push(target);
    // edges[i]: the useful moves from layer i to layer i + 1, as (position in
    // layer i, position in layer i + 1, letter).
    let mut edges: Vec<Vec<(u32, u32, u8)>> = vec![Vec::new(); d];
    let mut ids: IndexMap<u32> = IndexMap::default();
    for i in (0..d).rev() {
        control.check()?;
        ids.clear();
        let want = (i % 3) as u8;
        let (lower, upper) = layers.split_at_mut(i + 1);
        let (prev, next) = (&mut lower[i], &upper[0]);
        for (wl, &w) in next.iter().enumerate() {
            for m in layout.moves(w.blank()) {
                let u = layout.apply(m, w);
                let iu = layout.index(u);
                if dist_start.get(iu) == want {
                    let id = *ids.entry(iu).or_insert_with(|| {
                        prev.push(u);
                        (prev.len() - 1) as u32
                    });
                    edges[i].push((id, wl as u32, reverse_letter(m.letter)));
                }
            }
        }
        to_u32(prev.len())?;
        control.add_work(next.len() as u64);
    }
    if layers[0] != [start] {
        return Err(Error::Internal(
            "the first layer of the shortest-path graph is not the start".into(),
        ));
    }
    let sizes: Vec<usize> = layers.iter().map(Vec::len).collect();
    assemble_dag(&sizes, edges)
}

/// The graph of layers of `sizes` boards (the start alone in the first, the
/// target alone in the last) and the useful moves `edges[i]` from layer `i`
/// to layer `i + 1` (position in layer `i`, position in layer `i + 1`,
/// letter), with the path counts both ways.
fn assemble_dag(sizes: &[usize], mut edges: Vec<Vec<(u32, u32, u8)>>) -> Result<Dag> {
    let d = sizes.len() - 1;
    let mut layer_start = vec![0usize];
    for size in sizes {
        layer_start.push(layer_start.last().unwrap_or(&0) + size);
    }
    let nodes = layer_start[d + 1];
    let moves: usize = edges.iter().map(Vec::len).sum();
    to_u32(nodes)?;
    to_u32(moves)?;
    let mut succ_start = Vec::with_capacity(nodes + 1);
    let mut succ = Vec::with_capacity(moves);
    for (i, layer_edges) in edges.iter_mut().enumerate() {
        layer_edges.sort_unstable_by_key(|&(u, _, letter)| (u, letter));
        let mut e = 0;
        for u in 0..sizes[i] as u32 {
            succ_start.push(succ.len() as u32);
            while e < layer_edges.len() && layer_edges[e].0 == u {
                let (_, w, letter) = layer_edges[e];
                succ.push(((layer_start[i + 1] + w as usize) as u32, letter));
                e += 1;
            }
        }
    }
    // The target has no successors.
    succ_start.push(succ.len() as u32);
    succ_start.push(succ.len() as u32);
    let mut paths = vec![0u128; nodes];
    paths[0] = 1;
    for v in 0..nodes {
        let n = paths[v];
        for &(w, _) in &succ[succ_start[v] as usize..succ_start[v + 1] as usize] {
            paths[w as usize] = paths[w as usize].saturating_add(n);
        }
    }
    // Backwards: successors have larger numbers, so one reverse pass suffices.
    let mut to_target = vec![0u128; nodes];
    to_target[nodes - 1] = 1;
    for v in (0..nodes - 1).rev() {
        to_target[v] = succ[succ_start[v] as usize..succ_start[v + 1] as usize]
            .iter()
            .fold(0u128, |acc, &(w, _)| {
                acc.saturating_add(to_target[w as usize])
            });
    }
    Ok(Dag {
        layer_start,
        succ_start,
        succ,
        paths,
        to_target,
    })
}

fn reverse_letter(letter: u8) -> u8 {
    match letter {
        b'D' => b'U',
        b'U' => b'D',
        b'L' => b'R',
        _ => b'L',
    }
}

impl SliderSpace {
    /// Runs the breadth-first search from the start over every reachable board
    /// (distances `dS` modulo 3), then extracts the shortest-path graph backwards
    /// from the target. An unreachable target is `InvalidArgument`. Polls
    /// `control` and adds the boards expanded as work units.
    ///
    /// The search from the target, whose distances `dT` the seed's test of a
    /// useful move also uses, is not needed for the graph: walking back from the
    /// target to neighbours one step closer to the start reaches exactly the
    /// boards on shortest sequences, so it is left to [`SliderSpace::dp_totals`],
    /// which checks the graph by the seed's own two-search test.
    pub fn build(params: &SliderParams, control: &Control) -> Result<SliderSpace> {
        let parsed = parse_params(params)?;
        control.check()?;
        let geom = parsed.geom;
        let layout = Layout::new(&geom, &parsed.counts);
        let (start, target) = (layout.state(&parsed.start), layout.state(&parsed.target));

        let mut dist_start = Dist3::new(layout.total())?;
        let mut degree_sum = 0usize;
        let mut target_depth = None;
        let reachable = bfs(
            &layout,
            &mut dist_start,
            start,
            u32::MAX,
            control,
            |layer, d| {
                for &(b, _) in layer {
                    degree_sum += layout.degree(b.blank());
                }
                if layer.iter().any(|&(b, _)| b == target) {
                    target_depth = Some(d);
                }
            },
        )?;
        let Some(shortest) = target_depth else {
            return Err(invalid!(
                "the target board cannot be reached from the start board: only {reachable} \
                 of the {} boards with these tiles are reachable from the start{}",
                layout.total(),
                if geom.cells == 4 {
                    " (on a 2 x 2 board the tiles can only rotate around the cycle)"
                } else {
                    ""
                }
            ));
        };
        let dag = extract_dag(&layout, &dist_start, start, target, shortest, control)?;
        Ok(SliderSpace {
            params: params.clone(),
            layout,
            arith: parsed.arith,
            start,
            target,
            dist_start: Some(dist_start),
            reachable,
            edges: degree_sum / 2,
            shortest,
            dag,
        })
    }

    /// The shortest-path graph from its layers of boards, as dense indices
    /// (`layers[i]`: the boards at distance `i` from the start on a shortest
    /// sequence to the target; the start alone first, the target alone last),
    /// as a frontier plan finds them. The useful moves are the moves from a
    /// board of one layer to a board of the next. Without the search behind
    /// it, [`SliderSpace::reachable_boards`] and [`SliderSpace::edges`] are 0
    /// and [`SliderSpace::dp_totals_checked`] refuses. Layers that do not form
    /// such a graph (a board out of range, a layer board with no move to the
    /// next layer, the wrong ends) are `InvalidArgument`.
    pub fn from_layers(
        params: &SliderParams,
        layers: &[Vec<u64>],
        control: &Control,
    ) -> Result<SliderSpace> {
        let parsed = parse_params(params)?;
        let layout = Layout::new(&parsed.geom, &parsed.counts);
        let (start, target) = (layout.state(&parsed.start), layout.state(&parsed.target));
        let ends = (layers.first(), layers.last());
        if ends
            != (
                Some(&vec![layout.index(start)]),
                Some(&vec![layout.index(target)]),
            )
        {
            return Err(invalid!(
                "a shortest-path graph's first layer must be the start alone and its last \
                 the target alone"
            ));
        }
        let d = layers.len() - 1;
        let mut edges: Vec<Vec<(u32, u32, u8)>> = vec![Vec::new(); d];
        let mut ids: IndexMap<u32> = IndexMap::default();
        for i in 0..d {
            control.check()?;
            ids.clear();
            for (pos, &w) in layers[i + 1].iter().enumerate() {
                ids.insert(w, to_u32(pos)?);
            }
            for (pos, &u) in layers[i].iter().enumerate() {
                let board = layout
                    .state_at(u)
                    .ok_or_else(|| invalid!("layer {i}: board index {u} is out of range"))?;
                let before = edges[i].len();
                for m in layout.moves(board.blank()) {
                    if let Some(&to) = ids.get(&layout.index(layout.apply(m, board))) {
                        edges[i].push((pos as u32, to, m.letter));
                    }
                }
                if edges[i].len() == before {
                    return Err(invalid!(
                        "layer {i}: board index {u} has no move to layer {}",
                        i + 1
                    ));
                }
            }
            control.add_work(layers[i].len() as u64);
        }
        let sizes: Vec<usize> = layers.iter().map(Vec::len).collect();
        to_u32(sizes.iter().sum())?;
        let dag = assemble_dag(&sizes, edges)?;
        if dag.to_target[0] == 0 {
            return Err(invalid!(
                "the layers hold no sequence from the start to the target"
            ));
        }
        Ok(SliderSpace {
            params: params.clone(),
            layout,
            arith: parsed.arith,
            start,
            target,
            dist_start: None,
            reachable: 0,
            edges: 0,
            shortest: d as u32,
            dag,
        })
    }

    pub fn params(&self) -> &SliderParams {
        &self.params
    }

    /// Number of boards reachable from the start (the start included).
    pub fn reachable_boards(&self) -> usize {
        self.reachable
    }

    /// Number of undirected edges (pairs of boards one move apart) among the
    /// reachable boards.
    pub fn edges(&self) -> usize {
        self.edges
    }

    /// The length `D` of the shortest sequences.
    pub fn shortest_length(&self) -> u32 {
        self.shortest
    }

    /// Number of boards of the shortest-path graph (on some shortest sequence).
    pub fn dag_boards(&self) -> usize {
        self.dag.nodes()
    }

    /// Number of useful moves (edges of the shortest-path graph).
    pub fn dag_moves(&self) -> usize {
        self.dag.succ.len()
    }

    /// Number of shortest sequences (`u128::MAX` if it does not fit).
    pub fn path_count(&self) -> u128 {
        self.dag.paths[self.dag.nodes() - 1]
    }

    /// Number of useful prefixes of length `depth <= D` (saturating), i.e. the
    /// number of prefix tasks at that depth.
    pub fn prefix_count(&self, depth: u32) -> u128 {
        let Some(range) = self.layer(depth as usize) else {
            return 0;
        };
        range.fold(0u128, |acc, v| acc.saturating_add(self.dag.paths[v]))
    }

    fn layer(&self, i: usize) -> Option<std::ops::Range<usize>> {
        let ls = &self.dag.layer_start;
        (i + 1 < ls.len()).then(|| ls[i]..ls[i + 1])
    }

    /// The depth [`SliderSpace::prefix_tasks`] uses for `min_count`.
    pub fn prefix_depth(&self, min_count: usize) -> u32 {
        (0..=self.shortest)
            .find(|&k| self.prefix_count(k) >= min_count as u128)
            .unwrap_or(self.shortest)
    }

    /// All useful prefixes of the smallest length `k` with at least `min_count`
    /// of them (length `D`, every shortest sequence, if there are fewer). Every
    /// shortest sequence extends exactly one of them. Sorted (ASCII order). As
    /// the prefixes of length `k - 1` are fewer than `min_count` and a board has
    /// at most 3 useful moves (4 from the start), fewer than `4 * min_count`
    /// prefixes are returned unless `k = D` (then there are
    /// [`SliderSpace::path_count`] of them).
    pub fn prefix_tasks(&self, min_count: usize) -> Vec<String> {
        let depth = self.prefix_depth(min_count) as usize;
        let mut out = Vec::new();
        self.prefixes_at(depth, |word, _| {
            out.push(String::from_utf8_lossy(word).into_owned());
        });
        out
    }

    /// Calls `visit(prefix, end node)` for every useful prefix of length
    /// `depth`, in ASCII order.
    fn prefixes_at(&self, depth: usize, mut visit: impl FnMut(&[u8], usize)) {
        let mut word: Vec<u8> = Vec::with_capacity(depth);
        // Explicit stack of (node, index of the next successor to try).
        let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
        while let Some(&(v, k)) = stack.last() {
            let succ = self.dag.successors(v);
            if stack.len() - 1 == depth || k == succ.len() {
                if stack.len() - 1 == depth {
                    visit(&word, v);
                }
                stack.pop();
                word.pop();
                continue;
            }
            if let Some(top) = stack.last_mut() {
                top.1 += 1;
            }
            let (w, letter) = succ[k];
            word.push(letter);
            stack.push((w as usize, 0));
        }
    }

    /// Number of shortest sequences extending `prefix` (a useful prefix, else
    /// `InvalidArgument`), saturating: the weight of its prefix task, read from
    /// the count of sequences from each board to the target.
    pub fn prefix_weight(&self, prefix: &str) -> Result<u128> {
        self.walk(prefix).map(|(v, _)| self.dag.to_target[v])
    }

    /// The weight of the heaviest prefix of length `depth <= D`: the largest
    /// number of sequences from a board of layer `depth` to the target.
    pub fn heaviest_prefix(&self, depth: u32) -> u128 {
        self.layer(depth as usize)
            .and_then(|range| range.map(|v| self.dag.to_target[v]).max())
            .unwrap_or(0)
    }

    /// The depth [`SliderSpace::balanced_prefix_tasks`] uses: the smallest depth
    /// at least [`SliderSpace::prefix_depth`]`(min_count)` whose heaviest prefix
    /// holds at most `1 / (4 * parts)` of all shortest sequences, but not beyond
    /// the last depth with at most `max(min_count, MAX_BALANCED_PREFIXES)`
    /// prefixes (nor beyond `D`).
    pub fn balanced_prefix_depth(&self, min_count: usize, parts: usize) -> u32 {
        let total = self.path_count();
        let share = 4 * parts.max(1) as u128;
        let cap = min_count.max(MAX_BALANCED_PREFIXES) as u128;
        let mut depth = self.prefix_depth(min_count);
        while depth < self.shortest
            && self.heaviest_prefix(depth).saturating_mul(share) > total
            && self.prefix_count(depth + 1) <= cap
        {
            depth += 1;
        }
        depth
    }

    /// The prefix tasks at [`SliderSpace::balanced_prefix_depth`], sorted, each
    /// with its weight (the number of shortest sequences extending it,
    /// saturating). The weights sum to [`SliderSpace::path_count`] (unless it
    /// saturates). With the heaviest task below `1 / (4 * parts)` of the total,
    /// `parts` groups of tasks can be made equal to within that much.
    pub fn balanced_prefix_tasks(&self, min_count: usize, parts: usize) -> Vec<(String, u128)> {
        let depth = self.balanced_prefix_depth(min_count, parts) as usize;
        let mut out = Vec::new();
        self.prefixes_at(depth, |word, v| {
            out.push((
                String::from_utf8_lossy(word).into_owned(),
                self.dag.to_target[v],
            ));
        });
        out
    }

    /// Follows `prefix` from the start along useful moves: (node, checksum).
    fn walk(&self, prefix: &str) -> Result<(usize, u64)> {
        let letters = super::move_letters(prefix, "prefix")?;
        if letters.len() > self.shortest as usize {
            return Err(invalid!(
                "prefix has {} moves, more than the shortest sequences ({})",
                letters.len(),
                self.shortest
            ));
        }
        let mut v = 0usize;
        let mut c = 0u64;
        for (i, &letter) in letters.iter().enumerate() {
            let Some(&(w, _)) = self.dag.successors(v).iter().find(|e| e.1 == letter) else {
                return Err(invalid!(
                    "prefix {prefix:?}: move {} ({}) does not lie on a shortest sequence",
                    i + 1,
                    letter as char
                ));
            };
            v = w as usize;
            c = self.arith.step(c, letter);
        }
        Ok((v, c))
    }

    /// Enumerates every shortest sequence extending `prefix` (a useful prefix,
    /// else `InvalidArgument`) by depth-first search along useful moves, with
    /// exact sums of the checksums. Polls `control`; its work units are the
    /// sequences found, so a finished prefix adds exactly its
    /// [`SliderSpace::prefix_weight`].
    pub fn enumerate(&self, prefix: &str, control: &Control) -> Result<PathSums> {
        control.check()?;
        let (root, c0) = self.walk(prefix)?;
        let target = (self.dag.nodes() - 1) as u32;
        let mut out = PathSums::default();
        if root == target as usize {
            out.count = 1;
            out.checksum_sum = u128::from(c0);
            control.add_work(1);
            return Ok(out);
        }
        let mut count = 0u128;
        let mut sum = 0u128;
        let mut stack: Vec<(u32, u64)> = vec![(root as u32, c0)];
        let mut expanded = 0u64;
        let mut reported = 0u128;
        while let Some((v, c)) = stack.pop() {
            expanded += 1;
            if expanded & (POLL_EVERY as u64 - 1) == 0 {
                control.add_work(units(count - reported));
                reported = count;
                control.check()?;
            }
            let bc = self.arith.base * c;
            for &(w, letter) in self.dag.successors(v as usize) {
                let c2 = self.arith.reduce(bc + u64::from(letter));
                if w == target {
                    count += 1;
                    sum += u128::from(c2);
                } else {
                    stack.push((w, c2));
                }
            }
        }
        control.add_work(units(count - reported));
        out.count = count;
        out.checksum_sum = sum;
        Ok(out)
    }

    /// The count of Section 7 of the seed, independent of the graph that
    /// [`SliderSpace::enumerate`] walks: it runs the search from the target
    /// (distances `dT` modulo 3, up to `D - 1`), then goes layer by layer from the
    /// start over the boards themselves, with every move tested against both
    /// distances (`dS(w) = i + 1`, `dS(w) + dT(w) = D`), and carries for every
    /// board the number of shortest sequences reaching it and the sum of their
    /// checksums modulo the modulus. Costs about one more search over the space.
    pub fn dp_totals(&self) -> DpTotals {
        // A fresh control is never cancelled, so only a failed allocation can
        // fail here, where `build` has just made the same allocations.
        self.dp_totals_checked(&Control::new())
            .expect("memory for the search from the target")
    }

    /// [`SliderSpace::dp_totals`], polling `control` (and adding the boards
    /// expanded) and reporting a failed allocation as an error.
    pub fn dp_totals_checked(&self, control: &Control) -> Result<DpTotals> {
        control.check()?;
        let Some(dist_start) = &self.dist_start else {
            return Err(invalid!(
                "the layer-by-layer count needs the search from the start, which a graph \
                 rebuilt from its layers does not have"
            ));
        };
        let mut dist_target = Dist3::new(self.layout.total())?;
        bfs(
            &self.layout,
            &mut dist_target,
            self.target,
            self.shortest.saturating_sub(1),
            control,
            |_, _| {},
        )?;
        struct Entry {
            board: State,
            count: u128,
            count_mod: u64,
            sum_mod: u64,
        }
        let p = self.arith.modulus;
        let d = self.shortest as usize;
        let mut layer = vec![Entry {
            board: self.start,
            count: 1,
            count_mod: 1 % p,
            sum_mod: 0,
        }];
        let mut slots: IndexMap<usize> = IndexMap::default();
        for i in 0..d {
            control.check()?;
            control.add_work(layer.len() as u64);
            let want_s = ((i + 1) % 3) as u8;
            let want_t = ((d - i - 1) % 3) as u8;
            let mut next: Vec<Entry> = Vec::new();
            slots.clear();
            for e in &layer {
                for m in self.layout.moves(e.board.blank()) {
                    let (w, letter) = (self.layout.apply(m, e.board), m.letter);
                    let iw = self.layout.index(w);
                    if dist_start.get(iw) != want_s || dist_target.get(iw) != want_t {
                        continue;
                    }
                    let slot = *slots.entry(iw).or_insert_with(|| {
                        next.push(Entry {
                            board: w,
                            count: 0,
                            count_mod: 0,
                            sum_mod: 0,
                        });
                        next.len() - 1
                    });
                    // C(w) += base * C(v) + letter * N(v), in u128: any modulus.
                    let pw = u128::from(p);
                    let add = (u128::from(self.arith.base) * u128::from(e.sum_mod)
                        + u128::from(letter) * u128::from(e.count_mod))
                        % pw;
                    let n = &mut next[slot];
                    n.count = n.count.saturating_add(e.count);
                    n.count_mod = ((u128::from(n.count_mod) + u128::from(e.count_mod)) % pw) as u64;
                    n.sum_mod = ((u128::from(n.sum_mod) + add) % pw) as u64;
                }
            }
            layer = next;
        }
        let (count, count_mod, sum_mod) = layer
            .iter()
            .find(|e| e.board == self.target)
            .map_or((0, 0, 0), |e| (e.count, e.count_mod, e.sum_mod));
        Ok(DpTotals {
            count,
            count_mod,
            checksum_sum_mod: sum_mod,
        })
    }
}

/// Largest number of prefixes [`SliderSpace::balanced_prefix_depth`] goes
/// deeper for (unless more are asked for).
pub const MAX_BALANCED_PREFIXES: usize = 1 << 16;

/// Work units (sequences) as a counter increment.
fn units(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn to_u32(n: usize) -> Result<u32> {
    u32::try_from(n)
        .map_err(|_| invalid!("the shortest-path graph is too large ({n} boards or moves)"))
}
