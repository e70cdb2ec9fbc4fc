//! Starting a coordinator: the store, the scheduler, the gRPC services (with
//! health, reflection and the token check on all but health), the HTTP
//! listener, and the background tasks (lease expiry, metrics sampling).
//! Shutdown drops the scheduler, which closes the store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tally_kinds::cache::KernelCache;
use tally_stage::store::CHECK_PATIENCE;
use tally_stage::{StageStore, StageStoreUrl};
use tally_wire::limits::{DEFAULT_INLINE_STAGE_OUTPUT, MAX_INLINE_STAGE_OUTPUT, MAX_MESSAGE_BYTES};
use tally_wire::proto::externalscaler::external_scaler_server::ExternalScalerServer;
use tally_wire::proto::job_service_server::JobServiceServer;
use tally_wire::proto::worker_service_server::WorkerServiceServer;
use tally_wire::transport::{Role, ServerTls, Tokens, tls_config_error};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::service::interceptor::InterceptedService;

use crate::background::{
    expire_leases, renew_stage_owner, report_health, sample_loop, sweep_stage_store,
};
use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::group_commit::GroupCommit;
use crate::http;
use crate::metrics::CoordinatorMetrics;
use crate::replica::{Parent, PrefixHold, Queue, RecordingStore, ReplicaStatus, Restored, Shipper};
use crate::scaler::ScalerApi;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::service::JobApi;
use crate::shared::{SCHEDULER_WAIT_LIMIT, Shared};
use crate::stage_owner::{PrefixAsked, StageOwner, Taking};
use crate::store::{MemoryStore, OnLoss, Recovery, SledStore, Store, TimedStore};
use crate::users::{UserDirectory, UsersSource, Visibility};
use crate::watchdog::{Holds, OnStall, Watchdog, WatchdogConfig, WatchdogThread};
use crate::worker_service::WorkerApi;
use parking_lot::Mutex;

#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    pub listen: SocketAddr,
    /// The sled data directory; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    pub scheduler: SchedulerConfig,
    /// How often expired leases are looked for.
    pub expiry_interval: Duration,
    /// The bearer tokens of clients (job API, reflection) and of workers
    /// (worker API); a role without one is open. Health checks need none.
    pub tokens: Tokens,
    /// Serve over TLS (and require client certificates when it names a CA).
    pub tls: Option<ServerTls>,
    /// Where to serve `/metrics` and the status page over HTTP, if anywhere.
    pub http: Option<SocketAddr>,
    /// The kernel cache planning fills; `tally run` shares it with its
    /// workers. It holds the sandbox wasm modules are checked in (compiled,
    /// never run) at submission, which whoever starts the coordinator puts
    /// there (`KernelCache::set_guest_runtime`): without one, wasm jobs are
    /// refused.
    pub kernel_cache: Arc<KernelCache>,
    /// Start from what is intact if the store has lost acknowledged commits,
    /// instead of refusing to start.
    pub recover: bool,
    /// With a stage store outside the coordinator, keep each stage's input a
    /// stage longer so that a lost blob can be computed again (see
    /// `SchedulerConfig::spare_stage`). On by default.
    pub spare_stage: bool,
    /// Delete finished jobs this long after they finished; `None` keeps them.
    pub retain_finished: Option<Duration>,
    /// Fault injection for tests: abort right after this many store flushes.
    pub exit_after_flushes: Option<u64>,
    /// Where stage data lives (see `tally_stage`).
    pub stage_store: StageStoreUrl,
    /// How often a stage store outside the coordinator is swept for blobs
    /// nothing references.
    pub stage_sweep_every: Duration,
    /// Give the data directory a new prefix in the stage store (a copy of
    /// another data directory, whose prefix the original holds).
    pub new_stage_prefix: bool,
    /// How often the hold on the stage-store prefix is renewed.
    pub stage_owner_renew_every: Duration,
    /// With a stage store outside the coordinator: how often the store's
    /// changes are shipped to its replica there; zero: not replicated.
    pub replicate_every: Duration,
    /// Restore the store into the (empty) data directory from the replica
    /// under this data-directory prefix (`<stage store>/d-…`) before serving.
    pub restore_from: Option<StageStoreUrl>,
    /// Restore even when the newest point loses more than the replica's
    /// last interval (a gap in its log), instead of refusing.
    pub restore_accept_loss: bool,
    /// With a stage store outside the coordinator: the largest stage output
    /// taken inline with its report and kept here (0: none), at most
    /// `MAX_INLINE_STAGE_OUTPUT`.
    pub inline_stage_output: usize,
    /// How long the scheduler lock or a flush may be held before the
    /// coordinator reports itself not serving, and before it exits.
    pub watchdog: WatchdogConfig,
    /// What the watchdog does at its limit (by default: exit).
    pub on_stall: OnStall,
    /// Fault injection for tests: the n-th call whose name contains the
    /// text keeps the scheduler lock for ever.
    pub stall_in: Option<(String, u64)>,
    /// The users file (see `users`): read at start and again on SIGHUP.
    pub users_file: Option<PathBuf>,
    /// Who sees which jobs.
    pub jobs_visible: Visibility,
}

