//! What a shard fetches from the coordinator besides its lease: a checkpoint
//! too large to come with it, an attachment (a wasm module), stage data; each
//! call retried while the coordinator does not answer or has forgotten the
//! worker's session, until the shard is stopped or the worker's patience
//! runs out.

use tally_kinds::Error as KindError;
use tally_kinds::kind::StageRead;
use tally_wire::{deadline, proto};

use crate::backoff::Backoff;
use crate::context::Context;
use crate::error::Result;
use crate::spill::Gathering;

/// The checkpoint a lease starts from when it was too large to come with the
/// lease: fetched in chunks, retried as stage data is, into `into` (a file
/// when it is large: see [`Gathering`]). The size the lease announced bounds
/// what is read.
pub(crate) async fn fetch_checkpoint(
    ctx: &Context,
    lease_id: &str,
    announced: u64,
    control: &tally_kinds::Control,
    into: &mut Gathering,
) -> Result<()> {
    let into = std::sync::Mutex::new(into);
    let into = &into;
    with_retries(ctx, control, "checkpoint", |session| async move {
        let request = proto::FetchCheckpointRequest {
            worker_id: ctx.config.worker_id.clone(),
            session,
            lease_id: lease_id.to_string(),
        };
        // A retry starts again.
        let gather = |bytes: &[u8]| {
            let mut into = into.lock().expect("the checkpoint is not shared");
            match bytes.is_empty() {
                true => into.truncate(0),
                false => into.push(bytes),
            }
        };
        if let Err(e) = gather(&[]) {
            return Ok(Err(e));
        }
        let calls = &ctx.coordinator;
        let mut stream = calls
            .fetch_checkpoint(&ctx.stats, request, announced)
            .await?;
        let mut len = 0;
        while let Some(chunk) = calls.next_chunk(&ctx.stats, &mut stream).await? {
            len += chunk.data.len() as u64;
            if len > announced {
                return Err(tonic::Status::data_loss(format!(
                    "the checkpoint of {lease_id} is longer than the {announced} bytes announced"
                )));
            }
            if let Err(e) = gather(&chunk.data) {
                return Ok(Err(e));
            }
        }
        if len != announced {
            return Err(tonic::Status::data_loss(format!(
                "the checkpoint of {lease_id} has {len} bytes, {announced} announced"
            )));
        }
        Ok(Ok(()))
    })
    .await??;
    tracing::info!(lease = %lease_id, bytes = announced, "checkpoint fetched; resuming from it");
    Ok(())
}

/// Makes the attachment (a wasm module) with this SHA-256 available to the
/// kinds, fetched from the coordinator unless the kernel cache has it; its
/// digest is checked.
pub(crate) async fn fetch_attachment(
    ctx: &Context,
    sha256: &str,
    control: &tally_kinds::Control,
) -> Result<()> {
    let cache = &ctx.config.kernel_cache;
    if cache.attachment(sha256).is_some() {
        return Ok(());
    }
    let data = with_retries(ctx, control, "attachment", |session| async move {
        let request = proto::FetchAttachmentRequest {
            worker_id: ctx.config.worker_id.clone(),
            session,
            sha256: sha256.to_string(),
        };
        let calls = &ctx.coordinator;
        Ok(calls.fetch_attachment(&ctx.stats, request).await?.data)
    })
    .await?;
    // Hashing 8 MiB takes milliseconds: not on the async runtime.
    let (data, got) = tokio::task::spawn_blocking(move || {
        let got = tally_kinds::guest::sha256_hex(&data);
        (data, got)
    })
    .await
    .map_err(|e| KindError::Internal(format!("hashing an attachment: {e}")))?;
    if got != sha256 {
        return Err(tonic::Status::data_loss(format!(
            "the attachment fetched as {sha256} has SHA-256 {got}"
        ))
        .into());
    }
    tracing::info!(sha256, bytes = data.len(), "attachment fetched");
    cache.put_attachment(sha256, data.into());
    Ok(())
}

/// `fetch` with the current session, until it answers: while the coordinator
/// does not answer, or has forgotten the session (the worker then registers
/// again), it waits with backoff and tries again, until the shard is stopped
/// or, after [`deadline::WORKER_PATIENCE`] without an answer, fails with
/// the last error. `what` names the data in the log.
pub(crate) async fn with_retries<T, F, Fut>(
    ctx: &Context,
    control: &tally_kinds::Control,
    what: &str,
    mut fetch: F,
) -> Result<T>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, tonic::Status>>,
{
    let mut backoff = Backoff::new();
    let started = tokio::time::Instant::now();
    loop {
        control.check()?;
        let session = ctx.session();
        let status = match fetch(session.clone()).await {
            Ok(value) => return Ok(value),
            Err(status) => status,
        };
        let retry = if deadline::not_answered(&status) {
            // Said once for every call (see `calls`).
            tracing::debug!(error = %status.message(), "{what} fetch not answered; retrying");
            true
        } else if status.code() == tonic::Code::Unauthenticated {
            tracing::info!(error = %status.message(), "{what} fetch refused; registering again");
            ctx.session_refused(&session);
            true
        } else {
            false
        };
        if !retry || started.elapsed() >= deadline::WORKER_PATIENCE {
            return Err(status.into());
        }
        backoff.wait().await;
    }
}

/// The raw output of `stage` (or one bucket of it), in one call with
/// `session`; with `held`, only the outputs the coordinator holds among
/// blobs, each after its length: these shards, or all of them if none are
/// named.
pub(crate) async fn fetch_stage(
    ctx: &Context,
    job: &str,
    read: &StageRead,
    session: String,
    into: &std::sync::Mutex<&mut Gathering>,
    held: Option<&[u32]>,
) -> std::result::Result<Result<()>, tonic::Status> {
    let request = proto::FetchStageDataRequest {
        job_id: job.to_string(),
        stage: read.stage,
        worker_id: ctx.config.worker_id.clone(),
        session,
        bucket: read.bucket,
        held_only: held.is_some(),
        shards: held.unwrap_or_default().to_vec(),
    };
    // A retry starts the part again.
    let gather = |bytes: Option<&[u8]>| {
        let mut into = into.lock().expect("the input is not shared");
        match bytes {
            Some(bytes) => into.push(bytes),
            None => into.truncate(0),
        }
    };
    if let Err(e) = gather(None) {
        return Ok(Err(e));
    }
    let calls = &ctx.coordinator;
    let mut stream = calls.fetch_stage_data(&ctx.stats, request).await?;
    while let Some(chunk) = calls.next_chunk(&ctx.stats, &mut stream).await? {
        if let Err(e) = gather(Some(&chunk.data)) {
            return Ok(Err(e));
        }
    }
    Ok(Ok(()))
}
