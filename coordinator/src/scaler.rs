//! KEDA's external scaler, served on the coordinator's gRPC port: KEDA asks
//! whether the worker Deployment should run at all (`IsActive`, or
//! `StreamIsActive` for the push trigger) and how many workers the work
//! needs (`GetMetricSpec`, `GetMetrics`), and the Kubernetes HPA sets the
//! replicas to the metric over the target, rounded up.
//!
//! The metric, `tally-slots`, is the slots the jobs' runnable work could use
//! now ([`SlotDemand`]: each unfinished job's shards of its current stage
//! that are pending or leased, at most its `max_slots`), not the number of
//! jobs: one job of a thousand shards wants many workers, a thousand jobs
//! of one shard in a queue as many. The target is the trigger's
//! `slotsPerWorker` (default 1), so that the HPA's replicas are the workers
//! whose slots the work fills.
//!
//! The service is not behind the job API's interceptor: KEDA sends no
//! headers, but hands the trigger's metadata (with the parameters its
//! TriggerAuthentication adds) in every call, so the token comes as the
//! metadata's `token` (or as a bearer token, for other callers), checked in
//! constant time against the scaler token, else the client token.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tally_wire::proto::externalscaler::external_scaler_server::ExternalScaler;
use tally_wire::proto::externalscaler::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};
use tally_wire::transport::constant_time_eq;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::error::CoordinatorError;
use crate::scheduler::SlotDemand;
use crate::shared::Shared;

/// The one metric the scaler gives.
pub const SLOTS_METRIC: &str = "tally-slots";
/// The most slots a trigger may say a worker has.
const MAX_SLOTS_PER_WORKER: i64 = 1 << 16;
/// How often a `StreamIsActive` stream looks again without a job changing:
/// its bound when no change wakes it.
const STREAM_RECHECK: Duration = Duration::from_secs(5);
/// The least time between two looks of a `StreamIsActive` stream: each look
/// goes over every job under the scheduler's lock.
const STREAM_GAP: Duration = Duration::from_millis(500);

pub struct ScalerApi {
    shared: Arc<Shared>,
    /// The token a caller must give; `None` leaves the service open.
    token: Option<Vec<u8>>,
}

impl ScalerApi {
    pub fn new(shared: Arc<Shared>, token: Option<&str>) -> Self {
        ScalerApi {
            shared,
            token: token.map(|t| t.as_bytes().to_vec()),
        }
    }

    /// Refuses a caller without the token (UNAUTHENTICATED): the trigger's
    /// `token` metadata, or `authorization: Bearer <token>`.
    fn check<T>(
        &self,
        request: &Request<T>,
        scaled: Option<&ScaledObjectRef>,
    ) -> Result<(), Status> {
        let Some(expected) = &self.token else {
            return Ok(());
        };
        let from_metadata = scaled
            .and_then(|s| s.scaler_metadata.get("token"))
            .map(String::as_str);
        let from_header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match from_metadata.or(from_header) {
            Some(token) if constant_time_eq(token.trim().as_bytes(), expected) => Ok(()),
            Some(_) => Err(Status::unauthenticated("the scaler token does not match")),
            None => Err(Status::unauthenticated(
                "the external scaler needs the scaler token (or the client token): give it in the \
                 trigger's `token` metadata, from a TriggerAuthentication",
            )),
        }
    }

    async fn demand(&self) -> Result<SlotDemand, Status> {
        demand(&self.shared).await
    }
}

/// The jobs' demand now, read under the scheduler's lock on the blocking pool.
async fn demand(shared: &Arc<Shared>) -> Result<SlotDemand, Status> {
    shared
        .with_scheduler_unflushed(|s| Ok(s.slot_demand()))
        .await
        .map_err(Status::from)
}

/// The trigger's `slotsPerWorker`: a whole number from 1 (the default).
fn slots_per_worker(scaled: &ScaledObjectRef) -> Result<i64, Status> {
    let Some(text) = scaled.scaler_metadata.get("slotsPerWorker") else {
        return Ok(1);
    };
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| (1..=MAX_SLOTS_PER_WORKER).contains(n))
        .ok_or_else(|| {
            Status::from(CoordinatorError::InvalidArgument(format!(
                "slotsPerWorker must be a whole number from 1 to {MAX_SLOTS_PER_WORKER}, got {text:?}"
            )))
        })
}

type ActiveStream = Pin<Box<dyn Stream<Item = Result<IsActiveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalScaler for ScalerApi {
    async fn is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<IsActiveResponse>, Status> {
        self.check(&request, Some(request.get_ref()))?;
        let demand = self.demand().await?;
        Ok(Response::new(IsActiveResponse {
            result: demand.slots > 0,
        }))
    }

    type StreamIsActiveStream = ActiveStream;

    /// The answer now, then each time it changes: looked at again when jobs
    /// change (at most every half second) and at least every few seconds.
    /// Ends when the caller goes or the coordinator stops.
    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<ActiveStream>, Status> {
        self.check(&request, Some(request.get_ref()))?;
        let shared = self.shared.clone();
        let mut changes = shared.changes.subscribe();
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let active = match demand(&shared).await {
                    Ok(demand) => demand.slots > 0,
                    // The coordinator is stopping (or its store failed): the
                    // stream ends with the reason.
                    Err(status) => {
                        let _ = sender.send(Err(status)).await;
                        return;
                    }
                };
                if last != Some(active) {
                    last = Some(active);
                    if sender
                        .send(Ok(IsActiveResponse { result: active }))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                tokio::select! {
                    _ = sender.closed() => return,
                    changed = changes.recv() => {
                        if matches!(changed, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                            return;
                        }
                        // A busy coordinator changes jobs many times a second:
                        // one look a gap, whatever came meanwhile.
                        tokio::time::sleep(STREAM_GAP).await;
                        while !matches!(
                            changes.try_recv(),
                            Err(tokio::sync::broadcast::error::TryRecvError::Empty
                                | tokio::sync::broadcast::error::TryRecvError::Closed)
                        ) {}
                    }
                    _ = tokio::time::sleep(STREAM_RECHECK) => {}
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
        )))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        self.check(&request, Some(request.get_ref()))?;
        let target = slots_per_worker(request.get_ref())?;
        Ok(Response::new(GetMetricSpecResponse {
            metric_specs: vec![MetricSpec {
                metric_name: SLOTS_METRIC.into(),
                target_size: target,
                target_size_float: target as f64,
            }],
        }))
    }

    async fn get_metrics(
        &self,
        request: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        self.check(&request, request.get_ref().scaled_object_ref.as_ref())?;
        let asked = &request.get_ref().metric_name;
        if !asked.is_empty() && asked != SLOTS_METRIC {
            return Err(Status::from(CoordinatorError::NotFound(format!(
                "the scaler gives the metric {SLOTS_METRIC:?}, not {asked:?}"
            ))));
        }
        let slots = self.demand().await?.slots;
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name: SLOTS_METRIC.into(),
                metric_value: i64::try_from(slots).unwrap_or(i64::MAX),
                metric_value_float: slots as f64,
            }],
        }))
    }
}
