//! The REST catalog's pointers: a table loaded from or created in an Iceberg REST catalog
//! ([`crate::rest`]), refused when another Strata cluster owns it.

use serde_json::json;

use super::rest_diff::comparable;
use super::{Catalog, Table};
use crate::error::{IcebergError, Result};
use crate::metadata::TableMetadata;
use crate::rest::{self, Loaded, RestCatalog};
use crate::schema::IcebergSchema;

/// The table property naming the catalog root (`{cluster_id}`, or
/// `{cluster_id}/dead_letters`) of the Strata cluster that created the table: a REST
/// catalog shared by clusters must not let one commit to another's table.
pub const ROOT_PROPERTY: &str = "strata.root";

impl Catalog {
    /// The table a REST catalog answered; a table another cluster created is refused.
    pub(super) fn rest_table(&self, topic: &str, loaded: Loaded) -> Result<Table> {
        if let Some(owner) = loaded.metadata.properties.get(ROOT_PROPERTY)
            && *owner != self.root
        {
            return Err(IcebergError::ForeignTable {
                table: topic.to_string(),
                owner: owner.clone(),
                us: self.root.clone(),
            });
        }
        let version = rest::version_of(&loaded.metadata_location);
        self.table_of(
            topic,
            version,
            loaded.metadata,
            loaded.metadata_location.clone(),
            Some(loaded.metadata_location),
        )
    }

    /// Creates the table in the REST catalog from the metadata [`Self::create_table`]
    /// made, then makes the catalog's metadata what Strata's files need where the catalog
    /// chose otherwise: catalogs may number a new table's fields afresh (Strata's files
    /// carry their ids), and a create takes one partition spec (Strata has two).
    pub(super) async fn create_in_rest(
        &self,
        rest: &RestCatalog,
        namespace: &[String],
        topic: &str,
        ours: TableMetadata,
        schema: &IcebergSchema,
    ) -> Result<Table> {
        let request = json!({
            "name": topic,
            "schema": schema.json,
            "partition-spec": ours.partition_specs[0],
            "write-order": ours.sort_orders[0],
            "stage-create": false,
            "properties": ours.properties,
        });
        let created = rest.create(namespace, topic, &request).await?;
        let mut updates = Vec::new();
        let theirs = &created.metadata;
        let same_schema = theirs
            .current_schema()
            .is_some_and(|s| comparable(s) == comparable(&schema.json));
        if !same_schema {
            let mut ids = schema.json.clone();
            let next_id = theirs
                .schemas
                .iter()
                .filter_map(|s| s["schema-id"].as_i64())
                .max()
                .map_or(0, |m| m + 1);
            ids["schema-id"] = json!(next_id);
            updates.push(json!({"action": "add-schema", "schema": ids,
                "last-column-id": ours.last_column_id.max(theirs.last_column_id)}));
            updates.push(json!({"action": "set-current-schema", "schema-id": -1}));
        }
        for spec in &ours.partition_specs {
            let present = theirs.partition_specs.iter().any(|s| {
                s["spec-id"] == spec["spec-id"]
                    && comparable(&s["fields"]) == comparable(&spec["fields"])
            });
            if !present {
                updates.push(json!({"action": "add-spec", "spec": spec}));
            }
        }
        let loaded = if updates.is_empty() {
            created
        } else {
            let requirements = vec![
                json!({"type": "assert-table-uuid", "uuid": created.metadata.table_uuid}),
                json!({"type": "assert-current-schema-id",
                    "current-schema-id": created.metadata.current_schema_id}),
            ];
            rest.commit(namespace, topic, 1, requirements, updates)
                .await?
        };
        let table = self.rest_table(topic, loaded)?;
        // What Strata's manifests and files rely on: the files' field ids and the two
        // specs with their ids.
        let m = &table.metadata;
        let fits = m
            .current_schema()
            .is_some_and(|s| comparable(s) == comparable(&schema.json))
            && ours.partition_specs.iter().all(|spec| {
                m.partition_specs.iter().any(|s| {
                    s["spec-id"] == spec["spec-id"]
                        && comparable(&s["fields"]) == comparable(&spec["fields"])
                })
            });
        if !fits {
            return Err(IcebergError::Catalog {
                uri: rest.config().uri.clone(),
                reason: format!(
                    "created table {topic}, but its schema or partition specs are not the ones \
                     Strata's files need (field ids, spec ids 0 and 1): drop the table and use \
                     a catalog that keeps the field ids a client gives"
                ),
            });
        }
        table.check_location()?;
        Ok(table)
    }
}
