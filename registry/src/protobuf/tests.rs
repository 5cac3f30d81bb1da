//! Protobuf schemas as clients send them: .proto text and base64 descriptors, imports
//! through references, identities that compile back, Confluent's message indexes, and
//! input that must fail cleanly.

use super::*;
use crate::SchemaType;
use crate::format::{self, Resolved};

fn plain(text: &str) -> Resolved<'_> {
    Resolved {
        text,
        references: &[],
    }
}

/// What confluent-kafka's Python `ProtobufSerializer` sends: the base64 of the
/// `FileDescriptorProto` protoc compiled (its own file name, json names only where the
/// .proto set them, no source positions).
fn as_descriptor(text: &str, name: &str, references: &[(String, String)]) -> String {
    let file = compile(Resolved { text, references }).unwrap();
    let mut proto = file.file_descriptor_proto().clone();
    proto.name = Some(name.to_string());
    proto.source_code_info = None;
    strip_json_names(&mut proto.message_type);
    BASE64.encode(proto.encode_to_vec())
}

fn strip_json_names(messages: &mut [DescriptorProto]) {
    for m in messages {
        for f in &mut m.field {
            if f.json_name.as_deref() == Some(print::default_json_name(f.name()).as_str()) {
                f.json_name = None;
            }
        }
        strip_json_names(&mut m.nested_type);
    }
}

/// The descriptor as its .proto text decides it.
fn normalized(file: &FileDescriptor) -> FileDescriptorProto {
    super::normalized(file.file_descriptor_proto())
}

/// `text` printed compiles to the descriptor `text` compiles to, and prints the same.
fn assert_round_trip(text: &str, references: &[(String, String)]) {
    let first = compile(Resolved { text, references }).unwrap();
    let printed = print::file(first.file_descriptor_proto());
    let second = compile(Resolved {
        text: &printed,
        references,
    })
    .unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(normalized(&first), normalized(&second), "{printed}");
    assert_eq!(print::file(second.file_descriptor_proto()), printed);
}

const USER: &str = r#"syntax = "proto3";
package demo;

import "google/protobuf/timestamp.proto";

option java_package = "com.example.demo";
option go_package = "example.com/demo";

// A user, as the orders service writes it.
message User {
  string name = 1;
  optional int32 age = 2;
  map<string, int64> tags = 3;
  message Inner { bool x = 1; }
  oneof contact {
    string email = 4;
    string phone = 5;
  }
  google.protobuf.Timestamp created_at = 6;
  repeated Inner inners = 7 [packed = false, deprecated = true];
  string my_field = 8 [json_name = "other"];
  Kind kind = 9;
  enum Kind {
    KIND_UNSPECIFIED = 0;
    ADMIN = 1;
    reserved 5 to 10, 20;
    reserved "OLD";
  }
  reserved 100 to max;
  reserved "gone";
}

message Team {
  repeated User members = 1;
}

service Users {
  rpc Get(Team) returns (stream User);
}
"#;

const PROTO2: &str = r#"syntax = "proto2";
package legacy;

message Event {
  required string id = 1;
  optional bytes blob = 2 [default = "a\000\"b"];
  optional float ratio = 3 [default = -inf];
  optional string note = 4 [default = "say \"hi\"\n"];
  optional Level level = 5 [default = HIGH];
  optional group Extra = 6 {
    optional int32 y = 1;
  }
  repeated int32 samples = 7 [packed = true];
  extensions 100 to 199;
  enum Level {
    option allow_alias = true;
    LOW = 0;
    HIGH = 1;
    TOP = 1 [deprecated = true];
  }
}

extend Event {
  optional string origin = 100;
}
"#;

