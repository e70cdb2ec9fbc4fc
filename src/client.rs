//! Talking to a coordinator as a client: where it is and what to present,
//! the connection, the deadlines of calls, and following a job to its end.

use std::time::Duration;

use anyhow::Context;
use tally_kinds::invalid;
use tally_wire::limits::MAX_MESSAGE_BYTES;
use tally_wire::proto::job_service_client::JobServiceClient;
use tally_wire::proto::{self, Job};
use tally_wire::transport::{self, AuthChannel, BearerToken, ClientSecurity};
use tonic::service::interceptor::InterceptedService;

use crate::output;

/// A coordinator to talk to and the credentials to present.
#[derive(Clone, Debug)]
pub struct Remote {
    pub url: String,
    pub security: ClientSecurity,
}

impl Remote {
    /// A coordinator that needs no credentials (the embedded one of `run`).
    pub fn open(url: String) -> Remote {
        Remote {
            url,
            security: ClientSecurity::default(),
        }
    }

    /// The coordinator's URL as it may be shown: without credentials.
    pub fn shown(&self) -> String {
        transport::without_userinfo(&self.url)
    }
}

/// Checks a `--coordinator` value before anything connects: `http://` or
/// `https://` and a host, without credentials. A user and password in the
/// URL authenticate nothing (the coordinator takes a bearer token) and would
/// travel in every request's header. Refusals are bad input and never show
/// the credentials.
pub fn check_coordinator_url(url: &str) -> anyhow::Result<()> {
    let shown = transport::without_userinfo(url);
    let bad = |why: &str| {
        invalid!("--coordinator {shown:?}: {why}; give http://HOST:PORT or https://HOST:PORT")
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad("not a URL").into());
    };
    if scheme != "http" && scheme != "https" {
        return Err(bad(&format!(
            "the scheme {scheme}:// is neither http:// nor https://"
        ))
        .into());
    }
    // Anywhere in it: a password may hold a `/`, which would end the
    // authority early.
    if url.contains('@') {
        return Err(invalid!(
            "--coordinator {shown:?}: credentials do not belong in the URL; give the token \
             with --token-file or TALLY_TOKEN (a worker's: --worker-token-file or \
             TALLY_WORKER_TOKEN)"
        )
        .into());
    }
    if rest
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(bad("no host").into());
    }
    if let Err(e) = tonic::transport::Uri::try_from(url) {
        return Err(bad(&e.to_string()).into());
    }
    Ok(())
}

/// A job-service client of `remote`, presenting its credentials.
pub async fn connect(remote: &Remote) -> anyhow::Result<JobServiceClient<AuthChannel>> {
    let channel = transport::endpoint(&remote.url, &remote.security)?
        .connect()
        .await
        .with_context(|| format!("cannot reach the coordinator at {}", remote.shown()))?;
    let auth = BearerToken::new(remote.security.token.as_deref())?;
    Ok(
        JobServiceClient::new(InterceptedService::new(channel, auth))
            .max_decoding_message_size(MAX_MESSAGE_BYTES),
    )
}

/// How long a client call may take before it fails: a coordinator that is
/// stopped (not down) accepts the connection and never answers.
const CALL_DEADLINE: Duration = Duration::from_secs(15);

/// How long `watch` keeps trying a coordinator it cannot reach.
const COORDINATOR_LOST_LIMIT: Duration = Duration::from_secs(60);

/// A submission plans the job first, which for large jobs takes a while.
const SUBMIT_DEADLINE: Duration = Duration::from_secs(600);

/// `message` as a request with the call deadline (for a Watch, the deadline
/// of its first answer; the stream itself lives as long as the job).
pub fn quick<T>(message: T) -> tonic::Request<T> {
    with_deadline(message, CALL_DEADLINE)
}

/// A submission as a request with the planning deadline.
pub fn planned<T>(message: T) -> tonic::Request<T> {
    with_deadline(message, SUBMIT_DEADLINE)
}

fn with_deadline<T>(message: T, limit: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(limit);
    request
}

/// Follows a job until it finishes, showing a progress bar on stderr; survives a
/// coordinator restart by watching again.
pub async fn follow(remote: &Remote, job_id: &str, progress: bool) -> anyhow::Result<Job> {
    let bar = output::ProgressView::new(progress);
    // Since when every attempt to watch has failed, if they do.
    let mut failing_since: Option<std::time::Instant> = None;
    loop {
        let attempt = async {
            let mut client = connect(remote).await?;
            let mut stream = client
                .watch(quick(proto::WatchRequest {
                    job_id: job_id.to_string(),
                }))
                .await?
                .into_inner();
            while let Some(job) = stream.message().await? {
                bar.update(&job);
                if job.is_finished() {
                    return anyhow::Ok(Some(job));
                }
            }
            anyhow::Ok(None)
        }
        .await;
        match attempt {
            Ok(Some(job)) => {
                bar.finish(&job);
                return Ok(job);
            }
            Ok(None) => failing_since = None,
            Err(e) => {
                if let Some(status) = e.downcast_ref::<tonic::Status>()
                    && matches!(
                        status.code(),
                        tonic::Code::NotFound | tonic::Code::InvalidArgument
                    )
                {
                    bar.abandon();
                    return Err(e);
                }
                let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > COORDINATOR_LOST_LIMIT {
                    bar.abandon();
                    return Err(e.context("lost the coordinator for a minute"));
                }
                bar.note(&format!(
                    "waiting for the coordinator: {}",
                    output::error_line(&e)
                ));
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
