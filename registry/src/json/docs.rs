//! A schema's documents (the schema and its references) indexed by URI, for `$ref`s:
//! each resource by its URI (a reference by its name; a subschema by its `$id`), each
//! anchor by `uri#name`. Walking them also bounds their nesting ([`MAX_DEPTH`]).

use std::collections::HashMap;

use jsonschema::{Draft, Uri};
use serde_json::Value;

use super::{MAX_DEPTH, Parsed};

/// Where a schema sits: the value and the index of its base URI in [`Docs`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Target<'a> {
    pub v: &'a Value,
    pub base: u32,
}

/// The root's base URI when it has no `$id` (the jsonschema crate's default, so a `$ref`
/// resolves here as it does in the validator).
const DEFAULT_BASE: &str = "json-schema:///";

/// A value's address: values do not move while [`Docs`] borrows them, so it names one.
pub(super) fn addr(v: &Value) -> usize {
    std::ptr::from_ref(v) as usize
}

#[derive(Debug)]
pub(super) struct Docs<'a> {
    pub root: Target<'a>,
    /// Base URIs and the draft of the resource each names.
    bases: Vec<(String, Draft)>,
    index: HashMap<String, Target<'a>>,
    /// The base of each subschema that sets one with `$id`, by address.
    ids: HashMap<usize, u32>,
    /// The URIs each reference is known by, for the validator's registry.
    reference_uris: Vec<(String, &'a Value)>,
    /// Every schema with a `$ref`.
    pub refs: Vec<Target<'a>>,
}

/// The subschemas directly inside `v`, each with its path segment: the keywords whose
/// values are schemas, maps of schemas or arrays of schemas, in every draft.
pub(super) fn subschemas(v: &Value) -> Vec<(String, &Value)> {
    const ONE: &[&str] = &[
        "additionalItems",
        "additionalProperties",
        "contains",
        "contentSchema",
        "else",
        "if",
        "items",
        "not",
        "propertyNames",
        "then",
        "unevaluatedItems",
        "unevaluatedProperties",
    ];
    const MAP: &[&str] = &[
        "$defs",
        "definitions",
        "dependencies",
        "dependentSchemas",
        "patternProperties",
        "properties",
    ];
    const LIST: &[&str] = &["allOf", "anyOf", "items", "oneOf", "prefixItems"];
    let is_schema = |v: &Value| v.is_object() || v.is_boolean();
    let Value::Object(m) = v else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for k in ONE {
        if let Some(s) = m.get(*k).filter(|s| is_schema(s)) {
            out.push(((*k).to_string(), s));
        }
    }
    for k in MAP {
        if let Some(Value::Object(map)) = m.get(*k) {
            for (name, s) in map.iter().filter(|(_, s)| is_schema(s)) {
                out.push((format!("{k}/{name}"), s));
            }
        }
    }
    for k in LIST {
        if let Some(Value::Array(list)) = m.get(*k) {
            for (i, s) in list.iter().enumerate().filter(|(_, s)| is_schema(s)) {
                out.push((format!("{k}/{i}"), s));
            }
        }
    }
    out
}

/// The `$id` of `v` in `draft` (`id` in draft 4).
fn id_of(draft: Draft, v: &Value) -> Option<&str> {
    let key = if draft == Draft::Draft4 { "id" } else { "$id" };
    v.get(key).and_then(Value::as_str)
}

fn resolve(base: &str, reference: &str) -> Result<String, String> {
    let base = Uri::parse(base).map_err(|e| format!("base URI '{base}': {e}"))?;
    jsonschema::uri::resolve_against(&base, reference)
        .map(|u| u.as_str().to_string())
        .map_err(|e| format!("'{reference}' is not a URI reference: {e}"))
}

fn without_fragment(uri: &str) -> &str {
    uri.split_once('#').map_or(uri, |(u, _)| u)
}