#[test]
fn text_and_its_descriptor_have_one_identity() {
    let text = identity(plain(USER)).unwrap();
    let b64 = as_descriptor(USER, "user.proto", &[]);
    assert_eq!(identity(plain(&b64)).unwrap(), text);
    // Spacing and comments do not count; the identity is its own identity.
    let spaced = USER
        .replace("  ", "    ")
        .replace("// A user", "/* a user */ // A user");
    assert_eq!(identity(plain(&spaced)).unwrap(), text);
    assert_eq!(identity(plain(&text)).unwrap(), text);
    assert!(text.contains("map<string, int64> tags = 3;"), "{text}");
    assert!(text.contains("optional int32 age = 2;"), "{text}");
    assert!(text.contains("json_name = \"other\""), "{text}");
    assert!(!text.contains("json_name = \"myField\""), "{text}");
    // A base64 descriptor wrapped over lines is still one.
    let wrapped: String = b64
        .as_bytes()
        .chunks(60)
        .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
        .collect();
    assert_eq!(identity(plain(&wrapped)).unwrap(), text);
}

#[test]
fn printed_schemas_compile_back_to_their_descriptors() {
    assert_round_trip(USER, &[]);
    assert_round_trip(PROTO2, &[]);
    // A nested message declared before a map field keeps its place among the nested
    // types (Confluent's message indexes count them).
    assert_round_trip(
        "syntax = \"proto3\"; message A { message B {} map<string, B> m = 1; message C {} int32 x = 2; }",
        &[],
    );
    assert_round_trip(
        "syntax = \"proto2\"; message A { oneof o { int32 a = 1; group G = 2 { optional int32 z = 1; } } }",
        &[],
    );
    assert_round_trip(
        "syntax = \"proto3\"; import public \"google/protobuf/empty.proto\"; message A {}",
        &[],
    );
    let refs = [("address.proto".to_string(), ADDRESS.to_string())];
    assert_round_trip(WITH_ADDRESS, &refs);
}

const ADDRESS: &str = r#"syntax = "proto3";
package demo;
message Address {
  string city = 1;
}
"#;

const WITH_ADDRESS: &str = r#"syntax = "proto3";
package demo;
import "address.proto";
message Customer {
  string name = 1;
  Address home = 2;
}
"#;

#[test]
fn references_supply_imported_files() {
    let refs = [("address.proto".to_string(), ADDRESS.to_string())];
    let file = compile(Resolved {
        text: WITH_ADDRESS,
        references: &refs,
    })
    .unwrap();
    let home = file
        .messages()
        .next()
        .unwrap()
        .get_field_by_name("home")
        .unwrap();
    assert_eq!(
        home.kind().as_message().unwrap().full_name(),
        "demo.Address"
    );
    // A reference may come as a descriptor, too (named by its import path).
    let refs_b64 = [(
        "address.proto".to_string(),
        as_descriptor(ADDRESS, "whatever.proto", &[]),
    )];
    let with_b64 = Resolved {
        text: WITH_ADDRESS,
        references: &refs_b64,
    };
    assert_eq!(
        identity(with_b64).unwrap(),
        identity(Resolved {
            text: WITH_ADDRESS,
            references: &refs
        })
        .unwrap()
    );
    // Without it: the import is not found.
    let e = compile(plain(WITH_ADDRESS)).unwrap_err();
    assert!(e.contains("import 'address.proto' not found"), "{e}");
    assert!(e.starts_with("schema:3:1:"), "{e}");
}

#[test]
fn a_schema_that_does_not_compile_says_where() {
    let e = compile(plain(
        "syntax = \"proto3\";\nmessage A {\n  int32 x = 1\n}\n",
    ))
    .unwrap_err();
    assert_eq!(e, "schema:4:1: expected ';' or '[', but found '}'");
    let e = compile(plain(
        "syntax = \"proto3\";\nmessage A {\n  Foo x = 1;\n}\n",
    ))
    .unwrap_err();
    assert_eq!(e, "schema:3:3: name 'Foo' is not defined");
    // In a reference: its name.
    let refs = [(
        "address.proto".to_string(),
        "syntax = \"proto3\";\nmessage Address { strin city = 1; }".to_string(),
    )];
    let e = compile(Resolved {
        text: WITH_ADDRESS,
        references: &refs,
    })
    .unwrap_err();
    assert!(e.starts_with("address.proto:2:19:"), "{e}");
    // Not base64 of a descriptor, and not text.
    let e = compile(plain("AAAA")).unwrap_err();
    assert!(e.contains("not a serialized FileDescriptorProto"), "{e}");
    // Two fields with one number.
    assert!(
        compile(plain(
            "syntax = \"proto3\"; message A { int32 a = 1; int32 b = 1; }"
        ))
        .is_err()
    );
    // Editions are refused by name.
    let e = compile(plain("edition = \"2023\"; message A {}")).unwrap_err();
    assert!(e.contains("edition"), "{e}");
}

