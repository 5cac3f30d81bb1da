//! What a conversion needs to know besides the batches.

use strata_proto::config::{ParquetValueFormat, TopicConfig};
use strata_proto::ids::PartitionId;

use crate::error::ConvertError;
use crate::txn::{PendingTxnPolicy, TxnMarker};
use crate::value_schema::ValueSchema;

/// Row groups are cut at about this much uncompressed data: large enough for readers'
/// sequential scans, small enough that a reader's per-row-group buffers stay modest.
pub const DEFAULT_ROW_GROUP_BYTES: usize = 128 << 20;

/// zstd level 1: the offloader shares the broker's cores with producers (issue 7 bounds
/// the producer slowdown), and higher levels buy little on record data.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;

/// Rows per Arrow chunk handed to the Parquet writer: bounds the Arrow memory held at once.
pub const CHUNK_ROWS: usize = 16 * 1024;

/// Data bytes per Arrow chunk (keys, values, headers), the other bound on a chunk.
pub const CHUNK_BYTES: usize = 8 << 20;

/// How record values become columns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ValueFormat {
    /// `value` is the record value's bytes.
    #[default]
    Binary,
    /// `value` is a struct of typed columns decoded from JSON, plus `_raw` for values that
    /// do not fit.
    ///
    /// `parquet.value.format=json` without a schema gives [`ValueFormat::Binary`] rather
    /// than a schema inferred from the data: the files of a topic are read as one table
    /// (Hive layout), and a schema guessed per file would differ from file to file (a
    /// field absent from one segment, an integer that is a float in the next), and one odd
    /// record at the start would fix the wrong type for the whole file. A declared schema
    /// is the only stable contract.
    Json(ValueSchema),
}

impl ValueFormat {
    /// The name written to the file's metadata.
    pub fn name(&self) -> &'static str {
        match self {
            ValueFormat::Binary => "binary",
            ValueFormat::Json(_) => "json",
        }
    }
}

/// Options of one conversion.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// The topic, written to the file's metadata.
    pub topic: String,
    /// The partition: the `partition` column and the file's metadata.
    pub partition: PartitionId,
    pub value_format: ValueFormat,
    /// Cut a row group once it holds about this many uncompressed bytes (the converter's
    /// estimate: column data plus per-value length prefixes). A single larger record gets a
    /// row group of its own.
    pub row_group_bytes: usize,
    /// zstd level of every column (1..=22).
    pub zstd_level: i32,
    /// Check each batch's CRC-32C before converting it. Segments were checked when they
    /// were appended; this catches rot in the object store or on disk since.
    pub verify_crc: bool,
    /// Transaction markers that come after the input (from the next segments), used for
    /// transactions still open at its end. See [`crate::txn`].
    pub later_markers: Vec<TxnMarker>,
    /// What to do with a transaction that is open at the end of the input and that no
    /// later marker resolves.
    pub pending_transactions: PendingTxnPolicy,
}

impl ConvertOptions {
    /// Binary values and the defaults above.
    pub fn new(topic: impl Into<String>, partition: PartitionId) -> ConvertOptions {
        ConvertOptions {
            topic: topic.into(),
            partition,
            value_format: ValueFormat::Binary,
            row_group_bytes: DEFAULT_ROW_GROUP_BYTES,
            zstd_level: DEFAULT_ZSTD_LEVEL,
            verify_crc: true,
            later_markers: Vec::new(),
            pending_transactions: PendingTxnPolicy::default(),
        }
    }

    /// The options a topic's configuration asks for (`parquet.value.format`,
    /// `parquet.value.schema`). Fails when the schema is invalid: the config layer checks
    /// only its outline, this crate owns the format.
    pub fn from_topic_config(
        topic: impl Into<String>,
        partition: PartitionId,
        config: &TopicConfig,
    ) -> Result<ConvertOptions, ConvertError> {
        let mut o = ConvertOptions::new(topic, partition);
        o.value_format = match (config.parquet_value_format, &config.parquet_value_schema) {
            (ParquetValueFormat::Json, Some(schema)) => {
                ValueFormat::Json(ValueSchema::parse(schema)?)
            }
            // JSON without a schema stays binary: see ValueFormat::Json.
            (ParquetValueFormat::Json, None) | (ParquetValueFormat::Binary, _) => {
                ValueFormat::Binary
            }
        };
        Ok(o)
    }

    pub(crate) fn check(&self) -> Result<(), ConvertError> {
        if self.row_group_bytes == 0 {
            return Err(ConvertError::InvalidOptions(
                "row_group_bytes must be positive".into(),
            ));
        }
        if !(1..=22).contains(&self.zstd_level) {
            return Err(ConvertError::InvalidOptions(format!(
                "zstd level {} is outside 1..=22",
                self.zstd_level
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn config(pairs: &[(&str, &str)]) -> TopicConfig {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TopicConfig::resolve(&m).unwrap()
    }

    #[test]
    fn topic_config_picks_the_value_format() {
        let o = ConvertOptions::from_topic_config("t", 3, &TopicConfig::default()).unwrap();
        assert_eq!(o.value_format, ValueFormat::Binary);
        assert_eq!(o.partition, 3);
        let o =
            ConvertOptions::from_topic_config("t", 0, &config(&[("parquet.value.format", "json")]))
                .unwrap();
        assert_eq!(o.value_format, ValueFormat::Binary);
        let o = ConvertOptions::from_topic_config(
            "t",
            0,
            &config(&[
                ("parquet.value.format", "json"),
                (
                    "parquet.value.schema",
                    r#"{"fields":[{"name":"a","type":"int64"}]}"#,
                ),
            ]),
        )
        .unwrap();
        assert!(matches!(o.value_format, ValueFormat::Json(s) if s.fields().len() == 1));
        // The config layer lets an outline through; the full check is here.
        let e = ConvertOptions::from_topic_config(
            "t",
            0,
            &config(&[
                ("parquet.value.format", "json"),
                ("parquet.value.schema", r#"{"fields":"nope"}"#),
            ]),
        )
        .unwrap_err();
        assert!(matches!(e, ConvertError::Schema(_)), "{e}");
        assert!(!e.is_retryable());
    }
}
