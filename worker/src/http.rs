//! The worker's optional HTTP listener: Prometheus text at `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::context::Context;
use crate::error::{Result, WorkerError};
use crate::metrics;

const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Serves `/metrics` on `addr` until the returned task is aborted.
pub(crate) async fn serve_metrics(
    ctx: Arc<Context>,
    addr: SocketAddr,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        WorkerError::Address(addr.to_string(), format!("cannot listen for HTTP: {e}"))
    })?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = metrics::exposition(&ctx.stats, &ctx.gauges());
            async move { ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], text) }
        }),
    );
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP listener failed");
        }
    }))
}
