//! The replica's objects: where each lives under the data directory's prefix
//! and how its body is laid out. Every object is sealed
//! (`tally_stage::sealed`: its length and SHA-256 in a trailer), so damage or
//! truncation is found before anything in it is used.
//!
//! ```text
//! replica/g00000000000000000007/manifest          the generation: its parent, if any
//! replica/g00000000000000000007/log/F-L           changes F to L (numbered in the generation)
//! replica/g00000000000000000007/snapshot/part-N   entries of the store, read while it changed
//! replica/g00000000000000000007/snapshot/done     the snapshot is whole: its parts and changes
//! ```

use serde::{Deserialize, Serialize};

use crate::store::{Batch, Tree, Write};

/// Where the replica lives under the data directory's prefix.
pub const REPLICA_DIR: &str = "replica";

/// A generation's directory.
pub fn generation_dir(generation: u64) -> String {
    format!("{REPLICA_DIR}/g{generation:020}")
}

pub fn manifest_key(generation: u64) -> String {
    format!("{}/manifest", generation_dir(generation))
}

/// The log segment holding changes `first` to `last` of `generation`.
pub fn segment_key(generation: u64, first: u64, last: u64) -> String {
    format!("{}/log/{first:020}-{last:020}", generation_dir(generation))
}

pub fn snapshot_part_key(generation: u64, part: u32) -> String {
    format!("{}/snapshot/part-{part:06}", generation_dir(generation))
}

pub fn snapshot_done_key(generation: u64) -> String {
    format!("{}/snapshot/done", generation_dir(generation))
}

/// What a key under the replica is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaObject {
    Manifest {
        generation: u64,
    },
    Segment {
        generation: u64,
        first: u64,
        last: u64,
    },
    SnapshotPart {
        generation: u64,
        part: u32,
    },
    SnapshotDone {
        generation: u64,
    },
}

impl ReplicaObject {
    /// Reads a key listed under the prefix; `None` for anything else.
    pub fn parse(key: &str) -> Option<ReplicaObject> {
        let rest = key.strip_prefix(REPLICA_DIR)?.strip_prefix("/g")?;
        let (generation, rest) = rest.split_once('/')?;
        let generation: u64 = generation.parse().ok()?;
        if rest == "manifest" {
            return Some(ReplicaObject::Manifest { generation });
        }
        if rest == "snapshot/done" {
            return Some(ReplicaObject::SnapshotDone { generation });
        }
        if let Some(part) = rest.strip_prefix("snapshot/part-") {
            let part = part.parse().ok()?;
            return Some(ReplicaObject::SnapshotPart { generation, part });
        }
        let (first, last) = rest.strip_prefix("log/")?.split_once('-')?;
        let (first, last) = (first.parse().ok()?, last.parse().ok()?);
        (first <= last).then_some(ReplicaObject::Segment {
            generation,
            first,
            last,
        })
    }

    pub fn generation(&self) -> u64 {
        match *self {
            ReplicaObject::Manifest { generation }
            | ReplicaObject::Segment { generation, .. }
            | ReplicaObject::SnapshotPart { generation, .. }
            | ReplicaObject::SnapshotDone { generation } => generation,
        }
    }
}

/// A generation's manifest, written before anything else of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub generation: u64,
    /// Where its changes start from until its own snapshot is whole: the
    /// state of `parent` after its change `through` (its change 1 follows
    /// that one). `None`: only its snapshot (the coordinator started, or its
    /// store may have lost changes the log had not shipped).
    pub parent: Option<Parent>,
    /// When it began (ms since the Unix epoch), and on which data directory.
    pub created_ms: u64,
    pub data: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parent {
    pub generation: u64,
    pub through: u64,
}

/// Written once every part of a snapshot is: the snapshot read the store
/// while changes `from + 1` to `to` were applied, so it is the state after
/// change `to` once changes `from + 1` onwards are replayed over it (every
/// change sets or removes whole values: replaying one the snapshot already
/// saw changes nothing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotDone {
    pub from: u64,
    pub to: u64,
    pub parts: u32,
    pub entries: u64,
    pub bytes: u64,
}

pub fn encode_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec_pretty(value).expect("replica records serialize")
}

/// What a body is when it cannot be read: why, in words (the caller names
/// the object).
pub type Unreadable = String;

pub fn decode_json<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Unreadable> {
    serde_json::from_slice(body).map_err(|e| format!("it does not parse: {e}"))
}

fn tree_code(tree: Tree) -> u8 {
    Tree::ALL
        .iter()
        .position(|t| *t == tree)
        .expect("a tree of ALL") as u8
}

fn tree_of(code: u8) -> Option<Tree> {
    Tree::ALL.get(code as usize).copied()
}

/// Appends one change: its number, then its writes.
pub fn encode_change(seq: u64, batch: &Batch, out: &mut Vec<u8>) {
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&(batch.writes.len() as u32).to_be_bytes());
    for write in &batch.writes {
        out.push(tree_code(write.tree));
        put_bytes(out, &write.key);
        match &write.value {
            None => out.push(0),
            Some(value) => {
                out.push(1);
                put_bytes(out, value);
            }
        }
    }
}

