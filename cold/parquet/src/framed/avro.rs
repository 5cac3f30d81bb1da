//! Confluent-framed Avro values -> one struct column in the reader schema's shape.
//!
//! Each writer schema (a schema id) is compiled once, against the reader schema, into a
//! [`Plan`]: Avro's schema resolution (fields matched by name or alias, a field the writer
//! lacks takes the reader's default, a field the reader lacks is skipped, numeric
//! promotions, union branches matched) decided ahead, so decoding a value is one walk of
//! its bytes straight into the column builders, with no intermediate values.

use std::sync::Arc;

use arrow::datatypes::{DataType, Fields};

use super::avro_schema::{
    self, BytesLogical, FixedLogical, IntLogical, LongLogical, Ty, encode_default,
};
use super::column::{Column, DecodeError};
use super::{Decoded, Failure, FramedError, split};

/// Items of an array or map whose items take no bytes on the wire (nulls, empty
/// records): the bytes left cannot bound their count, so this does.
const MAX_ZERO_SIZE_ITEMS: usize = 1 << 16;

/// Decodes Confluent-framed Avro values of one subject into a struct column shaped by the
/// reader schema (the subject's latest version).
#[derive(Debug)]
pub struct AvroColumns {
    reader: Ty,
    fields: Fields,
    root: Column,
    /// Per schema id, its plan: few ids per subject, so a list searched from the last
    /// one found (values of one id come in runs).
    writers: Vec<(i32, Plan)>,
    last: usize,
}

impl AvroColumns {
    /// `reader_schema_json` is self-contained (see [`super::inline_references`]) and a
    /// record. Fails on a schema Parquet cannot hold: recursive types, nesting deeper
    /// than [`avro_schema::MAX_DEPTH`], records without fields, decimals above 38 digits.
    pub fn new(reader_schema_json: &str) -> Result<AvroColumns, String> {
        let reader = avro_schema::parse(reader_schema_json)?;
        let Ty::Record(record) = &reader else {
            return Err(format!(
                "the reader schema is a {}, not a record: only records become columns",
                reader.branch_name()
            ));
        };
        let fields = avro_schema::record_fields(record, &record.name.simple)?;
        let root = Column::new(&DataType::Struct(fields.clone()), true)?;
        Ok(AvroColumns {
            reader,
            fields,
            root,
            writers: Vec::new(),
            last: 0,
        })
    }

    /// Values under schema `id` were written with `writer_schema_json` (self-contained; the
    /// reader's own schema too, under its own id). Fails when Avro's resolution rules do
    /// not let the reader read it; values under such an id then fail as unknown.
    pub fn add_writer(&mut self, id: i32, writer_schema_json: &str) -> Result<(), String> {
        let writer = avro_schema::parse(writer_schema_json)?;
        let plan = plan(&writer, &self.reader, "")
            .map_err(|e| format!("schema id {id} cannot be read with the reader schema: {e}"))?;
        match self.writers.iter_mut().find(|(i, _)| *i == id) {
            Some(w) => w.1 = plan,
            None => self.writers.push((id, plan)),
        }
        Ok(())
    }

    /// The type of the column [`AvroColumns::decode`] returns: a struct of the reader's
    /// fields.
    pub fn data_type(&self) -> DataType {
        DataType::Struct(self.fields.clone())
    }

    /// One row per value: the decoded record, or null where the value is null or failed
    /// (each failure listed with its row and reason). Errs only on a bug in the builders.
    pub fn decode(&mut self, values: &[Option<&[u8]>]) -> Result<Decoded, FramedError> {
        let mut failures = Vec::new();
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value else {
                self.root.push_null();
                continue;
            };
            let before = self.root.len();
            if let Err(error) = self.decode_one(value) {
                self.root.truncate(before);
                self.root.push_null();
                failures.push(Failure { row, error });
            }
        }
        let column = self.root.finish_struct().map_err(FramedError::Internal)?;
        Ok(Decoded { column, failures })
    }

    fn decode_one(&mut self, value: &[u8]) -> Result<(), FramedError> {
        let (id, payload) = split(value)?;
        if self.writers.get(self.last).is_none_or(|(i, _)| *i != id) {
            self.last = self
                .writers
                .iter()
                .position(|(i, _)| *i == id)
                .ok_or(FramedError::UnknownId(id))?;
        }
        let Some((_, plan)) = self.writers.get(self.last) else {
            return Err(FramedError::UnknownId(id));
        };
        let mut cur = Cursor::new(payload);
        plan.run(&mut cur, &mut self.root)
            .map_err(|e| FramedError::Payload(e.0.into()))?;
        match cur.remaining() {
            0 => Ok(()),
            n => Err(FramedError::Trailing(n)),
        }
    }
}

