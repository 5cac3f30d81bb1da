//! Confluent's Protobuf compatibility rules, one by one (each allowed change and each
//! breaking one), then through the registry's levels as clients meet them.

use super::compat::{Change, differences};
use super::*;
use crate::*;

/// The breaking changes from `writer` to `reader` (with `refs` as their imports).
fn changes_with(writer: &str, reader: &str, refs: &[(String, String)]) -> Vec<Change> {
    let w = compile(Resolved {
        text: writer,
        references: refs,
    })
    .unwrap();
    let r = compile(Resolved {
        text: reader,
        references: refs,
    })
    .unwrap();
    differences(&w, &r).into_iter().map(|d| d.change).collect()
}

fn changes(writer: &str, reader: &str) -> Vec<Change> {
    changes_with(writer, reader, &[])
}

/// A proto3 file with package `demo` and one message `M` with `body`.
fn m3(body: &str) -> String {
    format!("syntax = \"proto3\"; package demo; message M {{ {body} }}")
}

fn m2(body: &str) -> String {
    format!("syntax = \"proto2\"; package demo; message M {{ {body} }}")
}

#[test]
fn adding_removing_and_renaming_fields_is_compatible() {
    let v1 = m3("string name = 1; int32 age = 2;");
    let v2 = m3("string full_name = 1; string email = 3;");
    assert_eq!(changes(&v1, &v2), []);
    assert_eq!(changes(&v2, &v1), []);
    // Messages and enums added, moved, or an enum's values changed: allowed too.
    let v3 = "syntax = \"proto3\"; package demo; enum E { A = 0; } message Other {} \
              message M { string name = 1; E e = 2; }";
    let v4 = "syntax = \"proto3\"; package demo; enum E { B = 0; C = 1; } \
              message M { string name = 1; E e = 2; }";
    assert_eq!(changes(v3, v4), [Change::MessageRemoved]);
    assert_eq!(changes(v4, v3), []);
}

#[test]
fn scalars_change_only_within_their_wire_encoding() {
    let ty = |t: &str| m3(&format!("{t} x = 1;"));
    for (a, b) in [
        ("int32", "int64"),
        ("uint32", "bool"),
        ("uint64", "int32"),
        ("string", "bytes"),
        ("fixed32", "sfixed32"),
        ("fixed64", "sfixed64"),
        ("sint32", "sint64"),
    ] {
        assert_eq!(changes(&ty(a), &ty(b)), [], "{a} -> {b}");
    }
    for (a, b) in [
        ("int32", "sint32"),
        ("int64", "fixed64"),
        ("float", "double"),
        ("fixed32", "fixed64"),
        ("string", "int32"),
    ] {
        assert_eq!(
            changes(&ty(a), &ty(b)),
            [Change::FieldScalarKindChanged],
            "{a} -> {b}"
        );
    }
    // An enum is a varint.
    let with_enum = "syntax = \"proto3\"; package demo; enum E { A = 0; } message M { E x = 1; }";
    assert_eq!(changes(&ty("int32"), with_enum), []);
    assert_eq!(
        changes(with_enum, &ty("sint32")),
        [Change::FieldScalarKindChanged]
    );
}

#[test]
fn a_field_cannot_change_between_scalar_message_and_map() {
    let scalar = m3("string x = 1; message N { string s = 1; }");
    let message = m3("N x = 1; message N { string s = 1; }");
    let map = m3("map<string, string> x = 1; message N { string s = 1; }");
    assert_eq!(changes(&scalar, &message), [Change::FieldKindChanged]);
    assert_eq!(changes(&message, &map), [Change::FieldKindChanged]);
    assert_eq!(changes(&map, &scalar), [Change::FieldKindChanged]);
    // A message field to another message type: its name counts.
    let other = m3("O x = 1; message N { string s = 1; } message O { string s = 1; }");
    assert_eq!(changes(&message, &other), [Change::FieldNamedTypeChanged]);
    // A map's key and value types follow the scalar rules.
    let long_values = m3("map<string, int64> x = 1;");
    let int_values = m3("map<string, int32> x = 1;");
    let string_values = m3("map<string, string> x = 1;");
    assert_eq!(changes(&long_values, &int_values), []);
    assert_eq!(
        changes(&long_values, &string_values),
        [Change::FieldScalarKindChanged]
    );
}

