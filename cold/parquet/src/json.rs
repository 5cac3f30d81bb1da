//! JSON values -> a struct column, through arrow-json's decoder, with values that do not
//! fit set aside.
//!
//! arrow-json decodes a whole chunk at once, but one bad value fails the whole chunk, and
//! its coercions are lenient where the schema promises types: a string `"5"` or a float
//! `5.7` would land in an int64 column (the latter truncated). So:
//!
//! * numbers and timestamps go through [`StrictFactory`]'s checks before arrow-json's own
//!   decoders, strings are not coerced (`coerce_primitive` off), and strict mode follows
//!   the schema's `unknown_fields`;
//! * each value is fed separately and must add exactly one complete row (a value holding
//!   two objects, or half of one, does not fit);
//! * the fast path decodes the chunk in one go; only when that fails is each value tried
//!   alone to find the ones that do not fit, and the chunk is decoded again with those
//!   (and null record values) as JSON `null`. A bad value costs a slow chunk, not a
//!   stopped partition.

use std::sync::Arc;

use arrow::array::timezone::Tz;
use arrow::array::{Array, ArrayRef, BinaryArray, TimestampMillisecondBuilder};
use arrow::compute::kernels::cast_utils::string_to_datetime;
use arrow::datatypes::{DataType, Field, FieldRef, Schema, TimeUnit};
use arrow::error::ArrowError;
use arrow::json::ReaderBuilder;
use arrow::json::reader::{
    ArrayDecoder, Decoder, DecoderContext, DecoderFactory, Tape, TapeElement,
};

use crate::error::ConvertError;
use crate::options::CHUNK_ROWS;
use crate::schema::columns;
use crate::value_schema::ValueSchema;

/// What one chunk's values became.
pub(crate) struct Decoded {
    /// The `value` struct column, one row per input value.
    pub(crate) column: ArrayRef,
    /// Rows whose value did not fit, in order, and why each did not.
    pub(crate) misfits: Vec<usize>,
    pub(crate) reasons: Vec<String>,
}

/// Decodes JSON values of one schema, chunk after chunk.
pub(crate) struct JsonValues {
    field: FieldRef,
    reject_unknown: bool,
    /// A decoder with an empty tape, kept between chunks.
    idle: Option<Decoder>,
}

impl std::fmt::Debug for JsonValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonValues")
            .field("field", &self.field)
            .finish_non_exhaustive()
    }
}

/// How one value fared alone.
enum Probe {
    Fits,
    Misfit(String),
}

impl JsonValues {
    /// `file` is the file's schema: its `value` field carries the field ids, which the
    /// decoded arrays must carry too.
    pub(crate) fn new(schema: &ValueSchema, file: &Schema) -> Result<JsonValues, ConvertError> {
        let field = match file.field_with_name(columns::VALUE) {
            Ok(f) => Arc::new(f.clone()),
            Err(_) => Arc::new(Field::new(columns::VALUE, schema.data_type(), true)),
        };
        let mut j = JsonValues {
            field,
            reject_unknown: schema.rejects_unknown_fields(),
            idle: None,
        };
        // Fail on a schema arrow-json cannot decode now, not at the first record.
        j.idle = Some(j.decoder()?);
        Ok(j)
    }

    fn decoder(&self) -> Result<Decoder, ArrowError> {
        ReaderBuilder::new_with_field(self.field.clone())
            // One more than a chunk so `decode` never stops early on the row count.
            .with_batch_size(CHUNK_ROWS + 1)
            .with_coerce_primitive(false)
            .with_strict_mode(self.reject_unknown)
            .with_decoder_factory(Arc::new(StrictFactory))
            .build_decoder()
    }

    /// Decodes `values` (null entries are null record values).
    pub(crate) fn decode(&mut self, values: &BinaryArray) -> Result<Decoded, ConvertError> {
        let mut decoder = match self.idle.take() {
            Some(d) => d,
            None => self.decoder()?,
        };
        if let Ok(column) = decode_all(&mut decoder, values, &[], self.field.data_type()) {
            self.idle = Some(decoder);
            return Ok(Decoded {
                column,
                misfits: Vec::new(),
                reasons: Vec::new(),
            });
        }
        // Slow path: find the values that do not fit, one at a time. A decoder that failed
        // may hold half a row, so it is replaced.
        let mut misfits = Vec::new();
        let mut reasons = Vec::new();
        let mut probe = self.decoder()?;
        for i in 0..values.len() {
            if values.is_null(i) {
                continue;
            }
            if let Probe::Misfit(reason) = probe_one(&mut probe, values.value(i)) {
                misfits.push(i);
                reasons.push(reason);
                probe = self.decoder()?;
            }
        }
        let mut decoder = self.decoder()?;
        // Each remaining value decodes alone, and rows decode independently, so this
        // cannot fail; if it does, it is a bug worth an error, not a silent `_raw`.
        let column = decode_all(&mut decoder, values, &misfits, self.field.data_type())?;
        self.idle = Some(decoder);
        Ok(Decoded {
            column,
            misfits,
            reasons,
        })
    }
}