/// How a number read off the wire lands in its column.
#[derive(Debug, Clone, Copy)]
enum Num {
    I32,
    /// Times `mul`: milliseconds to the microseconds of the column.
    I64 {
        mul: i64,
    },
    F32,
    F64,
}

/// How bytes read off the wire land in their column.
#[derive(Debug, Clone, Copy)]
enum Sink {
    Binary,
    Utf8,
    /// Big-endian two's complement, checked against the column's precision.
    Decimal {
        precision: usize,
    },
    /// 16 bytes as a hyphenated UUID.
    Uuid,
}

/// One writer type read as one reader type.
#[derive(Debug)]
enum Plan {
    Null,
    Bool,
    Int(Num),
    Long(Num),
    Float(Num),
    Double,
    Bytes(Sink),
    Fixed(usize, Sink),
    /// Per writer symbol: its name, and the reader's symbol it becomes.
    Enum(Vec<(Arc<str>, Option<Arc<str>>)>),
    Array {
        item: Box<Plan>,
        min_size: usize,
    },
    Map {
        value: Box<Plan>,
        min_size: usize,
    },
    Record(Box<RecordPlan>),
    /// A writer union: per branch the plan, or why the reader cannot take that branch
    /// (the value fails, not the schema).
    Union(Vec<Result<Plan, String>>),
    /// A value into one branch of a reader union held as a struct of branches.
    Branch {
        index: usize,
        plan: Box<Plan>,
    },
}

#[derive(Debug)]
struct RecordPlan {
    steps: Vec<Step>,
    defaults: Vec<DefaultField>,
}

#[derive(Debug)]
enum Step {
    Read { child: usize, plan: Plan },
    Skip(Ty),
}

/// A reader field the writer lacks: its default, Avro-encoded, and how to read it.
#[derive(Debug)]
struct DefaultField {
    child: usize,
    bytes: Vec<u8>,
    plan: Plan,
}

/// Compiles Avro's resolution of `w` (writer) into `r` (reader). `at` names the field.
fn plan(w: &Ty, r: &Ty, at: &str) -> Result<Plan, String> {
    if let Ty::Union(branches) = w {
        return Ok(Plan::Union(
            branches.iter().map(|b| plan(b, r, at)).collect(),
        ));
    }
    if let Ty::Union(branches) = r {
        return into_union(w, branches, at);
    }
    direct(w, r, at)
}

/// A writer value that is not a union into a reader union: the first branch of the same
/// type, else the first it can be promoted to.
fn into_union(w: &Ty, branches: &[Ty], at: &str) -> Result<Plan, String> {
    if *w == Ty::Null {
        return if branches.contains(&Ty::Null) {
            Ok(Plan::Null)
        } else {
            Err(format!("{at}: null where the reader's union has no null"))
        };
    }
    let others: Vec<&Ty> = branches.iter().filter(|b| **b != Ty::Null).collect();
    if let [only] = others.as_slice() {
        // A nullable column of that type.
        return direct(w, only, at);
    }
    let exact = others.iter().position(|r| same_kind(w, r));
    let index = exact
        .or_else(|| others.iter().position(|r| direct(w, r, at).is_ok()))
        .ok_or_else(|| {
            format!(
                "{at}: no branch of the reader's union reads a {}",
                w.branch_name()
            )
        })?;
    Ok(Plan::Branch {
        index,
        plan: Box::new(direct(w, others[index], at)?),
    })
}

fn same_kind(w: &Ty, r: &Ty) -> bool {
    match (w, r) {
        (Ty::Fixed { name: a, .. }, Ty::Fixed { name: b, .. }) => b.reads(a),
        (Ty::Enum(a), Ty::Enum(b)) => b.name.reads(&a.name),
        (Ty::Record(a), Ty::Record(b)) => b.name.reads(&a.name),
        _ => std::mem::discriminant(w) == std::mem::discriminant(r),
    }
}

