//! What a restore to the chosen point would lose of what the replica holds
//! after it, and whether that is more than the tail the replica had not
//! shipped yet.
//!
//! The shipper writes log segments in order, each only once the one before
//! it is written, so a listed segment proves that every change queued before
//! it was shipped too: a hole before a listed segment is a gap (a segment
//! missing), never a tail still unshipped. Missing segments after the last
//! listed one cannot be told from changes the coordinator had not shipped
//! when it was lost: those are the loss a replica allows (its lag). So a
//! restore loses no more than the last interval when, past its point, the
//! replica lists at most one segment of the point's generation (the last,
//! found damaged) and of newer generations only those the replica had not
//! protected yet (begun without a parent, their snapshot's log not yet
//! shipped through: the replica reports their wait as its lag).

use std::collections::{BTreeMap, HashSet};

/// The objects of one generation, from their names.
#[derive(Default, Debug)]
pub(super) struct Listed {
    pub manifest: bool,
    pub done: bool,
    /// Log segments by first change: last change, key.
    pub segments: BTreeMap<u64, (u64, String)>,
}

/// Changes of a generation no listed segment holds, before a listed one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    pub generation: u64,
    pub first: u64,
    pub last: u64,
}

/// What the replica holds of one generation past the point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unused {
    pub generation: u64,
    /// Its changes the replica proves were shipped (the holes included).
    pub changes: u64,
    pub segments: u64,
    /// Its last change listed.
    pub through: u64,
    /// Its segments refused as damaged.
    pub damaged: Vec<String>,
}

/// What a restore to `point` would lose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loss {
    /// Generation and change of the point.
    pub point: (u64, u64),
    pub gaps: Vec<Gap>,
    /// Past the point: its own generation's segments, and every newer
    /// generation's but the unprotected.
    pub unused: Vec<Unused>,
    /// Newer generations the replica had not protected yet, and their
    /// changes shipped.
    pub unprotected: Vec<(u64, u64)>,
}

impl Loss {
    /// Whether the restore loses nothing the replica holds.
    pub fn is_none(&self) -> bool {
        self.gaps.is_empty() && self.unused.is_empty() && self.unprotected.is_empty()
    }

    /// Whether it loses more than the tail the replica had not shipped: a
    /// gap, more than the last segment of the point's generation, or a
    /// protected newer generation's changes.
    pub fn beyond_last_interval(&self) -> bool {
        let (generation, _) = self.point;
        !self.gaps.is_empty()
            || self.unused.iter().any(|u| {
                (u.generation != generation && u.changes > 0)
                    || (u.generation == generation && u.segments > 1)
            })
    }

    /// In words, one line.
    pub fn describe(&self) -> String {
        let (generation, change) = self.point;
        let mut found: Vec<String> = Vec::new();
        for gap in &self.gaps {
            found.push(match gap.first == gap.last {
                true => format!(
                    "change {} of generation {} is missing (no log segment holds it)",
                    gap.first, gap.generation
                ),
                false => format!(
                    "changes {} to {} of generation {} are missing (no log segment holds them)",
                    gap.first, gap.last, gap.generation
                ),
            });
        }
        for unused in &self.unused {
            for key in &unused.damaged {
                found.push(format!("the log segment {key} is damaged"));
            }
        }
        let mut lost: Vec<String> = self
            .unused
            .iter()
            .map(|u| match u.generation == generation {
                true => format!(
                    "{} change(s) after it in {} segment(s), through change {}",
                    u.changes, u.segments, u.through
                ),
                false => format!(
                    "generation {}'s {} change(s) in {} segment(s)",
                    u.generation, u.changes, u.segments
                ),
            })
            .collect();
        lost.extend(self.unprotected.iter().map(|(g, changes)| {
            format!(
                "generation {g}'s {changes} change(s), shipped before its snapshot was whole \
                 (not yet protected)"
            )
        }));
        let mut line = found.join("; ");
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&format!(
            "the restore stops at change {change} of generation {generation} and loses {}",
            lost.join(" and ")
        ));
        line
    }
}

