//! The job's parameters: the `--param K=V` pairs, one `K=V` per line.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::ops::RangeInclusive;

/// The parsed parameters, borrowed from the text the host wrote.
///
/// Each non-empty line is `K=V`: the key is everything before the first `=`
/// (never empty), the value everything after it, both kept as they are (a `\r`
/// ending a line is dropped). When a key appears more than once, [`get`] gives
/// the last value; [`iter`] gives every pair in order.
///
/// [`get`]: Params::get
/// [`iter`]: Params::iter
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params<'a> {
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Params<'a> {
    /// Parses `K=V` lines.
    pub fn parse(text: &'a str) -> Result<Self, ParamError> {
        let mut pairs = Vec::new();
        for line in text.split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            match line.split_once('=') {
                Some(("", _)) => {
                    return Err(ParamError::Malformed {
                        line: line.to_string(),
                        reason: "the key is empty",
                    });
                }
                Some((key, value)) => pairs.push((key, value)),
                None => {
                    return Err(ParamError::Malformed {
                        line: line.to_string(),
                        reason: "it has no `=`",
                    });
                }
            }
        }
        Ok(Params { pairs })
    }

    /// The value of `key` (the last one given), if any.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|&(_, value)| value)
    }

    /// The value of `key` as a decimal `u64`; an error if it is missing or is
    /// not one.
    pub fn get_u64(&self, key: &str) -> Result<u64, ParamError> {
        let value = self.get(key).ok_or_else(|| ParamError::Missing {
            key: key.to_string(),
        })?;
        parse_u64(key, value)
    }

    /// The value of `key` as a `u64` in `range`.
    pub fn get_u64_in(&self, key: &str, range: RangeInclusive<u64>) -> Result<u64, ParamError> {
        check_range(key, self.get_u64(key)?, range)
    }

    /// The value of `key` as a `u64`, or `default` when the key is absent.
    pub fn get_u64_or(&self, key: &str, default: u64) -> Result<u64, ParamError> {
        match self.get(key) {
            Some(value) => parse_u64(key, value),
            None => Ok(default),
        }
    }

    /// The value of `key` as a `u64` in `range`, or `default` (not checked
    /// against `range`) when the key is absent.
    pub fn get_u64_in_or(
        &self,
        key: &str,
        range: RangeInclusive<u64>,
        default: u64,
    ) -> Result<u64, ParamError> {
        match self.get(key) {
            Some(value) => check_range(key, parse_u64(key, value)?, range),
            None => Ok(default),
        }
    }

    /// Every `(key, value)` pair, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + '_ {
        self.pairs.iter().copied()
    }

    /// Whether there are no parameters.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

fn parse_u64(key: &str, value: &str) -> Result<u64, ParamError> {
    // `u64::from_str` takes a leading `+`; a parameter should not.
    let digits_only = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    match value.parse::<u64>() {
        Ok(number) if digits_only => Ok(number),
        _ => Err(ParamError::NotAnInteger {
            key: key.to_string(),
            value: value.to_string(),
        }),
    }
}

fn check_range(key: &str, value: u64, range: RangeInclusive<u64>) -> Result<u64, ParamError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(ParamError::OutOfRange {
            key: key.to_string(),
            value,
            min: *range.start(),
            max: *range.end(),
        })
    }
}

/// A parameter that is missing or unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamError {
    /// The parameter text is not UTF-8.
    NotUtf8,
    /// A non-empty line that is not `K=V` with a non-empty `K`.
    Malformed { line: String, reason: &'static str },
    /// A required key is absent.
    Missing { key: String },
    /// The value is not a decimal unsigned integer that fits in 64 bits.
    NotAnInteger { key: String, value: String },
    /// The value is outside the range the kernel supports.
    OutOfRange {
        key: String,
        value: u64,
        min: u64,
        max: u64,
    },
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::NotUtf8 => f.write_str("the parameters are not valid UTF-8"),
            ParamError::Malformed { line, reason } => {
                write!(f, "parameter line `{line}` is not `K=V`: {reason}")
            }
            ParamError::Missing { key } => {
                write!(f, "missing parameter `{key}` (--param {key}=...)")
            }
            ParamError::NotAnInteger { key, value } => write!(
                f,
                "parameter `{key}` must be a decimal unsigned 64-bit integer, got `{value}`"
            ),
            ParamError::OutOfRange {
                key,
                value,
                min,
                max,
            } => write!(
                f,
                "parameter `{key}` = {value} is out of range: this kernel takes {min}..={max}"
            ),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl std::error::Error for ParamError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn parses_lines_in_order() {
        let params = Params::parse("n=12\r\nname=a=b\n\nempty=\nn=13\n").unwrap();
        assert_eq!(
            params.iter().collect::<Vec<_>>(),
            vec![("n", "12"), ("name", "a=b"), ("empty", ""), ("n", "13")]
        );
        assert_eq!(params.get("n"), Some("13"));
        assert_eq!(params.get("name"), Some("a=b"));
        assert_eq!(params.get("empty"), Some(""));
        assert_eq!(params.get("missing"), None);
        assert!(Params::parse("").unwrap().is_empty());
        assert!(Params::parse("\n\n").unwrap().is_empty());
    }

    #[test]
    fn malformed_lines_are_refused() {
        let error = Params::parse("n=1\noops\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "parameter line `oops` is not `K=V`: it has no `=`"
        );
        let error = Params::parse("=5").unwrap_err();
        assert_eq!(
            error.to_string(),
            "parameter line `=5` is not `K=V`: the key is empty"
        );
    }

    #[test]
    fn integers() {
        let params = Params::parse(
            "n=12\nbig=18446744073709551615\nneg=-1\nplus=+3\nsp= 4\nhuge=18446744073709551616\nx=",
        )
        .unwrap();
        assert_eq!(params.get_u64("n"), Ok(12));
        assert_eq!(params.get_u64("big"), Ok(u64::MAX));
        for key in ["neg", "plus", "sp", "huge", "x"] {
            assert!(
                matches!(params.get_u64(key), Err(ParamError::NotAnInteger { .. })),
                "{key}"
            );
        }
        assert_eq!(
            params.get_u64("neg").unwrap_err().to_string(),
            "parameter `neg` must be a decimal unsigned 64-bit integer, got `-1`"
        );
        assert_eq!(
            params.get_u64("k").unwrap_err().to_string(),
            "missing parameter `k` (--param k=...)"
        );
        assert_eq!(params.get_u64_in("n", 1..=12), Ok(12));
        assert_eq!(
            params.get_u64_in("n", 1..=11).unwrap_err().to_string(),
            "parameter `n` = 12 is out of range: this kernel takes 1..=11"
        );
        assert_eq!(params.get_u64_or("k", 7), Ok(7));
        assert_eq!(params.get_u64_or("n", 7), Ok(12));
        assert!(params.get_u64_or("neg", 7).is_err());
        assert_eq!(params.get_u64_in_or("k", 0..=3, 9), Ok(9));
        assert!(params.get_u64_in_or("n", 0..=3, 9).is_err());
    }
}