/// Where a reader's number type puts an int or long: its column and unit.
fn num_sink(r: &Ty) -> Option<Num> {
    Some(match r {
        Ty::Int(IntLogical::None | IntLogical::Date) => Num::I32,
        Ty::Int(IntLogical::TimeMillis) => Num::I64 { mul: 1000 },
        Ty::Long(LongLogical::TimestampMillis | LongLogical::LocalTimestampMillis) => {
            Num::I64 { mul: 1000 }
        }
        Ty::Long(_) => Num::I64 { mul: 1 },
        Ty::Float => Num::F32,
        Ty::Double => Num::F64,
        _ => return None,
    })
}

fn bytes_sink(w: &Ty, r: &Ty, at: &str) -> Result<Sink, String> {
    let scale_of = |t: &Ty| match t {
        Ty::Bytes(BytesLogical::Decimal { scale, .. })
        | Ty::Fixed {
            logical: FixedLogical::Decimal { scale, .. },
            ..
        } => Some(*scale),
        _ => None,
    };
    Ok(match r {
        Ty::String(_) => Sink::Utf8,
        Ty::Fixed {
            logical: FixedLogical::Uuid,
            ..
        } => Sink::Uuid,
        Ty::Bytes(BytesLogical::Decimal { precision, scale })
        | Ty::Fixed {
            logical: FixedLogical::Decimal { precision, scale },
            ..
        } => {
            if let Some(ws) = scale_of(w).filter(|ws| ws != scale) {
                return Err(format!(
                    "{at}: decimal scale {ws} cannot be read with scale {scale}"
                ));
            }
            Sink::Decimal {
                precision: *precision,
            }
        }
        _ => Sink::Binary,
    })
}

fn direct(w: &Ty, r: &Ty, at: &str) -> Result<Plan, String> {
    let cannot = || {
        format!(
            "{at}: a {} cannot be read as a {}",
            w.branch_name(),
            r.branch_name()
        )
    };
    Ok(match (w, r) {
        (Ty::Boolean, Ty::Boolean) => Plan::Bool,
        (Ty::Int(_), _) => Plan::Int(num_sink(r).ok_or_else(cannot)?),
        (Ty::Long(_), Ty::Long(_) | Ty::Float | Ty::Double) => {
            Plan::Long(num_sink(r).ok_or_else(cannot)?)
        }
        (Ty::Float, Ty::Float) => Plan::Float(Num::F32),
        (Ty::Float, Ty::Double) => Plan::Float(Num::F64),
        (Ty::Double, Ty::Double) => Plan::Double,
        (Ty::Bytes(_) | Ty::String(_), Ty::Bytes(_) | Ty::String(_)) => {
            Plan::Bytes(bytes_sink(w, r, at)?)
        }
        (
            Ty::Fixed {
                name: wn, size: ws, ..
            },
            Ty::Fixed {
                name: rn, size: rs, ..
            },
        ) => {
            if !rn.reads(wn) || ws != rs {
                return Err(format!(
                    "{at}: fixed {} ({ws} bytes) cannot be read as fixed {} ({rs} bytes)",
                    wn.full, rn.full
                ));
            }
            Plan::Fixed(*ws, bytes_sink(w, r, at)?)
        }
        (Ty::Enum(we), Ty::Enum(re)) => {
            if !re.name.reads(&we.name) {
                return Err(cannot());
            }
            let reader = |s: &str| re.symbols.iter().any(|x| x == s).then(|| Arc::from(s));
            Plan::Enum(
                we.symbols
                    .iter()
                    .map(|s| {
                        let to = reader(s).or_else(|| re.default.as_deref().and_then(reader));
                        (Arc::from(s.as_str()), to)
                    })
                    .collect(),
            )
        }
        (Ty::Array(wi), Ty::Array(ri)) => Plan::Array {
            item: Box::new(plan(wi, ri, &format!("{at}[]"))?),
            min_size: wi.min_size(),
        },
        (Ty::Map(wv), Ty::Map(rv)) => Plan::Map {
            value: Box::new(plan(wv, rv, &format!("{at}{{}}"))?),
            min_size: wv.min_size(),
        },
        (Ty::Record(wr), Ty::Record(rr)) => {
            if !rr.name.reads(&wr.name) {
                return Err(format!(
                    "{at}: record {} cannot be read as record {}",
                    wr.name.full, rr.name.full
                ));
            }
            let mut taken = vec![false; rr.fields.len()];
            let mut steps = Vec::with_capacity(wr.fields.len());
            for wf in &wr.fields {
                let found = rr
                    .fields
                    .iter()
                    .position(|rf| rf.name == wf.name)
                    .or_else(|| {
                        rr.fields
                            .iter()
                            .position(|rf| rf.aliases.contains(&wf.name))
                    });
                match found.filter(|&i| !taken[i]) {
                    Some(i) => {
                        taken[i] = true;
                        let rf = &rr.fields[i];
                        let plan = plan(&wf.ty, &rf.ty, &format!("{at}.{}", rf.name))?;
                        steps.push(Step::Read { child: i, plan });
                    }
                    None => steps.push(Step::Skip(wf.ty.clone())),
                }
            }
            let mut defaults = Vec::new();
            for (i, rf) in rr.fields.iter().enumerate().filter(|(i, _)| !taken[*i]) {
                let here = format!("{at}.{}", rf.name);
                let default = rf.default.as_ref().ok_or_else(|| {
                    format!("{here}: the writer has no such field and the reader's has no default")
                })?;
                let mut bytes = Vec::new();
                encode_default(&rf.ty, default, &mut bytes).map_err(|e| format!("{here}: {e}"))?;
                let plan = plan(&rf.ty, &rf.ty, &here)?;
                defaults.push(DefaultField {
                    child: i,
                    bytes,
                    plan,
                });
            }
            Plan::Record(Box::new(RecordPlan { steps, defaults }))
        }
        _ => return Err(cannot()),
    })
}

