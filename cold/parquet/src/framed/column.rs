//! Column builders shaped like an Arrow type, that can take back a half-written row.
//!
//! Arrow's own builders only grow: a value that fails halfway through a nested record
//! would leave some children one row longer than others. These keep plain vectors, so
//! [`Column::truncate`] puts every child back to where the row started, and a bad value
//! costs nothing but its own row (see `framed`'s per-row failures).

use std::sync::Arc;

use arrow::array::{ArrayData, StructArray};
use arrow::buffer::{BooleanBuffer, Buffer};
use arrow::datatypes::{DataType, Field, Fields, TimeUnit};

/// Why one value did not decode (the framing layer wraps it in a `FramedError`). Boxed,
/// so that the `Result<(), DecodeError>` of every push fits a register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub(crate) Box<str>);

impl DecodeError {
    #[cold]
    pub(crate) fn new(reason: impl Into<String>) -> DecodeError {
        DecodeError(reason.into().into_boxed_str())
    }
}

/// A plan pushed a value of one kind into a column of another: a bug, reported per row
/// rather than as a panic.
#[cold]
fn mismatch(what: &str, dt: &DataType) -> DecodeError {
    DecodeError::new(format!("internal: {what} pushed into a {dt} column"))
}

/// One column under construction.
#[derive(Debug)]
pub(crate) struct Column {
    data_type: DataType,
    /// Per row: valid or null. `None` when the column is not nullable.
    validity: Option<Vec<bool>>,
    data: Data,
}

#[derive(Debug)]
enum Data {
    Bool(Vec<bool>),
    /// Int32 and Date32.
    I32(Vec<i32>),
    /// Int64, Timestamp, Time64.
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    /// Decimal128.
    I128(Vec<i128>),
    /// Binary and Utf8 (UTF-8 is checked by the caller, and again by Arrow at the end).
    Bytes {
        offsets: Vec<i32>,
        data: Vec<u8>,
    },
    Fixed {
        size: usize,
        data: Vec<u8>,
    },
    List {
        offsets: Vec<i32>,
        child: Box<Column>,
    },
    Map {
        offsets: Vec<i32>,
        /// The entries: a struct of key and value.
        entries: Box<Column>,
    },
    Struct {
        len: usize,
        children: Vec<Column>,
    },
}

/// `b` if it is UTF-8. Most strings are ASCII, checked a word at a time before the full
/// check.
#[inline]
pub(crate) fn utf8(b: &[u8]) -> Result<&[u8], DecodeError> {
    if b.is_ascii() || std::str::from_utf8(b).is_ok() {
        return Ok(b);
    }
    let e = std::str::from_utf8(b).err();
    Err(DecodeError::new(format!(
        "a string that is not UTF-8{}",
        e.map(|e| format!(": {e}")).unwrap_or_default()
    )))
}

/// A length as an Arrow i32 offset; a chunk past 2 GiB in one column fails its row.
#[inline]
fn offset(len: usize) -> Result<i32, DecodeError> {
    i32::try_from(len).map_err(|_| DecodeError::new("more than 2 GiB in one column of a chunk"))
}

impl Column {
    /// Builders for `data_type`, the types the `framed` mappings produce.
    pub(crate) fn new(data_type: &DataType, nullable: bool) -> Result<Column, String> {
        let data = match data_type {
            DataType::Boolean => Data::Bool(Vec::new()),
            DataType::Int32 | DataType::Date32 => Data::I32(Vec::new()),
            DataType::Int64 | DataType::Timestamp(_, _) | DataType::Time64(_) => {
                Data::I64(Vec::new())
            }
            DataType::Float32 => Data::F32(Vec::new()),
            DataType::Float64 => Data::F64(Vec::new()),
            DataType::Decimal128(_, _) => Data::I128(Vec::new()),
            DataType::Utf8 | DataType::Binary => Data::Bytes {
                offsets: vec![0],
                data: Vec::new(),
            },
            DataType::FixedSizeBinary(n) => Data::Fixed {
                size: usize::try_from(*n).ok().filter(|&n| n > 0).ok_or_else(|| {
                    format!("a fixed size of {n} bytes (Parquet needs at least 1)")
                })?,
                data: Vec::new(),
            },
            DataType::List(item) => Data::List {
                offsets: vec![0],
                child: Box::new(Column::new(item.data_type(), item.is_nullable())?),
            },
            DataType::Map(entries, _) => Data::Map {
                offsets: vec![0],
                entries: Box::new(Column::new(entries.data_type(), false)?),
            },
            DataType::Struct(fields) => Data::Struct {
                len: 0,
                children: fields
                    .iter()
                    .map(|f| Column::new(f.data_type(), f.is_nullable()))
                    .collect::<Result<_, _>>()?,
            },
            other => return Err(format!("no column builder for {other}")),
        };
        Ok(Column {
            data_type: data_type.clone(),
            validity: nullable.then(Vec::new),
            data,
        })
    }

