//! SIGINT (Ctrl-C) and SIGTERM: the servers stop on the first; `run` tells
//! a second from the first (keep the job, then cancel it).

/// SIGINT and SIGTERM, caught from the moment this is created (so one that
/// arrives before anyone waits is not lost, nor fatal), delivered one by one.
pub struct Interrupts {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Interrupts {
    pub fn new() -> anyhow::Result<Interrupts> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Interrupts {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The next SIGINT or SIGTERM.
    pub async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// A future that resolves on SIGINT or SIGTERM, caught from this call on
/// (not from its first poll): a server creates it before it starts serving,
/// so a signal that arrives while it starts is a clean stop, not a kill.
pub fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    let mut interrupts = Interrupts::new()?;
    Ok(async move { interrupts.next().await })
}
