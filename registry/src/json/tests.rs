//! JSON Schema parsing, identity, references and validation (compatibility is in
//! `compat_tests.rs`).

use super::*;

fn plain(text: &str) -> Resolved<'_> {
    Resolved {
        text,
        references: &[],
    }
}

fn with<'a>(text: &'a str, references: &'a [(String, String)]) -> Resolved<'a> {
    Resolved { text, references }
}

#[test]
fn valid_schemas_parse_and_invalid_ones_say_why() {
    for ok in [
        r#"{"type":"object","properties":{"a":{"type":"string"}}}"#,
        "true",
        "false",
        "{}",
        r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"}]}"#,
    ] {
        identity(plain(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    let e = identity(plain(r#"{"type":"nope"}"#)).unwrap_err();
    assert!(e.contains("not a valid JSON Schema (draft 7)"), "{e}");
    let e = identity(plain(r#"{"type":"string","minLength":-1}"#)).unwrap_err();
    assert!(e.contains("minLength"), "{e}");
    let e = identity(plain(r#"{"type":"#)).unwrap_err();
    assert!(e.starts_with("the schema is not JSON"), "{e}");
    let e = identity(plain("[1, 2]")).unwrap_err();
    assert!(e.contains("not a valid JSON Schema"), "{e}");
    let e = identity(plain(r#"{"$schema":"https://example.com/my-meta"}"#)).unwrap_err();
    assert!(e.contains("unknown $schema"), "{e}");
}

#[test]
fn the_schema_keyword_picks_the_meta_schema() {
    // Draft 4's boolean exclusiveMaximum is invalid in draft 7 (the default), where
    // exclusiveMaximum is a number.
    let draft4 = r#"{"$schema":"http://json-schema.org/draft-04/schema#","type":"number","maximum":5,"exclusiveMaximum":true}"#;
    identity(plain(draft4)).unwrap();
    let draft7 = r#"{"type":"number","maximum":5,"exclusiveMaximum":true}"#;
    let e = identity(plain(draft7)).unwrap_err();
    assert!(e.contains("draft 7"), "{e}");
}

#[test]
fn identity_ignores_member_order_and_spacing_only() {
    let a = r#"{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}},"required":["a","b"]}"#;
    let b = r#"{
        "required": ["a", "b"],
        "properties": { "a": { "type": "integer" }, "b": { "type": "string" } },
        "type": "object"
    }"#;
    assert_eq!(identity(plain(a)).unwrap(), identity(plain(b)).unwrap());
    assert_eq!(
        identity(plain(a)).unwrap(),
        r#"{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a","b"],"type":"object"}"#
    );
    // Arrays keep their order; values count.
    let c = r#"{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}},"required":["b","a"]}"#;
    assert_ne!(identity(plain(a)).unwrap(), identity(plain(c)).unwrap());
    let d = r#"{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"number"}},"required":["a","b"]}"#;
    assert_ne!(identity(plain(a)).unwrap(), identity(plain(d)).unwrap());
}

const ADDRESS: &str =
    r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"#;

#[test]
fn references_resolve_by_name_and_a_missing_one_is_refused() {
    let person = r#"{"type":"object","properties":{"home":{"$ref":"address.json"}}}"#;
    let refs = [("address.json".to_string(), ADDRESS.to_string())];
    identity(with(person, &refs)).unwrap();
    let v = validator(with(person, &refs)).unwrap();
    assert!(v.is_valid(&serde_json::json!({"home": {"city": "Lyon"}})));
    assert!(!v.is_valid(&serde_json::json!({"home": {"city": 5}})));
    assert!(!v.is_valid(&serde_json::json!({"home": {}})));
    let e = identity(plain(person)).unwrap_err();
    assert!(e.contains("address.json"), "{e}");
    // Relative to the schema's $id, and by URL.
    let with_id = r#"{"$id":"https://example.com/schemas/person.json","type":"object","properties":{"home":{"$ref":"address.json"}}}"#;
    identity(with(with_id, &refs)).unwrap();
    let by_url = r#"{"properties":{"home":{"$ref":"https://example.com/address.json"}}}"#;
    let url_refs = [(
        "https://example.com/address.json".to_string(),
        ADDRESS.to_string(),
    )];
    let v = validator(with(by_url, &url_refs)).unwrap();
    assert!(!v.is_valid(&serde_json::json!({"home": {"city": false}})));
    // A pointer into a reference.
    let defs = r#"{"definitions":{"Address":{"type":"string"}}}"#;
    let into = r##"{"$ref":"defs.json#/definitions/Address"}"##;
    let refs = [("defs.json".to_string(), defs.to_string())];
    let v = validator(with(into, &refs)).unwrap();
    assert!(v.is_valid(&serde_json::json!("x")) && !v.is_valid(&serde_json::json!(1)));
    // Nothing is fetched: an unknown URL is refused, not retrieved.
    let remote = r#"{"$ref":"https://example.com/elsewhere.json"}"#;
    let e = identity(plain(remote)).unwrap_err();
    assert!(e.contains("elsewhere.json"), "{e}");
}

#[test]
fn validators_check_values() {
    let v = validator(plain(
        r#"{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"],"additionalProperties":false}"#,
    ))
    .unwrap();
    assert!(v.is_valid(&serde_json::json!({"n": 3})));
    assert!(!v.is_valid(&serde_json::json!({"n": 0})));
    assert!(!v.is_valid(&serde_json::json!({"n": 3, "m": 1})));
    assert!(validator(plain("{")).is_err());
}

fn nested(depth: usize, open: &str, close: &str, inner: &str) -> String {
    let mut s = open.repeat(depth);
    s.push_str(inner);
    s.push_str(&close.repeat(depth));
    s
}

#[test]
fn nesting_bombs_are_refused_without_overflowing() {
    // 10,000 levels: refused before parsing, with a message.
    let bomb = nested(10_000, r#"{"items":"#, "}", "{}");
    let e = identity(plain(&bomb)).unwrap_err();
    assert!(e.contains("more than 128 levels"), "{e}");
    let arrays = nested(10_000, "[", "]", "");
    assert!(identity(plain(&arrays)).is_err());
    // Within JSON's limit but schemas nested more than 64 deep.
    let deep = nested(100, r#"{"items":"#, "}", "{}");
    let e = identity(plain(&deep)).unwrap_err();
    assert!(e.contains("more than 64 deep"), "{e}");
    let fine = nested(60, r#"{"items":"#, "}", "{}");
    identity(plain(&fine)).unwrap();
    // In a reference too, and in compatibility checks.
    let refs = [("bomb.json".to_string(), bomb.clone())];
    let e = identity(with(r#"{"$ref":"bomb.json"}"#, &refs)).unwrap_err();
    assert!(e.contains("reference 'bomb.json'"), "{e}");
    assert!(can_read(plain("{}"), plain(&bomb)).is_err());
    assert!(can_read(plain(&deep), plain("{}")).is_err());
    // Brackets inside strings do not count.
    let quoted = format!(r#"{{"description":"{}"}}"#, "[".repeat(1000));
    identity(plain(&quoted)).unwrap();
}

#[test]
fn ref_cycles_with_no_schema_are_refused() {
    for text in [
        r##"{"$ref":"#"}"##,
        r##"{"definitions":{"a":{"$ref":"#/definitions/b"},"b":{"$ref":"#/definitions/a"}},"$ref":"#/definitions/a"}"##,
    ] {
        let e = identity(plain(text)).unwrap_err();
        assert!(e.contains("cycle of $refs"), "{e}");
        assert!(can_read(plain(text), plain(text)).is_err());
    }
    // A recursive schema (a tree) is fine: its $ref goes through a schema.
    let tree =
        r##"{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}}"##;
    identity(plain(tree)).unwrap();
}
