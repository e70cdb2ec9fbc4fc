//! The credentials a command presents or requires: bearer tokens (from a
//! file or the environment) and TLS certificates and keys (PEM files). A
//! command reads only those it uses, so it never fails over a file it does
//! not use: a worker presents the worker token, every other client the
//! client token, and the coordinator requires both.

use std::path::Path;

use tally_kinds::invalid;
use tally_wire::transport::{self, ClientSecurity, ClientTls, ServerTls, Tokens};

use crate::client::{Remote, check_coordinator_url};
use crate::files::read_bounded;
use crate::flags::GlobalArgs;

/// The coordinator as a client command talks to it, with the client token
/// (--token-file, TALLY_TOKEN).
pub fn client_remote(global: &GlobalArgs) -> anyhow::Result<Remote> {
    let token = client_token(global)?;
    remote(global, token)
}

/// The coordinator as a worker talks to it, with the worker token
/// (--worker-token-file, TALLY_WORKER_TOKEN).
pub fn worker_remote(global: &GlobalArgs) -> anyhow::Result<Remote> {
    let token = worker_token(global)?;
    remote(global, token)
}

/// The tokens the coordinator requires: the client token on the job API,
/// the worker token on the worker API.
pub fn server_tokens(global: &GlobalArgs) -> anyhow::Result<Tokens> {
    Ok(Tokens {
        client: client_token(global)?,
        worker: worker_token(global)?,
        scaler: token(global.scaler_token_file.as_deref(), "TALLY_SCALER_TOKEN")?,
    })
}

/// The coordinator's certificate and key, and the CA its clients'
/// certificates must be signed by (mutual TLS); `None` serves plain text.
pub fn server_tls(global: &GlobalArgs) -> anyhow::Result<Option<ServerTls>> {
    match (&global.tls_cert, &global.tls_key) {
        (Some(cert), Some(key)) => Ok(Some(ServerTls {
            cert: read_certificates(cert, "TLS certificate")?,
            key: read_pem(key, "TLS key")?,
            client_ca: global
                .tls_ca
                .as_deref()
                .map(|p| read_certificates(p, "client CA certificate"))
                .transpose()?,
        })),
        _ if global.tls_ca.is_some() => Err(invalid!(
            "--tls-ca on the coordinator requires client certificates, which needs TLS: give --tls-cert and --tls-key too"
        )
        .into()),
        _ => Ok(None),
    }
}

pub fn client_token(global: &GlobalArgs) -> anyhow::Result<Option<String>> {
    token(global.token_file.as_deref(), "TALLY_TOKEN")
}

fn worker_token(global: &GlobalArgs) -> anyhow::Result<Option<String>> {
    token(global.worker_token_file.as_deref(), "TALLY_WORKER_TOKEN")
}

fn remote(global: &GlobalArgs, token: Option<String>) -> anyhow::Result<Remote> {
    check_coordinator_url(&global.coordinator)?;
    Ok(Remote {
        url: global.coordinator.clone(),
        security: client_security(global, token)?,
    })
}

/// A bearer token: from the file `path`, else from the environment variable `env`.
fn token(path: Option<&Path>, env: &str) -> anyhow::Result<Option<String>> {
    if let Some(path) = path {
        let text = read_bounded(path, MAX_CREDENTIAL_BYTES, "the token file")?;
        let text = String::from_utf8(text)
            .map_err(|_| invalid!("the token file {} is not text", path.display()))?;
        let token = transport::parse_token(text.trim())
            .map_err(|e| invalid!("token file {}: {e}", path.display()))?;
        return Ok(Some(token));
    }
    match std::env::var(env) {
        Ok(t) if !t.trim().is_empty() => Ok(Some(
            transport::parse_token(t.trim()).map_err(|e| invalid!("{env}: {e}"))?,
        )),
        _ => Ok(None),
    }
}

/// Largest token or PEM file read: credentials are small, and a path such as
/// `/dev/zero` must not be read for gigabytes.
const MAX_CREDENTIAL_BYTES: u64 = 1 << 20;

fn read_pem(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    read_bounded(path, MAX_CREDENTIAL_BYTES, &format!("the {what}"))
}

/// A PEM file of certificates, refused at once (bad input) when it holds none.
fn read_certificates(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    let pem = read_pem(path, what)?;
    transport::check_certificates(&pem)
        .map_err(|e| invalid!("the {what} {}: {e}", path.display()))?;
    Ok(pem)
}

/// What a client presents: `token`, and a certificate of its own where
/// --tls-cert is given; the CA it trusts for the coordinator's certificate.
fn client_security(global: &GlobalArgs, token: Option<String>) -> anyhow::Result<ClientSecurity> {
    let identity = match (&global.tls_cert, &global.tls_key) {
        (Some(cert), Some(key)) => Some((
            read_certificates(cert, "TLS certificate")?,
            read_pem(key, "TLS key")?,
        )),
        _ => None,
    };
    Ok(ClientSecurity {
        token,
        tls: ClientTls {
            ca: global
                .tls_ca
                .as_deref()
                .map(|p| read_certificates(p, "CA certificate"))
                .transpose()?,
            identity,
            domain: global.tls_domain.clone(),
        },
    })
}
