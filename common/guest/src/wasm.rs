//! `wasm32` only: the global allocator, the panic handler and the memory glue
//! behind the exports.

use core::alloc::{GlobalAlloc, Layout};
use core::arch::wasm32;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::shard::Shard;
use crate::{KernelFn, run_kernel};

const PAGE: usize = 64 * 1024;

/// The global allocator of a kernel module: a bump allocator over pages the
/// module grows its memory by (`memory.grow`).
///
/// It starts at the end of the memory the module was instantiated with, hands
/// out blocks upwards and never returns pages to the host. Freeing a block gives
/// its space back only when it is the most recent one (and growing the most
/// recent block extends it in place); any other freed block stays used until
/// the instance ends. A kernel that allocates its buffers once, or in a
/// stack-like order, uses little more than it needs; one that frees and
/// allocates in a loop should reuse its buffers instead. Each `tally_shard`
/// call runs on the memory left by the calls before it on the same instance.
pub struct BumpAllocator {
    /// The first free byte; 0 until the first allocation.
    next: AtomicUsize,
    /// The end of the memory.
    end: AtomicUsize,
}

impl BumpAllocator {
    /// The allocator, before its first allocation.
    pub const fn new() -> Self {
        BumpAllocator {
            next: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
        }
    }

    /// Moves the first free byte to `new_next`, growing the memory as needed;
    /// `false` when the memory cannot grow that far.
    fn reserve_to(&self, new_next: usize) -> bool {
        let end = self.end.load(Relaxed);
        if new_next > end {
            let pages = (new_next - end).div_ceil(PAGE);
            if wasm32::memory_grow(0, pages) == usize::MAX {
                return false;
            }
            // The module grows its memory nowhere else, so the new pages start
            // at `end`.
            self.end.store(end + pages * PAGE, Relaxed);
        }
        self.next.store(new_next, Relaxed);
        true
    }
}

impl Default for BumpAllocator {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: blocks are disjoint, aligned as asked, and lie in memory the module
// owns; wasm32 without threads runs one call at a time.
unsafe impl GlobalAlloc for BumpAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mut next = self.next.load(Relaxed);
        if next == 0 {
            let Some(start) = wasm32::memory_size(0).checked_mul(PAGE) else {
                return core::ptr::null_mut();
            };
            next = start;
            self.next.store(start, Relaxed);
            self.end.store(start, Relaxed);
        }
        let Some(start) = next.checked_next_multiple_of(layout.align()) else {
            return core::ptr::null_mut();
        };
        let Some(new_next) = start.checked_add(layout.size()) else {
            return core::ptr::null_mut();
        };
        if self.reserve_to(new_next) {
            start as *mut u8
        } else {
            core::ptr::null_mut()
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ptr as usize + layout.size() == self.next.load(Relaxed) {
            self.next.store(ptr as usize, Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let start = ptr as usize;
        if start + layout.size() == self.next.load(Relaxed) {
            let Some(new_next) = start.checked_add(new_size) else {
                return core::ptr::null_mut();
            };
            return if self.reserve_to(new_next) {
                ptr
            } else {
                core::ptr::null_mut()
            };
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: the caller guarantees a valid layout of `new_size` bytes.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as for `alloc`; the old block stays valid until copied.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size());
            }
            new
        }
    }
}

#[global_allocator]
static ALLOCATOR: BumpAllocator = BumpAllocator::new();

/// A panic (including a failed allocation) traps: the host fails the attempt.
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    wasm32::unreachable()
}

/// `tally_alloc`: `len` bytes aligned to 8, or 0 when `len` is negative or the
/// memory cannot grow.
pub fn host_alloc(len: i32) -> i32 {
    let Ok(len) = usize::try_from(len) else {
        return 0;
    };
    let Ok(layout) = Layout::from_size_align(len.max(1), 8) else {
        return 0;
    };
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { ALLOCATOR.alloc(layout) };
    ptr as usize as i32
}

/// The bytes at `ptr..ptr + len` of this module's memory.
///
/// # Safety
///
/// For a non-zero `len`, the region must be memory the module does not use
/// otherwise, e.g. obtained from `tally_alloc`, and not written while borrowed.
unsafe fn host_bytes<'a>(ptr: i32, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: as the caller guarantees.
        unsafe { core::slice::from_raw_parts(ptr as u32 as usize as *const u8, len) }
    }
}

/// The bytes at `ptr..ptr + len` of this module's memory (none for a
/// negative `len`), for the macros' exports.
///
/// # Safety
///
/// As for `host_bytes`.
pub unsafe fn host_slice<'a>(ptr: i32, len: i32) -> &'a [u8] {
    // SAFETY: as the caller guarantees.
    unsafe { host_bytes(ptr, usize::try_from(len).unwrap_or(0)) }
}

