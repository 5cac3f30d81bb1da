//! What each schema type must answer: a schema's identity (the text compared to find
//! whether it is already registered), whether data written with one schema can be read
//! with another, and the text served for a `?format=`. Avro is in [`avro`], Protobuf in
//! [`protobuf`], JSON Schema in [`json`].

use crate::SchemaType;
use crate::{avro, json, protobuf};

/// A schema's text and the texts of the schemas it references, by the name it uses for
/// each (resolved from the references' subjects and versions).
#[derive(Clone, Copy, Debug)]
pub struct Resolved<'a> {
    pub text: &'a str,
    pub references: &'a [(String, String)],
}

/// The text that identifies `schema` (the same schema given twice, spaced or ordered
/// differently, has the same identity), or why it is not a valid schema of its type.
pub fn identity(ty: SchemaType, schema: Resolved<'_>) -> Result<String, String> {
    match ty {
        SchemaType::Avro => avro::identity(schema),
        SchemaType::Protobuf => protobuf::identity(schema),
        SchemaType::Json => json::identity(schema),
    }
}

/// Whether data written with `writer` can be read with `reader`; what breaks if not.
pub fn can_read(
    ty: SchemaType,
    writer: Resolved<'_>,
    reader: Resolved<'_>,
) -> Result<(), Vec<String>> {
    match ty {
        SchemaType::Avro => avro::can_read(writer, reader),
        SchemaType::Protobuf => protobuf::can_read(writer, reader),
        SchemaType::Json => json::can_read(writer, reader),
    }
}

/// A stored schema as Confluent serves it for `?format=` (`GET /schemas/ids/{id}`, a
/// subject's versions): `serialized` gives a Protobuf schema's base64
/// `FileDescriptorProto`; anything else (none, `resolved`, a format this registry does
/// not know, as Confluent's) gives the stored text.
pub fn render(
    ty: SchemaType,
    schema: Resolved<'_>,
    format: Option<&str>,
) -> Result<String, String> {
    match (ty, format.map(str::trim)) {
        (SchemaType::Protobuf, Some(f)) if f.eq_ignore_ascii_case("serialized") => {
            protobuf::serialized(schema)
        }
        _ => Ok(schema.text.to_string()),
    }
}