#[test]
fn nesting_bombs_fail_without_overflowing_the_stack() {
    // Run where a deep recursion would overflow: a spawned thread's default stack.
    std::thread::spawn(|| {
        let n = 10_000;
        let text = format!(
            "syntax = \"proto3\"; {} {}",
            "message M { ".repeat(n),
            "}".repeat(n)
        );
        let e = compile(plain(&text)).unwrap_err();
        assert!(e.contains("nested more than 64 levels"), "{e}");
        // Under the bracket limit, protox's own (31 messages, as protoc).
        let text = format!(
            "syntax = \"proto3\"; {} {}",
            "message M { ".repeat(40),
            "}".repeat(40)
        );
        assert!(compile(plain(&text)).is_err());
        // An option value nested deep.
        let text = format!(
            "syntax = \"proto3\"; option java_package = {}{};",
            "{a:".repeat(n),
            "}".repeat(n)
        );
        assert!(compile(plain(&text)).is_err());
        // Brackets in strings and comments do not count.
        let text = format!(
            "syntax = \"proto3\"; // {}\nmessage A {{ string s = 1 [json_name = \"{}\"]; }}",
            "{".repeat(100),
            "(".repeat(100)
        );
        compile(plain(&text)).unwrap();
        // A descriptor nested deep: prost's decoder or the nesting check stops it.
        let mut message = DescriptorProto {
            name: Some("M".into()),
            ..Default::default()
        };
        for _ in 0..90 {
            message = DescriptorProto {
                name: Some("M".into()),
                nested_type: vec![message],
                ..Default::default()
            };
        }
        let proto = FileDescriptorProto {
            name: Some("x.proto".into()),
            message_type: vec![message],
            ..Default::default()
        };
        let e = compile(plain(&BASE64.encode(proto.encode_to_vec()))).unwrap_err();
        assert!(e.contains("nested more than 64"), "{e}");
    })
    .join()
    .unwrap();
}

#[test]
fn message_indexes_follow_confluents_path() {
    let text = r#"syntax = "proto3";
message First { int32 a = 1; }
message Second {
  map<string, string> m = 1;
  message N0 { message Deep {} }
  message N1 {}
}
"#;
    let file = compile(plain(text)).unwrap();
    let name = |ix: &[i32]| message_by_indexes(&file, ix).map(|m| m.full_name().to_string());
    assert_eq!(name(&[]).as_deref(), Some("First"));
    assert_eq!(name(&[0]).as_deref(), Some("First"));
    assert_eq!(name(&[1]).as_deref(), Some("Second"));
    // The map's entry type is not counted.
    assert_eq!(name(&[1, 0]).as_deref(), Some("Second.N0"));
    assert_eq!(name(&[1, 1]).as_deref(), Some("Second.N1"));
    assert_eq!(name(&[1, 0, 0]).as_deref(), Some("Second.N0.Deep"));
    assert_eq!(name(&[2]), None);
    assert_eq!(name(&[1, 2]), None);
    assert_eq!(name(&[-1]), None);
}

