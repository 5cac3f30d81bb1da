//! The keywords compared without recursing: bounds (lengths, limits, counts), patterns,
//! `multipleOf`, enums, `required`, dependencies; and what a schema's keywords say about
//! its content model (open, closed, partially open).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::Value;

use super::{Change, Diff};
use crate::json::write_sorted;

/// The four changes of a bound: added, removed, increased, decreased.
fn bound_changes(keyword: &str) -> Option<[Change; 4]> {
    use Change::*;
    Some(match keyword {
        "maxLength" => [
            MaxLengthAdded,
            MaxLengthRemoved,
            MaxLengthIncreased,
            MaxLengthDecreased,
        ],
        "minLength" => [
            MinLengthAdded,
            MinLengthRemoved,
            MinLengthIncreased,
            MinLengthDecreased,
        ],
        "maximum" => [
            MaximumAdded,
            MaximumRemoved,
            MaximumIncreased,
            MaximumDecreased,
        ],
        "minimum" => [
            MinimumAdded,
            MinimumRemoved,
            MinimumIncreased,
            MinimumDecreased,
        ],
        "exclusiveMaximum" => [
            ExclusiveMaximumAdded,
            ExclusiveMaximumRemoved,
            ExclusiveMaximumIncreased,
            ExclusiveMaximumDecreased,
        ],
        "exclusiveMinimum" => [
            ExclusiveMinimumAdded,
            ExclusiveMinimumRemoved,
            ExclusiveMinimumIncreased,
            ExclusiveMinimumDecreased,
        ],
        "maxProperties" => [
            MaxPropertiesAdded,
            MaxPropertiesRemoved,
            MaxPropertiesIncreased,
            MaxPropertiesDecreased,
        ],
        "minProperties" => [
            MinPropertiesAdded,
            MinPropertiesRemoved,
            MinPropertiesIncreased,
            MinPropertiesDecreased,
        ],
        "maxItems" => [
            MaxItemsAdded,
            MaxItemsRemoved,
            MaxItemsIncreased,
            MaxItemsDecreased,
        ],
        "minItems" => [
            MinItemsAdded,
            MinItemsRemoved,
            MinItemsIncreased,
            MinItemsDecreased,
        ],
        "maxContains" => [
            MaxContainsAdded,
            MaxContainsRemoved,
            MaxContainsIncreased,
            MaxContainsDecreased,
        ],
        "minContains" => [
            MinContainsAdded,
            MinContainsRemoved,
            MinContainsIncreased,
            MinContainsDecreased,
        ],
        _ => return None,
    })
}

/// A numeric bound, compared: added, removed, increased or decreased. (Which of these
/// is compatible depends on the bound; [`Change::compatible`] knows.) A draft 4
/// boolean `exclusiveMaximum` is not a number and is not compared, as in Confluent's.
pub fn bound(o: &Value, u: &Value, keyword: &str, out: &mut Vec<Diff>) {
    let Some([added, removed, increased, decreased]) = bound_changes(keyword) else {
        return;
    };
    let num = |v: &Value| v.get(keyword).and_then(Value::as_f64);
    let change = match (num(o), num(u)) {
        (None, Some(_)) => added,
        (Some(_), None) => removed,
        (Some(a), Some(b)) if a < b => increased,
        (Some(a), Some(b)) if a > b => decreased,
        _ => return,
    };
    out.push(Diff::at(keyword, change));
}

pub fn strings(o: &Value, u: &Value, out: &mut Vec<Diff>) {
    bound(o, u, "maxLength", out);
    bound(o, u, "minLength", out);
    fn pattern(v: &Value) -> Option<&str> {
        v.get("pattern").and_then(Value::as_str)
    }
    let change = match (pattern(o), pattern(u)) {
        (None, Some(_)) => Change::PatternAdded,
        (Some(_), None) => Change::PatternRemoved,
        (Some(a), Some(b)) if a != b => Change::PatternChanged,
        _ => return,
    };
    out.push(Diff::at("pattern", change));
}

