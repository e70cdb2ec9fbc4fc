//! The deadline of every call a worker or a client makes to a coordinator, in
//! one place, and the channel layer that holds each call to its deadline.
//!
//! A call's deadline travels as its `grpc-timeout` header (set by
//! [`request`]), so the coordinator stops working on a call its caller has
//! given up on (a [`SERVER_GRACE`] later); and [`Deadlined`], a layer of every channel
//! ([`crate::transport::lazy_channel`], [`crate::transport::authorized`]),
//! enforces it on the caller's side too: a coordinator that is stopped, or
//! whose threads are all stuck, answers nothing at all, not even
//! `DEADLINE_EXCEEDED`. A call that set no deadline gets [`CALL`].
//!
//! Both ends time a call until the coordinator's answer begins: the whole of
//! a unary call and of a report's upload; the opening of a stream, whose
//! messages then each have [`STREAM_IDLE`] (see [`next_message`]).
//!
//! docs/operations.md lists every call with its deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::codegen::{Service, StdError, http};
use tonic::{Request, Status};

/// Connecting to a coordinator (TCP and TLS): one that is down refuses at
/// once; one unreachable is given this long.
pub const CONNECT: Duration = Duration::from_secs(5);

/// A client's call (status, list, result, cancel, delete, events, info, the
/// health check, a watch's first answer), and the deadline of a call that
/// set none: a coordinator answers these from memory, or after one flush.
pub const CALL: Duration = Duration::from_secs(15);

/// A submission: the coordinator plans the job first, which for large jobs
/// takes minutes.
pub const SUBMIT: Duration = Duration::from_secs(600);

/// A watched job's stream is silent this long (the coordinator sends a
/// running job every second, a queued one only when it changes): the client
/// watches again, which tells whether the coordinator still serves.
pub const WATCH_SILENCE: Duration = Duration::from_secs(15);

/// How long a client keeps trying a coordinator it cannot reach (a watch
/// across a coordinator's restart) before it gives up and says so.
pub const CLIENT_PATIENCE: Duration = Duration::from_secs(60);

/// A worker's registration: one write to the coordinator's store.
pub const REGISTER: Duration = Duration::from_secs(20);

/// A heartbeat: the coordinator renews the worker's leases under its lock.
/// One not answered within it is dropped; the next beat carries newer
/// progress.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// What a lease call may take beyond the time the worker asked the
/// coordinator to wait for work (see [`lease`]).
pub const LEASE_MARGIN: Duration = Duration::from_secs(10);

/// A lease call that lets the coordinator wait up to `wait` for work.
pub fn lease(wait: Duration) -> Duration {
    wait + LEASE_MARGIN
}

/// A report (a checkpoint or a final report, streamed) or a batch of final
/// reports, before its bytes (see [`report`]): the coordinator checks a
/// result and writes it with one flush.
pub const REPORT: Duration = Duration::from_secs(30);

/// The slowest transfer a deadline allows for: bytes a second, through the
/// network and the coordinator's checks and store writes.
pub const TRANSFER_BYTES_PER_SECOND: u64 = 8 << 20;

/// A report (or a batch) that carries `bytes`: [`REPORT`] and their transfer
/// at [`TRANSFER_BYTES_PER_SECOND`] (a 1 GiB checkpoint: 158 s).
pub fn report(bytes: u64) -> Duration {
    REPORT + transfer(bytes)
}

/// The time `bytes` take at [`TRANSFER_BYTES_PER_SECOND`].
fn transfer(bytes: u64) -> Duration {
    Duration::from_millis(bytes.saturating_mul(1000) / TRANSFER_BYTES_PER_SECOND)
}

/// A worker's unary fetch: the stage blobs of a stage, the task of a shard
/// to recompute, an attachment (a wasm module, at most a few MiB); and the
/// opening of a fetched stream (stage data; a checkpoint, see [`fetch`]).
pub const FETCH: Duration = Duration::from_secs(30);

/// The opening of a fetched stream of `bytes` that the coordinator reads
/// whole before it answers (a checkpoint): [`FETCH`] and their reading at
/// [`TRANSFER_BYTES_PER_SECOND`].
pub fn fetch(bytes: u64) -> Duration {
    FETCH + transfer(bytes)
}

/// Between two messages of a stream a worker or client reads (stage data, a
/// checkpoint): the coordinator reads each chunk from its store.
pub const STREAM_IDLE: Duration = Duration::from_secs(30);

/// How long a worker keeps retrying one shard's fetch or final report while
/// the coordinator does not answer, before it gives up on it: by then the
/// shard's lease has long expired at the coordinator, which leases the
/// shard again. (The lease loop itself retries until the worker stops.)
pub const WORKER_PATIENCE: Duration = Duration::from_secs(600);

