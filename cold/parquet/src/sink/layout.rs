//! Where Parquet files, dead-letter files and manifests go in the bucket: the Hive-style
//! keys of [`ParquetLayout`] and the UTC date in them.

use strata_proto::ids::{Offset, PartitionId};

use super::manifest::MANIFEST_NAME;

/// Where dead-letter files and tables live under a cluster's root
/// ([`ParquetLayout::dead_letters`]).
pub const DEAD_LETTERS_DIR: &str = "dead_letters";

/// Where Parquet files and manifests go in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParquetLayout {
    /// Everything before `parquet/`, without a trailing '/'; may be empty.
    pub prefix: String,
}

impl ParquetLayout {
    pub fn new(prefix: impl Into<String>) -> ParquetLayout {
        ParquetLayout {
            prefix: prefix.into(),
        }
    }

    /// `{prefix}/parquet/topic={topic}`
    pub fn topic_dir(&self, topic: &str) -> String {
        if self.prefix.is_empty() {
            format!("parquet/topic={topic}")
        } else {
            format!("{}/parquet/topic={topic}", self.prefix)
        }
    }

    /// `{prefix}/parquet/topic={topic}/partition={p}`
    pub fn partition_dir(&self, topic: &str, partition: PartitionId) -> String {
        format!("{}/partition={partition}", self.topic_dir(topic))
    }

    /// `{prefix}/parquet/topic={topic}/partition={p}/_manifest.json`
    pub fn manifest_key(&self, topic: &str, partition: PartitionId) -> String {
        format!("{}/{MANIFEST_NAME}", self.partition_dir(topic, partition))
    }

    /// The layout of the dead-letter files: the same tree under `{prefix}/dead_letters`
    /// (`{prefix}/dead_letters/parquet/topic={topic}/partition={p}/date=…/{first}-{last}.parquet`,
    /// the offsets those of the file's first and last row). A tree of its own: no
    /// topic's files or table are under it, and a glob over a topic's files never meets
    /// one.
    pub fn dead_letters(&self) -> ParquetLayout {
        ParquetLayout::new(if self.prefix.is_empty() {
            DEAD_LETTERS_DIR.to_string()
        } else {
            format!("{}/{DEAD_LETTERS_DIR}", self.prefix)
        })
    }

    /// `{partition dir}/date={YYYY-MM-DD}/{first:020}-{last:020}.parquet`, the date being
    /// the UTC day of `first_timestamp` (milliseconds since the epoch).
    pub fn file_key(
        &self,
        topic: &str,
        partition: PartitionId,
        first_timestamp: i64,
        first_offset: Offset,
        last_offset: Offset,
    ) -> String {
        format!(
            "{}/date={}/{first_offset:020}-{last_offset:020}.parquet",
            self.partition_dir(topic, partition),
            utc_date(first_timestamp)
        )
    }
}

/// `YYYY-MM-DD` of a millisecond timestamp, in UTC (proleptic Gregorian calendar; Howard
/// Hinnant's `civil_from_days`). Years outside 0..=9999 are printed as they come.
pub fn utc_date(timestamp_ms: i64) -> String {
    let days = timestamp_ms.div_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(-1), "1969-12-31");
        assert_eq!(utc_date(1_700_000_000_000), "2023-11-14");
        assert_eq!(utc_date(951_782_400_000), "2000-02-29");
        assert_eq!(utc_date(951_868_799_999), "2000-02-29");
        assert_eq!(utc_date(951_868_800_000), "2000-03-01");
        assert_eq!(utc_date(1_704_067_199_999), "2023-12-31");
        assert_eq!(utc_date(1_704_067_200_000), "2024-01-01");
    }

    #[test]
    fn keys_follow_the_layout() {
        let l = ParquetLayout::new("pre/c1");
        assert_eq!(
            l.file_key("orders", 3, 1_700_000_000_000, 5, 42),
            "pre/c1/parquet/topic=orders/partition=3/date=2023-11-14/00000000000000000005-00000000000000000042.parquet"
        );
        assert_eq!(
            l.manifest_key("orders", 3),
            "pre/c1/parquet/topic=orders/partition=3/_manifest.json"
        );
        assert_eq!(
            ParquetLayout::default().manifest_key("t", 0),
            "parquet/topic=t/partition=0/_manifest.json"
        );
    }
}
