//! Protobuf's wire format, read with every length checked against the bytes left, and
//! the JSON text of the well-known types held as JSON (Struct, Value, ListValue, Any).

use serde_json::{Map, Value};

use super::MAX_DEPTH;
use super::column::DecodeError;
use super::protobuf::{JsonKind, wire_type};

/// A field's value as it sits on the wire: a number (varint, fixed32 and fixed64 alike)
/// or the bytes of a length-delimited value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Raw<'a> {
    Int(u64),
    Len(&'a [u8]),
}

pub(crate) struct Wire<'a> {
    buf: &'a [u8],
}

#[cold]
fn short() -> DecodeError {
    DecodeError::new("the value ends early")
}

impl<'a> Wire<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Wire<'a> {
        Wire { buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(short());
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, DecodeError> {
        // Keys and most values fit one byte.
        if let Some((&b, rest)) = self.buf.split_first()
            && b < 0x80
        {
            self.buf = rest;
            return Ok(u64::from(b));
        }
        let mut n: u64 = 0;
        for i in 0..10 {
            let (&b, rest) = self.buf.split_first().ok_or_else(short)?;
            self.buf = rest;
            if i == 9 && b > 1 {
                break;
            }
            n |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(DecodeError::new("a varint longer than 64 bits"))
    }

    /// A field's number and wire type.
    #[inline]
    pub(crate) fn key(&mut self) -> Result<(u32, u8), DecodeError> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|&n| n > 0 && n < (1 << 29))
            .ok_or_else(|| DecodeError::new(format!("field number {} is invalid", key >> 3)))?;
        Ok((number, (key & 7) as u8))
    }

    #[inline]
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.varint()?;
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.buf.len())
            .ok_or_else(|| {
                DecodeError::new(format!(
                    "a length of {n} with {} bytes left",
                    self.buf.len()
                ))
            })?;
        self.take(n)
    }

    #[inline]
    pub(crate) fn read(&mut self, wt: u8) -> Result<Raw<'a>, DecodeError> {
        Ok(match wt {
            wire_type::VARINT => Raw::Int(self.varint()?),
            wire_type::FIXED64 => {
                let b = self.take(8)?;
                Raw::Int(u64::from_le_bytes(b.try_into().map_err(|_| short())?))
            }
            wire_type::FIXED32 => {
                let b = self.take(4)?;
                Raw::Int(u64::from(u32::from_le_bytes(
                    b.try_into().map_err(|_| short())?,
                )))
            }
            wire_type::LEN => Raw::Len(self.bytes()?),
            other => {
                return Err(DecodeError::new(format!(
                    "wire type {other} where a value belongs"
                )));
            }
        })
    }

    /// Passes over a field the reader does not have; groups (wire types 3 and 4, long
    /// deprecated) nest at most [`MAX_DEPTH`] deep.
    pub(crate) fn skip(&mut self, wt: u8, number: u32) -> Result<(), DecodeError> {
        const START_GROUP: u8 = 3;
        const END_GROUP: u8 = 4;
        if wt != START_GROUP {
            if wt == END_GROUP {
                return Err(DecodeError::new(format!(
                    "an end of group {number} without its start"
                )));
            }
            self.read(wt)?;
            return Ok(());
        }
        let mut open = vec![number];
        while let Some(&top) = open.last() {
            let (n, wt) = self.key()?;
            match wt {
                START_GROUP if open.len() < MAX_DEPTH => open.push(n),
                START_GROUP => return Err(DecodeError::new("groups nested too deep")),
                END_GROUP if n == top => {
                    open.pop();
                }
                END_GROUP => return Err(DecodeError::new(format!("group {top} ended as {n}"))),
                wt => {
                    self.read(wt)?;
                }
            }
        }
        Ok(())
    }
}

/// Timestamp's and Duration's fields: seconds (1) and nanos (2).
pub(crate) fn seconds_nanos(buf: &[u8]) -> Result<(i64, i32), DecodeError> {
    let (mut seconds, mut nanos) = (0i64, 0i32);
    let mut w = Wire::new(buf);
    while !w.is_empty() {
        match w.key()? {
            (1, wire_type::VARINT) => seconds = w.varint()? as i64,
            (2, wire_type::VARINT) => nanos = w.varint()? as i32,
            (n, wt) => w.skip(wt, n)?,
        }
    }
    Ok((seconds, nanos))
}

/// A well-known JSON-like message as JSON text.
pub(crate) fn json_text(kind: JsonKind, buf: &[u8]) -> Result<String, DecodeError> {
    let v = match kind {
        JsonKind::Struct => json_struct(buf, 1)?,
        JsonKind::Value => json_value(buf, 1)?,
        JsonKind::ListValue => json_list(buf, 1)?,
        JsonKind::Any => {
            let (mut url, mut value) = (String::new(), &[][..]);
            let mut w = Wire::new(buf);
            while !w.is_empty() {
                match w.key()? {
                    (1, wire_type::LEN) => url = utf8(w.bytes()?)?.to_string(),
                    (2, wire_type::LEN) => value = w.bytes()?,
                    (n, wt) => w.skip(wt, n)?,
                }
            }
            let mut o = Map::new();
            o.insert("@type".into(), Value::String(url));
            o.insert("value".into(), Value::String(base64(value)));
            Value::Object(o)
        }
    };
    Ok(v.to_string())
}

