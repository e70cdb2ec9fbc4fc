//! Grouping weighted work into shards of about equal weight.

/// Groups weighted tasks into `parts` groups (fewer if there are fewer tasks)
/// of about equal total weight, by the longest-processing-time rule: the tasks
/// in decreasing weight (ties: lower index first) each go to the group with the
/// least weight so far (ties: lower group first). Deterministic. Each group
/// lists its task indices in increasing order. A group's weight differs from
/// the mean by at most the heaviest task; in practice far less, because the
/// light tasks placed last fill the gaps the heavy ones left.
pub fn group_by_weight(weights: &[u128], parts: usize) -> Vec<Vec<usize>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    if weights.is_empty() {
        return Vec::new();
    }
    let parts = parts.clamp(1, weights.len());
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| weights[b].cmp(&weights[a]).then(a.cmp(&b)));
    let mut loads: BinaryHeap<Reverse<(u128, usize)>> =
        (0..parts).map(|g| Reverse((0, g))).collect();
    let mut groups = vec![Vec::new(); parts];
    for i in order {
        let Reverse((load, g)) = loads.pop().expect("parts >= 1");
        groups[g].push(i);
        loads.push(Reverse((load.saturating_add(weights[i]), g)));
    }
    for group in &mut groups {
        group.sort_unstable();
    }
    groups
}
