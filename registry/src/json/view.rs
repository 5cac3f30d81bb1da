//! What a schema is, as Confluent's registry sees it (the everit library's schema
//! classes): a boolean, a `$ref`, one type's schema (string, number, object, ...), an
//! enum, a const, a `not`, or a combination. A schema with several of these (a type and an
//! `enum`, a type and a `oneOf`) is all of them: a synthetic `allOf` of its facets.

use jsonschema::Draft;
use serde_json::Value;

use super::docs::Docs;

/// Which of the two schemas compared a schema belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Side {
    Writer,
    Reader,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Ty {
    Null,
    Boolean,
    String,
    Number,
    Integer,
    Object,
    Array,
}

impl Ty {
    fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "null" => Ty::Null,
            "boolean" => Ty::Boolean,
            "string" => Ty::String,
            "number" => Ty::Number,
            "integer" => Ty::Integer,
            "object" => Ty::Object,
            "array" => Ty::Array,
            _ => return None,
        })
    }
}

/// The part of a schema's JSON a [`Sch`] stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Facet {
    /// All of it.
    Whole,
    Ref,
    /// `type` naming several types: any of them.
    Types,
    /// One type, named by `type` or implied by its keywords (`maxLength`: a string).
    Type(Ty),
    Enum,
    Const,
    Not,
    AllOf,
    AnyOf,
    OneOf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Crit {
    All,
    Any,
    One,
}

impl Crit {
    pub fn keyword(self) -> &'static str {
        match self {
            Crit::All => "allOf",
            Crit::Any => "anyOf",
            Crit::One => "oneOf",
        }
    }
}

/// A schema being compared: its JSON, base URI, side and facet.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sch<'a> {
    pub v: &'a Value,
    pub base: u32,
    pub side: Side,
    pub facet: Facet,
}

