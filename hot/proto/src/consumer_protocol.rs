//! The consumer protocol's bytes inside a group's JoinGroup metadata and SyncGroup
//! assignments (ConsumerProtocolSubscription / ConsumerProtocolAssignment), read by the
//! tools that describe groups (`strata group describe`, the REST gateway's v3 admin).
//! Bounded by the bytes given: a count longer than what follows is garbage, not an
//! allocation.
/// Big-endian reads off a byte slice, each `None` past its end.
#[derive(Debug)]
pub struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    pub fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }
    pub fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn string(&mut self) -> Option<String> {
        let n = self.i16()?;
        let n = usize::try_from(n).ok()?;
        self.take(n)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }
    /// An array's length: -1 (null) reads as empty.
    fn array_len(&mut self) -> Option<usize> {
        let n = self.i32()?;
        if n < 0 {
            return Some(0);
        }
        let n = usize::try_from(n).ok()?;
        // Every element takes at least two bytes; a longer count is garbage.
        if n > self.b.len() {
            return None;
        }
        Some(n)
    }
}

/// The topics and partitions in a ConsumerProtocolAssignment (v0-v3; user data and later
/// fields ignored). None when the bytes are not a consumer assignment.
pub fn decode_assignment(b: &[u8]) -> Option<Vec<(String, Vec<i32>)>> {
    if b.is_empty() {
        return Some(Vec::new());
    }
    let mut r = Reader { b };
    if r.i16()? < 0 {
        return None;
    }
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let topic = r.string()?;
        let np = r.array_len()?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            parts.push(r.i32()?);
        }
        parts.sort_unstable();
        out.push((topic, parts));
    }
    Some(out)
}

/// The topics in a ConsumerProtocolSubscription (any version; later fields ignored).
pub fn decode_subscription(b: &[u8]) -> Option<Vec<String>> {
    let mut r = Reader { b };
    if r.i16()? < 0 {
        return None;
    }
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r.string()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as i16).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    #[test]
    fn consumer_protocol_bytes_decode() {
        // Assignment v1: [orders: 0, 2], [audit: 1], user data 2 bytes.
        let mut b = Vec::new();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&2i32.to_be_bytes());
        string(&mut b, "orders");
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        string(&mut b, "audit");
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(b"xy");
        assert_eq!(
            decode_assignment(&b),
            Some(vec![
                ("orders".to_string(), vec![0, 2]),
                ("audit".to_string(), vec![1])
            ])
        );
        assert_eq!(decode_assignment(&b[..9]), None);
        assert_eq!(decode_assignment(&[]), Some(vec![]));

        let mut s = Vec::new();
        s.extend_from_slice(&3i16.to_be_bytes());
        s.extend_from_slice(&1i32.to_be_bytes());
        string(&mut s, "orders");
        s.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(decode_subscription(&s), Some(vec!["orders".to_string()]));
    }
}
