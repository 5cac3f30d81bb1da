//! Bounded decompression of a batch's records, for every codec Kafka defines.
//!
//! A compressed batch is bounded by `max.message.bytes` on the wire, but what it expands
//! to is the producer's to choose: a 1 MiB zstd frame of zeros expands to gigabytes, and
//! a raw snappy block claims its decompressed length in a five-byte header. Every path
//! that decompresses (produce validation, ListOffsets by time, lag, Parquet, coordinator
//! loads, the gateway) goes through here with a cap, and stops with
//! [`BatchError::DecompressedTooLarge`] as soon as the output would pass it; nothing is
//! reserved from a length the input claims before that length is checked against the cap.

use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::batch::{BatchError, Compression};

/// The default cap on what one batch may decompress to: 64 times the default
/// `max.message.bytes` (1 MiB), far above what producers build (librdkafka and the Java
/// client bound a batch's uncompressed size by their batch.size), far below what would
/// hurt a broker.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

static MAX_DECOMPRESSED: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_DECOMPRESSED_BYTES);

/// Sets the process-wide cap used by [`crate::RecordBatch::records`] (`strata serve
/// --max-decompressed-batch-bytes`). A process-wide setting because every crate that
/// reads records (the log, the tier, Parquet, the coordinators) must apply the same one,
/// and none of them should be able to forget it.
pub fn set_max_decompressed_bytes(limit: usize) {
    MAX_DECOMPRESSED.store(limit.max(1), Ordering::Relaxed);
}

/// The process-wide cap on a batch's decompressed records.
pub fn max_decompressed_bytes() -> usize {
    MAX_DECOMPRESSED.load(Ordering::Relaxed)
}

/// xerial snappy-java's stream header, which Kafka's Java clients write before the
/// blocks (magic, version 1, compatible version 1).
const SNAPPY_JAVA_MAGIC: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";

/// Compresses `input` with `codec` the way Kafka's clients frame it: a gzip stream, raw
/// snappy (which every Kafka reader takes, snappy-java's framing being optional), an
/// LZ4 frame with independent blocks (KIP-57), a zstd frame. The log cleaner re-encodes
/// the batches it rewrites with their own codec.
pub fn compress(codec: Compression, input: &[u8]) -> Result<Vec<u8>, BatchError> {
    use std::io::Write;
    let failed = |_| BatchError::InvalidRecord("compression failed");
    Ok(match codec {
        Compression::None => input.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(
                Vec::with_capacity(input.len() / 2),
                flate2::Compression::default(),
            );
            e.write_all(input).map_err(failed)?;
            e.finish().map_err(failed)?
        }
        Compression::Snappy => snap::raw::Encoder::new()
            .compress_vec(input)
            .map_err(|_| BatchError::InvalidRecord("compression failed"))?,
        Compression::Lz4 => {
            // Level 0: LZ4's fast mode, as librdkafka's default (levels from 3 up are
            // LZ4HC, several times slower to write for a few percent of size); no content
            // checksum, as librdkafka's frames (the batch's CRC-32C covers the bytes).
            let mut e = lz4::EncoderBuilder::new()
                .level(0)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .block_mode(lz4::BlockMode::Independent)
                .build(Vec::with_capacity(input.len() / 2))
                .map_err(failed)?;
            e.write_all(input).map_err(failed)?;
            let (out, r) = e.finish();
            r.map_err(failed)?;
            out
        }
        Compression::Zstd => zstd::bulk::compress(input, 3).map_err(failed)?,
    })
}

/// Decompresses `input` into a new buffer of at most `limit` bytes.
pub fn decompress(codec: Compression, input: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    expand(codec, input, limit, &mut |chunk| {
        out.extend_from_slice(chunk)
    })?;
    Ok(out)
}

/// What `input` decompresses to, in bytes, without keeping it: the produce path's check
/// that a batch stays under the cap costs a fixed scratch buffer, not the output.
pub fn decompressed_len(
    codec: Compression,
    input: &[u8],
    limit: usize,
) -> Result<usize, BatchError> {
    let mut n = 0usize;
    expand(codec, input, limit, &mut |chunk| n += chunk.len())?;
    Ok(n)
}

/// Streams the decompressed bytes to `sink` in chunks, failing once more than `limit`
/// would come out.
fn expand(
    codec: Compression,
    input: &[u8],
    limit: usize,
    sink: &mut dyn FnMut(&[u8]),
) -> Result<(), BatchError> {
    let failed = |reason: String| BatchError::Decompress { codec, reason };
    match codec {
        Compression::None => {
            if input.len() > limit {
                return Err(BatchError::DecompressedTooLarge { codec, limit });
            }
            sink(input);
            Ok(())
        }
        Compression::Gzip => drain(codec, flate2::read::GzDecoder::new(input), limit, sink),
        Compression::Zstd => {
            let d = zstd::stream::read::Decoder::with_buffer(input)
                .map_err(|e| failed(e.to_string()))?;
            drain(codec, d, limit, sink)
        }
        Compression::Lz4 => {
            let mut d = lz4::Decoder::new(input).map_err(|e| failed(e.to_string()))?;
            drain(codec, &mut d, limit, sink)?;
            // The decoder reads a truncated frame as a short one; finish() tells.
            d.finish()
                .1
                .map_err(|_| failed("a truncated lz4 frame".into()))
        }
        Compression::Snappy => snappy(input, limit, sink),
    }
}

