//! Which data directory a stage-store prefix belongs to. A copied data
//! directory (a restored backup, a cloned machine) has the same prefix as
//! its original; two coordinators on it would hand out the same job ids
//! there and each sweep would delete the other's blobs. So the prefix holds
//! owner records: `owner/EPOCH`, each written only if no record of that
//! epoch exists yet (a create-if-absent put), holding a random nonce the
//! holder drew at its start and its data directory keeps. The latest epoch
//! is the holder. The holder writes the next epoch now and then (renewal), and
//! one marked released when it stops cleanly; a coordinator starting on the
//! prefix takes the next epoch only if the latest record is its own data
//! directory's (its nonce), and, if that one was not released, only once it
//! has seen it go unrenewed for a while (else a copy of this directory is
//! running on it). A holder that finds a later epoch than its own has lost
//! the prefix and writes and deletes nothing there. A record also carries the
//! holder's coordinator epoch and the job numbers it reserves, for a restore
//! from the prefix's replica, and, once a restore took the prefix, the epoch
//! it took it at (the data directory it replaced must never serve again).

use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use tally_kinds::Control;

use crate::error::{Result, StageError};
use crate::store::StageStore;

/// Where the owner records are, under the data directory's prefix.
const OWNER_DIR: &str = "owner";

/// A record not released is watched for this many renewals before its data
/// directory's next start takes it back (no renewal: its holder is gone).
pub const WATCHED_RENEWALS: u32 = 3;

/// One owner record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    /// Its place in the sequence: the latest is the holder.
    pub epoch: u64,
    /// Drawn by the holder at its start; its data directory keeps it.
    pub nonce: String,
    /// The holder's data directory, as it named it (for messages).
    pub data: String,
    /// When the holder took the prefix (ms since the Unix epoch).
    pub since_ms: u64,
    /// Written by a holder stopping cleanly: its data directory may take
    /// the prefix again at once.
    pub released: bool,
    /// The holder's coordinator epoch (the high half of its attempt
    /// numbers): a coordinator restored from the prefix's replica serves
    /// above it, so workers that have seen it refuse the holder's leases.
    pub serving: u64,
    /// The holder hands out job numbers below this only: a restore raises
    /// its job counter to it, so no job id is ever given twice.
    pub ids_below: u64,
    /// The epoch at which a coordinator restored from the prefix's replica
    /// took the prefix, carried by every later record of its data
    /// directory: the data directory it took it from was superseded, not
    /// copied. `None` in records of earlier releases.
    pub restored_at: Option<u64>,
}

impl OwnerRecord {
    fn key(epoch: u64) -> String {
        format!("{OWNER_DIR}/{epoch:020}")
    }

    fn encode(&self) -> String {
        format!(
            "tally stage-store owner\nepoch {}\nnonce {}\ndata {}\nsince {}\nstate {}\nserving {}\nids-below {}\n",
            self.epoch,
            self.nonce,
            self.data,
            self.since_ms,
            if self.released { "released" } else { "held" },
            self.serving,
            self.ids_below,
        ) + &self
            .restored_at
            .map_or_else(String::new, |e| format!("restored-at {e}\n"))
    }

    fn decode(epoch: u64, text: &str) -> Option<OwnerRecord> {
        let mut lines = text.lines();
        if lines.next()? != "tally stage-store owner" {
            return None;
        }
        let fields: std::collections::HashMap<&str, &str> =
            lines.filter_map(|l| l.split_once(' ')).collect();
        Some(OwnerRecord {
            epoch,
            nonce: fields.get("nonce")?.to_string(),
            data: fields.get("data").unwrap_or(&"").to_string(),
            since_ms: fields.get("since")?.parse().ok()?,
            released: *fields.get("state")? == "released",
            // Records of earlier releases lack them.
            serving: match fields.get("serving") {
                Some(v) => v.parse().ok()?,
                None => 0,
            },
            ids_below: match fields.get("ids-below") {
                Some(v) => v.parse().ok()?,
                None => 0,
            },
            restored_at: match fields.get("restored-at") {
                Some(v) => Some(v.parse().ok()?),
                None => None,
            },
        })
    }

    /// The holder, in words: "the data directory /var/lib/tally (since …)".
    pub fn holder(&self) -> String {
        let since = std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.since_ms);
        format!(
            "the data directory {} (holding it since {})",
            self.data,
            humantime::format_rfc3339_seconds(since)
        )
    }
}

