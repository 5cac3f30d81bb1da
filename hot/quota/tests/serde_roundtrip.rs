//! Serde round trips of `QuotaConfigs` (the controller replicates it as JSON).
//!
//! The crate has no JSON dev-dependency, so this file carries a minimal self-describing
//! serde data model (`Value`) with a serializer, a deserializer and a JSON-text renderer,
//! enough to check the round trip and pin the JSON shape and its ordering.

use std::fmt::Write as _;

use proptest::prelude::*;
use serde::de::value::{Error, MapDeserializer, SeqDeserializer};
use serde::de::{self, IntoDeserializer, Visitor};
use serde::ser::{self, Impossible, Serialize};
use serde::{Deserialize, forward_to_deserialize_any};
use strata_quota::{ClientQuotaEntity, EntityType, QuotaConfigs, QuotaKey};

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Seq(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

impl Value {
    fn json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    fn write_json(&self, out: &mut String) {
        match self {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => drop(write!(out, "{b}")),
            Value::I64(n) => drop(write!(out, "{n}")),
            Value::U64(n) => drop(write!(out, "{n}")),
            Value::F64(n) => drop(write!(out, "{n:?}")),
            Value::Str(s) => drop(write!(out, "{s:?}")),
            Value::Seq(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_json(out);
                }
                out.push(']');
            }
            Value::Map(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    k.write_json(out);
                    out.push(':');
                    v.write_json(out);
                }
                out.push('}');
            }
        }
    }
}

fn to_value<T: Serialize>(t: &T) -> Value {
    t.serialize(ToValue).expect("serializable")
}

fn from_value<T: for<'de> Deserialize<'de>>(v: Value) -> Result<T, Error> {
    T::deserialize(v)
}

struct ToValue;

struct SeqBuilder(Vec<Value>);

struct MapBuilder {
    entries: Vec<(Value, Value)>,
    key: Option<Value>,
}

fn unsupported(what: &str) -> Error {
    ser::Error::custom(format!("{what} is not supported by the test data model"))
}

impl ser::Serializer for ToValue {
    type Ok = Value;
    type Error = Error;
    type SerializeSeq = SeqBuilder;
    type SerializeTuple = SeqBuilder;
    type SerializeTupleStruct = Impossible<Value, Error>;
    type SerializeTupleVariant = Impossible<Value, Error>;
    type SerializeMap = MapBuilder;
    type SerializeStruct = MapBuilder;
    type SerializeStructVariant = Impossible<Value, Error>;

