//! Apache Iceberg tables over Strata's Parquet files (issue 20): a topic's files,
//! published as an Iceberg format-version-2 table that engines (pyiceberg, Spark, Trino,
//! DuckDB) read without knowing Strata.
//!
//! The crate owns a topic's table: its schema, partition specs, manifests, snapshots and
//! metadata, the commits that change it, and the catalog that points at its current
//! version. It does not own the data files: strata-parquet writes them, and the caller
//! deletes the ones an expiry hands back.
//!
//! * [`bounds`]: Iceberg's single-value binary form, for file bounds and summaries.
//! * [`catalog`]: the catalog of topics' tables ([`Catalog`], [`Table`]) and the commit.
//! * [`datafile`]: one Parquet file to publish, described from its footer.
//! * [`manifest`]: manifests and manifest lists, written and read back as Avro.
//! * [`metadata`]: the table metadata JSON, with its snapshots, logs and refs.
//! * [`rest`]: an Iceberg REST catalog client ([`RestCatalog`]).
//! * [`schema`]: the Iceberg schema of a strata-parquet file's Arrow schema.
//! * [`spec`]: the table's two partition specs.
//!
//! We write the metadata ourselves, following the Iceberg spec v2
//! (<https://iceberg.apache.org/spec/>): the `iceberg` crate pins an older arrow than
//! ours. Nothing is rewritten: the Parquet files stay where strata-parquet put them and
//! the table only points at them.
//!
//! # Table
//!
//! * Schema ([`schema`]): from the files' Arrow schema. strata-parquet gives every
//!   column a Parquet field id (top-level 1..=n in order, nested fields after), which are
//!   the Iceberg ids; `timestamp` is `timestamptz` over a millisecond column. A name
//!   mapping property covers files written before ids.
//! * Partitioning ([`spec`]): `identity(partition)` and `day(timestamp)`; files whose
//!   rows span UTC days go under a second spec with `identity(partition)` only.
//! * Statistics ([`datafile`]): from the Parquet footer; bounds on `partition`,
//!   `offset` and `timestamp` so engines prune by time and offset.
//! * Manifests and manifest lists ([`manifest`]): Avro with field ids, uncompressed.
//! * Snapshots ([`metadata`]): one per commit ([`Table::commit`]: `append`, `delete`,
//!   `overwrite` or `replace`), with the standard summary and, per Kafka partition, the
//!   offsets it added and the offset committed so far
//!   (`strata.partition.{p}.first-offset`, `.last-offset`, `.committed-offset`), carried
//!   for every partition through deletes and replaces, so a publisher resumes exactly
//!   once from [`Table::last_committed_offsets`].
//! * Lifecycle: removing files rewrites the manifests holding them; manifests are merged
//!   past [`MAX_MANIFESTS`]; [`Table::expire_snapshots`] drops old snapshots, deletes the
//!   metadata only they used and returns the data files nothing references any more.
//!
//! # Catalog
//!
//! [`Catalog`] keeps `{root}/iceberg/{topic}/metadata/v{N}.metadata.json` and a
//! `version-hint.text` on any [`strata_store::BlobStore`] (the broker's bucket, with its
//! retries, timeouts and metrics); a commit is a create-only put of the next version, so
//! concurrent committers cannot both win ([`catalog`]). With [`Catalog::with_rest`] the
//! pointers are in an Iceberg REST catalog instead ([`rest`]): the same snapshots and
//! manifests, committed as the REST spec's updates under requirements.

pub mod bounds;
pub mod catalog;
pub mod datafile;
mod error;
pub mod manifest;
pub mod metadata;
pub mod rest;
pub mod schema;
pub mod spec;

pub use catalog::{
    Catalog, CommitStats, DEFAULT_PREVIOUS_VERSIONS_MAX, DELETE_AFTER_COMMIT_PROPERTY, Expired,
    MAX_MANIFESTS, MERGE_AT_ONCE, NAME_MAPPING_PROPERTY, Operation, PREVIOUS_VERSIONS_MAX_PROPERTY,
    ROOT_PROPERTY, Table,
};
pub use datafile::DataFile;
pub use error::{IcebergError, Result};
pub use manifest::ManifestEntry;
pub use metadata::{Snapshot, TableMetadata, summary_keys};
pub use rest::{RestCatalog, RestConfig};
pub use schema::IcebergSchema;
pub use spec::PartitionSpec;
