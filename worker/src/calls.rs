//! Every call the worker makes to the coordinator, each with its deadline
//! (named in `tally_wire::deadline`), and what the worker says when the
//! coordinator stops answering: once, after a while, that it has not
//! answered, and once that it answers again.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tally_wire::deadline::{self, request};
use tally_wire::limits::MAX_MESSAGE_BYTES;
use tally_wire::proto::{self, worker_service_client::WorkerServiceClient};
use tally_wire::transport::{AuthChannel, ClientSecurity};
use tonic::{Response, Status, Streaming};

use crate::error::{Result, WorkerError};
use crate::metrics::WorkerStats;

type Client = WorkerServiceClient<AuthChannel>;

type Answer<T> = std::result::Result<T, Status>;

/// The coordinator as the worker calls it.
pub(crate) struct Coordinator {
    client: Client,
    /// Its address, as the worker's log names it.
    url: String,
    silence: Mutex<Silence>,
}

impl Coordinator {
    /// Connects lazily (the coordinator may not be up yet) with the message limits.
    pub(crate) fn connect(url: &str, security: &ClientSecurity) -> Result<Coordinator> {
        let channel = tally_wire::transport::lazy_channel(url, security)
            .map_err(|e| WorkerError::Address(url.to_string(), e.to_string()))?;
        let client = WorkerServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Coordinator {
            client,
            url: url.to_string(),
            silence: Mutex::new(Silence::new(Instant::now())),
        })
    }

    pub(crate) async fn register(
        &self,
        stats: &WorkerStats,
        message: proto::RegisterRequest,
    ) -> Answer<proto::RegisterResponse> {
        let mut client = self.client.clone();
        let answer = client.register(request(message, deadline::REGISTER)).await;
        self.heard(stats, answer)
    }

    /// A lease call that lets the coordinator wait up to `message.wait_ms`.
    pub(crate) async fn lease(
        &self,
        stats: &WorkerStats,
        message: proto::LeaseRequest,
    ) -> Answer<proto::LeaseResponse> {
        let limit = deadline::lease(Duration::from_millis(message.wait_ms));
        let mut client = self.client.clone();
        let answer = client.lease(request(message, limit)).await;
        self.heard(stats, answer)
    }

    pub(crate) async fn heartbeat(
        &self,
        stats: &WorkerStats,
        message: proto::HeartbeatRequest,
    ) -> Answer<proto::HeartbeatResponse> {
        let mut client = self.client.clone();
        let answer = client
            .heartbeat(request(message, deadline::HEARTBEAT))
            .await;
        self.heard(stats, answer)
    }

    /// One streamed report that carries `bytes` (its header first).
    pub(crate) async fn report<S>(
        &self,
        stats: &WorkerStats,
        messages: S,
        bytes: u64,
    ) -> Answer<proto::ReportResponse>
    where
        S: tokio_stream::Stream<Item = proto::ReportMessage> + Send + 'static,
    {
        let mut client = self.client.clone();
        let answer = client
            .report(request(messages, deadline::report(bytes)))
            .await;
        self.heard(stats, answer)
    }

    /// A batch of final reports that carries `bytes` of stage output.
    pub(crate) async fn report_batch(
        &self,
        stats: &WorkerStats,
        message: proto::ReportBatchRequest,
        bytes: u64,
    ) -> Answer<proto::ReportBatchResponse> {
        let mut client = self.client.clone();
        let answer = client
            .report_batch(request(message, deadline::report(bytes)))
            .await;
        self.heard(stats, answer)
    }

    /// Opens the stream of a large checkpoint of `bytes`, which the
    /// coordinator reads whole first (read it with [`Self::next_chunk`]).
    pub(crate) async fn fetch_checkpoint(
        &self,
        stats: &WorkerStats,
        message: proto::FetchCheckpointRequest,
        bytes: u64,
    ) -> Answer<Streaming<proto::StageDataChunk>> {
        let mut client = self.client.clone();
        let answer = client
            .fetch_checkpoint(request(message, deadline::fetch(bytes)))
            .await;
        self.heard(stats, answer)
    }

    /// Opens the stream of a stage's data (read it with [`Self::next_chunk`]).
    pub(crate) async fn fetch_stage_data(
        &self,
        stats: &WorkerStats,
        message: proto::FetchStageDataRequest,
    ) -> Answer<Streaming<proto::StageDataChunk>> {
        let mut client = self.client.clone();
        let answer = client
            .fetch_stage_data(request(message, deadline::FETCH))
            .await;
        self.heard(stats, answer)
    }

    /// The next chunk of a fetched stream, which may be silent at most
    /// [`deadline::STREAM_IDLE`].
    pub(crate) async fn next_chunk(
        &self,
        stats: &WorkerStats,
        stream: &mut Streaming<proto::StageDataChunk>,
    ) -> Answer<Option<proto::StageDataChunk>> {
        let chunk = deadline::next_message(stream, deadline::STREAM_IDLE).await;
        self.heard(stats, chunk.map(Response::new))
    }

    pub(crate) async fn fetch_attachment(
        &self,
        stats: &WorkerStats,
        message: proto::FetchAttachmentRequest,
    ) -> Answer<proto::FetchAttachmentResponse> {
        let mut client = self.client.clone();
        let answer = client
            .fetch_attachment(request(message, deadline::FETCH))
            .await;
        self.heard(stats, answer)
    }

    pub(crate) async fn stage_blobs(
        &self,
        stats: &WorkerStats,
        message: proto::StageBlobsRequest,
    ) -> Answer<proto::StageBlobsResponse> {
        let mut client = self.client.clone();
        let answer = client.stage_blobs(request(message, deadline::FETCH)).await;
        self.heard(stats, answer)
    }

    pub(crate) async fn stage_shard(
        &self,
        stats: &WorkerStats,
        message: proto::StageShardRequest,
    ) -> Answer<proto::StageShardResponse> {
        let mut client = self.client.clone();
        let answer = client.stage_shard(request(message, deadline::FETCH)).await;
        self.heard(stats, answer)
    }

    /// Notes whether the coordinator answered (a refusal is an answer too),
    /// and says so when that changes for long enough.
    fn heard<T>(&self, stats: &WorkerStats, answer: Answer<Response<T>>) -> Answer<T> {
        let now = Instant::now();
        let notice = match &answer {
            Err(status) if deadline::not_answered(status) => {
                stats.calls_not_answered.fetch_add(1, Ordering::Relaxed);
                self.silence.lock().not_answered(now)
            }
            _ => self.silence.lock().answered(now),
        };
        match notice {
            Some(Notice::Silent(quiet)) => {
                stats.coordinator_silences.fetch_add(1, Ordering::Relaxed);
                let error = answer.as_ref().err().map(|s| s.message().to_string());
                tracing::warn!(
                    coordinator = %self.url,
                    error = error.unwrap_or_default(),
                    "the coordinator at {} has not answered for {}; still trying",
                    self.url,
                    whole_seconds(quiet)
                );
            }
            Some(Notice::Back(quiet)) => tracing::info!(
                coordinator = %self.url,
                "the coordinator at {} answers again, after {} without an answer",
                self.url,
                whole_seconds(quiet)
            ),
            None => {}
        }
        answer.map(Response::into_inner)
    }
}

