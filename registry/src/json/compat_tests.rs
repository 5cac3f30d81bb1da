//! Confluent's JSON Schema compatibility rules, each both ways, and the registry's
//! compatibility levels over JSON schemas. `can_read(writer, reader)`: does the reader's
//! schema accept everything the writer's did (backward: the writer is the old schema).

use super::docs::Docs;
use super::*;
use crate::{Compatibility, NewSchema, Record, Reference, Registry, RegistryError, SchemaType};

fn plain(text: &str) -> Resolved<'_> {
    Resolved {
        text,
        references: &[],
    }
}

/// Every difference (compatible or not) as `NAME at path`.
fn diffs_of(w: Resolved<'_>, r: Resolved<'_>) -> Vec<String> {
    let (pw, pr) = (parse(w).unwrap(), parse(r).unwrap());
    let (dw, dr) = (Docs::new(&pw).unwrap(), Docs::new(&pr).unwrap());
    compat::diff(&dw, &dr)
        .unwrap()
        .iter()
        .map(|d| format!("{} at {}", d.change.name(), d.path))
        .collect()
}

/// The reader reads the writer's data; `change` (`NAME at path`) is among the
/// differences found.
fn ok(w: &str, r: &str, change: &str) {
    if let Err(e) = can_read(plain(w), plain(r)) {
        panic!("{w} -> {r}: {e:?}");
    }
    let all = diffs_of(plain(w), plain(r));
    assert!(
        change.is_empty() || all.iter().any(|d| d == change),
        "{w} -> {r}: {change} not in {all:?}"
    );
}

/// The reader cannot read the writer's data, because of `change` (`NAME at path`).
fn bad(w: &str, r: &str, change: &str) {
    let e = match can_read(plain(w), plain(r)) {
        Ok(()) => panic!("{w} -> {r}: compatible, expected {change}"),
        Err(e) => e,
    };
    let (name, path) = change.split_once(" at ").unwrap_or((change, ""));
    let want = format!("{name} at '#/{path}'");
    assert!(
        e.iter().any(|m| m.starts_with(&want)),
        "{w} -> {r}: {want} not in {e:?}"
    );
}

const S: &str = r#"{"type":"string"}"#;
const I: &str = r#"{"type":"integer"}"#;
const N: &str = r#"{"type":"number"}"#;