/// What the replica (`listed`, `bad` the objects refused as damaged) holds
/// past `point`, the generation and change a restore reaches; `unprotected`
/// names the newer generations the replica had not protected yet.
pub fn assess(
    point: (u64, u64),
    listed: &BTreeMap<u64, Listed>,
    bad: &HashSet<String>,
    unprotected: &HashSet<u64>,
) -> Loss {
    let (generation, change) = point;
    let mut loss = Loss {
        point,
        ..Loss::default()
    };
    for (&g, objects) in listed.range(generation..) {
        let after = if g == generation { change } else { 0 };
        let mut next = after + 1;
        let mut unused = Unused {
            generation: g,
            changes: 0,
            segments: 0,
            through: after,
            damaged: Vec::new(),
        };
        for (&first, (last, key)) in objects.segments.range(..) {
            if *last <= after {
                continue;
            }
            if first > next && !unprotected.contains(&g) {
                loss.gaps.push(Gap {
                    generation: g,
                    first: next,
                    last: first - 1,
                });
            }
            if bad.contains(key) {
                unused.damaged.push(key.clone());
            }
            unused.segments += 1;
            unused.through = unused.through.max(*last);
            next = next.max(last + 1);
        }
        unused.changes = unused.through - after;
        if unused.segments == 0 {
            continue;
        }
        match unprotected.contains(&g) {
            true => loss.unprotected.push((g, unused.changes)),
            false => loss.unused.push(unused),
        }
    }
    loss
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::format::segment_key;

    /// Generations with these segments (first, last), and their keys.
    fn replica(generations: &[(u64, &[(u64, u64)])]) -> BTreeMap<u64, Listed> {
        generations
            .iter()
            .map(|&(g, segments)| {
                let mut listed = Listed {
                    manifest: true,
                    done: true,
                    ..Listed::default()
                };
                for &(first, last) in segments {
                    let key = segment_key(g, first, last);
                    listed.segments.insert(first, (last, key));
                }
                (g, listed)
            })
            .collect()
    }

    fn none() -> HashSet<String> {
        HashSet::new()
    }

    #[test]
    fn a_log_ending_at_the_point_loses_nothing() {
        // The newest segment (16-20, say) missing looks the same: changes
        // not shipped yet, which no restore can tell from a lost segment.
        let listed = replica(&[(1, &[(1, 5), (6, 9), (10, 15)])]);
        let loss = assess((1, 15), &listed, &none(), &HashSet::new());
        assert!(loss.is_none(), "{loss:?}");
        assert!(!loss.beyond_last_interval());
    }

    #[test]
    fn a_missing_middle_segment_is_a_gap_naming_what_goes() {
        // 6-9 deleted: the restore reaches change 5.
        let listed = replica(&[(1, &[(1, 5), (10, 15), (16, 18)])]);
        let loss = assess((1, 5), &listed, &none(), &HashSet::new());
        assert_eq!(
            loss.gaps,
            vec![Gap {
                generation: 1,
                first: 6,
                last: 9
            }]
        );
        assert!(loss.beyond_last_interval());
        let said = loss.describe();
        assert!(
            said.contains("changes 6 to 9 of generation 1 are missing"),
            "{said}"
        );
        assert!(said.contains("stops at change 5 of generation 1"), "{said}");
        assert!(
            said.contains("13 change(s) after it in 2 segment(s), through change 18"),
            "{said}"
        );
    }

    #[test]
    fn a_missing_first_segment_after_the_snapshot_is_a_gap() {
        // The snapshot covers changes to 3; 4-7 deleted, so the restore
        // reaches only the snapshot's point.
        let listed = replica(&[(1, &[(1, 3), (8, 9)])]);
        let loss = assess((1, 3), &listed, &none(), &HashSet::new());
        assert_eq!(loss.gaps.len(), 1);
        assert_eq!((loss.gaps[0].first, loss.gaps[0].last), (4, 7));
        assert!(loss.beyond_last_interval());
        // And of a generation whose first segment after its parent's point
        // is missing: its change 1 on.
        let listed = replica(&[(1, &[(1, 3)]), (2, &[(3, 4)])]);
        let loss = assess((2, 0), &listed, &none(), &HashSet::new());
        assert_eq!((loss.gaps[0].first, loss.gaps[0].last), (1, 2));
        assert!(loss.describe().contains("changes 1 to 2 of generation 2"));
    }

    #[test]
    fn the_last_segment_damaged_is_the_last_interval_and_two_are_more() {
        let listed = replica(&[(1, &[(1, 5), (6, 9)])]);
        let bad: HashSet<String> = [segment_key(1, 6, 9)].into();
        let loss = assess((1, 5), &listed, &bad, &HashSet::new());
        assert!(loss.gaps.is_empty());
        assert!(!loss.is_none());
        assert!(!loss.beyond_last_interval(), "{loss:?}");
        assert!(loss.describe().contains("is damaged"));
        let listed = replica(&[(1, &[(1, 5), (6, 9), (10, 11)])]);
        let loss = assess((1, 5), &listed, &bad, &HashSet::new());
        assert!(loss.gaps.is_empty());
        assert!(loss.beyond_last_interval(), "{loss:?}");
    }

    #[test]
    fn a_newer_generation_lost_is_more_unless_it_was_not_protected_yet() {
        // Generation 2 refused (its parent's point not reached, say): its
        // changes go.
        let listed = replica(&[(1, &[(1, 5)]), (2, &[(1, 4)])]);
        let loss = assess((1, 5), &listed, &none(), &HashSet::new());
        assert!(loss.gaps.is_empty());
        assert!(loss.beyond_last_interval());
        assert!(loss.describe().contains("generation 2's 4 change(s)"));
        // Begun without a parent and its snapshot not whole: the replica
        // had not protected it, and said so in its lag.
        let unprotected: HashSet<u64> = [2].into();
        let loss = assess((1, 5), &listed, &none(), &unprotected);
        assert!(!loss.beyond_last_interval(), "{loss:?}");
        assert_eq!(loss.unprotected, vec![(2, 4)]);
        // A newer generation with nothing shipped loses nothing.
        let listed = replica(&[(1, &[(1, 5)]), (2, &[])]);
        assert!(assess((1, 5), &listed, &none(), &HashSet::new()).is_none());
    }
}