#[derive(Debug)]
pub(super) enum Kind<'a> {
    /// Anything (`true`, `{}`, a schema of annotations only).
    True,
    False,
    Ref(&'a str),
    Null,
    Boolean,
    String,
    Number {
        integer: bool,
    },
    Object,
    Array,
    Enum(&'a [Value]),
    Const(&'a Value),
    Not(&'a Value),
    Combined {
        crit: Crit,
        subs: Vec<Sch<'a>>,
        /// Made of one schema's facets, not written as a keyword.
        synthetic: bool,
    },
}

impl Kind<'_> {
    /// Which class of schema: two schemas of different classes are different types.
    pub fn class(&self) -> u8 {
        match self {
            Kind::True => 0,
            Kind::False => 1,
            Kind::Ref(_) => 2,
            Kind::Null => 3,
            Kind::Boolean => 4,
            Kind::String => 5,
            Kind::Number { .. } => 6,
            Kind::Object => 7,
            Kind::Array => 8,
            Kind::Enum(_) => 9,
            Kind::Const(_) => 10,
            Kind::Not(_) => 11,
            Kind::Combined { .. } => 12,
        }
    }
}

const OBJECT_WORDS: &[&str] = &[
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "unevaluatedProperties",
];
const ARRAY_WORDS: &[&str] = &[
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
];
const STRING_WORDS: &[&str] = &["minLength", "maxLength", "pattern"];
const NUMBER_WORDS: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

/// Whether `draft` is 2019-09 or later, where `$ref` sits beside other keywords (before,
/// a `$ref` replaced its schema).
pub(super) fn modern(draft: Draft) -> bool {
    matches!(draft, Draft::Draft201909 | Draft::Draft202012)
}

impl<'a> Sch<'a> {
    /// A schema inside this one (its base changes if it has an `$id`).
    pub fn child(self, docs: &Docs<'a>, v: &'a Value) -> Sch<'a> {
        Sch {
            v,
            base: docs.base_of(v, self.base),
            side: self.side,
            facet: Facet::Whole,
        }
    }

    fn facet(self, facet: Facet) -> Sch<'a> {
        Sch { facet, ..self }
    }

    /// What this schema is, as Confluent's registry sees it.
    pub fn kind(self, docs: &Docs<'a>) -> Kind<'a> {
        let v = self.v;
        let list = |key: &str| v.get(key).and_then(Value::as_array).map(Vec::as_slice);
        let subs = |key: &str| -> Vec<Sch<'a>> {
            list(key)
                .unwrap_or_default()
                .iter()
                .map(|s| self.child(docs, s))
                .collect()
        };
        match self.facet {
            Facet::Whole => self.whole(docs),
            Facet::Ref => {
                let r = ["$ref", "$dynamicRef", "$recursiveRef"]
                    .iter()
                    .find_map(|k| v.get(*k).and_then(Value::as_str));
                r.map_or(Kind::True, Kind::Ref)
            }
            Facet::Types => {
                let mut types: Vec<Ty> = Vec::new();
                for t in list("type").unwrap_or_default() {
                    if let Some(t) = t.as_str().and_then(Ty::parse)
                        && !types.contains(&t)
                    {
                        types.push(t);
                    }
                }
                Kind::Combined {
                    crit: Crit::Any,
                    subs: types
                        .into_iter()
                        .map(|t| self.facet(Facet::Type(t)))
                        .collect(),
                    synthetic: true,
                }
            }
            Facet::Type(t) => match t {
                Ty::Null => Kind::Null,
                Ty::Boolean => Kind::Boolean,
                Ty::String => Kind::String,
                Ty::Number => Kind::Number { integer: false },
                Ty::Integer => Kind::Number { integer: true },
                Ty::Object => Kind::Object,
                Ty::Array => Kind::Array,
            },
            Facet::Enum => list("enum").map_or(Kind::True, Kind::Enum),
            Facet::Const => v.get("const").map_or(Kind::True, Kind::Const),
            Facet::Not => v.get("not").map_or(Kind::True, Kind::Not),
            Facet::AllOf => Kind::Combined {
                crit: Crit::All,
                subs: subs("allOf"),
                synthetic: false,
            },
            Facet::AnyOf => Kind::Combined {
                crit: Crit::Any,
                subs: subs("anyOf"),
                synthetic: false,
            },
            Facet::OneOf => Kind::Combined {
                crit: Crit::One,
                subs: subs("oneOf"),
                synthetic: false,
            },
        }
    }

    fn whole(self, docs: &Docs<'a>) -> Kind<'a> {
        let m = match self.v {
            Value::Bool(false) => return Kind::False,
            Value::Object(m) => m,
            _ => return Kind::True,
        };
        let modern = modern(docs.draft(self.base));
        // One pass over the keys (a schema has few) rather than a lookup per keyword:
        // this runs for every schema pair compared.
        let mut implied = [false; 4];
        let mut found = [false; 7];
        const KEYWORDS: [(&str, Facet); 7] = [
            ("enum", Facet::Enum),
            ("const", Facet::Const),
            ("not", Facet::Not),
            ("allOf", Facet::AllOf),
            ("anyOf", Facet::AnyOf),
            ("oneOf", Facet::OneOf),
            ("$ref", Facet::Ref),
        ];
        for key in m.keys() {
            let key = key.as_str();
            if let Some(i) = KEYWORDS.iter().position(|(k, _)| *k == key) {
                found[i] = true;
            } else if key == "$dynamicRef" || key == "$recursiveRef" {
                found[6] = true;
            } else if OBJECT_WORDS.contains(&key) {
                implied[0] = true;
            } else if ARRAY_WORDS.contains(&key) {
                implied[1] = true;
            } else if STRING_WORDS.contains(&key) {
                implied[2] = true;
            } else if NUMBER_WORDS.contains(&key) {
                implied[3] = true;
            }
        }
        if m.contains_key("$ref") && !modern {
            return self.facet(Facet::Ref).kind(docs);
        }
        let mut facets = Vec::new();
        match m.get("type") {
            Some(Value::String(t)) => facets.extend(Ty::parse(t).map(Facet::Type)),
            Some(Value::Array(ts)) if ts.len() == 1 => {
                facets.extend(ts[0].as_str().and_then(Ty::parse).map(Facet::Type));
            }
            Some(Value::Array(ts)) if ts.len() > 1 => facets.push(Facet::Types),
            _ => {
                // No type: each type whose keywords it has (everit's sniffing).
                let tys = [Ty::Object, Ty::Array, Ty::String, Ty::Number];
                facets.extend((0..4).filter(|i| implied[*i]).map(|i| Facet::Type(tys[i])));
            }
        }
        for (i, (_, facet)) in KEYWORDS.iter().enumerate() {
            // `$ref` beside other keywords only from 2019-09 (before, it replaced them).
            if found[i] && (*facet != Facet::Ref || modern) {
                facets.push(*facet);
            }
        }
        match facets.as_slice() {
            [] => Kind::True,
            [one] => self.facet(*one).kind(docs),
            _ => Kind::Combined {
                crit: Crit::All,
                subs: facets.into_iter().map(|f| self.facet(f)).collect(),
                synthetic: true,
            },
        }
    }
}
