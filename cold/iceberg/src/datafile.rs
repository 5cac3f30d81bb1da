//! One Parquet file to publish: what a manifest entry says about it, read from the
//! file's footer (no data pages are read).
//!
//! * Partition values: the Kafka partition (`strata.partition`) and the UTC day of the
//!   rows. A Strata file is named by the date of its first row, but CreateTime
//!   timestamps need not be monotonic and a segment can cross midnight, so the day is
//!   taken from the timestamp statistics: when the rows span more than one day the file
//!   has no single day and goes under the partition spec without it
//!   ([`crate::spec::PartitionSpec::partition_only`]); its timestamp bounds still let
//!   readers prune it.
//! * Statistics: `value_counts` and `column_sizes` for every leaf column,
//!   `null_value_counts` where the file has statistics, lower and upper bounds for
//!   `partition`, `offset` and `timestamp` (the columns strata-parquet keeps statistics
//!   for and readers filter on).
//! * Field ids: from the Parquet schema. A file written before strata-parquet numbered
//!   its columns has none; its columns get the ids the same numbering gives now
//!   ([`strata_parquet::with_field_ids`]), and readers find them through the table's name
//!   mapping.
//! * The offset range (`strata.first_offset`/`strata.last_offset`), which may be wider
//!   than the rows' offsets (control and aborted records are not rows): the snapshot
//!   summary records it so a publisher resumes exactly where it stopped.

use std::collections::BTreeMap;

use arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use bytes::Bytes;
use parquet::arrow::{PARQUET_FIELD_ID_META_KEY, parquet_to_arrow_schema};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::statistics::Statistics;
use strata_parquet::{columns, metadata_keys, with_field_ids};
use strata_store::BlobStore;

use crate::bounds::{day_of_ms, int_bytes, long_bytes, timestamp_ms_bytes};
use crate::error::{IcebergError, Result};
use crate::schema::IcebergSchema;

/// A data file as the manifest describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct DataFile {
    /// Absolute location (URI), as readers open it.
    pub location: String,
    pub file_size_in_bytes: u64,
    pub record_count: u64,
    /// The Kafka partition (identity partition value).
    pub partition: i32,
    /// The UTC day of every row (days since the epoch), `None` when the rows span days
    /// or there are none.
    pub day: Option<i32>,
    /// The offsets the file covers, control and aborted records included.
    pub first_offset: i64,
    pub last_offset: i64,
    /// Per Iceberg field id.
    pub column_sizes: BTreeMap<i32, i64>,
    pub value_counts: BTreeMap<i32, i64>,
    pub null_value_counts: BTreeMap<i32, i64>,
    pub lower_bounds: BTreeMap<i32, Vec<u8>>,
    pub upper_bounds: BTreeMap<i32, Vec<u8>>,
    /// Row group starts, for split planning.
    pub split_offsets: Vec<i64>,
    /// The file's schema, to check it matches the table's.
    pub schema: IcebergSchema,
}

/// How much of the file's tail to read first: most footers fit.
const FOOTER_GUESS: u64 = 64 * 1024;

