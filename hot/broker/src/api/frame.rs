//! Response frames as they go on the wire.
//!
//! Most responses are one small buffer. A fetch response carries megabytes of record
//! sets that the log already holds as `Bytes`: encoding copied each of them into the
//! response buffer, a fresh allocation of the response's size whose pages the kernel
//! faulted in on every fetch (a quarter to a third of a consuming broker's CPU). A fetch
//! response with enough records is instead sent as its encoded fields with the record
//! sets spliced in between, uncopied, written with one vectored write.

use std::hash::{BuildHasher, RandomState};
use std::io::IoSlice;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::FetchResponse;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::{RequestContext, encode_response};

/// A response frame (its length prefix included): one buffer, or parts to be written
/// in order.
#[derive(Debug)]
pub enum Frame {
    One(Bytes),
    Parts(Vec<Bytes>),
}

impl From<Bytes> for Frame {
    fn from(b: Bytes) -> Frame {
        Frame::One(b)
    }
}

impl Frame {
    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        match self {
            Frame::One(b) => b.len(),
            Frame::Parts(parts) => parts.iter().map(Bytes::len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame as one buffer (a copy only for a frame in parts), for in-process
    /// callers that decode it.
    pub fn into_bytes(self) -> Bytes {
        match self {
            Frame::One(b) => b,
            Frame::Parts(parts) => {
                let mut out = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
                for p in parts {
                    out.extend_from_slice(&p);
                }
                out.freeze()
            }
        }
    }

    /// Writes the frame to `wr` (a frame in parts with vectored writes).
    pub async fn write_to<W: AsyncWrite + Unpin>(&self, wr: &mut W) -> std::io::Result<()> {
        match self {
            Frame::One(b) => wr.write_all(b).await,
            Frame::Parts(parts) => {
                let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
                let mut bufs = &mut slices[..];
                IoSlice::advance_slices(&mut bufs, 0);
                while !bufs.is_empty() {
                    let n = wr.write_vectored(bufs).await?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::WriteZero.into());
                    }
                    IoSlice::advance_slices(&mut bufs, n);
                }
                Ok(())
            }
        }
    }
}

/// Below this many bytes of records a fetch response is encoded as one buffer: the copy
/// costs less than the parts.
const SPLICE_MIN: usize = 64 * 1024;

pub(crate) use crate::fetch_sessions::MoreRecords;

/// Encodes a fetch response, each partition's records its `records` followed by its
/// pieces in `more`; spliced in uncopied when they are large.
///
/// The response is encoded with each non-empty record set replaced by a 16-byte
/// sentinel, random per response (no field a client controls can hold it except by a
/// 2^-128 chance, and that chance is checked); then the encoding is cut at each sentinel
/// and its length prefix, and the record set goes between the cuts with its real length
/// prefix. Any surprise (a sentinel missing, found twice, or not behind the prefix the
/// encoder writes) falls back to the plain encoding.
pub(crate) fn encode_fetch_response(
    ctx: &RequestContext,
    mut resp: FetchResponse,
    mut more: MoreRecords,
) -> Option<Frame> {
    // Each non-empty record set, in encoding order, as its pieces, and where it was.
    let mut sets: Vec<Vec<Bytes>> = Vec::new();
    let mut taken: Vec<(usize, usize)> = Vec::new();
    for (ti, t) in resp.responses.iter_mut().enumerate() {
        for (pi, p) in t.partitions.iter_mut().enumerate() {
            if let Some(first) = p.records.take_if(|r| !r.is_empty()) {
                let mut set = vec![first];
                set.extend(more.remove(&(ti, pi)).unwrap_or_default());
                sets.push(set);
                taken.push((ti, pi));
            }
        }
    }
    let put_back = |resp: &mut FetchResponse, fill: &mut dyn FnMut(usize) -> Bytes| {
        for (i, &(ti, pi)) in taken.iter().enumerate() {
            resp.responses[ti].partitions[pi].records = Some(fill(i));
        }
    };
    let total: usize = sets.iter().flatten().map(Bytes::len).sum();
    if total >= SPLICE_MIN {
        let sentinel = sentinel();
        put_back(&mut resp, &mut |_| sentinel.clone());
        let compact = ctx.version >= 12;
        if let Some(frame) = encode_response(ctx, &resp)
            .and_then(|head| splice(head.into_bytes(), &sets, &sentinel, compact))
        {
            return Some(frame);
        }
        tracing::warn!("fetch response splice failed; sending it copied");
    }
    let mut sets = sets.into_iter();
    put_back(&mut resp, &mut |_| concat(sets.next().unwrap_or_default()));
    encode_response(ctx, &resp)
}