/// Reads a decoder to its end in 64 KiB steps, counting against `limit`.
fn drain(
    codec: Compression,
    mut r: impl Read,
    limit: usize,
    sink: &mut dyn FnMut(&[u8]),
) -> Result<(), BatchError> {
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0usize;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(BatchError::Decompress {
                    codec,
                    reason: e.to_string(),
                });
            }
        };
        total += n;
        if total > limit {
            return Err(BatchError::DecompressedTooLarge { codec, limit });
        }
        sink(&buf[..n]);
    }
}

/// Kafka's snappy: snappy-java's framing (the magic, then blocks of a big-endian u32
/// length and a raw snappy block), or one raw block when the magic is absent, as
/// snappy-java's SnappyInputStream falls back to.
fn snappy(input: &[u8], limit: usize, sink: &mut dyn FnMut(&[u8])) -> Result<(), BatchError> {
    let codec = Compression::Snappy;
    let failed = |reason: String| BatchError::Decompress { codec, reason };
    let mut total = 0usize;
    let mut block = |raw: &[u8], total: &mut usize| -> Result<(), BatchError> {
        // The block states its length up front: check it before allocating for it.
        let len = snap::raw::decompress_len(raw).map_err(|e| failed(e.to_string()))?;
        if total.saturating_add(len) > limit {
            return Err(BatchError::DecompressedTooLarge { codec, limit });
        }
        let mut out = vec![0u8; len];
        let n = snap::raw::Decoder::new()
            .decompress(raw, &mut out)
            .map_err(|e| failed(e.to_string()))?;
        *total += n;
        sink(&out[..n]);
        Ok(())
    };
    let Some(mut rest) = input.strip_prefix(&SNAPPY_JAVA_MAGIC[..]) else {
        if input.is_empty() {
            return Err(failed("no snappy data".into()));
        }
        return block(input, &mut total);
    };
    while !rest.is_empty() {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(failed("a truncated snappy block length".into()));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if tail.len() < len {
            return Err(failed(format!(
                "a snappy block of {len} bytes with {} left",
                tail.len()
            )));
        }
        let (raw, next) = tail.split_at(len);
        block(raw, &mut total)?;
        rest = next;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::io::Write;

    fn zstd_of(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).unwrap()
    }

    fn gzip_of(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn lz4_of(data: &[u8]) -> Vec<u8> {
        let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        e.write_all(data).unwrap();
        let (out, r) = e.finish();
        r.unwrap();
        out
    }

    fn snappy_java_of(data: &[u8]) -> Vec<u8> {
        let mut out = SNAPPY_JAVA_MAGIC.to_vec();
        for chunk in data.chunks(32 << 10) {
            let b = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(&b);
        }
        out
    }

    fn all_codecs(data: &[u8]) -> Vec<(Compression, Vec<u8>)> {
        vec![
            (Compression::Gzip, gzip_of(data)),
            (Compression::Zstd, zstd_of(data)),
            (Compression::Lz4, lz4_of(data)),
            (Compression::Snappy, snappy_java_of(data)),
            (
                Compression::Snappy,
                snap::raw::Encoder::new().compress_vec(data).unwrap(),
            ),
        ]
    }

    #[test]
    fn round_trips_under_the_cap() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for (codec, c) in all_codecs(&data) {
            assert_eq!(
                decompress(codec, &c, data.len()).unwrap(),
                data,
                "{codec:?}"
            );
            assert_eq!(decompressed_len(codec, &c, data.len()).unwrap(), data.len());
        }
    }

    #[test]
    fn a_bomb_stops_at_the_cap() {
        // 64 MiB of zeros compress to a few kilobytes with every codec.
        let zeros = vec![0u8; 64 << 20];
        for (codec, c) in all_codecs(&zeros) {
            assert!(c.len() < 4 << 20, "{codec:?}: {}", c.len());
            let limit = 1 << 20;
            assert_eq!(
                decompress(codec, &c, limit),
                Err(BatchError::DecompressedTooLarge { codec, limit }),
                "{codec:?}"
            );
            assert_eq!(
                decompressed_len(codec, &c, limit),
                Err(BatchError::DecompressedTooLarge { codec, limit })
            );
        }
    }

    #[test]
    fn a_raw_snappy_header_claiming_gigabytes_allocates_nothing() {
        // Varint 0xFFFFFFFF: "4 GiB follows", then nothing.
        let claim = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        let r = decompress(Compression::Snappy, &claim, 1 << 20);
        assert!(
            matches!(r, Err(BatchError::DecompressedTooLarge { .. })),
            "{r:?}"
        );
        // Inside snappy-java framing too.
        let mut framed = SNAPPY_JAVA_MAGIC.to_vec();
        framed.extend_from_slice(&(claim.len() as u32).to_be_bytes());
        framed.extend_from_slice(&claim);
        let r = decompress(Compression::Snappy, &framed, 1 << 20);
        assert!(
            matches!(r, Err(BatchError::DecompressedTooLarge { .. })),
            "{r:?}"
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for codec in [
            Compression::Gzip,
            Compression::Zstd,
            Compression::Lz4,
            Compression::Snappy,
        ] {
            for input in [&b"garbage garbage garbage"[..], &[0xff; 64]] {
                assert!(
                    decompress(codec, input, 1 << 20).is_err(),
                    "{codec:?} {input:?}"
                );
            }
        }
    }
}