impl CoordinatorConfig {
    pub fn new(listen: SocketAddr, data_dir: Option<PathBuf>) -> Self {
        CoordinatorConfig {
            listen,
            data_dir,
            scheduler: SchedulerConfig::default(),
            expiry_interval: Duration::from_millis(250),
            tokens: Tokens::default(),
            tls: None,
            http: None,
            kernel_cache: Arc::new(KernelCache::new()),
            recover: false,
            spare_stage: true,
            retain_finished: None,
            exit_after_flushes: None,
            stage_store: StageStoreUrl::Coordinator,
            stage_sweep_every: STAGE_SWEEP_EVERY,
            new_stage_prefix: false,
            stage_owner_renew_every: STAGE_OWNER_RENEW_EVERY,
            replicate_every: crate::replica::REPLICATE_EVERY,
            restore_from: None,
            restore_accept_loss: false,
            users_file: None,
            jobs_visible: Visibility::All,
            inline_stage_output: DEFAULT_INLINE_STAGE_OUTPUT,
            watchdog: WatchdogConfig::default(),
            on_stall: OnStall::default(),
            stall_in: None,
        }
    }
}

/// How often a stage store outside the coordinator is swept by default.
pub const STAGE_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// How often the hold on the stage-store prefix is renewed by default.
pub const STAGE_OWNER_RENEW_EVERY: Duration = Duration::from_secs(10);

/// How long the sweep waits out an unreachable stage store before it gives
/// up until its next round.
const SWEEP_PATIENCE: Duration = Duration::from_secs(30);

/// How long releasing the stage-store prefix may take once serving has
/// stopped (else the next start watches it before taking it back).
const RELEASE_LIMIT: Duration = Duration::from_secs(5);

/// How long calls in flight may take to finish once a shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long closing the store may take once serving has stopped.
pub const STORE_CLOSE_LIMIT: Duration = Duration::from_secs(10);

