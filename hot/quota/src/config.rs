//! The configured client quotas ([`QuotaConfigs`]): AlterClientQuotas and
//! DescribeClientQuotas (KIP-546), KIP-55 resolution of the quota that applies to a
//! (user, client-id) pair, and the serde form the controller replicates.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::entity::{
    ClientQuotaEntity, EntityName, EntityType, QuotaEntityKey, QuotaError, QuotaKey, QuotaLevel,
};

/// One DescribeClientQuotas filter component's match (`match_type` 0, 1, 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntityMatch {
    /// `MATCH_TYPE_EXACT`: the named entity only.
    Exact(String),
    /// `MATCH_TYPE_DEFAULT`: the default entity only.
    Default,
    /// `MATCH_TYPE_SPECIFIED`: any entity with this component, named or default.
    Any,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterComponent {
    pub entity_type: EntityType,
    pub matching: EntityMatch,
}

impl FilterComponent {
    pub const MATCH_TYPE_EXACT: i8 = 0;
    pub const MATCH_TYPE_DEFAULT: i8 = 1;
    pub const MATCH_TYPE_SPECIFIED: i8 = 2;

    /// Parses a wire component with KRaft's `ClientQuotasImage.describe` checks.
    pub fn from_wire(
        entity_type: &str,
        match_type: i8,
        matched: Option<&str>,
    ) -> Result<Self, QuotaError> {
        if entity_type.is_empty() {
            return Err(QuotaError::InvalidFilter(
                "invalid empty entity type".into(),
            ));
        }
        let entity_type = EntityType::parse(entity_type)?;
        let matching = match (match_type, matched) {
            (Self::MATCH_TYPE_EXACT, Some(m)) => EntityMatch::Exact(m.to_owned()),
            (Self::MATCH_TYPE_EXACT, None) => {
                return Err(QuotaError::InvalidFilter(
                    "MATCH_TYPE_EXACT with a null match string".into(),
                ));
            }
            (Self::MATCH_TYPE_DEFAULT, None) => EntityMatch::Default,
            (Self::MATCH_TYPE_SPECIFIED, None) => EntityMatch::Any,
            (Self::MATCH_TYPE_DEFAULT | Self::MATCH_TYPE_SPECIFIED, Some(_)) => {
                return Err(QuotaError::InvalidFilter(format!(
                    "match type {match_type} with a match string"
                )));
            }
            (other, _) => {
                return Err(QuotaError::InvalidFilter(format!(
                    "unknown match type {other}"
                )));
            }
        };
        Ok(Self {
            entity_type,
            matching,
        })
    }

    fn matches(&self, entity: &ClientQuotaEntity) -> bool {
        match (&self.matching, entity.get(self.entity_type)) {
            (_, None) => false,
            (EntityMatch::Any, Some(_)) => true,
            (EntityMatch::Default, Some(n)) => *n == EntityName::Default,
            (EntityMatch::Exact(m), Some(n)) => n.name() == Some(m.as_str()),
        }
    }
}

/// A DescribeClientQuotas filter (KIP-546): every component must match; with `strict`,
/// the entity must have no other components.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeFilter {
    components: Vec<FilterComponent>,
    strict: bool,
}

impl DescribeFilter {
    /// Refuses an entity type appearing twice, as Kafka does.
    pub fn new(components: Vec<FilterComponent>, strict: bool) -> Result<Self, QuotaError> {
        for (i, c) in components.iter().enumerate() {
            if components[..i]
                .iter()
                .any(|p| p.entity_type == c.entity_type)
            {
                return Err(QuotaError::InvalidFilter(format!(
                    "entity type {} cannot appear more than once in the filter",
                    c.entity_type
                )));
            }
        }
        Ok(Self { components, strict })
    }

    /// Matches every entity (no components, not strict).
    pub fn all() -> Self {
        Self::default()
    }

    pub fn components(&self) -> &[FilterComponent] {
        &self.components
    }

    pub fn strict(&self) -> bool {
        self.strict
    }

    /// KRaft's `ClientQuotasImage.matches`.
    pub fn matches(&self, entity: &ClientQuotaEntity) -> bool {
        if self.strict && entity.len() != self.components.len() {
            return false;
        }
        self.components.iter().all(|c| c.matches(entity))
    }
}

/// Per-key index for resolution: one hash lookup per level, no allocation.
#[derive(Debug, Clone, Default)]
struct KeyIndex {
    len: usize,
    user_client_id: HashMap<String, HashMap<String, f64>>,
    user_default_client_id: HashMap<String, f64>,
    user: HashMap<String, f64>,
    default_user_client_id: HashMap<String, f64>,
    default_user_default_client_id: Option<f64>,
    default_user: Option<f64>,
    client_id: HashMap<String, f64>,
    default_client_id: Option<f64>,
}

