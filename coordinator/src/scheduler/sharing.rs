//! A cluster shared by its users: who may touch which job, the quotas a
//! submission and a lease are held to, each user's metered slot time (the
//! fair share's measure, and their account), and the audit log.
//!
//! *Fair share:* a user's usage is the slot-milliseconds their jobs' shards
//! have held, halved every half-life so that history fades. A free slot goes
//! to the user with work whose usage over weight is least (ties: fewer slots
//! held over weight, then the name), so over time users with work get slot
//! time in the ratio of their weights, and a user alone gets every slot.
//! Priorities order jobs within a user.
//!
//! *Metering is exact:* every call runs [`Scheduler::meter`] before it
//! changes anything, and leases change only inside calls, so the leases
//! counted at one call held for the whole time until the next.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::error::{CoordinatorError, Result};
use crate::records::{AUDIT_PREFIX, AuditRecord, audit_key, decode, encode};
use crate::store::{Batch, Tree};
use crate::users::{Quotas, User, Users, Visibility};

use super::accounts::{AUDIT_KEEP, Access, Account};

use super::state::Scheduler;
use super::views::ListPage;
use tally_wire::proto;

impl Scheduler {
    /// The users from now on (at start, and at each reload of the file).
    pub fn set_users(&mut self, users: Arc<Users>) {
        self.sharing.users = users;
    }

    pub fn users(&self) -> &Arc<Users> {
        &self.sharing.users
    }

