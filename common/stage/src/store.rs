//! A stage store outside the coordinator, through the `object_store` crate: a
//! directory (`file://`) or an S3 bucket (`s3://`). Every call waits out an
//! unreachable store with backoff for up to its patience, then says
//! `Unavailable`; a blob that is missing or fails its digest is `Corrupt`.
//! Errors of `object_store` are read in one place ([`StageStore::failure`]),
//! which keeps one line of each: of an S3 error response, its code and
//! message only (the rest may name the access key id).

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tally_kinds::{Control, Stored};

use crate::blob::{self, BlobRef, Index};
use crate::error::{Result, StageError};
use crate::error_text::read_error;
use crate::keys::is_pack_key;
use crate::url::StageStoreUrl;

/// How long a call waits out an unreachable store by default.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(300);
/// How long the check of a store at start waits it out.
pub const CHECK_PATIENCE: Duration = Duration::from_secs(30);
/// Blobs above this go up in parts of this size (S3's parts are 5 MiB at least).
pub(crate) const PART: usize = 16 * 1024 * 1024;
/// Reads a reader keeps in flight (of many blobs, one per shard of a stage).
pub const PARALLEL_READS: usize = 8;
/// Where [`StageStore::check`] writes its probe objects.
const PROBE_DIR: &str = "probe";

/// A directory or bucket holding stage blobs.
#[derive(Clone)]
pub struct StageStore {
    pub(crate) inner: Arc<dyn ObjectStore>,
    url: StageStoreUrl,
    /// Where the store is, in words for messages: the directory, or the
    /// bucket, the endpoint and the variable that named it.
    place: String,
    patience: Duration,
    /// Fault injection for tests: write every blob in two parts, pausing
    /// this long between them.
    mid_upload_pause: Duration,
    /// The parts [`StageStore::put_stored`] reads and uploads.
    part: usize,
}

impl std::fmt::Debug for StageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StageStore({})", self.url)
    }
}