#[test]
fn labels_of_numbers_must_stay_but_strings_may_change() {
    // proto2: optional <-> repeated breaks a number (packed encodings differ), not a
    // string.
    assert_eq!(
        changes(&m2("optional int32 x = 1;"), &m2("repeated int32 x = 1;")),
        [Change::FieldNumericLabelChanged]
    );
    assert_eq!(
        changes(&m2("optional string x = 1;"), &m2("repeated string x = 1;")),
        []
    );
    // proto3 without a label has none to compare (as Confluent's parser sees it);
    // `optional` to `repeated` does.
    assert_eq!(
        changes(&m3("int32 x = 1;"), &m3("repeated int32 x = 1;")),
        []
    );
    assert_eq!(
        changes(&m3("optional int32 x = 1;"), &m3("repeated int32 x = 1;")),
        [Change::FieldNumericLabelChanged]
    );
    assert_eq!(
        changes(&m3("int32 x = 1;"), &m3("optional int32 x = 1;")),
        []
    );
}

#[test]
fn required_fields_cannot_come_or_go() {
    let v1 = m2("optional string a = 1;");
    let v2 = m2("optional string a = 1; required int32 b = 2;");
    assert_eq!(changes(&v1, &v2), [Change::RequiredFieldAdded]);
    assert_eq!(changes(&v2, &v1), [Change::RequiredFieldRemoved]);
    // Optional ones can.
    let v3 = m2("optional string a = 1; optional int32 b = 2;");
    assert_eq!(changes(&v1, &v3), []);
    assert_eq!(changes(&v3, &v1), []);
}

#[test]
fn messages_package_and_root_must_stay() {
    let v1 = "syntax = \"proto3\"; package demo; message M { N n = 1; message N {} } message K {}";
    // A nested message removed.
    let v2 = "syntax = \"proto3\"; package demo; message M { } message K {}";
    assert_eq!(changes(v1, v2), [Change::MessageRemoved]);
    // A top-level one removed; the root renamed (Confluent: its old name is missing).
    let v3 = "syntax = \"proto3\"; package demo; message M { N n = 1; message N {} }";
    assert_eq!(changes(v1, v3), [Change::MessageRemoved]);
    let renamed =
        "syntax = \"proto3\"; package demo; message Root { N n = 1; message N {} } message K {}";
    assert_eq!(changes(v1, renamed), [Change::MessageRemoved]);
    // Reordered: allowed (message indexes are read against the writer's schema).
    let reordered =
        "syntax = \"proto3\"; package demo; message K {} message M { N n = 1; message N {} }";
    assert_eq!(changes(v1, reordered), []);
    let moved = v1.replace("package demo;", "package demo.v2;");
    assert_eq!(changes(v1, &moved), [Change::PackageChanged]);
}

#[test]
fn oneofs_may_not_join_fields_that_were_apart() {
    let apart = m3("int32 a = 1; int32 b = 2; oneof o { int32 c = 3; }");
    // One field into a new oneof of its own: nothing was apart.
    let alone = m3("oneof p { int32 a = 1; } int32 b = 2; oneof o { int32 c = 3; }");
    assert_eq!(changes(&apart, &alone), []);
    // Into an existing oneof, or two fields together: they become exclusive.
    let joined = m3("int32 a = 1; oneof o { int32 b = 2; int32 c = 3; }");
    assert_eq!(
        changes(&apart, &joined),
        [Change::FieldMovedToExistingOneof]
    );
    let together = m3("oneof p { int32 a = 1; int32 b = 2; } oneof o { int32 c = 3; }");
    assert_eq!(
        changes(&apart, &together),
        [Change::MultipleFieldsMovedToOneof]
    );
    // Out of a oneof: allowed.
    assert_eq!(changes(&joined, &apart), []);
    // A oneof's member removed breaks; the whole oneof removed does not.
    let two = m3("oneof o { int32 c = 3; string d = 4; }");
    let one = m3("oneof o { int32 c = 3; }");
    assert_eq!(changes(&two, &one), [Change::OneofFieldRemoved]);
    assert_eq!(changes(&two, &m3("")), []);
    // A member's type still counts, in a oneof or out of it.
    let typed = m3("oneof o { string c = 3; string d = 4; }");
    assert_eq!(changes(&two, &typed), [Change::FieldScalarKindChanged]);
}

