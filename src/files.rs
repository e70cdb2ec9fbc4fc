//! Reading a file the user names: never more than a bound, and a failure is
//! bad input (exit code 2), like a bad flag.

use std::path::Path;

use tally_kinds::invalid;

/// Reads at most `limit` bytes of `path` (`what` names it in messages); a
/// longer file is refused without reading the rest, so `/dev/zero` costs
/// nothing. Errors are bad input.
pub fn read_bounded(path: &Path, limit: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let named = if what.is_empty() {
        path.display().to_string()
    } else {
        format!("{what} {}", path.display())
    };
    let cannot = |e: std::io::Error| invalid!("cannot read {named}: {e}");
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > limit {
        return Err(invalid!("{named} is larger than {limit} bytes").into());
    }
    Ok(bytes)
}