fn put(map: &mut HashMap<String, f64>, k: &str, v: Option<f64>) -> Option<f64> {
    match v {
        Some(v) => map.insert(k.to_owned(), v),
        None => map.remove(k),
    }
}

impl KeyIndex {
    fn set(&mut self, entity: &ClientQuotaEntity, v: Option<f64>) {
        // Names of the levels that have them; the other levels ignore these.
        let u = entity.user().and_then(EntityName::name).unwrap_or("");
        let c = entity.client_id().and_then(EntityName::name).unwrap_or("");
        let old = match entity.level() {
            QuotaLevel::UserClientId => {
                let inner = self.user_client_id.entry(u.to_owned()).or_default();
                let old = put(inner, c, v);
                if inner.is_empty() {
                    self.user_client_id.remove(u);
                }
                old
            }
            QuotaLevel::UserDefaultClientId => put(&mut self.user_default_client_id, u, v),
            QuotaLevel::User => put(&mut self.user, u, v),
            QuotaLevel::DefaultUserClientId => put(&mut self.default_user_client_id, c, v),
            QuotaLevel::DefaultUserDefaultClientId => {
                std::mem::replace(&mut self.default_user_default_client_id, v)
            }
            QuotaLevel::DefaultUser => std::mem::replace(&mut self.default_user, v),
            QuotaLevel::ClientId => put(&mut self.client_id, c, v),
            QuotaLevel::DefaultClientId => std::mem::replace(&mut self.default_client_id, v),
        };
        self.len = self.len + usize::from(v.is_some()) - usize::from(old.is_some());
    }

    fn lookup(&self, level: QuotaLevel, user: &str, client_id: &str) -> Option<f64> {
        match level {
            QuotaLevel::UserClientId => self.user_client_id.get(user)?.get(client_id).copied(),
            QuotaLevel::UserDefaultClientId => self.user_default_client_id.get(user).copied(),
            QuotaLevel::User => self.user.get(user).copied(),
            QuotaLevel::DefaultUserClientId => self.default_user_client_id.get(client_id).copied(),
            QuotaLevel::DefaultUserDefaultClientId => self.default_user_default_client_id,
            QuotaLevel::DefaultUser => self.default_user,
            QuotaLevel::ClientId => self.client_id.get(client_id).copied(),
            QuotaLevel::DefaultClientId => self.default_client_id,
        }
    }
}

/// The configured client quotas: what AlterClientQuotas writes, DescribeClientQuotas
/// reads and the controller replicates (serde, deterministic order), plus an index that
/// makes [`resolve`](Self::resolve) a handful of hash lookups.
#[derive(Debug, Clone, Default)]
pub struct QuotaConfigs {
    entities: BTreeMap<ClientQuotaEntity, BTreeMap<QuotaKey, f64>>,
    index: [KeyIndex; 3],
}

impl PartialEq for QuotaConfigs {
    fn eq(&self, other: &Self) -> bool {
        self.entities == other.entities
    }
}

/// Values are validated positive and finite ([`QuotaKey::validate`]): never NaN, so
/// equality is total.
impl Eq for QuotaConfigs {}