pub fn numbers(o: &Value, u: &Value, out: &mut Vec<Diff>) {
    for keyword in ["maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum"] {
        bound(o, u, keyword, out);
    }
    let multiple = |v: &Value| v.get("multipleOf").and_then(Decimal::of);
    let change = match (multiple(o), multiple(u)) {
        (None, None) => return,
        (None, Some(_)) => Change::MultipleOfAdded,
        (Some(_), None) => Change::MultipleOfRemoved,
        (Some(a), Some(b)) if a.equals(&b) => return,
        // Every multiple of the reader's is one of the writer's: fewer values.
        (Some(a), Some(b)) if b.is_multiple_of(&a) => Change::MultipleOfExpanded,
        (Some(a), Some(b)) if a.is_multiple_of(&b) => Change::MultipleOfReduced,
        _ => Change::MultipleOfChanged,
    };
    out.push(Diff::at("multipleOf", change));
}

/// A JSON number as written in decimal (`0.1` is exactly one tenth here, not the
/// nearest double), for `multipleOf`: mantissa times ten to the exponent.
#[derive(Clone, Copy, Debug)]
struct Decimal {
    mantissa: u128,
    exponent: i32,
}

impl Decimal {
    fn of(v: &Value) -> Option<Decimal> {
        let text = v.as_number()?.to_string();
        let text = text.trim_start_matches('-');
        let (digits, exp) = match text.split_once(['e', 'E']) {
            Some((d, e)) => (d, e.parse::<i32>().ok()?),
            None => (text, 0),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        let all = format!("{int}{frac}");
        if all.len() > 30 || exp.unsigned_abs() > 300 {
            return None;
        }
        let mantissa = all.parse::<u128>().ok()?;
        let exponent = exp - i32::try_from(frac.len()).ok()?;
        Some(Decimal { mantissa, exponent })
    }

    /// Both mantissas at the smaller exponent, if they fit.
    fn aligned(&self, other: &Decimal) -> Option<(u128, u128)> {
        let e = self.exponent.min(other.exponent);
        let scale = |d: &Decimal| {
            let shift = u32::try_from(d.exponent - e).ok()?;
            d.mantissa.checked_mul(10u128.checked_pow(shift)?)
        };
        Some((scale(self)?, scale(other)?))
    }

    fn equals(&self, other: &Decimal) -> bool {
        self.aligned(other).is_some_and(|(a, b)| a == b)
    }

    /// Whether `self` is a whole multiple of `other` (never, of zero).
    fn is_multiple_of(&self, other: &Decimal) -> bool {
        self.aligned(other)
            .is_some_and(|(a, b)| b != 0 && a % b == 0)
    }
}

/// Enums as sets of values: extended (the reader's takes more), narrowed or changed.
pub fn enums(o: &[Value], u: &[Value], out: &mut Vec<Diff>) {
    let set = |vs: &[Value]| -> HashSet<String> {
        vs.iter()
            .map(|v| {
                let mut s = String::new();
                write_sorted(v, &mut s);
                s
            })
            .collect()
    };
    let (a, b) = (set(o), set(u));
    let change = if a == b {
        return;
    } else if a.is_subset(&b) {
        Change::EnumArrayExtended
    } else if b.is_subset(&a) {
        Change::EnumArrayNarrowed
    } else {
        Change::EnumArrayChanged
    };
    out.push(Diff::at("enum", change));
}

/// The names in `required` (drafts 4 and later).
pub fn required(v: &Value) -> HashSet<&str> {
    v.get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Property dependencies (names a property requires) and schema dependencies, from
/// `dependencies` and the 2019-09 `dependentRequired` and `dependentSchemas`.
#[allow(clippy::type_complexity)]
pub fn dependencies(v: &Value) -> (BTreeMap<String, BTreeSet<String>>, BTreeMap<String, &Value>) {
    let (mut names, mut schemas) = (BTreeMap::new(), BTreeMap::new());
    for key in ["dependencies", "dependentRequired", "dependentSchemas"] {
        let Some(Value::Object(m)) = v.get(key) else {
            continue;
        };
        for (k, d) in m {
            match d {
                Value::Array(list) => {
                    let set = list.iter().filter_map(Value::as_str).map(String::from);
                    names.insert(k.clone(), set.collect());
                }
                Value::Object(_) | Value::Bool(_) => {
                    schemas.insert(k.clone(), d);
                }
                _ => {}
            }
        }
    }
    (names, schemas)
}

/// What `additionalProperties` (or a rest-of-items keyword) says: whether more are
/// allowed, and the schema they take when it is one (`true` or absent: any, no schema).
pub fn rest(v: Option<&Value>) -> (bool, Option<&Value>) {
    match v {
        Some(Value::Bool(false)) => (false, None),
        Some(s @ Value::Object(_)) => (true, Some(s)),
        _ => (true, None),
    }
}

pub fn additional<'v>(v: &'v Value, keyword: &str) -> (bool, Option<&'v Value>) {
    rest(v.get(keyword))
}

/// Whether an object schema takes any other property with any value: no
/// `additionalProperties` schema or `false`, no `patternProperties`, and
/// `unevaluatedProperties` absent or empty.
pub fn open_object<'v>(v: &'v Value, is_empty: impl Fn(&'v Value) -> bool) -> bool {
    let patterns = matches!(v.get("patternProperties"), Some(Value::Object(m)) if !m.is_empty());
    additional(v, "additionalProperties") == (true, None)
        && !patterns
        && v.get("unevaluatedProperties").is_none_or(is_empty)
}

/// An array schema's item keywords, by draft: before 2020-12 `items` is the schema of
/// every item or, as an array, of the first ones (then `additionalItems` the rest's);
/// from 2020-12 `prefixItems` is the first ones' and `items` the rest's.
pub struct Items<'v> {
    pub all: Option<&'v Value>,
    pub tuple: &'v [Value],
    pub tuple_keyword: &'static str,
    pub rest: Option<&'v Value>,
    pub rest_keyword: &'static str,
}

