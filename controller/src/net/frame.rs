//! Length-prefixed JSON frames.

use std::io;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame accepted. Snapshot chunks are the largest messages (openraft sends at
/// most 3 MiB of snapshot per chunk, which JSON inflates about fourfold).
pub(crate) const MAX_FRAME: usize = 64 << 20;

pub(crate) fn encode<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; 4];
    serde_json::to_writer(&mut out, msg).map_err(io::Error::other)?;
    let len = u32::try_from(out.len() - 4)
        .ok()
        .filter(|l| (*l as usize) <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(out)
}

pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &[u8]) -> io::Result<()> {
    w.write_all(frame).await?;
    w.flush().await
}

/// Reads one frame; `Ok(None)` on a clean end of stream before a frame starts.
pub(crate) async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds {MAX_FRAME}"),
        ));
    }
    // Grown as bytes arrive (read_to_end doubles from a small start), not reserved from
    // the peer's claim: four bytes saying "64 MiB" must not cost 64 MiB.
    let mut buf = Vec::new();
    r.take(len as u64).read_to_end(&mut buf).await?;
    if buf.len() < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("a frame of {len} bytes ended after {}", buf.len()),
        ));
    }
    serde_json::from_slice(&buf)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn a_frame_claiming_more_than_it_sends_is_an_error() {
        // "64 MiB follow", then three bytes and the end of the stream.
        let mut input: &[u8] = &[0x04, 0x00, 0x00, 0x00, b'{', b'}', b' '];
        let r = read_frame::<_, serde_json::Value>(&mut input).await;
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        // Over the limit: refused before anything is read.
        let mut input: &[u8] = &[0x7f, 0xff, 0xff, 0xff];
        let r = read_frame::<_, serde_json::Value>(&mut input).await;
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::InvalidData);
        // A whole frame still reads.
        let frame = encode(&serde_json::json!({"a": 1})).unwrap();
        let got: serde_json::Value = read_frame(&mut &frame[..]).await.unwrap().unwrap();
        assert_eq!(got["a"], 1);
    }
}
