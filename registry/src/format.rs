//! What each schema type must answer: a schema's identity (the text compared to find
//! whether it is already registered) and whether data written with one schema can be read
//! with another. Avro is in [`avro`]; Protobuf and JSON Schema are refused until they are
//! built, with a message saying so.

use crate::SchemaType;
use crate::avro;

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
        SchemaType::Json => crate::json::identity(schema),
        other => Err(not_built(other)),
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
        SchemaType::Json => crate::json::can_read(writer, reader),
        other => Err(vec![not_built(other)]),
    }
}

fn not_built(ty: SchemaType) -> String {
    format!(
        "{} schemas are not supported yet (this registry takes AVRO schemas only)",
        ty.name()
    )
}
