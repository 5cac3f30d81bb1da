//! The table's partition specs.
//!
//! Spec 0 (the default): `identity(partition)` and `day(timestamp)`, partition field ids
//! 1000 and 1001 (`partition`, `timestamp_day`). A Strata file holds one Kafka partition
//! and, nearly always, one UTC day. Spec 1: `identity(partition)` alone (the same field
//! id 1000), for the few files whose rows span days (see [`crate::datafile`]): Iceberg
//! requires a file's partition values to hold for every row, and a reader filtering on
//! time would otherwise drop such a file's rows of the other day. Both specs are in the
//! metadata from the table's creation; manifests are written per spec.

use serde_json::{Value, json};

use crate::datafile::DataFile;

/// The partition field ids.
pub const PARTITION_FIELD_ID: i32 = 1000;
pub const DAY_FIELD_ID: i32 = 1001;

/// One of the two specs above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PartitionSpec {
    pub id: i32,
    /// Whether it has `day(timestamp)`.
    pub with_day: bool,
}

impl PartitionSpec {
    pub const DEFAULT: PartitionSpec = PartitionSpec {
        id: 0,
        with_day: true,
    };
    pub fn partition_only() -> PartitionSpec {
        PartitionSpec {
            id: 1,
            with_day: false,
        }
    }

    /// The spec a file goes under.
    pub fn of(file: &DataFile) -> PartitionSpec {
        if file.day.is_some() {
            PartitionSpec::DEFAULT
        } else {
            PartitionSpec::partition_only()
        }
    }

    /// The `fields` of the spec (also the manifest's `partition-spec` metadata).
    pub fn fields_json(&self, partition_source: i32, timestamp_source: i32) -> Value {
        let mut fields = vec![json!({"name": "partition", "transform": "identity",
            "source-id": partition_source, "field-id": PARTITION_FIELD_ID})];
        if self.with_day {
            fields.push(json!({"name": "timestamp_day", "transform": "day",
                "source-id": timestamp_source, "field-id": DAY_FIELD_ID}));
        }
        Value::Array(fields)
    }

    pub fn json(&self, partition_source: i32, timestamp_source: i32) -> Value {
        json!({"spec-id": self.id, "fields": self.fields_json(partition_source, timestamp_source)})
    }
}
