//! Confluent-framed Protobuf values -> one struct column in the reader message's shape.
//!
//! Protobuf is read by field number, so values of every compatible version decode with
//! the reader's descriptor: a field the reader lacks is skipped, one the writer lacked is
//! absent. The writer's file only says which message the value holds (its message
//! indexes); a message other than the reader's fails the row.
//!
//! The column types are in `framed`'s docs.
//!
//! Recursive messages and messages without fields are refused: Parquet columns cannot
//! nest without end, nor hold empty groups.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields};
use prost_reflect::{FileDescriptor, Kind, MessageDescriptor};

use super::column::{Column, DecodeError, list_of, map_of, timestamp_us};
use super::proto_wire::{Raw, Wire, json_text};
use super::{Decoded, Failure, FramedError, MAX_DEPTH, ProtoFrame, split, split_protobuf};

/// Decodes Confluent-framed Protobuf values of one message type into a struct column.
#[derive(Debug)]
pub struct ProtoColumns {
    expected: String,
    plan: MsgPlan,
    fields: Fields,
    root: Column,
    writers: HashMap<i32, Writer>,
}

#[derive(Debug)]
struct Writer {
    file: FileDescriptor,
    /// The message indexes of the reader's message in this file, if it has one.
    path: Option<Vec<i32>>,
}

impl ProtoColumns {
    /// Columns for `reader` (the subject's latest version of the message). Fails on a
    /// recursive message, one without fields, or nesting past [`MAX_DEPTH`].
    pub fn new(reader: MessageDescriptor) -> Result<ProtoColumns, String> {
        let mut stack = Vec::new();
        let (plan, fields) = message_plan(&reader, &mut stack)?;
        let root = Column::new(&DataType::Struct(fields.clone()), true)?;
        Ok(ProtoColumns {
            expected: reader.full_name().to_string(),
            plan,
            fields,
            root,
            writers: HashMap::new(),
        })
    }

    /// Values under schema `id` were written with a message of `file` (the reader's own
    /// file too, under its id).
    pub fn add_writer(&mut self, id: i32, file: FileDescriptor) {
        let path = path_of(&file, &self.expected);
        self.writers.insert(id, Writer { file, path });
    }

    /// The type of the column [`ProtoColumns::decode`] returns.
    pub fn data_type(&self) -> DataType {
        DataType::Struct(self.fields.clone())
    }

    /// One row per value: the decoded message, or null where the value is null or failed
    /// (each failure listed with its row and reason). Errs only on a bug in the builders.
    pub fn decode(&mut self, values: &[Option<&[u8]>]) -> Result<Decoded, FramedError> {
        let mut failures = Vec::new();
        let mut scratch = Vec::new();
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value else {
                self.root.push_null();
                continue;
            };
            let before = self.root.len();
            if let Err(error) = self.decode_one(value, &mut scratch) {
                scratch.clear();
                self.root.truncate(before);
                self.root.push_null();
                failures.push(Failure { row, error });
            }
        }
        let column = self.root.finish_struct().map_err(FramedError::Internal)?;
        Ok(Decoded { column, failures })
    }

    fn decode_one<'a>(
        &mut self,
        value: &'a [u8],
        scratch: &mut Scratch<'a>,
    ) -> Result<(), FramedError> {
        let (id, rest) = split(value)?;
        let writer = self.writers.get(&id).ok_or(FramedError::UnknownId(id))?;
        // The usual case without allocating: the indexes are the reader's.
        if let Some(path) = &writer.path
            && let Some(payload) = strip_path(rest, path)
        {
            return self
                .plan
                .decode(&[payload], &mut self.root, scratch)
                .map_err(|e| FramedError::Payload(e.0.into()));
        }
        let ProtoFrame { indexes, .. } = split_protobuf(value)?;
        Err(FramedError::WrongMessage {
            id,
            found: name_at(&writer.file, &indexes)
                .unwrap_or_else(|| format!("(no message at indexes {indexes:?})")),
            expected: self.expected.clone(),
        })
    }
}

/// The payload after the message indexes, if they are `path` (encoded as
/// [`split_protobuf`] reads them).
fn strip_path<'a>(mut rest: &'a [u8], path: &[i32]) -> Option<&'a [u8]> {
    let count = super::zigzag_varint(&mut rest)?;
    if count == 0 {
        return (path == [0]).then_some(rest);
    }
    if usize::try_from(count).ok()? != path.len() {
        return None;
    }
    for &want in path {
        if super::zigzag_varint(&mut rest)? != i64::from(want) {
            return None;
        }
    }
    Some(rest)
}

