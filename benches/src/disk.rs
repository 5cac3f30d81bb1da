//! `disk`: the disk's own sequential write rate (write, then fsync), to read the
//! broker's figures against.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::payload::random_bytes;
use crate::report::mb_per_s;
use crate::{DiskArgs, Report};

/// Writes `bytes` to a new file in `dir` in `block` sized writes, fsyncs it, deletes it.
/// Returns the seconds taken (open to fsync) and MB/s.
pub(crate) fn disk_write(dir: &Path, bytes: u64, block: u64) -> anyhow::Result<(f64, f64)> {
    if block == 0 {
        bail!("--block-size must be at least 1 byte");
    }
    let path = dir.join(format!(".strata-disk-bench-{}", std::process::id()));
    let buf = random_bytes(block as usize, 0xD1B5_4A32_D192_ED03);
    let t0 = Instant::now();
    let result = (|| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(block) as usize;
            f.write_all(&buf[..n])
                .with_context(|| format!("cannot write {}", path.display()))?;
            left -= n as u64;
        }
        f.sync_all()
            .with_context(|| format!("cannot fsync {}", path.display()))
    })();
    let secs = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    result?;
    Ok((secs, mb_per_s(bytes, secs)))
}

pub(crate) fn disk(a: &DiskArgs) -> anyhow::Result<Report> {
    let (secs, rate) = disk_write(&a.dir, a.bytes, a.block_size)?;
    let mut settings = BTreeMap::new();
    settings.insert("dir".into(), a.dir.display().to_string());
    settings.insert("block_size".into(), a.block_size.to_string());
    Ok(Report {
        mb_per_s: rate,
        records_per_s: 0.0,
        disk_mb_per_s: Some(rate),
        ..Report::new("disk", None, 0, a.bytes, secs, settings)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn disk_mode_writes_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let r = disk(&DiskArgs {
            dir: dir.path().to_path_buf(),
            bytes: 3 << 20,
            block_size: 1 << 20,
        })
        .unwrap();
        assert_eq!(r.bytes, 3 << 20);
        assert!(r.disk_mb_per_s.unwrap() > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(r.result_line().starts_with("RESULT {\"mode\":\"disk\""));
    }
}