    /// Rows so far.
    pub(crate) fn len(&self) -> usize {
        match &self.data {
            Data::Bool(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::I128(v) => v.len(),
            Data::Bytes { offsets, .. }
            | Data::List { offsets, .. }
            | Data::Map { offsets, .. } => offsets.len() - 1,
            // `new` refuses size 0.
            Data::Fixed { size, data } => data.len() / *size,
            Data::Struct { len, .. } => *len,
        }
    }

    #[inline]
    fn valid(&mut self) {
        if let Some(v) = &mut self.validity {
            v.push(true);
        }
    }

    /// A null row, or for a column that is not nullable (one under a null parent) a
    /// placeholder: zero, empty, or a struct of placeholders. Arrow requires values
    /// there, and non-nullable children may hold no nulls.
    pub(crate) fn push_null(&mut self) {
        if let Some(v) = &mut self.validity {
            v.push(false);
        }
        match &mut self.data {
            Data::Bool(v) => v.push(false),
            Data::I32(v) => v.push(0),
            Data::I64(v) => v.push(0),
            Data::F32(v) => v.push(0.0),
            Data::F64(v) => v.push(0.0),
            Data::I128(v) => v.push(0),
            Data::Bytes { offsets, .. }
            | Data::List { offsets, .. }
            | Data::Map { offsets, .. } => {
                let last = offsets.last().copied().unwrap_or(0);
                offsets.push(last);
            }
            Data::Fixed { size, data } => data.resize(data.len() + *size, 0),
            Data::Struct { len, children } => {
                *len += 1;
                for c in children {
                    c.push_null();
                }
            }
        }
    }

    #[inline]
    pub(crate) fn push_bool(&mut self, x: bool) -> Result<(), DecodeError> {
        match &mut self.data {
            Data::Bool(v) => v.push(x),
            _ => return Err(mismatch("a boolean", &self.data_type)),
        }
        self.valid();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_i32(&mut self, x: i32) -> Result<(), DecodeError> {
        match &mut self.data {
            Data::I32(v) => v.push(x),
            _ => return Err(mismatch("an int", &self.data_type)),
        }
        self.valid();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_i64(&mut self, x: i64) -> Result<(), DecodeError> {
        match &mut self.data {
            Data::I64(v) => v.push(x),
            _ => return Err(mismatch("a long", &self.data_type)),
        }
        self.valid();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_f32(&mut self, x: f32) -> Result<(), DecodeError> {
        match &mut self.data {
            Data::F32(v) => v.push(x),
            _ => return Err(mismatch("a float", &self.data_type)),
        }
        self.valid();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_f64(&mut self, x: f64) -> Result<(), DecodeError> {
        match &mut self.data {
            Data::F64(v) => v.push(x),
            _ => return Err(mismatch("a double", &self.data_type)),
        }
        self.valid();
        Ok(())
    }

    pub(crate) fn push_i128(&mut self, x: i128) -> Result<(), DecodeError> {
        match &mut self.data {
            Data::I128(v) => v.push(x),
            _ => return Err(mismatch("a decimal", &self.data_type)),
        }
        self.valid();
        Ok(())
    }

    /// Bytes into a Binary column, or into a Utf8 column once the caller checked UTF-8.
    #[inline]
    pub(crate) fn push_bytes(&mut self, x: &[u8]) -> Result<(), DecodeError> {
        match &mut self.data {
            Data::Bytes { offsets, data } => {
                data.extend_from_slice(x);
                offsets.push(offset(data.len())?);
            }
            Data::Fixed { size, data } if *size == x.len() => data.extend_from_slice(x),
            _ => return Err(mismatch("bytes", &self.data_type)),
        }
        self.valid();
        Ok(())
    }

    /// The element column of a list (or the entries struct of a map): push its items, then
    /// [`Column::end_list`].
    pub(crate) fn items(&mut self) -> Result<&mut Column, DecodeError> {
        match &mut self.data {
            Data::List { child, .. } => Ok(child),
            Data::Map { entries, .. } => Ok(entries),
            _ => Err(mismatch("a list", &self.data_type)),
        }
    }

    /// Ends a list or map row holding the items pushed since the previous row.
    pub(crate) fn end_list(&mut self) -> Result<(), DecodeError> {
        match &mut self.data {
            Data::List { offsets, child } => offsets.push(offset(child.len())?),
            Data::Map { offsets, entries } => offsets.push(offset(entries.len())?),
            _ => return Err(mismatch("a list", &self.data_type)),
        }
        self.valid();
        Ok(())
    }

    /// A struct's child columns: push one row into each, then [`Column::end_struct`].
    pub(crate) fn children(&mut self) -> Result<&mut [Column], DecodeError> {
        match &mut self.data {
            Data::Struct { children, .. } => Ok(children),
            _ => Err(mismatch("a struct", &self.data_type)),
        }
    }

    pub(crate) fn end_struct(&mut self) -> Result<(), DecodeError> {
        match &mut self.data {
            Data::Struct { len, .. } => *len += 1,
            _ => return Err(mismatch("a struct", &self.data_type)),
        }
        self.valid();
        Ok(())
    }

    /// Back to `rows` rows: drops a row that failed halfway, children included.
    pub(crate) fn truncate(&mut self, rows: usize) {
        if let Some(v) = &mut self.validity {
            v.truncate(rows);
        }
        match &mut self.data {
            Data::Bool(v) => v.truncate(rows),
            Data::I32(v) => v.truncate(rows),
            Data::I64(v) => v.truncate(rows),
            Data::F32(v) => v.truncate(rows),
            Data::F64(v) => v.truncate(rows),
            Data::I128(v) => v.truncate(rows),
            Data::Bytes { offsets, data } => {
                offsets.truncate(rows + 1);
                data.truncate(end(offsets));
            }
            Data::Fixed { size, data } => data.truncate(rows * *size),
            Data::List { offsets, child } => {
                offsets.truncate(rows + 1);
                child.truncate(end(offsets));
            }
            Data::Map { offsets, entries } => {
                offsets.truncate(rows + 1);
                entries.truncate(end(offsets));
            }
            Data::Struct { len, children } => {
                *len = (*len).min(rows);
                for c in children {
                    c.truncate(rows);
                }
            }
        }
    }

    /// The rows so far as a struct array (this is a struct column); the builders start
    /// over empty.
    pub(crate) fn finish_struct(&mut self) -> Result<StructArray, String> {
        Ok(StructArray::from(self.finish_data()?))
    }

    fn finish_data(&mut self) -> Result<ArrayData, String> {
        let len = self.len();
        let nulls = self
            .validity
            .as_mut()
            .map(|v| BooleanBuffer::from(again(v).as_slice()).into_inner());
        let (buffers, children) = match &mut self.data {
            Data::Bool(v) => (
                vec![BooleanBuffer::from(again(v).as_slice()).into_inner()],
                vec![],
            ),
            Data::I32(v) => (vec![Buffer::from_vec(again(v))], vec![]),
            Data::I64(v) => (vec![Buffer::from_vec(again(v))], vec![]),
            Data::F32(v) => (vec![Buffer::from_vec(again(v))], vec![]),
            Data::F64(v) => (vec![Buffer::from_vec(again(v))], vec![]),
            Data::I128(v) => (vec![Buffer::from_vec(again(v))], vec![]),
            Data::Bytes { offsets, data } => (
                vec![
                    Buffer::from_vec(again_offsets(offsets)),
                    Buffer::from_vec(again(data)),
                ],
                vec![],
            ),
            Data::Fixed { data, .. } => (vec![Buffer::from_vec(again(data))], vec![]),
            Data::List { offsets, child } => (
                vec![Buffer::from_vec(again_offsets(offsets))],
                vec![child.finish_data()?],
            ),
            Data::Map { offsets, entries } => (
                vec![Buffer::from_vec(again_offsets(offsets))],
                vec![entries.finish_data()?],
            ),
            Data::Struct { len, children } => {
                *len = 0;
                let children = children
                    .iter_mut()
                    .map(Column::finish_data)
                    .collect::<Result<_, _>>()?;
                (vec![], children)
            }
        };
        ArrayData::try_new(self.data_type.clone(), len, nulls, 0, buffers, children)
            .map_err(|e| format!("internal: building a {} column: {e}", self.data_type))
    }
}

/// Takes the vector's contents, leaving it empty with room for as many again: chunks are
/// alike, so the next one fills it without growing (and copying) step by step.
fn again<T>(v: &mut Vec<T>) -> Vec<T> {
    let room = Vec::with_capacity(v.len());
    std::mem::replace(v, room)
}

/// [`again`] for offsets, which start at 0.
fn again_offsets(v: &mut Vec<i32>) -> Vec<i32> {
    let mut room = Vec::with_capacity(v.len());
    room.push(0);
    std::mem::replace(v, room)
}

fn end(offsets: &[i32]) -> usize {
    offsets
        .last()
        .map_or(0, |&o| usize::try_from(o).unwrap_or(0))
}

/// The element field of a list, named as the Parquet spec's three-level lists name it.
pub(crate) fn list_of(item: DataType, nullable: bool) -> DataType {
    DataType::List(Arc::new(Field::new(
        crate::value_schema::LIST_ELEMENT,
        item,
        nullable,
    )))
}

/// A map with string keys, in Arrow's usual shape (`entries: struct<key, value>`).
pub(crate) fn map_of(key: DataType, value: DataType, nullable: bool) -> DataType {
    let entries = Fields::from(vec![
        Field::new("key", key, false),
        Field::new("value", value, nullable),
    ]);
    DataType::Map(
        Arc::new(Field::new("entries", DataType::Struct(entries), false)),
        false,
    )
}

/// Timestamps in microseconds; `utc` says whether they are instants (Iceberg
/// `timestamptz`) or local date-times (`timestamp`).
pub(crate) fn timestamp_us(utc: bool) -> DataType {
    DataType::Timestamp(
        TimeUnit::Microsecond,
        utc.then(|| Arc::from(crate::value_schema::UTC)),
    )
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray, Int64Array};
    use arrow::datatypes::Int64Type;

    use super::*;

    fn sample() -> Column {
        let dt = DataType::Struct(Fields::from(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("tags", list_of(DataType::Utf8, false), true),
        ]));
        Column::new(&dt, true).unwrap()
    }

    #[test]
    fn a_half_written_row_is_taken_back() {
        let mut c = sample();
        let kids = c.children().unwrap();
        kids[0].push_i64(1).unwrap();
        kids[1].items().unwrap().push_bytes(b"a").unwrap();
        kids[1].end_list().unwrap();
        c.end_struct().unwrap();
        // A second row fails after its first field and one list item.
        let kids = c.children().unwrap();
        kids[0].push_i64(2).unwrap();
        kids[1].items().unwrap().push_bytes(b"b").unwrap();
        c.truncate(1);
        c.push_null();
        let s = c.finish_struct().unwrap();
        assert_eq!(s.len(), 2);
        assert!(s.is_valid(0) && s.is_null(1));
        let n = s.column(0).as_primitive::<Int64Type>();
        assert_eq!(n, &Int64Array::from(vec![1, 0]));
        let tags = s.column(1).as_list::<i32>();
        assert_eq!(tags.value(0).as_string::<i32>().value(0), "a");
        assert_eq!(tags.value_length(1), 0, "the failed row's item is gone");
        assert_eq!(tags.values().len(), 1);
        // The builders start over.
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_mismatched_push_is_an_error_not_a_panic() {
        let mut c = sample();
        let kids = c.children().unwrap();
        assert!(kids[0].push_bytes(b"x").is_err());
        assert!(kids[1].push_i64(1).is_err());
    }
}
