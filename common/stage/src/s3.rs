//! An S3 stage store's configuration: the standard `AWS_*` environment
//! variables, else the shared credentials file. What cannot work is refused
//! before any request, naming the variable to set: a value that does not
//! parse, or a plain-HTTP endpoint without `AWS_ALLOW_HTTP`.

use std::collections::BTreeMap;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{BackoffConfig, ClientConfigKey, RetryConfig};

use crate::error::{Result, StageError};

/// The process environment, as the S3 configuration reads it (names and
/// values that are UTF-8).
pub(crate) type Env = BTreeMap<String, String>;

/// The environment of this process.
pub(crate) fn environment() -> Env {
    std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}

/// The variables that may name the endpoint, the first set winning.
const ENDPOINT_VARIABLES: [&str; 3] = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"];

/// The client of `bucket` configured from `env`, and where it points, in
/// words for messages ("bucket b at http://host:9000 (AWS_ENDPOINT_URL)").
pub(crate) fn open(bucket: &str, env: &Env) -> Result<(AmazonS3, String)> {
    // Its HTTPS client needs the process's TLS provider chosen.
    tally_wire::transport::use_ring_for_tls();
    let builder = builder(env)?.with_bucket_name(bucket);
    let place = place(&builder, bucket, env);
    let refuse =
        |why: String| StageError::InvalidConfig(format!("the S3 stage store ({place}): {why}"));
    if let Some((name, why)) = unusable_variable(bucket, env) {
        return Err(refuse(format!(
            "{name} cannot be used ({why}); set it to a valid value or unset it"
        )));
    }
    let endpoint = endpoint(&builder).unwrap_or_default();
    let allow_http = builder
        .get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))
        .is_some_and(|v| {
            matches!(
                v.to_ascii_lowercase().as_str(),
                "1" | "true" | "on" | "yes" | "y"
            )
        });
    if endpoint
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
        && !allow_http
    {
        return Err(refuse(
            "the endpoint is plain HTTP, which is refused unless AWS_ALLOW_HTTP=true; set it, \
             or use an https:// endpoint"
                .into(),
        ));
    }
    let s3 = builder
        .build()
        .map_err(|e| refuse(crate::error_text::one_line(&e)))?;
    Ok((s3, place))
}

/// The builder from `env`: `AWS_*` variables (endpoint, region, credentials,
/// `AWS_ALLOW_HTTP`), else the shared credentials file
/// (`AWS_SHARED_CREDENTIALS_FILE`, or `~/.aws/credentials`) for the profile
/// `AWS_PROFILE` (or `default`). Path-style addressing unless
/// `AWS_VIRTUAL_HOSTED_STYLE_REQUEST` says otherwise, as MinIO-like endpoints
/// need.
fn builder(env: &Env) -> Result<AmazonS3Builder> {
    // Short tries inside; `patiently` waits out longer outages.
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: Duration::from_secs(20),
    };
    let mut builder = AmazonS3Builder::new().with_retry(retry);
    for (key, value) in configured(env) {
        builder = builder.with_config(key, value);
    }
    // Timeouts through the configuration keys: client options set whole
    // would drop those the environment gave (AWS_ALLOW_HTTP).
    for (key, default) in [
        (ClientConfigKey::ConnectTimeout, "5s"),
        (ClientConfigKey::Timeout, "120s"),
    ] {
        if builder
            .get_config_value(&AmazonS3ConfigKey::Client(key))
            .is_none()
        {
            builder = builder.with_config(AmazonS3ConfigKey::Client(key), default);
        }
    }
    if !env.contains_key("AWS_REGION") && !env.contains_key("AWS_DEFAULT_REGION") {
        builder = builder.with_region("us-east-1");
    }
    if !env.contains_key("AWS_ACCESS_KEY_ID")
        && let Some((id, secret, token)) = credentials_file(env)?
    {
        builder = builder
            .with_access_key_id(id)
            .with_secret_access_key(secret);
        if let Some(token) = token {
            builder = builder.with_token(token);
        }
    }
    Ok(builder)
}

