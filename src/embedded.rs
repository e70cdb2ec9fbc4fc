//! The cluster of `tally run`: a coordinator on loopback with in-process
//! workers, which the run talks to through the same client code as any
//! coordinator.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tally_kinds::cache::KernelCache;
use tally_kinds::guest::GuestRuntime;
use tally_wire::proto;
use tally_worker::{WorkerConfig, WorkerStats};

use crate::client::{Remote, connect, quick};

/// How many workers `run` starts and how each computes.
pub struct Workers {
    pub count: usize,
    /// Compute threads per worker.
    pub threads: usize,
    /// Shards a worker holds at once.
    pub slots: usize,
    /// The memory each worker's shards may use.
    pub memory_budget: u64,
    /// The run's whole budget, which the process's peak is held to (the
    /// first worker says when it passes it).
    pub run_budget: u64,
    /// Where their shards spill past their share of it, and the most each
    /// worker's spill files hold at once.
    pub spill_dir: PathBuf,
    pub spill_limit: Option<u64>,
}

/// A coordinator on loopback and in-process workers, for `run`.
pub struct LocalCluster {
    coordinator: tally_coordinator::RunningCoordinator,
    remote: Remote,
    stop: tokio::sync::watch::Sender<bool>,
    workers: tokio::task::JoinSet<tally_worker::Result<Arc<WorkerStats>>>,
}

impl LocalCluster {
    /// Starts the coordinator on `data_dir` (with its stage data in
    /// `stage_store`, but for outputs up to `inline_stage_output` bytes) and
    /// the workers, and waits a bounded while for the workers to register.
    /// A worker that cannot start (its spill directory is a file, say) ends
    /// the start with its reason. The coordinator checks user kernels in
    /// `sandbox` and the workers run them there.
    pub async fn start(
        data_dir: PathBuf,
        stage_store: tally_stage::StageStoreUrl,
        inline_stage_output: usize,
        workers: Workers,
        sandbox: Arc<dyn GuestRuntime>,
    ) -> anyhow::Result<LocalCluster> {
        // A stage directory inside the data directory shares its disk: a blob
        // it loses, the store would lose too, so no stage is kept spare to
        // compute one again, and the disk holds a stage fewer.
        let inside = std::path::absolute(&data_dir).unwrap_or_else(|_| data_dir.clone());
        let spare_stage = !matches!(&stage_store, tally_stage::StageStoreUrl::File(dir) if dir.starts_with(&inside));
        let mut config = tally_coordinator::CoordinatorConfig::new(
            "127.0.0.1:0".parse().expect("loopback address"),
            Some(data_dir),
        );
        config.spare_stage = spare_stage;
        config.on_stall = crate::logging::on_stall();
        // Nor is the store replicated there: the replica would be lost with it.
        if !spare_stage {
            config.replicate_every = Duration::ZERO;
        }
        config.stage_store = stage_store;
        config.inline_stage_output = inline_stage_output;
        // Levels of a frontier plan are deleted as soon as the sweep sees
        // them unreferenced: on one machine's disk, every stage counts.
        config.stage_sweep_every = Duration::from_secs(10);
        // One process: the workers reuse what planning built (slider graphs,
        // compiled modules), and the sandbox.
        config.kernel_cache.set_guest_runtime(sandbox);
        let kernel_cache = config.kernel_cache.clone();
        let coordinator = tally_coordinator::start(config).await?;
        let url = coordinator.url();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let mut handles = tokio::task::JoinSet::new();
        for i in 0..workers.count {
            let config = worker_config(&url, i, &workers, &kernel_cache);
            let mut stop = stop_rx.clone();
            handles.spawn(tally_worker::run(config, async move {
                let _ = stop.wait_for(|stop| *stop).await;
            }));
        }
        let mut cluster = LocalCluster {
            coordinator,
            remote: Remote::open(url),
            stop,
            workers: handles,
        };
        let remote = cluster.remote.clone();
        tokio::select! {
            () = wait_for_workers(&remote, workers.count) => Ok(cluster),
            failed = cluster.worker_failed() => {
                cluster.stop().await;
                Err(failed)
            }
        }
    }

    /// Resolves when an in-process worker stops on its own, with its reason
    /// (a worker that cannot start, or refuses the stage store at its first
    /// registration); never while they all run.
    pub async fn worker_failed(&mut self) -> anyhow::Error {
        let error = match self.workers.join_next().await {
            None => return std::future::pending().await,
            Some(Ok(Ok(_))) => anyhow::anyhow!("it stopped before it was told to"),
            Some(Ok(Err(e))) => e.into(),
            Some(Err(e)) => anyhow::anyhow!("it ended abnormally: {e}"),
        };
        error.context("an in-process worker stopped")
    }

    /// The embedded coordinator, which needs no credentials.
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Stops the workers (they hand their shards back at once), then the
    /// coordinator.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let mut workers = self.workers;
        while workers.join_next().await.is_some() {}
        self.coordinator.shutdown().await;
    }
}

/// The configuration of in-process worker `index`.
fn worker_config(
    url: &str,
    index: usize,
    workers: &Workers,
    kernel_cache: &Arc<KernelCache>,
) -> WorkerConfig {
    let mut config = WorkerConfig::new(url.to_string());
    config.threads = workers.threads;
    config.slots = workers.slots;
    config.memory_budget = workers.memory_budget;
    config.peak_budget = (index == 0).then_some(workers.run_budget);
    config.spill_dir = workers.spill_dir.clone();
    config.spill_limit = workers.spill_limit;
    config.worker_id = format!("{}-run{index}", tally_worker::default_worker_id());
    config.lease_wait = Duration::from_secs(1);
    // Stopping `run` hands shards back at once: the job resumes
    // from their last checkpoints.
    config.drain_timeout = Duration::ZERO;
    config.kernel_cache = kernel_cache.clone();
    // The user runs their own module on their own machine.
    config.allow_wasm = true;
    config
}

/// Waits, a bounded while, until `wanted` workers have registered: a job is
/// fitted to the memory of the workers registered when it is submitted.
async fn wait_for_workers(remote: &Remote, wanted: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if let Ok(mut client) = connect(remote).await
            && let Ok(info) = client.info(quick(proto::InfoRequest {})).await
            && info.into_inner().workers_live as usize >= wanted
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::warn!("not every in-process worker registered within 10 s; submitting anyway");
}
