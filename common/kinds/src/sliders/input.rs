//! What the shards of a `sliders` stage read: the stage data the worker
//! gathered, decoded (the graph, a graph level's inputs) or kept encoded (a
//! forward level's, to be read as streams).

use std::ops::Range;
use std::sync::Arc;

use crate::{Control, Result, Stored};
use tally_kernels::buckets::gathered_ranges;
use tally_kernels::sliders;
use tally_kernels::sliders::levels::{self, LevelInput};

use super::spec::SlidersSpec;

/// What the shards of a frontier stage read, decoded once per worker.
#[derive(Debug)]
pub enum SlidersInput {
    Levels(sliders::levels::LevelInput),
    /// A forward level's two inputs (every sender's forward bucket, every
    /// sender's members) kept encoded, in memory or in files the worker wrote
    /// as they arrived: read as streams when they are large next to the
    /// shard's memory share.
    Forward(Box<[Framed; 2]>),
    /// The shortest-path graph, for the prefix tasks.
    Graph(Box<sliders::SliderSpace>),
}

/// One stage input kept encoded: its bytes and each sender's bucket in them.
pub struct Framed {
    pub(super) stored: Arc<dyn Stored>,
    pub(super) buckets: Vec<Range<u64>>,
}

impl std::fmt::Debug for Framed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} buckets in {} bytes",
            self.buckets.len(),
            self.stored.len()
        )
    }
}

impl Framed {
    /// The gathered buckets (`buckets::split_gathered` form) of `stored`,
    /// their framing checked.
    fn new(stored: Arc<dyn Stored>) -> Result<Framed> {
        let buckets = gathered_ranges(&*stored)?;
        Ok(Framed { stored, buckets })
    }

    pub(super) fn bytes(&self) -> u64 {
        self.stored.len()
    }

    /// The first byte of the first bucket: what the input holds.
    fn first_tag(&self) -> Result<Option<u8>> {
        match self.buckets.iter().find(|b| b.end > b.start) {
            Some(bucket) => Ok(Some(
                self.stored.read_range(bucket.start..bucket.start + 1)?[0],
            )),
            None => Ok(None),
        }
    }
}

/// A shard's stage inputs as the worker gathered them: a forward level's kept
/// encoded, to be read as streams or decoded as the shard's room allows;
/// the other stages' decoded at once.
pub(super) fn decode_stored_inputs(
    spec: &SlidersSpec,
    parts: Vec<Arc<dyn Stored>>,
) -> Result<SlidersInput> {
    if parts.len() == 2 {
        let framed = parts
            .iter()
            .map(|part| Framed::new(part.clone()))
            .collect::<Result<Vec<_>>>()?;
        if levels::is_forward_tag(framed[0].first_tag()?) {
            let [buckets, members] = <[Framed; 2]>::try_from(framed).expect("two parts");
            return Ok(SlidersInput::Forward(Box::new([buckets, members])));
        }
    }
    let bytes = parts
        .iter()
        .map(|part| part.read_range(0..part.len()))
        .collect::<Result<Vec<_>>>()?;
    let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    decode_inputs(spec, &slices)
}

/// A forward level's input decoded into memory.
pub(super) fn decode_forward(input: &[Framed; 2]) -> Result<LevelInput> {
    let read =
        |framed: &Framed| -> Result<Vec<u8>> { framed.stored.read_range(0..framed.stored.len()) };
    let (buckets, members) = (read(&input[0])?, read(&input[1])?);
    levels::decode_inputs(&[&buckets, &members])
}

pub(super) fn decode_inputs(spec: &SlidersSpec, parts: &[&[u8]]) -> Result<SlidersInput> {
    match levels::decode_inputs(parts)? {
        LevelInput::Graph(layers) => {
            let space = sliders::SliderSpace::from_layers(&spec.board, &layers, &Control::new())?;
            Ok(SlidersInput::Graph(Box::new(space)))
        }
        other => Ok(SlidersInput::Levels(other)),
    }
}

#[cfg(test)]
mod tests {
    use crate::kind::JobKind;
    use crate::sliders::{Sliders, SlidersPlanName, SlidersSpec};
    use tally_kernels::buckets::{encode_buckets, gather_bucket};
    use tally_kernels::sliders::SliderParams;
    use tally_kernels::sliders::levels;

    #[test]
    fn stage_data_of_the_wrong_kind_is_refused() {
        let spec = SlidersSpec {
            board: SliderParams::new(3, 3, "WRBRBRBRB", "WBRBRBRBR"),
            plan: SlidersPlanName::Frontier,
            ..SlidersSpec::default()
        };
        let graph = encode_buckets(&[levels::encode_graph(&[vec![1], vec![2]])]);
        let gathered = gather_bucket(&[&graph], 0).unwrap();
        // A graph where a forward level's two inputs belong.
        assert!(Sliders::decode_stage_inputs(&spec, &[&gathered, &gathered]).is_err());
        assert!(Sliders::decode_stage_inputs(&spec, &[b"\x01\0\0\0\0\0\0\0"]).is_err());
        assert!(Sliders::decode_stage_inputs(&spec, &[]).is_err());
    }
}
