//! The quota model of KIP-546 and KIP-55: entity types and names, entities, quota keys
//! and their validation, the eight precedence levels and the sensor key each implies.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How Kafka spells the default entity (`/config/users/<default>`) in paths and logs.
pub const DEFAULT_ENTITY_NAME: &str = "<default>";

/// Errors from the quota configuration model and the manager's configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuotaError {
    /// KIP-546 also defines `ip` entities (KIP-612 connection-rate quotas); Strata has none.
    #[error(
        "ip quotas are not supported: Strata supports `user` and `client-id` quota entities only"
    )]
    IpQuotasUnsupported,
    #[error("unknown quota entity type `{0}` (expected `user` or `client-id`)")]
    UnknownEntityType(String),
    #[error("invalid client quota entity, duplicate entity entry {0}")]
    DuplicateEntityType(EntityType),
    #[error("invalid empty client quota entity")]
    EmptyEntity,
    /// Kafka refuses empty names: the default entity is spelled with a null name.
    #[error("empty {0} not supported (a null name means the default entity)")]
    EmptyEntityName(EntityType),
    #[error(
        "invalid configuration key `{0}` (supported: producer_byte_rate, consumer_byte_rate, request_percentage)"
    )]
    UnknownKey(String),
    #[error("invalid value {value} for {key}: {reason}")]
    InvalidValue {
        key: QuotaKey,
        value: f64,
        reason: &'static str,
    },
    #[error("duplicate entity {0} in quota configs")]
    DuplicateEntity(String),
    #[error("invalid describe filter: {0}")]
    InvalidFilter(String),
    #[error("invalid quota manager config: {0}")]
    InvalidConfig(&'static str),
}

/// A quota entity type. KIP-546 also has `ip`, which [`EntityType::parse`] refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityType {
    User,
    ClientId,
}

impl EntityType {
    /// The wire/config name: `user` or `client-id`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::ClientId => "client-id",
        }
    }

    /// Parses a wire entity type, refusing `ip` with [`QuotaError::IpQuotasUnsupported`].
    pub fn parse(s: &str) -> Result<Self, QuotaError> {
        match s {
            "user" => Ok(Self::User),
            "client-id" => Ok(Self::ClientId),
            "ip" => Err(QuotaError::IpQuotasUnsupported),
            other => Err(QuotaError::UnknownEntityType(other.to_owned())),
        }
    }
}

impl fmt::Display for EntityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EntityType {
    type Err = QuotaError;
    fn from_str(s: &str) -> Result<Self, QuotaError> {
        Self::parse(s)
    }
}

impl Serialize for EntityType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EntityType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A client quota key (Kafka's `QuotaConfig`): KIP-13 byte rates and KIP-124 request time.
/// `controller_mutation_rate` (KIP-599) is not supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaKey {
    /// Bytes per second produced (Produce request size), KIP-13.
    ProducerByteRate,
    /// Bytes per second fetched (Fetch response size), KIP-13.
    ConsumerByteRate,
    /// Percent of one request-handler thread per second (KIP-124); may exceed 100.
    RequestPercentage,
}

impl QuotaKey {
    pub const ALL: [QuotaKey; 3] = [
        Self::ProducerByteRate,
        Self::ConsumerByteRate,
        Self::RequestPercentage,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ProducerByteRate => "producer_byte_rate",
            Self::ConsumerByteRate => "consumer_byte_rate",
            Self::RequestPercentage => "request_percentage",
        }
    }

    pub fn parse(s: &str) -> Result<Self, QuotaError> {
        match s {
            "producer_byte_rate" => Ok(Self::ProducerByteRate),
            "consumer_byte_rate" => Ok(Self::ConsumerByteRate),
            "request_percentage" => Ok(Self::RequestPercentage),
            other => Err(QuotaError::UnknownKey(other.to_owned())),
        }
    }

    /// Validates a value to set. Values must be finite and positive (Kafka itself accepts
    /// any number here; a zero or negative rate has no useful meaning). Byte rates are
    /// `LONG` configs in Kafka, so, as `ClientQuotaControlManager.validateQuotaKeyValue`
    /// does, they must be whole numbers (within 1e-6).
    pub fn validate(self, value: f64) -> Result<(), QuotaError> {
        let invalid = |reason| QuotaError::InvalidValue {
            key: self,
            value,
            reason,
        };
        if !value.is_finite() {
            return Err(invalid("must be a finite number"));
        }
        if value <= 0.0 {
            return Err(invalid("must be positive"));
        }
        if self != Self::RequestPercentage {
            if value > i64::MAX as f64 {
                return Err(invalid("is too large for a LONG"));
            }
            let epsilon = 1e-6;
            let whole = (value + epsilon) as i64;
            if (whole as f64 - value).abs() > epsilon {
                return Err(invalid("must be a Long value (whole bytes per second)"));
            }
        }
        Ok(())
    }

    pub(crate) const fn index(self) -> usize {
        match self {
            Self::ProducerByteRate => 0,
            Self::ConsumerByteRate => 1,
            Self::RequestPercentage => 2,
        }
    }
}

