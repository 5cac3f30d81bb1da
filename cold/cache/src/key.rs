//! The cache key: one chunk of one object, under one chunk geometry.

use std::{
    io::{Read, Write},
    sync::Arc,
};

use foyer::{Code, Error, ErrorKind};

/// `(object key, chunk index)`, plus the chunk size the index refers to.
///
/// The chunk size is part of the key because the disk tier outlives the process:
/// if an operator changes `chunk_size`, chunk 1 of an object means different
/// bytes, and a recovered entry must never be served for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ChunkKey {
    pub object: Arc<str>,
    pub chunk_size: u64,
    pub index: u64,
}

/// Longest object key the disk encoding accepts; S3 keys are at most 1024 bytes.
const MAX_OBJECT_KEY_LEN: usize = 4096;

impl Code for ChunkKey {
    fn encode(&self, writer: &mut impl Write) -> foyer::Result<()> {
        let object = self.object.as_bytes();
        let len = u32::try_from(object.len())
            .map_err(|_| Error::new(ErrorKind::OutOfRange, "object key too long"))?;
        writer
            .write_all(&self.chunk_size.to_le_bytes())
            .and_then(|()| writer.write_all(&self.index.to_le_bytes()))
            .and_then(|()| writer.write_all(&len.to_le_bytes()))
            .and_then(|()| writer.write_all(object))
            .map_err(Error::io_error)
    }

    fn decode(reader: &mut impl Read) -> foyer::Result<Self> {
        let mut u64_buf = [0u8; 8];
        reader.read_exact(&mut u64_buf).map_err(Error::io_error)?;
        let chunk_size = u64::from_le_bytes(u64_buf);
        reader.read_exact(&mut u64_buf).map_err(Error::io_error)?;
        let index = u64::from_le_bytes(u64_buf);
        let mut u32_buf = [0u8; 4];
        reader.read_exact(&mut u32_buf).map_err(Error::io_error)?;
        let len = u32::from_le_bytes(u32_buf) as usize;
        if len > MAX_OBJECT_KEY_LEN {
            return Err(Error::new(
                ErrorKind::Parse,
                "object key length out of range",
            ));
        }
        let mut object = vec![0u8; len];
        reader.read_exact(&mut object).map_err(Error::io_error)?;
        let object = String::from_utf8(object)
            .map_err(|e| Error::new(ErrorKind::Parse, "object key is not UTF-8").with_source(e))?;
        Ok(Self {
            object: Arc::from(object),
            chunk_size,
            index,
        })
    }

    fn estimated_size(&self) -> usize {
        8 + 8 + 4 + self.object.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trips() {
        let key = ChunkKey {
            object: Arc::from("topics/t-1/0/segments/00000000000000000042-3-uuid.log"),
            chunk_size: 8 << 20,
            index: 17,
        };
        let mut buf = Vec::new();
        key.encode(&mut buf).unwrap();
        assert_eq!(buf.len(), key.estimated_size());
        let back = ChunkKey::decode(&mut buf.as_slice()).unwrap();
        assert_eq!(back, key);
    }

    #[test]
    fn truncated_key_is_an_error() {
        let key = ChunkKey {
            object: Arc::from("k"),
            chunk_size: 4 << 20,
            index: 1,
        };
        let mut buf = Vec::new();
        key.encode(&mut buf).unwrap();
        buf.pop();
        assert!(ChunkKey::decode(&mut buf.as_slice()).is_err());
    }
}