fn utf8(b: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(b).map_err(|e| DecodeError::new(format!("a string that is not UTF-8: {e}")))
}

fn deeper(depth: usize) -> Result<usize, DecodeError> {
    if depth >= MAX_DEPTH {
        return Err(DecodeError::new(format!(
            "JSON nested deeper than {MAX_DEPTH} levels"
        )));
    }
    Ok(depth + 1)
}

/// Struct: `map<string, Value> fields = 1`.
fn json_struct(buf: &[u8], depth: usize) -> Result<Value, DecodeError> {
    let depth = deeper(depth)?;
    let mut o = Map::new();
    let mut w = Wire::new(buf);
    while !w.is_empty() {
        match w.key()? {
            (1, wire_type::LEN) => {
                let mut entry = Wire::new(w.bytes()?);
                let (mut k, mut v) = (String::new(), Value::Null);
                while !entry.is_empty() {
                    match entry.key()? {
                        (1, wire_type::LEN) => k = utf8(entry.bytes()?)?.to_string(),
                        (2, wire_type::LEN) => v = json_value(entry.bytes()?, depth)?,
                        (n, wt) => entry.skip(wt, n)?,
                    }
                }
                o.insert(k, v);
            }
            (n, wt) => w.skip(wt, n)?,
        }
    }
    Ok(Value::Object(o))
}

/// ListValue: `repeated Value values = 1`.
fn json_list(buf: &[u8], depth: usize) -> Result<Value, DecodeError> {
    let depth = deeper(depth)?;
    let mut out = Vec::new();
    let mut w = Wire::new(buf);
    while !w.is_empty() {
        match w.key()? {
            (1, wire_type::LEN) => out.push(json_value(w.bytes()?, depth)?),
            (n, wt) => w.skip(wt, n)?,
        }
    }
    Ok(Value::Array(out))
}

/// Value: a oneof of null (1), number (2), string (3), bool (4), struct (5), list (6).
fn json_value(buf: &[u8], depth: usize) -> Result<Value, DecodeError> {
    let depth = deeper(depth)?;
    let mut v = Value::Null;
    let mut w = Wire::new(buf);
    while !w.is_empty() {
        v = match w.key()? {
            (1, wire_type::VARINT) => {
                w.varint()?;
                Value::Null
            }
            (2, wire_type::FIXED64) => {
                let Raw::Int(bits) = w.read(wire_type::FIXED64)? else {
                    return Err(short());
                };
                // JSON has no NaN or infinities: those become null, as in protobuf's JSON.
                serde_json::Number::from_f64(f64::from_bits(bits))
                    .map_or(Value::Null, Value::Number)
            }
            (3, wire_type::LEN) => Value::String(utf8(w.bytes()?)?.to_string()),
            (4, wire_type::VARINT) => Value::Bool(w.varint()? != 0),
            (5, wire_type::LEN) => json_struct(w.bytes()?, depth)?,
            (6, wire_type::LEN) => json_list(w.bytes()?, depth)?,
            (n, wt) => {
                w.skip(wt, n)?;
                continue;
            }
        };
    }
    Ok(v)
}

/// Standard base64 with padding (protobuf's JSON form of bytes).
fn base64(b: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | (u32::from(x) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&[0xff, 0xfe, 0xfd, 0x00]), "//79AA==");
    }

    #[test]
    fn groups_are_skipped_and_bounded() {
        // Group 1 holding a varint field 2 and a nested group 3, then field 4.
        let buf = [0x0b, 0x10, 0x05, 0x1b, 0x1c, 0x0c, 0x20, 0x01];
        let mut w = Wire::new(&buf);
        let (n, wt) = w.key().unwrap();
        w.skip(wt, n).unwrap();
        assert_eq!(w.key().unwrap(), (4, 0));
        // A group that never ends, and one ended by another number.
        let mut w = Wire::new(&[0x0b, 0x10, 0x05]);
        let (n, wt) = w.key().unwrap();
        assert!(w.skip(wt, n).is_err());
        let mut w = Wire::new(&[0x0b, 0x14]);
        let (n, wt) = w.key().unwrap();
        assert!(w.skip(wt, n).is_err());
        // Nested past the limit.
        let deep = vec![0x0b; MAX_DEPTH + 2];
        let mut w = Wire::new(&deep);
        let (n, wt) = w.key().unwrap();
        assert!(w.skip(wt, n).is_err());
    }
}