impl fmt::Display for QuotaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for QuotaKey {
    type Err = QuotaError;
    fn from_str(s: &str) -> Result<Self, QuotaError> {
        Self::parse(s)
    }
}

impl Serialize for QuotaKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for QuotaKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The name of one entity component: a concrete name or the default (`<default>`,
/// a null name on the wire).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// `None` for the default entity.
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Default => None,
            Self::Named(n) => Some(n),
        }
    }

    fn from_wire(entity_type: EntityType, name: Option<&str>) -> Result<Self, QuotaError> {
        match name {
            None => Ok(Self::Default),
            Some("") => Err(QuotaError::EmptyEntityName(entity_type)),
            Some(n) => Ok(Self::Named(n.to_owned())),
        }
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name().unwrap_or(DEFAULT_ENTITY_NAME))
    }
}

/// A KIP-546 quota entity: a user component, a client-id component, or both. Each is a
/// name or the default. The eight shapes are the eight levels of [`QuotaLevel`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientQuotaEntity {
    user: Option<EntityName>,
    client_id: Option<EntityName>,
}

impl ClientQuotaEntity {
    /// An entity from its components; at least one must be present.
    pub fn new(
        user: Option<EntityName>,
        client_id: Option<EntityName>,
    ) -> Result<Self, QuotaError> {
        if user.is_none() && client_id.is_none() {
            return Err(QuotaError::EmptyEntity);
        }
        for (t, n) in [
            (EntityType::User, &user),
            (EntityType::ClientId, &client_id),
        ] {
            if matches!(n, Some(EntityName::Named(s)) if s.is_empty()) {
                return Err(QuotaError::EmptyEntityName(t));
            }
        }
        Ok(Self { user, client_id })
    }

    /// `/config/users/<user>`; `None` is `/config/users/<default>`.
    pub fn for_user(user: Option<&str>) -> Result<Self, QuotaError> {
        Self::from_components([(EntityType::User, user)])
    }

    /// `/config/clients/<client-id>`; `None` is `/config/clients/<default>`.
    pub fn for_client_id(client_id: Option<&str>) -> Result<Self, QuotaError> {
        Self::from_components([(EntityType::ClientId, client_id)])
    }

    /// `/config/users/<user>/clients/<client-id>`; `None` is the default for that component.
    pub fn for_user_client_id(
        user: Option<&str>,
        client_id: Option<&str>,
    ) -> Result<Self, QuotaError> {
        Self::from_components([(EntityType::User, user), (EntityType::ClientId, client_id)])
    }

    /// Builds an entity from (type, name-or-null) pairs as AlterClientQuotas sends them,
    /// with `ClientQuotaControlManager.validateEntity`'s checks (non-empty, no duplicate
    /// types, no empty names).
    pub fn from_components<'a>(
        components: impl IntoIterator<Item = (EntityType, Option<&'a str>)>,
    ) -> Result<Self, QuotaError> {
        let mut e = Self {
            user: None,
            client_id: None,
        };
        for (t, name) in components {
            let slot = match t {
                EntityType::User => &mut e.user,
                EntityType::ClientId => &mut e.client_id,
            };
            if slot.is_some() {
                return Err(QuotaError::DuplicateEntityType(t));
            }
            *slot = Some(EntityName::from_wire(t, name)?);
        }
        Self::new(e.user, e.client_id)
    }

