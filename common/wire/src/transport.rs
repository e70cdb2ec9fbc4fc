//! How clients and workers reach a coordinator, and how the coordinator checks
//! them: a bearer token in the `authorization` header of every call (one token
//! for clients, another for workers), and optional TLS (rustls) with an
//! optional client certificate for mutual TLS.
//!
//! The token is compared in constant time so that response timing does not
//! reveal how many leading bytes of a guess were right. Callers read the token
//! and PEM files; this module only checks and applies them.

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

use crate::Result;
use crate::deadline::{self, Deadlined};
use crate::error::invalid;

/// A channel to the coordinator that holds every call to its deadline (see
/// [`crate::deadline`]).
pub type DeadlinedChannel = Deadlined<Channel>;

/// A channel to the coordinator that adds the bearer token to every call and
/// holds it to its deadline.
pub type AuthChannel = InterceptedService<DeadlinedChannel, BearerToken>;

/// Longest accepted token; tokens travel in every request header.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// Checks that `token` can travel in a header: printable ASCII without spaces.
pub fn parse_token(token: &str) -> Result<String> {
    if token.is_empty() {
        return Err(invalid!("the token is empty"));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(invalid!("the token is longer than {MAX_TOKEN_BYTES} bytes"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid!("the token must be printable ASCII without spaces"));
    }
    Ok(token.to_string())
}

/// Adds `authorization: Bearer <token>` to outgoing calls (nothing without a token).
#[derive(Clone, Debug, Default)]
pub struct BearerToken {
    header: Option<MetadataValue<Ascii>>,
}

impl BearerToken {
    pub fn new(token: Option<&str>) -> Result<BearerToken> {
        let header = match token {
            None => None,
            Some(t) => {
                let t = parse_token(t)?;
                Some(
                    format!("Bearer {t}")
                        .parse()
                        .map_err(|_| invalid!("the token cannot be sent in a header"))?,
                )
            }
        };
        Ok(BearerToken { header })
    }
}

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        if let Some(header) = &self.header {
            request
                .metadata_mut()
                .insert("authorization", header.clone());
        }
        Ok(request)
    }
}

/// Who a credential belongs to. Clients submit and watch jobs; workers lease
/// shards and report results. The two never share a token, so a client's
/// token cannot lease work or report a forged result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Worker,
}

impl Role {
    fn api(self) -> &'static str {
        match self {
            Role::Client => "the job API",
            Role::Worker => "the worker API",
        }
    }

    fn credential(self) -> &'static str {
        match self {
            Role::Client => "a client token",
            Role::Worker => "a worker token",
        }
    }

    fn how_to(self) -> &'static str {
        match self {
            Role::Client => "set TALLY_TOKEN or --token-file",
            Role::Worker => "set TALLY_WORKER_TOKEN or --worker-token-file",
        }
    }
}

/// The tokens a coordinator accepts, one per role; `None` leaves that role's
/// API open (a coordinator on loopback, or one behind client certificates).
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    pub client: Option<String>,
    pub worker: Option<String>,
    /// The autoscaler's token for the external scaler service (it reads the
    /// jobs' demand and nothing else); `None`: the client token serves.
    pub scaler: Option<String>,
}

impl Tokens {
    /// Refuses configurations that would blur the roles: the same token for
    /// both, or a client token with no worker token (anyone holding the client
    /// token could then act as a worker).
    pub fn check(&self) -> Result<()> {
        self.check_with_users(false)
    }

    /// [`Tokens::check`] for a coordinator whose job API has the users of a
    /// users file (`users`): closed without a client token, so a scaler
    /// token needs none.
    pub fn check_with_users(&self, users: bool) -> Result<()> {
        match (&self.client, &self.worker) {
            (Some(c), Some(w)) if constant_time_eq(c.as_bytes(), w.as_bytes()) => Err(invalid!(
                "the client token and the worker token are the same: give workers a token of their own"
            )),
            (Some(_), None) => Err(invalid!(
                "a client token needs a worker token too (--worker-token-file or TALLY_WORKER_TOKEN): \
                 with only a client token, anyone holding it could act as a worker"
            )),
            _ => match (&self.scaler, &self.client, &self.worker) {
                (Some(s), _, Some(other)) | (Some(s), Some(other), _)
                    if constant_time_eq(s.as_bytes(), other.as_bytes()) =>
                {
                    Err(invalid!(
                        "the scaler token is the client or the worker token: give the autoscaler a token of its own"
                    ))
                }
                (Some(_), None, _) if !users => Err(invalid!(
                    "a scaler token needs a client token too (--token-file or TALLY_TOKEN): the job API would be open"
                )),
                _ => Ok(()),
            },
        }
    }

