//! Talking to a coordinator as a client: where it is and what to present,
//! the connection, the deadlines of calls, and following a job to its end.

use std::time::Duration;

use anyhow::Context;
use tally_kinds::invalid;
use tally_wire::deadline;
use tally_wire::limits::MAX_MESSAGE_BYTES;
use tally_wire::proto::job_service_client::JobServiceClient;
use tally_wire::proto::{self, Job};
use tally_wire::transport::{self, AuthChannel, ClientSecurity};

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

/// A job-service client of `remote`, presenting its credentials; every
/// call held to its deadline (see [`tally_wire::deadline`]).
pub async fn connect(remote: &Remote) -> anyhow::Result<JobServiceClient<AuthChannel>> {
    let url = remote.shown();
    let endpoint = transport::endpoint(&remote.url, &remote.security)?;
    let channel = tokio::time::timeout(deadline::CALL, endpoint.connect())
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the coordinator at {url} did not complete a connection within {}",
                deadline::seconds(deadline::CALL)
            )
        })?
        .with_context(|| format!("cannot reach the coordinator at {url}"))?;
    Ok(
        JobServiceClient::new(transport::authorized(channel, &remote.security)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES),
    )
}

/// `message` as a request with the call deadline (for a Watch, the deadline
/// of its first answer; the stream itself lives as long as the job).
pub fn quick<T>(message: T) -> tonic::Request<T> {
    deadline::request(message, deadline::CALL)
}

/// A submission as a request with the planning deadline.
pub fn planned<T>(message: T) -> tonic::Request<T> {
    deadline::request(message, deadline::SUBMIT)
}

/// Follows a job until it finishes, showing a progress bar on stderr; survives a
/// coordinator restart by watching again.
pub async fn follow(remote: &Remote, job_id: &str, progress: bool) -> anyhow::Result<Job> {
    let bar = output::ProgressView::new(progress);
    // Since when every attempt to watch has failed, if they do.
    let mut failing_since: Option<std::time::Instant> = None;
    loop {
        // Whether this watch got a word from the coordinator: a failure after
        // one starts a new count of the time lost.
        let mut heard = false;
        let attempt = async {
            let mut client = connect(remote).await?;
            let mut stream = client
                .watch(quick(proto::WatchRequest {
                    job_id: job_id.to_string(),
                }))
                .await?
                .into_inner();
            // A stream silent too long may be one the coordinator no longer
            // serves: watching again tells.
            loop {
                let silence = deadline::WATCH_SILENCE;
                let Ok(message) = tokio::time::timeout(silence, stream.message()).await else {
                    anyhow::ensure!(
                        heard,
                        "the coordinator sent nothing for {} on a new watch",
                        deadline::seconds(silence)
                    );
                    return anyhow::Ok(None);
                };
                let Some(job) = message? else {
                    return anyhow::Ok(None);
                };
                heard = true;
                bar.update(&job);
                if job.is_finished() {
                    return anyhow::Ok(Some(job));
                }
            }
        }
        .await;
        if heard {
            failing_since = None;
        }
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
                if since.elapsed() > deadline::CLIENT_PATIENCE {
                    bar.abandon();
                    return Err(e.context(format!(
                        "lost the coordinator for {}",
                        deadline::seconds(deadline::CLIENT_PATIENCE)
                    )));
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

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
