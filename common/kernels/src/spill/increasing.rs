//! Increasing lists read as streams (raw varints or compact keys alone),
//! merged, and written to a spill as they are merged.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{ChunkedWrite, Source, Spill, VarintStream};
use crate::compact::{ChunkWriter, ListForm, ListStream};
use crate::{Result, invalid, varint};

/// A strictly increasing list as `varint::push_increasing` writes it (its
/// count, the first value, the gaps), read as it comes and checked as
/// `varint::Reader::increasing` checks it; `what` names the list in errors.
/// Or a compact list of keys alone ([`IncreasingStream::compact`]).
pub struct IncreasingStream<S>(Increasing<S>);

enum Increasing<S> {
    Raw {
        stream: VarintStream<S>,
        left: u128,
        index: u64,
        previous: Option<u128>,
        what: &'static str,
    },
    Compact(ListStream<S>),
}

impl<S: Source> IncreasingStream<S> {
    pub fn new(source: S, what: &'static str) -> Result<Self> {
        IncreasingStream::continuing(VarintStream::new(source, what), what)
    }

    /// The list in `form`: the raw form of [`IncreasingStream::new`] (`what`
    /// naming it in errors), or a compact list of keys alone (`label`).
    pub fn in_form(source: S, form: ListForm, what: &'static str, label: String) -> Result<Self> {
        match form {
            ListForm::Raw => IncreasingStream::new(source, what),
            ListForm::Compact => IncreasingStream::compact(source, label),
        }
    }

    /// A compact list of keys alone (`compact::encode_keys`), `label`
    /// naming it in errors.
    pub fn compact(source: S, label: String) -> Result<Self> {
        Ok(IncreasingStream(Increasing::Compact(ListStream::new(
            source, label,
        )?)))
    }

    /// The list that follows what `stream` has read.
    pub fn continuing(mut stream: VarintStream<S>, what: &'static str) -> Result<Self> {
        let left = stream.varint("its count")?;
        Ok(IncreasingStream(Increasing::Raw {
            stream,
            left,
            index: 0,
            previous: None,
            what,
        }))
    }

    pub fn pull(&mut self) -> Result<Option<u128>> {
        let (stream, left, index, previous, what) = match &mut self.0 {
            Increasing::Compact(list) => return Ok(list.pull()?.map(|(key, _)| key)),
            Increasing::Raw {
                stream,
                left,
                index,
                previous,
                what,
            } => (stream, left, index, previous, *what),
        };
        if *left == 0 {
            if !stream.at_end()? {
                return Err(invalid!("{what}: bytes after its {} values", index));
            }
            return Ok(None);
        }
        let gap = stream.varint(what)?;
        let state = match previous {
            None => gap,
            Some(_) if gap == 0 => {
                return Err(invalid!("{what}: not sorted and distinct"));
            }
            Some(p) => p.checked_add(gap).ok_or_else(|| {
                invalid!(
                    "layer bucket: state {} of its {what} overflows 128 bits",
                    index
                )
            })?,
        };
        *left -= 1;
        *index += 1;
        *previous = Some(state);
        Ok(Some(state))
    }
}

/// Increasing streams merged into one, each value once.
pub struct MergedIncreasing<S> {
    parts: Vec<IncreasingStream<S>>,
    heads: BinaryHeap<Reverse<(u128, usize)>>,
}

impl<S: Source> MergedIncreasing<S> {
    pub fn new(parts: Vec<IncreasingStream<S>>) -> Result<Self> {
        let mut merged = MergedIncreasing {
            heads: BinaryHeap::with_capacity(parts.len()),
            parts,
        };
        for i in 0..merged.parts.len() {
            merged.advance(i)?;
        }
        Ok(merged)
    }

    fn advance(&mut self, i: usize) -> Result<()> {
        if let Some(state) = self.parts[i].pull()? {
            self.heads.push(Reverse((state, i)));
        }
        Ok(())
    }

    pub fn pull(&mut self) -> Result<Option<u128>> {
        let Some(Reverse((state, i))) = self.heads.pop() else {
            return Ok(None);
        };
        self.advance(i)?;
        while let Some(&Reverse((next, j))) = self.heads.peek() {
            if next != state {
                break;
            }
            self.heads.pop();
            self.advance(j)?;
        }
        Ok(Some(state))
    }

    /// The next state if it is below `bound`, else `None` (and it stays).
    pub fn next_below(&mut self, bound: u128) -> Result<Option<u128>> {
        match self.heads.peek() {
            Some(&Reverse((state, _))) if state < bound => self.pull(),
            _ => Ok(None),
        }
    }

    /// Whether every stream has ended.
    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// Whether the next state is `state`; if so it is taken.
    pub fn take_if(&mut self, state: u128) -> Result<bool> {
        match self.heads.peek() {
            Some(&Reverse((next, _))) if next == state => self.pull().map(|_| true),
            _ => Ok(false),
        }
    }
}

/// Writes a merge to `spill` as `varint::push_increasing` writes a list (its
/// count, which comes first, is returned instead): the count and the bytes
/// written.
pub fn write_increasing<S: Source>(
    merged: MergedIncreasing<S>,
    spill: &mut dyn Spill,
) -> Result<(u128, u64)> {
    write_increasing_as(merged, ListForm::Raw, spill)
}

/// [`write_increasing`] in `form`: in the compact one, a list of keys alone
/// (`compact::encode_keys`) without its entry count, which is returned.
pub fn write_increasing_as<S: Source>(
    mut merged: MergedIncreasing<S>,
    form: ListForm,
    spill: &mut dyn Spill,
) -> Result<(u128, u64)> {
    let mut out = ChunkedWrite::new(spill);
    if form == ListForm::Compact {
        let mut writer = ChunkWriter::keys_only();
        while let Some(value) = merged.pull()? {
            writer.push_key(value, &mut out.buf);
            out.flush_if_full()?;
        }
        let count = writer.finish(&mut out.buf);
        return Ok((count, out.finish()?));
    }
    let (mut count, mut previous) = (0u128, None);
    while let Some(value) = merged.pull()? {
        varint::push(&mut out.buf, previous.map_or(value, |p| value - p));
        previous = Some(value);
        count += 1;
        out.flush_if_full()?;
    }
    Ok((count, out.finish()?))
}
