//! What the worker's tests share: coordinators that do not answer (one that
//! takes every call and never answers it, as one whose scheduler lock is
//! held; one that accepts connections and never reads them, as a stopped
//! process), each noting the calls it was given and when each ended; a
//! worker context on one; and the log lines a test captures.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tally_wire::proto::{self, worker_service_server::WorkerService};
use tonic::{Request, Response, Status, Streaming};

/// What the coordinator answers; everything else it never answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answers {
    Nothing,
    /// Registrations, with session `s`.
    Registrations,
    /// Registrations, and every report (neither stopped nor accepted).
    RegistrationsAndReports,
}

/// The calls a test coordinator was given: the method, and how long it was
/// held before the caller (or the server's own deadline) gave up on it.
#[derive(Default)]
pub(crate) struct Calls {
    started: Mutex<Vec<&'static str>>,
    ended: Mutex<Vec<(&'static str, Duration)>>,
}

impl Calls {
    pub(crate) fn started(&self, method: &str) -> usize {
        self.started.lock().iter().filter(|m| **m == method).count()
    }

    /// How long each call of `method` that has ended was held.
    pub(crate) fn held(&self, method: &str) -> Vec<Duration> {
        let ended = self.ended.lock();
        ended
            .iter()
            .filter(|(m, _)| *m == method)
            .map(|(_, d)| *d)
            .collect()
    }

    fn begin(self: &Arc<Self>, method: &'static str) -> Held {
        self.started.lock().push(method);
        Held {
            calls: self.clone(),
            method,
            since: Instant::now(),
        }
    }
}

/// A call being held; notes its end when dropped (the caller reset it).
struct Held {
    calls: Arc<Calls>,
    method: &'static str,
    since: Instant,
}

impl Drop for Held {
    fn drop(&mut self) {
        let held = self.since.elapsed();
        self.calls.ended.lock().push((self.method, held));
    }
}

pub(crate) struct Silent {
    answers: Answers,
    calls: Arc<Calls>,
}

type Chunks =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<proto::StageDataChunk, Status>> + Send>>;

impl Silent {
    async fn hold<T>(&self, method: &'static str) -> Result<Response<T>, Status> {
        let _held = self.calls.begin(method);
        std::future::pending().await
    }
}

#[tonic::async_trait]
impl WorkerService for Silent {
    async fn register(
        &self,
        _: Request<proto::RegisterRequest>,
    ) -> Result<Response<proto::RegisterResponse>, Status> {
        if self.answers == Answers::Nothing {
            return self.hold("register").await;
        }
        self.calls.begin("register");
        Ok(Response::new(proto::RegisterResponse {
            session: "s".into(),
            ..Default::default()
        }))
    }

    async fn heartbeat(
        &self,
        _: Request<proto::HeartbeatRequest>,
    ) -> Result<Response<proto::HeartbeatResponse>, Status> {
        self.hold("heartbeat").await
    }

    async fn lease(
        &self,
        _: Request<proto::LeaseRequest>,
    ) -> Result<Response<proto::LeaseResponse>, Status> {
        self.hold("lease").await
    }

    async fn report(
        &self,
        request: Request<Streaming<proto::ReportMessage>>,
    ) -> Result<Response<proto::ReportResponse>, Status> {
        if self.answers != Answers::RegistrationsAndReports {
            return self.hold("report").await;
        }
        self.calls.begin("report");
        let mut messages = request.into_inner();
        while messages.message().await?.is_some() {}
        Ok(Response::new(proto::ReportResponse::default()))
    }

    async fn report_batch(
        &self,
        _: Request<proto::ReportBatchRequest>,
    ) -> Result<Response<proto::ReportBatchResponse>, Status> {
        self.hold("report_batch").await
    }

    type FetchStageDataStream = Chunks;

    /// Opens the stream at once, and sends nothing on it.
    async fn fetch_stage_data(
        &self,
        _: Request<proto::FetchStageDataRequest>,
    ) -> Result<Response<Chunks>, Status> {
        let held = self.calls.begin("fetch_stage_data");
        let silent = futures::stream::unfold(held, |held| async move {
            std::future::pending::<()>().await;
            Some((Err(Status::internal("never")), held))
        });
        Ok(Response::new(Box::pin(silent)))
    }

    type FetchCheckpointStream = Chunks;

    async fn fetch_checkpoint(
        &self,
        _: Request<proto::FetchCheckpointRequest>,
    ) -> Result<Response<Chunks>, Status> {
        self.hold("fetch_checkpoint").await
    }

    async fn stage_blobs(
        &self,
        _: Request<proto::StageBlobsRequest>,
    ) -> Result<Response<proto::StageBlobsResponse>, Status> {
        self.hold("stage_blobs").await
    }

    async fn stage_shard(
        &self,
        _: Request<proto::StageShardRequest>,
    ) -> Result<Response<proto::StageShardResponse>, Status> {
        self.hold("stage_shard").await
    }

    async fn fetch_attachment(
        &self,
        _: Request<proto::FetchAttachmentRequest>,
    ) -> Result<Response<proto::FetchAttachmentResponse>, Status> {
        self.hold("fetch_attachment").await
    }
}

/// Serves a coordinator that answers only `answers`, on a port of its own;
/// its URL and the calls it was given.
pub(crate) async fn serve(answers: Answers) -> (String, Arc<Calls>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let calls = Arc::new(Calls::default());
    let service = Silent {
        answers,
        calls: calls.clone(),
    };
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(proto::worker_service_server::WorkerServiceServer::new(
                service,
            ))
            .serve_with_incoming(incoming),
    );
    (url, calls)
}

/// A listener that accepts connections and never reads or writes them (a
/// stopped process's kernel still accepts); its URL.
pub(crate) async fn stopped() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    url
}

/// A worker's context on the coordinator at `url`, with one slot, no drain
/// time and a spill directory of its own (kept as long as the directory is).
pub(crate) fn context(url: &str) -> (Arc<crate::context::Context>, tempfile::TempDir) {
    let spill = tempfile::tempdir().unwrap();
    let mut config = crate::WorkerConfig::new(url);
    config.slots = 1;
    config.threads = 1;
    config.memory_budget = 1 << 30;
    config.spill_dir = spill.path().to_path_buf();
    config.drain_timeout = Duration::ZERO;
    let ctx = crate::context::Context::new(config).unwrap();
    (Arc::new(ctx), spill)
}

/// Waits until `done`, looking every 50 ms; fails the test after `limit`.
pub(crate) async fn wait_until(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The log lines of this thread while it is held (a test on a
/// current-thread runtime runs all its tasks on its thread).
pub(crate) struct Logs {
    buffer: Arc<Mutex<Vec<u8>>>,
    _default: tracing::subscriber::DefaultGuard,
}

impl Logs {
    pub(crate) fn capture() -> Logs {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = LogWriter(buffer.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        Logs {
            buffer,
            _default: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The lines logged so far that contain `needle`.
    pub(crate) fn count(&self, needle: &str) -> usize {
        let text = String::from_utf8_lossy(&self.buffer.lock()).into_owned();
        text.lines().filter(|l| l.contains(needle)).count()
    }
}

#[derive(Clone)]
struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