impl StageStore {
    /// Opens the store `url` names; `None` for the coordinator's own store.
    /// S3 takes its endpoint, region and credentials from the standard AWS
    /// environment variables, or the shared credentials file.
    pub fn open(url: &StageStoreUrl) -> Result<Option<StageStore>> {
        let (inner, place): (Arc<dyn ObjectStore>, String) = match url {
            StageStoreUrl::Coordinator => return Ok(None),
            StageStoreUrl::File(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    StageError::InvalidConfig(format!(
                        "cannot create the stage directory {}: {e}",
                        dir.display()
                    ))
                })?;
                let local = LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| StageError::InvalidConfig(e.to_string()))?
                    .with_automatic_cleanup(true);
                (Arc::new(local), format!("the directory {}", dir.display()))
            }
            StageStoreUrl::S3 { bucket, prefix } => {
                let (s3, place) = crate::s3::open(bucket, &crate::s3::environment())?;
                match prefix.is_empty() {
                    true => (Arc::new(s3), place),
                    false => (
                        Arc::new(PrefixStore::new(s3, Path::from(prefix.as_str()))),
                        place,
                    ),
                }
            }
        };
        Ok(Some(StageStore {
            inner,
            url: url.clone(),
            place,
            patience: DEFAULT_PATIENCE,
            mid_upload_pause: Duration::ZERO,
            part: PART,
        }))
    }

    /// How long each call waits out an unreachable store.
    pub fn with_patience(mut self, patience: Duration) -> StageStore {
        self.patience = patience;
        self
    }

    /// Fault injection for tests: every blob is written in two parts with
    /// `pause` between them (a process killed then leaves an upload begun
    /// and never finished).
    pub fn with_mid_upload_pause(mut self, pause: Duration) -> StageStore {
        self.mid_upload_pause = pause;
        self
    }

    pub fn url(&self) -> &StageStoreUrl {
        &self.url
    }

    /// Writes `data` as the blob `key`, returning what to commit. The data
    /// goes out as it is, after its index: never copied.
    pub async fn put(
        &self,
        key: &str,
        data: impl Into<bytes::Bytes>,
        control: &Control,
    ) -> Result<BlobRef> {
        let data: bytes::Bytes = data.into();
        let (index, digest) = blob::index(&data);
        let index = bytes::Bytes::from(index);
        let size = (index.len() + data.len()) as u64;
        self.write_pieces(key, vec![index, data], control).await?;
        Ok(BlobRef {
            key: key.to_string(),
            size,
            digest,
            offset: 0,
        })
    }

    /// Writes `outputs` (the outputs of the shards of one report batch, of
    /// one stage) one after another as blobs of one object, the pack `key`
    /// ([`crate::keys::pack_key`]), returning each one's reference (its offset in the
    /// pack beside its size and digest). One write for many shards: a file
    /// or an object request a batch instead of one a shard. The pack starts
    /// with a header of its own, so no blob in it is at offset 0 (the form
    /// of a blob of its own). The data goes out as it is: never copied.
    pub async fn put_pack(
        &self,
        key: &str,
        outputs: Vec<bytes::Bytes>,
        control: &Control,
    ) -> Result<Vec<BlobRef>> {
        if !is_pack_key(key) {
            return Err(StageError::Refused(format!("{key} names no pack")));
        }
        let (pieces, refs) = {
            let owned = key.to_string();
            tokio::task::spawn_blocking(move || pack_pieces(&owned, outputs))
                .await
                .map_err(|e| StageError::Unavailable(format!("indexing the pack {key}: {e}")))?
        };
        self.write_pieces(key, pieces, control).await?;
        Ok(refs)
    }

    /// Writes `pieces`, one after another, as the object `key`: in one
    /// request up to a part, else as a multipart upload of parts (never
    /// copied). With a mid-upload pause set (fault injection), always in
    /// two parts, pausing after the first.
    pub(crate) async fn write_pieces(
        &self,
        key: &str,
        pieces: Vec<bytes::Bytes>,
        control: &Control,
    ) -> Result<()> {
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        let path = parse_key(key)?;
        let pause = self.mid_upload_pause;
        self.patiently("write", key, control, || {
            let (path, pieces, inner) = (path.clone(), pieces.clone(), self.inner.clone());
            async move {
                if total <= PART && pause.is_zero() {
                    let payload = PutPayload::from_iter(pieces);
                    return inner.put(&path, payload).await.map(|_| ());
                }
                let part = match pause.is_zero() {
                    true => PART,
                    false => total.div_ceil(2),
                };
                let upload = inner.put_multipart(&path).await?;
                let mut write = WriteMultipart::new_with_chunk_size(upload, part);
                // Collected first: an iterator of closures held across the
                // awaits would keep the future from being `Send`.
                let slices: Vec<bytes::Bytes> = pieces
                    .iter()
                    .flat_map(|piece| piece.chunks(part).map(|slice| piece.slice_ref(slice)))
                    .collect();
                let (mut written, mut paused) = (0, false);
                for slice in slices {
                    if written >= part && !pause.is_zero() && !paused {
                        paused = true;
                        write.wait_for_capacity(1).await?;
                        tracing::warn!(key = %path, ?pause, "fault injection: pausing mid-upload");
                        tokio::time::sleep(pause).await;
                    }
                    write.wait_for_capacity(2).await?;
                    written += slice.len();
                    write.put(slice);
                }
                write.finish().await.map(|_| ())
            }
        })
        .await
    }

    /// Writes the bytes of `data` (a shard's output in a file) as the blob
    /// `key`, as [`StageStore::put`] does, reading them in parts: never more
    /// than a few parts in memory.
    pub async fn put_stored(
        &self,
        key: &str,
        data: Arc<dyn Stored>,
        control: &Control,
    ) -> Result<BlobRef> {
        let (len, part) = (data.len(), self.part);
        if len <= part as u64 {
            let bytes = read_stored(data, 0..len).await?;
            return self.put(key, bytes, control).await;
        }
        let (index, digest) = {
            let data = data.clone();
            tokio::task::spawn_blocking(move || blob::index_stored(&*data))
                .await
                .map_err(|e| StageError::Unavailable(format!("indexing {key}: {e}")))?
                .map_err(|e| StageError::Unavailable(format!("indexing {key}: {e}")))?
        };
        let index = bytes::Bytes::from(index);
        let size = index.len() as u64 + len;
        let path = parse_key(key)?;
        self.patiently("write", key, control, || {
            let (path, index, data, inner) = (
                path.clone(),
                index.clone(),
                data.clone(),
                self.inner.clone(),
            );
            async move {
                let upload = inner.put_multipart(&path).await?;
                let mut write = WriteMultipart::new_with_chunk_size(upload, part);
                write.put(index);
                let mut at = 0;
                while at < len {
                    let end = (at + part as u64).min(len);
                    let piece = read_stored(data.clone(), at..end).await.map_err(|e| {
                        object_store::Error::Generic {
                            store: LOCAL_READ,
                            source: Box::new(e),
                        }
                    })?;
                    write.wait_for_capacity(2).await?;
                    write.put(piece);
                    at = end;
                }
                write.finish().await.map(|_| ())
            }
        })
        .await?;
        Ok(BlobRef {
            key: key.to_string(),
            size,
            digest,
            offset: 0,
        })
    }

    /// The data of `blob`, checked.
    pub async fn read(&self, blob: &BlobRef, control: &Control) -> Result<Vec<u8>> {
        if blob.offset > 0 {
            let bytes = self.get_range(blob, 0..blob.size, control).await?;
            return blob::decode(blob, &bytes);
        }
        let path = parse_key(&blob.key)?;
        let bytes = self
            .patiently("read", &blob.key, control, || async {
                let got = self.inner.get(&path).await?;
                got.bytes().await
            })
            .await?;
        blob::decode(blob, &bytes)
    }

    /// The bytes `range` of `blob`'s data, checked by the chunks covering it.
    pub async fn read_range(
        &self,
        blob: &BlobRef,
        index: &Index,
        range: Range<u64>,
        control: &Control,
    ) -> Result<Vec<u8>> {
        if range.end > index.data_len() || range.start > range.end {
            return Err(StageError::Corrupt {
                key: blob.key.clone(),
                why: format!(
                    "bytes {range:?} were asked of {} bytes of data",
                    index.data_len()
                ),
            });
        }
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let covering = index.covering(&range);
        let at = index.data_offset();
        let bytes = self
            .get_range(blob, at + covering.start..at + covering.end, control)
            .await?;
        index.check(blob, covering.start, &bytes)?;
        let from = (range.start - covering.start) as usize;
        Ok(bytes[from..from + (range.end - range.start) as usize].to_vec())
    }

    /// The index of `blob`, checked against its committed digest.
    pub async fn index(&self, blob: &BlobRef, control: &Control) -> Result<Index> {
        let head = self
            .get_range(blob, 0..blob::index_bound(blob.size), control)
            .await?;
        Index::parse(blob, &head)
    }

    /// Bucket `q` of a blob whose data is a frontier shard's output (framed as
    /// in `tally_kernels::buckets`): its bytes only, checked.
    pub async fn read_bucket(&self, blob: &BlobRef, q: u32, control: &Control) -> Result<Vec<u8>> {
        let (index, range) = self.locate(blob, Some(q), control).await?;
        self.read_range(blob, &index, range, control).await
    }

    /// Where the part of `blob` a reader wants lies in its data: bucket `q` of
    /// a frontier shard's output (framed as in `tally_kernels::buckets`), or
    /// with `None` the whole data; with the blob's index, to read it by
    /// ranges ([`StageStore::read_range`]).
    pub async fn locate(
        &self,
        blob: &BlobRef,
        bucket: Option<u32>,
        control: &Control,
    ) -> Result<(Index, Range<u64>)> {
        let index = self.index(blob, control).await?;
        let Some(q) = bucket else {
            let whole = 0..index.data_len();
            return Ok((index, whole));
        };
        let malformed = |why: String| StageError::Corrupt {
            key: blob.key.clone(),
            why,
        };
        let head = self
            .read_range(blob, &index, 0..4.min(index.data_len()), control)
            .await?;
        let count = head
            .try_into()
            .map(u32::from_le_bytes)
            .map_err(|_| malformed("its data is too short for a bucket count".into()))?;
        if q >= count {
            return Err(malformed(format!(
                "it holds {count} buckets; bucket {q} was asked for"
            )));
        }
        let lengths_end = 4 + 8 * u64::from(count);
        if lengths_end > index.data_len() {
            return Err(malformed("its bucket lengths are cut short".into()));
        }
        let lengths = self
            .read_range(blob, &index, 4..lengths_end, control)
            .await?;
        let mut start = lengths_end;
        let mut len = 0;
        for (i, l) in lengths.chunks(8).enumerate() {
            let l = u64::from_le_bytes(l.try_into().expect("8 bytes"));
            if i as u32 == q {
                len = l;
                break;
            }
            start = start.saturating_add(l);
        }
        let end = start.saturating_add(len);
        if end > index.data_len() {
            return Err(malformed(format!("its bucket {q} runs past its data")));
        }
        Ok((index, start..end))
    }

    /// Removes the blob `key`; one already gone is no error.
    pub async fn delete(&self, key: &str) -> Result<()> {
        let path = parse_key(key)?;
        let control = Control::default();
        self.patiently("delete", key, &control, || async {
            match self.inner.delete(&path).await {
                Err(object_store::Error::NotFound { .. }) => Ok(()),
                other => other,
            }
        })
        .await
    }

    /// The keys of every blob under `prefix` (a key prefix such as
    /// [`crate::keys::job_prefix`]), or of every blob.
    pub async fn list(&self, prefix: Option<&str>) -> Result<Vec<String>> {
        let prefix = prefix.map(parse_key).transpose()?;
        let control = Control::default();
        self.patiently(
            "list",
            prefix.as_ref().map_or("", |p| p.as_ref()),
            &control,
            || async {
                self.inner
                    .list(prefix.as_ref())
                    .map_ok(|meta| meta.location.to_string())
                    .try_collect::<Vec<_>>()
                    .await
            },
        )
        .await
    }

    /// Checks that the store can be used, before anything relies on it:
    /// writes, reads back, lists and deletes a probe object, each call
    /// waiting out an unreachable store up to the patience. Refuses with one
    /// line naming the store (the directory, or the bucket, the endpoint and
    /// its variable) and what to change.
    pub async fn check(&self) -> Result<()> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let key = format!("{PROBE_DIR}/{}-{nanos}", std::process::id());
        let path = parse_key(&key)?;
        let data = bytes::Bytes::from(key.clone().into_bytes());
        let control = Control::default();
        let probe = async {
            self.patiently("write", &key, &control, || {
                self.inner.put(&path, PutPayload::from(data.clone()))
            })
            .await?;
            let read = self
                .patiently("read", &key, &control, || async {
                    self.inner.get(&path).await?.bytes().await
                })
                .await?;
            if read != data {
                return Err(StageError::Refused(format!(
                    "read {key}: it came back other than it was written"
                )));
            }
            if !self.list(Some(PROBE_DIR)).await?.contains(&key) {
                return Err(StageError::Refused(format!(
                    "list {PROBE_DIR}: the object {key} just written is not listed"
                )));
            }
            self.delete(&key).await
        };
        probe.await.map_err(|e| self.check_failed(e))
    }

    /// The refusal of a store that failed [`StageStore::check`]: what failed,
    /// where, and what to change. Configuration for anything the store
    /// answered; unavailable if it never answered.
    fn check_failed(&self, error: StageError) -> StageError {
        let said = error.to_string();
        let s3 = matches!(self.url, StageStoreUrl::S3 { .. });
        let hint = if said.contains("NoSuchBucket") {
            "; create the bucket, or name an existing one in --stage-store"
        } else if s3
            && [
                "HTTP 401",
                "HTTP 403",
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
            ]
            .iter()
            .any(|s| said.contains(s))
        {
            "; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
        } else if s3 {
            "; check AWS_ENDPOINT_URL and AWS_REGION"
        } else {
            "; check that the directory is mounted and this process may write there"
        };
        let what = format!("the stage store {} ({})", self.url, self.place);
        match error {
            StageError::Cancelled => StageError::Cancelled,
            StageError::Unavailable(why) => {
                StageError::Unavailable(format!("{what} did not answer: {why}{hint}"))
            }
            StageError::Refused(why) => {
                StageError::InvalidConfig(format!("{what} cannot be used: {why}{hint}"))
            }
            _ => StageError::InvalidConfig(format!("{what} cannot be used: {said}{hint}")),
        }
    }

    /// A directory store only: deletes what uploads cut short left behind
    /// (object_store writes a blob as `KEY#N` and renames it when done, so a
    /// writer killed in mid-upload leaves that file, which listings do not
    /// show), once nothing has written to it for `idle`. Returns how many.
    pub async fn remove_abandoned_uploads(&self, idle: Duration) -> Result<usize> {
        let StageStoreUrl::File(dir) = &self.url else {
            return Ok(0);
        };
        let root = dir.join("jobs");
        tokio::task::spawn_blocking(move || abandoned_uploads(&root, idle))
            .await
            .map_err(|e| {
                StageError::Unavailable(format!("the sweep of partial uploads stopped: {e}"))
            })?
    }

    async fn get_range(
        &self,
        blob: &BlobRef,
        range: Range<u64>,
        control: &Control,
    ) -> Result<bytes::Bytes> {
        let path = parse_key(&blob.key)?;
        let range = blob.offset + range.start..blob.offset + range.end;
        self.patiently("read", &blob.key, control, || {
            self.inner.get_range(&path, range.clone())
        })
        .await
    }

    /// Runs `op` until it succeeds, fails for good, or the store has been
    /// unreachable for longer than the patience; stops when `control` is
    /// cancelled. A missing object is `Corrupt` (a committed blob is gone).
    pub(crate) async fn patiently<T, F, Fut>(
        &self,
        what: &str,
        key: &str,
        control: &Control,
        mut op: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        let started = Instant::now();
        let mut wait = Duration::from_millis(200);
        loop {
            // A call in flight is abandoned when the caller stops (a drained
            // worker must not wait out a slow store).
            let attempt = tokio::select! {
                result = op() => result,
                () = cancelled(control) => return Err(StageError::Cancelled),
            };
            let error = match attempt {
                Ok(value) => return Ok(value),
                Err(e) => match self.failure(what, key, &e) {
                    Failure::Final(refused) => return Err(refused),
                    Failure::Retry(line) => line,
                },
            };
            if started.elapsed() >= self.patience {
                return Err(StageError::Unavailable(format!(
                    "{what} {key} failed for {}s: {error}",
                    started.elapsed().as_secs()
                )));
            }
            tracing::warn!(store = %self.url, key, error = %error, "stage store {what} failed; retrying");
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = cancelled(control) => return Err(StageError::Cancelled),
            }
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    }

    /// The one reading of an `object_store` error: final (refused, or a
    /// blob missing) or worth another try, with one line saying it.
    fn failure(&self, what: &str, key: &str, error: &object_store::Error) -> Failure {
        let reading = read_error(error);
        let refused =
            |line: &str| Failure::Final(StageError::Refused(format!("{what} {key}: {line}")));
        match error {
            object_store::Error::NotFound { .. } if reading.line.contains("NoSuchBucket") => {
                let bucket = match &self.url {
                    StageStoreUrl::S3 { bucket, .. } => bucket.as_str(),
                    _ => "",
                };
                refused(&format!(
                    "the bucket {bucket} does not exist: {}",
                    reading.line
                ))
            }
            // The worker's own file, not the store: trying again cannot help.
            object_store::Error::Generic {
                store: LOCAL_READ, ..
            } => Failure::Final(StageError::Unavailable(format!("{what} {key}: {error}"))),
            // The runtime is shutting down under a directory store's blocking
            // call: nothing to retry, nothing to warn of.
            object_store::Error::JoinError { source } if source.is_cancelled() => {
                Failure::Final(StageError::Cancelled)
            }
            object_store::Error::NotFound { .. } => Failure::Final(StageError::Corrupt {
                key: key.to_string(),
                why: "it is missing from the store".into(),
            }),
            object_store::Error::InvalidPath { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::NotImplemented { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. } => refused(&reading.line),
            // A request the store will refuse however often it is sent
            // (throttling and timeouts aside).
            _ if reading
                .status
                .is_some_and(|s| (400..500).contains(&s) && s != 408 && s != 429) =>
            {
                refused(&reading.line)
            }
            _ => Failure::Retry(reading.line),
        }
    }

    /// Where the store is, in words: the directory, or the bucket, the
    /// endpoint and the variable that named it.
    pub fn place(&self) -> &str {
        &self.place
    }
}