    /// Like [`from_components`](Self::from_components) with entity types still as wire
    /// strings (`ip` is refused with [`QuotaError::IpQuotasUnsupported`]).
    pub fn from_wire<'a>(
        components: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<Self, QuotaError> {
        let parsed = components
            .into_iter()
            .map(|(t, n)| EntityType::parse(t).map(|t| (t, n)))
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_components(parsed)
    }

    /// The components in a fixed order (user first), names `None` for the default, as
    /// DescribeClientQuotas returns them.
    pub fn components(&self) -> Vec<(EntityType, Option<&str>)> {
        let mut out = Vec::with_capacity(2);
        if let Some(u) = &self.user {
            out.push((EntityType::User, u.name()));
        }
        if let Some(c) = &self.client_id {
            out.push((EntityType::ClientId, c.name()));
        }
        out
    }

    pub fn user(&self) -> Option<&EntityName> {
        self.user.as_ref()
    }

    pub fn client_id(&self) -> Option<&EntityName> {
        self.client_id.as_ref()
    }

    pub fn get(&self, entity_type: EntityType) -> Option<&EntityName> {
        match entity_type {
            EntityType::User => self.user.as_ref(),
            EntityType::ClientId => self.client_id.as_ref(),
        }
    }

    /// Number of components (1 or 2).
    pub fn len(&self) -> usize {
        usize::from(self.user.is_some()) + usize::from(self.client_id.is_some())
    }

    /// Always false: an entity has at least one component.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The precedence level this entity configures.
    pub fn level(&self) -> QuotaLevel {
        use EntityName::{Default as D, Named as N};
        match (&self.user, &self.client_id) {
            (Some(N(_)), Some(N(_))) => QuotaLevel::UserClientId,
            (Some(N(_)), Some(D)) => QuotaLevel::UserDefaultClientId,
            (Some(N(_)), None) => QuotaLevel::User,
            (Some(D), Some(N(_))) => QuotaLevel::DefaultUserClientId,
            (Some(D), Some(D)) => QuotaLevel::DefaultUserDefaultClientId,
            (Some(D), None) => QuotaLevel::DefaultUser,
            (None, Some(N(_))) => QuotaLevel::ClientId,
            // (None, None) cannot be constructed.
            (None, _) => QuotaLevel::DefaultClientId,
        }
    }
}

/// ZooKeeper-path form, e.g. `/config/users/alice/clients/<default>`.
impl fmt::Display for ClientQuotaEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("/config")?;
        if let Some(u) = &self.user {
            write!(f, "/users/{u}")?;
        }
        if let Some(c) = &self.client_id {
            write!(f, "/clients/{c}")?;
        }
        Ok(())
    }
}

/// Serde form: Kafka's `ClientQuotaRecord` entity list,
/// `[{"entity_type":"user","entity_name":"alice"},{"entity_type":"client-id","entity_name":null}]`.
#[derive(Serialize, Deserialize)]
struct ComponentRepr {
    entity_type: EntityType,
    entity_name: Option<String>,
}

impl Serialize for ClientQuotaEntity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.components().into_iter().map(|(t, n)| ComponentRepr {
            entity_type: t,
            entity_name: n.map(str::to_owned),
        }))
    }
}

impl<'de> Deserialize<'de> for ClientQuotaEntity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let repr = Vec::<ComponentRepr>::deserialize(d)?;
        Self::from_components(
            repr.iter()
                .map(|c| (c.entity_type, c.entity_name.as_deref())),
        )
        .map_err(serde::de::Error::custom)
    }
}

/// The eight levels of KIP-55, in precedence order (first match wins), as in Kafka's
/// `ClientQuotaManager` / `DefaultQuotaCallback`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaLevel {
    /// `/config/users/<user>/clients/<client-id>`
    UserClientId,
    /// `/config/users/<user>/clients/<default>`
    UserDefaultClientId,
    /// `/config/users/<user>`
    User,
    /// `/config/users/<default>/clients/<client-id>`
    DefaultUserClientId,
    /// `/config/users/<default>/clients/<default>`
    DefaultUserDefaultClientId,
    /// `/config/users/<default>`
    DefaultUser,
    /// `/config/clients/<client-id>`
    ClientId,
    /// `/config/clients/<default>`
    DefaultClientId,
}

impl QuotaLevel {
    /// All levels, highest precedence first.
    pub const PRECEDENCE: [QuotaLevel; 8] = [
        Self::UserClientId,
        Self::UserDefaultClientId,
        Self::User,
        Self::DefaultUserClientId,
        Self::DefaultUserDefaultClientId,
        Self::DefaultUser,
        Self::ClientId,
        Self::DefaultClientId,
    ];

