//! Record values and keys: pseudo-random bytes, and JSON values of an exact size that
//! the gateway would produce byte for byte.

use anyhow::bail;

/// Pseudo-random bytes (xorshift64*): incompressible like real payloads at their worst, and
/// cheap enough not to show in the client's CPU.
pub(crate) fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; n];
    fill_random(&mut out, seed);
    out
}

/// Fills `out` with [`random_bytes`]' sequence from `seed`.
pub(crate) fn fill_random(out: &mut [u8], mut seed: u64) {
    // xorshift stays at zero from zero.
    if seed == 0 {
        seed = 0x9E37_79B9_7F4A_7C15;
    }
    for chunk in out.chunks_mut(8) {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        let word = seed.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

const VALUE_PREFIX: &[u8] = br#"{"data":""#;
const VALUE_SUFFIX: &[u8] = br#""}"#;
pub(crate) const ALPHANUMERIC: &[u8] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// JSON values of an exact size, `{"data":"<random alphanumerics>"}`: the text the
/// gateway produces for them too (serde_json's compact form of the same object), so
/// HTTP and Kafka produce carry the same bytes.
#[derive(Debug)]
pub(crate) struct JsonValues {
    pool: Vec<u8>,
    pad: usize,
}

impl JsonValues {
    pub(crate) fn new(size: u64) -> anyhow::Result<JsonValues> {
        let min = (VALUE_PREFIX.len() + VALUE_SUFFIX.len()) as u64;
        if !(min..=100 << 20).contains(&size) {
            bail!("--record-size {size}: JSON values take {min} bytes to 100 MiB");
        }
        let pad = (size - min) as usize;
        let pool = random_bytes(pad + 4096, 0x6A09_E667_F3BC_C908)
            .into_iter()
            .map(|b| ALPHANUMERIC[b as usize % ALPHANUMERIC.len()])
            .collect();
        Ok(JsonValues { pool, pad })
    }

    /// Appends record `i`'s value (consecutive values differ).
    pub(crate) fn write(&self, i: u64, out: &mut Vec<u8>) {
        let off = (i as usize).wrapping_mul(61) % 4096;
        out.extend_from_slice(VALUE_PREFIX);
        out.extend_from_slice(&self.pool[off..off + self.pad]);
        out.extend_from_slice(VALUE_SUFFIX);
    }
}

/// Appends record `i`'s key as JSON text (`"key-N"`, quotes included: the bytes the
/// gateway produces for the JSON string key-N).
pub(crate) fn write_json_key(i: u64, keys: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"\"key-");
    out.extend_from_slice((i % keys).to_string().as_bytes());
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn json_values_are_exact_and_canonical() {
        let v = JsonValues::new(1024).unwrap();
        for i in [0u64, 1, 4095, 1 << 40] {
            let mut out = Vec::new();
            v.write(i, &mut out);
            assert_eq!(out.len(), 1024);
            // The gateway re-encodes what it parses: the same text must come back.
            let parsed: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(serde_json::to_vec(&parsed).unwrap(), out);
        }
        let mut k = Vec::new();
        write_json_key(12, 10, &mut k);
        assert_eq!(k, b"\"key-2\"");
        assert!(JsonValues::new(10).is_err());
    }
}
