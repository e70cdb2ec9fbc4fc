//! Unsigned LEB128 varints (7 bits per byte, low bits first, high bit set on
//! all but the last byte), the number format of the frontier plans' stage
//! data. Sorted keys are shipped as gaps, and gaps and counts are small, so
//! most numbers take one to four bytes.
//!
//! Hand-written rather than taken from a crate: the reader must refuse
//! overlong and overflowing forms with a message naming the field, and the
//! whole format is the twenty lines below.

use crate::{Result, invalid};

/// Bytes of the longest varint of a `u128`.
const MAX_VARINT_BYTES: usize = 19;

/// Appends `value` to `out`.
#[inline]
pub fn push(out: &mut Vec<u8>, mut value: u128) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads varints from a byte slice; `label` starts every error message.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    label: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], label: &'static str) -> Reader<'a> {
        Reader {
            bytes,
            at: 0,
            label,
        }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// The next `len` bytes as they are; `what` names them in errors.
    pub fn bytes(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        if len > self.remaining() {
            return Err(invalid!(
                "{}: truncated in {what} at byte {}",
                self.label,
                self.at
            ));
        }
        let bytes = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(bytes)
    }

    /// The next varint; `what` names it in errors. Truncated, overlong (a
    /// trailing zero byte) and overflowing forms are `InvalidArgument`.
    #[inline]
    pub fn varint(&mut self, what: &str) -> Result<u128> {
        // Fast path: numbers of up to 8 bytes (56 bits), all in the slice,
        // read without the checks a longer number needs. A trailing zero
        // byte (a number not in shortest form) goes to the full reader.
        let mut value = 0u64;
        for (i, &byte) in self.bytes[self.at..].iter().take(8).enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                if byte == 0 && i > 0 {
                    break;
                }
                self.at += i + 1;
                return Ok(u128::from(value));
            }
        }
        self.varint_slow(what)
    }

    #[cold]
    fn varint_slow(&mut self, what: &str) -> Result<u128> {
        let start = self.at;
        let mut value = 0u128;
        for i in 0..MAX_VARINT_BYTES {
            let Some(&byte) = self.bytes.get(self.at) else {
                return Err(invalid!(
                    "{}: truncated in {what} at byte {start}",
                    self.label
                ));
            };
            self.at += 1;
            let payload = (byte & 0x7f) as u128;
            let shift = 7 * i as u32;
            if shift > 0 && payload >> (128 - shift) != 0 {
                return Err(invalid!(
                    "{}: {what} at byte {start} overflows 128 bits",
                    self.label
                ));
            }
            value |= payload << shift;
            if byte & 0x80 == 0 {
                if byte == 0 && i > 0 {
                    return Err(invalid!(
                        "{}: {what} at byte {start} is not in shortest form",
                        self.label
                    ));
                }
                return Ok(value);
            }
        }
        Err(invalid!(
            "{}: {what} at byte {start} is longer than {MAX_VARINT_BYTES} bytes",
            self.label
        ))
    }

    /// Fails unless every byte has been read.
    pub fn finish(&self, after: &str) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(invalid!("{}: {n} trailing bytes after {after}", self.label)),
        }
    }
}

/// Appends a strictly increasing list: its length, the first value, then the
/// gap to each next one (at least 1).
///
/// # Panics
/// If `values` is not strictly increasing (the lists shipped are sorted and
/// deduplicated by construction, so this is a bug in the caller).
pub fn push_increasing<T: Copy + Into<u128>>(out: &mut Vec<u8>, values: &[T]) {
    push(out, values.len() as u128);
    let mut previous: Option<u128> = None;
    for &value in values {
        let value: u128 = value.into();
        match previous {
            None => push(out, value),
            Some(p) => {
                assert!(
                    value > p,
                    "push_increasing needs strictly increasing values"
                );
                push(out, value - p);
            }
        }
        previous = Some(value);
    }
}

impl Reader<'_> {
    /// Reads a list written by [`push_increasing`], each value of `noun`
    /// (plural) fitting `T`. Truncated, overlong or overflowing numbers, a gap
    /// of 0 and a count larger than the bytes left are `InvalidArgument`; no
    /// input can make it allocate more than the input can describe.
    pub fn increasing<T: TryFrom<u128>>(&mut self, noun: &str) -> Result<Vec<T>> {
        let label = self.label;
        let count = self.varint(&format!("the count of {noun}"))?;
        // Every value takes at least one byte: a larger count is garbage.
        let remaining = self.remaining() as u128;
        if count > remaining {
            return Err(invalid!(
                "{label}: {count} {noun} announced but only {remaining} bytes follow"
            ));
        }
        let mut values = Vec::with_capacity(count as usize);
        let mut previous: Option<u128> = None;
        for index in 0..count as usize {
            let gap = self.varint(noun)?;
            let value = match previous {
                None => gap,
                Some(_) if gap == 0 => {
                    return Err(invalid!(
                        "{label}: {noun} are not strictly increasing (number {index} repeats \
                         the previous one)"
                    ));
                }
                Some(p) => p
                    .checked_add(gap)
                    .ok_or_else(|| invalid!("{label}: number {index} overflows 128 bits"))?,
            };
            let fitted = T::try_from(value)
                .map_err(|_| invalid!("{label}: number {index} of the {noun} is too large"))?;
            values.push(fitted);
            previous = Some(value);
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_refuse_bad_forms() {
        let values = [0u128, 1, 127, 128, 300, u64::MAX as u128, u128::MAX];
        let mut bytes = Vec::new();
        for &v in &values {
            push(&mut bytes, v);
        }
        let mut reader = Reader::new(&bytes, "test");
        for &v in &values {
            assert_eq!(reader.varint("a value").unwrap(), v);
        }
        reader.finish("the values").unwrap();
        let refused = |bytes: &[u8], reason: &str| {
            let e = Reader::new(bytes, "test")
                .varint("x")
                .unwrap_err()
                .to_string();
            assert!(e.contains(reason), "{e}");
        };
        refused(&[0x80], "truncated");
        refused(&[0x80, 0x00], "shortest form");
        refused(&[0xff; 19], "overflows");
        refused(&[0x80; 20], "longer than");
        let mut long = vec![0x80; 18];
        long.push(0x04);
        refused(&long, "overflows");
        assert!(Reader::new(&[1, 2], "t").finish("x").is_err());
    }
}
