//! Parsers of `strata serve`'s values that are more than a number: byte sizes,
//! HOST:PORT, controller voters and object store URLs.

use std::path::PathBuf;

use anyhow::{Context, bail};

/// An object store location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectStoreUrl {
    File(PathBuf),
    S3 { bucket: String, prefix: String },
}

/// A controller voter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub addr: String,
}

/// Parses a byte size: a number with an optional unit (B, KB, MB, GB, KiB, MiB, GiB, TiB).
pub fn parse_bytes(flag: &str, v: &str) -> anyhow::Result<u64> {
    let t = v.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .with_context(|| format!("{flag} '{v}': expected a size such as 512MiB or 4GiB"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        other => {
            bail!("{flag} '{v}': unknown unit '{other}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB)")
        }
    };
    n.checked_mul(mult)
        .with_context(|| format!("{flag} '{v}' is too large"))
}

pub(super) fn parse_host_port(flag: &str, v: &str) -> anyhow::Result<(String, u16)> {
    let (host, port) = v
        .rsplit_once(':')
        .with_context(|| format!("{flag} '{v}' must be HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("{flag} '{v}': '{port}' is not a port number"))?;
    if host.is_empty() {
        bail!("{flag} '{v}' has no host");
    }
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

pub fn parse_voters(v: &str) -> anyhow::Result<Vec<Voter>> {
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('@')
            .with_context(|| format!("--controller-voters entry '{part}' must be ID@HOST:PORT"))?;
        let id: i32 = id.parse().with_context(|| {
            format!("--controller-voters entry '{part}': '{id}' is not a node id")
        })?;
        parse_host_port("--controller-voters", addr)?;
        if out.iter().any(|x: &Voter| x.id == id) {
            bail!("--controller-voters names node {id} twice");
        }
        out.push(Voter {
            id,
            addr: addr.to_string(),
        });
    }
    if out.is_empty() {
        bail!("--controller-voters is empty: give at least one ID@HOST:PORT");
    }
    Ok(out)
}

pub fn parse_object_store(v: &str) -> anyhow::Result<ObjectStoreUrl> {
    if let Some(path) = v.strip_prefix("file://") {
        if path.is_empty() {
            bail!(
                "--object-store '{v}' has no directory: use file:///absolute/dir or file://relative/dir"
            );
        }
        return Ok(ObjectStoreUrl::File(PathBuf::from(path)));
    }
    if let Some(rest) = v.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            bail!("--object-store '{v}' has no bucket: use s3://BUCKET/PREFIX");
        }
        return Ok(ObjectStoreUrl::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
        });
    }
    bail!("--object-store '{v}' is neither file://DIR nor s3://BUCKET/PREFIX")
}