/// The `store` of an upload's error that is a failed read of the local
/// bytes being written.
const LOCAL_READ: &str = "the local file being uploaded";

/// The bytes `range` of `data`, read on a blocking thread.
async fn read_stored(data: Arc<dyn Stored>, range: Range<u64>) -> Result<bytes::Bytes> {
    let read = tokio::task::spawn_blocking(move || data.read_range(range)).await;
    match read {
        Ok(Ok(bytes)) => Ok(bytes::Bytes::from(bytes)),
        Ok(Err(e)) => Err(StageError::Unavailable(format!(
            "reading a local file: {e}"
        ))),
        Err(e) => Err(StageError::Unavailable(format!(
            "reading a local file: {e}"
        ))),
    }
}

/// Removes the files under `dir` named `NAME#DIGITS` (an unfinished upload)
/// that were last written more than `idle` ago.
fn abandoned_uploads(dir: &std::path::Path, idle: Duration) -> Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(StageError::Unavailable(format!("{}: {e}", dir.display()))),
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            removed += abandoned_uploads(&path, idle)?;
            continue;
        }
        let name = entry.file_name();
        let partial = name
            .to_str()
            .and_then(|n| n.rsplit_once('#'))
            .is_some_and(|(base, n)| {
                !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
            });
        let quiet = meta
            .modified()
            .ok()
            .and_then(|at| at.elapsed().ok())
            .is_some_and(|age| age >= idle);
        if partial && quiet && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// What an `object_store` error means for the call that met it.
