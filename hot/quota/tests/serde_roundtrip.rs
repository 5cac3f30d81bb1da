//! Serde round trips of `QuotaConfigs` (the controller replicates it as JSON).

use proptest::prelude::*;
use serde_json::{Value, json};
use strata_quota::{ClientQuotaEntity, EntityType, QuotaConfigs, QuotaKey};

fn to_value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).expect("serializable")
}

fn from_value<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(v)
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

    let json = serde_json::to_string(&a).unwrap();
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
    let comp = |t: &str, n: Option<&str>| json!({"entity_type": t, "entity_name": n});
    let doc = |entity: Vec<Value>, key: &str, v: f64| {
        let mut quotas = serde_json::Map::new();
        quotas.insert(key.to_string(), json!(v));
        json!({"entities": [{"entity": entity, "quotas": quotas}]})
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
