//! The shards of a job's current stage, with the sums the scheduler asks for
//! on every call (shards done, work done, failed attempts) and the set of
//! leased shards kept up to date as the shards change, so that no call costs
//! time in proportion to the stage's size: with a million shards, a report,
//! a heartbeat or a progress view stays as cheap as with ten.
//!
//! *Invariant:* every change of a record goes through [`ShardTable::set`],
//! [`ShardTable::update`] or [`ShardTable::push`], so the sums always equal
//! what a scan of the records would give (checked in the tests).

use std::collections::BTreeSet;
use std::ops::Index;

use crate::records::{ShardRecord, ShardState};

#[derive(Clone, Default)]
pub(crate) struct ShardTable {
    records: Vec<ShardRecord>,
    done: u64,
    work_total: u64,
    work_done: u64,
    failed_attempts: u64,
    /// Indexes of the shards in state `Leased`.
    leased: BTreeSet<u32>,
}

/// A record's share of the work done: all of it once done, else what its
/// attempt has reported (never more than its total).
fn work_done_of(shard: &ShardRecord) -> u64 {
    if shard.state == ShardState::Done {
        shard.work_total
    } else {
        shard.work_done.min(shard.work_total)
    }
}

/// What one record adds to the table's sums.
#[derive(Clone, Copy)]
struct Share {
    done: bool,
    work_total: u64,
    work_done: u64,
    failed_attempts: u64,
    leased: bool,
}

impl Share {
    fn of(shard: &ShardRecord) -> Share {
        Share {
            done: shard.state == ShardState::Done,
            work_total: shard.work_total,
            work_done: work_done_of(shard),
            failed_attempts: u64::from(shard.failed_attempts),
            leased: shard.state == ShardState::Leased,
        }
    }
}

impl ShardTable {
    fn add(&mut self, share: Share, position: usize) {
        self.done += u64::from(share.done);
        self.work_total += share.work_total;
        self.work_done += share.work_done;
        self.failed_attempts += share.failed_attempts;
        if share.leased {
            self.leased.insert(position as u32);
        }
    }

    fn subtract(&mut self, share: Share, position: usize) {
        self.done -= u64::from(share.done);
        self.work_total -= share.work_total;
        self.work_done -= share.work_done;
        self.failed_attempts -= share.failed_attempts;
        if share.leased {
            self.leased.remove(&(position as u32));
        }
    }

    pub(crate) fn push(&mut self, shard: ShardRecord) {
        self.add(Share::of(&shard), self.records.len());
        self.records.push(shard);
    }

    /// Replaces the record at `position`; returns the one it replaced.
    pub(crate) fn set(&mut self, position: usize, shard: ShardRecord) -> ShardRecord {
        self.subtract(Share::of(&self.records[position]), position);
        self.add(Share::of(&shard), position);
        std::mem::replace(&mut self.records[position], shard)
    }

    /// Changes the record at `position` in place.
    pub(crate) fn update<R>(
        &mut self,
        position: usize,
        change: impl FnOnce(&mut ShardRecord) -> R,
    ) -> R {
        let before = Share::of(&self.records[position]);
        let result = change(&mut self.records[position]);
        let after = Share::of(&self.records[position]);
        self.subtract(before, position);
        self.add(after, position);
        result
    }

    pub(crate) fn clear(&mut self) {
        *self = ShardTable::default();
    }