/// Where the message named `full_name` sits in `file`: its index among the top-level
/// messages, then among each parent's nested messages (Confluent's message indexes).
fn path_of(file: &FileDescriptor, full_name: &str) -> Option<Vec<i32>> {
    fn walk(
        messages: impl Iterator<Item = MessageDescriptor>,
        full_name: &str,
        path: &mut Vec<i32>,
    ) -> bool {
        for (i, m) in messages.enumerate() {
            path.push(i32::try_from(i).unwrap_or(i32::MAX));
            if m.full_name() == full_name || walk(m.child_messages(), full_name, path) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = Vec::new();
    walk(file.messages(), full_name, &mut path).then_some(path)
}

fn name_at(file: &FileDescriptor, indexes: &[i32]) -> Option<String> {
    let (first, rest) = indexes.split_first()?;
    let mut m = file.messages().nth(usize::try_from(*first).ok()?)?;
    for i in rest {
        let child = m.child_messages().nth(usize::try_from(*i).ok()?)?;
        m = child;
    }
    Some(m.full_name().to_string())
}

/// Protobuf's wire types.
pub(crate) mod wire_type {
    pub(crate) const VARINT: u8 = 0;
    pub(crate) const FIXED64: u8 = 1;
    pub(crate) const LEN: u8 = 2;
    pub(crate) const FIXED32: u8 = 5;
}

/// The well-known types held as JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonKind {
    Struct,
    Value,
    ListValue,
    Any,
}

/// What one field's values are, and how they land in the column.
#[derive(Debug)]
enum Scalar {
    F64,
    F32,
    /// int32: a varint of the value sign-extended to 64 bits.
    I32,
    I64,
    U32,
    U64,
    S32,
    S64,
    Fx32,
    Fx64,
    SFx32,
    SFx64,
    Bool,
    Str,
    Bytes,
    Enum(Arc<EnumNames>),
    Message(Box<MsgPlan>),
    Timestamp,
    Duration,
    /// A wrapper message: its field 1 as a nullable primitive.
    Wrapper(Box<Scalar>),
    Json(JsonKind),
}

#[derive(Debug)]
struct EnumNames {
    by_number: HashMap<i32, Arc<str>>,
    /// The value of an absent proto3 field: the enum's first value.
    default: Arc<str>,
}

#[derive(Debug)]
enum Shape {
    Single { nullable: bool },
    Repeated,
    Map { key: Scalar },
}

#[derive(Debug)]
struct FieldPlan {
    kind: Scalar,
    /// `kind`'s wire type and whether it is a message, looked up once.
    wire: u8,
    message: bool,
    shape: Shape,
    /// The oneof it belongs to: setting it clears the others.
    oneof: Option<usize>,
}

/// Field numbers to field indexes: a table when the numbers are small (the usual case,
/// and a lookup per field on the wire), else a map.
#[derive(Debug)]
enum Lookup {
    /// `u32::MAX` where no field has the number.
    Dense(Vec<u32>),
    Sparse(HashMap<u32, usize>),
}

/// The largest field number a dense [`Lookup`] covers.
const DENSE_NUMBERS: u32 = 1024;

/// A message: its fields in column order, found by number.
#[derive(Debug)]
struct MsgPlan {
    fields: Vec<FieldPlan>,
    /// Field number -> index in `fields`.
    by_number: Lookup,
    /// Per oneof, the indexes of its fields.
    oneofs: Vec<Vec<usize>>,
    /// Per field, the bits (in a u64 of fields seen) that a second value for it would
    /// collide with: its own, and its oneof's other members. Empty past 64 fields, where
    /// only the slow path runs.
    collides: Vec<u64>,
}

impl Scalar {
    fn wire_type(&self) -> u8 {
        match self {
            Scalar::F64 | Scalar::Fx64 | Scalar::SFx64 => wire_type::FIXED64,
            Scalar::F32 | Scalar::Fx32 | Scalar::SFx32 => wire_type::FIXED32,
            Scalar::I32
            | Scalar::I64
            | Scalar::U32
            | Scalar::U64
            | Scalar::S32
            | Scalar::S64
            | Scalar::Bool
            | Scalar::Enum(_) => wire_type::VARINT,
            _ => wire_type::LEN,
        }
    }

    /// A message: a second occurrence merges into the first.
    fn is_message(&self) -> bool {
        matches!(
            self,
            Scalar::Message(_)
                | Scalar::Timestamp
                | Scalar::Duration
                | Scalar::Wrapper(_)
                | Scalar::Json(_)
        )
    }

    fn data_type(&self, fields: Option<&Fields>) -> DataType {
        match self {
            Scalar::F64 => DataType::Float64,
            Scalar::F32 => DataType::Float32,
            Scalar::I32 | Scalar::S32 | Scalar::SFx32 => DataType::Int32,
            Scalar::I64
            | Scalar::S64
            | Scalar::SFx64
            | Scalar::U32
            | Scalar::U64
            | Scalar::Fx32
            | Scalar::Fx64
            | Scalar::Duration => DataType::Int64,
            Scalar::Bool => DataType::Boolean,
            Scalar::Str | Scalar::Enum(_) | Scalar::Json(_) => DataType::Utf8,
            Scalar::Bytes => DataType::Binary,
            Scalar::Message(_) => DataType::Struct(fields.cloned().unwrap_or_default()),
            Scalar::Timestamp => timestamp_us(true),
            Scalar::Wrapper(inner) => inner.data_type(None),
        }
    }
}

/// A scalar kind and, for a message, its plan and fields.
fn scalar(
    kind: &Kind,
    stack: &mut Vec<String>,
    at: &str,
) -> Result<(Scalar, Option<Fields>), String> {
    Ok((
        match kind {
            Kind::Double => Scalar::F64,
            Kind::Float => Scalar::F32,
            Kind::Int32 => Scalar::I32,
            Kind::Int64 => Scalar::I64,
            Kind::Uint32 => Scalar::U32,
            Kind::Uint64 => Scalar::U64,
            Kind::Sint32 => Scalar::S32,
            Kind::Sint64 => Scalar::S64,
            Kind::Fixed32 => Scalar::Fx32,
            Kind::Fixed64 => Scalar::Fx64,
            Kind::Sfixed32 => Scalar::SFx32,
            Kind::Sfixed64 => Scalar::SFx64,
            Kind::Bool => Scalar::Bool,
            Kind::String => Scalar::Str,
            Kind::Bytes => Scalar::Bytes,
            Kind::Enum(e) => Scalar::Enum(Arc::new(EnumNames {
                by_number: e
                    .values()
                    .map(|v| (v.number(), Arc::from(v.name())))
                    .collect(),
                default: Arc::from(e.default_value().name()),
            })),
            Kind::Message(m) => match m.full_name() {
                "google.protobuf.Timestamp" => Scalar::Timestamp,
                "google.protobuf.Duration" => Scalar::Duration,
                "google.protobuf.DoubleValue" => Scalar::Wrapper(Box::new(Scalar::F64)),
                "google.protobuf.FloatValue" => Scalar::Wrapper(Box::new(Scalar::F32)),
                "google.protobuf.Int64Value" => Scalar::Wrapper(Box::new(Scalar::I64)),
                "google.protobuf.UInt64Value" => Scalar::Wrapper(Box::new(Scalar::U64)),
                "google.protobuf.Int32Value" => Scalar::Wrapper(Box::new(Scalar::I32)),
                "google.protobuf.UInt32Value" => Scalar::Wrapper(Box::new(Scalar::U32)),
                "google.protobuf.BoolValue" => Scalar::Wrapper(Box::new(Scalar::Bool)),
                "google.protobuf.StringValue" => Scalar::Wrapper(Box::new(Scalar::Str)),
                "google.protobuf.BytesValue" => Scalar::Wrapper(Box::new(Scalar::Bytes)),
                "google.protobuf.Struct" => Scalar::Json(JsonKind::Struct),
                "google.protobuf.Value" => Scalar::Json(JsonKind::Value),
                "google.protobuf.ListValue" => Scalar::Json(JsonKind::ListValue),
                "google.protobuf.Any" => Scalar::Json(JsonKind::Any),
                _ => {
                    let (plan, fields) =
                        message_plan(m, stack).map_err(|e| format!("{at}: {e}"))?;
                    return Ok((Scalar::Message(Box::new(plan)), Some(fields)));
                }
            },
        },
        None,
    ))
}

fn message_plan(
    m: &MessageDescriptor,
    stack: &mut Vec<String>,
) -> Result<(MsgPlan, Fields), String> {
    let name = m.full_name().to_string();
    if stack.contains(&name) {
        return Err(format!(
            "{name} is recursive (it contains itself): Parquet and Iceberg columns cannot nest without end"
        ));
    }
    if stack.len() >= MAX_DEPTH {
        return Err(format!("{name} nests deeper than {MAX_DEPTH} levels"));
    }
    if m.fields().len() == 0 {
        return Err(format!(
            "{name} has no fields (Parquet has no empty groups)"
        ));
    }
    stack.push(name.clone());
    let mut fields = Vec::with_capacity(m.fields().len());
    let mut columns = Vec::with_capacity(m.fields().len());
    let mut by_number = HashMap::new();
    let mut oneof_index: HashMap<String, usize> = HashMap::new();
    let mut oneofs: Vec<Vec<usize>> = Vec::new();
    for f in m.fields() {
        let at = format!("{name}.{}", f.name());
        let i = fields.len();
        by_number.insert(f.number(), i);
        let (shape, kind, dt, nullable) = if f.is_map() {
            let Kind::Message(entry) = f.kind() else {
                return Err(format!("{at}: a map without an entry message"));
            };
            let (key, _) = scalar(&entry.map_entry_key_field().kind(), stack, &at)?;
            let (value, vfields) = scalar(&entry.map_entry_value_field().kind(), stack, &at)?;
            let vdt = value.data_type(vfields.as_ref());
            // A message value may be missing from its entry.
            let dt = map_of(key.data_type(None), vdt, value.is_message());
            (Shape::Map { key }, value, dt, false)
        } else {
            let (kind, mfields) = scalar(&f.kind(), stack, &at)?;
            let dt = kind.data_type(mfields.as_ref());
            if f.is_list() {
                (Shape::Repeated, kind, list_of(dt, false), false)
            } else {
                let nullable = f.supports_presence() || kind.is_message();
                (Shape::Single { nullable }, kind, dt, nullable)
            }
        };
        let oneof = match f.containing_oneof() {
            Some(o) => {
                let next = oneofs.len();
                let g = *oneof_index.entry(o.full_name().to_string()).or_insert(next);
                if g == next {
                    oneofs.push(Vec::new());
                }
                oneofs[g].push(i);
                Some(g)
            }
            None => None,
        };
        columns.push(Field::new(f.name(), dt, nullable));
        fields.push(FieldPlan {
            wire: kind.wire_type(),
            message: kind.is_message(),
            kind,
            shape,
            oneof,
        });
    }
    stack.pop();
    let by_number = match by_number.keys().max() {
        Some(&max) if max <= DENSE_NUMBERS => {
            let mut table = vec![u32::MAX; max as usize + 1];
            for (&n, &i) in &by_number {
                // At most one entry per field of the message: far below u32::MAX.
                table[n as usize] = i as u32;
            }
            Lookup::Dense(table)
        }
        _ => Lookup::Sparse(by_number),
    };
    let collides = if fields.len() <= 64 {
        (0..fields.len())
            .map(|i| match fields[i].oneof {
                Some(g) => oneofs[g].iter().fold(0u64, |m, &j| m | (1 << j)),
                None => 1 << i,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok((
        MsgPlan {
            fields,
            by_number,
            oneofs,
            collides,
        },
        Fields::from(columns),
    ))
}

/// One field's value as the message is scanned: the last one wins, messages merge.
#[derive(Debug, Clone, Default)]
enum Slot<'a> {
    #[default]
    Empty,
    Raw(Raw<'a>),
    /// Occurrences of a message field, to merge (decoding them one after the other is
    /// protobuf's merge).
    Parts(Vec<&'a [u8]>),
}

fn mismatched(wt: u8, number: u32, kind: &Scalar) -> DecodeError {
    DecodeError::new(format!(
        "field {number} has wire type {wt}, its type ({kind:?}) wants {}",
        kind.wire_type()
    ))
}

/// Slots of the messages being decoded, innermost last: one allocation per chunk
/// rather than one per message.
type Scratch<'a> = Vec<Slot<'a>>;

impl MsgPlan {
    fn field_at(&self, number: u32) -> Option<usize> {
        match &self.by_number {
            Lookup::Dense(table) => table
                .get(number as usize)
                .copied()
                .filter(|&i| i != u32::MAX)
                .map(|i| i as usize),
            Lookup::Sparse(map) => map.get(&number).copied(),
        }
    }

    /// Decodes the occurrences `parts` of one message into a row of the struct `col`.
    fn decode<'a>(
        &self,
        parts: &[&'a [u8]],
        col: &mut Column,
        scratch: &mut Scratch<'a>,
    ) -> Result<(), DecodeError> {
        let kids = col.children()?;
        if kids.len() != self.fields.len() {
            return Err(DecodeError::new(
                "internal: a message's columns do not match its fields",
            ));
        }
        if let [part] = parts
            && !self.collides.is_empty()
        {
            let row = col_row(kids);
            if self.direct(part, kids, scratch)? {
                return col.end_struct();
            }
            // A field given twice: take back what was pushed, merge the slow way.
            for kid in kids.iter_mut() {
                kid.truncate(row);
            }
        }
        let base = scratch.len();
        scratch.resize(base + self.fields.len(), Slot::Empty);
        let out = self.fill(parts, kids, scratch, base);
        scratch.truncate(base);
        out?;
        col.end_struct()
    }

    fn fill<'a>(
        &self,
        parts: &[&'a [u8]],
        kids: &mut [Column],
        scratch: &mut Scratch<'a>,
        base: usize,
    ) -> Result<(), DecodeError> {
        for part in parts {
            self.scan(part, kids, scratch, base)?;
        }
        for (i, (f, kid)) in self.fields.iter().zip(kids.iter_mut()).enumerate() {
            match (&f.shape, std::mem::take(&mut scratch[base + i])) {
                (Shape::Single { nullable }, Slot::Empty) => {
                    if *nullable {
                        kid.push_null();
                    } else {
                        push_default(&f.kind, kid)?;
                    }
                }
                (Shape::Single { .. }, Slot::Raw(raw)) => push(&f.kind, raw, kid, scratch)?,
                (Shape::Single { .. }, Slot::Parts(parts)) => {
                    push_message(&f.kind, &parts, kid, scratch)?
                }
                (Shape::Repeated | Shape::Map { .. }, _) => kid.end_list()?,
            }
        }
        Ok(())
    }

    fn scan<'a>(
        &self,
        buf: &'a [u8],
        kids: &mut [Column],
        scratch: &mut Scratch<'a>,
        base: usize,
    ) -> Result<(), DecodeError> {
        let mut w = Wire::new(buf);
        while !w.is_empty() {
            let (number, wt) = w.key()?;
            let Some(i) = self.field_at(number) else {
                w.skip(wt, number)?;
                continue;
            };
            let f = &self.fields[i];
            let kid = &mut kids[i];
            match &f.shape {
                Shape::Single { .. } => {
                    if wt != f.wire {
                        return Err(mismatched(wt, number, &f.kind));
                    }
                    let raw = w.read(wt)?;
                    let slot = &mut scratch[base + i];
                    *slot = match (std::mem::take(slot), raw) {
                        (Slot::Raw(Raw::Len(first)), Raw::Len(next)) if f.message => {
                            Slot::Parts(vec![first, next])
                        }
                        (Slot::Parts(mut parts), Raw::Len(next)) => {
                            parts.push(next);
                            Slot::Parts(parts)
                        }
                        (_, raw) => Slot::Raw(raw),
                    };
                    if let Some(g) = f.oneof {
                        for &j in &self.oneofs[g] {
                            if j != i {
                                scratch[base + j] = Slot::Empty;
                            }
                        }
                    }
                }
                Shape::Repeated | Shape::Map { .. } => {
                    many(f, number, wt, &mut w, kid, scratch)?;
                }
            }
        }
        Ok(())
    }
}

impl MsgPlan {
    /// The fast path: each value pushed as it comes, for a message whose fields each
    /// come at most once (as every encoder writes them). False, with values pushed, when
    /// a field comes twice: then the slots of [`MsgPlan::fill`] decide which one counts.
    fn direct<'a>(
        &self,
        buf: &'a [u8],
        kids: &mut [Column],
        scratch: &mut Scratch<'a>,
    ) -> Result<bool, DecodeError> {
        let mut seen = 0u64;
        let mut w = Wire::new(buf);
        while !w.is_empty() {
            let (number, wt) = w.key()?;
            let Some(i) = self.field_at(number) else {
                w.skip(wt, number)?;
                continue;
            };
            let (f, kid) = (&self.fields[i], &mut kids[i]);
            if let Shape::Single { .. } = f.shape {
                if seen & self.collides[i] != 0 {
                    return Ok(false);
                }
                seen |= 1 << i;
                if wt != f.wire {
                    return Err(mismatched(wt, number, &f.kind));
                }
                push(&f.kind, w.read(wt)?, kid, scratch)?;
            } else {
                many(f, number, wt, &mut w, kid, scratch)?;
            }
        }
        for (i, (f, kid)) in self.fields.iter().zip(kids.iter_mut()).enumerate() {
            match f.shape {
                Shape::Single { .. } if seen & (1 << i) != 0 => {}
                Shape::Single { nullable: true } => kid.push_null(),
                Shape::Single { nullable: false } => push_default(&f.kind, kid)?,
                Shape::Repeated | Shape::Map { .. } => kid.end_list()?,
            }
        }
        Ok(true)
    }
}

/// The rows of a struct's columns so far (all alike between rows).
fn col_row(kids: &[Column]) -> usize {
    kids.first().map_or(0, Column::len)
}

/// One occurrence of a repeated or map field: its items pushed into the list or map.
fn many<'a>(
    f: &FieldPlan,
    number: u32,
    wt: u8,
    w: &mut Wire<'a>,
    kid: &mut Column,
    scratch: &mut Scratch<'a>,
) -> Result<(), DecodeError> {
    match &f.shape {
        Shape::Map { key } => {
            if wt != wire_type::LEN {
                return Err(mismatched(wt, number, &f.kind));
            }
            map_entry(key, &f.kind, w.bytes()?, kid.items()?, scratch)
        }
        _ => {
            let items = kid.items()?;
            let want = f.wire;
            if wt == wire_type::LEN && want != wire_type::LEN {
                // Packed: the values one after another.
                let mut packed = Wire::new(w.bytes()?);
                while !packed.is_empty() {
                    push_scalar(&f.kind, packed.read(want)?, items)?;
                }
                Ok(())
            } else if wt == want {
                push(&f.kind, w.read(wt)?, items, scratch)
            } else {
                Err(mismatched(wt, number, &f.kind))
            }
        }
    }
}

/// One map entry (a message of key 1 and value 2, either possibly absent) into the
/// entries struct.
fn map_entry<'a>(
    key: &Scalar,
    value: &Scalar,
    buf: &'a [u8],
    entries: &mut Column,
    scratch: &mut Scratch<'a>,
) -> Result<(), DecodeError> {
    let mut k = None;
    let mut v: Slot<'a> = Slot::Empty;
    let mut w = Wire::new(buf);
    while !w.is_empty() {
        let (number, wt) = w.key()?;
        match number {
            1 if wt == key.wire_type() => k = Some(w.read(wt)?),
            2 if wt == value.wire_type() => {
                let raw = w.read(wt)?;
                v = match (v, raw) {
                    (Slot::Raw(Raw::Len(a)), Raw::Len(b)) if value.is_message() => {
                        Slot::Parts(vec![a, b])
                    }
                    (Slot::Parts(mut p), Raw::Len(b)) => {
                        p.push(b);
                        Slot::Parts(p)
                    }
                    (_, raw) => Slot::Raw(raw),
                }
            }
            1 | 2 => {
                return Err(DecodeError::new(format!(
                    "map entry field {number} has wire type {wt}"
                )));
            }
            _ => w.skip(wt, number)?,
        }
    }
    let [kc, vc] = entries.children()? else {
        return Err(DecodeError::new(
            "internal: a map entry is not a key and a value",
        ));
    };
    match k {
        Some(raw) => push_scalar(key, raw, kc)?,
        None => push_default(key, kc)?,
    }
    match v {
        Slot::Empty if value.is_message() => vc.push_null(),
        Slot::Empty => push_default(value, vc)?,
        Slot::Raw(raw) => push(value, raw, vc, scratch)?,
        Slot::Parts(parts) => push_message(value, &parts, vc, scratch)?,
    }
    entries.end_struct()
}

/// The value of an absent proto3 field.
fn push_default(kind: &Scalar, col: &mut Column) -> Result<(), DecodeError> {
    match kind {
        Scalar::F64 => col.push_f64(0.0),
        Scalar::F32 => col.push_f32(0.0),
        Scalar::I32 | Scalar::S32 | Scalar::SFx32 => col.push_i32(0),
        Scalar::Bool => col.push_bool(false),
        Scalar::Str | Scalar::Bytes => col.push_bytes(b""),
        Scalar::Enum(e) => col.push_bytes(e.default.as_bytes()),
        Scalar::Message(_)
        | Scalar::Timestamp
        | Scalar::Duration
        | Scalar::Wrapper(_)
        | Scalar::Json(_) => {
            col.push_null();
            Ok(())
        }
        _ => col.push_i64(0),
    }
}

/// Any value off the wire.
fn push<'a>(
    kind: &Scalar,
    raw: Raw<'a>,
    col: &mut Column,
    scratch: &mut Scratch<'a>,
) -> Result<(), DecodeError> {
    match raw {
        Raw::Len(b) if kind.is_message() => push_message(kind, &[b], col, scratch),
        raw => push_scalar(kind, raw, col),
    }
}

