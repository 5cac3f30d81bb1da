//! What a REST catalog commit sends: the difference between the metadata as loaded and
//! the next version, as the REST spec's requirements and updates.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::metadata::TableMetadata;

/// A schema's or spec's JSON with only what identifies it (ids, names, types,
/// requiredness, transforms): what a catalog may add (docs, defaults) left out.
pub(super) fn comparable(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| {
                    matches!(
                        k.as_str(),
                        "type"
                            | "fields"
                            | "id"
                            | "name"
                            | "required"
                            | "element-id"
                            | "element"
                            | "element-required"
                            | "key-id"
                            | "key"
                            | "value-id"
                            | "value"
                            | "value-required"
                            | "source-id"
                            | "field-id"
                            | "transform"
                    )
                })
                .map(|(k, v)| (k.clone(), comparable(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(comparable).collect()),
        other => other.clone(),
    }
}

/// What a REST commit from `old` to `new` asks (the spec's `TableRequirement`s) and
/// does (its `TableUpdate`s): the schemas, properties, snapshots and `main` branch that
/// changed. The requirements make it apply only to the table as loaded.
pub(super) fn rest_changes(old: &TableMetadata, new: &TableMetadata) -> (Vec<Value>, Vec<Value>) {
    let mut requirements = vec![json!({"type": "assert-table-uuid", "uuid": old.table_uuid})];
    let mut updates = Vec::new();
    let old_schemas: BTreeSet<i64> = old
        .schemas
        .iter()
        .filter_map(|s| s["schema-id"].as_i64())
        .collect();
    let added: Vec<&Value> = new
        .schemas
        .iter()
        .filter(|s| {
            s["schema-id"]
                .as_i64()
                .is_some_and(|id| !old_schemas.contains(&id))
        })
        .collect();
    if !added.is_empty() || new.current_schema_id != old.current_schema_id {
        requirements.push(json!({"type": "assert-current-schema-id",
            "current-schema-id": old.current_schema_id}));
        requirements.push(json!({"type": "assert-last-assigned-field-id",
            "last-assigned-field-id": old.last_column_id}));
    }
    for s in &added {
        updates.push(json!({"action": "add-schema", "schema": s,
            "last-column-id": new.last_column_id}));
    }
    if new.current_schema_id != old.current_schema_id {
        updates.push(json!({"action": "set-current-schema", "schema-id": new.current_schema_id}));
    }
    let changed: BTreeMap<&String, &String> = new
        .properties
        .iter()
        .filter(|(k, v)| old.properties.get(*k) != Some(*v))
        .collect();
    if !changed.is_empty() {
        updates.push(json!({"action": "set-properties", "updates": changed}));
    }
    let gone: Vec<&String> = old
        .properties
        .keys()
        .filter(|k| !new.properties.contains_key(*k))
        .collect();
    if !gone.is_empty() {
        updates.push(json!({"action": "remove-properties", "removals": gone}));
    }
    let old_ids: BTreeSet<i64> = old.snapshots.iter().map(|s| s.snapshot_id).collect();
    let new_ids: BTreeSet<i64> = new.snapshots.iter().map(|s| s.snapshot_id).collect();
    for s in new
        .snapshots
        .iter()
        .filter(|s| !old_ids.contains(&s.snapshot_id))
    {
        updates.push(json!({"action": "add-snapshot", "snapshot": s}));
    }
    let main = |m: &TableMetadata| m.refs.get("main").map(|r| r.snapshot_id);
    if main(new) != main(old)
        && let Some(id) = main(new)
    {
        updates.push(json!({"action": "set-snapshot-ref", "ref-name": "main",
            "type": "branch", "snapshot-id": id}));
    }
    let removed: Vec<i64> = old_ids.difference(&new_ids).copied().collect();
    if !removed.is_empty() {
        updates.push(json!({"action": "remove-snapshots", "snapshot-ids": removed}));
    }
    // Whatever changed, the branch must be where it was when the table was loaded.
    requirements.push(json!({"type": "assert-ref-snapshot-id", "ref": "main",
        "snapshot-id": main(old)}));
    (requirements, updates)
}