#[test]
fn imported_messages_are_compared_where_fields_use_them() {
    let customer = r#"syntax = "proto3"; package demo; import "address.proto";
        message Customer { Address home = 1; }"#;
    let address = |ty: &str| {
        vec![(
            "address.proto".to_string(),
            format!(
                "syntax = \"proto3\"; package demo; message Address {{ {ty} city = 1; Address next = 2; }}"
            ),
        )]
    };
    let w = compile(Resolved {
        text: customer,
        references: &address("string"),
    })
    .unwrap();
    let same = compile(Resolved {
        text: customer,
        references: &address("bytes"),
    })
    .unwrap();
    let broken = compile(Resolved {
        text: customer,
        references: &address("int64"),
    })
    .unwrap();
    assert_eq!(differences(&w, &same), []);
    let d = differences(&w, &broken);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].change, Change::FieldScalarKindChanged);
    assert_eq!(d[0].path, "#/Address/1");
    assert!(d[0].to_string().contains("field city (1)"), "{}", d[0]);
    // A message that refers to itself (or a long chain of them) ends.
    let chain: String = (0..3000)
        .map(|i| format!("message C{i} {{ C{} next = 1; }}\n", i + 1))
        .collect::<String>()
        + "message C3000 { C0 loop = 1; }";
    let refs = [(
        "chain.proto".to_string(),
        format!("syntax = \"proto3\"; {chain}"),
    )];
    let user = "syntax = \"proto3\"; import \"chain.proto\"; message U { C0 c = 1; }";
    std::thread::spawn(move || {
        assert_eq!(changes_with(user, user, &refs), []);
    })
    .join()
    .unwrap();
}

#[test]
fn reasons_name_the_change_and_the_field() {
    let w = compile(plain_text(&m3("message N { int32 x = 1; } N n = 1;"))).unwrap();
    let r = compile(plain_text(&m3("message N { string x = 1; } N n = 1;"))).unwrap();
    let d: Vec<String> = differences(&w, &r)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        d,
        [
            "FIELD_SCALAR_KIND_CHANGED at '#/M/N/1': field x (1) is int32 in the writer's schema, \
          string in the reader's (not the same wire encoding)"
        ]
    );
}

fn plain_text(text: &str) -> Resolved<'_> {
    Resolved {
        text,
        references: &[],
    }
}

fn proto(text: &str) -> NewSchema {
    NewSchema {
        schema_type: SchemaType::Protobuf,
        schema: text.to_string(),
        ..NewSchema::default()
    }
}

fn register(r: &mut Registry, subject: &str, s: &NewSchema) -> Result<(i32, i32), RegistryError> {
    let done = r.register(subject, s)?;
    for rec in &done.records {
        r.replay(&rec.key, rec.value.as_deref()).unwrap();
    }
    Ok((done.id, done.version))
}

fn set_level(r: &mut Registry, subject: &str, level: Compatibility) {
    for rec in r.set_compatibility(Some(subject), level).unwrap() {
        r.replay(&rec.key, rec.value.as_deref()).unwrap();
    }
}