    pub const fn path(self) -> &'static str {
        match self {
            Self::UserClientId => "/config/users/<user>/clients/<client-id>",
            Self::UserDefaultClientId => "/config/users/<user>/clients/<default>",
            Self::User => "/config/users/<user>",
            Self::DefaultUserClientId => "/config/users/<default>/clients/<client-id>",
            Self::DefaultUserDefaultClientId => "/config/users/<default>/clients/<default>",
            Self::DefaultUser => "/config/users/<default>",
            Self::ClientId => "/config/clients/<client-id>",
            Self::DefaultClientId => "/config/clients/<default>",
        }
    }

    /// The entity whose usage a quota matched at this level is measured on: Kafka's
    /// sensor tags from `DefaultQuotaCallback.quotaMetricTags`. Levels with a user
    /// component (named or default) are measured per user, levels with a client-id
    /// component per client-id, so a default is a per-entity budget, never a shared pool:
    ///
    /// | level | sensor |
    /// |---|---|
    /// | users/`u`/clients/`c`, users/`u`/clients/default, users/default/clients/`c`, users/default/clients/default | (`u`, `c`) |
    /// | users/`u`, users/default | (`u`, any client-id) |
    /// | clients/`c`, clients/default | (any user, `c`) |
    pub fn sensor_key(self, user: &str, client_id: &str) -> QuotaEntityKey {
        let (u, c) = match self {
            Self::UserClientId
            | Self::UserDefaultClientId
            | Self::DefaultUserClientId
            | Self::DefaultUserDefaultClientId => (Some(user), Some(client_id)),
            Self::User | Self::DefaultUser => (Some(user), None),
            Self::ClientId | Self::DefaultClientId => (None, Some(client_id)),
        };
        QuotaEntityKey {
            user: u.map(str::to_owned),
            client_id: c.map(str::to_owned),
        }
    }
}

impl fmt::Display for QuotaLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}

/// The entity a quota is enforced on: usage is shared by every connection and request
/// that resolves to the same key. `None` means the dimension is not part of the key
/// (Kafka's empty metric tag): e.g. a `/config/clients/<id>` quota is shared by all
/// users using that client-id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaEntityKey {
    pub user: Option<String>,
    pub client_id: Option<String>,
}

impl fmt::Display for QuotaEntityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = self.user.as_deref().unwrap_or("*");
        let c = self.client_id.as_deref().unwrap_or("*");
        write!(f, "user={u},client-id={c}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_wire_validation() {
        assert_eq!(
            ClientQuotaEntity::from_wire([("ip", Some("10.0.0.1"))]),
            Err(QuotaError::IpQuotasUnsupported)
        );
        assert_eq!(
            ClientQuotaEntity::from_wire([("user", Some("a")), ("ip", None)]),
            Err(QuotaError::IpQuotasUnsupported)
        );
        assert!(matches!(
            ClientQuotaEntity::from_wire([("group", Some("g"))]),
            Err(QuotaError::UnknownEntityType(_))
        ));
        assert_eq!(
            ClientQuotaEntity::from_wire([]),
            Err(QuotaError::EmptyEntity)
        );
        assert_eq!(
            ClientQuotaEntity::from_wire([("user", Some("a")), ("user", None)]),
            Err(QuotaError::DuplicateEntityType(EntityType::User))
        );
        assert_eq!(
            ClientQuotaEntity::for_client_id(Some("")),
            Err(QuotaError::EmptyEntityName(EntityType::ClientId))
        );
        let e =
            ClientQuotaEntity::from_wire([("client-id", None), ("user", Some("alice"))]).unwrap();
        assert_eq!(
            e.components(),
            vec![
                (EntityType::User, Some("alice")),
                (EntityType::ClientId, None)
            ]
        );
        assert_eq!(e.to_string(), "/config/users/alice/clients/<default>");
        assert!(matches!(
            QuotaKey::parse("controller_mutation_rate"),
            Err(QuotaError::UnknownKey(_))
        ));
        assert!(
            QuotaError::IpQuotasUnsupported
                .to_string()
                .contains("ip quotas are not supported")
        );
    }
}