impl QuotaConfigs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets (`Some`) or removes (`None`) one quota. Removing an absent quota is a no-op;
    /// an entity left with no quotas disappears, as in Kafka's `ClientQuotaControlManager`.
    pub fn alter(
        &mut self,
        entity: &ClientQuotaEntity,
        key: QuotaKey,
        value: Option<f64>,
    ) -> Result<(), QuotaError> {
        if let Some(v) = value {
            key.validate(v)?;
        }
        match value {
            Some(v) => {
                self.entities
                    .entry(entity.clone())
                    .or_default()
                    .insert(key, v);
            }
            None => {
                let Some(quotas) = self.entities.get_mut(entity) else {
                    return Ok(());
                };
                if quotas.remove(&key).is_none() {
                    return Ok(());
                }
                if quotas.is_empty() {
                    self.entities.remove(entity);
                }
            }
        }
        self.index[key.index()].set(entity, value);
        Ok(())
    }

    /// One AlterClientQuotas entry: all operations on the entity are validated first and
    /// applied together or not at all (Kafka applies per-entity atomically). Use
    /// [`QuotaKey::validate`] alone for `validate_only`.
    pub fn alter_entity(
        &mut self,
        entity: &ClientQuotaEntity,
        ops: &[(QuotaKey, Option<f64>)],
    ) -> Result<(), QuotaError> {
        for (key, value) in ops {
            if let Some(v) = value {
                key.validate(*v)?;
            }
        }
        for (key, value) in ops {
            self.alter(entity, *key, *value)?;
        }
        Ok(())
    }

    /// The quotas configured on exactly this entity.
    pub fn get(&self, entity: &ClientQuotaEntity) -> Option<&BTreeMap<QuotaKey, f64>> {
        self.entities.get(entity)
    }

    /// All entities with their quotas, in a deterministic order.
    pub fn iter(&self) -> impl Iterator<Item = (&ClientQuotaEntity, &BTreeMap<QuotaKey, f64>)> {
        self.entities.iter()
    }

    /// Number of entities with at least one quota.
    pub fn len(&self) -> usize {
        self.entities.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    /// Whether any entity has a quota for `key` (Kafka's `quotasEnabled()`): when false,
    /// the broker can skip measuring that quantity altogether.
    pub fn has_quotas(&self, key: QuotaKey) -> bool {
        self.index[key.index()].len > 0
    }

    /// DescribeClientQuotas: the matching entities and all their quotas, in order.
    pub fn describe(
        &self,
        filter: &DescribeFilter,
    ) -> Vec<(ClientQuotaEntity, BTreeMap<QuotaKey, f64>)> {
        self.entities
            .iter()
            .filter(|(e, _)| filter.matches(e))
            .map(|(e, q)| (e.clone(), q.clone()))
            .collect()
    }

    /// The quota of `key` that applies to `user` with `client_id` and the level it was
    /// found at, walking [`QuotaLevel::PRECEDENCE`] (first match wins). At most eight
    /// hash lookups, no allocation; `None` when no level has a quota for `key`.
    pub fn resolve_level(
        &self,
        user: &str,
        client_id: &str,
        key: QuotaKey,
    ) -> Option<(QuotaLevel, f64)> {
        let index = &self.index[key.index()];
        if index.len == 0 {
            return None;
        }
        QuotaLevel::PRECEDENCE
            .into_iter()
            .find_map(|level| index.lookup(level, user, client_id).map(|q| (level, q)))
    }

    /// The quota of `key` that applies to `user` with `client_id`, and the entity its
    /// usage is measured on (see [`QuotaLevel::sensor_key`]). `None`: unlimited.
    pub fn resolve(
        &self,
        user: &str,
        client_id: &str,
        key: QuotaKey,
    ) -> Option<(QuotaEntityKey, f64)> {
        self.resolve_level(user, client_id, key)
            .map(|(level, q)| (level.sensor_key(user, client_id), q))
    }
}

/// Serde form: `{"entities":[{"entity":[...components...],"quotas":{"producer_byte_rate":1024.0}}]}`,
/// entities in `ClientQuotaEntity` order and keys in `QuotaKey` order.
#[derive(Serialize)]
struct EntryRef<'a> {
    entity: &'a ClientQuotaEntity,
    quotas: &'a BTreeMap<QuotaKey, f64>,
}

#[derive(Serialize)]
struct ConfigsRef<'a> {
    entities: Vec<EntryRef<'a>>,
}

#[derive(Deserialize)]
struct Entry {
    entity: ClientQuotaEntity,
    quotas: BTreeMap<QuotaKey, f64>,
}

#[derive(Deserialize)]
struct Configs {
    entities: Vec<Entry>,
}

