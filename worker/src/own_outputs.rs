//! The stage outputs this worker computed and sent inline to the coordinator,
//! or in a pack to the stage store, kept for the next stage's input: a worker
//! that computed a step's shards then fetches none of them back. One is used
//! only where the coordinator's listing names the same bytes (their XXH3-128
//! for an output it holds, the digest of its index for a blob in a pack), so
//! a copy of an attempt whose result was not the one committed is never read.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};

/// Stages kept: the one being read and the one being computed.
const KEPT_STAGES: usize = 2;

/// Bytes kept at most; outputs past them are not kept (and are fetched).
const KEPT_BYTES: usize = 256 << 20;

/// A kept output, and the digest of its blob's index once it went in a pack.
struct Kept {
    output: Bytes,
    packed: Option<[u8; 32]>,
}

/// A stage's outputs kept: its job and number, and each shard's output.
type KeptStage = ((String, u32), HashMap<u32, Kept>);

#[derive(Default)]
pub(crate) struct OwnOutputs {
    /// Oldest first.
    stages: VecDeque<KeptStage>,
    bytes: usize,
}

impl OwnOutputs {
    /// Keeps the output of shard `index` of `stage` of `job`, dropping the
    /// oldest stage when a third comes.
    pub(crate) fn keep(&mut self, job: &str, stage: u32, index: u32, output: Bytes) {
        let key = (job.to_string(), stage);
        if !self.stages.iter().any(|(k, _)| *k == key) {
            if self.stages.len() == KEPT_STAGES
                && let Some((_, dropped)) = self.stages.pop_front()
            {
                self.bytes -= dropped.values().map(|k| k.output.len()).sum::<usize>();
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
        let kept = Kept {
            output,
            packed: None,
        };
        if let Some(replaced) = outputs.insert(index, kept) {
            self.bytes -= replaced.output.len();
        }
    }

    /// Notes that `output`, of shard `index` of `stage` of `job`, went into a
    /// pack as the blob whose index has `digest`: if it is the output kept
    /// (the same bytes; an attempt computed since may have replaced it).
    pub(crate) fn note_packed(
        &mut self,
        job: &str,
        stage: u32,
        index: u32,
        output: &[u8],
        digest: [u8; 32],
    ) {
        if let Some(kept) = self.entry_mut(job, stage, index)
            && kept.output[..] == *output
        {
            kept.packed = Some(digest);
        }
    }

    /// The kept output of shard `index` of `stage` of `job` if it went into a
    /// pack as the blob whose index has `digest`.
    pub(crate) fn get_packed(
        &self,
        job: &str,
        stage: u32,
        index: u32,
        digest: &[u8; 32],
    ) -> Option<Bytes> {
        let kept = self.entry(job, stage, index)?;
        (kept.packed.as_ref() == Some(digest)).then(|| kept.output.clone())
    }

    fn entry(&self, job: &str, stage: u32, index: u32) -> Option<&Kept> {
        let (_, outputs) = self
            .stages
            .iter()
            .find(|((j, s), _)| j == job && *s == stage)?;
        outputs.get(&index)
    }

    fn entry_mut(&mut self, job: &str, stage: u32, index: u32) -> Option<&mut Kept> {
        let (_, outputs) = self
            .stages
            .iter_mut()
            .find(|((j, s), _)| j == job && *s == stage)?;
        outputs.get_mut(&index)
    }

    /// The kept output of shard `index` of `stage` of `job`.
    pub(crate) fn get(&self, job: &str, stage: u32, index: u32) -> Option<Bytes> {
        self.entry(job, stage, index)
            .map(|kept| kept.output.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_stages_are_kept_within_the_bound() {
        let mut kept = OwnOutputs::default();
        kept.keep("j", 1, 0, Bytes::from(vec![1; 10]));
        kept.keep("j", 2, 0, Bytes::from(vec![2; 10]));
        kept.keep("j", 2, 0, Bytes::from(vec![3; 5]));
        assert_eq!(kept.bytes, 15, "a replaced output is let go");
        assert_eq!(kept.get("j", 1, 0).unwrap()[0], 1);
        kept.keep("j", 3, 4, Bytes::from(vec![4; 10]));
        assert!(kept.get("j", 1, 0).is_none(), "the oldest stage went");
        assert_eq!(kept.get("j", 2, 0).unwrap().len(), 5);
        assert_eq!(kept.bytes, 15);
        assert!(kept.get("k", 3, 4).is_none() && kept.get("j", 3, 5).is_none());
        kept.keep("j", 3, 5, Bytes::from(vec![0; KEPT_BYTES]));
        assert!(kept.get("j", 3, 5).is_none(), "past the bound, not kept");
    }

    /// A kept output is read for a blob in a pack only with the digest its
    /// own bytes went in with.
    #[test]
    fn a_packed_output_is_taken_only_for_its_own_digest() {
        let mut kept = OwnOutputs::default();
        kept.keep("j", 1, 0, Bytes::from(vec![1; 10]));
        assert!(
            kept.get_packed("j", 1, 0, &[7; 32]).is_none(),
            "not packed yet"
        );
        kept.note_packed("j", 1, 0, &[2; 10], [7; 32]);
        assert!(
            kept.get_packed("j", 1, 0, &[7; 32]).is_none(),
            "other bytes went in"
        );
        kept.note_packed("j", 1, 0, &[1; 10], [7; 32]);
        assert_eq!(kept.get_packed("j", 1, 0, &[7; 32]).unwrap()[0], 1);
        assert!(
            kept.get_packed("j", 1, 0, &[8; 32]).is_none(),
            "another digest"
        );
        assert!(kept.get_packed("j", 1, 1, &[7; 32]).is_none());
        kept.keep("j", 1, 0, Bytes::from(vec![1; 10]));
        assert!(
            kept.get_packed("j", 1, 0, &[7; 32]).is_none(),
            "an output kept again is packed again before it is read so"
        );
    }
}