    /// Adds the time since the last call to the slot time of every job that
    /// holds leases, and of its owner (decaying what each user had). A
    /// worker's slots are shared among the shards it holds: one that holds
    /// more than its slots (shards leased ahead, queued behind the running
    /// ones) gives each its slots over the shards it holds.
    pub fn meter(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.sharing.as_of_ms);
        if elapsed == 0 {
            return;
        }
        let half_life = self.config.fair_share_half_life_ms.max(1) as f64;
        let decay = (-(elapsed as f64) / half_life).exp2();
        for used in self.sharing.usage.values_mut() {
            *used *= decay;
        }
        let held_by_worker = self.held_by_worker();
        let share = |worker: Option<&str>| -> f64 {
            let Some(worker) = worker else {
                return 1.0;
            };
            let held = held_by_worker.get(worker).copied().unwrap_or(1).max(1);
            let slots = self
                .workers
                .all()
                .get(worker)
                .map_or(held, |w| w.slots.max(1));
            (f64::from(slots) / f64::from(held)).min(1.0)
        };
        let mut metered: Vec<(String, f64)> = Vec::new();
        for entry in self.jobs.iter() {
            if entry.shards.leased_count() == 0 {
                continue;
            }
            let slots: f64 = (entry.shards.leased())
                .map(|i| share(entry.shards[i].worker.as_deref()))
                .sum();
            metered.push((entry.rec.id.clone(), slots * elapsed as f64));
        }
        for (id, slot_ms) in metered {
            let entry = self.jobs.known(&id);
            let whole = entry.slot_ms_fraction + slot_ms;
            entry.rec.slot_ms += whole.floor() as u64;
            entry.slot_ms_fraction = whole.fract();
            // The slot time of the interval, decayed from its middle.
            let counted = slot_ms * (decay + 1.0) / 2.0;
            let sharing = &mut self.sharing;
            match sharing.usage.get_mut(entry.rec.owner()) {
                Some(used) => *used += counted,
                None => {
                    sharing.usage.insert(entry.rec.owner().to_string(), counted);
                }
            }
        }
        // A slot-millisecond is nothing against any share.
        self.sharing.usage.retain(|_, used| *used >= 1.0);
        self.sharing.as_of_ms = now_ms;
    }

    /// Shards each worker holds now, of every job.
    fn held_by_worker(&self) -> HashMap<&str, u32> {
        let mut held: HashMap<&str, u32> = HashMap::new();
        for entry in self.jobs.iter().filter(|e| e.shards.leased_count() > 0) {
            for i in entry.shards.leased() {
                if let Some(worker) = entry.shards[i].worker.as_deref() {
                    *held.entry(worker).or_default() += 1;
                }
            }
        }
        held
    }

    /// The fair share's order of users: least decayed slot time over weight
    /// first.
    pub(super) fn usage_over_weight(&self, user: &str, weight: u32) -> f64 {
        self.sharing.usage.get(user).copied().unwrap_or(0.0) / f64::from(weight.max(1))
    }

    /// Shards of `owner`'s jobs leased now.
    pub(super) fn slots_held_by(&self, owner: &str) -> u32 {
        self.jobs
            .iter()
            .filter(|e| e.rec.owner() == owner)
            .map(|e| e.shards.leased_count() as u32)
            .sum()
    }

    /// What `user`'s jobs hold and have used.
    pub fn account(&self, user: &str) -> Account {
        self.accounts_of(|owner| owner == user)
            .remove(user)
            .unwrap_or_else(|| Account {
                decayed_slot_seconds: self.decayed_seconds(user),
                ..Account::default()
            })
    }

    /// The accounts of every user the users file names (and the client
    /// token's admin), in one pass over the jobs: for the metrics.
    pub fn accounts(&self) -> BTreeMap<String, Account> {
        let users = self.sharing.users.clone();
        let mut accounts = self.accounts_of(|owner| users.named(owner).is_some());
        for user in users.all() {
            accounts
                .entry(user.name.clone())
                .or_insert_with(|| Account {
                    decayed_slot_seconds: self.decayed_seconds(&user.name),
                    ..Account::default()
                });
        }
        accounts
    }

    fn decayed_seconds(&self, user: &str) -> f64 {
        self.sharing.usage.get(user).copied().unwrap_or(0.0) / 1000.0
    }

    /// The accounts of the owners `wanted` picks, of those who own a job.
    fn accounts_of(&self, wanted: impl Fn(&str) -> bool) -> BTreeMap<String, Account> {
        let mut accounts: BTreeMap<String, (Account, u64)> = BTreeMap::new();
        let mut add = |owner: &str, add: &dyn Fn(&mut Account, &mut u64)| {
            if !wanted(owner) {
                return;
            }
            let (account, slot_ms) = accounts.entry(owner.to_string()).or_insert_with(|| {
                let fresh = Account {
                    decayed_slot_seconds: self.decayed_seconds(owner),
                    ..Account::default()
                };
                (fresh, 0)
            });
            add(account, slot_ms);
        };
        for entry in self.jobs.iter() {
            add(entry.rec.owner(), &|account, slot_ms| {
                account.jobs += 1;
                account.slots_held += entry.shards.leased_count() as u32;
                *slot_ms += entry.rec.slot_ms;
                account.shards_done += match entry.rec.final_counts {
                    Some(counts) => counts.shards_done,
                    None => entry.shards_done_before + entry.shards.done(),
                };
                if !entry.rec.state.is_finished() {
                    account.jobs_unfinished += 1;
                    account.stage_bytes += entry.outputs.input_bytes().unwrap_or(0);
                }
            });
        }
        for refused in self.jobs.refused_jobs() {
            add(refused.rec.owner(), &|account, slot_ms| {
                account.jobs += 1;
                *slot_ms += refused.rec.slot_ms;
            });
        }
        (accounts.into_iter())
            .map(|(owner, (mut account, slot_ms))| {
                account.slot_seconds = slot_ms as f64 / 1000.0;
                (owner, account)
            })
            .collect()
    }

    /// Whether `user` may do `access` to job `id`: an admin may do anything,
    /// a user anything to their own jobs and, unless the coordinator shows
    /// users only their own jobs, see the others'. A refusal is written to
    /// the audit log.
    pub fn authorize(&mut self, user: &User, id: &str, access: Access, now_ms: u64) -> Result<()> {
        if user.is_admin() {
            return Ok(());
        }
        let owner = match (self.jobs.get(id), self.jobs.refused(id)) {
            (Ok(entry), _) => entry.rec.owner().to_string(),
            (_, Some(refused)) => refused.rec.owner().to_string(),
            // Deleted or never given: the call says so itself.
            (Err(_), None) => return Ok(()),
        };
        let allowed = owner == user.name
            || (access == Access::See && self.sharing.users.visibility == Visibility::All);
        if allowed {
            return Ok(());
        }
        let message = match access {
            Access::See => format!(
                "{} may not see job {id}: it is {owner}'s, and this coordinator shows users only their own jobs",
                user.name
            ),
            _ => format!(
                "{} may not {} job {id}: it is {owner}'s (only its owner or an admin may)",
                user.name,
                access.verb()
            ),
        };
        self.refuse(user, access.action(), id, &message, now_ms)?;
        Err(CoordinatorError::PermissionDenied(message))
    }

    /// A page of the jobs `user` may see: on a coordinator that shows users
    /// only their own jobs, a user's list is of their own, and asking for
    /// another's is refused (and audited).
    pub fn list_page_for(
        &mut self,
        user: &User,
        mut page: ListPage,
        now_ms: u64,
    ) -> Result<(Vec<proto::Job>, String)> {
        if !user.is_admin() && self.sharing.users.visibility == Visibility::Own {
            match &page.owner {
                Some(other) if *other != user.name => {
                    let message = format!(
                        "{} may not list {other}'s jobs: this coordinator shows users only their \
                         own jobs",
                        user.name
                    );
                    self.refuse(user, "see", "", &message, now_ms)?;
                    return Err(CoordinatorError::PermissionDenied(message));
                }
                _ => page.owner = Some(user.name.clone()),
            }
        }
        Ok(self.list_page(&page, now_ms))
    }

    /// Refuses a submission past one of `user`'s quotas, with the numbers
    /// (written to the audit log).
    pub(super) fn check_submit_quotas(&mut self, user: &User, now_ms: u64) -> Result<()> {
        let Quotas {
            queued_jobs,
            stage_bytes,
            ..
        } = user.quotas;
        if queued_jobs.is_none() && stage_bytes.is_none() {
            return Ok(());
        }
        let account = self.account(&user.name);
        let over = match (queued_jobs, stage_bytes) {
            (Some(most), _) if account.jobs_unfinished >= most => Some(format!(
                "{} has {} jobs queued or running, and their quota is {most}: wait for one to \
                 finish, or cancel one",
                user.name, account.jobs_unfinished
            )),
            (_, Some(most)) if account.stage_bytes >= most => Some(format!(
                "{}'s unfinished jobs hold {} bytes of stage data, and their quota is {most}: \
                 wait for one to finish, or cancel one",
                user.name, account.stage_bytes
            )),
            _ => None,
        };
        match over {
            None => Ok(()),
            Some(message) => {
                self.refuse(user, "submit", "", &message, now_ms)?;
                Err(CoordinatorError::ResourceExhausted(message))
            }
        }
    }

    /// Writes a refusal to the audit log, in a batch of its own.
    pub(super) fn refuse(
        &mut self,
        user: &User,
        action: &str,
        job: &str,
        message: &str,
        now_ms: u64,
    ) -> Result<()> {
        tracing::warn!(user = %user.name, action, job, "refused: {message}");
        let mut batch = Batch::default();
        self.audit(&mut batch, now_ms, &user.name, action, job, false, message);
        self.write(batch)
    }

    /// Adds an audit entry to `batch` (and lets the oldest go past
    /// [`AUDIT_KEEP`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn audit(
        &mut self,
        batch: &mut Batch,
        now_ms: u64,
        user: &str,
        action: &str,
        job: &str,
        done: bool,
        message: &str,
    ) {
        let sharing = &mut self.sharing;
        let entry = AuditRecord {
            seq: sharing.audit_next,
            time_ms: now_ms,
            user: user.into(),
            action: action.into(),
            job: job.into(),
            done,
            message: message.into(),
        };
        batch.put(Tree::Events, audit_key(entry.seq), encode(&entry));
        sharing.audit_next += 1;
        while sharing.audit_next - sharing.audit_first > AUDIT_KEEP {
            batch.remove(Tree::Events, audit_key(sharing.audit_first));
            sharing.audit_first += 1;
        }
    }

    /// Audit entries from sequence `from` on, at most `most`; only `user`'s
    /// when given.
    pub fn audit_log(
        &self,
        from: u64,
        most: usize,
        user: Option<&str>,
    ) -> Result<Vec<AuditRecord>> {
        let mut entries = Vec::new();
        for (key, bytes) in self.store.scan_prefix(Tree::Events, AUDIT_PREFIX)? {
            if key.as_slice() < audit_key(from).as_slice() {
                continue;
            }
            let entry = decode::<AuditRecord>("audit entry", &bytes)?;
            if user.is_some_and(|u| u != entry.user) {
                continue;
            }
            entries.push(entry);
            if entries.len() >= most {
                break;
            }
        }
        Ok(entries)
    }
}