    /// The token the external scaler service requires: the scaler token,
    /// else the client token; `None` leaves it open (as the job API).
    pub fn for_scaler(&self) -> Option<&str> {
        self.scaler.as_deref().or(self.client.as_deref())
    }

    /// The interceptor for the API of `role`.
    pub fn require(&self, role: Role) -> RequireToken {
        let (mine, other) = match role {
            Role::Client => (&self.client, &self.worker),
            Role::Worker => (&self.worker, &self.client),
        };
        RequireToken {
            role,
            expected: mine.as_ref().map(|t| t.as_bytes().to_vec()),
            other_role: other.as_ref().map(|t| t.as_bytes().to_vec()),
        }
    }
}

/// The coordinator's check on one API: calls without `authorization: Bearer
/// <token>` matching the role's token get UNAUTHENTICATED; the other role's
/// token gets PERMISSION_DENIED (it is a valid credential, for the other API).
#[derive(Clone, Debug)]
pub struct RequireToken {
    role: Role,
    expected: Option<Vec<u8>>,
    other_role: Option<Vec<u8>>,
}

impl Interceptor for RequireToken {
    fn call(&mut self, request: Request<()>) -> std::result::Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let role = self.role;
        let other = match role {
            Role::Client => Role::Worker,
            Role::Worker => Role::Client,
        };
        match presented {
            Some(token) if constant_time_eq(token.as_bytes(), expected) => Ok(request),
            Some(token)
                if self
                    .other_role
                    .as_ref()
                    .is_some_and(|o| constant_time_eq(token.as_bytes(), o)) =>
            {
                Err(Status::permission_denied(format!(
                    "{} cannot call {}: it needs {}",
                    other.credential(),
                    role.api(),
                    role.credential()
                )))
            }
            Some(_) => Err(Status::unauthenticated(format!(
                "invalid bearer token for {}",
                role.api()
            ))),
            None => Err(Status::unauthenticated(format!(
                "missing bearer token for {}: {}",
                role.api(),
                role.how_to()
            ))),
        }
    }
}

/// Equality whose running time does not depend on where the inputs first
/// differ (`subtle`'s constant-time comparison; unequal lengths are unequal).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// Client-side TLS material, PEM encoded.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    /// Roots to trust for the coordinator's certificate (system roots are not used).
    pub ca: Option<Vec<u8>>,
    /// A client certificate and key for mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to verify in the server certificate, if not the URL's host.
    pub domain: Option<String>,
}

/// Everything a client or worker needs to be let in.
#[derive(Clone, Debug, Default)]
pub struct ClientSecurity {
    pub token: Option<String>,
    pub tls: ClientTls,
}

