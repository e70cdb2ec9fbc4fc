//! `--stage-store` values: `coordinator`, `file:///path` or
//! `s3://bucket/prefix`. A value never holds credentials (they come from the
//! environment), so it may be logged and shown; a value refused is shown
//! without anything between `//` and `@`, where credentials would be.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use tally_wire::transport::without_userinfo;

use crate::error::StageError;

/// Where stage data lives.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum StageStoreUrl {
    /// In the coordinator's own store, streamed through it (the default).
    #[default]
    Coordinator,
    /// In a directory the coordinator and every worker mount at this path.
    File(PathBuf),
    /// In an S3 bucket, under a prefix (possibly empty).
    S3 { bucket: String, prefix: String },
}

impl StageStoreUrl {
    /// Whether workers read and write blobs themselves.
    pub fn is_external(&self) -> bool {
        !matches!(self, StageStoreUrl::Coordinator)
    }

    /// The same store one level down, under `segment` (a plain name).
    pub fn within(&self, segment: &str) -> StageStoreUrl {
        match self {
            StageStoreUrl::Coordinator => StageStoreUrl::Coordinator,
            StageStoreUrl::File(path) => StageStoreUrl::File(path.join(segment)),
            StageStoreUrl::S3 { bucket, prefix } if prefix.is_empty() => StageStoreUrl::S3 {
                bucket: bucket.clone(),
                prefix: segment.to_string(),
            },
            StageStoreUrl::S3 { bucket, prefix } => StageStoreUrl::S3 {
                bucket: bucket.clone(),
                prefix: format!("{prefix}/{segment}"),
            },
        }
    }
}

impl StageStoreUrl {
    /// The store one level up and the last segment (`within`'s inverse), if
    /// there is a level above.
    pub fn split_last(&self) -> Option<(StageStoreUrl, String)> {
        match self {
            StageStoreUrl::Coordinator => None,
            StageStoreUrl::File(path) => {
                let name = path.file_name()?.to_str()?.to_string();
                Some((StageStoreUrl::File(path.parent()?.to_path_buf()), name))
            }
            StageStoreUrl::S3 { bucket, prefix } => {
                let prefix = prefix.trim_end_matches('/');
                let (up, name) = match prefix.rsplit_once('/') {
                    Some((up, name)) => (up.to_string(), name),
                    None => (String::new(), prefix),
                };
                (!name.is_empty()).then(|| {
                    let bucket = bucket.clone();
                    (StageStoreUrl::S3 { bucket, prefix: up }, name.to_string())
                })
            }
        }
    }
}

impl fmt::Display for StageStoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageStoreUrl::Coordinator => f.write_str("coordinator"),
            StageStoreUrl::File(path) => write!(f, "file://{}", path.display()),
            StageStoreUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            StageStoreUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

impl FromStr for StageStoreUrl {
    type Err = StageError;

    fn from_str(value: &str) -> Result<StageStoreUrl, StageError> {
        let bad = |why: &str| {
            StageError::InvalidConfig(format!(
                "--stage-store {:?}: {why} (expected coordinator, file:///path or s3://bucket/prefix)",
                without_userinfo(value)
            ))
        };
        if value == "coordinator" {
            return Ok(StageStoreUrl::Coordinator);
        }
        if let Some(path) = value.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad(
                    "a file store needs an absolute path, file:///like/this",
                ));
            }
            if path.split('/').any(|part| part == "..") {
                return Err(bad("the path may not hold `..`"));
            }
            return Ok(StageStoreUrl::File(PathBuf::from(path)));
        }
        if let Some(rest) = value.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.contains('@') || bucket.contains(':') {
                // Not echoed: the value may hold a secret.
                return Err(StageError::InvalidConfig(
                    "--stage-store: credentials and ports do not belong in the URL; set \
                     AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL instead"
                        .into(),
                ));
            }
            let valid_bucket = (3..=63).contains(&bucket.len())
                && bucket.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                });
            if !valid_bucket {
                return Err(bad(
                    "a bucket name has 3 to 63 lowercase letters, digits, dots and hyphens",
                ));
            }
            let prefix = prefix.trim_end_matches('/');
            let plain = |p: &str| !p.is_empty() && p != "." && p != ".." && !p.contains(['?', '#']);
            if !prefix.is_empty() && !prefix.split('/').all(plain) {
                return Err(bad("the prefix must be plain path segments"));
            }
            return Ok(StageStoreUrl::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.to_string(),
            });
        }
        Err(bad("unknown scheme"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_print_back() {
        for url in [
            "coordinator",
            "file:///var/lib/tally-stage",
            "s3://tally-stage",
            "s3://tally-stage/cluster-1/jobs",
        ] {
            let parsed: StageStoreUrl = url.parse().unwrap();
            assert_eq!(parsed.to_string(), url);
        }
        assert_eq!(
            "s3://b-1/p/".parse::<StageStoreUrl>().unwrap(),
            StageStoreUrl::S3 {
                bucket: "b-1".into(),
                prefix: "p".into()
            }
        );
    }

    #[test]
    fn a_store_one_level_down_parses_back() {
        for (url, down) in [
            ("coordinator", "coordinator"),
            ("file:///var/stage", "file:///var/stage/d-1"),
            ("s3://tally-stage", "s3://tally-stage/d-1"),
            ("s3://tally-stage/a/b", "s3://tally-stage/a/b/d-1"),
        ] {
            let parsed = url.parse::<StageStoreUrl>().unwrap();
            let within = parsed.within("d-1");
            assert_eq!(within.to_string(), down);
            assert_eq!(down.parse::<StageStoreUrl>().unwrap(), within);
            if parsed.is_external() {
                assert_eq!(within.split_last(), Some((parsed, "d-1".to_string())));
            }
        }
        assert_eq!(StageStoreUrl::Coordinator.split_last(), None);
        let bucket_only = "s3://tally-stage".parse::<StageStoreUrl>().unwrap();
        assert_eq!(bucket_only.split_last(), None);
    }

    #[test]
    fn bad_urls_are_refused_saying_why() {
        for (url, why) in [
            ("file://relative/path", "absolute"),
            ("file:///a/../b", ".."),
            ("s3://key:secret@bucket/p", "credentials"),
            ("s3://Bucket", "bucket name"),
            ("s3://b", "bucket name"),
            ("s3://bucket/a//b", "plain path"),
            ("gs://bucket", "unknown scheme"),
            ("", "unknown scheme"),
        ] {
            let err = url.parse::<StageStoreUrl>().unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
            assert!(!err.contains("secret"), "{url}: {err}");
        }
    }

    #[test]
    fn a_refused_url_never_shows_what_lies_between_its_slashes_and_at() {
        for url in [
            "s3://AKIAEXAMPLE:SuperSecret123@bucket/p",
            "s3://AKIAEXAMPLE/SuperSecret123@bucket/p",
            "s3://AKIAEXAMPLE:Super@Secret123@bucket/p",
            "file://AKIAEXAMPLE:SuperSecret123@/var/stage",
            "https://AKIAEXAMPLE:SuperSecret123@s3.example.com/bucket",
            "gs://AKIAEXAMPLE:SuperSecret123@bucket",
        ] {
            let err = url.parse::<StageStoreUrl>().unwrap_err().to_string();
            assert!(!err.contains("SuperSecret123"), "{url}: {err}");
            assert!(!err.contains("AKIAEXAMPLE"), "{url}: {err}");
            assert!(err.contains("--stage-store"), "{url}: {err}");
        }
    }
}
