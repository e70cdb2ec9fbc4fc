//! A kind's values as the runner holds them: opaque JSON text, stored in
//! records and sent as bytes, decoded only by the kind they belong to. The text
//! is the kind's own serde form, kept verbatim (never read into numbers, which
//! would round the u128 sums), so records written by earlier versions load as is.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::{Result, StageOutput, invalid};

macro_rules! encoded_value {
    ($(#[$doc:meta])* $ty:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $ty(Box<RawValue>);

        /// JSON text in JSON; a string in compact binary formats (which
        /// cannot carry raw JSON), so the same records serve both.
        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
                if serializer.is_human_readable() {
                    self.0.serialize(serializer)
                } else {
                    serializer.serialize_str(self.0.get())
                }
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<$ty, D::Error> {
                if deserializer.is_human_readable() {
                    Box::<RawValue>::deserialize(deserializer).map($ty)
                } else {
                    let text = String::deserialize(deserializer)?;
                    RawValue::from_string(text)
                        .map($ty)
                        .map_err(serde::de::Error::custom)
                }
            }
        }

        impl $ty {
            /// Encodes a kind's value.
            pub fn encode<T: Serialize>(value: &T) -> $ty {
                $ty(serde_json::value::to_raw_value(value).expect("kind values always serialise"))
            }

            /// Decodes the kind's value; a mismatch is the sender's error.
            pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
                serde_json::from_str(self.0.get())
                    .map_err(|e| invalid!(concat!("malformed ", $what, ": {}"), e))
            }

            /// The JSON text.
            pub fn json(&self) -> &str {
                self.0.get()
            }

            pub fn to_bytes(&self) -> Vec<u8> {
                self.0.get().as_bytes().to_vec()
            }

            /// Parses the bytes as JSON; whether they form the kind's value is
            /// for the kind to say.
            pub fn from_bytes(bytes: &[u8]) -> Result<$ty> {
                serde_json::from_slice::<Box<RawValue>>(bytes)
                    .map($ty)
                    .map_err(|e| invalid!(concat!("malformed ", $what, ": {}"), e))
            }
        }

        impl PartialEq for $ty {
            fn eq(&self, other: &$ty) -> bool {
                self.0.get() == other.0.get()
            }
        }

        impl Eq for $ty {}
    };
}

encoded_value!(
    /// What one shard computes.
    EncodedTask,
    "shard task"
);
encoded_value!(
    /// A shard's (partial) result.
    EncodedPartial,
    "partial result"
);

/// The plan of a job as stored with it: the number of stages, which the runner
/// needs, and the kind's own facts, which it does not read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPlan {
    pub stages_total: u32,
    #[serde(flatten)]
    pub facts: Map<String, Value>,
}

/// One shard of a stage, ready to be stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedShard {
    pub task: EncodedTask,
    pub work_total: u64,
}

/// What a running shard hands to its worker along the way: a resumable state
/// and the partial result it stands for.
#[derive(Debug)]
pub struct ShardEvent {
    pub state: StageOutput,
    pub partial: Option<EncodedPartial>,
    pub work_done: u64,
}

/// What a finished shard returns.
#[derive(Debug)]
pub struct ShardOutcome {
    /// Stage data for the next stage, else empty.
    pub output: StageOutput,
    pub partial: EncodedPartial,
    pub work_done: u64,
}
