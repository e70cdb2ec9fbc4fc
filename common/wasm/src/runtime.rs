//! The sandbox as the runner's `wasm` kind uses it: [`GuestSandbox`]
//! implements `tally_kinds::guest`'s traits, and the sandbox's errors
//! become the runner's (the module's own faults are bad input, which fails
//! the job at once: every attempt would repeat them).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tally_kinds::guest::{
    GuestCall, GuestHooks, GuestModule, GuestRuntime, GuestSweep, GuestSweepEnd, GuestSweepModule,
    GuestSweepPlan,
};
use tally_kinds::{Error, invalid};

use crate::sweep::{SweepEnd, SweepSession};
use crate::{Kernel, Limits, Sandbox, WasmError};

/// A [`Sandbox`] shared by the modules of a process.
pub struct GuestSandbox(Arc<Sandbox>);

impl GuestSandbox {
    pub fn new(limits: Limits) -> tally_kinds::Result<GuestSandbox> {
        Ok(GuestSandbox(Arc::new(
            Sandbox::new(limits).map_err(into_error)?,
        )))
    }
}

impl GuestRuntime for GuestSandbox {
    fn load(&self, module: &[u8]) -> tally_kinds::Result<Arc<dyn GuestModule>> {
        let kernel = self.0.load(module).map_err(into_error)?;
        Ok(Arc::new(LoadedKernel {
            sandbox: self.0.clone(),
            kernel,
        }))
    }

    fn load_sweep(&self, module: &[u8]) -> tally_kinds::Result<Arc<dyn GuestSweepModule>> {
        let kernel = self.0.load_sweep(module).map_err(into_error)?;
        Ok(Arc::new(LoadedKernel {
            sandbox: self.0.clone(),
            kernel,
        }))
    }
}

impl GuestSweepModule for LoadedKernel {
    fn start(
        &self,
        params: &str,
        cancelled: Arc<AtomicBool>,
    ) -> tally_kinds::Result<Box<dyn GuestSweep>> {
        let session = self
            .sandbox
            .start_sweep(&self.kernel, params, cancelled)
            .map_err(into_error)?;
        Ok(Box::new(session))
    }
}

impl GuestSweep for SweepSession {
    fn plan(&self) -> GuestSweepPlan {
        let plan = SweepSession::plan(self);
        GuestSweepPlan {
            key_limit: plan.key_limit,
            outputs: plan.outputs,
            end: match plan.end {
                SweepEnd::Steps(steps) => GuestSweepEnd::Steps(steps),
                SweepEnd::WhenEmpty => GuestSweepEnd::WhenEmpty,
            },
            most_children: plan.most_children,
        }
    }

    fn starts(&mut self) -> tally_kinds::Result<Vec<(Vec<u8>, u64)>> {
        SweepSession::starts(self).map_err(into_error)
    }
}

struct LoadedKernel {
    sandbox: Arc<Sandbox>,
    kernel: Kernel,
}

impl GuestModule for LoadedKernel {
    fn run(
        &self,
        call: &GuestCall<'_>,
        hooks: &mut dyn GuestHooks,
    ) -> tally_kinds::Result<Vec<u64>> {
        self.sandbox
            .run(&self.kernel, call, hooks)
            .map_err(into_error)
    }
}

/// A session is what a sweep's level shard asks for children and weights;
/// its errors become the runner's (a module's own fault fails its job).
impl tally_kernels::sweep::SweepModel for SweepSession {
    fn expand(
        &mut self,
        step: u32,
        keys: &[&[u8]],
        out: &mut tally_kernels::sweep::SweepChildren,
    ) -> tally_kernels::Result<()> {
        SweepSession::expand(self, step, keys, out).map_err(into_error)
    }

    fn weights(
        &mut self,
        step: u32,
        last: bool,
        keys: &[&[u8]],
    ) -> tally_kernels::Result<Vec<u64>> {
        SweepSession::weights(self, step, last, keys).map_err(into_error)
    }
}

/// The runner's error for a sandbox error.
fn into_error(e: WasmError) -> Error {
    match e {
        WasmError::Cancelled => Error::Cancelled,
        WasmError::Failed(m) => Error::Failed(format!("the wasm shard failed: {m}")),
        own_fault => invalid!("wasm module: {own_fault}"),
    }
}