/// After this long without an answer from the coordinator a worker says so,
/// once, and again once it is answered.
pub const SILENCE_NOTICE: Duration = Duration::from_secs(10);

/// `message` as a request with `limit` as its deadline.
pub fn request<T>(message: T, limit: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(limit);
    request
}

/// The next message of `stream`, which may be silent at most `idle`.
pub async fn next_message<T>(
    stream: &mut tonic::Streaming<T>,
    idle: Duration,
) -> Result<Option<T>, Status> {
    match tokio::time::timeout(idle, stream.message()).await {
        Ok(message) => message,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "the coordinator sent nothing on the stream for {}",
            seconds(idle)
        ))),
    }
}

/// Whether `status` says the coordinator did not answer (it is down,
/// unreachable, or did not answer within the deadline), rather than that it
/// answered with a refusal or an error of its own.
pub fn not_answered(status: &Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Cancelled
            | tonic::Code::Unknown
    )
}

/// A duration as people read it in a log line: "15 s", "0.5 s".
pub fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s} s")
    } else {
        format!("{s:.1} s")
    }
}

/// A channel layer that holds every call to its deadline (see the module).
#[derive(Clone, Debug)]
pub struct Deadlined<S> {
    inner: S,
}

impl<S> Deadlined<S> {
    pub fn new(inner: S) -> Deadlined<S> {
        Deadlined { inner }
    }
}

impl<S, B> Service<http::Request<B>> for Deadlined<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<StdError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = StdError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, StdError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StdError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let headers = request.headers_mut();
        let limit = headers
            .get(TIMEOUT_HEADER)
            .and_then(parse_timeout)
            .unwrap_or(CALL);
        headers.insert(TIMEOUT_HEADER, request_header(limit + SERVER_GRACE));
        let method = request.uri().path().to_string();
        let answer = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout(limit, answer).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(Box::new(Status::deadline_exceeded(format!(
                    "the coordinator did not answer {method} within {}",
                    seconds(limit)
                ))) as StdError),
            }
        })
    }
}

const TIMEOUT_HEADER: &str = "grpc-timeout";

/// How much later than the caller the coordinator gives up on a call: the
/// caller's own error, which names the call, is the one it sees (a tonic
/// server answers its own deadline with CANCELLED, "Timeout expired"); the
/// coordinator's stops the work of a caller that vanished without saying.
pub const SERVER_GRACE: Duration = Duration::from_secs(1);

/// The `grpc-timeout` value of `limit`, as [`Request::set_timeout`] writes it.
fn request_header(limit: Duration) -> http::HeaderValue {
    let request = request((), limit);
    request
        .metadata()
        .get(TIMEOUT_HEADER)
        .expect("set_timeout sets the header")
        .to_str()
        .expect("the header is ASCII")
        .parse()
        .expect("an ASCII header value")
}

/// A `grpc-timeout` value: at most 8 digits and a unit (`H`, `M`, `S`,
/// `m`, `u`, `n`); `None` for anything else.
fn parse_timeout(value: &http::HeaderValue) -> Option<Duration> {
    let value = value.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_set_on_a_request_reads_back_as_its_deadline() {
        for limit in [
            Duration::from_millis(1),
            Duration::from_millis(1500),
            CALL,
            SUBMIT,
            lease(Duration::from_secs(30)),
            report(1 << 30),
        ] {
            assert_eq!(
                parse_timeout(&request_header(limit)),
                Some(limit),
                "{limit:?}"
            );
        }
        for bad in ["", "S", "12", "12x", "123456789S", "-1S", "1.5S"] {
            let value = http::HeaderValue::from_static(bad);
            assert_eq!(parse_timeout(&value), None, "{bad:?}");
        }
    }

    #[test]
    fn a_reports_deadline_grows_with_its_bytes() {
        assert_eq!(report(0), REPORT);
        assert_eq!(
            report(TRANSFER_BYTES_PER_SECOND),
            REPORT + Duration::from_secs(1)
        );
        assert_eq!(report(1 << 30), REPORT + Duration::from_secs(128));
        assert_eq!(lease(Duration::from_secs(5)), Duration::from_secs(15));
        assert_eq!(fetch(1 << 30), FETCH + Duration::from_secs(128));
    }

    #[test]
    fn only_a_missing_answer_counts_as_not_answered() {
        assert!(not_answered(&Status::unavailable("connection refused")));
        assert!(not_answered(&Status::deadline_exceeded("late")));
        assert!(!not_answered(&Status::not_found("no such job")));
        assert!(!not_answered(&Status::failed_precondition("stale")));
        assert_eq!(seconds(Duration::from_secs(15)), "15 s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5 s");
    }
}