/// A configured endpoint for `url` (`http://` or `https://`); TLS is used for
/// `https://` URLs.
pub fn endpoint(url: &str, security: &ClientSecurity) -> Result<Endpoint> {
    let shown = without_userinfo(url);
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| invalid!("invalid coordinator URL {shown:?}: {e}"))?
        .connect_timeout(deadline::CONNECT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    let tls = &security.tls;
    let https = url.starts_with("https://");
    if !https && (tls.ca.is_some() || tls.identity.is_some()) {
        return Err(invalid!(
            "TLS files were given but the coordinator URL {shown:?} is not https://"
        ));
    }
    if https {
        use_ring_for_tls();
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &tls.ca {
            config = config.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        if let Some(domain) = &tls.domain {
            config = config.domain_name(domain.clone());
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| invalid!("{}", tls_config_error(&e)))?;
    }
    Ok(endpoint)
}

/// `url` with what lies between its scheme's `//` and the last `@` after
/// it (a URL's user and password) cut out: the form of a URL that may be
/// shown or logged.
pub fn without_userinfo(url: &str) -> String {
    match url.split_once("//") {
        Some((scheme, rest)) if rest.contains('@') => {
            let host = rest.rsplit_once('@').map_or("", |(_, host)| host);
            format!("{scheme}//…@{host}")
        }
        _ => url.to_string(),
    }
}

/// Checks that `pem` holds a certificate and that every certificate in it
/// decodes. rustls skips what is not PEM, so a CA file of anything else
/// would trust nothing and fail every connection instead of being refused.
pub fn check_certificates(pem: &[u8]) -> Result<()> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut certificates = 0;
    for certificate in CertificateDer::pem_slice_iter(pem) {
        certificate.map_err(|e| invalid!("{e}"))?;
        certificates += 1;
    }
    if certificates == 0 {
        return Err(invalid!(
            "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(())
}

/// A lazily connecting channel that carries the token.
pub fn lazy_channel(url: &str, security: &ClientSecurity) -> Result<AuthChannel> {
    authorized(endpoint(url, security)?.connect_lazy(), security)
}

/// `channel` carrying the token of `security`, every call held to its deadline.
pub fn authorized(channel: Channel, security: &ClientSecurity) -> Result<AuthChannel> {
    Ok(InterceptedService::new(
        Deadlined::new(channel),
        BearerToken::new(security.token.as_deref())?,
    ))
}

/// An error and its causes on one line: TLS and transport errors say only
/// "transport error" at the top; what went wrong (a key that does not match
/// its certificate, a certificate that cannot be parsed) is in the causes.
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    append_causes(error.to_string(), error.source())
}

/// `line`, then each cause from `source` down that it does not already say,
/// all on one line.
pub fn append_causes(
    mut line: String,
    mut source: Option<&(dyn std::error::Error + 'static)>,
) -> String {
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
        source = cause.source();
    }
    line.replace('\n', " ")
}

/// A TLS configuration that cannot work, named: the causes, led by what they
/// mean for the two mistakes rustls names only by a code.
pub fn tls_config_error(error: &(dyn std::error::Error + 'static)) -> String {
    let causes = with_causes(error);
    let meaning = if causes.contains("KeyMismatch") {
        Some("the private key does not belong to the certificate")
    } else if causes.contains("UnsupportedCertVersion") {
        Some("the certificate is X.509 v1; TLS needs v3 certificates (with a subjectAltName)")
    } else {
        None
    };
    match meaning {
        Some(meaning) => format!("TLS configuration: {meaning} ({causes})"),
        None => format!("TLS configuration: {causes}"),
    }
}

/// Makes ring the process's TLS crypto provider, once. rustls picks one by
/// itself only when a single provider is built in; the S3 client of the
/// stage store brings aws-lc-rs beside ring.
pub fn use_ring_for_tls() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Fails only when a provider is installed already: that one stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Server-side TLS material, PEM encoded.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<Vec<u8>>,
}

impl ServerTls {
    pub fn config(&self) -> tonic::transport::ServerTlsConfig {
        use_ring_for_tls();
        let mut config = tonic::transport::ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert, &self.key));
        if let Some(ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(ca));
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_is_equality() {
        let cases: [(&[u8], &[u8]); 6] = [
            (b"", b""),
            (b"a", b""),
            (b"", b"a"),
            (b"secret", b"secret"),
            (b"secret", b"secreT"),
            (b"secret", b"secret1"),
        ];
        for (a, b) in cases {
            assert_eq!(constant_time_eq(a, b), a == b, "{a:?} {b:?}");
        }
        // A byte past the end never matches by accident.
        assert!(!constant_time_eq(&[0xff], &[]));
        assert!(!constant_time_eq(&[0x00], &[]));
    }

    #[test]
    fn require_token_checks_the_header() {
        let only = |client: Option<&str>| Tokens {
            client: client.map(str::to_string),
            worker: None,
            scaler: None,
        };
        let mut check = only(Some("s3cret")).require(Role::Client);
        let with = |value: Option<&str>| {
            let mut request = Request::new(());
            if let Some(v) = value {
                request
                    .metadata_mut()
                    .insert("authorization", v.parse().unwrap());
            }
            request
        };
        assert!(check.call(with(Some("Bearer s3cret"))).is_ok());
        for bad in [
            None,
            Some("Bearer s3cre"),
            Some("s3cret"),
            Some("Basic s3cret"),
        ] {
            let status = check.call(with(bad)).unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unauthenticated, "{bad:?}");
        }
        let mut open = only(None).require(Role::Client);
        assert!(open.call(with(None)).is_ok());
        // The client side adds exactly what the server expects.
        let mut add = BearerToken::new(Some("s3cret")).unwrap();
        assert!(check.call(add.call(Request::new(())).unwrap()).is_ok());
    }

    #[test]
    fn each_role_accepts_only_its_own_token() {
        let tokens = Tokens {
            client: Some("client-secret".into()),
            worker: Some("worker-secret".into()),
            scaler: None,
        };
        tokens.check().unwrap();
        let call = |check: &mut RequireToken, token: Option<&str>| {
            let mut add = BearerToken::new(token).unwrap();
            check
                .call(add.call(Request::new(())).unwrap())
                .map(|_| ())
                .map_err(|s| s.code())
        };
        let mut jobs = tokens.require(Role::Client);
        let mut work = tokens.require(Role::Worker);
        assert_eq!(call(&mut jobs, Some("client-secret")), Ok(()));
        assert_eq!(call(&mut work, Some("worker-secret")), Ok(()));
        use tonic::Code;
        assert_eq!(
            call(&mut work, Some("client-secret")),
            Err(Code::PermissionDenied)
        );
        assert_eq!(
            call(&mut jobs, Some("worker-secret")),
            Err(Code::PermissionDenied)
        );
        assert_eq!(call(&mut work, Some("guess")), Err(Code::Unauthenticated));
        assert_eq!(call(&mut work, None), Err(Code::Unauthenticated));
    }

    #[test]
    fn tokens_that_blur_the_roles_are_refused() {
        let same = Tokens {
            client: Some("same".into()),
            worker: Some("same".into()),
            scaler: None,
        };
        assert!(same.check().unwrap_err().to_string().contains("same"));
        let client_only = Tokens {
            client: Some("c".into()),
            worker: None,
            scaler: None,
        };
        assert!(
            client_only
                .check()
                .unwrap_err()
                .to_string()
                .contains("worker token")
        );
        for fine in [
            Tokens::default(),
            Tokens {
                client: None,
                worker: Some("w".into()),
                scaler: None,
            },
            Tokens {
                client: Some("c".into()),
                worker: Some("w".into()),
                scaler: Some("s".into()),
            },
        ] {
            fine.check().unwrap();
        }
        // The scaler's token is a credential of its own, and never opens
        // the job API's way round.
        let roles = |scaler: &str, client: Option<&str>| Tokens {
            client: client.map(str::to_string),
            worker: Some("w".into()),
            scaler: Some(scaler.into()),
        };
        for (blurred, needle) in [
            (roles("c", Some("c")), "token of its own"),
            (roles("w", Some("c")), "token of its own"),
            (roles("s", None), "needs a client token"),
        ] {
            let err = blurred.check().unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
        // A users file closes the job API without a client token.
        roles("s", None).check_with_users(true).unwrap();
        assert!(roles("w", None).check_with_users(true).is_err());
        assert_eq!(roles("s", Some("c")).for_scaler(), Some("s"));
        assert_eq!(Tokens::default().for_scaler(), None);
    }

    #[test]
    fn bad_tokens_are_refused() {
        for bad in ["", "two words", "tab\t", "é"] {
            assert!(parse_token(bad).is_err(), "{bad:?}");
        }
        assert!(parse_token(&"x".repeat(MAX_TOKEN_BYTES + 1)).is_err());
        assert!(parse_token(&"x".repeat(MAX_TOKEN_BYTES)).is_ok());
    }
}
