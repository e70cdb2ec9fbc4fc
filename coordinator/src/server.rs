//! Starting a coordinator: the store, the scheduler, the gRPC services (with
//! health and reflection) and the background lease-expiry task.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tally_common::cache::KernelCache;
use tally_common::proto::job_service_server::JobServiceServer;
use tally_common::proto::worker_service_server::WorkerServiceServer;
use tally_common::transport::{RequireToken, ServerTls};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::service::interceptor::InterceptedService;

use crate::counters::CoordinatorMetrics;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::service::{JobApi, Shared, WorkerApi, now_ms};
use crate::store::{MemoryStore, SledStore, Store, TimedStore};
use crate::{CoordinatorError, Result};

/// Largest gRPC message either side may send (one output chunk is 1 MiB).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    pub listen: SocketAddr,
    /// The sled data directory; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    pub scheduler: SchedulerConfig,
    /// How often expired leases are looked for.
    pub expiry_interval: Duration,
    /// When set, every call except health checks must carry this bearer token.
    pub token: Option<String>,
    /// Serve over TLS (and require client certificates when it names a CA).
    pub tls: Option<ServerTls>,
    /// Where to serve `/metrics` and the status page over HTTP, if anywhere.
    pub http: Option<SocketAddr>,
    /// The kernel cache planning fills; `tally run` shares it with its workers.
    pub kernel_cache: Arc<KernelCache>,
}

impl CoordinatorConfig {
    pub fn new(listen: SocketAddr, data_dir: Option<PathBuf>) -> Self {
        CoordinatorConfig {
            listen,
            data_dir,
            scheduler: SchedulerConfig::default(),
            expiry_interval: Duration::from_millis(250),
            token: None,
            tls: None,
            http: None,
            kernel_cache: Arc::new(KernelCache::new()),
        }
    }
}

/// A coordinator serving in the background.
pub struct RunningCoordinator {
    pub addr: SocketAddr,
    /// The HTTP listener's address, when `--http` was given.
    pub http_addr: Option<SocketAddr>,
    http: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    sampler: JoinHandle<()>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
    expiry: JoinHandle<()>,
    shared: Arc<Shared>,
}

impl RunningCoordinator {
    /// The URL workers and clients connect to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving and waits for the server to finish.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.expiry.abort();
        self.sampler.abort();
        if let Some((stop, task)) = self.http.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
        let _ = (&mut self.server).await;
        let _ = (&mut self.expiry).await;
        let _ = (&mut self.sampler).await;
        // Connections and streams may outlive the server future; closing the
        // scheduler releases the store's lock now rather than when they end.
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || shared.close()).await;
    }

    /// Waits until the server stops on its own (an error, or a signal handled by
    /// the caller through [`RunningCoordinator::shutdown`]).
    pub async fn wait(&mut self) -> Result<()> {
        match (&mut self.server).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(CoordinatorError::Internal(format!("server failed: {e}"))),
            Err(e) => Err(CoordinatorError::Internal(format!(
                "server task failed: {e}"
            ))),
        }
    }
}

/// Opens the store, reloads every job and starts serving on `config.listen`.
pub async fn start(config: CoordinatorConfig) -> Result<RunningCoordinator> {
    let store: Arc<dyn Store> = match &config.data_dir {
        Some(dir) => {
            let dir = dir.clone();
            Arc::new(
                tokio::task::spawn_blocking(move || SledStore::open(&dir))
                    .await
                    .map_err(|e| CoordinatorError::Internal(e.to_string()))??,
            )
        }
        None => Arc::new(MemoryStore::new()),
    };
    let metrics = Arc::new(CoordinatorMetrics::default());
    let store: Arc<dyn Store> = Arc::new(TimedStore::new(store, metrics.clone()));
    let scheduler_config = config.scheduler.clone();
    let scheduler =
        tokio::task::spawn_blocking(move || Scheduler::load(store, scheduler_config, now_ms()))
            .await
            .map_err(|e| CoordinatorError::Internal(e.to_string()))??;
    let shared = Shared::new(scheduler, metrics, config.kernel_cache.clone());
    // Bound before serving gRPC so that a taken port fails the start cleanly.
    let http_listener = match config.http {
        Some(addr) => Some(crate::http::bind(addr).await?),
        None => None,
    };

    let listener = TcpListener::bind(config.listen).await.map_err(|e| {
        CoordinatorError::InvalidArgument(format!("cannot listen on {}: {e}", config.listen))
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| CoordinatorError::Internal(e.to_string()))?;

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<JobServiceServer<JobApi>>()
        .await;
    health_reporter
        .set_serving::<WorkerServiceServer<WorkerApi>>()
        .await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tally_common::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| CoordinatorError::Internal(format!("reflection: {e}")))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tally_common::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| CoordinatorError::Internal(format!("reflection: {e}")))?;

    // Health stays open so that orchestrators' probes (which send no headers)
    // work; it reveals only whether the coordinator is serving.
    let auth = RequireToken::new(config.token.as_deref());
    let jobs = InterceptedService::new(
        JobServiceServer::new(JobApi::new(shared.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        auth.clone(),
    );
    let workers = InterceptedService::new(
        WorkerServiceServer::new(WorkerApi::new(shared.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        auth.clone(),
    );
    let reflection_v1 = InterceptedService::new(reflection_v1, auth.clone());
    let reflection_v1alpha = InterceptedService::new(reflection_v1alpha, auth);

    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &config.tls {
        builder = builder
            .tls_config(tls.config())
            .map_err(|e| CoordinatorError::InvalidArgument(format!("TLS configuration: {e}")))?;
    }
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(
        builder
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(jobs)
            .add_service(workers)
            .serve_with_incoming_shutdown(
                // Small request/response pairs: without NODELAY, delayed ACKs add
                // 40 ms to every exchange.
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                async {
                    let _ = shutdown_rx.await;
                },
            ),
    );
    let expiry = tokio::spawn(expire_leases(shared.clone(), config.expiry_interval));
    let sampler = tokio::spawn(crate::http::sample_loop(shared.clone()));
    let mut http_addr = None;
    let http = match http_listener {
        Some(listener) => {
            http_addr = listener.local_addr().ok();
            let (stop, stopped) = oneshot::channel::<()>();
            let task = crate::http::serve(shared.clone(), listener, async {
                let _ = stopped.await;
            });
            tracing::info!(addr = ?http_addr, "serving /metrics and the status page");
            Some((stop, task))
        }
        None => None,
    };
    tracing::info!(%addr, "coordinator listening");
    Ok(RunningCoordinator {
        addr,
        http_addr,
        http,
        sampler,
        shutdown: Some(shutdown_tx),
        server,
        expiry,
        shared,
    })
}

async fn expire_leases(shared: Arc<Shared>, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match shared.with_scheduler(|s| s.expire_leases(now_ms())).await {
            Ok(0) => {}
            Ok(n) => {
                shared.metrics.leases_expired.add(n as u64);
                tracing::warn!(expired = n, "leases expired; shards go back to the queue");
                shared.work_ready.notify_waiters();
                let _ = shared.changes.send(String::new());
            }
            Err(e) => tracing::error!(error = %e, "lease expiry failed"),
        }
    }
}