/// Avro's binary encoding, read with every length checked against the bytes left.
struct Cursor<'a> {
    buf: &'a [u8],
}

#[cold]
fn short() -> DecodeError {
    DecodeError::new("the value ends early")
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf }
    }

    fn remaining(&self) -> usize {
        self.buf.len()
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(short());
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    #[inline]
    fn long(&mut self) -> Result<i64, DecodeError> {
        // Most values fit one byte.
        if let Some((&b, rest)) = self.buf.split_first()
            && b < 0x80
        {
            self.buf = rest;
            return Ok(i64::from(b >> 1) ^ -i64::from(b & 1));
        }
        let mut z: u64 = 0;
        for i in 0..10 {
            let (&b, rest) = self.buf.split_first().ok_or_else(short)?;
            self.buf = rest;
            if i == 9 && b > 1 {
                break;
            }
            z |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok((z >> 1) as i64 ^ -((z & 1) as i64));
            }
        }
        Err(DecodeError::new("a varint longer than 64 bits"))
    }

    #[inline]
    fn int(&mut self) -> Result<i32, DecodeError> {
        let n = self.long()?;
        i32::try_from(n).map_err(|_| DecodeError::new(format!("int {n} is out of range")))
    }

    #[inline]
    fn len(&mut self) -> Result<usize, DecodeError> {
        let n = self.long()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.buf.len())
            .ok_or_else(|| {
                DecodeError::new(format!(
                    "a length of {n} with {} bytes left",
                    self.buf.len()
                ))
            })
    }

    #[inline]
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.len()?;
        self.take(n)
    }

    #[inline]
    fn array(&mut self, n: usize) -> Result<[u8; 8], DecodeError> {
        let mut out = [0; 8];
        out[..n].copy_from_slice(self.take(n)?);
        Ok(out)
    }

    /// The item count of the next block of an array or map (0 at the end), checked
    /// against the bytes left: each item takes at least `min_size` bytes, and items that
    /// take none share [`MAX_ZERO_SIZE_ITEMS`] with `so_far`.
    fn block(&mut self, min_size: usize, so_far: usize) -> Result<usize, DecodeError> {
        let mut n = self.long()?;
        if n < 0 {
            n = n
                .checked_neg()
                .ok_or_else(|| DecodeError::new("a block count of -2^63"))?;
            // The block's size in bytes, for skipping: not needed to decode.
            self.long()?;
        }
        let n = usize::try_from(n).map_err(|_| DecodeError::new("a block count out of range"))?;
        let fits = match min_size {
            0 => n.saturating_add(so_far) <= MAX_ZERO_SIZE_ITEMS,
            m => n <= self.buf.len() / m,
        };
        if !fits {
            return Err(DecodeError::new(format!(
                "a block of {n} items with {} bytes left",
                self.buf.len()
            )));
        }
        Ok(n)
    }
}

