//! Iceberg's single-value binary serialization (spec, Appendix D), for the lower and
//! upper bounds of data files and the partition summaries of manifest lists.
//!
//! `int` and `date` are 4 bytes little-endian, `long` and `timestamptz` 8 bytes
//! little-endian, timestamps counted in microseconds since the epoch. Our Parquet files
//! store milliseconds, so a timestamp bound is the millisecond value times 1000.

/// An `int` or `date` (days since the epoch) value.
pub fn int_bytes(v: i32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// A `long` value.
pub fn long_bytes(v: i64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// A `timestamptz` value from milliseconds since the epoch (`None` outside the range
/// microseconds can hold, about ±292,000 years).
pub fn timestamp_ms_bytes(ms: i64) -> Option<Vec<u8>> {
    ms.checked_mul(1000).map(long_bytes)
}

/// Reads back an `int` (4 bytes) bound.
pub fn read_int(b: &[u8]) -> Option<i32> {
    Some(i32::from_le_bytes(b.try_into().ok()?))
}

/// Reads back a `long` or `timestamptz` (8 bytes) bound.
pub fn read_long(b: &[u8]) -> Option<i64> {
    Some(i64::from_le_bytes(b.try_into().ok()?))
}

/// The UTC day (days since 1970-01-01) of a millisecond timestamp, as Iceberg's `day`
/// transform computes it (floor, so -1 ms is day -1); `None` beyond the ±5.8 million
/// years an `int` of days covers.
pub fn day_of_ms(ms: i64) -> Option<i32> {
    i32::try_from(ms.div_euclid(86_400_000)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn little_endian_as_the_spec_says() {
        assert_eq!(int_bytes(1), vec![1, 0, 0, 0]);
        assert_eq!(int_bytes(-2), vec![0xfe, 0xff, 0xff, 0xff]);
        assert_eq!(
            long_bytes(0x0102_0304_0506_0708),
            vec![8, 7, 6, 5, 4, 3, 2, 1]
        );
        // 2023-11-14T22:13:20Z = 1_700_000_000_000 ms = 1_700_000_000_000_000 µs.
        assert_eq!(
            timestamp_ms_bytes(1_700_000_000_000).unwrap(),
            1_700_000_000_000_000i64.to_le_bytes().to_vec()
        );
        assert_eq!(timestamp_ms_bytes(i64::MAX / 10), None);
        assert_eq!(read_long(&long_bytes(-5)), Some(-5));
        assert_eq!(read_int(&int_bytes(19675)), Some(19675));
        assert_eq!(read_int(&[1, 2]), None);
    }

    #[test]
    fn days_floor() {
        assert_eq!(day_of_ms(0), Some(0));
        assert_eq!(day_of_ms(86_399_999), Some(0));
        assert_eq!(day_of_ms(86_400_000), Some(1));
        assert_eq!(day_of_ms(-1), Some(-1));
        assert_eq!(day_of_ms(1_700_000_000_000), Some(19675));
        assert_eq!(day_of_ms(i64::MIN), None);
    }
}
