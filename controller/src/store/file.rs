//! CRC-framed records and atomic file replacement.

use std::fs;
use std::io::Write;
use std::path::Path;

use super::StoreError;

/// Bytes before a frame's payload: length and CRC-32C.
pub(crate) const FRAME_HEADER: usize = 8;

/// Refuse frames larger than this when reading: a length this big is damage.
const MAX_FRAME: usize = 256 << 20;

pub(crate) fn encode_frame(payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len()).expect("frames are far below 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// The result of reading one frame at an offset.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    /// A whole frame whose CRC matches; the payload and the offset after it.
    Ok(&'a [u8], usize),
    /// The buffer ends here.
    End,
    /// A frame cut short by the end of the buffer, or a damaged last frame: what a
    /// crash in the middle of an append leaves.
    Torn(String),
    /// A damaged frame with more bytes after it: not a crash artefact.
    Corrupt(String),
}

pub(crate) fn read_frame(buf: &[u8], at: usize) -> Frame<'_> {
    let rest = &buf[at.min(buf.len())..];
    if rest.is_empty() {
        return Frame::End;
    }
    if rest.len() < FRAME_HEADER {
        return Frame::Torn(format!("{} bytes of a frame header", rest.len()));
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    let Some(payload) = rest
        .get(FRAME_HEADER..FRAME_HEADER.saturating_add(len))
        .filter(|_| len <= MAX_FRAME)
    else {
        return Frame::Torn(format!(
            "a frame of {len} bytes with {} present",
            rest.len() - FRAME_HEADER
        ));
    };
    if crc32c::crc32c(payload) != crc {
        return if FRAME_HEADER + len == rest.len() {
            Frame::Torn("CRC mismatch in the last frame".into())
        } else {
            Frame::Corrupt("CRC mismatch".into())
        };
    }
    Frame::Ok(payload, at + FRAME_HEADER + len)
}

/// Every frame of a small file written by [`write_atomic`], or `None` if it is absent.
pub(crate) fn read_frames(path: &Path) -> Result<Option<Vec<Vec<u8>>>, StoreError> {
    let buf = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(path)(e)),
    };
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        match read_frame(&buf, at) {
            Frame::Ok(p, next) => {
                out.push(p.to_vec());
                at = next;
            }
            Frame::End => return Ok(Some(out)),
            Frame::Torn(reason) | Frame::Corrupt(reason) => {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    reason: format!("at byte {at}: {reason}"),
                });
            }
        }
    }
}

/// Replaces `path` with `frames`: write a temporary file, fsync it, rename it over, and
/// (if `durable`) fsync the directory so the rename survives a crash.
pub(crate) fn write_atomic(path: &Path, frames: &[&[u8]], durable: bool) -> Result<(), StoreError> {
    let err = StoreError::io(path);
    let mut bytes = Vec::new();
    for f in frames {
        encode_frame(f, &mut bytes);
    }
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        if durable {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if durable {
            sync_dir(path)?;
        }
        Ok(())
    };
    write().map_err(err)
}

/// Fsyncs the directory holding `path`, so a created, renamed or removed entry is durable.
pub(crate) fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => fs::File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_detect_damage() {
        let mut buf = Vec::new();
        encode_frame(b"hello", &mut buf);
        encode_frame(b"world", &mut buf);
        let Frame::Ok(p, next) = read_frame(&buf, 0) else {
            panic!()
        };
        assert_eq!(p, b"hello");
        let Frame::Ok(p, end) = read_frame(&buf, next) else {
            panic!()
        };
        assert_eq!(p, b"world");
        assert!(matches!(read_frame(&buf, end), Frame::End));
        assert!(matches!(read_frame(&buf[..end - 1], next), Frame::Torn(_)));
        let mut bad = buf.clone();
        bad[next + FRAME_HEADER] ^= 1;
        assert!(matches!(read_frame(&bad, next), Frame::Torn(_)));
        let mut bad = buf.clone();
        bad[FRAME_HEADER] ^= 1;
        assert!(matches!(read_frame(&bad, 0), Frame::Corrupt(_)));
    }
}