use super::column::utf8;

impl Sink {
    #[inline]
    fn push(self, b: &[u8], col: &mut Column) -> Result<(), DecodeError> {
        match self {
            Sink::Binary => col.push_bytes(b),
            Sink::Utf8 => col.push_bytes(utf8(b)?),
            Sink::Decimal { precision } => col.push_i128(super::decimal_from_be(b, precision)?),
            Sink::Uuid => col.push_bytes(super::uuid_text(b)?.as_bytes()),
        }
    }
}

impl Num {
    #[inline]
    fn push_i64(self, v: i64, col: &mut Column) -> Result<(), DecodeError> {
        match self {
            Num::I32 => col.push_i32(
                i32::try_from(v)
                    .map_err(|_| DecodeError::new(format!("{v} does not fit an int")))?,
            ),
            Num::I64 { mul } => col.push_i64(
                v.checked_mul(mul)
                    .ok_or_else(|| DecodeError::new(format!("{v} overflows in microseconds")))?,
            ),
            Num::F32 => col.push_f32(v as f32),
            Num::F64 => col.push_f64(v as f64),
        }
    }
}

impl Plan {
    /// Reads one value into `col`. Scalars are handled here, in a small frame; the
    /// rest in [`Plan::run_nested`].
    #[inline]
    fn run(&self, cur: &mut Cursor<'_>, col: &mut Column) -> Result<(), DecodeError> {
        match self {
            Plan::Long(num) => num.push_i64(cur.long()?, col),
            Plan::Bytes(sink) => sink.push(cur.bytes()?, col),
            Plan::Int(num) => num.push_i64(i64::from(cur.int()?), col),
            Plan::Double => col.push_f64(f64::from_le_bytes(cur.array(8)?)),
            Plan::Bool => match cur.take(1)?[0] {
                0 => col.push_bool(false),
                1 => col.push_bool(true),
                b => Err(DecodeError::new(format!("boolean byte {b}"))),
            },
            Plan::Null => {
                col.push_null();
                Ok(())
            }
            _ => self.run_nested(cur, col),
        }
    }

    #[inline(never)]
    fn run_nested(&self, cur: &mut Cursor<'_>, col: &mut Column) -> Result<(), DecodeError> {
        match self {
            Plan::Null
            | Plan::Bool
            | Plan::Int(_)
            | Plan::Long(_)
            | Plan::Double
            | Plan::Bytes(_) => {
                return self.run(cur, col);
            }
            Plan::Float(num) => {
                let v = f32::from_le_bytes(cur.take(4)?.try_into().map_err(|_| short())?);
                match num {
                    Num::F64 => col.push_f64(f64::from(v))?,
                    _ => col.push_f32(v)?,
                }
            }
            Plan::Fixed(n, sink) => sink.push(cur.take(*n)?, col)?,
            Plan::Enum(symbols) => {
                let i = cur.long()?;
                let (name, to) = usize::try_from(i)
                    .ok()
                    .and_then(|i| symbols.get(i))
                    .ok_or_else(|| DecodeError::new(format!("enum index {i} is out of range")))?;
                let to = to.as_ref().ok_or_else(|| {
                    DecodeError::new(format!(
                        "enum symbol {name} is not in the reader's enum, which has no default"
                    ))
                })?;
                col.push_bytes(to.as_bytes())?;
            }
            Plan::Array { item, min_size } => {
                let items = col.items()?;
                let mut count = 0;
                loop {
                    let n = cur.block(*min_size, count)?;
                    if n == 0 {
                        break;
                    }
                    count += n;
                    for _ in 0..n {
                        item.run(cur, items)?;
                    }
                }
                col.end_list()?;
            }
            Plan::Map { value, min_size } => {
                let entries = col.items()?;
                let mut count = 0;
                loop {
                    // Each entry has a key: at least its length byte.
                    let n = cur.block(1 + *min_size, count)?;
                    if n == 0 {
                        break;
                    }
                    count += n;
                    for _ in 0..n {
                        let kv = entries.children()?;
                        let [key, val] = kv else {
                            return Err(DecodeError::new(
                                "internal: a map entry is not a key and a value",
                            ));
                        };
                        key.push_bytes(utf8(cur.bytes()?)?)?;
                        value.run(cur, val)?;
                        entries.end_struct()?;
                    }
                }
                col.end_list()?;
            }
            Plan::Record(r) => {
                let kids = col.children()?;
                for step in &r.steps {
                    match step {
                        Step::Read { child, plan } => plan.run(cur, child_of(kids, *child)?)?,
                        Step::Skip(ty) => skip(ty, cur)?,
                    }
                }
                for d in &r.defaults {
                    d.plan
                        .run(&mut Cursor::new(&d.bytes), child_of(kids, d.child)?)?;
                }
                col.end_struct()?;
            }
            Plan::Union(branches) => {
                let i = cur.long()?;
                match usize::try_from(i).ok().and_then(|i| branches.get(i)) {
                    Some(Ok(plan)) => plan.run(cur, col)?,
                    Some(Err(why)) => return Err(DecodeError::new(why.clone())),
                    None => {
                        return Err(DecodeError::new(format!(
                            "union branch {i} is out of range"
                        )));
                    }
                }
            }
            Plan::Branch { index, plan } => {
                for (j, kid) in col.children()?.iter_mut().enumerate() {
                    if j == *index {
                        plan.run(cur, kid)?;
                    } else {
                        kid.push_null();
                    }
                }
                col.end_struct()?;
            }
        }
        Ok(())
    }
}

