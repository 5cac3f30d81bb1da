//! What can go wrong publishing files to a table.

/// An error reading, building or committing Iceberg metadata. Each message says what to
/// do about it.
#[derive(Debug, thiserror::Error)]
pub enum IcebergError {
    #[error(
        "another writer committed version {version} of table {table} first: reload the table \
         (Catalog::load_table) and commit again on top of its snapshot"
    )]
    CommitConflict { table: String, version: u64 },
    #[error("table {table} already exists: load it with Catalog::load_table")]
    TableExists { table: String },
    #[error("no Iceberg table {table} (no metadata under {location}): create it first")]
    NoSuchTable { table: String, location: String },
    #[error(
        "partition {partition}: offsets {first}..={last} overlap what the table already holds \
         (up to {committed}): skip files at or below the committed offset \
         (Table::last_committed_offsets) instead of adding them twice"
    )]
    OffsetsAlreadyCommitted {
        partition: i32,
        first: i64,
        last: i64,
        committed: i64,
    },
    #[error(
        "table {table} holds no data file {location} (as of its current snapshot): reload the \
         table; another writer may have removed it already"
    )]
    NoSuchDataFile { table: String, location: String },
    #[error("table {table}: not a valid {operation} commit: {reason}")]
    InvalidCommit {
        table: String,
        operation: &'static str,
        reason: String,
    },
    #[error(
        "{location} is not a Strata Parquet file ({reason}): only files written by \
         strata-parquet can be published"
    )]
    NotStrataFile { location: String, reason: String },
    #[error(
        "{location} cannot be read through the table's schema: {reason}; publish it to \
         another table"
    )]
    SchemaMismatch { location: String, reason: String },
    #[error("column {column}: {reason}")]
    UnsupportedColumn { column: String, reason: String },
    #[error("corrupt table metadata {location}: {reason}; restore it or recreate the table")]
    CorruptMetadata { location: String, reason: String },
    #[error("Avro: {0}")]
    Avro(#[from] Box<apache_avro::Error>),
    #[error("Parquet footer: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// The store's error names the operation, the key and what kind of failure it was
    /// ([`strata_store::StoreError::kind`]).
    #[error(transparent)]
    Store(#[from] strata_store::StoreError),
    #[error("Iceberg REST catalog {uri}: {reason}")]
    Catalog { uri: String, reason: String },
    #[error(
        "the catalog keeps table {table} at {location}, outside the bucket Strata writes \
         ({store}): point the catalog's warehouse inside that bucket"
    )]
    LocationOutsideStore {
        table: String,
        location: String,
        store: String,
    },
    #[error(
        "table {table} in the catalog was created by {owner}, not by {us}: give each \
         cluster its own --iceberg-catalog-namespace"
    )]
    ForeignTable {
        table: String,
        owner: String,
        us: String,
    },
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl From<apache_avro::Error> for IcebergError {
    fn from(e: apache_avro::Error) -> Self {
        IcebergError::Avro(Box::new(e))
    }
}

pub type Result<T, E = IcebergError> = std::result::Result<T, E>;