/// A number, string or bytes.
fn push_scalar(kind: &Scalar, raw: Raw<'_>, col: &mut Column) -> Result<(), DecodeError> {
    let n = match (raw, kind) {
        (Raw::Int(n), _) => n,
        (Raw::Len(b), Scalar::Str) => return col.push_bytes(super::column::utf8(b)?),
        (Raw::Len(b), Scalar::Bytes) => return col.push_bytes(b),
        (Raw::Len(_), _) => {
            return Err(DecodeError::new(format!("bytes where a {kind:?} belongs")));
        }
    };
    // The casts below are protobuf's own: varints carry 64 bits, narrower types take
    // the low bits.
    match kind {
        Scalar::F64 => col.push_f64(f64::from_bits(n)),
        Scalar::F32 => col.push_f32(f32::from_bits(n as u32)),
        Scalar::I32 | Scalar::SFx32 => col.push_i32(n as i32),
        Scalar::S32 => col.push_i32(((n as u32) >> 1) as i32 ^ -((n & 1) as i32)),
        Scalar::I64 | Scalar::SFx64 | Scalar::U64 | Scalar::Fx64 => col.push_i64(n as i64),
        Scalar::S64 => col.push_i64((n >> 1) as i64 ^ -((n & 1) as i64)),
        Scalar::U32 | Scalar::Fx32 => col.push_i64(i64::from(n as u32)),
        Scalar::Bool => col.push_bool(n != 0),
        Scalar::Enum(e) => {
            let number = n as i32;
            match e.by_number.get(&number) {
                Some(name) => col.push_bytes(name.as_bytes()),
                None => col.push_bytes(number.to_string().as_bytes()),
            }
        }
        _ => Err(DecodeError::new(format!(
            "a number where a {kind:?} belongs"
        ))),
    }
}