impl Serialize for QuotaConfigs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ConfigsRef {
            entities: self
                .entities
                .iter()
                .map(|(entity, quotas)| EntryRef { entity, quotas })
                .collect(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for QuotaConfigs {
    /// Validates every value and refuses duplicate entities.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let repr = Configs::deserialize(d)?;
        let mut out = Self::new();
        for Entry { entity, quotas } in repr.entities {
            if out.entities.contains_key(&entity) {
                return Err(serde::de::Error::custom(QuotaError::DuplicateEntity(
                    entity.to_string(),
                )));
            }
            for (key, value) in quotas {
                out.alter(&entity, key, Some(value))
                    .map_err(serde::de::Error::custom)?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(user: Option<Option<&str>>, client: Option<Option<&str>>) -> ClientQuotaEntity {
        let mut c = Vec::new();
        if let Some(u) = user {
            c.push((EntityType::User, u));
        }
        if let Some(cl) = client {
            c.push((EntityType::ClientId, cl));
        }
        ClientQuotaEntity::from_components(c).unwrap()
    }

    /// One entity per level, each with a distinct value: the value identifies the level.
    fn all_levels() -> Vec<(QuotaLevel, ClientQuotaEntity)> {
        vec![
            (
                QuotaLevel::UserClientId,
                ent(Some(Some("alice")), Some(Some("app"))),
            ),
            (
                QuotaLevel::UserDefaultClientId,
                ent(Some(Some("alice")), Some(None)),
            ),
            (QuotaLevel::User, ent(Some(Some("alice")), None)),
            (
                QuotaLevel::DefaultUserClientId,
                ent(Some(None), Some(Some("app"))),
            ),
            (
                QuotaLevel::DefaultUserDefaultClientId,
                ent(Some(None), Some(None)),
            ),
            (QuotaLevel::DefaultUser, ent(Some(None), None)),
            (QuotaLevel::ClientId, ent(None, Some(Some("app")))),
            (QuotaLevel::DefaultClientId, ent(None, Some(None))),
        ]
    }

    #[test]
    fn precedence_all_eight_levels() {
        let levels = all_levels();
        // For each i: configure levels i.. only; (alice, app) must resolve to level i.
        for i in 0..levels.len() {
            let mut q = QuotaConfigs::new();
            for (j, (_, e)) in levels.iter().enumerate().skip(i) {
                q.alter(e, QuotaKey::ProducerByteRate, Some(1000.0 + j as f64))
                    .unwrap();
            }
            let (want_level, want_entity) = &levels[i];
            assert_eq!(want_entity.level(), *want_level);
            let (level, v) = q
                .resolve_level("alice", "app", QuotaKey::ProducerByteRate)
                .unwrap();
            assert_eq!(
                (level, v),
                (*want_level, 1000.0 + i as f64),
                "level {want_level}"
            );
            // Other keys are unaffected.
            assert_eq!(q.resolve("alice", "app", QuotaKey::ConsumerByteRate), None);
        }
    }

    #[test]
    fn sensor_keys_per_level_table() {
        let s = |u: Option<&str>, c: Option<&str>| QuotaEntityKey {
            user: u.map(str::to_owned),
            client_id: c.map(str::to_owned),
        };
        let table = [
            (QuotaLevel::UserClientId, s(Some("alice"), Some("app"))),
            (
                QuotaLevel::UserDefaultClientId,
                s(Some("alice"), Some("app")),
            ),
            (QuotaLevel::User, s(Some("alice"), None)),
            (
                QuotaLevel::DefaultUserClientId,
                s(Some("alice"), Some("app")),
            ),
            (
                QuotaLevel::DefaultUserDefaultClientId,
                s(Some("alice"), Some("app")),
            ),
            (QuotaLevel::DefaultUser, s(Some("alice"), None)),
            (QuotaLevel::ClientId, s(None, Some("app"))),
            (QuotaLevel::DefaultClientId, s(None, Some("app"))),
        ];
        for (level, key) in table {
            assert_eq!(level.sensor_key("alice", "app"), key, "{level}");
        }
        let mut q = QuotaConfigs::new();
        q.alter(
            &ent(Some(None), None),
            QuotaKey::ProducerByteRate,
            Some(10.0),
        )
        .unwrap();
        assert_eq!(
            q.resolve("bob", "x", QuotaKey::ProducerByteRate),
            Some((s(Some("bob"), None), 10.0))
        );
    }

    #[test]
    fn non_matching_names_fall_through() {
        let mut q = QuotaConfigs::new();
        for (_, e) in all_levels() {
            if e.level() != QuotaLevel::DefaultClientId {
                q.alter(&e, QuotaKey::RequestPercentage, Some(50.0))
                    .unwrap();
            }
        }
        // Named levels are for alice/app only; bob with "other" gets the user-default levels.
        assert_eq!(
            q.resolve_level("bob", "other", QuotaKey::RequestPercentage),
            Some((QuotaLevel::DefaultUserDefaultClientId, 50.0))
        );
        assert_eq!(q.resolve("bob", "other", QuotaKey::ProducerByteRate), None);
    }

    #[test]
    fn alter_remove_and_validation() {
        let mut q = QuotaConfigs::new();
        let e = ent(Some(Some("alice")), None);
        assert!(!q.has_quotas(QuotaKey::ProducerByteRate));
        q.alter(&e, QuotaKey::ProducerByteRate, Some(1024.0))
            .unwrap();
        q.alter(&e, QuotaKey::RequestPercentage, Some(12.5))
            .unwrap();
        assert!(q.has_quotas(QuotaKey::ProducerByteRate));
        assert_eq!(q.len(), 1);
        q.alter(&e, QuotaKey::ProducerByteRate, None).unwrap();
        q.alter(&e, QuotaKey::ProducerByteRate, None).unwrap();
        assert!(!q.has_quotas(QuotaKey::ProducerByteRate));
        assert_eq!(q.resolve("alice", "c", QuotaKey::ProducerByteRate), None);
        q.alter(&e, QuotaKey::RequestPercentage, None).unwrap();
        assert!(q.is_empty());

        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1.5] {
            assert!(matches!(
                q.alter(&e, QuotaKey::ProducerByteRate, Some(bad)),
                Err(QuotaError::InvalidValue { .. })
            ));
        }
        assert!(q.alter(&e, QuotaKey::RequestPercentage, Some(0.0)).is_err());
        assert!(q.alter(&e, QuotaKey::RequestPercentage, Some(0.5)).is_ok());
        // Atomic per entity: a bad op leaves the good one unapplied.
        let e2 = ent(None, Some(Some("app")));
        let ops = [
            (QuotaKey::ConsumerByteRate, Some(10.0)),
            (QuotaKey::ProducerByteRate, Some(-3.0)),
        ];
        assert!(q.alter_entity(&e2, &ops).is_err());
        assert_eq!(q.get(&e2), None);
    }

    fn describe_fixture() -> QuotaConfigs {
        let mut q = QuotaConfigs::new();
        for (i, (_, e)) in all_levels().into_iter().enumerate() {
            q.alter(&e, QuotaKey::ProducerByteRate, Some(100.0 + i as f64))
                .unwrap();
        }
        q.alter(
            &ent(Some(Some("bob")), None),
            QuotaKey::ConsumerByteRate,
            Some(7.0),
        )
        .unwrap();
        q
    }

    fn described(
        q: &QuotaConfigs,
        comps: &[(&str, i8, Option<&str>)],
        strict: bool,
    ) -> Vec<String> {
        let comps = comps
            .iter()
            .map(|(t, m, s)| FilterComponent::from_wire(t, *m, *s).unwrap())
            .collect();
        let filter = DescribeFilter::new(comps, strict).unwrap();
        q.describe(&filter)
            .into_iter()
            .map(|(e, _)| e.to_string())
            .collect()
    }

    #[test]
    fn describe_filters() {
        let q = describe_fixture();
        let (exact, default, any) = (0, 1, 2);
        assert_eq!(described(&q, &[], false).len(), 9);
        assert!(described(&q, &[], true).is_empty());
        assert_eq!(
            described(&q, &[("user", exact, Some("alice"))], false),
            [
                "/config/users/alice",
                "/config/users/alice/clients/<default>",
                "/config/users/alice/clients/app"
            ]
        );
        assert_eq!(
            described(&q, &[("user", exact, Some("alice"))], true),
            ["/config/users/alice"]
        );
        assert_eq!(
            described(&q, &[("user", default, None)], true),
            ["/config/users/<default>"]
        );
        assert_eq!(
            described(
                &q,
                &[("user", default, None), ("client-id", exact, Some("app"))],
                true
            ),
            ["/config/users/<default>/clients/app"]
        );
        assert_eq!(
            described(&q, &[("client-id", any, None)], true),
            ["/config/clients/<default>", "/config/clients/app"]
        );
        assert_eq!(described(&q, &[("client-id", any, None)], false).len(), 6);
        assert_eq!(
            described(&q, &[("user", any, None)], true),
            [
                "/config/users/<default>",
                "/config/users/alice",
                "/config/users/bob"
            ]
        );
        assert!(described(&q, &[("user", exact, Some("nobody"))], false).is_empty());
        // The described values are all of the entity's quotas.
        let f = DescribeFilter::new(
            vec![FilterComponent::from_wire("user", exact, Some("bob")).unwrap()],
            true,
        )
        .unwrap();
        let got = q.describe(&f);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.get(&QuotaKey::ConsumerByteRate), Some(&7.0));
    }

    #[test]
    fn describe_filter_validation() {
        assert!(FilterComponent::from_wire("user", 0, None).is_err());
        assert!(FilterComponent::from_wire("user", 1, Some("x")).is_err());
        assert!(FilterComponent::from_wire("user", 2, Some("x")).is_err());
        assert!(FilterComponent::from_wire("user", 3, None).is_err());
        assert!(FilterComponent::from_wire("", 2, None).is_err());
        assert_eq!(
            FilterComponent::from_wire("ip", 2, None),
            Err(QuotaError::IpQuotasUnsupported)
        );
        let c = FilterComponent::from_wire("user", 2, None).unwrap();
        assert!(DescribeFilter::new(vec![c.clone(), c], false).is_err());
    }
}