    fn serialize_bool(self, v: bool) -> Result<Value, Error> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Value, Error> {
        Ok(Value::I64(v.into()))
    }
    fn serialize_i16(self, v: i16) -> Result<Value, Error> {
        Ok(Value::I64(v.into()))
    }
    fn serialize_i32(self, v: i32) -> Result<Value, Error> {
        Ok(Value::I64(v.into()))
    }
    fn serialize_i64(self, v: i64) -> Result<Value, Error> {
        Ok(Value::I64(v))
    }
    fn serialize_u8(self, v: u8) -> Result<Value, Error> {
        Ok(Value::U64(v.into()))
    }
    fn serialize_u16(self, v: u16) -> Result<Value, Error> {
        Ok(Value::U64(v.into()))
    }
    fn serialize_u32(self, v: u32) -> Result<Value, Error> {
        Ok(Value::U64(v.into()))
    }
    fn serialize_u64(self, v: u64) -> Result<Value, Error> {
        Ok(Value::U64(v))
    }
    fn serialize_f32(self, v: f32) -> Result<Value, Error> {
        Ok(Value::F64(v.into()))
    }
    fn serialize_f64(self, v: f64) -> Result<Value, Error> {
        Ok(Value::F64(v))
    }
    fn serialize_char(self, v: char) -> Result<Value, Error> {
        Ok(Value::Str(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, Error> {
        Ok(Value::Str(v.to_owned()))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<Value, Error> {
        Err(unsupported("bytes"))
    }
    fn serialize_none(self) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<Value, Error> {
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
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<Value, Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Value, Error> {
        Err(unsupported("newtype variant"))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqBuilder, Error> {
        Ok(SeqBuilder(Vec::with_capacity(len.unwrap_or(0))))
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqBuilder, Error> {
        Ok(SeqBuilder(Vec::with_capacity(len)))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(unsupported("tuple struct"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(unsupported("tuple variant"))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<MapBuilder, Error> {
        Ok(MapBuilder {
            entries: Vec::new(),
            key: None,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<MapBuilder, Error> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(unsupported("struct variant"))
    }
}

impl ser::SerializeSeq for SeqBuilder {
    type Ok = Value;
    type Error = Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Error> {
        self.0.push(v.serialize(ToValue)?);
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(Value::Seq(self.0))
    }
}

impl ser::SerializeTuple for SeqBuilder {
    type Ok = Value;
    type Error = Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, v)
    }
    fn end(self) -> Result<Value, Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeMap for MapBuilder {
    type Ok = Value;
    type Error = Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, k: &T) -> Result<(), Error> {
        self.key = Some(k.serialize(ToValue)?);
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Error> {
        let k = self
            .key
            .take()
            .ok_or_else(|| unsupported("value before key"))?;
        self.entries.push((k, v.serialize(ToValue)?));
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(Value::Map(self.entries))
    }
}

impl ser::SerializeStruct for MapBuilder {
    type Ok = Value;
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        name: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        self.entries
            .push((Value::Str(name.to_owned()), v.serialize(ToValue)?));
        Ok(())
    }
    fn end(self) -> Result<Value, Error> {
        Ok(Value::Map(self.entries))
    }
}

impl<'de> IntoDeserializer<'de, Error> for Value {
    type Deserializer = Value;
    fn into_deserializer(self) -> Value {
        self
    }
}

impl<'de> de::Deserializer<'de> for Value {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::I64(n) => visitor.visit_i64(n),
            Value::U64(n) => visitor.visit_u64(n),
            Value::F64(n) => visitor.visit_f64(n),
            Value::Str(s) => visitor.visit_string(s),
            Value::Seq(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            Value::Map(entries) => visitor.visit_map(MapDeserializer::new(entries.into_iter())),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(other),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

fn entity(user: Option<Option<&str>>, client: Option<Option<&str>>) -> ClientQuotaEntity {
    let mut c = Vec::new();
    if let Some(u) = user {
        c.push((EntityType::User, u));
    }
    if let Some(cl) = client {
        c.push((EntityType::ClientId, cl));
    }
    ClientQuotaEntity::from_components(c).expect("valid entity")
}

#[test]
fn round_trip_and_json_shape() {
    let mut a = QuotaConfigs::new();
    a.alter(
        &entity(None, Some(None)),
        QuotaKey::RequestPercentage,
        Some(25.5),
    )
    .unwrap();
    a.alter(
        &entity(Some(Some("alice")), Some(Some("app"))),
        QuotaKey::ConsumerByteRate,
        Some(2048.0),
    )
    .unwrap();
    a.alter(
        &entity(Some(Some("alice")), Some(Some("app"))),
        QuotaKey::ProducerByteRate,
        Some(1024.0),
    )
    .unwrap();
    a.alter(
        &entity(Some(None), None),
        QuotaKey::ProducerByteRate,
        Some(1e6),
    )
    .unwrap();

    // Entities in `ClientQuotaEntity` order (no user component first, then default before
    // named), keys in `QuotaKey` order. The same quotas altered in another order
    // serialize identically.
    let mut b = QuotaConfigs::new();
    b.alter(
        &entity(Some(None), None),
        QuotaKey::ProducerByteRate,
        Some(1e6),
    )
    .unwrap();
    b.alter(
        &entity(Some(Some("alice")), Some(Some("app"))),
        QuotaKey::ProducerByteRate,
        Some(1024.0),
    )
    .unwrap();
    b.alter(
        &entity(Some(Some("alice")), Some(Some("app"))),
        QuotaKey::ConsumerByteRate,
        Some(2048.0),
    )
    .unwrap();
    b.alter(
        &entity(None, Some(None)),
        QuotaKey::RequestPercentage,
        Some(25.5),
    )
    .unwrap();
    assert_eq!(to_value(&a), to_value(&b));

    let json = to_value(&a).json();
    assert_eq!(
        json,
        concat!(
            r#"{"entities":["#,
            r#"{"entity":[{"entity_type":"client-id","entity_name":null}],"quotas":{"request_percentage":25.5}},"#,
            r#"{"entity":[{"entity_type":"user","entity_name":null}],"quotas":{"producer_byte_rate":1000000.0}},"#,
            r#"{"entity":[{"entity_type":"user","entity_name":"alice"},{"entity_type":"client-id","entity_name":"app"}],"#,
            r#""quotas":{"producer_byte_rate":1024.0,"consumer_byte_rate":2048.0}}"#,
            r#"]}"#
        )
    );

    let back: QuotaConfigs = from_value(to_value(&a)).unwrap();
    assert_eq!(back, a);
    // The resolution index is rebuilt.
    assert_eq!(
        back.resolve("bob", "x", QuotaKey::ProducerByteRate)
            .map(|(_, q)| q),
        Some(1e6)
    );
}

#[test]
fn deserialize_validates() {
    let comp = |t: &str, n: Option<&str>| {
        Value::Map(vec![
            (Value::Str("entity_type".into()), Value::Str(t.into())),
            (
                Value::Str("entity_name".into()),
                n.map_or(Value::Null, |n| Value::Str(n.into())),
            ),
        ])
    };
    let doc = |entity: Vec<Value>, key: &str, v: f64| {
        Value::Map(vec![(
            Value::Str("entities".into()),
            Value::Seq(vec![Value::Map(vec![
                (Value::Str("entity".into()), Value::Seq(entity)),
                (
                    Value::Str("quotas".into()),
                    Value::Map(vec![(Value::Str(key.into()), Value::F64(v))]),
                ),
            ])]),
        )])
    };
    assert!(
        from_value::<QuotaConfigs>(doc(
            vec![comp("user", Some("a"))],
            "producer_byte_rate",
            10.0
        ))
        .is_ok()
    );
    let err = |v: Value| from_value::<QuotaConfigs>(v).unwrap_err().to_string();
    assert!(
        err(doc(
            vec![comp("ip", Some("1.2.3.4"))],
            "producer_byte_rate",
            10.0
        ))
        .contains("ip quotas")
    );
    assert!(
        err(doc(
            vec![comp("user", Some("a"))],
            "producer_byte_rate",
            -1.0
        ))
        .contains("positive")
    );
    assert!(
        err(doc(
            vec![comp("user", Some("a"))],
            "connection_creation_rate",
            1.0
        ))
        .contains("key")
    );
    assert!(err(doc(vec![], "producer_byte_rate", 1.0)).contains("empty"));
    assert!(
        err(doc(vec![comp("user", Some(""))], "producer_byte_rate", 1.0)).contains("empty user")
    );
}

fn arb_configs() -> impl Strategy<Value = QuotaConfigs> {
    let name = prop::option::of(prop::sample::select(vec!["a", "b", "c\"q", "<default>"]));
    let ent = (prop::option::of(name.clone()), prop::option::of(name))
        .prop_filter("non-empty", |(u, c)| u.is_some() || c.is_some());
    let key = prop::sample::select(QuotaKey::ALL.to_vec());
    prop::collection::vec((ent, key, 1u32..1_000_000), 0..20).prop_map(|ops| {
        let mut q = QuotaConfigs::new();
        for ((u, c), k, v) in ops {
            let e = entity(u, c);
            q.alter(&e, k, Some(f64::from(v))).expect("valid quota");
        }
        q
    })
}

proptest! {
    #[test]
    fn prop_round_trip(q in arb_configs()) {
        let v = to_value(&q);
        let back: QuotaConfigs = from_value(v.clone()).unwrap();
        prop_assert_eq!(to_value(&back), v);
        prop_assert_eq!(&back, &q);
        for key in QuotaKey::ALL {
            for (u, c) in [("a", "b"), ("b", "a"), ("x", "c\"q")] {
                prop_assert_eq!(back.resolve(u, c, key), q.resolve(u, c, key));
            }
        }
    }
}