fn obj(props: &str, extra: &str) -> String {
    format!(r#"{{"type":"object","properties":{{{props}}}{extra}}}"#)
}

const CLOSED: &str = r#","additionalProperties":false"#;

#[test]
fn types_narrow_extend_and_change() {
    bad(S, I, "TYPE_CHANGED at ");
    ok(I, N, "TYPE_EXTENDED at ");
    bad(N, I, "TYPE_NARROWED at ");
    let nullable = r#"{"type":["string","null"]}"#;
    ok(S, nullable, "SUM_TYPE_EXTENDED at ");
    bad(nullable, S, "TYPE_CHANGED at ");
    // The empty schema takes anything; nothing is written with `false`.
    ok(S, "{}", "");
    ok(S, "true", "");
    bad("{}", S, "TYPE_CHANGED at ");
    ok("false", S, "");
    // Nested, with the path.
    bad(
        &obj(&format!(r#""a":{S}"#), ""),
        &obj(&format!(r#""a":{I}"#), ""),
        "TYPE_CHANGED at properties/a",
    );
}

#[test]
fn properties_under_open_and_closed_content_models() {
    let a = format!(r#""a":{S}"#);
    let ab = format!(r#""a":{S},"b":{I}"#);
    // Open writer: its data may have had any "b", which the reader now constrains.
    bad(
        &obj(&a, ""),
        &obj(&ab, ""),
        "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at properties/b",
    );
    ok(
        &obj(&ab, ""),
        &obj(&a, ""),
        "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL at properties/b",
    );
    ok(
        &obj(&a, ""),
        &obj(r#""a":{"type":"string"},"b":{}"#, ""),
        "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL at properties/b",
    );
    bad(
        &obj(&a, ""),
        &obj(&ab, r#","required":["b"]"#),
        "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at properties/b",
    );
    // Closed writer: it wrote no "b", so an optional one costs nothing; a required one
    // is missing from its data unless it has a default.
    ok(
        &obj(&a, CLOSED),
        &obj(&ab, CLOSED),
        "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at properties/b",
    );
    bad(
        &obj(&a, CLOSED),
        &obj(&ab, &format!(r#"{CLOSED},"required":["b"]"#)),
        "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at properties/b",
    );
    ok(
        &obj(&a, CLOSED),
        &obj(
            r#""a":{"type":"string"},"b":{"type":"integer","default":0}"#,
            &format!(r#"{CLOSED},"required":["b"]"#),
        ),
        "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL at properties/b",
    );
    // A closed reader without a property the writer wrote refuses it.
    bad(
        &obj(&ab, CLOSED),
        &obj(&a, CLOSED),
        "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at properties/b",
    );
}

#[test]
fn partially_open_content_models_cover_properties_by_schema() {
    let strings = r#","additionalProperties":{"type":"string"}"#;
    let a = format!(r#""a":{S}"#);
    ok(
        &obj(&a, strings),
        &obj(&format!(r#""a":{S},"b":{S}"#), strings),
        "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at properties/b",
    );
    bad(
        &obj(&a, strings),
        &obj(&format!(r#""a":{S},"b":{I}"#), strings),
        "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at properties/b",
    );
    // Removed from the reader: its additionalProperties must take the writer's values.
    ok(
        &obj(&format!(r#""a":{S},"b":{S}"#), strings),
        &obj(&a, strings),
        "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at properties/b",
    );
    bad(
        &obj(&format!(r#""a":{S},"b":{I}"#), strings),
        &obj(&a, strings),
        "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at properties/b",
    );
    // patternProperties cover the names they match.
    let counts = r#","patternProperties":{"^x_":{"type":"integer"}},"additionalProperties":false"#;
    ok(
        &obj(&a, counts),
        &obj(&format!(r#""a":{S},"x_n":{I}"#), counts),
        "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at properties/x_n",
    );
    bad(
        &obj(&a, counts),
        &obj(&format!(r#""a":{S},"x_n":{S}"#), counts),
        "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at properties/x_n",
    );
}

#[test]
fn required_and_additional_properties() {
    let ab = format!(r#""a":{S},"b":{S}"#);
    bad(
        &obj(&ab, ""),
        &obj(&ab, r#","required":["a"]"#),
        "REQUIRED_ATTRIBUTE_ADDED at required/a",
    );
    ok(
        &obj(&ab, r#","required":["a"]"#),
        &obj(&ab, ""),
        "REQUIRED_ATTRIBUTE_REMOVED at required/a",
    );
    let open = r#"{"type":"object"}"#;
    let closed = r#"{"type":"object","additionalProperties":false}"#;
    let strings = r#"{"type":"object","additionalProperties":{"type":"string"}}"#;
    let ints = r#"{"type":"object","additionalProperties":{"type":"integer"}}"#;
    bad(
        open,
        closed,
        "ADDITIONAL_PROPERTIES_REMOVED at additionalProperties",
    );
    ok(
        closed,
        open,
        "ADDITIONAL_PROPERTIES_ADDED at additionalProperties",
    );
    bad(
        open,
        strings,
        "ADDITIONAL_PROPERTIES_NARROWED at additionalProperties",
    );
    ok(
        strings,
        open,
        "ADDITIONAL_PROPERTIES_EXTENDED at additionalProperties",
    );
    bad(strings, ints, "TYPE_CHANGED at additionalProperties");
    let deps = r#"{"type":"object","dependencies":{"a":["b"]}}"#;
    bad(open, deps, "DEPENDENCY_ARRAY_ADDED at dependencies/a");
    ok(deps, open, "DEPENDENCY_ARRAY_REMOVED at dependencies/a");
    let few = r#"{"type":"object","maxProperties":3}"#;
    let many = r#"{"type":"object","maxProperties":5}"#;
    bad(many, few, "MAX_PROPERTIES_DECREASED at maxProperties");
    ok(few, many, "MAX_PROPERTIES_INCREASED at maxProperties");
}

#[test]
fn enums_extend_narrow_and_change() {
    let ab = r#"{"enum":["a","b"]}"#;
    let abc = r#"{"enum":["a","b","c"]}"#;
    let ac = r#"{"enum":["a","c"]}"#;
    ok(ab, abc, "ENUM_ARRAY_EXTENDED at enum");
    bad(abc, ab, "ENUM_ARRAY_NARROWED at enum");
    bad(ab, ac, "ENUM_ARRAY_CHANGED at enum");
    // With a type too (a schema of two facets): the same, said of its enum.
    let typed_ab = r#"{"type":"string","enum":["a","b"]}"#;
    let typed_abc = r#"{"type":"string","enum":["a","b","c"]}"#;
    ok(typed_ab, typed_abc, "ENUM_ARRAY_EXTENDED at enum");
    bad(typed_abc, typed_ab, "ENUM_ARRAY_NARROWED at enum");
    bad(typed_abc, typed_ab, "COMBINED_TYPE_SUBSCHEMAS_CHANGED at ");
    bad(
        r#"{"const":1}"#,
        r#"{"const":2}"#,
        "ENUM_ARRAY_CHANGED at const",
    );
    ok(r#"{"const":1}"#, r#"{"const":1}"#, "");
}

#[test]
fn string_and_number_bounds() {
    let s = |extra: &str| format!(r#"{{"type":"string"{extra}}}"#);
    bad(
        &s(r#","maxLength":10"#),
        &s(r#","maxLength":5"#),
        "MAX_LENGTH_DECREASED at maxLength",
    );
    ok(
        &s(r#","maxLength":5"#),
        &s(r#","maxLength":10"#),
        "MAX_LENGTH_INCREASED at maxLength",
    );
    bad(S, &s(r#","maxLength":5"#), "MAX_LENGTH_ADDED at maxLength");
    ok(
        &s(r#","maxLength":5"#),
        S,
        "MAX_LENGTH_REMOVED at maxLength",
    );
    bad(
        &s(r#","minLength":1"#),
        &s(r#","minLength":2"#),
        "MIN_LENGTH_INCREASED at minLength",
    );
    ok(
        &s(r#","minLength":2"#),
        &s(r#","minLength":1"#),
        "MIN_LENGTH_DECREASED at minLength",
    );
    bad(S, &s(r#","pattern":"^a""#), "PATTERN_ADDED at pattern");
    ok(&s(r#","pattern":"^a""#), S, "PATTERN_REMOVED at pattern");
    bad(
        &s(r#","pattern":"^a""#),
        &s(r#","pattern":"^b""#),
        "PATTERN_CHANGED at pattern",
    );

    let n = |extra: &str| format!(r#"{{"type":"number"{extra}}}"#);
    bad(
        &n(r#","maximum":10"#),
        &n(r#","maximum":5"#),
        "MAXIMUM_DECREASED at maximum",
    );
    ok(
        &n(r#","maximum":5"#),
        &n(r#","maximum":10"#),
        "MAXIMUM_INCREASED at maximum",
    );
    bad(
        &n(r#","minimum":0"#),
        &n(r#","minimum":1"#),
        "MINIMUM_INCREASED at minimum",
    );
    ok(
        &n(r#","minimum":1"#),
        &n(r#","minimum":0"#),
        "MINIMUM_DECREASED at minimum",
    );
    bad(
        N,
        &n(r#","exclusiveMinimum":0"#),
        "EXCLUSIVE_MINIMUM_ADDED at exclusiveMinimum",
    );
    ok(
        &n(r#","exclusiveMaximum":5"#),
        N,
        "EXCLUSIVE_MAXIMUM_REMOVED at exclusiveMaximum",
    );
    // multipleOf: a multiple of the old step takes fewer values; a divisor, more.
    bad(
        &n(r#","multipleOf":2"#),
        &n(r#","multipleOf":4"#),
        "MULTIPLE_OF_EXPANDED at multipleOf",
    );
    ok(
        &n(r#","multipleOf":4"#),
        &n(r#","multipleOf":2"#),
        "MULTIPLE_OF_REDUCED at multipleOf",
    );
    ok(
        &n(r#","multipleOf":0.3"#),
        &n(r#","multipleOf":0.1"#),
        "MULTIPLE_OF_REDUCED at multipleOf",
    );
    bad(
        &n(r#","multipleOf":0.1"#),
        &n(r#","multipleOf":0.3"#),
        "MULTIPLE_OF_EXPANDED at multipleOf",
    );
    bad(
        &n(r#","multipleOf":2"#),
        &n(r#","multipleOf":3"#),
        "MULTIPLE_OF_CHANGED at multipleOf",
    );
    bad(
        N,
        &n(r#","multipleOf":2"#),
        "MULTIPLE_OF_ADDED at multipleOf",
    );
}

#[test]
fn arrays_items_and_counts() {
    let a = |extra: &str| format!(r#"{{"type":"array"{extra}}}"#);
    bad(
        &a(&format!(r#","items":{S}"#)),
        &a(&format!(r#","items":{I}"#)),
        "TYPE_CHANGED at items",
    );
    bad(
        &a(""),
        &a(&format!(r#","items":{S}"#)),
        "SCHEMA_ADDED at items",
    );
    ok(
        &a(&format!(r#","items":{S}"#)),
        &a(""),
        "SCHEMA_REMOVED at items",
    );
    bad(
        &a(r#","maxItems":10"#),
        &a(r#","maxItems":5"#),
        "MAX_ITEMS_DECREASED at maxItems",
    );
    ok(
        &a(r#","maxItems":5"#),
        &a(r#","maxItems":10"#),
        "MAX_ITEMS_INCREASED at maxItems",
    );
    bad(
        &a(r#","minItems":1"#),
        &a(r#","minItems":2"#),
        "MIN_ITEMS_INCREASED at minItems",
    );
    ok(
        &a(r#","minItems":2"#),
        &a(""),
        "MIN_ITEMS_REMOVED at minItems",
    );
    bad(
        &a(""),
        &a(r#","uniqueItems":true"#),
        "UNIQUE_ITEMS_ADDED at uniqueItems",
    );
    ok(
        &a(r#","uniqueItems":true"#),
        &a(""),
        "UNIQUE_ITEMS_REMOVED at uniqueItems",
    );
    // Tuples: an item added to a closed tuple was never written; to an open one it was,
    // with any value. One removed from a closed reader is refused.
    let one = a(&format!(r#","items":[{S}],"additionalItems":false"#));
    let two = a(&format!(r#","items":[{S},{I}],"additionalItems":false"#));
    ok(&one, &two, "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL at items/1");
    bad(
        &two,
        &one,
        "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL at items/1",
    );
    let open_one = a(&format!(r#","items":[{S}]"#));
    bad(
        &open_one,
        &two,
        "ITEM_ADDED_TO_OPEN_CONTENT_MODEL at items/1",
    );
    bad(
        &open_one,
        &two,
        "ADDITIONAL_ITEMS_REMOVED at additionalItems",
    );
    // 2020-12 spells a tuple prefixItems, and its rest items.
    let modern = |extra: &str| {
        format!(
            r#"{{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"array"{extra}}}"#
        )
    };
    let one = modern(&format!(r#","prefixItems":[{S}],"items":false"#));
    let two = modern(&format!(r#","prefixItems":[{S},{I}],"items":false"#));
    ok(
        &one,
        &two,
        "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL at prefixItems/1",
    );
    bad(
        &two,
        &one,
        "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL at prefixItems/1",
    );
}

#[test]
fn combined_schemas_match_their_subschemas() {
    let one_of = |subs: &str| format!(r#"{{"oneOf":[{subs}]}}"#);
    let si = one_of(&format!("{S},{I}"));
    let sin = one_of(&format!(r#"{S},{I},{{"type":"null"}}"#));
    ok(&si, &sin, "SUM_TYPE_EXTENDED at ");
    bad(&sin, &si, "SUM_TYPE_NARROWED at ");
    bad(
        &si,
        &one_of(&format!(r#"{S},{{"type":"boolean"}}"#)),
        "COMBINED_TYPE_SUBSCHEMAS_CHANGED at ",
    );
    // Matched whatever the order, each by a compatible change.
    ok(
        &one_of(&format!(r#"{{"type":"string","maxLength":5}},{I}"#)),
        &one_of(&format!(r#"{I},{{"type":"string","maxLength":10}}"#)),
        "MAX_LENGTH_INCREASED at oneOf/0/maxLength",
    );
    let any_of = format!(r#"{{"anyOf":[{S},{I}]}}"#);
    bad(&any_of, &si, "COMBINED_TYPE_CHANGED at ");
    ok(&si, &any_of, "COMBINED_TYPE_EXTENDED at ");
    let all_of = |subs: &str| format!(r#"{{"allOf":[{subs}]}}"#);
    let two = all_of(r#"{"type":"string"},{"maxLength":5}"#);
    let three = all_of(r#"{"type":"string"},{"maxLength":5},{"minLength":1}"#);
    bad(&two, &three, "PRODUCT_TYPE_EXTENDED at ");
    ok(&three, &two, "PRODUCT_TYPE_NARROWED at ");
    // A single schema against a combination.
    ok(S, &si, "SUM_TYPE_EXTENDED at ");
    ok(&all_of(S), S, "");
}

#[test]
fn not_is_compared_the_other_way_round() {
    let not_s = format!(r#"{{"not":{S}}}"#);
    let not_si = r#"{"not":{"type":["string","integer"]}}"#;
    // The reader excludes more: the writer's integers are refused.
    bad(&not_s, not_si, "NOT_TYPE_EXTENDED at not");
    ok(not_si, &not_s, "NOT_TYPE_NARROWED at not");
}

#[test]
fn refs_are_followed_inside_and_through_references() {
    let defs = |t: &str| {
        format!(
            r##"{{"type":"object","properties":{{"a":{{"$ref":"#/definitions/A"}}}},"definitions":{{"A":{t}}}}}"##
        )
    };
    bad(&defs(S), &defs(I), "TYPE_CHANGED at properties/a");
    ok(&defs(I), &defs(N), "TYPE_EXTENDED at properties/a");

    let person = r#"{"type":"object","properties":{"home":{"$ref":"address.json"}}}"#;
    let address = |city: &str| {
        vec![(
            "address.json".to_string(),
            format!(r#"{{"type":"object","properties":{{"city":{city}}}}}"#),
        )]
    };
    let (v1, v2) = (address(S), address(I));
    let e = can_read(
        Resolved {
            text: person,
            references: &v1,
        },
        Resolved {
            text: person,
            references: &v2,
        },
    )
    .unwrap_err();
    assert!(
        e[0].starts_with("TYPE_CHANGED at '#/properties/home/properties/city'"),
        "{e:?}"
    );
    let longer = address(r#"{"type":"string","maxLength":9}"#);
    can_read(
        Resolved {
            text: person,
            references: &longer,
        },
        Resolved {
            text: person,
            references: &v1,
        },
    )
    .unwrap();
}

#[test]
fn recursive_schemas_are_compared_once_round_their_cycles() {
    let tree = |name: &str| {
        format!(
            r##"{{"type":"object","properties":{{"name":{name},"children":{{"type":"array","items":{{"$ref":"#"}}}}}}}}"##
        )
    };
    ok(&tree(S), &tree(S), "");
    bad(&tree(S), &tree(I), "TYPE_CHANGED at properties/name");
    // The change is only reached through the cycle: a list whose next node is a
    // definition that differs.
    let w = format!(r##"{{"type":"object","properties":{{"v":{S},"next":{{"$ref":"#"}}}}}}"##);
    let r = format!(
        r##"{{"type":"object","properties":{{"v":{S},"next":{{"$ref":"#/definitions/B"}}}},"definitions":{{"B":{{"type":"object","properties":{{"v":{I},"next":{{"$ref":"#"}}}}}}}}}}"##
    );
    bad(&w, &r, "TYPE_CHANGED at properties/next/properties/v");
    ok(&w, &w, "");
}

#[test]
fn messages_name_the_change_the_path_and_what_it_means() {
    let e = can_read(
        plain(r#"{"type":"object","properties":{"a":{"type":"string","maxLength":9}}}"#),
        plain(r#"{"type":"object","properties":{"a":{"type":"string","maxLength":3}}}"#),
    )
    .unwrap_err();
    assert_eq!(
        e,
        [
            "MAX_LENGTH_DECREASED at '#/properties/a/maxLength': the reader's schema is stricter here than the writer's"
        ]
    );
}

fn json(text: &str) -> NewSchema {
    NewSchema {
        schema_type: SchemaType::Json,
        schema: text.to_string(),
        ..NewSchema::default()
    }
}

fn apply(r: &mut Registry, records: &[Record]) {
    for rec in records {
        r.replay(&rec.key, rec.value.as_deref()).unwrap();
    }
}

fn register(r: &mut Registry, subject: &str, s: &NewSchema) -> Result<(i32, i32), RegistryError> {
    let done = r.register(subject, s)?;
    apply(r, &done.records);
    Ok((done.id, done.version))
}

fn level(r: &mut Registry, subject: &str, level: Compatibility) {
    let recs = r.set_compatibility(Some(subject), level).unwrap();
    apply(r, &recs);
}

#[test]
fn the_registry_keeps_json_subjects_compatible() {
    let mut r = Registry::default();
    let v1 = obj(r#""a":{"type":"string"}"#, CLOSED);
    let v2 = obj(r#""a":{"type":"string"},"b":{"type":"integer"}"#, CLOSED);
    assert_eq!(register(&mut r, "s", &json(&v1)).unwrap(), (1, 1));
    // The same schema spaced and ordered differently is the same version.
    let spaced = r#"{ "additionalProperties": false, "properties": { "a": { "type": "string" } }, "type": "object" }"#;
    assert_eq!(register(&mut r, "s", &json(spaced)).unwrap(), (1, 1));
    // BACKWARD (the default): an optional property added to a closed model reads old data.
    assert_eq!(register(&mut r, "s", &json(&v2)).unwrap(), (2, 2));
    // A type change does not.
    let v3 = obj(r#""a":{"type":"integer"},"b":{"type":"integer"}"#, CLOSED);
    let e = register(&mut r, "s", &json(&v3)).unwrap_err();
    assert_eq!((e.http_status(), e.error_code()), (409, 409));
    assert!(
        e.to_string().contains("TYPE_CHANGED at '#/properties/a'"),
        "{e}"
    );
    // FORWARD: v2's readers must read the new data; dropping the optional "b" is fine
    // for them, adding a required "c" is not (v2 is closed).
    level(&mut r, "s", Compatibility::Forward);
    let dropped = obj(r#""a":{"type":"string"}"#, CLOSED);
    let with_c = obj(
        r#""a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"string"}"#,
        &format!(r#"{CLOSED},"required":["c"]"#),
    );
    let e = register(&mut r, "s", &json(&with_c)).unwrap_err();
    assert!(
        e.to_string()
            .contains("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at '#/properties/c'"),
        "{e}"
    );
    // (The same schema as version 1 comes back as version 1.)
    assert_eq!(register(&mut r, "s", &json(&dropped)).unwrap(), (1, 1));
    let longer = obj(
        r#""a":{"type":"string"},"b":{"type":"integer","maximum":9}"#,
        CLOSED,
    );
    // FULL: both ways. A new bound on "b" breaks backward (old data had any integer).
    level(&mut r, "s", Compatibility::Full);
    let e = register(&mut r, "s", &json(&longer)).unwrap_err();
    assert!(e.to_string().contains("MAXIMUM_ADDED"), "{e}");
    let described = obj(
        r#""a":{"type":"string","description":"the a"},"b":{"type":"integer"}"#,
        CLOSED,
    );
    assert_eq!(register(&mut r, "s", &json(&described)).unwrap(), (3, 3));
    // Compatibility checks say the same without registering.
    assert!(r.check("s", Some("latest"), &json(&v3)).unwrap().len() >= 2);
    assert!(r.check("s", Some("latest"), &json(&v2)).unwrap().is_empty());
    // A schema that is not a JSON Schema is 422 42201.
    let e = register(&mut r, "s", &json(r#"{"type":5}"#)).unwrap_err();
    assert_eq!((e.http_status(), e.error_code()), (422, 42201));
}

#[test]
fn the_registry_resolves_json_references() {
    let mut r = Registry::default();
    let address = r#"{"type":"object","properties":{"city":{"type":"string"}}}"#;
    let person = NewSchema {
        references: vec![Reference {
            name: "address.json".into(),
            subject: "address".into(),
            version: 1,
        }],
        ..json(r#"{"type":"object","properties":{"home":{"$ref":"address.json"}}}"#)
    };
    assert_eq!(
        register(&mut r, "person", &person)
            .unwrap_err()
            .error_code(),
        42201
    );
    register(&mut r, "address", &json(address)).unwrap();
    let (id, _) = register(&mut r, "person", &person).unwrap();
    assert_eq!(r.referenced_by("address", 1), [id]);
    // A new address version, referenced by a new person version: checked through it.
    level(&mut r, "address", Compatibility::None);
    register(
        &mut r,
        "address",
        &json(r#"{"type":"object","properties":{"city":{"type":"integer"}}}"#),
    )
    .unwrap();
    let person2 = NewSchema {
        references: vec![Reference {
            name: "address.json".into(),
            subject: "address".into(),
            version: 2,
        }],
        ..person.clone()
    };
    let e = register(&mut r, "person", &person2).unwrap_err();
    assert!(
        e.to_string()
            .contains("TYPE_CHANGED at '#/properties/home/properties/city'"),
        "{e}"
    );
}

/// A chain of `n` definitions, each an object whose property "x" is the next one (the
/// last a string): nesting that comes from `$ref`s, not from the schema's shape.
fn chain(n: usize) -> String {
    let defs: Vec<String> = (0..n)
        .map(|i| {
            let next = if i + 1 < n {
                format!(r##"{{"$ref":"#/definitions/d{}"}}"##, i + 1)
            } else {
                S.to_string()
            };
            format!(r#""d{i}":{{"type":"object","properties":{{"x":{next}}}}}"#)
        })
        .collect();
    format!(
        r##"{{"$ref":"#/definitions/d0","definitions":{{{}}}}}"##,
        defs.join(",")
    )
}

#[test]
fn comparisons_are_bounded_in_depth_and_work() {
    // Deep through $refs: as deep as allowed compares (without overflowing the
    // stack of a test thread, 2 MiB, as a Tokio worker's); deeper is refused.
    ok(&chain(120), &chain(120), "");
    let e = can_read(plain(&chain(200)), plain(&chain(200))).unwrap_err();
    assert!(e[0].contains("nest too deeply"), "{e:?}");
    // Wide: every pair of two 400-way anyOfs is more work than allowed.
    let wide = |k: usize| {
        let subs: Vec<String> = (0..400)
            .map(|i| format!(r#"{{"const":{}}}"#, i * k))
            .collect();
        format!(r#"{{"anyOf":[{}]}}"#, subs.join(","))
    };
    let e = can_read(plain(&wide(1)), plain(&wide(2))).unwrap_err();
    assert!(e[0].contains("too large to compare"), "{e:?}");
}