fn concat(pieces: Vec<Bytes>) -> Bytes {
    if pieces.len() == 1 {
        return pieces.into_iter().next().unwrap_or_default();
    }
    let mut out = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
    for p in pieces {
        out.extend_from_slice(&p);
    }
    out.freeze()
}

fn sentinel() -> Bytes {
    let s = RandomState::new();
    let mut out = Vec::with_capacity(16);
    out.extend_from_slice(&s.hash_one(0u8).to_be_bytes());
    out.extend_from_slice(&s.hash_one(1u8).to_be_bytes());
    Bytes::from(out)
}

/// `head` (a frame whose record sets are the sentinel) with the sets in their places.
fn splice(head: Bytes, sets: &[Vec<Bytes>], sentinel: &[u8], compact: bool) -> Option<Frame> {
    let (old_prefix, old_len): (&[u8], usize) = if compact {
        (&[17], 1) // unsigned varint of 16 + 1
    } else {
        (&[0, 0, 0, 16], 4)
    };
    let lens: Vec<usize> = sets
        .iter()
        .map(|s| s.iter().map(Bytes::len).sum())
        .collect();
    let added: usize = lens.iter().map(|&n| n + prefix(n, compact).len()).sum();
    let removed = sets.len() * (sentinel.len() + old_len);
    let frame_len = i32::try_from((head.len() - 4 + added).checked_sub(removed)?).ok()?;
    let mut parts = Vec::with_capacity(2 * sets.len() + 1);
    let mut at = 4;
    let mut gap = BytesMut::with_capacity(64);
    gap.put_i32(frame_len);
    for (set, &len) in sets.iter().zip(&lens) {
        let pos = at + find(&head[at..], sentinel)?;
        let start = pos.checked_sub(old_len).filter(|&s| s >= at)?;
        if &head[start..pos] != old_prefix {
            return None;
        }
        gap.extend_from_slice(&head[at..start]);
        gap.extend_from_slice(&prefix(len, compact));
        parts.push(gap.split().freeze());
        parts.extend(set.iter().cloned());
        at = pos + sentinel.len();
    }
    if find(&head[at..], sentinel).is_some() {
        return None;
    }
    gap.extend_from_slice(&head[at..]);
    parts.push(gap.freeze());
    Some(Frame::Parts(parts))
}

