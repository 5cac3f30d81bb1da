//! The field encodings of Kafka's message schemas as the internal topics' records use
//! them (`__consumer_offsets` in strata-group, `__transaction_state` in strata-txn):
//! big-endian integers, classic (`i16`/`i32` length) and compact (varint length + 1)
//! strings, bytes and arrays, and tagged fields. Reads never go past the bytes given.

use bytes::{BufMut, Bytes, BytesMut};

/// Why a field could not be read. Each record codec maps it into its own error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    /// The bytes ended before the field did (or a count needs more bytes than remain).
    #[error("record truncated")]
    Truncated,
    /// A null (a negative classic length, a compact length of 0) where a string is
    /// required.
    #[error("null where a string is required")]
    NullString,
    /// A string that is not UTF-8, a varint over 32 bits.
    #[error("malformed field: {0}")]
    Malformed(&'static str),
}

/// Writes a classic string: `i16` length + UTF-8. Kafka strings are at most `i16::MAX`
/// bytes; longer ones are cut rather than corrupt the framing.
pub fn put_str(buf: &mut BytesMut, s: &str) {
    let bytes = s.as_bytes();
    let len = bytes.len().min(i16::MAX as usize);
    buf.put_i16(len as i16);
    buf.put_slice(&bytes[..len]);
}

/// Writes a classic nullable string (`-1` for null).
pub fn put_nullable_str(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(buf, s),
        None => buf.put_i16(-1),
    }
}

/// Writes a classic array count or bytes length: an `i32` (saturating).
pub fn put_len(buf: &mut BytesMut, n: usize) {
    buf.put_i32(i32::try_from(n).unwrap_or(i32::MAX));
}

/// Writes classic bytes: an `i32` length and the bytes.
pub fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    put_len(buf, b.len());
    buf.put_slice(b);
}

/// A big-endian reader over a byte slice that never reads past its end.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], FieldError> {
        if self.buf.len() < n {
            return Err(FieldError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FieldError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn i8(&mut self) -> Result<i8, FieldError> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    pub fn i16(&mut self) -> Result<i16, FieldError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub fn i32(&mut self) -> Result<i32, FieldError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, FieldError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// An unsigned varint of at most 5 bytes (a `u32`).
    pub fn uvarint(&mut self) -> Result<u32, FieldError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let [b] = self.array::<1>()?;
            if i == 4 && b > 0x0f {
                return Err(FieldError::Malformed("varint overflows 32 bits"));
            }
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(FieldError::Malformed("varint overflows 32 bits"))
    }

    /// Checks that `count` items of at least `min_size` bytes each can still follow.
    fn check_count(&self, count: usize, min_size: usize) -> Result<usize, FieldError> {
        match count.checked_mul(min_size) {
            Some(n) if n <= self.buf.len() => Ok(count),
            _ => Err(FieldError::Truncated),
        }
    }

    fn utf8(raw: &[u8]) -> Result<String, FieldError> {
        String::from_utf8(raw.to_vec()).map_err(|_| FieldError::Malformed("string is not UTF-8"))
    }

    /// A classic nullable string (`i16` length, negative = null).
    pub fn nullable_str(&mut self) -> Result<Option<String>, FieldError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        Self::utf8(self.take(len as usize)?).map(Some)
    }

    /// A classic non-nullable string (`i16` length).
    pub fn str(&mut self) -> Result<String, FieldError> {
        self.nullable_str()?.ok_or(FieldError::NullString)
    }

    /// A compact non-nullable string (varint length + 1).
    pub fn compact_str(&mut self) -> Result<String, FieldError> {
        let n = self.uvarint()? as usize;
        let len = n.checked_sub(1).ok_or(FieldError::NullString)?;
        Self::utf8(self.take(len)?)
    }

    /// Classic nullable bytes (`i32` length, negative = null).
    pub fn nullable_bytes(&mut self) -> Result<Option<Bytes>, FieldError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(None);
        }
        Ok(Some(Bytes::copy_from_slice(self.take(len as usize)?)))
    }

    /// A classic array count (`i32`, `-1` = null) of items of at least `min_size` bytes.
    pub fn count(&mut self, min_size: usize) -> Result<Option<usize>, FieldError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(None);
        }
        self.check_count(n as usize, min_size).map(Some)
    }

    /// A compact array count (varint count + 1, `0` = null).
    pub fn compact_count(&mut self, min_size: usize) -> Result<Option<usize>, FieldError> {
        let n = self.uvarint()? as usize;
        match n.checked_sub(1) {
            None => Ok(None),
            Some(n) => self.check_count(n, min_size).map(Some),
        }
    }

    /// A tagged-field section, handing each field's tag and bytes to `f`.
    pub fn tagged_fields<E: From<FieldError>>(
        &mut self,
        mut f: impl FnMut(u32, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let count = self.uvarint()? as usize;
        // Each field is at least a tag and a size byte.
        self.check_count(count, 2)?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            f(tag, self.take(size)?)?;
        }
        Ok(())
    }

    /// A tagged-field section whose fields are all skipped.
    pub fn skip_tagged_fields(&mut self) -> Result<(), FieldError> {
        self.tagged_fields(|_, _| Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvarint_limits() {
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(r.uvarint(), Ok(u32::MAX));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x10]);
        assert!(matches!(r.uvarint(), Err(FieldError::Malformed(_))));
        let mut r = Reader::new(&[0x80]);
        assert_eq!(r.uvarint(), Err(FieldError::Truncated));
        let mut r = Reader::new(&[0xac, 0x02]);
        assert_eq!(r.uvarint(), Ok(300));
    }

    #[test]
    fn counts_are_checked_before_use() {
        // A claimed 2^31-1 topics in a few bytes.
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff, 0, 0]);
        assert_eq!(r.count(6), Err(FieldError::Truncated));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(r.compact_count(3), Err(FieldError::Truncated));
    }
}