impl DataFile {
    /// Reads the footer of the object at `key` in `store` (relative to the store's
    /// root); `location` is the URI readers will use.
    pub async fn read(store: &dyn BlobStore, key: &str, location: String) -> Result<DataFile> {
        let size = store.head(key).await?.size;
        let mut want = FOOTER_GUESS.min(size);
        loop {
            let tail = store.get_range(key, size - want..size).await?;
            let mut reader =
                ParquetMetaDataReader::new().with_page_index_policy(PageIndexPolicy::Skip);
            match reader.try_parse_sized(&tail, size) {
                Ok(()) => return DataFile::from_metadata(location, size, &reader.finish()?),
                Err(parquet::errors::ParquetError::NeedMoreData(n))
                    if (n as u64) > want && (n as u64) <= size =>
                {
                    want = n as u64;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// From the whole file in memory.
    pub fn from_bytes(location: String, file: Bytes) -> Result<DataFile> {
        let size = file.len() as u64;
        let metadata = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Skip)
            .parse_and_finish(&file)?;
        DataFile::from_metadata(location, size, &metadata)
    }

    /// From a parsed footer.
    pub fn from_metadata(
        location: String,
        file_size: u64,
        metadata: &ParquetMetaData,
    ) -> Result<DataFile> {
        let not_strata = |reason: String| IcebergError::NotStrataFile {
            location: location.clone(),
            reason,
        };
        let file = metadata.file_metadata();
        let kv = file.key_value_metadata();
        let get = |key: &str| -> Result<i64> {
            kv.and_then(|kv| kv.iter().find(|e| e.key == key))
                .and_then(|e| e.value.as_deref())
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| not_strata(format!("no {key} in the key-value metadata")))
        };
        let partition = i32::try_from(get(metadata_keys::PARTITION)?)
            .map_err(|_| not_strata("partition out of range".to_string()))?;
        let first_offset = get(metadata_keys::FIRST_OFFSET)?;
        let last_offset = get(metadata_keys::LAST_OFFSET)?;
        if first_offset > last_offset {
            return Err(not_strata(format!(
                "offset range {first_offset}..={last_offset} is empty"
            )));
        }
        let arrow = parquet_to_arrow_schema(file.schema_descr(), kv)?;
        // A file written before strata-parquet numbered its columns: number them as it
        // does now (the same function, so the same ids); readers map such a file's
        // columns through the table's name mapping.
        let arrow = if arrow
            .fields()
            .iter()
            .all(|f| f.metadata().contains_key(PARQUET_FIELD_ID_META_KEY))
        {
            arrow
        } else {
            // Every field, nested ones too, gets its id (replacing any it had).
            let fields = arrow.fields().iter().map(|f| f.as_ref().clone()).collect();
            ArrowSchema::new(with_field_ids(fields))
        };
        let leaf_ids = leaf_ids(&arrow);
        let schema = IcebergSchema::from_arrow(&arrow, 0)?;
        let record_count = u64::try_from(file.num_rows())
            .map_err(|_| not_strata("negative row count".to_string()))?;

        let mut out = DataFile {
            location: location.clone(),
            file_size_in_bytes: file_size,
            record_count,
            partition,
            day: None,
            first_offset,
            last_offset,
            column_sizes: BTreeMap::new(),
            value_counts: BTreeMap::new(),
            null_value_counts: BTreeMap::new(),
            lower_bounds: BTreeMap::new(),
            upper_bounds: BTreeMap::new(),
            split_offsets: Vec::new(),
            schema,
        };
        // Per leaf column: (min, max) over row groups, and whether every group had them.
        let mut ranges: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
        let mut missing: Vec<i32> = Vec::new();
        let mut null_missing: Vec<i32> = Vec::new();
        for rg in metadata.row_groups() {
            if let Some(start) = rg.columns().first().map(|c| c.data_page_offset()) {
                out.split_offsets.push(rg.file_offset().unwrap_or(start));
            }
            for col in rg.columns() {
                let info = col.column_descr().self_type().get_basic_info();
                let id = if info.has_id() {
                    Some(info.id())
                } else {
                    leaf_ids.get(col.column_path().parts()).copied()
                };
                let Some(id) = id else {
                    return Err(not_strata(format!(
                        "column {} has no field id",
                        col.column_path()
                    )));
                };
                *out.column_sizes.entry(id).or_default() += col.compressed_size();
                *out.value_counts.entry(id).or_default() += col.num_values();
                match col.statistics().and_then(|s| s.null_count_opt()) {
                    Some(n) => *out.null_value_counts.entry(id).or_default() += n as i64,
                    None => null_missing.push(id),
                }
                let path = col.column_path().parts();
                let bounded = path.len() == 1
                    && [columns::PARTITION, columns::OFFSET, columns::TIMESTAMP]
                        .contains(&path[0].as_str());
                if !bounded {
                    continue;
                }
                let minmax = match col.statistics() {
                    Some(Statistics::Int32(s)) => s
                        .min_opt()
                        .zip(s.max_opt())
                        .map(|(a, b)| (i64::from(*a), i64::from(*b))),
                    Some(Statistics::Int64(s)) => {
                        s.min_opt().zip(s.max_opt()).map(|(a, b)| (*a, *b))
                    }
                    _ => None,
                };
                match minmax {
                    Some((lo, hi)) => {
                        let r = ranges.entry(id).or_insert((lo, hi));
                        r.0 = r.0.min(lo);
                        r.1 = r.1.max(hi);
                    }
                    None => missing.push(id),
                }
            }
        }
        for id in null_missing {
            out.null_value_counts.remove(&id);
        }
        for id in missing {
            ranges.remove(&id);
        }
        // (field id, (min, max)) of a top-level column with statistics in every group.
        let range = |name: &str| {
            let id = out.schema.top_level_id(name)?;
            ranges.get(&id).map(|r| (id, *r))
        };
        let (partition_range, offset_range, timestamp_range) = (
            range(columns::PARTITION),
            range(columns::OFFSET),
            range(columns::TIMESTAMP),
        );
        if let Some((id, (lo, hi))) = partition_range {
            if lo != i64::from(partition) || hi != lo {
                return Err(not_strata(format!(
                    "partition column holds {lo}..={hi}, metadata says {partition}"
                )));
            }
            out.lower_bounds.insert(id, int_bytes(partition));
            out.upper_bounds.insert(id, int_bytes(partition));
        }
        if let Some((id, (lo, hi))) = offset_range {
            out.lower_bounds.insert(id, long_bytes(lo));
            out.upper_bounds.insert(id, long_bytes(hi));
        }
        if let Some((id, (lo, hi))) = timestamp_range {
            if let (Some(l), Some(h)) = (timestamp_ms_bytes(lo), timestamp_ms_bytes(hi)) {
                out.lower_bounds.insert(id, l);
                out.upper_bounds.insert(id, h);
            }
            out.day = match (day_of_ms(lo), day_of_ms(hi)) {
                (Some(a), Some(b)) if a == b => Some(a),
                _ => None,
            };
        }
        Ok(out)
    }
}

/// The field id of every leaf column by its Parquet path (lists as the spec's three
/// levels, `headers.list.element.key`, which strata-parquet writes).
fn leaf_ids(arrow: &ArrowSchema) -> std::collections::HashMap<Vec<String>, i32> {
    fn walk(
        field: &Field,
        path: &mut Vec<String>,
        out: &mut std::collections::HashMap<Vec<String>, i32>,
    ) {
        path.push(field.name().clone());
        match field.data_type() {
            DataType::Struct(members) => {
                for m in members {
                    walk(m, path, out);
                }
            }
            DataType::List(item) => {
                path.push("list".to_string());
                walk(item, path, out);
                path.pop();
            }
            _ => {
                if let Some(id) = field
                    .metadata()
                    .get(PARQUET_FIELD_ID_META_KEY)
                    .and_then(|v| v.parse().ok())
                {
                    out.insert(path.clone(), id);
                }
            }
        }
        path.pop();
    }
    let mut out = std::collections::HashMap::new();
    for f in arrow.fields() {
        walk(f, &mut Vec::new(), &mut out);
    }
    out
}