/// The `AWS_*` variables of `env` that are S3 configuration keys, with their
/// keys (as `AmazonS3Builder::from_env` reads them).
fn configured(env: &Env) -> impl Iterator<Item = (AmazonS3ConfigKey, &String)> + '_ {
    env.iter()
        .filter(|(name, _)| name.starts_with("AWS_"))
        .filter_map(|(name, value)| Some((name.to_ascii_lowercase().parse().ok()?, value)))
}

/// The first variable that alone makes a client fail to build, and why:
/// the client's own error names no variable. The value is shown only when
/// the variable's name does not suggest a secret.
fn unusable_variable(bucket: &str, env: &Env) -> Option<(String, String)> {
    env.iter()
        .filter(|(name, _)| name.starts_with("AWS_"))
        .find_map(|(name, value)| {
            let key: AmazonS3ConfigKey = name.to_ascii_lowercase().parse().ok()?;
            let alone = AmazonS3Builder::new()
                .with_bucket_name(bucket)
                .with_region("us-east-1")
                .with_access_key_id("check")
                .with_secret_access_key("check")
                .with_config(key, value)
                .build();
            let error = alone.err()?;
            let secret = ["SECRET", "TOKEN", "KEY"].iter().any(|s| name.contains(s));
            let why = match (secret, error) {
                (true, _) => "its value is not valid".to_string(),
                (false, object_store::Error::Generic { source, .. }) => source.to_string(),
                (false, other) => crate::error_text::one_line(&other),
            };
            Some((name.clone(), why))
        })
}

/// The endpoint the client will use, if one is configured.
fn endpoint(builder: &AmazonS3Builder) -> Option<String> {
    builder
        .get_config_value(&AmazonS3ConfigKey::S3Endpoint)
        .or_else(|| builder.get_config_value(&AmazonS3ConfigKey::Endpoint))
        .filter(|e| !e.is_empty())
}

/// Where the store is, for messages: the bucket, the endpoint and the
/// variable that named it.
fn place(builder: &AmazonS3Builder, bucket: &str, env: &Env) -> String {
    match endpoint(builder) {
        Some(endpoint) => {
            let variable = ENDPOINT_VARIABLES
                .iter()
                .find(|v| env.get(**v).is_some_and(|e| !e.is_empty()))
                .unwrap_or(&"AWS_ENDPOINT_URL");
            format!("bucket {bucket} at {endpoint} ({variable})")
        }
        None => {
            let region = builder
                .get_config_value(&AmazonS3ConfigKey::Region)
                .unwrap_or_else(|| "us-east-1".into());
            format!(
                "bucket {bucket} at AWS S3 in {region} (AWS_REGION; AWS_ENDPOINT_URL for another endpoint)"
            )
        }
    }
}

/// The key id, secret and session token of the shared credentials file's
/// profile, if there is such a file. Errors name the file and the profile,
/// never a value.
fn credentials_file(env: &Env) -> Result<Option<(String, String, Option<String>)>> {
    let path = match env.get("AWS_SHARED_CREDENTIALS_FILE") {
        Some(path) => std::path::PathBuf::from(path),
        None => match env.get("HOME") {
            Some(home) => std::path::PathBuf::from(home).join(".aws/credentials"),
            None => return Ok(None),
        },
    };
    if !path.exists() {
        return Ok(None);
    }
    let profile = env.get("AWS_PROFILE").map_or("default", String::as_str);
    credentials_of(&path, profile).map(Some)
}

