//! A minimal self-describing serde format for tests (the crate has no JSON dependency):
//! values serialize to a [`Value`] tree and deserialize back from it, exercising the
//! same `Serialize`/`Deserialize` impls the controller's JSON state uses.

use serde::de::value::{Error, MapDeserializer, SeqDeserializer};
use serde::de::{IntoDeserializer, Visitor};
use serde::ser::{self, Impossible, Serialize, SerializeSeq, SerializeStruct};
use serde::{Deserialize, forward_to_deserialize_any};

/// A serialized value: what JSON would hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Str(String),
    Seq(Vec<Value>),
    Map(Vec<(String, Value)>),
}

pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, Error> {
    value.serialize(ValueSerializer)
}

pub fn from_value<T: for<'de> Deserialize<'de>>(value: Value) -> Result<T, Error> {
    T::deserialize(value)
}

struct ValueSerializer;

fn unsupported<T>(what: &str) -> Result<T, Error> {
    Err(ser::Error::custom(format!(
        "test format: {what} unsupported"
    )))
}

impl ser::Serializer for ValueSerializer {
    type Ok = Value;
    type Error = Error;
    type SerializeSeq = SeqSerializer;
    type SerializeTuple = Impossible<Value, Error>;
    type SerializeTupleStruct = Impossible<Value, Error>;
    type SerializeTupleVariant = Impossible<Value, Error>;
    type SerializeMap = Impossible<Value, Error>;
    type SerializeStruct = StructSerializer;
    type SerializeStructVariant = Impossible<Value, Error>;

    fn serialize_bool(self, v: bool) -> Result<Value, Error> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, _: i8) -> Result<Value, Error> {
        unsupported("i8")
    }
    fn serialize_i16(self, _: i16) -> Result<Value, Error> {
        unsupported("i16")
    }
    fn serialize_i32(self, _: i32) -> Result<Value, Error> {
        unsupported("i32")
    }
    fn serialize_i64(self, _: i64) -> Result<Value, Error> {
        unsupported("i64")
    }
    fn serialize_u8(self, _: u8) -> Result<Value, Error> {
        unsupported("u8")
    }
    fn serialize_u16(self, _: u16) -> Result<Value, Error> {
        unsupported("u16")
    }
    fn serialize_u32(self, _: u32) -> Result<Value, Error> {
        unsupported("u32")
    }
    fn serialize_u64(self, _: u64) -> Result<Value, Error> {
        unsupported("u64")
    }
    fn serialize_f32(self, _: f32) -> Result<Value, Error> {
        unsupported("f32")
    }
    fn serialize_f64(self, _: f64) -> Result<Value, Error> {
        unsupported("f64")
    }
    fn serialize_char(self, v: char) -> Result<Value, Error> {
        Ok(Value::Str(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, Error> {
        Ok(Value::Str(v.to_owned()))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<Value, Error> {
        unsupported("bytes")
    }
    fn serialize_none(self) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<Value, Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Value, Error> {
        Ok(Value::Str(variant.to_owned()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<Value, Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Value, Error> {
        unsupported("newtype variant")
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqSerializer, Error> {
        Ok(SeqSerializer(Vec::with_capacity(len.unwrap_or(0))))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        unsupported("tuple")
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        unsupported("tuple struct")
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        unsupported("tuple variant")
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        unsupported("map")
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<StructSerializer, Error> {
        Ok(StructSerializer(Vec::with_capacity(len)))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        unsupported("struct variant")
    }
}

pub struct SeqSerializer(Vec<Value>);

impl SerializeSeq for SeqSerializer {
    type Ok = Value;
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.0.push(v.serialize(ValueSerializer)?);
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(Value::Seq(self.0))
    }
}

pub struct StructSerializer(Vec<(String, Value)>);

impl SerializeStruct for StructSerializer {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.0.push((key.to_owned(), v.serialize(ValueSerializer)?));
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(Value::Map(self.0))
    }
}

impl<'de> IntoDeserializer<'de, Error> for Value {
    type Deserializer = Value;
    fn into_deserializer(self) -> Value {
        self
    }
}

impl<'de> serde::Deserializer<'de> for Value {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Str(s) => visitor.visit_string(s),
            Value::Seq(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            Value::Map(fields) => visitor.visit_map(MapDeserializer::new(fields.into_iter())),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(other),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            Value::Str(s) => IntoDeserializer::<Error>::into_deserializer(s)
                .deserialize_enum(name, variants, visitor),
            other => Err(serde::de::Error::custom(format!(
                "expected a unit variant, got {other:?}"
            ))),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}