/// What a coordinator starting on a prefix may do, given its latest owner
/// record and the nonces its data directory wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Take the prefix with this epoch: nobody held it, or this data
    /// directory did and released it.
    Take { epoch: u64 },
    /// This data directory held it and did not release it: it stopped
    /// uncleanly, or a copy of it is running on the prefix. Take it only if
    /// the record goes unrenewed while watched.
    Watch(OwnerRecord),
    /// Another data directory holds it.
    Clash(OwnerRecord),
}

impl Claim {
    pub fn of(latest: Option<&OwnerRecord>, ours: &[String]) -> Claim {
        match latest {
            None => Claim::Take { epoch: 1 },
            Some(record) if !ours.contains(&record.nonce) => Claim::Clash(record.clone()),
            Some(record) if record.released => Claim::Take {
                epoch: record.epoch + 1,
            },
            Some(record) => Claim::Watch(record.clone()),
        }
    }
}

impl StageStore {
    /// The latest owner record of this store's prefix, if any.
    pub async fn owner(&self) -> Result<Option<OwnerRecord>> {
        // The holder may renew between the listing and the read (and delete
        // the record listed): then the listing is read again.
        for _ in 0..5 {
            let Some(epoch) = self.owner_epochs().await?.into_iter().max() else {
                return Ok(None);
            };
            let key = OwnerRecord::key(epoch);
            let path = Path::from(key.as_str());
            let control = Control::default();
            let read = self
                .patiently("read", &key, &control, || async {
                    match self.inner.get(&path).await {
                        Ok(got) => got.bytes().await.map(Some),
                        Err(object_store::Error::NotFound { .. }) => Ok(None),
                        Err(e) => Err(e),
                    }
                })
                .await?;
            let Some(bytes) = read else { continue };
            return match OwnerRecord::decode(epoch, &String::from_utf8_lossy(&bytes)) {
                Some(record) => Ok(Some(record)),
                None => Err(StageError::Refused(format!(
                    "the owner record {key} of {} is damaged; delete it if no coordinator uses this prefix",
                    self.url()
                ))),
            };
        }
        Err(StageError::Unavailable(format!(
            "the owner records of {} changed at every read",
            self.url()
        )))
    }

    /// Writes `record` unless a record of its epoch exists already; false
    /// then (another coordinator took that epoch first). A record of the
    /// epoch with `record`'s nonce is this one (a write that succeeded but
    /// whose answer was lost, then tried again).
    pub async fn put_owner(&self, record: &OwnerRecord) -> Result<bool> {
        let key = OwnerRecord::key(record.epoch);
        let path = Path::from(key.as_str());
        let bytes = bytes::Bytes::from(record.encode());
        let control = Control::default();
        let created = self
            .patiently("write", &key, &control, || {
                let (path, bytes) = (path.clone(), bytes.clone());
                async move {
                    let create = PutOptions::from(PutMode::Create);
                    match self
                        .inner
                        .put_opts(&path, PutPayload::from(bytes), create)
                        .await
                    {
                        Ok(_) => Ok(true),
                        Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
                        Err(e) => Err(e),
                    }
                }
            })
            .await?;
        if created {
            return Ok(true);
        }
        let existing = self
            .patiently("read", &key, &control, || async {
                self.inner.get(&path).await?.bytes().await
            })
            .await?;
        let existing = OwnerRecord::decode(record.epoch, &String::from_utf8_lossy(&existing));
        Ok(existing.is_some_and(|e| e.nonce == record.nonce))
    }

