//! The client against a coordinator that does not answer: a call ends at its
//! deadline, and a watched stream that falls silent is watched again.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tally_wire::deadline;
use tally_wire::proto::{self, Job, JobState, job_service_server::JobService};
use tonic::{Request, Response, Status};

use super::{Remote, connect, follow, quick};

/// Slack for a loaded machine above a deadline.
const SLACK: Duration = Duration::from_secs(30);

type Jobs = Pin<Box<dyn tokio_stream::Stream<Item = Result<Job, Status>> + Send>>;

/// A coordinator that never answers `Get`, and whose first watch sends the
/// job running and then nothing, and whose later ones send it finished.
#[derive(Default)]
struct Stuck {
    watches: Arc<AtomicUsize>,
}

fn job(state: JobState) -> Job {
    Job {
        id: "job-000001".into(),
        state: state as i32,
        ..Job::default()
    }
}

#[tonic::async_trait]
impl JobService for Stuck {
    async fn submit(
        &self,
        _: Request<proto::SubmitRequest>,
    ) -> Result<Response<proto::SubmitResponse>, Status> {
        Err(Status::unimplemented("submit"))
    }

    async fn get(&self, _: Request<proto::GetJobRequest>) -> Result<Response<Job>, Status> {
        std::future::pending().await
    }

    async fn list(
        &self,
        _: Request<proto::ListJobsRequest>,
    ) -> Result<Response<proto::ListJobsResponse>, Status> {
        Err(Status::unimplemented("list"))
    }

    type WatchStream = Jobs;

    async fn watch(&self, _: Request<proto::WatchRequest>) -> Result<Response<Jobs>, Status> {
        let first = self.watches.fetch_add(1, Ordering::Relaxed) == 0;
        let jobs: Jobs = match first {
            true => Box::pin(tokio_stream::StreamExt::chain(
                tokio_stream::iter([Ok(job(JobState::Running))]),
                futures_pending(),
            )),
            false => Box::pin(tokio_stream::iter([Ok(job(JobState::Succeeded))])),
        };
        Ok(Response::new(jobs))
    }

    async fn cancel(&self, _: Request<proto::CancelRequest>) -> Result<Response<Job>, Status> {
        Err(Status::unimplemented("cancel"))
    }

    async fn delete(
        &self,
        _: Request<proto::DeleteRequest>,
    ) -> Result<Response<proto::DeleteResponse>, Status> {
        Err(Status::unimplemented("delete"))
    }

    async fn result(
        &self,
        _: Request<proto::ResultRequest>,
    ) -> Result<Response<proto::JobResult>, Status> {
        Err(Status::unimplemented("result"))
    }

    async fn events(
        &self,
        _: Request<proto::EventsRequest>,
    ) -> Result<Response<proto::EventsResponse>, Status> {
        Err(Status::unimplemented("events"))
    }

    async fn info(
        &self,
        _: Request<proto::InfoRequest>,
    ) -> Result<Response<proto::InfoResponse>, Status> {
        Err(Status::unimplemented("info"))
    }

    async fn who_am_i(
        &self,
        _: Request<proto::WhoAmIRequest>,
    ) -> Result<Response<proto::WhoAmIResponse>, Status> {
        Err(Status::unimplemented("who_am_i"))
    }

    async fn audit(
        &self,
        _: Request<proto::AuditRequest>,
    ) -> Result<Response<proto::AuditResponse>, Status> {
        Err(Status::unimplemented("audit"))
    }
}

/// A stream that never sends anything, nor ends.
fn futures_pending() -> impl tokio_stream::Stream<Item = Result<Job, Status>> + Send {
    tokio_stream::StreamExt::map(tokio_stream::pending::<()>(), |()| {
        Err(Status::internal("never"))
    })
}

/// The connections a listener accepts.
struct Incoming(tokio::net::TcpListener);

impl tokio_stream::Stream for Incoming {
    type Item = std::io::Result<tokio::net::TcpStream>;

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0
            .poll_accept(cx)
            .map(|accepted| Some(accepted.map(|(stream, _)| stream)))
    }
}

/// Serves `Stuck` on a port of its own; its remote and its count of watches.
async fn serve() -> (Remote, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stuck = Stuck::default();
    let watches = stuck.watches.clone();
    let incoming = Incoming(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(proto::job_service_server::JobServiceServer::new(stuck))
            .serve_with_incoming(incoming),
    );
    (Remote::open(url), watches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_coordinator_never_answers_ends_at_its_deadline() {
    let (remote, _) = serve().await;
    let mut client = connect(&remote).await.unwrap();
    let start = Instant::now();
    let status = client
        .get(quick(proto::GetJobRequest {
            job_id: "job-000001".into(),
        }))
        .await
        .unwrap_err();
    let took = start.elapsed();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("Get"), "{}", status.message());
    assert!(
        took >= deadline::CALL && took <= deadline::CALL + SLACK,
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_falls_silent_is_watched_again() {
    let (remote, watches) = serve().await;
    let start = Instant::now();
    let followed = tokio::time::timeout(
        deadline::WATCH_SILENCE + SLACK,
        follow(&remote, "job-000001", false),
    )
    .await
    .expect("a silent watch is noticed");
    let job = followed.unwrap();
    assert_eq!(job.state(), JobState::Succeeded);
    assert_eq!(watches.load(Ordering::Relaxed), 2, "watched again once");
    assert!(start.elapsed() >= deadline::WATCH_SILENCE);
}
