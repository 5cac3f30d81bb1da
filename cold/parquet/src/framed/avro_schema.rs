//! Avro schemas as the decoder needs them: a tree with every named type expanded where it
//! is used, each logical type beside the encoding it annotates, and the Arrow type of each
//! node.
//!
//! The tree is read from the schema's JSON rather than from `apache_avro::Schema`, which
//! forgets facts the wire depends on (a `uuid` on a `fixed(16)` becomes the same
//! `Schema::Uuid` as one on a `string`, though one is 16 raw bytes and the other a
//! length-prefixed string). apache-avro still checks every schema first, so what is
//! accepted here is what the registry accepted.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use serde_json::Value;

use super::column::{list_of, map_of, timestamp_us};

/// How deep records, arrays, maps and unions may nest: the decoder recurses once per level.
pub const MAX_DEPTH: usize = 64;

/// How many nodes the expanded tree may have: a type reused at every level would
/// otherwise grow exponentially.
const MAX_NODES: usize = 100_000;

/// The largest Decimal128 precision, and Iceberg's.
const MAX_DECIMAL_PRECISION: usize = 38;

/// A named type's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) full: String,
    pub(crate) simple: String,
    /// Full names.
    pub(crate) aliases: Vec<String>,
}

impl Named {
    /// Whether data of the writer's type `w` can be read as this (the reader's) type:
    /// the same unqualified name, or `w`'s name among this type's aliases (Avro's
    /// resolution rules).
    pub(crate) fn reads(&self, w: &Named) -> bool {
        self.simple == w.simple || self.aliases.iter().any(|a| *a == w.full || *a == w.simple)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntLogical {
    None,
    Date,
    TimeMillis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LongLogical {
    None,
    TimeMicros,
    TimestampMillis,
    TimestampMicros,
    TimestampNanos,
    LocalTimestampMillis,
    LocalTimestampMicros,
    LocalTimestampNanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BytesLogical {
    None,
    Decimal { precision: usize, scale: usize },
    BigDecimal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FixedLogical {
    None,
    Decimal { precision: usize, scale: usize },
    Uuid,
    Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EnumTy {
    pub(crate) name: Named,
    pub(crate) symbols: Vec<String>,
    pub(crate) default: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldTy {
    pub(crate) name: String,
    pub(crate) aliases: Vec<String>,
    pub(crate) default: Option<Value>,
    pub(crate) ty: Ty,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordTy {
    pub(crate) name: Named,
    pub(crate) fields: Vec<FieldTy>,
}

/// An Avro type: the variant is the encoding, the logical type only changes the column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    Null,
    Boolean,
    Int(IntLogical),
    Long(LongLogical),
    Float,
    Double,
    Bytes(BytesLogical),
    /// `true` for a `uuid`.
    String(bool),
    Fixed {
        name: Arc<Named>,
        size: usize,
        logical: FixedLogical,
    },
    Enum(Arc<EnumTy>),
    Array(Box<Ty>),
    Map(Box<Ty>),
    Union(Vec<Ty>),
    Record(Arc<RecordTy>),
}

impl Ty {
    /// The name a general union's struct gives this branch's field: the Avro type's name
    /// (the unqualified name of a named type), as Confluent's and Redpanda's Iceberg
    /// sinks name them.
    pub(crate) fn branch_name(&self) -> &str {
        match self {
            Ty::Null => "null",
            Ty::Boolean => "boolean",
            Ty::Int(_) => "int",
            Ty::Long(_) => "long",
            Ty::Float => "float",
            Ty::Double => "double",
            Ty::Bytes(_) => "bytes",
            Ty::String(_) => "string",
            Ty::Fixed { name, .. } => &name.simple,
            Ty::Enum(e) => &e.name.simple,
            Ty::Array(_) => "array",
            Ty::Map(_) => "map",
            Ty::Union(_) => "union",
            Ty::Record(r) => &r.name.simple,
        }
    }

    fn full_name(&self) -> Option<&str> {
        match self {
            Ty::Fixed { name, .. } => Some(&name.full),
            Ty::Enum(e) => Some(&e.name.full),
            Ty::Record(r) => Some(&r.name.full),
            _ => None,
        }
    }

    /// The fewest bytes a value of this type takes on the wire: bounds an array's item
    /// count by the bytes left.
    pub(crate) fn min_size(&self) -> usize {
        match self {
            Ty::Null => 0,
            Ty::Float => 4,
            Ty::Double => 8,
            Ty::Fixed { size, .. } => *size,
            Ty::Record(r) => r.fields.iter().map(|f| f.ty.min_size()).sum(),
            _ => 1,
        }
    }

    fn weight(&self) -> usize {
        1 + match self {
            Ty::Array(t) | Ty::Map(t) => t.weight(),
            Ty::Union(b) => b.iter().map(Ty::weight).sum(),
            Ty::Record(r) => r.fields.iter().map(|f| f.ty.weight()).sum(),
            _ => 0,
        }
    }

    fn depth(&self) -> usize {
        1 + match self {
            Ty::Array(t) | Ty::Map(t) => t.depth(),
            Ty::Union(b) => b.iter().map(Ty::depth).max().unwrap_or(0),
            Ty::Record(r) => r.fields.iter().map(|f| f.ty.depth()).max().unwrap_or(0),
            _ => 0,
        }
    }
}

/// Parses a self-contained schema (see [`super::inline_references`]).
pub(crate) fn parse(text: &str) -> Result<Ty, String> {
    apache_avro::Schema::parse_str(text).map_err(|e| format!("not a valid Avro schema: {e}"))?;
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    Parser::default().parse(&json, None, 1)
}

#[derive(Default)]
struct Parser {
    defs: HashMap<String, Ty>,
    /// Named types being defined: a reference to one of them is a recursive type.
    open: Vec<String>,
    nodes: usize,
}

/// A name and the namespace its children inherit.
fn qualify(
    name: &str,
    explicit: Option<&str>,
    enclosing: Option<&str>,
) -> (String, Option<String>) {
    if let Some((ns, _)) = name.rsplit_once('.') {
        return (name.to_string(), Some(ns.to_string()));
    }
    let ns = match explicit {
        Some("") => None,
        Some(ns) => Some(ns),
        None => enclosing,
    };
    match ns {
        Some(ns) => (format!("{ns}.{name}"), Some(ns.to_string())),
        None => (name.to_string(), None),
    }
}

/// The full names a reference may mean, most specific first.
fn candidates(name: &str, ns: Option<&str>) -> Vec<String> {
    match ns {
        Some(ns) if !name.contains('.') => vec![format!("{ns}.{name}"), name.to_string()],
        _ => vec![name.to_string()],
    }
}

fn str_of<'a>(o: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str)
}

fn usize_of(o: &serde_json::Map<String, Value>, key: &str) -> Option<usize> {
    o.get(key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
}

/// The most decimal digits a two's-complement number of `size` bytes always holds.
fn max_fixed_precision(size: usize) -> usize {
    // floor(log10(2^(8 * size - 1) - 1)), by the bits: 8 * size - 1 bits hold
    // log10(2) * bits digits.
    let bits = (8 * size).saturating_sub(1) as f64;
    (bits * std::f64::consts::LOG10_2).floor() as usize
}

fn decimal(o: &serde_json::Map<String, Value>) -> Option<(usize, usize)> {
    let precision = usize_of(o, "precision").filter(|&p| p > 0)?;
    let scale = match o.get("scale") {
        None => 0,
        Some(_) => usize_of(o, "scale")?,
    };
    (scale <= precision).then_some((precision, scale))
}

impl Parser {
    fn count(&mut self, ty: &Ty, depth: usize) -> Result<(), String> {
        self.nodes += ty.weight();
        if self.nodes > MAX_NODES {
            return Err(format!("the schema expands to more than {MAX_NODES} types"));
        }
        if depth + ty.depth() - 1 > MAX_DEPTH {
            return Err(format!("the schema nests deeper than {MAX_DEPTH} levels"));
        }
        Ok(())
    }

    fn parse(&mut self, json: &Value, ns: Option<&str>, depth: usize) -> Result<Ty, String> {
        if depth > MAX_DEPTH {
            return Err(format!("the schema nests deeper than {MAX_DEPTH} levels"));
        }
        match json {
            Value::String(name) => self.named_or_primitive(name, ns, depth),
            Value::Array(branches) => {
                self.count(&Ty::Null, depth)?;
                let mut out = Vec::with_capacity(branches.len());
                for b in branches {
                    out.push(self.parse(b, ns, depth + 1)?);
                }
                Ok(Ty::Union(out))
            }
            Value::Object(o) => self.complex(o, ns, depth),
            other => Err(format!("{other} is not an Avro type")),
        }
    }

    fn named_or_primitive(
        &mut self,
        name: &str,
        ns: Option<&str>,
        depth: usize,
    ) -> Result<Ty, String> {
        let ty = match name {
            "null" => Ty::Null,
            "boolean" => Ty::Boolean,
            "int" => Ty::Int(IntLogical::None),
            "long" => Ty::Long(LongLogical::None),
            "float" => Ty::Float,
            "double" => Ty::Double,
            "bytes" => Ty::Bytes(BytesLogical::None),
            "string" => Ty::String(false),
            _ => {
                let names = candidates(name, ns);
                if let Some(open) = names.iter().find(|n| self.open.contains(n)) {
                    return Err(format!(
                        "{open} is recursive (it contains itself): Parquet and Iceberg columns cannot nest without end"
                    ));
                }
                let found = names.iter().find_map(|n| self.defs.get(n)).cloned();
                found.ok_or_else(|| format!("unknown type {name}"))?
            }
        };
        self.count(&ty, depth)?;
        Ok(ty)
    }

    fn define(&mut self, full: &str, ty: &Ty) -> Result<(), String> {
        if self.defs.insert(full.to_string(), ty.clone()).is_some() {
            return Err(format!("{full} is defined twice"));
        }
        Ok(())
    }

    fn named(
        &self,
        o: &serde_json::Map<String, Value>,
        ns: Option<&str>,
    ) -> Result<(Named, Option<String>), String> {
        let name = str_of(o, "name").ok_or("a named type needs a name")?;
        let (full, inner) = qualify(name, str_of(o, "namespace"), ns);
        let aliases = o
            .get("aliases")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|a| qualify(a, None, inner.as_deref()).0)
                    .collect()
            })
            .unwrap_or_default();
        let simple = full.rsplit('.').next().unwrap_or(&full).to_string();
        Ok((
            Named {
                full,
                simple,
                aliases,
            },
            inner,
        ))
    }

    fn complex(
        &mut self,
        o: &serde_json::Map<String, Value>,
        ns: Option<&str>,
        depth: usize,
    ) -> Result<Ty, String> {
        let ty_json = o.get("type").ok_or("a type object needs a type")?;
        let Some(kind) = ty_json.as_str() else {
            // {"type": {...}} or {"type": [...]}: the inner type, attributes aside.
            return self.parse(ty_json, ns, depth);
        };
        let logical = str_of(o, "logicalType");
        let ty = match kind {
            "record" | "error" => return self.record(o, ns, depth),
            "enum" => {
                let (name, _) = self.named(o, ns)?;
                let symbols: Vec<String> = o
                    .get("symbols")
                    .and_then(Value::as_array)
                    .ok_or("an enum needs symbols")?
                    .iter()
                    .map(|s| {
                        s.as_str()
                            .map(str::to_string)
                            .ok_or("an enum symbol is a string")
                    })
                    .collect::<Result<_, _>>()?;
                let default = str_of(o, "default").map(str::to_string);
                let full = name.full.clone();
                let ty = Ty::Enum(Arc::new(EnumTy {
                    name,
                    symbols,
                    default,
                }));
                self.define(&full, &ty)?;
                ty
            }
            "fixed" => {
                let (name, _) = self.named(o, ns)?;
                let size = usize_of(o, "size").ok_or("a fixed needs a size")?;
                let logical = match logical {
                    Some("decimal") => decimal(o)
                        .filter(|(p, _)| *p <= max_fixed_precision(size))
                        .map_or(FixedLogical::None, |(precision, scale)| {
                            FixedLogical::Decimal { precision, scale }
                        }),
                    Some("uuid") if size == 16 => FixedLogical::Uuid,
                    Some("duration") if size == 12 => FixedLogical::Duration,
                    _ => FixedLogical::None,
                };
                let full = name.full.clone();
                let ty = Ty::Fixed {
                    name: Arc::new(name),
                    size,
                    logical,
                };
                self.define(&full, &ty)?;
                ty
            }
            "array" => {
                let items = o.get("items").ok_or("an array needs items")?;
                Ty::Array(Box::new(self.parse(items, ns, depth + 1)?))
            }
            "map" => {
                let values = o.get("values").ok_or("a map needs values")?;
                Ty::Map(Box::new(self.parse(values, ns, depth + 1)?))
            }
            // Logical types on primitives; one that does not apply is ignored, as the Avro
            // specification says.
            "int" => Ty::Int(match logical {
                Some("date") => IntLogical::Date,
                Some("time-millis") => IntLogical::TimeMillis,
                _ => IntLogical::None,
            }),
            "long" => Ty::Long(match logical {
                Some("time-micros") => LongLogical::TimeMicros,
                Some("timestamp-millis") => LongLogical::TimestampMillis,
                Some("timestamp-micros") => LongLogical::TimestampMicros,
                Some("timestamp-nanos") => LongLogical::TimestampNanos,
                Some("local-timestamp-millis") => LongLogical::LocalTimestampMillis,
                Some("local-timestamp-micros") => LongLogical::LocalTimestampMicros,
                Some("local-timestamp-nanos") => LongLogical::LocalTimestampNanos,
                _ => LongLogical::None,
            }),
            "bytes" => Ty::Bytes(match logical {
                Some("decimal") => decimal(o).map_or(BytesLogical::None, |(precision, scale)| {
                    BytesLogical::Decimal { precision, scale }
                }),
                Some("big-decimal") => BytesLogical::BigDecimal,
                _ => BytesLogical::None,
            }),
            "string" => Ty::String(logical == Some("uuid")),
            // "null", "boolean", ... with attributes, or a named type's name.
            other => return self.named_or_primitive(other, ns, depth),
        };
        self.count(&Ty::Null, depth)?;
        Ok(ty)
    }

    fn record(
        &mut self,
        o: &serde_json::Map<String, Value>,
        ns: Option<&str>,
        depth: usize,
    ) -> Result<Ty, String> {
        let (name, inner) = self.named(o, ns)?;
        let fields_json = o
            .get("fields")
            .and_then(Value::as_array)
            .ok_or("a record needs fields")?;
        self.open.push(name.full.clone());
        let mut fields = Vec::with_capacity(fields_json.len());
        for f in fields_json {
            let f = f.as_object().ok_or("a record field is an object")?;
            let fname = str_of(f, "name").ok_or("a record field needs a name")?;
            let ty_json = f
                .get("type")
                .ok_or_else(|| format!("field {fname} needs a type"))?;
            let ty = self
                .parse(ty_json, inner.as_deref(), depth + 1)
                .map_err(|e| format!("field {}.{fname}: {e}", name.simple))?;
            let aliases = f
                .get("aliases")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            fields.push(FieldTy {
                name: fname.to_string(),
                aliases,
                default: f.get("default").cloned(),
                ty,
            });
        }
        self.open.pop();
        self.count(&Ty::Null, depth)?;
        let full = name.full.clone();
        let ty = Ty::Record(Arc::new(RecordTy { name, fields }));
        self.define(&full, &ty)?;
        Ok(ty)
    }
}

/// The Arrow type of a value of `ty` and whether it is nullable (see the mapping in
/// `framed`'s docs). `at` names the place for errors.
pub(crate) fn arrow_type(ty: &Ty, at: &str) -> Result<(DataType, bool), String> {
    let dt = match ty {
        Ty::Null => return Err(format!("{at}: a value that is always null has no column")),
        Ty::Boolean => DataType::Boolean,
        Ty::Int(IntLogical::None) => DataType::Int32,
        Ty::Int(IntLogical::Date) => DataType::Date32,
        Ty::Int(IntLogical::TimeMillis) | Ty::Long(LongLogical::TimeMicros) => {
            DataType::Time64(TimeUnit::Microsecond)
        }
        Ty::Long(l) => match l {
            LongLogical::None | LongLogical::TimeMicros => DataType::Int64,
            LongLogical::TimestampMillis | LongLogical::TimestampMicros => timestamp_us(true),
            LongLogical::LocalTimestampMillis | LongLogical::LocalTimestampMicros => {
                timestamp_us(false)
            }
            LongLogical::TimestampNanos => DataType::Timestamp(
                TimeUnit::Nanosecond,
                Some(Arc::from(crate::value_schema::UTC)),
            ),
            LongLogical::LocalTimestampNanos => DataType::Timestamp(TimeUnit::Nanosecond, None),
        },
        Ty::Float => DataType::Float32,
        Ty::Double => DataType::Float64,
        Ty::Bytes(BytesLogical::Decimal { precision, scale })
        | Ty::Fixed {
            logical: FixedLogical::Decimal { precision, scale },
            ..
        } => decimal_type(*precision, *scale, at)?,
        Ty::Bytes(_) => DataType::Binary,
        Ty::String(_) | Ty::Enum(_) => DataType::Utf8,
        Ty::Fixed {
            logical: FixedLogical::Uuid,
            ..
        } => DataType::Utf8,
        Ty::Fixed { size, .. } => {
            let n = i32::try_from(*size).ok().filter(|&n| n > 0).ok_or_else(|| {
                format!("{at}: a fixed of {size} bytes (a Parquet fixed-length column needs 1 to 2^31-1)")
            })?;
            DataType::FixedSizeBinary(n)
        }
        Ty::Array(item) => {
            let (dt, nullable) = arrow_type(item, &format!("{at}[]"))?;
            list_of(dt, nullable)
        }
        Ty::Map(value) => {
            let (dt, nullable) = arrow_type(value, &format!("{at}{{}}"))?;
            map_of(DataType::Utf8, dt, nullable)
        }
        Ty::Union(branches) => return union_type(branches, at),
        Ty::Record(r) => DataType::Struct(record_fields(r, at)?),
    };
    Ok((dt, false))
}

fn decimal_type(precision: usize, scale: usize, at: &str) -> Result<DataType, String> {
    if precision > MAX_DECIMAL_PRECISION {
        return Err(format!(
            "{at}: decimal precision {precision} is above {MAX_DECIMAL_PRECISION} (Iceberg's and Decimal128's limit)"
        ));
    }
    // Both fit: precision <= 38 and scale <= precision.
    Ok(DataType::Decimal128(precision as u8, scale as i8))
}

pub(crate) fn record_fields(r: &RecordTy, at: &str) -> Result<Fields, String> {
    if r.fields.is_empty() {
        return Err(format!(
            "{at}: record {} has no fields (Parquet has no empty groups)",
            r.name.full
        ));
    }
    let mut out = Vec::with_capacity(r.fields.len());
    for f in &r.fields {
        let (dt, nullable) = arrow_type(&f.ty, &format!("{at}.{}", f.name))?;
        out.push(Field::new(&f.name, dt, nullable));
    }
    Ok(Fields::from(out))
}

/// `[null, T]` (either order) is a nullable `T`; any other union a struct with one
/// nullable field per non-null branch, null when the value is the null branch.
pub(crate) fn union_type(branches: &[Ty], at: &str) -> Result<(DataType, bool), String> {
    let has_null = branches.contains(&Ty::Null);
    let others: Vec<&Ty> = branches.iter().filter(|b| **b != Ty::Null).collect();
    match others.as_slice() {
        [] => Err(format!("{at}: a union of null alone has no column")),
        [only] => {
            let (dt, nullable) = arrow_type(only, at)?;
            Ok((dt, nullable || has_null))
        }
        _ => {
            let names = union_branch_names(branches);
            let mut fields = Vec::with_capacity(others.len());
            for (b, name) in branches.iter().zip(names) {
                if let Some(name) = name {
                    let (dt, _) = arrow_type(b, &format!("{at}<{name}>"))?;
                    fields.push(Field::new(name, dt, true));
                }
            }
            Ok((DataType::Struct(Fields::from(fields)), has_null))
        }
    }
}

/// Per branch: the field name of its column in a general union's struct (`None` for
/// the null branch). Two named branches with the same unqualified name get full names.
pub(crate) fn union_branch_names(branches: &[Ty]) -> Vec<Option<String>> {
    let mut seen = HashSet::new();
    let clash: HashSet<&str> = branches
        .iter()
        .map(Ty::branch_name)
        .filter(|n| !seen.insert(*n))
        .collect();
    branches
        .iter()
        .map(|b| match b {
            Ty::Null => None,
            b if clash.contains(b.branch_name()) => {
                Some(b.full_name().unwrap_or(b.branch_name()).to_string())
            }
            b => Some(b.branch_name().to_string()),
        })
        .collect()
}

/// The Avro encoding of a field's default (JSON, as the schema gives it), so that a field
/// the writer lacks decodes like any other.
pub(crate) fn encode_default(ty: &Ty, json: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    let bad = || format!("default {json} does not fit {}", ty.branch_name());
    match ty {
        Ty::Null => json.is_null().then_some(()).ok_or_else(bad)?,
        Ty::Boolean => out.push(u8::from(json.as_bool().ok_or_else(bad)?)),
        Ty::Int(_) => {
            let n = json
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(bad)?;
            write_long(out, i64::from(n));
        }
        Ty::Long(_) => write_long(out, json.as_i64().ok_or_else(bad)?),
        Ty::Float => out.extend_from_slice(&(json.as_f64().ok_or_else(bad)? as f32).to_le_bytes()),
        Ty::Double => out.extend_from_slice(&json.as_f64().ok_or_else(bad)?.to_le_bytes()),
        Ty::Bytes(_) => {
            let b = latin1(json).ok_or_else(bad)?;
            write_long(out, b.len() as i64);
            out.extend_from_slice(&b);
        }
        Ty::String(_) => {
            let s = json.as_str().ok_or_else(bad)?;
            write_long(out, s.len() as i64);
            out.extend_from_slice(s.as_bytes());
        }
        Ty::Fixed { size, .. } => {
            let b = latin1(json).filter(|b| b.len() == *size).ok_or_else(bad)?;
            out.extend_from_slice(&b);
        }
        Ty::Enum(e) => {
            let s = json.as_str().ok_or_else(bad)?;
            let i = e.symbols.iter().position(|x| x == s).ok_or_else(bad)?;
            write_long(out, i as i64);
        }
        Ty::Array(item) => {
            let items = json.as_array().ok_or_else(bad)?;
            if !items.is_empty() {
                write_long(out, items.len() as i64);
                for i in items {
                    encode_default(item, i, out)?;
                }
            }
            write_long(out, 0);
        }
        Ty::Map(value) => {
            let entries = json.as_object().ok_or_else(bad)?;
            if !entries.is_empty() {
                write_long(out, entries.len() as i64);
                for (k, v) in entries {
                    write_long(out, k.len() as i64);
                    out.extend_from_slice(k.as_bytes());
                    encode_default(value, v, out)?;
                }
            }
            write_long(out, 0);
        }
        // A union's default is a value of its first branch.
        Ty::Union(branches) => {
            let first = branches.first().ok_or_else(bad)?;
            write_long(out, 0);
            encode_default(first, json, out)?;
        }
        Ty::Record(r) => {
            let o = json.as_object().ok_or_else(bad)?;
            for f in &r.fields {
                let v = o.get(&f.name).or(f.default.as_ref()).ok_or_else(|| {
                    format!(
                        "default {json} has no {} and the field has no default",
                        f.name
                    )
                })?;
                encode_default(&f.ty, v, out)?;
            }
        }
    }
    Ok(())
}

/// Avro JSON gives bytes as a string of code points 0..=255.
fn latin1(json: &Value) -> Option<Vec<u8>> {
    json.as_str()?
        .chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect()
}

fn write_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}