    /// Waits [`WATCHED_RENEWALS`] renewals (every `renew_every`), reading
    /// the owner records: the record later than `record` if one appears (its
    /// holder is alive), `None` if none does.
    pub async fn watch_owner(
        &self,
        record: &OwnerRecord,
        renew_every: Duration,
    ) -> Result<Option<OwnerRecord>> {
        let watch_for = renew_every * WATCHED_RENEWALS;
        tracing::info!(store = %self.url(), ?watch_for, "watching the stage-store prefix's owner record");
        let deadline = tokio::time::Instant::now() + watch_for;
        let every = (renew_every / 2).max(Duration::from_millis(50));
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(every.min(deadline - now)).await;
            let latest = self.owner().await?;
            if latest.as_ref().map(|r| r.epoch) != Some(record.epoch) {
                // Records are never removed but by a later holder: a later one.
                return Ok(Some(latest.unwrap_or_else(|| record.clone())));
            }
        }
    }

    /// Deletes the owner records older than `epoch`: only the latest counts.
    pub async fn remove_owners_before(&self, epoch: u64) -> Result<()> {
        for old in self.owner_epochs().await? {
            if old < epoch {
                self.delete(&OwnerRecord::key(old)).await?;
            }
        }
        Ok(())
    }

    async fn owner_epochs(&self) -> Result<Vec<u64>> {
        let keys = self.list(Some(OWNER_DIR)).await?;
        Ok(keys
            .iter()
            .filter_map(|k| k.strip_prefix(OWNER_DIR)?.strip_prefix('/')?.parse().ok())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::url::StageStoreUrl;

    fn record(epoch: u64, nonce: &str, released: bool) -> OwnerRecord {
        OwnerRecord {
            epoch,
            nonce: nonce.into(),
            data: "/var/lib/tally".into(),
            since_ms: 1_700_000_000_000,
            released,
            serving: 3,
            ids_below: 100 + epoch,
            restored_at: None,
        }
    }

    #[test]
    fn a_start_takes_a_prefix_only_from_its_own_data_directory() {
        let ours = vec!["n1".to_string(), "n2".to_string()];
        assert_eq!(Claim::of(None, &ours), Claim::Take { epoch: 1 });
        let released = record(4, "n2", true);
        assert_eq!(Claim::of(Some(&released), &ours), Claim::Take { epoch: 5 });
        let held = record(4, "n1", false);
        assert_eq!(Claim::of(Some(&held), &ours), Claim::Watch(held.clone()));
        for other in [record(4, "n3", true), record(4, "n3", false)] {
            assert_eq!(Claim::of(Some(&other), &ours), Claim::Clash(other.clone()));
        }
        assert!(released.holder().contains("/var/lib/tally"));
        assert!(released.holder().contains("2023-11-14T22:13:20Z"));
    }

    #[test]
    fn a_record_of_a_restore_says_so_and_older_records_still_read() {
        let restored = OwnerRecord {
            restored_at: Some(7),
            ..record(9, "n1", false)
        };
        let text = restored.encode();
        assert!(text.ends_with("restored-at 7\n"), "{text}");
        assert_eq!(OwnerRecord::decode(9, &text), Some(restored));
        let plain = record(9, "n1", false);
        assert!(!plain.encode().contains("restored-at"));
        assert_eq!(OwnerRecord::decode(9, &plain.encode()), Some(plain));
        // As an earlier release wrote it.
        let old = "tally stage-store owner\nepoch 2\nnonce n\ndata /d\nsince 5\nstate held\n";
        let read = OwnerRecord::decode(2, old).unwrap();
        assert_eq!(
            (read.restored_at, read.serving, read.ids_below),
            (None, 0, 0)
        );
    }

    #[tokio::test]
    async fn an_epoch_is_written_once_and_the_latest_is_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let url = StageStoreUrl::File(dir.path().to_path_buf());
        let store = StageStore::open(&url).unwrap().unwrap();
        assert_eq!(store.owner().await.unwrap(), None);
        assert!(store.put_owner(&record(1, "a", false)).await.unwrap());
        assert!(!store.put_owner(&record(1, "b", false)).await.unwrap());
        // The same record again (its first answer lost): it is there.
        assert!(store.put_owner(&record(1, "a", false)).await.unwrap());
        assert_eq!(store.owner().await.unwrap(), Some(record(1, "a", false)));
        assert!(store.put_owner(&record(2, "a", true)).await.unwrap());
        assert_eq!(store.owner().await.unwrap(), Some(record(2, "a", true)));
        store.remove_owners_before(2).await.unwrap();
        assert_eq!(store.owner_epochs().await.unwrap(), vec![2]);
        // Blobs are listed under `jobs`: the sweep never sees the records.
        assert!(store.list(Some("jobs")).await.unwrap().is_empty());
        std::fs::write(dir.path().join("owner/00000000000000000003"), "garbage").unwrap();
        let err = store.owner().await.unwrap_err().to_string();
        assert!(err.contains("damaged"), "{err}");
    }
}
