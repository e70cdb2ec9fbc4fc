//! A per-process cache of the expensive structures kinds build for a job (hex
//! state graphs, slider graphs, compiled user kernels), so a worker builds
//! each once whatever the number of shards it runs; and what the process was
//! given to run them with: the attachments (modules) its jobs name, and the
//! sandbox for user kernels where one may run.

use parking_lot::Mutex;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use crate::Result;
use crate::guest::{GuestRuntime, MODULES_KEPT};

type Value = Arc<dyn Any + Send + Sync>;
/// One key's value, filled by the first caller while the others wait.
type Slot = Arc<Mutex<Option<Value>>>;

#[derive(Default)]
pub struct KernelCache {
    slots: Mutex<HashMap<(TypeId, String), Slot>>,
    /// Attachments by SHA-256 (hex), at most [`MODULES_KEPT`].
    attachments: Mutex<HashMap<String, Arc<[u8]>>>,
    guest: Mutex<Option<Arc<dyn GuestRuntime>>>,
}

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCache")
            .field("entries", &self.slots.lock().len())
            .finish()
    }
}

impl KernelCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of type `T` under `key`, built once: concurrent callers for the
    /// same key wait for the one build (a second copy of a large graph would
    /// double the worker's memory), callers for other keys do not. At most
    /// `capacity` values of type `T` are kept: adding one more drops the others.
    pub fn get_or_build<T: Any + Send + Sync>(
        &self,
        key: &str,
        capacity: usize,
        build: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let slot = self.slot::<T>(key, capacity);
        let mut slot = slot.lock();
        if let Some(value) = slot.as_ref() {
            return Ok(downcast(value.clone()));
        }
        let value = Arc::new(build()?);
        *slot = Some(value.clone());
        Ok(value)
    }

    /// Installs the sandbox user kernels run in.
    pub fn set_guest_runtime(&self, runtime: Arc<dyn GuestRuntime>) {
        *self.guest.lock() = Some(runtime);
    }

    /// The sandbox, where this process may run user kernels.
    pub fn guest_runtime(&self) -> Option<Arc<dyn GuestRuntime>> {
        self.guest.lock().clone()
    }

    /// Keeps an attachment, whose digest the caller has checked, for the
    /// kinds (at most [`MODULES_KEPT`]: one more drops the others).
    pub fn put_attachment(&self, sha256: &str, bytes: Arc<[u8]>) {
        let mut attachments = self.attachments.lock();
        if !attachments.contains_key(sha256) && attachments.len() >= MODULES_KEPT {
            attachments.clear();
        }
        attachments.insert(sha256.to_string(), bytes);
    }

    /// The attachment of this digest, if the process has it.
    pub fn attachment(&self, sha256: &str) -> Option<Arc<[u8]>> {
        self.attachments.lock().get(sha256).cloned()
    }

    fn slot<T: Any>(&self, key: &str, capacity: usize) -> Slot {
        let mut slots = self.slots.lock();
        let id = (TypeId::of::<T>(), key.to_string());
        if !slots.contains_key(&id) {
            let same_type = slots.keys().filter(|(t, _)| *t == id.0).count();
            if same_type >= capacity.max(1) {
                slots.retain(|(t, _), _| *t != id.0);
            }
        }
        slots.entry(id).or_default().clone()
    }
}

fn downcast<T: Any + Send + Sync>(value: Value) -> Arc<T> {
    value
        .downcast::<T>()
        .unwrap_or_else(|_| unreachable!("cache slots are keyed by type"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn builds_once_per_key_and_keeps_at_most_capacity_values_of_a_type() {
        let cache = KernelCache::new();
        let builds = AtomicUsize::new(0);
        let build = |v: u32| {
            builds.fetch_add(1, Ordering::Relaxed);
            Ok(v)
        };
        assert_eq!(*cache.get_or_build("a", 2, || build(1)).unwrap(), 1);
        assert_eq!(*cache.get_or_build("a", 2, || build(9)).unwrap(), 1);
        assert_eq!(builds.load(Ordering::Relaxed), 1);
        // Another type under the same key is another value.
        assert_eq!(*cache.get_or_build("a", 2, || Ok(7u64)).unwrap(), 7);
        cache.get_or_build("b", 2, || build(2)).unwrap();
        // A third u32 drops the first two.
        cache.get_or_build("c", 2, || build(3)).unwrap();
        assert_eq!(*cache.get_or_build("a", 2, || build(4)).unwrap(), 4);
        assert_eq!(builds.load(Ordering::Relaxed), 4);
        assert_eq!(*cache.get_or_build("a", 2, || Ok(8u64)).unwrap(), 7);
    }

    #[test]
    fn a_failed_build_is_not_cached() {
        let cache = KernelCache::new();
        let failed: Result<Arc<u32>> = cache.get_or_build("k", 1, || Err(crate::Error::Cancelled));
        assert!(failed.is_err());
        assert_eq!(*cache.get_or_build("k", 1, || Ok(5u32)).unwrap(), 5);
    }
}