#[test]
fn serialized_format_is_the_files_descriptor() {
    let stored = identity(plain(USER)).unwrap();
    let b64 = format::render(SchemaType::Protobuf, plain(&stored), Some("serialized")).unwrap();
    let proto = FileDescriptorProto::decode(BASE64.decode(b64).unwrap().as_slice()).unwrap();
    assert_eq!(proto.name(), MAIN_FILE);
    assert_eq!(proto.source_code_info, None);
    assert_eq!(
        proto,
        FileDescriptorProto {
            source_code_info: None,
            ..compile(plain(&stored))
                .unwrap()
                .file_descriptor_proto()
                .clone()
        }
    );
    // Loads into a pool as clients load it.
    let mut pool = DescriptorPool::global();
    pool.add_file_descriptor_proto(proto)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(pool.get_message_by_name("demo.User").is_some());
    // The default format, and formats this registry does not know: the text.
    for f in [None, Some(""), Some("resolved"), Some("ignore_extensions")] {
        assert_eq!(
            format::render(SchemaType::Protobuf, plain(&stored), f).unwrap(),
            stored
        );
    }
    let avro = r#"{"type":"string"}"#;
    assert_eq!(
        format::render(SchemaType::Avro, plain(avro), Some("serialized")).unwrap(),
        avro
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// A descriptor damaged anywhere is refused with an error, or gives an identity that
    /// compiles and is its own identity: never a panic, never a stored text that fails.
    #[test]
    fn damaged_descriptors_fail_cleanly_or_round_trip(
        damage in proptest::collection::vec(
            (proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()),
            1..6,
        )
    ) {
        let mut bytes = BASE64.decode(as_descriptor(USER, "user.proto", &[])).unwrap();
        for (at, byte) in damage {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let b64 = BASE64.encode(&bytes);
        if let Ok(text) = identity(plain(&b64)) {
            // The text is the damaged schema (as .proto text decides it), not another.
            proptest::prop_assert_eq!(
                normalized(&compile(plain(&text)).unwrap()),
                normalized(&compile(plain(&b64)).unwrap())
            );
            proptest::prop_assert_eq!(identity(plain(&text)), Ok(text.clone()));
        }
    }

    /// The same for .proto text with characters changed.
    #[test]
    fn damaged_text_fails_cleanly_or_round_trips(
        damage in proptest::collection::vec(
            (proptest::prelude::any::<proptest::sample::Index>(), 0x20u8..0x7f),
            1..6,
        )
    ) {
        let mut bytes = PROTO2.as_bytes().to_vec();
        for (at, byte) in damage {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let text = String::from_utf8(bytes).unwrap();
        if let Ok(id) = identity(plain(&text)) {
            proptest::prop_assert_eq!(identity(plain(&id)), Ok(id.clone()));
        }
    }
}

#[test]
fn a_descriptor_with_an_unknown_syntax_is_refused() {
    // Found by the property test above: prost-reflect 0.16 panics on it.
    let file = compile(plain(USER)).unwrap();
    let mut proto = file.file_descriptor_proto().clone();
    proto.syntax = Some("\0roto3".into());
    let e = compile(plain(&BASE64.encode(proto.encode_to_vec()))).unwrap_err();
    assert_eq!(e, "schema: unknown syntax \"\\0roto3\" (proto2 or proto3)");
}

#[test]
fn a_descriptor_with_a_broken_map_entry_is_refused() {
    let file = compile(plain(USER)).unwrap();
    let mut proto = file.file_descriptor_proto().clone();
    let entry = &mut proto.message_type[0].nested_type[0];
    assert_eq!(entry.name(), "TagsEntry");
    entry.field.retain(|f| f.number() != 2);
    let e = compile(plain(&BASE64.encode(proto.encode_to_vec()))).unwrap_err();
    assert_eq!(
        e,
        "schema: map entry demo.User.TagsEntry lacks its key or value field"
    );
}

#[test]
fn custom_options_are_dropped_not_refused() {
    // A client's descriptor whose options were all custom ones: prost-types keeps an
    // empty options message. The schema is taken; its text has no options.
    let file = compile(plain(USER)).unwrap();
    let mut proto = file.file_descriptor_proto().clone();
    proto.options = Some(prost_types::FileOptions::default());
    proto.message_type[0].options = Some(prost_types::MessageOptions::default());
    proto.message_type[0].field[0].options = Some(prost_types::FieldOptions::default());
    let text = identity(plain(&BASE64.encode(proto.encode_to_vec()))).unwrap();
    let expected = identity(plain(USER)).unwrap().replace(
        "option java_package = \"com.example.demo\";\noption go_package = \"example.com/demo\";\n\n",
        "",
    );
    assert_eq!(text, expected);
}