/// `tally_shard`: builds the shard from the host's arguments, runs the kernel
/// into a zeroed buffer, and copies the residues written to `out`.
///
/// # Safety
///
/// `params`, `state` and `out` must point to `params_len`, `state_len` and
/// `8 * out_len` bytes of this module's memory that the module uses for nothing
/// else, e.g. obtained from `tally_alloc` (`out` need not be aligned; it is
/// written only after the kernel has returned).
#[allow(clippy::too_many_arguments)]
pub unsafe fn wasm_shard(
    kernel: KernelFn,
    shard: i64,
    shards: i64,
    prime: i64,
    params: i32,
    params_len: i32,
    state: i32,
    state_len: i32,
    out: i32,
    out_len: i32,
) -> i32 {
    // Arguments no host following the ABI passes: every shard would fail.
    let bad = -1;
    let (Ok(shard), Ok(shards), Ok(prime)) = (
        u64::try_from(shard),
        u64::try_from(shards),
        u64::try_from(prime),
    ) else {
        return bad;
    };
    let (Ok(params_len), Ok(state_len), Ok(out_len)) = (
        usize::try_from(params_len),
        usize::try_from(state_len),
        usize::try_from(out_len),
    ) else {
        return bad;
    };
    let mut residues = alloc::vec![0u64; out_len];
    let written = {
        // SAFETY: as the caller guarantees.
        let (params, state) =
            unsafe { (host_bytes(params, params_len), host_bytes(state, state_len)) };
        let mut context = match Shard::from_bytes(shard, shards, prime, params, state) {
            Ok(context) => context,
            Err(error) => return failed(&error),
        };
        match run_kernel(kernel, &mut context, &mut residues) {
            Ok(written) => written,
            Err(error) => return failed(&error),
        }
    };
    let out = out as u32 as usize as *mut u8;
    for (slot, residue) in residues[..written].iter().enumerate() {
        let bytes = residue.to_le_bytes();
        // SAFETY: `slot < out_len`, and `out` has `8 * out_len` bytes.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), out.add(8 * slot), 8) }
    }
    // `written <= out_len`, which came from an `i32`.
    written as i32
}

/// The model of a sweep module, built from the parameters by the first call
/// of an instance and used by the calls after it (the runner keeps one
/// instance for a shard's batches).
pub struct ModelCell<S>(core::cell::UnsafeCell<Option<S>>);

// SAFETY: wasm32 without threads runs one call at a time.
unsafe impl<S> Sync for ModelCell<S> {}

impl<S> ModelCell<S> {
    pub const fn new() -> Self {
        ModelCell(core::cell::UnsafeCell::new(None))
    }
}

impl<S> Default for ModelCell<S> {
    fn default() -> Self {
        Self::new()
    }
}

/// One export of a sweep module: the model (built from `params` on the
/// first call), `records` of it, copied to `out` when they fit; else
/// [`crate::sweep::NEEDS_ROOM`], with the bytes they need in `out`'s first 8
/// bytes when it has them.
///
/// # Safety
///
/// `params` and `out` must point to `params_len` and `out_len` bytes of this
/// module's memory that it uses for nothing else, e.g. from `tally_alloc`.
pub unsafe fn wasm_sweep<S: crate::sweep::Sweep>(
    cell: &ModelCell<S>,
    params: i32,
    params_len: i32,
    out: i32,
    out_len: i32,
    records: impl FnOnce(&mut S) -> Result<alloc::vec::Vec<u8>, crate::KernelError>,
) -> i32 {
    let (Ok(params_len), Ok(out_len)) = (usize::try_from(params_len), usize::try_from(out_len))
    else {
        return -1;
    };
    // SAFETY: one call at a time (see `ModelCell`), and no reference to the
    // model outlives this call.
    let model = unsafe { &mut *cell.0.get() };
    if model.is_none() {
        // SAFETY: as the caller guarantees.
        let params = unsafe { host_bytes(params, params_len) };
        let Ok(text) = core::str::from_utf8(params) else {
            let why = "the parameters are not UTF-8".into();
            return failed(&crate::KernelError::BadParams(why));
        };
        let built = crate::Params::parse(text)
            .map_err(crate::KernelError::from)
            .and_then(|params| S::new(&params));
        match built {
            Ok(built) => *model = Some(built),
            Err(error) => return failed(&error),
        }
    }
    let Some(model) = model.as_mut() else {
        return -2;
    };
    let bytes = match records(model) {
        Ok(bytes) => bytes,
        Err(error) => return failed(&error),
    };
    let out = out as u32 as usize as *mut u8;
    if bytes.len() > out_len || bytes.len() > i32::MAX as usize {
        if out_len >= 8 {
            let needed = (bytes.len() as u64).to_le_bytes();
            // SAFETY: `out` has at least 8 bytes.
            unsafe { core::ptr::copy_nonoverlapping(needed.as_ptr(), out, 8) }
        }
        return crate::sweep::NEEDS_ROOM;
    }
    // SAFETY: `out` has `out_len >= bytes.len()` bytes.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len()) }
    bytes.len() as i32
}

/// The code of `error`, its message said to the host first (`tally.say`).
fn failed(error: &crate::KernelError) -> i32 {
    if let crate::KernelError::BadParams(_) | crate::KernelError::Malformed(_) = error {
        crate::host::say(&alloc::format!("{error}"));
    }
    error.code()
}
