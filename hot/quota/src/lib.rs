//! Strata's client quotas (strata-quota), sans-IO, with Kafka's semantics. The controller
//! replicates the configured quotas; each broker measures its own clients and mutes
//! connections (`hot/broker/src/security/quotas.rs`). The modules:
//!
//! * [`entity`]: the KIP-546 model — entities of `user` and/or `client-id` (named or
//!   `<default>`; `ip` entities are refused), the keys `producer_byte_rate`,
//!   `consumer_byte_rate` (KIP-13) and `request_percentage` (KIP-124), and the eight
//!   KIP-55 levels with the sensor key each implies.
//! * [`config`]: the configured quotas — AlterClientQuotas ([`QuotaConfigs::alter`]),
//!   DescribeClientQuotas ([`QuotaConfigs::describe`]), and resolution
//!   ([`QuotaConfigs::resolve`]) in Kafka's precedence order.
//! * [`rate`]: Kafka's sampled `Rate` (11 windows of 1 s by default) and
//!   `QuotaUtils.throttleTime`.
//! * [`manager`]: per-entity sensors with Kafka's sensor keys, record → throttle time,
//!   expiry and a hard cap on memory; and [`ChannelThrottle`], the KIP-219 mute deadline of
//!   one connection.
//!
//! Nothing here reads a clock: every call takes `now_ms`, a monotonic timestamp in
//! milliseconds.
//!
//! # Throttling, end to end
//!
//! As in Kafka, a request is always served and recorded, and if the client is over its
//! quota the response carries `throttle_time_ms` and the broker mutes the connection
//! that long (KIP-219). The throttle differs from Kafka's: Kafka computes it from its
//! sampled rate (`QuotaUtils.throttleTime`, kept here as [`SampledRate::throttle_ms`]),
//! which holds a throttled client to its quota only on average over minutes (any 30 s
//! of it can be 10–20% off, see [`TokenBucket`]). Strata throttles with a token bucket
//! of `quota × (window_num − 1) × window_size` (Kafka's `TokenBucket`, which it uses for
//! controller mutations): a fresh client may burst that much, as in Kafka, and is then
//! paced at the quota, the throttle being the time the bucket takes to pay its debt
//! back. The sampled rate is still measured, for metrics.
//!
//! ```
//! use strata_quota::{ChannelThrottle, ClientQuotaEntity, QuotaKey, QuotaManager, QuotaManagerConfig};
//!
//! let mut quotas = QuotaManager::new(QuotaManagerConfig::default())?;
//! // Every user may produce 1000 B/s (each user its own budget).
//! quotas.alter(&ClientQuotaEntity::for_user(None)?, QuotaKey::ProducerByteRate, Some(1000.0))?;
//!
//! let mut channel = ChannelThrottle::new();
//! let now_ms = 0;
//! let throttle_ms = quotas.record(QuotaKey::ProducerByteRate, "alice", "app-1", 15_000.0, now_ms);
//! assert_eq!(throttle_ms, 5_000); // 15 000 B over a 10 s window is 1.5 × quota
//! channel.mute_for(now_ms, throttle_ms); // send the response, then stop reading
//! assert_eq!(channel.remaining(1_000), 4_000);
//! # Ok::<(), strata_quota::QuotaError>(())
//! ```

pub mod config;
pub mod entity;
pub mod manager;
pub mod rate;

pub use config::{DescribeFilter, EntityMatch, FilterComponent, QuotaConfigs};
pub use entity::{
    ClientQuotaEntity, DEFAULT_ENTITY_NAME, EntityName, EntityType, QuotaEntityKey, QuotaError,
    QuotaKey, QuotaLevel,
};
pub use manager::{
    ChannelThrottle, DEFAULT_INACTIVE_EXPIRY_MS, DEFAULT_MAX_TRACKED,
    NANOS_TO_PERCENTAGE_PER_SECOND, QuotaManager, QuotaManagerConfig,
};
pub use rate::{
    DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_MS, RateConfig, SampledRate, TokenBucket,
    throttle_time_ms,
};