/// `%XX` escapes decoded (a JSON pointer in a URI fragment is percent-encoded).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl<'a> Docs<'a> {
    /// Indexes `parsed`; refuses schemas nested deeper than [`MAX_DEPTH`] and reference
    /// names that are not URI references.
    pub fn new(parsed: &'a Parsed) -> Result<Docs<'a>, String> {
        let mut docs = Docs {
            root: Target {
                v: &parsed.root,
                base: 0,
            },
            bases: Vec::new(),
            index: HashMap::new(),
            ids: HashMap::new(),
            reference_uris: Vec::new(),
            refs: Vec::new(),
        };
        let root_base = match id_of(parsed.draft, &parsed.root) {
            Some(id) if !id.starts_with('#') => {
                without_fragment(&resolve(DEFAULT_BASE, id)?).to_string()
            }
            _ => DEFAULT_BASE.to_string(),
        };
        let base = docs.add(&root_base, parsed.draft, &parsed.root);
        docs.root.base = base;
        docs.walk(&parsed.root, base, "the schema")?;
        for (name, value) in &parsed.references {
            let draft = Draft::Draft7.detect(value);
            let what = format!("reference '{name}'");
            // As the validator resolves it: against the default base, and against the
            // root's `$id` when it has one (`$ref: "address.json"` in a schema whose
            // `$id` is `https://example.com/person.json`).
            let mut uris = vec![without_fragment(&resolve(DEFAULT_BASE, name)?).to_string()];
            let beside = without_fragment(&resolve(&root_base, name)?).to_string();
            if beside != uris[0] {
                uris.push(beside);
            }
            let mut first = None;
            for uri in uris {
                let base = docs.add(&uri, draft, value);
                first.get_or_insert(base);
                docs.reference_uris.push((uri, value));
            }
            let base = first.expect("a reference has at least one URI");
            docs.walk(value, base, &what)?;
        }
        Ok(docs)
    }

    fn add(&mut self, uri: &str, draft: Draft, v: &'a Value) -> u32 {
        let base = u32::try_from(self.bases.len()).unwrap_or(u32::MAX);
        self.bases.push((uri.to_string(), draft));
        self.index.insert(uri.to_string(), Target { v, base });
        base
    }

    /// Indexes the `$id`s and anchors under `start` (iteratively, depth bounded).
    fn walk(&mut self, start: &'a Value, base: u32, what: &str) -> Result<(), String> {
        let mut stack = vec![(start, base, 0usize, String::from("#"))];
        while let Some((v, mut base, depth, path)) = stack.pop() {
            let Value::Object(m) = v else { continue };
            let draft = self.draft(base);
            if let Some(id) = id_of(draft, v) {
                let uri = resolve(self.uri(base), id)?;
                if let Some(anchor) = id.strip_prefix('#') {
                    // Drafts 4 to 7 name anchors with a fragment-only `$id`.
                    let at = format!("{}#{anchor}", self.uri(base));
                    self.index.insert(at, Target { v, base });
                } else if without_fragment(&uri) != self.uri(base) {
                    base = self.add(without_fragment(&uri), draft.detect(v), v);
                    self.ids.insert(addr(v), base);
                }
            }
            if m.contains_key("$ref") {
                self.refs.push(Target { v, base });
            }
            for key in ["$anchor", "$dynamicAnchor"] {
                if let Some(anchor) = m.get(key).and_then(Value::as_str) {
                    let at = format!("{}#{anchor}", self.uri(base));
                    self.index.insert(at, Target { v, base });
                }
            }
            for (seg, child) in subschemas(v) {
                if depth + 1 > MAX_DEPTH {
                    // The innermost part of the path says where.
                    let at = format!("{path}/{seg}");
                    let cut = at.len().saturating_sub(120);
                    let cut = (cut..at.len())
                        .find(|&i| at.is_char_boundary(i))
                        .unwrap_or(0);
                    let dots = if cut > 0 { "..." } else { "" };
                    return Err(format!(
                        "{what} nests schemas more than {MAX_DEPTH} deep (at {dots}{})",
                        &at[cut..]
                    ));
                }
                stack.push((child, base, depth + 1, format!("{path}/{seg}")));
            }
        }
        Ok(())
    }

    fn uri(&self, base: u32) -> &str {
        &self.bases[base as usize].0
    }

    /// The draft of the resource `base` names.
    pub fn draft(&self, base: u32) -> Draft {
        self.bases[base as usize].1
    }

    /// The base of `v`, a subschema of a schema whose base is `parent`.
    pub fn base_of(&self, v: &Value, parent: u32) -> u32 {
        self.ids.get(&addr(v)).copied().unwrap_or(parent)
    }

    /// Each reference under each URI it is known by.
    pub fn reference_uris(&self) -> &[(String, &'a Value)] {
        &self.reference_uris
    }

    /// The schema `reference` (a `$ref`'s value) names, from a schema whose base is `base`.
    pub fn resolve(&self, reference: &str, base: u32) -> Result<Target<'a>, String> {
        let full = resolve(self.uri(base), reference)?;
        let (resource, fragment) = full.split_once('#').unwrap_or((&full, ""));
        let unknown = || {
            format!(
                "$ref '{reference}' names '{full}', which is neither in the schema nor one of its references"
            )
        };
        let target = *self.index.get(resource).ok_or_else(unknown)?;
        if fragment.is_empty() {
            let base = self.base_of(target.v, target.base);
            return Ok(Target { v: target.v, base });
        }
        if fragment.starts_with('/') {
            let v = target
                .v
                .pointer(&percent_decode(fragment))
                .ok_or_else(unknown)?;
            let base = self.base_of(v, target.base);
            return Ok(Target { v, base });
        }
        self.index
            .get(&format!("{resource}#{fragment}"))
            .copied()
            .ok_or_else(unknown)
    }
}