    /// Orders the records by shard index (after loading them in store order).
    pub(crate) fn sort_by_index(&mut self) {
        self.records.sort_by_key(|s| s.index);
        let records = std::mem::take(&mut self.records);
        self.clear();
        for shard in records {
            self.push(shard);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, ShardRecord> {
        self.records.iter()
    }

    pub(crate) fn as_slice(&self) -> &[ShardRecord] {
        &self.records
    }

    pub(crate) fn get(&self, position: usize) -> Option<&ShardRecord> {
        self.records.get(position)
    }

    /// Whether every shard is done (true for a stage with none).
    pub(crate) fn all_done(&self) -> bool {
        self.done == self.records.len() as u64
    }

    pub(crate) fn done(&self) -> u64 {
        self.done
    }

    pub(crate) fn work_total(&self) -> u64 {
        self.work_total
    }

    pub(crate) fn work_done(&self) -> u64 {
        self.work_done
    }

    pub(crate) fn failed_attempts(&self) -> u64 {
        self.failed_attempts
    }

    /// Positions of the leased shards, in order.
    pub(crate) fn leased(&self) -> impl Iterator<Item = usize> + '_ {
        self.leased.iter().map(|&i| i as usize)
    }

    /// How many shards are leased.
    pub(crate) fn leased_count(&self) -> usize {
        self.leased.len()
    }
}

impl Index<usize> for ShardTable {
    type Output = ShardRecord;

    fn index(&self, position: usize) -> &ShardRecord {
        &self.records[position]
    }
}

#[cfg(test)]
mod tests {
    use tally_kernels::test_rng::Rng;
    use tally_kinds::values::EncodedTask;

    use super::*;

    fn shard(index: u32, rng: &mut Rng) -> ShardRecord {
        let work_total = rng.range(0, 100);
        let mut shard = ShardRecord::planned(
            "job-000001",
            1,
            index,
            EncodedTask::encode(&index),
            work_total,
        );
        shard.state = *rng.pick(&[ShardState::Pending, ShardState::Leased, ShardState::Done]);
        shard.failed_attempts = rng.below(4);
        // Sometimes above the total, as a late progress report can be.
        shard.work_done = rng.range(0, 120);
        shard
    }

    /// The table's sums against a scan of its records.
    fn assert_consistent(table: &ShardTable) {
        let records = table.as_slice();
        let done = records.iter().filter(|s| s.state == ShardState::Done);
        assert_eq!(table.done(), done.count() as u64);
        assert_eq!(
            table.all_done(),
            records.iter().all(|s| s.state == ShardState::Done)
        );
        assert_eq!(
            table.work_total(),
            records.iter().map(|s| s.work_total).sum::<u64>()
        );
        assert_eq!(
            table.work_done(),
            records.iter().map(work_done_of).sum::<u64>()
        );
        let failed = records.iter().map(|s| u64::from(s.failed_attempts));
        assert_eq!(table.failed_attempts(), failed.sum::<u64>());
        let leased: Vec<usize> = (0..records.len())
            .filter(|&i| records[i].state == ShardState::Leased)
            .collect();
        assert_eq!(table.leased().collect::<Vec<_>>(), leased);
    }

    #[test]
    fn the_sums_follow_every_change() {
        let mut rng = Rng::new(15);
        let mut table = ShardTable::default();
        assert!(
            table.all_done(),
            "a stage with no shards has nothing left to do"
        );
        for index in (0..200).rev() {
            table.push(shard(index, &mut rng));
        }
        assert_consistent(&table);
        table.sort_by_index();
        assert!(table.iter().enumerate().all(|(i, s)| s.index as usize == i));
        assert_consistent(&table);
        for _ in 0..5_000 {
            let position = rng.below(200usize);
            if rng.chance(50) {
                let replacement = shard(position as u32, &mut rng);
                let old = table[position].clone();
                assert_eq!(table.set(position, replacement), old);
            } else {
                let state = *rng.pick(&[ShardState::Pending, ShardState::Leased, ShardState::Done]);
                let work = rng.range(0, 120);
                table.update(position, |s| {
                    s.state = state;
                    s.work_done = work;
                    s.failed_attempts += 1;
                });
            }
            assert_consistent(&table);
        }
        for position in 0..200 {
            table.update(position, |s| s.state = ShardState::Done);
        }
        assert!(table.all_done());
        assert_consistent(&table);
        table.clear();
        assert_eq!((table.len(), table.work_total()), (0, 0));
    }
}
