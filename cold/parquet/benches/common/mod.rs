//! What the Parquet benches share: the values they convert.

/// Bytes per value.
pub const VALUE_BYTES: usize = 1024;

/// Values that look like event payloads: text with some repetition, so zstd has real work
/// (neither incompressible noise nor a run of zeros).
pub fn value(g: &mut u64, i: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(VALUE_BYTES);
    while v.len() < VALUE_BYTES {
        *g = g
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = *g >> 33;
        v.extend_from_slice(
            format!(
                "{{\"event\":\"e{}\",\"user\":{},\"n\":{},\"i\":{i}}}",
                r % 17,
                r % 100_000,
                r
            )
            .as_bytes(),
        );
    }
    v.truncate(VALUE_BYTES);
    v
}
