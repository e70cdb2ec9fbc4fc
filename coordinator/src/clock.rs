//! The wall clock as the coordinator reads it: Unix milliseconds, the unit
//! of every time the scheduler, the replica and the services keep.

/// The wall clock in Unix milliseconds (0 before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