/// The length prefix of a non-null bytes field: an unsigned varint of length + 1 in
/// flexible versions, an int32 before.
fn prefix(len: usize, compact: bool) -> Vec<u8> {
    if !compact {
        return (len as i32).to_be_bytes().to_vec();
    }
    let mut v = len as u64 + 1;
    let mut out = Vec::with_capacity(5);
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{ApiKey, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn ctx(version: i16) -> RequestContext {
        RequestContext {
            api: ApiKey::Fetch,
            version,
            correlation_id: 7,
            client_id: None,
            connection_id: 1,
            peer: std::net::SocketAddr::from(([127, 0, 0, 1], 1)),
            listener: crate::listener::SecurityProtocol::Plaintext,
            principal: std::sync::Arc::from("User:ANONYMOUS"),
            mute: std::sync::Arc::default(),
        }
    }

    fn response(sizes: &[usize]) -> FetchResponse {
        let mut resp = FetchResponse::default();
        let mut t = FetchableTopicResponse::default();
        t.topic = TopicName(StrBytes::from_static_str("t"));
        for (i, &n) in sizes.iter().enumerate() {
            let mut p = PartitionData::default();
            p.partition_index = i as i32;
            p.high_watermark = 1_000 + i as i64;
            p.records = Some(Bytes::from(
                (0..n).map(|b| (b * 31 + i) as u8).collect::<Vec<_>>(),
            ));
            t.partitions.push(p);
        }
        resp.responses.push(t);
        resp
    }

    /// The spliced frame is byte for byte the plain encoding, in every version whose
    /// records field is sized differently (int32 before v12, varint after), with large,
    /// small and empty record sets, including sets whose varint prefix is 1, 2 and 3 bytes.
    #[test]
    fn spliced_frame_equals_the_plain_encoding() {
        for version in [4, 11, 12, 16] {
            for sizes in [
                vec![70_000],
                vec![100, 0, 70_000, 5],
                vec![1 << 20, 1 << 20, 126, 127, 16_383, 16_384],
            ] {
                let resp = response(&sizes);
                let plain = encode_response(&ctx(version), &resp).unwrap().into_bytes();
                let frame = encode_fetch_response(&ctx(version), resp, MoreRecords::new()).unwrap();
                assert!(
                    matches!(frame, Frame::Parts(_)),
                    "v{version} {sizes:?} was not spliced"
                );
                assert_eq!(frame.len(), plain.len());
                assert!(frame.into_bytes() == plain, "v{version} {sizes:?}");
            }
        }
    }

    /// A partition's records in several pieces go out as the one record set they make,
    /// whether spliced (large) or copied (small), and partitions without pieces, with
    /// empty records or with none keep theirs.
    #[test]
    fn pieces_make_one_record_set() {
        for (sizes, cut) in [(vec![90_000, 0, 200], 70_000), (vec![300, 0, 200], 100)] {
            let mut resp = response(&sizes);
            resp.responses[0].partitions[1].records = None;
            let plain = encode_response(&ctx(12), &resp).unwrap().into_bytes();
            let whole = resp.responses[0].partitions[0].records.clone().unwrap();
            resp.responses[0].partitions[0].records = Some(whole.slice(..cut));
            let more = MoreRecords::from([(
                (0, 0),
                vec![whole.slice(cut..cut + 7), whole.slice(cut + 7..)],
            )]);
            let frame = encode_fetch_response(&ctx(12), resp, more).unwrap();
            assert_eq!(matches!(frame, Frame::Parts(_)), sizes[0] > SPLICE_MIN);
            assert!(frame.into_bytes() == plain, "{sizes:?}");
        }
    }

    #[test]
    fn small_responses_are_one_buffer() {
        let frame =
            encode_fetch_response(&ctx(12), response(&[1000, 2000]), MoreRecords::new()).unwrap();
        assert!(matches!(frame, Frame::One(_)));
    }

    /// A head in which the sentinel shows up twice, or not behind the length prefix the
    /// encoder writes for it, is refused (and the response is then sent copied).
    #[test]
    fn a_sentinel_outside_its_place_is_refused() {
        let s = sentinel();
        let mut head = BytesMut::new();
        head.put_i32(0);
        head.put_u8(17);
        head.extend_from_slice(&s);
        head.extend_from_slice(&s);
        assert!(splice(head.freeze(), &[vec![Bytes::from_static(b"x")]], &s, true).is_none());
        let mut head = BytesMut::new();
        head.put_i32(0);
        head.put_u8(9);
        head.extend_from_slice(&s);
        assert!(splice(head.freeze(), &[vec![Bytes::from_static(b"x")]], &s, true).is_none());
    }

    #[tokio::test]
    async fn parts_are_written_in_order() {
        let resp = response(&[70_000, 3, 90_000]);
        let plain = encode_response(&ctx(13), &resp).unwrap().into_bytes();
        let frame = encode_fetch_response(&ctx(13), resp, MoreRecords::new()).unwrap();
        let mut out = Vec::new();
        frame.write_to(&mut out).await.unwrap();
        assert!(out == plain);
    }
}
