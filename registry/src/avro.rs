//! Avro schemas, through apache-avro: parsing (with the named types of referenced
//! schemas), identity, and Avro's schema resolution rules for compatibility.

use apache_avro::Schema;
use apache_avro::schema_compatibility::SchemaCompatibility;

use crate::format::Resolved;

/// Parses `schema` with its references' named types.
fn parse(schema: Resolved<'_>) -> Result<Schema, String> {
    if schema.references.is_empty() {
        return Schema::parse_str(schema.text).map_err(|e| e.to_string());
    }
    let others: Vec<&str> = schema.references.iter().map(|(_, t)| t.as_str()).collect();
    Schema::parse_str_with_list(schema.text, others)
        .map(|(s, _)| s)
        .map_err(|e| e.to_string())
}

/// The schema's JSON, compact and with its objects' members in one order (JSON objects
/// are unordered; arrays, such as a record's fields, keep theirs). Unlike Avro's Parsing
/// Canonical Form it keeps defaults and docs, which compatibility depends on: two
/// schemas that differ only in a field's default are different schemas, as in
/// Confluent's registry.
pub fn identity(schema: Resolved<'_>) -> Result<String, String> {
    parse(schema)?;
    let json: serde_json::Value =
        serde_json::from_str(schema.text).map_err(|e| format!("not JSON: {e}"))?;
    Ok(json.to_string())
}

/// Avro's resolution rules: can a reader with `reader` read what `writer` wrote.
pub fn can_read(writer: Resolved<'_>, reader: Resolved<'_>) -> Result<(), Vec<String>> {
    let w = parse(writer).map_err(|e| vec![format!("the writer's schema: {e}")])?;
    let r = parse(reader).map_err(|e| vec![format!("the reader's schema: {e}")])?;
    SchemaCompatibility::can_read(&w, &r).map_err(|e| vec![e.to_string()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(text: &str) -> Resolved<'_> {
        Resolved {
            text,
            references: &[],
        }
    }

    const V1: &str =
        r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}"#;
    const WITH_DEFAULT: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int","default":0}]}"#;
    const WITHOUT_DEFAULT: &str = r#"{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int"}]}"#;

    #[test]
    fn identity_ignores_spacing_and_member_order_but_keeps_defaults() {
        let spaced = r#"{ "name": "User", "type": "record",
            "fields": [ {"type": "string", "name": "name"} ] }"#;
        assert_eq!(
            identity(plain(V1)).unwrap(),
            identity(plain(spaced)).unwrap()
        );
        assert_ne!(
            identity(plain(WITH_DEFAULT)).unwrap(),
            identity(plain(WITHOUT_DEFAULT)).unwrap()
        );
        assert!(identity(plain(r#"{"type":"record","name":"X"}"#)).is_err());
        assert!(identity(plain("not json")).is_err());
    }

    #[test]
    fn resolution_rules_decide_compatibility() {
        // A new field with a default: the new reader reads old data (backward).
        can_read(plain(V1), plain(WITH_DEFAULT)).unwrap();
        // Without a default it cannot.
        assert!(can_read(plain(V1), plain(WITHOUT_DEFAULT)).is_err());
        // The old reader reads new data either way (forward): the field is skipped.
        can_read(plain(WITHOUT_DEFAULT), plain(V1)).unwrap();
        // int promotes to long, not back.
        let int = r#"{"type":"record","name":"N","fields":[{"name":"n","type":"int"}]}"#;
        let long = r#"{"type":"record","name":"N","fields":[{"name":"n","type":"long"}]}"#;
        can_read(plain(int), plain(long)).unwrap();
        assert!(can_read(plain(long), plain(int)).is_err());
    }

    #[test]
    fn references_supply_named_types() {
        let address =
            r#"{"type":"record","name":"Address","fields":[{"name":"city","type":"string"}]}"#;
        let user = r#"{"type":"record","name":"User","fields":[{"name":"home","type":"Address"}]}"#;
        let refs = [("Address".to_string(), address.to_string())];
        let resolved = Resolved {
            text: user,
            references: &refs,
        };
        identity(resolved).unwrap();
        assert!(
            identity(plain(user)).is_err(),
            "Address is unknown without it"
        );
    }
}