/// `d` in whole seconds, as a log line says it.
fn whole_seconds(d: Duration) -> String {
    format!("{} s", d.as_secs())
}

/// What the worker has said about the coordinator's silence.
#[derive(Debug)]
struct Silence {
    /// When the coordinator last answered (or the worker started).
    last_answer: Instant,
    /// Whether the worker has said that the coordinator does not answer.
    said: bool,
}

/// A change worth a log line: the coordinator has not answered for this
/// long, or answers again after this long.
#[derive(Debug, PartialEq, Eq)]
enum Notice {
    Silent(Duration),
    Back(Duration),
}

impl Silence {
    fn new(now: Instant) -> Silence {
        Silence {
            last_answer: now,
            said: false,
        }
    }

    /// A call found no answer at `now`: said once the silence has lasted
    /// [`deadline::SILENCE_NOTICE`].
    fn not_answered(&mut self, now: Instant) -> Option<Notice> {
        let quiet = now.saturating_duration_since(self.last_answer);
        if self.said || quiet < deadline::SILENCE_NOTICE {
            return None;
        }
        self.said = true;
        Some(Notice::Silent(quiet))
    }

    /// The coordinator answered at `now`: said if its silence was.
    fn answered(&mut self, now: Instant) -> Option<Notice> {
        let quiet = now.saturating_duration_since(self.last_answer);
        self.last_answer = now;
        std::mem::take(&mut self.said).then_some(Notice::Back(quiet))
    }
}

#[cfg(test)]
#[path = "calls_tests.rs"]
mod deadline_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silence_is_said_once_when_it_has_lasted_and_once_when_it_ends() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut silence = Silence::new(start);
        assert_eq!(silence.not_answered(at(1)), None, "too soon to say");
        assert_eq!(silence.answered(at(2)), None, "nothing was said");
        assert_eq!(silence.not_answered(at(11)), None, "9 s since the answer");
        let long = at(2) + deadline::SILENCE_NOTICE;
        assert_eq!(
            silence.not_answered(long),
            Some(Notice::Silent(deadline::SILENCE_NOTICE))
        );
        for later in 13..100 {
            assert_eq!(silence.not_answered(at(later)), None, "said once");
        }
        assert_eq!(
            silence.answered(at(100)),
            Some(Notice::Back(at(100) - at(2)))
        );
        assert_eq!(silence.answered(at(101)), None, "back is said once");
        assert_eq!(silence.not_answered(at(105)), None);
        assert!(matches!(
            silence.not_answered(at(120)),
            Some(Notice::Silent(_))
        ));
    }
}