enum Failure {
    /// For good: said as the caller should see it.
    Final(StageError),
    /// Perhaps not on another try: one line saying what happened.
    Retry(String),
}

/// Resolves once `control` is cancelled.
async fn cancelled(control: &Control) {
    while !control.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn parse_key(key: &str) -> Result<Path> {
    Path::parse(key)
        .map_err(|e| StageError::Refused(format!("the blob key {key:?} is malformed: {e}")))
}

/// The first bytes of a pack: it holds blobs after them, so none is at
/// offset 0.
const PACK_MAGIC: &[u8; 8] = b"TSPACK1\n";

/// The pieces of a pack of `outputs` (its header, then each output's index
/// and data) and the reference of each output's blob in it.
fn pack_pieces(key: &str, outputs: Vec<bytes::Bytes>) -> (Vec<bytes::Bytes>, Vec<BlobRef>) {
    let mut pieces = Vec::with_capacity(1 + 2 * outputs.len());
    let mut refs = Vec::with_capacity(outputs.len());
    pieces.push(bytes::Bytes::from_static(PACK_MAGIC));
    let mut at = PACK_MAGIC.len() as u64;
    for data in outputs {
        let (index, digest) = blob::index(&data);
        let size = (index.len() + data.len()) as u64;
        refs.push(BlobRef {
            key: key.to_string(),
            size,
            digest,
            offset: at,
        });
        at += size;
        pieces.push(bytes::Bytes::from(index));
        pieces.push(data);
    }
    (pieces, refs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{blob_key, job_prefix, pack_key};
    use tally_wire::lease::LeaseId;

    fn file_store(dir: &std::path::Path) -> StageStore {
        let url = StageStoreUrl::File(dir.to_path_buf());
        StageStore::open(&url).unwrap().unwrap()
    }

    /// The outputs of one batch in one object: each read back whole and by
    /// bucket through its own reference; a changed byte refuses only the
    /// blob it falls in; one write for all of them.
    #[tokio::test]
    async fn a_pack_holds_each_output_as_a_blob_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(dir.path());
        let control = Control::default();
        let buckets: Vec<Vec<u8>> = (0..3u8)
            .map(|b| vec![b; 900 + 40_000 * b as usize])
            .collect();
        let outputs: Vec<Vec<u8>> = vec![
            b"small".to_vec(),
            tally_kernels::buckets::encode_buckets(&buckets),
            (0..3 * CHUNK_FOR_TESTS + 11)
                .map(|i| (i * 13 % 251) as u8)
                .collect(),
        ];
        let key = pack_key(&LeaseId::new("j", 2, 5, 1), 3);
        let sent = outputs.iter().cloned().map(bytes::Bytes::from).collect();
        let refs = store.put_pack(&key, sent, &control).await.unwrap();
        assert_eq!(refs.len(), 3);
        assert_eq!(
            store.list(Some(&job_prefix("j"))).await.unwrap(),
            vec![key.clone()]
        );
        for (blob, output) in refs.iter().zip(&outputs) {
            assert!(blob.offset > 0 && blob.key == key);
            assert_eq!(&store.read(blob, &control).await.unwrap(), output);
            let (index, range) = store.locate(blob, None, &control).await.unwrap();
            let part = range.start + 1..range.end - 1;
            let read = store
                .read_range(blob, &index, part.clone(), &control)
                .await
                .unwrap();
            assert_eq!(read, output[part.start as usize..part.end as usize]);
        }
        for (q, bucket) in buckets.iter().enumerate() {
            let read = store
                .read_bucket(&refs[1], q as u32, &control)
                .await
                .unwrap();
            assert_eq!(&read, bucket, "bucket {q}");
        }
        // The blobs lie one after another, the first past the pack's header.
        assert_eq!(refs[0].offset, PACK_MAGIC.len() as u64);
        assert_eq!(refs[1].offset, refs[0].offset + refs[0].size);
        let file = dir.path().join(&key);
        let mut bytes = std::fs::read(&file).unwrap();
        assert_eq!(bytes.len() as u64, refs[2].offset + refs[2].size);
        bytes[(refs[1].offset + refs[1].size - 1) as usize] ^= 1;
        std::fs::write(&file, &bytes).unwrap();
        let err = store.read(&refs[1], &control).await.unwrap_err();
        assert!(matches!(err, StageError::Corrupt { .. }), "{err}");
        assert_eq!(store.read(&refs[0], &control).await.unwrap(), outputs[0]);
        assert_eq!(store.read(&refs[2], &control).await.unwrap(), outputs[2]);
        let err = store
            .put_pack(
                &blob_key(&LeaseId::new("j", 2, 5, 1), "output"),
                vec![],
                &control,
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("names no pack"), "{err}");
    }

    const CHUNK_FOR_TESTS: u64 = blob::CHUNK;

    #[tokio::test]
    async fn a_file_store_round_trips_blobs_and_buckets_and_refuses_tampering() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(dir.path());
        let control = Control::default();
        let buckets: Vec<Vec<u8>> = (0..5u8)
            .map(|b| vec![b; 1000 + 70_000 * b as usize])
            .collect();
        let output = tally_kernels::buckets::encode_buckets(&buckets);
        let key = blob_key(&LeaseId::new("j", 1, 0, 1), "output");
        let blob = store.put(&key, output.clone(), &control).await.unwrap();
        assert_eq!(store.read(&blob, &control).await.unwrap(), output);
        for (q, bucket) in buckets.iter().enumerate() {
            let read = store.read_bucket(&blob, q as u32, &control).await.unwrap();
            assert_eq!(&read, bucket, "bucket {q}");
        }
        assert!(store.read_bucket(&blob, 5, &control).await.is_err());
        assert_eq!(
            store.list(Some(&job_prefix("j"))).await.unwrap(),
            vec![key.clone()]
        );

        // One byte changed in the file: refused, whole or by bucket.
        let file = dir.path().join(&key);
        let mut bytes = std::fs::read(&file).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&file, &bytes).unwrap();
        let err = store.read(&blob, &control).await.unwrap_err();
        assert!(matches!(err, StageError::Corrupt { .. }), "{err}");
        let err = store.read_bucket(&blob, 4, &control).await.unwrap_err();
        assert!(matches!(err, StageError::Corrupt { .. }), "{err}");
        assert_eq!(
            store.read_bucket(&blob, 0, &control).await.unwrap(),
            buckets[0]
        );

        store.delete(&key).await.unwrap();
        store.delete(&key).await.unwrap();
        let err = store.read(&blob, &control).await.unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
        assert!(store.list(None).await.unwrap().is_empty());
    }

    /// Bytes that fail to be read past `fails_from`.
    struct Unreadable {
        bytes: Vec<u8>,
        fails_from: u64,
    }

    impl Stored for Unreadable {
        fn len(&self) -> u64 {
            self.bytes.len() as u64
        }

        fn read_at(&self, offset: u64, buf: &mut [u8]) -> tally_kinds::Result<usize> {
            if offset + buf.len() as u64 > self.fails_from {
                return Err(tally_kinds::Error::Failed("the disk is gone".into()));
            }
            self.bytes.read_at(offset, buf)
        }
    }

    #[tokio::test]
    async fn a_stored_output_is_written_in_parts_as_the_same_blob() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = file_store(dir.path());
        store.part = 64 * 1024;
        let control = Control::default();
        let buckets: Vec<Vec<u8>> = (0..7u32)
            .map(|b| (0..50_000 * b + 3).map(|i| (i * 7 + b) as u8).collect())
            .collect();
        let output = tally_kernels::buckets::encode_buckets(&buckets);
        assert!(output.len() > 10 * store.part, "{} bytes", output.len());
        let whole = store
            .put("a/whole", output.clone(), &control)
            .await
            .unwrap();
        let stored: Arc<dyn Stored> = Arc::new(output.clone());
        let parts = store.put_stored("a/parts", stored, &control).await.unwrap();
        assert_eq!((parts.size, parts.digest), (whole.size, whole.digest));
        assert_eq!(
            std::fs::read(dir.path().join("a/parts")).unwrap(),
            std::fs::read(dir.path().join("a/whole")).unwrap()
        );
        assert_eq!(store.read(&parts, &control).await.unwrap(), output);
        for (q, bucket) in buckets.iter().enumerate() {
            let read = store.read_bucket(&parts, q as u32, &control).await.unwrap();
            assert_eq!(&read, bucket, "bucket {q}");
        }
        // Small enough for one part: the same blob too.
        let small: Arc<dyn Stored> = Arc::new(buckets[1].clone());
        let one = store.put_stored("a/one", small, &control).await.unwrap();
        assert_eq!(store.read(&one, &control).await.unwrap(), buckets[1]);

        // Bytes that cannot be read fail the write at once, and nothing is
        // committed under the key.
        let len = output.len() as u64;
        for fails_from in [0, len / 2] {
            let broken: Arc<dyn Stored> = Arc::new(Unreadable {
                bytes: output.clone(),
                fails_from,
            });
            let err = store
                .put_stored("a/broken", broken, &control)
                .await
                .unwrap_err();
            assert!(err.to_string().contains("the disk is gone"), "{err}");
            assert!(!dir.path().join("a/broken").exists());
        }
    }

    #[tokio::test]
    async fn the_files_of_uploads_cut_short_are_removed_once_idle() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(dir.path());
        let key = blob_key(&LeaseId::new("j", 1, 0, 1), "output");
        let blob = store
            .put(&key, &b"whole"[..], &Control::default())
            .await
            .unwrap();
        let partial = dir.path().join(format!("{key}#1"));
        std::fs::write(&partial, b"half").unwrap();
        let lookalike = dir.path().join("jobs/j/notes#draft");
        std::fs::write(&lookalike, b"not an upload").unwrap();
        // Not idle long enough: kept.
        let hour = Duration::from_secs(3600);
        assert_eq!(store.remove_abandoned_uploads(hour).await.unwrap(), 0);
        assert!(partial.exists());
        assert_eq!(
            store
                .remove_abandoned_uploads(Duration::ZERO)
                .await
                .unwrap(),
            1
        );
        assert!(!partial.exists() && lookalike.exists());
        assert_eq!(
            store.read(&blob, &Control::default()).await.unwrap(),
            b"whole"
        );
    }

    #[tokio::test]
    async fn an_unreachable_store_is_waited_out_up_to_the_patience() {
        // Nothing listens on this port: every call fails to connect.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let store = s3_at(port);
        let err = store
            .put("jobs/j/1/0/1/output", &b"data"[..], &Control::default())
            .await
            .unwrap_err();
        assert!(matches!(err, StageError::Unavailable(_)), "{err}");
        assert!(!err.to_string().contains("never-logged"), "{err}");
        let cancelled = Control::default();
        cancelled.cancel();
        let err = store
            .put("jobs/j/1/0/1/output", &b"data"[..], &cancelled)
            .await
            .unwrap_err();
        assert_eq!(err, StageError::Cancelled);
    }

    /// A store on the S3 endpoint at `port` of this host, with a patience
    /// of half a second and no retries inside.
    fn s3_at(port: u16) -> StageStore {
        use object_store::RetryConfig;
        use object_store::aws::AmazonS3Builder;
        tally_wire::transport::use_ring_for_tls();
        let s3 = AmazonS3Builder::new()
            .with_bucket_name("tally-test")
            .with_region("us-east-1")
            .with_endpoint(format!("http://127.0.0.1:{port}"))
            .with_allow_http(true)
            .with_access_key_id("AKIAEXAMPLEKEYID")
            .with_secret_access_key("never-logged")
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .build()
            .unwrap();
        StageStore {
            inner: Arc::new(s3),
            url: StageStoreUrl::S3 {
                bucket: "tally-test".into(),
                prefix: String::new(),
            },
            place: format!("bucket tally-test at http://127.0.0.1:{port}"),
            patience: Duration::from_millis(500),
            mid_upload_pause: Duration::ZERO,
            part: PART,
        }
    }

    /// An HTTP server on a port of this host that answers every request
    /// with `status` and the XML `body`.
    fn answering(status: &'static str, body: &'static str) -> u16 {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut request_body = vec![0; length];
                let _ = reader.read_exact(&mut request_body);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        port
    }

    #[tokio::test]
    async fn an_s3_error_response_is_kept_as_one_line_of_its_code_and_message() {
        // As S3 answers a request signed with the wrong secret: the body
        // names the access key id and what was signed.
        let signature = answering(
            "403 Forbidden",
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\n  <Code>SignatureDoesNotMatch</Code>\n  \
             <Message>The request signature we calculated does not match the signature you \
             provided. Check your key and signing method.</Message>\n  \
             <AWSAccessKeyId>AKIAEXAMPLEKEYID</AWSAccessKeyId>\n  \
             <StringToSign>AWS4-HMAC-SHA256\n20260101T000000Z</StringToSign>\n  \
             <CanonicalRequest>PUT /tally-test/k</CanonicalRequest>\n</Error>\n",
        );
        let err = s3_at(signature)
            .put("jobs/j/1/0/1/output", &b"data"[..], &Control::default())
            .await
            .unwrap_err();
        let said = err.to_string();
        assert!(matches!(err, StageError::Refused(_)), "{said}");
        assert!(
            said.contains(
                "HTTP 403 Forbidden: SignatureDoesNotMatch: The request signature we calculated \
                 does not match the signature you provided."
            ),
            "{said}"
        );
        for hidden in [
            "AKIAEXAMPLEKEYID",
            "StringToSign",
            "CanonicalRequest",
            "<",
            "\n",
        ] {
            assert!(!said.contains(hidden), "{hidden:?} in {said}");
        }

        let no_bucket = answering(
            "404 Not Found",
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchBucket</Code>\
             <Message>The specified bucket does not exist</Message>\
             <BucketName>tally-test</BucketName><RequestId>R1</RequestId></Error>",
        );
        let store = s3_at(no_bucket);
        let blob = BlobRef {
            key: "jobs/j/1/0/1/output".into(),
            size: 100,
            digest: [0; 32],
            offset: 0,
        };
        let err = store.read(&blob, &Control::default()).await.unwrap_err();
        let said = err.to_string();
        assert!(matches!(err, StageError::Refused(_)), "{said}");
        assert!(
            said.contains("NoSuchBucket: The specified bucket does not exist")
                && said.contains("the bucket tally-test does not exist"),
            "{said}"
        );
        assert!(
            !said.contains("RequestId") && !said.contains("missing"),
            "{said}"
        );
        let err = store.check().await.unwrap_err();
        let said = err.to_string();
        assert!(matches!(err, StageError::InvalidConfig(_)), "{said}");
        assert!(said.contains("create the bucket"), "{said}");

        // A server error is retried until the patience, then said in one line.
        let failing = answering(
            "500 Internal Server Error",
            "<Error><Code>InternalError</Code><Message>We encountered an internal error.\n\
             Please try again.</Message><HostId>h</HostId></Error>",
        );
        let err = s3_at(failing).list(None).await.unwrap_err();
        let said = err.to_string();
        assert!(matches!(err, StageError::Unavailable(_)), "{said}");
        assert!(
            said.contains("InternalError: We encountered an internal error. Please try again."),
            "{said}"
        );
        assert!(!said.contains("HostId") && !said.contains('\n'), "{said}");
    }

    #[tokio::test]
    async fn a_store_that_works_passes_its_check_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = file_store(dir.path());
        store.check().await.unwrap();
        assert!(store.list(None).await.unwrap().is_empty());
    }
}