/// Feeds one value; true when it added exactly one complete row.
fn feed(decoder: &mut Decoder, value: &[u8], rows_after: usize) -> Result<(), ArrowError> {
    let used = decoder.decode(value)?;
    // A newline ends a trailing bare token (`1`, `true`) so it cannot run into the next
    // value.
    let used_nl = decoder.decode(b"\n")?;
    if used != value.len() || used_nl != 1 {
        return Err(ArrowError::JsonError("decoder stopped early".into()));
    }
    if decoder.has_partial_record() {
        return Err(ArrowError::JsonError("incomplete JSON value".into()));
    }
    if decoder.len() != rows_after {
        return Err(ArrowError::JsonError("not exactly one JSON value".into()));
    }
    Ok(())
}

/// Decodes all values, with `as_null` (sorted) and null record values as JSON `null`.
fn decode_all(
    decoder: &mut Decoder,
    values: &BinaryArray,
    as_null: &[usize],
    data_type: &DataType,
) -> Result<ArrayRef, ArrowError> {
    let mut skip = as_null.iter().peekable();
    let mut nulls = 0;
    for i in 0..values.len() {
        let is_null = values.is_null(i) || skip.next_if_eq(&&i).is_some();
        nulls += usize::from(is_null);
        let v: &[u8] = if is_null { b"null" } else { values.value(i) };
        feed(decoder, v, i + 1)?;
    }
    let column = match decoder.flush()? {
        Some(batch) => batch.column(0).clone(),
        None => arrow::array::new_empty_array(data_type),
    };
    if column.len() != values.len() {
        return Err(ArrowError::JsonError("row count changed".into()));
    }
    // A value that is the JSON literal `null` decodes as a null row: it is not an object
    // of the schema, so it does not fit (and must be told apart from a null record value).
    if column.null_count() != nulls {
        return Err(ArrowError::JsonError("a value is JSON null".into()));
    }
    Ok(column)
}

fn probe_one(decoder: &mut Decoder, value: &[u8]) -> Probe {
    if let Err(e) = feed(decoder, value, 1) {
        return Probe::Misfit(e.to_string());
    }
    match decoder.flush() {
        Ok(Some(batch)) if batch.column(0).null_count() == 0 => Probe::Fits,
        Ok(_) => Probe::Misfit("the value is JSON null, not an object".into()),
        Err(e) => Probe::Misfit(e.to_string()),
    }
}

/// Checks numbers strictly before arrow-json's own decoders build the arrays, and decodes
/// timestamps itself (arrow-json's timestamp decoder cannot use the "UTC" zone name
/// without the chrono-tz feature, and is lenient about fractional numbers).
#[derive(Debug)]
struct StrictFactory;

impl DecoderFactory for StrictFactory {
    fn make_default_decoder(
        &self,
        ctx: &DecoderContext,
        field: &FieldRef,
        is_nullable: bool,
    ) -> Result<Option<Box<dyn ArrayDecoder>>, ArrowError> {
        let rule = match field.data_type() {
            DataType::Int64 => Rule::Int64,
            DataType::Float64 => Rule::Float64,
            DataType::Timestamp(TimeUnit::Millisecond, _) => {
                return Ok(Some(Box::new(TimestampMs {
                    data_type: field.data_type().clone(),
                    // An offset zone, so no time-zone database is needed.
                    utc: "+00:00".parse()?,
                })));
            }
            _ => return Ok(None),
        };
        let inner = ctx.make_builtin_decoder(field, is_nullable)?;
        Ok(Some(Box::new(Strict { rule, inner })))
    }
}

#[derive(Clone, Copy, Debug)]
enum Rule {
    /// A JSON integer in i64 range.
    Int64,
    /// Any JSON number.
    Float64,
}

struct Strict {
    rule: Rule,
    inner: Box<dyn ArrayDecoder>,
}

impl ArrayDecoder for Strict {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        for &p in pos {
            let ok = match (tape.get(p), self.rule) {
                (TapeElement::Null, _) => true,
                (TapeElement::Number(idx), Rule::Int64) => {
                    tape.get_string(idx).parse::<i64>().is_ok()
                }
                (TapeElement::Number(_), Rule::Float64) => true,
                _ => false,
            };
            if !ok {
                return Err(tape.error(
                    p,
                    match self.rule {
                        Rule::Int64 => "a 64-bit integer",
                        Rule::Float64 => "a number",
                    },
                ));
            }
        }
        self.inner.decode(tape, pos)
    }
}

/// timestamp(ms): an integer of epoch milliseconds, or a date-time string (RFC 3339 or
/// ISO 8601; one without an offset is UTC).
struct TimestampMs {
    data_type: DataType,
    utc: Tz,
}

impl ArrayDecoder for TimestampMs {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut b = TimestampMillisecondBuilder::with_capacity(pos.len())
            .with_data_type(self.data_type.clone());
        for &p in pos {
            match tape.get(p) {
                TapeElement::Null => b.append_null(),
                TapeElement::Number(idx) => {
                    let s = tape.get_string(idx);
                    let ms = s.parse::<i64>().map_err(|_| {
                        ArrowError::JsonError(format!("{s} is not integer epoch milliseconds"))
                    })?;
                    b.append_value(ms);
                }
                TapeElement::String(idx) => {
                    let s = tape.get_string(idx);
                    b.append_value(string_to_datetime(&self.utc, s)?.timestamp_millis());
                }
                _ => return Err(tape.error(p, "epoch milliseconds or a date-time string")),
            }
        }
        Ok(Arc::new(b.finish()))
    }
}