/// Appends one entry of a snapshot.
pub fn encode_entry(tree: Tree, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(tree_code(tree));
    put_bytes(out, key);
    put_bytes(out, value);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Reads a body made by the `encode_*` functions.
struct Reader<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.at == self.body.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Unreadable> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.body.len());
        let end = end.ok_or("an entry runs past its end")?;
        let bytes = &self.body[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, Unreadable> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Unreadable> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, Unreadable> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, Unreadable> {
        let len = self.u64()?;
        let len = usize::try_from(len).map_err(|_| "an entry too long")?;
        Ok(self.take(len)?.to_vec())
    }

    fn tree(&mut self) -> Result<Tree, Unreadable> {
        let code = self.u8()?;
        tree_of(code).ok_or_else(|| format!("an unknown tree {code}"))
    }
}

/// The changes of a log segment, checked to be numbered `first` to `last`.
pub fn decode_segment(body: &[u8], first: u64, last: u64) -> Result<Vec<Batch>, Unreadable> {
    let mut r = Reader { body, at: 0 };
    let mut changes = Vec::new();
    let mut expected = first;
    while !r.done() {
        let seq = r.u64()?;
        if seq != expected || seq > last {
            return Err(format!("it holds change {seq} where {expected} was due"));
        }
        let writes = r.u32()?;
        let mut batch = Batch::default();
        for _ in 0..writes {
            let tree = r.tree()?;
            let key = r.bytes()?;
            let value = match r.u8()? {
                0 => None,
                1 => Some(r.bytes()?),
                other => return Err(format!("a write of kind {other}")),
            };
            batch.writes.push(Write { tree, key, value });
        }
        changes.push(batch);
        expected += 1;
    }
    if expected != last + 1 {
        return Err(format!(
            "it ends at change {} of {first} to {last}",
            expected - 1
        ));
    }
    Ok(changes)
}

/// One entry of a snapshot: its tree, key and value.
pub type Entry = (Tree, Vec<u8>, Vec<u8>);

/// The entries of a snapshot part.
pub fn decode_entries(body: &[u8]) -> Result<Vec<Entry>, Unreadable> {
    let mut r = Reader { body, at: 0 };
    let mut entries = Vec::new();
    while !r.done() {
        let tree = r.tree()?;
        entries.push((tree, r.bytes()?, r.bytes()?));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_what_they_hold_and_nothing_else_parses() {
        for object in [
            ReplicaObject::Manifest { generation: 7 },
            ReplicaObject::SnapshotDone { generation: 7 },
            ReplicaObject::SnapshotPart {
                generation: 7,
                part: 12,
            },
            ReplicaObject::Segment {
                generation: 7,
                first: 3,
                last: 90,
            },
        ] {
            let key = match &object {
                ReplicaObject::Manifest { generation } => manifest_key(*generation),
                ReplicaObject::SnapshotDone { generation } => snapshot_done_key(*generation),
                ReplicaObject::SnapshotPart { generation, part } => {
                    snapshot_part_key(*generation, *part)
                }
                ReplicaObject::Segment {
                    generation,
                    first,
                    last,
                } => segment_key(*generation, *first, *last),
            };
            assert_eq!(ReplicaObject::parse(&key), Some(object.clone()), "{key}");
            assert_eq!(object.generation(), 7);
        }
        // Segments sort by their first change as text.
        assert!(segment_key(1, 9, 9) < segment_key(1, 10, 12));
        for other in [
            "jobs/job-000001/x",
            "replica/g12/other",
            "replica/gx/manifest",
            "replica/g1/log/5-4",
            "owner/00000000000000000001",
        ] {
            assert_eq!(ReplicaObject::parse(other), None, "{other}");
        }
    }

    #[test]
    fn changes_and_entries_read_back_and_a_wrong_number_is_refused() {
        let mut a = Batch::default();
        a.put(Tree::Jobs, b"job-1".to_vec(), b"record".to_vec());
        a.remove(Tree::Shards, b"s".to_vec());
        let mut b = Batch::default();
        b.put(Tree::Blobs, b"big".to_vec(), vec![7u8; 100_000]);
        let mut body = Vec::new();
        encode_change(4, &a, &mut body);
        encode_change(5, &b, &mut body);
        let back = decode_segment(&body, 4, 5).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].writes[0].value.as_deref(), Some(&b"record"[..]));
        assert_eq!(back[0].writes[1].value, None);
        assert_eq!(back[1].writes[0].value.as_ref().unwrap().len(), 100_000);
        assert!(decode_segment(&body, 3, 5).is_err());
        assert!(decode_segment(&body, 4, 6).is_err());
        assert!(decode_segment(&body[..body.len() - 1], 4, 5).is_err());
        let mut entries = Vec::new();
        encode_entry(Tree::Meta, b"epoch", &3u64.to_be_bytes(), &mut entries);
        encode_entry(Tree::Events, b"e", b"", &mut entries);
        let back = decode_entries(&entries).unwrap();
        assert_eq!(back[0].0, Tree::Meta);
        assert_eq!(back[1], (Tree::Events, b"e".to_vec(), Vec::new()));
        entries[0] = 99;
        assert!(decode_entries(&entries).is_err());
    }
}