pub fn items(v: &Value, modern: bool) -> Items<'_> {
    let schema = |k: &str| v.get(k).filter(|s| s.is_object() || s.is_boolean());
    let list = |k: &str| v.get(k).and_then(Value::as_array).map(Vec::as_slice);
    if modern && let Some(prefix) = list("prefixItems") {
        return Items {
            all: None,
            tuple: prefix,
            tuple_keyword: "prefixItems",
            rest: schema("items"),
            rest_keyword: "items",
        };
    }
    Items {
        all: schema("items"),
        tuple: list("items").unwrap_or_default(),
        tuple_keyword: "items",
        rest: if modern {
            None
        } else {
            schema("additionalItems")
        },
        rest_keyword: "additionalItems",
    }
}

/// Whether an array schema takes any further item with any value.
pub fn open_items<'v>(
    v: &'v Value,
    items: &Items<'v>,
    is_empty: impl Fn(&'v Value) -> bool,
) -> bool {
    rest(items.rest) == (true, None) && v.get("unevaluatedItems").is_none_or(is_empty)
}

/// Whether `name` matches the regular expression `pattern` (a search, as JSON Schema's
/// `patternProperties`), with the validator's own regular expressions; a pattern that
/// does not compile matches nothing.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let schema = serde_json::json!({ "type": "string", "pattern": pattern });
    jsonschema::options()
        .offline()
        .build(&schema)
        .is_ok_and(|v| v.is_valid(&Value::String(name.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(v: Value) -> Decimal {
        Decimal::of(&v).unwrap()
    }

    #[test]
    fn multiples_are_decimal() {
        // 0.3 is a multiple of 0.1 as written, though not as doubles.
        assert!(dec(serde_json::json!(0.3)).is_multiple_of(&dec(serde_json::json!(0.1))));
        assert!(!dec(serde_json::json!(0.1)).is_multiple_of(&dec(serde_json::json!(0.3))));
        assert!(dec(serde_json::json!(10)).is_multiple_of(&dec(serde_json::json!(2.5))));
        assert!(dec(serde_json::json!(0.5)).equals(&dec(serde_json::json!(0.50))));
        assert!(dec(serde_json::json!(1e-7)).is_multiple_of(&dec(serde_json::json!(1e-8))));
    }

    #[test]
    fn patterns_search() {
        assert!(pattern_matches("^x_", "x_total"));
        assert!(pattern_matches("tot", "x_total"));
        assert!(!pattern_matches("^y", "x_total"));
        assert!(!pattern_matches("(", "x"));
    }
}
