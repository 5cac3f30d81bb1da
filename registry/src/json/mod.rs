//! JSON Schema schemas, through the jsonschema crate: parsing (checked against the
//! meta-schema of the draft its `$schema` names; draft 7 when it names none, as
//! Confluent's registry), references as in-memory resources (no retrieval), identity,
//! validators for values, and Confluent's compatibility rules ([`compat`]).
//!
//! A schema is untrusted input: its JSON may nest at most [`MAX_JSON_DEPTH`] levels and
//! its schemas at most [`MAX_DEPTH`], checked before anything recurses over them.

mod compat;
mod docs;
mod view;

use jsonschema::{Draft, Resource, Validator};
use serde_json::Value;

use crate::format::Resolved;
use docs::Docs;

/// How deep schemas may nest in a schema (a property's schema inside an object's, an
/// item's inside an array's, ...): deeper is refused, so nothing that walks a schema
/// recurses without bound.
pub const MAX_DEPTH: usize = 64;

/// How deep a schema's JSON (objects and arrays) may nest; checked on the text before it
/// is parsed, so a nesting bomb costs one pass over its bytes.
pub const MAX_JSON_DEPTH: usize = 128;

/// A schema and the schemas it references, parsed: the root first, then each reference
/// under the name its `$ref`s use.
#[derive(Debug)]
struct Parsed {
    root: Value,
    draft: Draft,
    references: Vec<(String, Value)>,
}

/// Refuses JSON nested deeper than [`MAX_JSON_DEPTH`], in one pass and without recursion
/// (serde_json's own limit would do too, with a message about recursion).
fn check_nesting(what: &str, text: &str) -> Result<(), String> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(format!(
                        "{what} nests JSON more than {MAX_JSON_DEPTH} levels deep"
                    ));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn parse_json(what: &str, text: &str) -> Result<Value, String> {
    check_nesting(what, text)?;
    serde_json::from_str(text).map_err(|e| format!("{what} is not JSON: {e}"))
}

/// The draft `schema` is written in: its `$schema`, else draft 7 (Confluent's default).
fn draft_of(what: &str, schema: &Value) -> Result<Draft, String> {
    match Draft::Draft7.detect(schema) {
        Draft::Unknown => Err(format!(
            "{what} names an unknown $schema {} (drafts 4, 6, 7, 2019-09 and 2020-12 are known)",
            schema.get("$schema").unwrap_or(&Value::Null)
        )),
        draft => Ok(draft),
    }
}

fn draft_name(draft: Draft) -> &'static str {
    match draft {
        Draft::Draft4 => "draft 4",
        Draft::Draft6 => "draft 6",
        Draft::Draft7 => "draft 7",
        Draft::Draft201909 => "draft 2019-09",
        Draft::Draft202012 => "draft 2020-12",
        _ => "an unknown draft",
    }
}

/// Parses `schema` and its references (JSON, nesting bounded, drafts known).
fn parse(schema: Resolved<'_>) -> Result<Parsed, String> {
    let root = parse_json("the schema", schema.text)?;
    let draft = draft_of("the schema", &root)?;
    let mut references = Vec::with_capacity(schema.references.len());
    for (name, text) in schema.references {
        let what = format!("reference '{name}'");
        let value = parse_json(&what, text)?;
        draft_of(&what, &value)?;
        references.push((name.clone(), value));
    }
    Ok(Parsed {
        root,
        draft,
        references,
    })
}

/// A validator for `parsed`: its schema checked against its draft's meta-schema, each
/// reference an in-memory resource under the URIs its name resolves to, and nothing
/// retrieved from anywhere else, so a `$ref` to anything else is refused here.
fn build(parsed: &Parsed, docs: &Docs<'_>) -> Result<Validator, String> {
    let mut resources = jsonschema::Registry::new();
    for (uri, value) in docs.reference_uris() {
        let resource: Resource = Draft::Draft7
            .detect(value)
            .create_resource((*value).clone());
        resources = resources
            .add(uri, resource)
            .map_err(|e| format!("reference at '{uri}': {e}"))?;
    }
    let resources = resources.prepare().map_err(|e| e.to_string())?;
    jsonschema::options()
        .with_draft(parsed.draft)
        .offline()
        .with_registry(&resources)
        .build(&parsed.root)
        .map_err(|e| {
            if let jsonschema::error::ValidationErrorKind::Referencing(r) = e.kind() {
                return format!("a $ref does not resolve: {r}");
            }
            let at = e.instance_path().as_str();
            let at = if at.is_empty() {
                String::new()
            } else {
                format!(" (at {at})")
            };
            format!(
                "not a valid JSON Schema ({}): {e}{at}",
                draft_name(parsed.draft)
            )
        })
}

/// Parses and checks `schema` (see [`build`]); the parsed schema and its validator.
fn checked(schema: Resolved<'_>) -> Result<(Parsed, Validator), String> {
    let parsed = parse(schema)?;
    let docs = Docs::new(&parsed)?;
    let validator = build(&parsed, &docs)?;
    // After the validator, whose messages about a `$ref` are the more precise.
    compat::check_refs(&docs)?;
    Ok((parsed, validator))
}

/// A validator of values against `schema` (a registered schema and its references).
pub fn validator(schema: Resolved<'_>) -> Result<Validator, String> {
    checked(schema).map(|(_, v)| v)
}

/// The schema's JSON, compact and with each object's members sorted by name (JSON
/// objects are unordered; arrays keep their order), once it is checked to be a valid
/// JSON Schema whose references resolve.
pub fn identity(schema: Resolved<'_>) -> Result<String, String> {
    let (parsed, _) = checked(schema)?;
    let mut out = String::with_capacity(schema.text.len());
    write_sorted(&parsed.root, &mut out);
    Ok(out)
}

/// Writes `value` compactly with sorted object keys (recursion bounded by
/// [`MAX_JSON_DEPTH`], checked when it was parsed).
pub(crate) fn write_sorted(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_sorted(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_sorted(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Confluent's JSON Schema compatibility: can a reader with `reader` read what was
/// written with `writer`, that is, does `reader` accept everything `writer` accepted.
pub fn can_read(writer: Resolved<'_>, reader: Resolved<'_>) -> Result<(), Vec<String>> {
    let w = parse(writer).map_err(|e| vec![format!("the writer's schema: {e}")])?;
    let r = parse(reader).map_err(|e| vec![format!("the reader's schema: {e}")])?;
    let wd = Docs::new(&w).map_err(|e| vec![format!("the writer's schema: {e}")])?;
    let rd = Docs::new(&r).map_err(|e| vec![format!("the reader's schema: {e}")])?;
    compat::check(&wd, &rd)
}

#[cfg(test)]
mod compat_tests;
#[cfg(test)]
mod tests;
