//! `wasm32` only: the `tally` imports, as [`crate::Shard`] calls them.

#[link(wasm_import_module = "tally")]
unsafe extern "C" {
    #[link_name = "progress"]
    fn tally_progress(done: i64, total: i64);
    #[link_name = "cancelled"]
    fn tally_cancelled() -> i32;
    #[link_name = "checkpoint"]
    fn tally_checkpoint(state: i32, state_len: i32);
    #[link_name = "say"]
    fn tally_say(text: i32, text_len: i32);
}

pub(crate) fn progress(done: u64, total: u64) {
    let clamp = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
    // SAFETY: a host function taking two integers.
    unsafe { tally_progress(clamp(done), clamp(total)) }
}

pub(crate) fn cancelled() -> bool {
    // SAFETY: a host function taking nothing.
    unsafe { tally_cancelled() == 1 }
}

pub(crate) fn checkpoint(state: &[u8]) {
    // SAFETY: the host reads `state.len()` bytes of this module's memory at the
    // address of `state`, which is live for the call. Its length is at most
    // `MAX_STATE_LEN`, so it fits in an `i32`.
    unsafe { tally_checkpoint(state.as_ptr() as usize as i32, state.len() as i32) }
}

/// Tells the host why the call is about to fail (`-1` or `-2`): the line
/// its error names.
pub(crate) fn say(text: &str) {
    // SAFETY: the host reads at most `text.len()` bytes of this module's
    // memory at the address of `text`, which is live for the call; a line
    // past 2 GiB is cut to what an `i32` holds.
    unsafe {
        tally_say(
            text.as_ptr() as usize as i32,
            text.len().min(i32::MAX as usize) as i32,
        )
    }
}
