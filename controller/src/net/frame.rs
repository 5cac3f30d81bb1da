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
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    serde_json::from_slice(&buf)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}
