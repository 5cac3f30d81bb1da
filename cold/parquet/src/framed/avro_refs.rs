//! A schema with Confluent references made self-contained: each named type from a
//! referenced schema is written out in full where the schema first uses it.
//!
//! apache-avro's `parse_str_with_list` resolves references, but serializing its `Schema`
//! back leaves each referenced type as a bare name (and turns a `uuid` on a `fixed(16)`
//! into one on a `string`), so the inlining is done on the JSON itself.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::avro_schema::MAX_DEPTH;

/// Named types of the referenced schemas, by full name: each with an explicit namespace
/// so that it means the same wherever it is inlined.
type Defs = HashMap<String, Value>;

/// `text` with the named types of `references` (pairs of reference name and schema text,
/// as the registry keeps them) written out where first used. The result is one
/// self-contained schema for [`super::AvroColumns`]. As in Avro itself, a type without a
/// namespace can be named only once from inside a namespace (where a bare name means
/// one in that namespace): a second use there fails to parse.
pub fn inline_references(text: &str, references: &[(String, String)]) -> Result<String, String> {
    let mut defs = Defs::new();
    for (name, reference) in references {
        let json: Value = serde_json::from_str(reference)
            .map_err(|e| format!("reference {name} is not JSON: {e}"))?;
        collect(&json, None, &mut defs, 1).map_err(|e| format!("reference {name}: {e}"))?;
    }
    let mut json: Value =
        serde_json::from_str(text).map_err(|e| format!("the schema is not JSON: {e}"))?;
    let mut defined = HashSet::new();
    inline(&mut json, None, &defs, &mut defined, 1)?;
    let out = json.to_string();
    // The whole must now parse alone.
    apache_avro::Schema::parse_str(&out)
        .map_err(|e| format!("the schema with its references inlined: {e}"))?;
    Ok(out)
}

fn qualify(
    name: &str,
    explicit: Option<&str>,
    enclosing: Option<&str>,
) -> (String, Option<String>) {
    if let Some((ns, _)) = name.rsplit_once('.') {
        return (name.to_string(), Some(ns.to_string()));
    }
    match explicit
        .map(|n| (!n.is_empty()).then_some(n))
        .unwrap_or(enclosing)
    {
        Some(ns) => (format!("{ns}.{name}"), Some(ns.to_string())),
        None => (name.to_string(), None),
    }
}

fn is_named(o: &Map<String, Value>) -> bool {
    matches!(
        o.get("type").and_then(Value::as_str),
        Some("record" | "error" | "enum" | "fixed")
    )
}

/// The named type `o` defines: its full name, and the namespace inside it.
fn name_of(o: &Map<String, Value>, ns: Option<&str>) -> Option<(String, Option<String>)> {
    let name = o.get("name")?.as_str()?;
    Some(qualify(
        name,
        o.get("namespace").and_then(Value::as_str),
        ns,
    ))
}

/// The places inside a type where other types sit.
fn children(o: &mut Map<String, Value>) -> Vec<&mut Value> {
    let mut out = Vec::new();
    for (k, v) in o.iter_mut() {
        match k.as_str() {
            "items" | "values" => out.push(v),
            "type" if !v.is_string() => out.push(v),
            "fields" => {
                if let Some(fields) = v.as_array_mut() {
                    for f in fields {
                        if let Some(t) = f.as_object_mut().and_then(|f| f.get_mut("type")) {
                            out.push(t);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn collect(json: &Value, ns: Option<&str>, defs: &mut Defs, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    let mut json = json.clone();
    match &mut json {
        Value::Array(branches) => {
            for b in branches {
                collect(b, ns, defs, depth + 1)?;
            }
        }
        Value::Object(o) => {
            let mut inner = ns.map(str::to_string);
            if is_named(o)
                && let Some((full, namespace)) = name_of(o, ns)
            {
                let mut def = o.clone();
                let simple = full.rsplit('.').next().unwrap_or(&full).to_string();
                def.insert("name".into(), Value::String(simple));
                def.insert(
                    "namespace".into(),
                    Value::String(namespace.clone().unwrap_or_default()),
                );
                defs.insert(full, Value::Object(def));
                inner = namespace;
            }
            for c in children(o) {
                collect(c, inner.as_deref(), defs, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(())
}

const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

fn inline(
    json: &mut Value,
    ns: Option<&str>,
    defs: &Defs,
    defined: &mut HashSet<String>,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("the schema nests deeper than {MAX_DEPTH} levels"));
    }
    match json {
        Value::String(name) if !PRIMITIVES.contains(&name.as_str()) => {
            let candidates = match ns {
                Some(ns) if !name.contains('.') => vec![format!("{ns}.{name}"), name.clone()],
                _ => vec![name.clone()],
            };
            if candidates.iter().any(|c| defined.contains(c)) {
                return Ok(());
            }
            if let Some((full, def)) = candidates
                .iter()
                .find_map(|c| defs.get(c).map(|d| (c.clone(), d)))
            {
                *json = def.clone();
                let inner = full.rsplit_once('.').map(|(ns, _)| ns.to_string());
                defined.insert(full);
                if let Value::Object(o) = json {
                    for c in children(o) {
                        inline(c, inner.as_deref(), defs, defined, depth + 1)?;
                    }
                }
            }
        }
        Value::Array(branches) => {
            for b in branches {
                inline(b, ns, defs, defined, depth + 1)?;
            }
        }
        Value::Object(o) => {
            let mut inner = ns.map(str::to_string);
            if is_named(o)
                && let Some((full, namespace)) = name_of(o, ns)
            {
                defined.insert(full);
                inner = namespace;
            } else if let Some(t) = o.get_mut("type").filter(|t| t.is_string()) {
                // {"type": "Address"}: a reference in an object.
                inline(t, ns, defs, defined, depth + 1)?;
            }
            for c in children(o) {
                inline(c, inner.as_deref(), defs, defined, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(())
}