/// The key id, secret and session token of `profile` in the credentials file
/// at `path`.
fn credentials_of(
    path: &std::path::Path,
    profile: &str,
) -> Result<(String, String, Option<String>)> {
    let bad = |why: &str| {
        StageError::InvalidConfig(format!(
            "the credentials file {} (profile {profile}): {why}",
            path.display()
        ))
    };
    let ini = ini::Ini::load_from_file(path).map_err(|_| bad("it cannot be read as INI"))?;
    let section = ini
        .section(Some(profile))
        .ok_or_else(|| bad("it has no such profile"))?;
    let field = |name: &str| section.get(name).map(str::to_string);
    match (field("aws_access_key_id"), field("aws_secret_access_key")) {
        (Some(id), Some(secret)) => Ok((id, secret, field("aws_session_token"))),
        _ => Err(bad(
            "the profile needs aws_access_key_id and aws_secret_access_key",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_credentials_file_gives_its_profile_and_errors_never_show_a_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials");
        std::fs::write(
            &path,
            "[default]\naws_access_key_id = AKIDEFAULT\naws_secret_access_key = topsecret-1\n\n\
             [ci]\naws_access_key_id=AKICI\naws_secret_access_key=topsecret-2\naws_session_token=tok\n\n\
             [half]\naws_secret_access_key = topsecret-3\n",
        )
        .unwrap();
        assert_eq!(
            credentials_of(&path, "default").unwrap(),
            ("AKIDEFAULT".into(), "topsecret-1".into(), None)
        );
        assert_eq!(
            credentials_of(&path, "ci").unwrap(),
            ("AKICI".into(), "topsecret-2".into(), Some("tok".into()))
        );
        for (profile, why) in [
            ("half", "needs aws_access_key_id"),
            ("none", "no such profile"),
        ] {
            let err = credentials_of(&path, profile).unwrap_err().to_string();
            assert!(err.contains(why) && err.contains(profile), "{err}");
            assert!(!err.contains("topsecret"), "{err}");
        }
        std::fs::write(&path, "[broken\nkey").unwrap();
        let err = credentials_of(&path, "default").unwrap_err().to_string();
        assert!(err.contains("INI"), "{err}");
    }

    #[test]
    fn a_plain_http_endpoint_needs_aws_allow_http_and_the_refusal_says_so() {
        let base = [
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "never-shown-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
        ];
        let err = open("tally-b", &env(&base)).unwrap_err();
        assert!(matches!(err, StageError::InvalidConfig(_)), "{err}");
        let said = err.to_string();
        for part in [
            "tally-b",
            "http://127.0.0.1:9",
            "AWS_ENDPOINT_URL",
            "AWS_ALLOW_HTTP=true",
        ] {
            assert!(said.contains(part), "{part}: {said}");
        }
        assert!(
            !said.contains("never-shown") && !said.contains('\n'),
            "{said}"
        );
        for allowed in ["true", "1", "YES"] {
            let vars = [base.as_slice(), &[("AWS_ALLOW_HTTP", allowed)]].concat();
            assert!(
                open("tally-b", &env(&vars)).is_ok(),
                "AWS_ALLOW_HTTP={allowed}"
            );
        }
    }

    #[test]
    fn a_variable_that_does_not_parse_is_named() {
        for (name, value) in [("AWS_ALLOW_HTTP", ""), ("AWS_ALLOW_HTTP", "maybe")] {
            let vars = [
                ("AWS_ACCESS_KEY_ID", "id"),
                ("AWS_SECRET_ACCESS_KEY", "never-shown-2"),
                ("AWS_ENDPOINT_URL", "https://s3.example.com"),
                (name, value),
            ];
            let err = open("tally-b", &env(&vars)).unwrap_err();
            assert!(matches!(err, StageError::InvalidConfig(_)), "{err}");
            let said = err.to_string();
            assert!(said.contains(name) && said.contains("tally-b"), "{said}");
            assert!(said.contains("https://s3.example.com"), "{said}");
            assert!(!said.contains("never-shown"), "{said}");
        }
    }

    #[test]
    fn without_an_endpoint_the_place_is_aws_in_the_region() {
        let vars = env(&[
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_REGION", "eu-west-3"),
        ]);
        let (_, place) = open("tally-b", &vars).unwrap();
        assert!(
            place.contains("eu-west-3") && place.contains("tally-b"),
            "{place}"
        );
    }
}
