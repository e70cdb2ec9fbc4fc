//! What the worker's tasks share: its configuration, the connection to the
//! coordinator, the compute pool, the running shards and the counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tally_common::Control;
use tally_common::dynamic::StageInput;
use tally_common::proto::worker_service_client::WorkerServiceClient;
use tally_common::transport::{AuthChannel, ClientSecurity};
use tally_common::wire::MAX_MESSAGE_BYTES;
use tokio::sync::Notify;

use crate::config::WorkerConfig;
use crate::error::{Result, WorkerError};
use crate::metrics::{Gauges, WorkerStats};
use crate::pool::ComputePool;

pub(crate) type Client = WorkerServiceClient<AuthChannel>;

/// Connects lazily (the coordinator may not be up yet) with the message limits.
pub fn connect(url: &str, security: &ClientSecurity) -> Result<Client> {
    let channel = tally_common::transport::lazy_channel(url, security)
        .map_err(|e| WorkerError::Address(url.to_string(), e.to_string()))?;
    Ok(WorkerServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// A running shard as the worker's other tasks see it.
#[derive(Default)]
pub(crate) struct ShardHandle {
    pub control: Control,
    /// Set when the coordinator no longer wants this attempt (revoked lease,
    /// refused report): the shard then stops without a final report.
    revoked: AtomicBool,
}

impl ShardHandle {
    pub(crate) fn revoke(&self) {
        self.revoked.store(true, Ordering::Relaxed);
        self.control.cancel();
    }

    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Relaxed)
    }
}

/// The decoded output of a stage, for (job, stage, bucket).
pub(crate) type CachedStage = ((String, u32, Option<u32>), StageInput);

pub(crate) struct Context {
    pub config: WorkerConfig,
    client: Client,
    pub pool: ComputePool,
    /// The running shards by lease id.
    active: Mutex<HashMap<String, Arc<ShardHandle>>>,
    slot_freed: Notify,
    /// The decoded output of the last stage fetched.
    pub stage_cache: tokio::sync::Mutex<Option<CachedStage>>,
    pub stats: Arc<WorkerStats>,
    /// The session of the current registration; empty before the first.
    session: Mutex<String>,
    /// Set when a call was refused for its session (the coordinator restarted
    /// or forgot this worker): the lease loop registers again.
    session_lost: AtomicBool,
}

impl Context {
    pub(crate) fn new(config: WorkerConfig) -> Result<Context> {
        Ok(Context {
            client: connect(&config.coordinator, &config.security)?,
            pool: ComputePool::new(config.threads),
            active: Mutex::new(HashMap::new()),
            slot_freed: Notify::new(),
            stage_cache: tokio::sync::Mutex::new(None),
            stats: Arc::new(WorkerStats::default()),
            session: Mutex::new(String::new()),
            session_lost: AtomicBool::new(false),
            config,
        })
    }

    /// The session every call but registration carries.
    pub(crate) fn session(&self) -> String {
        self.session.lock().unwrap().clone()
    }

    /// Keeps the session of a new registration.
    pub(crate) fn set_session(&self, session: String) {
        *self.session.lock().unwrap() = session;
        self.session_lost.store(false, Ordering::Relaxed);
    }

    /// A call that carried `session` was refused as UNAUTHENTICATED: unless a
    /// newer registration has replaced it already, the worker registers again.
    pub(crate) fn session_refused(&self, session: &str) {
        if *self.session.lock().unwrap() == session {
            self.session_lost.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the session was refused since the last registration.
    pub(crate) fn session_lost(&self) -> bool {
        self.session_lost.load(Ordering::Relaxed)
    }

    /// A handle on the connection for one call.
    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    /// Takes a slot for a newly leased shard.
    pub(crate) fn track(&self, lease_id: &str) -> Arc<ShardHandle> {
        let handle = Arc::new(ShardHandle::default());
        let mut active = self.active.lock().unwrap();
        active.insert(lease_id.to_string(), handle.clone());
        handle
    }

    /// Gives back the slot of a shard whose attempt has ended.
    pub(crate) fn release(&self, lease_id: &str) {
        self.active.lock().unwrap().remove(lease_id);
        self.slot_freed.notify_one();
    }

    pub(crate) async fn slot_freed(&self) {
        self.slot_freed.notified().await
    }

    pub(crate) fn running(&self) -> usize {
        self.active.lock().unwrap().len()
    }

    pub(crate) fn free_slots(&self) -> usize {
        self.config.slots.saturating_sub(self.running())
    }

    /// The work done so far by each running shard, by lease id.
    pub(crate) fn progress(&self) -> Vec<(String, u64)> {
        let active = self.active.lock().unwrap();
        let progress = active
            .iter()
            .map(|(id, h)| (id.clone(), h.control.work_done()));
        progress.collect()
    }

    /// Stops the shard of `lease_id`, if it runs here, without a final report.
    pub(crate) fn revoke(&self, lease_id: &str) {
        if let Some(shard) = self.active.lock().unwrap().get(lease_id) {
            tracing::info!(lease = %lease_id, "lease revoked; stopping the shard");
            shard.revoke();
        }
    }

    /// Stops every running shard; each hands its lease back.
    pub(crate) fn cancel_all(&self) {
        for shard in self.active.lock().unwrap().values() {
            shard.control.cancel();
        }
    }

    pub(crate) fn gauges(&self) -> Gauges {
        let active = self.active.lock().unwrap();
        Gauges {
            active_shards: active.len(),
            slots: self.config.slots,
            work_in_progress: active.values().map(|h| h.control.work_done()).sum(),
        }
    }
}
