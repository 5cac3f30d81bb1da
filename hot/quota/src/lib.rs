//! Strata's client quotas, sans-IO, with Kafka's semantics:
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
//! Kafka records first and judges after: a request is always served, and if the measured
//! rate `O` is above the quota `T` over the rate's window `W`, the response carries
//! `throttle_time_ms = (O − T) / T × W` — the pause after which the average is back at
//! `T` — and the broker mutes the connection that long (KIP-219). A client that honours
//! throttles converges to the quota; a fresh one may first burst
//! `T × (window_num − 1) × window_size` (10 s of quota by default).
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
    DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_MS, RateConfig, SampledRate, throttle_time_ms,
};