/// A message-typed value given in `parts` (more than one merge, as protobuf merges a
/// message field given twice).
fn push_message<'a>(
    kind: &Scalar,
    parts: &[&'a [u8]],
    col: &mut Column,
    scratch: &mut Scratch<'a>,
) -> Result<(), DecodeError> {
    if let Scalar::Message(plan) = kind {
        return plan.decode(parts, col, scratch);
    }
    let joined;
    let one: &[u8] = match parts {
        [one] => one,
        _ => {
            joined = parts.concat();
            &joined
        }
    };
    match kind {
        Scalar::Timestamp | Scalar::Duration => {
            let (seconds, nanos) = super::proto_wire::seconds_nanos(one)?;
            let micros = seconds
                .checked_mul(1_000_000)
                .and_then(|us| us.checked_add(i64::from(nanos) / 1000))
                .ok_or_else(|| {
                    DecodeError::new(format!("{seconds} s overflows in microseconds"))
                })?;
            col.push_i64(micros)
        }
        Scalar::Wrapper(inner) => {
            // Field 1, the last one given; absent is the default.
            let mut value = None;
            let mut w = Wire::new(one);
            while !w.is_empty() {
                let (number, wt) = w.key()?;
                if number == 1 && wt == inner.wire_type() {
                    value = Some(w.read(wt)?);
                } else {
                    w.skip(wt, number)?;
                }
            }
            match value {
                Some(raw) => push_scalar(inner, raw, col),
                None => push_default(inner, col),
            }
        }
        Scalar::Json(k) => col.push_bytes(json_text(*k, one)?.as_bytes()),
        _ => push_scalar(kind, Raw::Len(one), col),
    }
}