fn child_of(kids: &mut [Column], i: usize) -> Result<&mut Column, DecodeError> {
    kids.get_mut(i)
        .ok_or_else(|| DecodeError::new("internal: a field past the record's columns"))
}

/// Passes over a value of the writer's type `ty` (a field the reader does not have).
fn skip(ty: &Ty, cur: &mut Cursor<'_>) -> Result<(), DecodeError> {
    match ty {
        Ty::Null => {}
        Ty::Boolean => {
            cur.take(1)?;
        }
        Ty::Int(_) | Ty::Long(_) | Ty::Enum(_) => {
            cur.long()?;
        }
        Ty::Float => {
            cur.take(4)?;
        }
        Ty::Double => {
            cur.take(8)?;
        }
        Ty::Bytes(_) | Ty::String(_) => {
            cur.bytes()?;
        }
        Ty::Fixed { size, .. } => {
            cur.take(*size)?;
        }
        Ty::Array(item) => skip_blocks(cur, item.min_size(), |cur| skip(item, cur))?,
        Ty::Map(value) => skip_blocks(cur, 1 + value.min_size(), |cur| {
            cur.bytes()?;
            skip(value, cur)
        })?,
        Ty::Union(branches) => {
            let i = cur.long()?;
            let b = usize::try_from(i)
                .ok()
                .and_then(|i| branches.get(i))
                .ok_or_else(|| DecodeError::new(format!("union branch {i} is out of range")))?;
            skip(b, cur)?;
        }
        Ty::Record(r) => {
            for f in &r.fields {
                skip(&f.ty, cur)?;
            }
        }
    }
    Ok(())
}

fn skip_blocks(
    cur: &mut Cursor<'_>,
    min_size: usize,
    mut item: impl FnMut(&mut Cursor<'_>) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let mut count = 0;
    loop {
        let n = cur.long()?;
        if n == 0 {
            return Ok(());
        }
        if n < 0 {
            // The writer gave the block's size: jump over it.
            let size = cur.len()?;
            cur.take(size)?;
            continue;
        }
        let n = usize::try_from(n).map_err(|_| DecodeError::new("a block count out of range"))?;
        let fits = match min_size {
            0 => n.saturating_add(count) <= MAX_ZERO_SIZE_ITEMS,
            m => n <= cur.remaining() / m,
        };
        if !fits {
            return Err(DecodeError::new(format!(
                "a block of {n} items with {} bytes left",
                cur.remaining()
            )));
        }
        count += n;
        for _ in 0..n {
            item(cur)?;
        }
    }
}