#[test]
fn the_registry_checks_protobuf_by_its_level() {
    let mut r = Registry::default();
    let v1 = m2("optional string name = 1;");
    assert_eq!(
        register(&mut r, "users-value", &proto(&v1)).unwrap(),
        (1, 1)
    );
    // The same schema as a descriptor (confluent-kafka's Python serializer): the same id.
    let b64 = {
        let file = compile(plain_text(&v1)).unwrap();
        BASE64.encode(file.file_descriptor_proto().encode_to_vec())
    };
    let again = r.register("users-value", &proto(&b64)).unwrap();
    assert_eq!((again.id, again.version, again.records.len()), (1, 1, 0));
    assert_eq!(
        r.lookup("users-value", &proto(&b64), false).unwrap(),
        (1, 1)
    );
    // The stored text is the printed schema.
    assert!(
        r.schema(1)
            .unwrap()
            .schema
            .starts_with("syntax = \"proto2\";")
    );
    // BACKWARD: the new reader needs a field old data lacks: 409.
    let required = m2("optional string name = 1; required int64 id = 2;");
    let e = register(&mut r, "users-value", &proto(&required)).unwrap_err();
    assert_eq!((e.http_status(), e.error_code()), (409, 409));
    assert!(e.to_string().contains("REQUIRED_FIELD_ADDED"), "{e}");
    // A new optional field: fine, version 2.
    let v2 = m2("optional string name = 1; optional int64 id = 2;");
    assert_eq!(
        register(&mut r, "users-value", &proto(&v2)).unwrap(),
        (2, 2)
    );
    // FORWARD: old readers read new data. A new required field is one the old reader
    // does not know (Confluent refuses it: REQUIRED_FIELD_REMOVED from the writer's side).
    set_level(&mut r, "users-value", Compatibility::Forward);
    let v3 = m2("optional string name = 1; optional int64 id = 2; required bool ok = 3;");
    let e = register(&mut r, "users-value", &proto(&v3)).unwrap_err();
    assert!(e.to_string().contains("REQUIRED_FIELD_REMOVED"), "{e}");
    assert!(e.to_string().contains("writer: the new schema"), "{e}");
    let v3 = m2("optional string name = 1; optional int64 id = 2; optional bool ok = 3;");
    assert_eq!(
        register(&mut r, "users-value", &proto(&v3)).unwrap(),
        (3, 3)
    );
    // A type change breaks either way; the check endpoint says why.
    set_level(&mut r, "users-value", Compatibility::Full);
    let retyped = m2("optional string name = 1; optional double id = 2; optional bool ok = 3;");
    let problems = r
        .check("users-value", Some("latest"), &proto(&retyped))
        .unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems
            .iter()
            .all(|p| p.contains("FIELD_SCALAR_KIND_CHANGED at '#/M/2'"))
    );
    // A schema that does not compile: 422 42201 with the position.
    let e = register(&mut r, "users-value", &proto("message {")).unwrap_err();
    assert_eq!((e.http_status(), e.error_code()), (422, 42201));
    assert!(e.to_string().contains("schema:1:9"), "{e}");
}

#[test]
fn protobuf_references_resolve_through_subjects() {
    let mut r = Registry::default();
    let address = "syntax = \"proto3\"; package demo; message Address { string city = 1; }";
    let customer = r#"syntax = "proto3"; package demo; import "address.proto";
        message Customer { Address home = 1; }"#;
    let with_ref = NewSchema {
        references: vec![Reference {
            name: "address.proto".into(),
            subject: "address.proto".into(),
            version: 1,
        }],
        ..proto(customer)
    };
    // The referenced version must exist.
    assert_eq!(
        register(&mut r, "customers-value", &with_ref)
            .unwrap_err()
            .error_code(),
        42201
    );
    register(&mut r, "address.proto", &proto(address)).unwrap();
    let (id, version) = register(&mut r, "customers-value", &with_ref).unwrap();
    assert_eq!(version, 1);
    assert_eq!(r.referenced_by("address.proto", 1), [id]);
    // A new address version that breaks the field's type: the customer's check sees it
    // through its new reference.
    let address2 = "syntax = \"proto3\"; package demo; message Address { int64 city = 1; }";
    set_level(&mut r, "address.proto", Compatibility::None);
    register(&mut r, "address.proto", &proto(address2)).unwrap();
    let with_ref2 = NewSchema {
        references: vec![Reference {
            name: "address.proto".into(),
            subject: "address.proto".into(),
            version: 2,
        }],
        ..proto(customer)
    };
    let e = register(&mut r, "customers-value", &with_ref2).unwrap_err();
    assert!(e.to_string().contains("#/Address/1"), "{e}");
}
