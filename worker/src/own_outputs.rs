//! The stage outputs this worker computed and sent inline to the coordinator,
//! kept for the next stage's input: a worker that computed a step's shards
//! then fetches none of them back. One is used only where the coordinator's
//! listing names the same bytes (their XXH3-128), so a copy of an attempt
//! whose result was not the one committed is never read.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Stages kept: the one being read and the one being computed.
const KEPT_STAGES: usize = 2;

/// Bytes kept at most; outputs past them are not kept (and are fetched).
const KEPT_BYTES: usize = 256 << 20;

/// A stage's outputs kept: its job and number, and each shard's output.
type KeptStage = ((String, u32), HashMap<u32, Arc<Vec<u8>>>);

#[derive(Default)]
pub(crate) struct OwnOutputs {
    /// Oldest first.
    stages: VecDeque<KeptStage>,
    bytes: usize,
}

impl OwnOutputs {
    /// Keeps the output of shard `index` of `stage` of `job`, dropping the
    /// oldest stage when a third comes.
    pub(crate) fn keep(&mut self, job: &str, stage: u32, index: u32, output: Arc<Vec<u8>>) {
        let key = (job.to_string(), stage);
        if !self.stages.iter().any(|(k, _)| *k == key) {
            if self.stages.len() == KEPT_STAGES
                && let Some((_, dropped)) = self.stages.pop_front()
            {
                self.bytes -= dropped.values().map(|o| o.len()).sum::<usize>();
            }
            self.stages.push_back((key.clone(), HashMap::new()));
        }
        if self.bytes + output.len() > KEPT_BYTES {
            return;
        }
        let outputs = &mut self
            .stages
            .iter_mut()
            .find(|(k, _)| *k == key)
            .expect("added")
            .1;
        self.bytes += output.len();
        if let Some(replaced) = outputs.insert(index, output) {
            self.bytes -= replaced.len();
        }
    }

    /// The kept output of shard `index` of `stage` of `job`.
    pub(crate) fn get(&self, job: &str, stage: u32, index: u32) -> Option<Arc<Vec<u8>>> {
        let (_, outputs) = self
            .stages
            .iter()
            .find(|((j, s), _)| j == job && *s == stage)?;
        outputs.get(&index).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_stages_are_kept_within_the_bound() {
        let mut kept = OwnOutputs::default();
        kept.keep("j", 1, 0, Arc::new(vec![1; 10]));
        kept.keep("j", 2, 0, Arc::new(vec![2; 10]));
        kept.keep("j", 2, 0, Arc::new(vec![3; 5]));
        assert_eq!(kept.bytes, 15, "a replaced output is let go");
        assert_eq!(kept.get("j", 1, 0).unwrap()[0], 1);
        kept.keep("j", 3, 4, Arc::new(vec![4; 10]));
        assert!(kept.get("j", 1, 0).is_none(), "the oldest stage went");
        assert_eq!(kept.get("j", 2, 0).unwrap().len(), 5);
        assert_eq!(kept.bytes, 15);
        assert!(kept.get("k", 3, 4).is_none() && kept.get("j", 3, 5).is_none());
        kept.keep("j", 3, 5, Arc::new(vec![0; KEPT_BYTES]));
        assert!(kept.get("j", 3, 5).is_none(), "past the bound, not kept");
    }
}