/// A coordinator serving in the background.
pub struct RunningCoordinator {
    pub addr: SocketAddr,
    /// The HTTP listener's address, when `--http` was given.
    pub http_addr: Option<SocketAddr>,
    http: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    sampler: JoinHandle<()>,
    /// Keeps the health service true to the watchdog.
    health: JoinHandle<()>,
    /// Stops when dropped, at the end of the shutdown.
    watchdog: Option<WatchdogThread>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
    expiry: JoinHandle<()>,
    /// Sweeps the stage store, when it is outside the coordinator.
    sweeper: Option<JoinHandle<()>>,
    /// The hold on the stage-store prefix and the task renewing it, when
    /// the store is outside the coordinator.
    stage_owner: Option<(Arc<StageOwner>, JoinHandle<()>)>,
    /// The replica's shipper and what stops it, when the store is replicated.
    replica: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    /// How the replica stands (also in `/metrics` and `Info`).
    pub replica_status: Option<Arc<ReplicaStatus>>,
    /// What a restore before the start did.
    pub restored: Option<Restored>,
    /// The users, and the task that reads their file again on SIGHUP.
    users: Arc<UserDirectory>,
    users_reloader: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl RunningCoordinator {
    /// Reads the users file again (as SIGHUP does): a file that does not
    /// check is refused, and the users before it keep serving.
    pub async fn reload_users(&self) -> Result<usize> {
        reload_users(&self.users, &self.shared).await
    }

    /// The URL workers and clients connect to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving: calls in flight get [`SHUTDOWN_GRACE`] to finish, then
    /// the server is stopped; the stage-store prefix gets [`RELEASE_LIMIT`]
    /// to be released, and the store [`STORE_CLOSE_LIMIT`] to close. So a
    /// shutdown ends within their sum, whatever the clients, the workers,
    /// the stage store and the disk do. Nothing acknowledged depends on it:
    /// every commit was durable before it was acknowledged.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.expiry.abort();
        self.sampler.abort();
        if let Some(reloader) = &self.users_reloader {
            reloader.abort();
        }
        self.health.abort();
        if let Some(sweeper) = &self.sweeper {
            sweeper.abort();
        }
        if let Some((_, renewer)) = &self.stage_owner {
            renewer.abort();
        }
        let http = self.http.take();
        let stopped = async {
            if let Some((stop, task)) = http {
                let _ = stop.send(());
                let _ = task.await;
            }
            let _ = (&mut self.server).await;
        };
        if tokio::time::timeout(SHUTDOWN_GRACE, stopped).await.is_err() {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "calls still in flight after the grace; stopping them");
            self.server.abort();
        }
        // The last changes go to the replica before the prefix is released.
        if let Some((stop, shipper)) = self.replica.take() {
            let _ = stop.send(());
            let limit = crate::replica::LAST_SHIPMENT_LIMIT + Duration::from_secs(1);
            if tokio::time::timeout(limit, shipper).await.is_err() {
                tracing::warn!("the replica's shipper did not stop in time");
            }
        }
        if let Some((owner, _)) = self.stage_owner.take() {
            match tokio::time::timeout(RELEASE_LIMIT, owner.release()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the stage-store prefix was not released; the next start watches it before taking it back")
                }
                Err(_) => {
                    tracing::warn!(limit = ?RELEASE_LIMIT, "the stage-store prefix was not released in time; the next start watches it before taking it back")
                }
            }
        }
        // Connections and streams may outlive the server future; closing the
        // scheduler releases the store's lock now rather than when they end.
        let shared = self.shared.clone();
        let close = tokio::task::spawn_blocking(move || shared.close());
        if tokio::time::timeout(STORE_CLOSE_LIMIT, close)
            .await
            .is_err()
        {
            tracing::error!(limit = ?STORE_CLOSE_LIMIT, "the store did not close in time; stopping without it (every acknowledged commit is already durable)");
        }
        drop(self.watchdog.take());
    }

    /// Waits until the server stops on its own (an error, or a signal handled by
    /// the caller through [`RunningCoordinator::shutdown`]).
    /// Also returns, with the reason, once the stage-store prefix is found
    /// taken by another coordinator (one restored from its replica): this
    /// one must not serve a moment longer.
    pub async fn wait(&mut self) -> Result<()> {
        let owner = self.stage_owner.as_ref().map(|(owner, _)| owner.clone());
        let lost = async move {
            match owner {
                Some(owner) => {
                    let notified = owner.lost_notice.notified();
                    if !owner.is_lost() {
                        notified.await;
                    }
                    owner.lost_error()
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            served = &mut self.server => match served {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(CoordinatorError::Internal(format!("server failed: {e}"))),
                Err(e) => Err(CoordinatorError::Internal(format!(
                    "server task failed: {e}"
                ))),
            },
            e = lost => Err(e),
        }
    }
}

/// Refuses, before the store is touched, a configuration that cannot work:
/// tokens, intervals, TLS material, a stage store that cannot be used. Returns
/// the gRPC server builder with its TLS.
async fn check_before_store(config: &CoordinatorConfig) -> Result<tonic::transport::Server> {
    config
        .tokens
        .check_with_users(config.users_file.is_some())?;
    for (flag, every) in [
        ("--stage-sweep-every", config.stage_sweep_every),
        ("--stage-owner-renew-every", config.stage_owner_renew_every),
    ] {
        if every.is_zero() {
            return Err(CoordinatorError::InvalidArgument(format!(
                "{flag} must be longer than zero"
            )));
        }
    }
    // TLS material that cannot work is refused before the store is touched.
    let builder = grpc_builder(config)?;
    // A stage store that cannot be opened or used (a missing bucket, wrong
    // credentials, an endpoint not allowed) is refused before the data
    // store is touched.
    if let Some(stage_store) = StageStore::open(&config.stage_store)? {
        stage_store.with_patience(CHECK_PATIENCE).check().await?;
    }
    Ok(builder)
}

/// Opens the store, reloads every job into the scheduler and takes the
/// stage store's prefix: what every call will go through.
async fn load_shared(
    config: &CoordinatorConfig,
    metrics: Arc<CoordinatorMetrics>,
    restored: Option<&Restored>,
) -> Result<(
    Arc<Shared>,
    Option<StageStore>,
    Option<Arc<Mutex<Queue>>>,
    Taking,
)> {
    let (store, recovery) = open_store(config).await?;
    let asked = PrefixAsked {
        new_stage_prefix: config.new_stage_prefix,
        stage_store: &config.stage_store,
        renew_every: config.stage_owner_renew_every,
        patience: SWEEP_PATIENCE,
    };
    let (new_prefix, taking) = crate::stage_owner::new_prefix(asked, &store, restored).await?;
    let replicated = config.stage_store.is_external() && !config.replicate_every.is_zero();
    let (store, queue): (Arc<dyn Store>, _) = match replicated {
        true => {
            let (recording, queue) = RecordingStore::new(store);
            // A restored store's changes from its load on continue the
            // restored point (see `Shipper::continues`).
            if let Some(restored) = restored {
                queue.lock().begin(restored.next_generation);
            }
            (Arc::new(recording), Some(queue))
        }
        false => (store, None),
    };
    let holds = Arc::new(Holds::default());
    let store: Arc<dyn Store> = Arc::new(TimedStore::new(store, metrics.clone(), holds.clone()));
    let mut scheduler_config = config.scheduler.clone();
    scheduler_config.external_stage_store = config.stage_store.is_external();
    scheduler_config.spare_stage = config.spare_stage;
    scheduler_config.stage_room = stage_room_of(&config.stage_store, config.data_dir.as_deref());
    let url = config.stage_store.clone();
    let (scheduler, own_stage_store) = blocking(move || {
        let mut scheduler = load_scheduler(store, scheduler_config, recovery)?;
        let own = scheduler.use_stage_store(&url, new_prefix)?;
        Ok((scheduler, own))
    })
    .await?;
    let stage_store =
        StageStore::open(&own_stage_store)?.map(|store| store.with_patience(SWEEP_PATIENCE));
    let shared = Shared::new(
        scheduler,
        metrics,
        config.kernel_cache.clone(),
        GroupCommit::new(config.exit_after_flushes),
        own_stage_store,
        config.inline_stage_output.min(MAX_INLINE_STAGE_OUTPUT),
        holds,
    );
    Ok((shared, stage_store, queue, taking))
}

/// Opens the store, reloads every job and starts serving on `config.listen`.
pub async fn start(mut config: CoordinatorConfig) -> Result<RunningCoordinator> {
    let restored = match config.restore_from.clone() {
        Some(from) => {
            let dir = config.data_dir.clone();
            let watch_every = config.stage_owner_renew_every;
            let restored = crate::replica::restore_before_start(
                dir.as_deref(),
                &mut config.stage_store,
                &from,
                watch_every,
                SWEEP_PATIENCE,
                config.restore_accept_loss,
            );
            Some(restored.await?)
        }
        None => {
            crate::replica::refuse_unfinished_restore(config.data_dir.as_deref())?;
            None
        }
    };
    let builder = check_before_store(&config).await?;
    // A users file that does not check is refused before the store is touched.
    let users = Arc::new(UserDirectory::load(users_source(&config))?);
    let metrics = Arc::new(CoordinatorMetrics::default());
    let (shared, stage_store, queue, taking) =
        load_shared(&config, metrics, restored.as_ref()).await?;
    let current = users.current();
    shared
        .with_scheduler(move |s| {
            s.set_users(current);
            Ok(())
        })
        .await?;
    // A prefix another data directory holds is refused before serving.
    let stage_owner = match &stage_store {
        Some(store) => {
            let data = config
                .data_dir
                .as_ref()
                .map_or_else(|| "(in memory)".to_string(), |d| d.display().to_string());
            let every = config.stage_owner_renew_every;
            let owner = StageOwner::take(&shared, store.clone(), data, every, taking).await?;
            Some(Arc::new(owner))
        }
        None => None,
    };
    // Bound before serving gRPC so that a taken port fails the start cleanly.
    let http_listener = match config.http {
        Some(addr) => Some(http::bind(addr).await?),
        None => None,
    };
    let listener = TcpListener::bind(config.listen).await.map_err(|e| {
        CoordinatorError::InvalidArgument(format!("cannot listen on {}: {e}", config.listen))
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| CoordinatorError::Internal(e.to_string()))?;
    if let Some((call, nth)) = &config.stall_in {
        shared.stall_in(call, *nth);
    }
    let watchdog = Watchdog::new(
        shared.holds.clone(),
        config.watchdog,
        shared.metrics.clone(),
        shared.liveness.clone(),
    );
    let watchdog = WatchdogThread::spawn(watchdog, config.on_stall.clone())
        .map_err(|e| CoordinatorError::Internal(format!("cannot start the watchdog: {e}")))?;
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let (server, health) = serve_grpc(builder, &config, &users, shared.clone(), listener, async {
        let _ = shutdown_rx.await;
    })
    .await?;
    let users_reloader = match users.has_file() {
        true => Some(tokio::spawn(reload_users_on_hangup(
            users.clone(),
            shared.clone(),
        ))),
        false => None,
    };
    let expiry = tokio::spawn(expire_leases(
        shared.clone(),
        config.expiry_interval,
        config.retain_finished,
    ));
    let sampler = tokio::spawn(sample_loop(shared.clone()));
    let sweeper = stage_store.clone().zip(stage_owner.clone()).map(|(store, owner)| {
        tracing::info!(store = %store.url(), "stage data in a stage store outside the coordinator");
        tokio::spawn(sweep_stage_store(
            shared.clone(),
            store,
            owner,
            config.stage_sweep_every,
        ))
    });
    let replica_status = queue
        .as_ref()
        .map(|queue| Arc::new(ReplicaStatus::new(queue.clone())));
    let replica = match (queue, &stage_store, &replica_status) {
        (Some(queue), Some(objects), Some(status)) => {
            let shipper = Shipper {
                store: shared
                    .peek_within(SCHEDULER_WAIT_LIMIT, |s| s.map(|s| s.store().clone()))
                    .await?
                    .ok_or_else(|| CoordinatorError::Internal("no scheduler".into()))?,
                queue,
                objects: objects.clone(),
                status: status.clone(),
                owner: stage_owner.clone().map(|o| o as Arc<dyn PrefixHold>),
                continues: restored.as_ref().map(|r| {
                    let parent = Parent {
                        generation: r.generation,
                        through: r.change,
                    };
                    (r.next_generation, parent)
                }),
                data: config
                    .data_dir
                    .as_ref()
                    .map_or_else(|| "(in memory)".to_string(), |d| d.display().to_string()),
            };
            let (stop, stopped) = oneshot::channel::<()>();
            let every = config.replicate_every;
            let task = tokio::spawn(shipper.run(
                every,
                async {
                    let _ = stopped.await;
                },
                crate::replica::LAST_SHIPMENT_LIMIT,
            ));
            tracing::info!(every = ?every, to = %objects.url(), "replicating the store");
            let _ = shared.replica.set(crate::shared::ReplicaView {
                url: objects.url().to_string(),
                every,
                status: status.clone(),
            });
            Some((stop, task))
        }
        _ => None,
    };
    let stage_owner = stage_owner.map(|owner| {
        let renewer = tokio::spawn(renew_stage_owner(
            owner.clone(),
            config.stage_owner_renew_every,
        ));
        (owner, renewer)
    });
    let http_addr = http_listener.as_ref().and_then(|l| l.local_addr().ok());
    let http = http_listener.map(|listener| {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = http::serve(shared.clone(), listener, async {
            let _ = stopped.await;
        });
        tracing::info!(addr = ?http_addr, "serving /metrics and the status page");
        (stop, task)
    });
    tracing::info!(%addr, "coordinator listening");
    Ok(RunningCoordinator {
        addr,
        http_addr,
        http,
        sampler,
        health,
        users,
        users_reloader,
        watchdog: Some(watchdog),
        shutdown: Some(shutdown_tx),
        server,
        expiry,
        sweeper,
        stage_owner,
        replica,
        replica_status,
        restored,
        shared,
    })
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CoordinatorError::Internal(e.to_string()))?
}

/// The sled store in the data directory, or a store in memory without one;
/// with what `--recover` accepted, if the store had lost commits.
async fn open_store(config: &CoordinatorConfig) -> Result<(Arc<dyn Store>, Option<Recovery>)> {
    let Some(dir) = config.data_dir.clone() else {
        return Ok((Arc::new(MemoryStore::new()), None));
    };
    let on_loss = if config.recover {
        OnLoss::Recover
    } else {
        OnLoss::Refuse
    };
    // The content digest is summed while the scheduler reads the store; it
    // is checked before the first write and before serving.
    let store = blocking(move || match on_loss {
        OnLoss::Refuse => SledStore::open_checking_in_background(&dir),
        OnLoss::Recover => SledStore::open_with(&dir, on_loss),
    })
    .await?;
    let recovery = store.recovery().cloned();
    Ok((Arc::new(store), recovery))
}

/// The scheduler rebuilt from the store, with what `--recover` accepted noted
/// and, for `tally run`, the leases of its previous workers handed back.
fn load_scheduler(
    store: Arc<dyn Store>,
    config: SchedulerConfig,
    recovery: Option<Recovery>,
) -> Result<Scheduler> {
    // A damaged store may fail the load before its check has finished: the
    // check's verdict names the damage, so it comes first.
    let mut scheduler =
        Scheduler::load(store.clone(), config, now_ms()).map_err(|e| match store.verify() {
            Ok(()) => e,
            Err(damage) => damage,
        })?;
    if let Some(recovery) = recovery {
        note_recovery(&mut scheduler, &recovery)?;
    }
    // Nothing is served from a store whose content check has not passed.
    scheduler.store().verify()?;
    // From here on every call's changes are flushed by the group commit.
    scheduler.use_group_commit();
    Ok(scheduler)
}

/// Marks what a recovered store lost: each unfinished job's log says so, and
/// the jobs whose records are gone are named in the coordinator's log.
fn note_recovery(scheduler: &mut Scheduler, recovery: &Recovery) -> Result<()> {
    let lost = scheduler.note_recovery(recovery.lost_commits(), now_ms())?;
    tracing::warn!(
        lost_commits = recovery.lost_commits(),
        acknowledged = recovery.acknowledged,
        intact = recovery.intact,
        lost_jobs = %if lost.is_empty() { "none".to_string() } else { lost.join(", ") },
        "recovered a damaged store from what is intact; the lost jobs must be submitted again"
    );
    Ok(())
}

type GrpcServer = JoinHandle<std::result::Result<(), tonic::transport::Error>>;

/// Serves health, reflection, JobService, WorkerService and KEDA's external
/// scaler on `listener` until `shutdown`; with the task that keeps the
/// health service true to the watchdog.
async fn serve_grpc(
    mut builder: tonic::transport::Server,
    config: &CoordinatorConfig,
    users: &Arc<UserDirectory>,
    shared: Arc<Shared>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(GrpcServer, JoinHandle<()>)> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<JobServiceServer<JobApi>>()
        .await;
    health_reporter
        .set_serving::<WorkerServiceServer<WorkerApi>>()
        .await;
    let health = tokio::spawn(report_health(shared.clone(), health_reporter));
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(tally_wire::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_error = |e| CoordinatorError::Internal(format!("reflection: {e}"));
    let reflection_v1 = reflection().build_v1().map_err(reflection_error)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(reflection_error)?;

    // Health stays open so that orchestrators' probes (which send no headers)
    // work; it reveals only whether the coordinator is serving.
    let auth = users.gate();
    let jobs = InterceptedService::new(
        JobServiceServer::new(JobApi::new(shared.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        auth.clone(),
    );
    // KEDA sends no headers: the scaler checks its token itself (see
    // `scaler`).
    let scaler =
        ExternalScalerServer::new(ScalerApi::new(shared.clone(), config.tokens.for_scaler()));
    let workers = InterceptedService::new(
        WorkerServiceServer::new(WorkerApi::new(shared))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        config.tokens.require(Role::Worker),
    );
    let reflection_v1 = InterceptedService::new(reflection_v1, auth.clone());
    let reflection_v1alpha = InterceptedService::new(reflection_v1alpha, auth);

    // Small request/response pairs: without NODELAY, delayed ACKs add 40 ms to
    // every exchange.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let server = tokio::spawn(
        builder
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(jobs)
            .add_service(workers)
            .add_service(scaler)
            .serve_with_incoming_shutdown(incoming, shutdown),
    );
    Ok((server, health))
}

/// Where the users come from: the client token, the users file, and the
/// tokens no user may have.
fn users_source(config: &CoordinatorConfig) -> UsersSource {
    UsersSource {
        client_token: config.tokens.client.clone(),
        worker_token: config.tokens.worker.clone(),
        scaler_token: config.tokens.scaler.clone(),
        file: config.users_file.clone(),
        visibility: config.jobs_visible,
    }
}

/// Reads the users file again and hands the users to the scheduler; returns
/// how many there are.
async fn reload_users(users: &UserDirectory, shared: &Arc<Shared>) -> Result<usize> {
    let current = users.reload()?;
    let count = current.all().count();
    shared
        .with_scheduler(move |s| {
            s.set_users(current);
            Ok(())
        })
        .await?;
    Ok(count)
}

/// Reads the users file again at each SIGHUP; a file that does not check is
/// logged and the users before it keep serving.
async fn reload_users_on_hangup(users: Arc<UserDirectory>, shared: Arc<Shared>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(e) => {
            tracing::error!("cannot catch SIGHUP, so the users file is read only at start: {e}");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        match reload_users(&users, &shared).await {
            Ok(count) => tracing::info!(users = count, "users file read again"),
            Err(e) => tracing::error!("users file refused, the users before it keep serving: {e}"),
        }
    }
}

/// The gRPC server builder, with TLS when configured.
fn grpc_builder(config: &CoordinatorConfig) -> Result<tonic::transport::Server> {
    let builder = tonic::transport::Server::builder();
    match &config.tls {
        Some(tls) => builder
            .tls_config(tls.config())
            .map_err(|e| CoordinatorError::InvalidArgument(tls_config_error(&e))),
        None => Ok(builder),
    }
}

/// Where the room for stage data is measured: the stage directory of a
/// `file://` store, the data directory for the coordinator's own store;
/// none for an object store (or a coordinator without a data directory).
fn stage_room_of(
    url: &tally_stage::StageStoreUrl,
    data_dir: Option<&std::path::Path>,
) -> Option<crate::scheduler::RoomSource> {
    let dir = match url {
        tally_stage::StageStoreUrl::File(dir) => dir.clone(),
        tally_stage::StageStoreUrl::Coordinator => data_dir?.to_path_buf(),
        tally_stage::StageStoreUrl::S3 { .. } => return None,
    };
    Some(crate::scheduler::RoomSource(std::sync::Arc::new(
        crate::scheduler::DiskRoom { dir },
    )))
}
