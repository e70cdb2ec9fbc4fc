//! A hint to the CPU's cache, shared by the kernels whose lookups miss it.

/// Asks the CPU to start loading the cache line that holds `p`, so that a read
/// of it a little later does not wait for memory. Only a hint: `p` need not be
/// valid, and nothing happens on other targets than x86_64.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: `_mm_prefetch` is a safe function whose only requirement is
        // SSE, which every x86_64 CPU has (the target's baseline). PREFETCHT0
        // never faults and reads no data, so any address will do.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
