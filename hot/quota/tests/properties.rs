//! Properties: resolution agrees with a naive walk of Kafka's precedence over whatever
//! alterations came before (the incremental index stays in sync), and throttle times are
//! bounded whatever is recorded.

use proptest::prelude::*;
use strata_quota::{
    ClientQuotaEntity, DescribeFilter, EntityMatch, EntityType, FilterComponent, QuotaConfigs,
    QuotaKey, QuotaLevel, QuotaManager, QuotaManagerConfig,
};

const NAMES: [&str; 4] = ["a", "b", "", "<default>"];

/// The entity a level reads for (user, client-id); `None` if a name it needs is empty
/// (no such entity can be configured).
fn level_entity(level: QuotaLevel, user: &str, client_id: &str) -> Option<ClientQuotaEntity> {
    use QuotaLevel::*;
    let (u, c): (Option<Option<&str>>, Option<Option<&str>>) = match level {
        UserClientId => (Some(Some(user)), Some(Some(client_id))),
        UserDefaultClientId => (Some(Some(user)), Some(None)),
        User => (Some(Some(user)), None),
        DefaultUserClientId => (Some(None), Some(Some(client_id))),
        DefaultUserDefaultClientId => (Some(None), Some(None)),
        DefaultUser => (Some(None), None),
        ClientId => (None, Some(Some(client_id))),
        DefaultClientId => (None, Some(None)),
    };
    let mut comps = Vec::new();
    if let Some(u) = u {
        comps.push((EntityType::User, u));
    }
    if let Some(c) = c {
        comps.push((EntityType::ClientId, c));
    }
    ClientQuotaEntity::from_components(comps).ok()
}

fn naive_resolve(
    q: &QuotaConfigs,
    user: &str,
    client_id: &str,
    key: QuotaKey,
) -> Option<(QuotaLevel, f64)> {
    QuotaLevel::PRECEDENCE.into_iter().find_map(|level| {
        let e = level_entity(level, user, client_id)?;
        q.get(&e)?.get(&key).map(|v| (level, *v))
    })
}

type Op = (
    Option<Option<&'static str>>,
    Option<Option<&'static str>>,
    QuotaKey,
    Option<u32>,
);

fn arb_ops() -> impl Strategy<Value = Vec<Op>> {
    let name = prop::option::of(prop::sample::select(NAMES.to_vec()));
    let key = prop::sample::select(QuotaKey::ALL.to_vec());
    prop::collection::vec(
        (
            prop::option::of(name.clone()),
            prop::option::of(name),
            key,
            prop::option::of(0u32..10_000),
        ),
        0..40,
    )
}

proptest! {
    #[test]
    fn resolve_matches_naive_precedence(ops in arb_ops(), queries in prop::collection::vec(
        (prop::sample::select(NAMES.to_vec()), prop::sample::select(NAMES.to_vec())), 1..10)
    ) {
        let mut q = QuotaConfigs::new();
        for (u, c, key, v) in ops {
            let mut comps = Vec::new();
            if let Some(u) = u {
                comps.push((EntityType::User, u));
            }
            if let Some(c) = c {
                comps.push((EntityType::ClientId, c));
            }
            // Invalid entities and values are refused, never panic.
            let Ok(e) = ClientQuotaEntity::from_components(comps) else { continue };
            let _ = q.alter(&e, key, v.map(f64::from));
        }
        for (user, client_id) in queries {
            for key in QuotaKey::ALL {
                let got = q.resolve_level(user, client_id, key);
                prop_assert_eq!(got, naive_resolve(&q, user, client_id, key));
                prop_assert_eq!(
                    q.resolve(user, client_id, key),
                    got.map(|(level, v)| (level.sensor_key(user, client_id), v))
                );
                prop_assert_eq!(q.has_quotas(key), q.iter().any(|(_, m)| m.contains_key(&key)));
            }
        }
        // Describing everything returns every entity; strict per-type filters partition them.
        prop_assert_eq!(q.describe(&DescribeFilter::all()).len(), q.len());
        let any = |t| FilterComponent { entity_type: t, matching: EntityMatch::Any };
        let strict = |c: Vec<FilterComponent>| DescribeFilter::new(c, true).unwrap();
        let parts = q.describe(&strict(vec![any(EntityType::User)])).len()
            + q.describe(&strict(vec![any(EntityType::ClientId)])).len()
            + q.describe(&strict(vec![any(EntityType::User), any(EntityType::ClientId)])).len();
        prop_assert_eq!(parts, q.len());
    }

    #[test]
    fn throttle_is_bounded(
        quota in 1u32..1_000_000,
        key in prop::sample::select(QuotaKey::ALL.to_vec()),
        window_num in 1u32..20,
        window_size_ms in 1u64..5_000,
        cap in prop::option::of(0u64..100_000),
        events in prop::collection::vec((any::<f64>(), 0u64..20_000, any::<bool>()), 1..60),
    ) {
        let cfg = QuotaManagerConfig {
            window_num,
            window_size_ms,
            max_byte_throttle_ms: cap,
            max_request_throttle_ms: cap,
            ..QuotaManagerConfig::default()
        };
        let max = cfg.max_throttle_ms(key);
        let mut m = QuotaManager::new(cfg).unwrap();
        m.alter(&ClientQuotaEntity::for_user(Some("u")).unwrap(), key, Some(f64::from(quota))).unwrap();
        let mut now = 0u64;
        for (value, dt, unrecord) in events {
            now += dt;
            if unrecord {
                m.unrecord(key, "u", "c", value, now);
            }
            let t = m.record(key, "u", "c", value, now);
            prop_assert!(t <= max, "throttle {} > cap {}", t, max);
            let nanos = value.abs().min(1e15) as u64;
            prop_assert!(m.record_request_time("u", "c", nanos, now) <= cfg.max_throttle_ms(QuotaKey::RequestPercentage));
        }
        prop_assert!(m.tracked() <= 2);
    }
}
