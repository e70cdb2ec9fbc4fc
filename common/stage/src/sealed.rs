//! Sealed objects: whole objects that carry their own length and SHA-256 in a
//! trailer, so that a reader tells a damaged or truncated one from a good one
//! without any record elsewhere. The coordinator's replica is made of them
//! (see `tally_coordinator::replica`); stage blobs are not (their digests are
//! committed with their references).

use object_store::ObjectStoreExt;
use object_store::path::Path;
use sha2::{Digest, Sha256};
use tally_kinds::Control;

use crate::error::{Result, StageError};
use crate::store::StageStore;

/// The last bytes of every sealed object: body length (u64, big-endian),
/// SHA-256 of the body, and this tag.
const SEAL_TAG: &[u8; 8] = b"TALLYSL1";
const TRAILER: usize = 8 + 32 + SEAL_TAG.len();

/// The trailer that seals `body`.
fn seal(body: &[bytes::Bytes]) -> bytes::Bytes {
    let mut hash = Sha256::new();
    let mut len = 0u64;
    for piece in body {
        hash.update(piece);
        len += piece.len() as u64;
    }
    let mut trailer = Vec::with_capacity(TRAILER);
    trailer.extend_from_slice(&len.to_be_bytes());
    trailer.extend_from_slice(&hash.finalize());
    trailer.extend_from_slice(SEAL_TAG);
    trailer.into()
}

/// The body of a sealed object, or why it is not one.
pub fn unseal(object: &bytes::Bytes) -> std::result::Result<bytes::Bytes, String> {
    if object.len() < TRAILER {
        return Err(format!(
            "it is {} bytes long, shorter than its seal (truncated)",
            object.len()
        ));
    }
    let (body, trailer) = object.split_at(object.len() - TRAILER);
    if &trailer[40..] != SEAL_TAG {
        return Err("it does not end with a seal (truncated, or not written by tally)".into());
    }
    let len = u64::from_be_bytes(trailer[..8].try_into().expect("8 bytes"));
    if len != body.len() as u64 {
        return Err(format!(
            "its seal says {len} bytes and it holds {} (truncated or extended)",
            body.len()
        ));
    }
    if Sha256::digest(body)[..] != trailer[8..40] {
        return Err("its content does not match its SHA-256 (damaged)".into());
    }
    Ok(object.slice(..body.len()))
}

impl StageStore {
    /// Writes `body` (in pieces, never copied) as the sealed object `key`,
    /// replacing any object there.
    pub async fn put_sealed(&self, key: &str, mut body: Vec<bytes::Bytes>) -> Result<u64> {
        let trailer = seal(&body);
        body.push(trailer);
        let len = body.iter().map(|p| p.len() as u64).sum();
        self.write_pieces(key, body, &Control::default()).await?;
        Ok(len)
    }

    /// The body of the sealed object `key`: `None` if there is none, `Corrupt`
    /// naming what is wrong if it is damaged or truncated.
    pub async fn get_sealed(&self, key: &str) -> Result<Option<bytes::Bytes>> {
        let path = Path::parse(key)
            .map_err(|e| StageError::Refused(format!("the key {key:?} is malformed: {e}")))?;
        let control = Control::default();
        let object = self
            .patiently("read", key, &control, || async {
                match self.inner.get(&path).await {
                    Ok(got) => got.bytes().await.map(Some),
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        match object {
            None => Ok(None),
            Some(object) => unseal(&object)
                .map(Some)
                .map_err(|why| StageError::Corrupt {
                    key: key.to_string(),
                    why,
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::url::StageStoreUrl;

    #[test]
    fn a_seal_refuses_truncation_damage_and_a_foreign_object() {
        let body = vec![
            bytes::Bytes::from_static(b"hello "),
            b"world".to_vec().into(),
        ];
        let mut object = b"hello world".to_vec();
        object.extend_from_slice(&seal(&body));
        let object = bytes::Bytes::from(object);
        assert_eq!(&unseal(&object).unwrap()[..], b"hello world");
        let cut = object.slice(..object.len() - 1);
        assert!(unseal(&cut).unwrap_err().contains("seal"));
        let shorter = object.slice(3..);
        assert!(unseal(&shorter).unwrap_err().contains("says 11 bytes"));
        let mut flipped = object.to_vec();
        flipped[2] ^= 1;
        assert!(unseal(&flipped.into()).unwrap_err().contains("damaged"));
        assert!(
            unseal(&bytes::Bytes::from_static(b"tiny"))
                .unwrap_err()
                .contains("truncated")
        );
        let empty = seal(&[]);
        assert!(unseal(&empty).unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_sealed_object_reads_back_and_a_damaged_one_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let store = StageStore::open(&StageStoreUrl::File(dir.path().to_path_buf()))
            .unwrap()
            .unwrap();
        assert_eq!(store.get_sealed("r/a").await.unwrap(), None);
        let written = store
            .put_sealed("r/a", vec![b"abc".to_vec().into()])
            .await
            .unwrap();
        assert_eq!(written, 3 + TRAILER as u64);
        assert_eq!(&store.get_sealed("r/a").await.unwrap().unwrap()[..], b"abc");
        std::fs::write(dir.path().join("r/a"), b"abd").unwrap();
        let err = store.get_sealed("r/a").await.unwrap_err();
        assert!(matches!(err, StageError::Corrupt { .. }), "{err}");
    }
}
