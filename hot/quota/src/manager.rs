//! Per-entity quota sensors: record usage, get the throttle time (Kafka's
//! `ClientQuotaManager.recordAndGetThrottleTimeMs`), expire idle sensors; and the
//! per-connection mute deadline of KIP-219.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::config::QuotaConfigs;
use crate::entity::{ClientQuotaEntity, QuotaEntityKey, QuotaError, QuotaKey};
use crate::rate::{
    DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_MS, RateConfig, SampledRate, TokenBucket,
};

/// Kafka purges quota sensors after an hour without a record
/// (`INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS`).
pub const DEFAULT_INACTIVE_EXPIRY_MS: u64 = 3_600_000;
/// Default hard cap on tracked sensors (Kafka has none; a client cycling client-ids under
/// a client-id level quota would grow its sensor map for an hour).
pub const DEFAULT_MAX_TRACKED: usize = 100_000;
/// KIP-124 (`ClientRequestQuotaManager.NANOS_TO_PERCENTAGE_PER_SECOND`): one second of
/// thread time recorded is 100 percent-seconds, so the rate per second is a percentage of
/// one thread.
pub const NANOS_TO_PERCENTAGE_PER_SECOND: f64 = 100.0 / 1_000_000_000.0;

/// The manager's settings (Kafka's `ClientQuotaManagerConfig` plus Strata's bounds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaManagerConfig {
    /// `quota.window.num` (11).
    pub window_num: u32,
    /// `quota.window.size.seconds`, in ms (1000).
    pub window_size_ms: u64,
    /// Cap on byte-rate throttle times. `None`: `window_num × window_size_ms` (11 s), a
    /// Strata bound: Kafka does not cap byte-rate throttles, so one request far above
    /// quota gets a long delay there. With the cap, a client whose requests each carry
    /// many seconds' worth of quota (about half the cap or more) gets through faster than
    /// its quota; the broker should bound Fetch sizes with
    /// [`QuotaManager::max_value_in_window`] as Kafka does. `Some(u64::MAX)` is Kafka's
    /// behaviour.
    pub max_byte_throttle_ms: Option<u64>,
    /// Cap on request-time throttles. `None`: `window_size_ms`, as Kafka's
    /// `ClientRequestQuotaManager` (`QuotaUtils.boundedThrottleTime`).
    pub max_request_throttle_ms: Option<u64>,
    /// A sensor not recorded to for longer than this is dropped by [`QuotaManager::expire`].
    pub inactive_expiry_ms: u64,
    /// Hard cap on tracked sensors; past it the least recently used one is evicted.
    pub max_tracked: usize,
}

impl Default for QuotaManagerConfig {
    fn default() -> Self {
        Self {
            window_num: DEFAULT_WINDOW_NUM,
            window_size_ms: DEFAULT_WINDOW_SIZE_MS,
            max_byte_throttle_ms: None,
            max_request_throttle_ms: None,
            inactive_expiry_ms: DEFAULT_INACTIVE_EXPIRY_MS,
            max_tracked: DEFAULT_MAX_TRACKED,
        }
    }
}

impl QuotaManagerConfig {
    pub fn rate_config(&self) -> Result<RateConfig, QuotaError> {
        RateConfig::new(self.window_num, self.window_size_ms)
    }

    /// The throttle cap that applies to `key`.
    pub fn max_throttle_ms(&self, key: QuotaKey) -> u64 {
        match key {
            QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate => self
                .max_byte_throttle_ms
                .unwrap_or_else(|| u64::from(self.window_num).saturating_mul(self.window_size_ms)),
            QuotaKey::RequestPercentage => {
                self.max_request_throttle_ms.unwrap_or(self.window_size_ms)
            }
        }
    }
}

/// One sensor: a quota key measured on one entity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SensorKey {
    key: QuotaKey,
    entity: QuotaEntityKey,
}

#[derive(Debug)]
struct Tracked {
    /// The measured rate, for metrics ([`QuotaManager::measured_rate`]).
    rate: SampledRate,
    /// What throttles: see [`TokenBucket`] for why not the rate.
    bucket: TokenBucket,
    last_used_ms: u64,
    /// Position in the recency order (`QuotaManager::lru`).
    seq: u64,
}

/// Quota enforcement for every client: owns the configured quotas ([`QuotaConfigs`]) and
/// one sampled rate per (quota key, [`QuotaEntityKey`]) in use.
///
/// The broker calls, per request (Kafka's `KafkaApis`):
/// * Produce: `record(ProducerByteRate, user, client_id, request_bytes, now)`;
/// * Fetch: `record(ConsumerByteRate, …, response_bytes, now)`, and if the request is
///   throttled (by bytes or request time), `unrecord` the same bytes and send an empty
///   response; size responses with [`max_value_in_window`](Self::max_value_in_window);
/// * every request that is not exempt (inter-broker cluster actions are):
///   `record_request_time(user, client_id, handler_thread_nanos, now)`, plus
///   `record_no_throttle(RequestPercentage, …)` for network-thread time;
/// * send the response with `throttle_time_ms = max(byte throttle, request throttle)` and
///   mute the channel with [`ChannelThrottle`] (KIP-219).
///
/// Sensors exist only for entities that have a quota: without one, nothing is tracked.
///
/// **Memory bound.** At most `max_tracked` sensors are held: creating one more evicts the
/// least recently used. A sensor costs about 250 bytes while it has one sample (a
/// client-id seen once) and about 520 bytes with a full ring, plus the user and
/// client-id strings: with the defaults and short ids, at most about 52 MB. Kafka does
/// not limit client-id length (up to 32 767 bytes in a request header), so the broker
/// may want to. Sensors idle for more than `inactive_expiry_ms` go on
/// [`expire`](Self::expire) (call it periodically; Kafka checks every 30 s). Eviction
/// forgets an entity's usage and so gives it a fresh burst allowance: a client creating
/// entities faster than `max_tracked` per `inactive_expiry_ms` can evict others'
/// sensors. Only quotas resolved at a client-id level (or per (user, client-id)) create a
/// sensor per client-id; user-level quotas are one sensor per user whatever the ids.
///
/// Not thread-safe by itself (`&mut self`); the broker holds it behind a lock.
#[derive(Debug)]
pub struct QuotaManager {
    config: QuotaManagerConfig,
    rate: RateConfig,
    quotas: QuotaConfigs,
    sensors: HashMap<Arc<SensorKey>, Tracked>,
    /// Sensors by last use: `seq` → key, oldest first.
    lru: BTreeMap<u64, Arc<SensorKey>>,
    next_seq: u64,
}

impl QuotaManager {
    pub fn new(config: QuotaManagerConfig) -> Result<Self, QuotaError> {
        Self::with_quotas(config, QuotaConfigs::new())
    }

    pub fn with_quotas(
        config: QuotaManagerConfig,
        quotas: QuotaConfigs,
    ) -> Result<Self, QuotaError> {
        let rate = config.rate_config()?;
        if config.max_tracked == 0 {
            return Err(QuotaError::InvalidConfig("max_tracked must be at least 1"));
        }
        Ok(Self {
            config,
            rate,
            quotas,
            sensors: HashMap::new(),
            lru: BTreeMap::new(),
            next_seq: 0,
        })
    }

    pub fn config(&self) -> &QuotaManagerConfig {
        &self.config
    }

    /// The configured quotas (for DescribeClientQuotas).
    pub fn quotas(&self) -> &QuotaConfigs {
        &self.quotas
    }

    /// To apply alterations; they take effect on the next record (the quota is resolved on
    /// every call, so a raised, lowered or removed quota applies at once).
    pub fn quotas_mut(&mut self) -> &mut QuotaConfigs {
        &mut self.quotas
    }

    /// Shorthand for `quotas_mut().alter(…)`.
    pub fn alter(
        &mut self,
        entity: &ClientQuotaEntity,
        key: QuotaKey,
        value: Option<f64>,
    ) -> Result<(), QuotaError> {
        self.quotas.alter(entity, key, value)
    }

    /// Replaces all quotas (e.g. from a controller snapshot). Usage already measured is kept.
    pub fn set_quotas(&mut self, quotas: QuotaConfigs) {
        self.quotas = quotas;
    }

    /// Records `value` (bytes for byte rates, percent-seconds for request time) for the
    /// client and returns the throttle time in ms: 0 if no quota applies or the client's
    /// [`TokenBucket`] (`burst` = [`max_value_in_window`](Self::max_value_in_window)) is
    /// not in debt, else the time to pay the debt back at the quota, capped by
    /// [`QuotaManagerConfig::max_throttle_ms`]. The value is recorded even when
    /// throttled, as in Kafka. Non-finite values count as 0.
    ///
    /// Kafka throttles with `QuotaUtils.throttleTime` over its sampled `Rate`; that
    /// formula gives the same throttle to a fresh client's first excess, but holds a
    /// throttled client to its quota only on average over minutes (see [`TokenBucket`]).
    pub fn record(
        &mut self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: u64,
    ) -> u64 {
        let Some((entity, quota)) = self.quotas.resolve(user, client_id, key) else {
            return 0;
        };
        let max = self.config.max_throttle_ms(key);
        let burst = self.burst(quota);
        self.with_sensor(SensorKey { key, entity }, now_ms, |t, cfg| {
            t.rate.record(cfg, value, now_ms);
            t.bucket.record(quota, burst, value, now_ms);
            t.bucket.throttle_ms(quota, burst, now_ms, max)
        })
    }

    /// The bucket size for `quota`: `quota × (window_num − 1) × window_size`, the burst
    /// Kafka's sampled rate allows a fresh client.
    fn burst(&self, quota: f64) -> f64 {
        let windows = f64::from(self.config.window_num.saturating_sub(1));
        quota * windows * self.config.window_size_ms as f64 / 1000.0
    }

    /// KIP-124: records `nanos` of request-handler thread time as a percentage of one
    /// thread and returns the `request_percentage` throttle time (at most one window).
    pub fn record_request_time(
        &mut self,
        user: &str,
        client_id: &str,
        nanos: u64,
        now_ms: u64,
    ) -> u64 {
        let value = nanos as f64 * NANOS_TO_PERCENTAGE_PER_SECOND;
        self.record(QuotaKey::RequestPercentage, user, client_id, value, now_ms)
    }

    /// Records without checking the quota (Kafka's `recordNoThrottle`, used for network
    /// thread time): counts against later requests.
    pub fn record_no_throttle(
        &mut self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: u64,
    ) {
        let Some((entity, quota)) = self.quotas.resolve(user, client_id, key) else {
            return;
        };
        let burst = self.burst(quota);
        self.with_sensor(SensorKey { key, entity }, now_ms, |t, cfg| {
            t.rate.record(cfg, value, now_ms);
            t.bucket.record(quota, burst, value, now_ms);
        });
    }

    /// Takes back a recorded value (Kafka's `unrecordQuotaSensor`): a throttled Fetch
    /// returns no data, so its bytes must not count.
    pub fn unrecord(
        &mut self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: u64,
    ) {
        self.record_no_throttle(key, user, client_id, -value, now_ms);
    }

    /// Kafka's `maxValueInQuotaWindow`: the most that can be recorded at once without
    /// certain throttling, `quota × (window_num − 1) × window_size`. The broker caps Fetch
    /// response sizes with it. `None` when no quota applies.
    pub fn max_value_in_window(&self, key: QuotaKey, user: &str, client_id: &str) -> Option<f64> {
        let (_, quota) = self.quotas.resolve(user, client_id, key)?;
        Some(self.burst(quota))
    }

    /// The measured rate of the sensor the client resolves to (per second; for byte
    /// quotas bytes/s, for request quotas percent), for metrics. `None` when no quota
    /// applies or nothing has been recorded.
    pub fn measured_rate(
        &mut self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
        now_ms: u64,
    ) -> Option<f64> {
        let (entity, _) = self.quotas.resolve(user, client_id, key)?;
        let tracked = self.sensors.get_mut(&SensorKey { key, entity })?;
        Some(tracked.rate.measure(&self.rate, now_ms))
    }

    /// Drops sensors not recorded to for more than `inactive_expiry_ms` (Kafka:
    /// `Sensor.hasExpired`, `now − lastRecordTime > expiry`). Returns how many. Assumes
    /// `now_ms` does not go backwards.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let mut removed = 0;
        while let Some(oldest) = self.lru.first_entry() {
            let expired = self.sensors.get(&**oldest.get()).is_none_or(|t| {
                now_ms.saturating_sub(t.last_used_ms) > self.config.inactive_expiry_ms
            });
            if !expired {
                break;
            }
            let key = oldest.remove();
            self.sensors.remove(&*key);
            removed += 1;
        }
        removed
    }

    /// Number of sensors held (at most `max_tracked`).
    pub fn tracked(&self) -> usize {
        self.sensors.len()
    }

    /// Runs `f` on the sensor for `sk`, creating it (evicting the least recently used one
    /// if at the cap) if needed, and marks it used at `now_ms`.
    fn with_sensor<R>(
        &mut self,
        sk: SensorKey,
        now_ms: u64,
        f: impl FnOnce(&mut Tracked, &RateConfig) -> R,
    ) -> R {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(t) = self.sensors.get_mut(&sk) {
            if let Some(k) = self.lru.remove(&t.seq) {
                self.lru.insert(seq, k);
            }
            t.seq = seq;
            t.last_used_ms = now_ms;
            return f(t, &self.rate);
        }
        while self.sensors.len() >= self.config.max_tracked {
            let Some((_, k)) = self.lru.pop_first() else {
                break;
            };
            self.sensors.remove(&*k);
        }
        let sk = Arc::new(sk);
        self.lru.insert(seq, Arc::clone(&sk));
        let t = self.sensors.entry(sk).or_insert(Tracked {
            rate: SampledRate::new(),
            bucket: TokenBucket::full(now_ms),
            last_used_ms: now_ms,
            seq,
        });
        f(t, &self.rate)
    }
}

/// KIP-219 throttling of one connection: the broker sends a throttled response at once,
/// with `throttle_time_ms` set, then stops reading from the connection until the deadline
/// (clients from KIP-219 on also hold off sending for that long). Older request versions
/// (Produce < v6, Fetch < v8, …) expect the broker to delay the response instead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelThrottle {
    until_ms: u64,
}

impl ChannelThrottle {
    pub const fn new() -> Self {
        Self { until_ms: 0 }
    }

    /// Mutes until `now_ms + throttle_ms`, or keeps a later deadline already set; returns
    /// the deadline in force. A zero throttle changes nothing.
    pub fn mute_for(&mut self, now_ms: u64, throttle_ms: u64) -> u64 {
        if throttle_ms > 0 {
            self.until_ms = self.until_ms.max(now_ms.saturating_add(throttle_ms));
        }
        self.until_ms
    }

    /// Milliseconds left before the connection may be read again (0: not muted).
    pub fn remaining(&self, now_ms: u64) -> u64 {
        self.until_ms.saturating_sub(now_ms)
    }

    pub fn is_muted(&self, now_ms: u64) -> bool {
        self.remaining(now_ms) > 0
    }

    /// The deadline, if the channel is muted at `now_ms`.
    pub fn deadline(&self, now_ms: u64) -> Option<u64> {
        self.is_muted(now_ms).then_some(self.until_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: QuotaKey = QuotaKey::ProducerByteRate;

    fn manager_with(entity: ClientQuotaEntity, key: QuotaKey, quota: f64) -> QuotaManager {
        let mut m = QuotaManager::new(QuotaManagerConfig::default()).unwrap();
        m.alter(&entity, key, Some(quota)).unwrap();
        m
    }

    #[test]
    fn throttle_hand_computed() {
        let mut m = manager_with(
            ClientQuotaEntity::for_client_id(Some("app")).unwrap(),
            P,
            1000.0,
        );
        // 5000 B at t=0 is 500 B/s over the padded 10 s window: within quota.
        assert_eq!(m.record(P, "u", "app", 5000.0, 0), 0);
        // 10 000 more: 1500 B/s → 0.5 × 10 000 ms.
        assert_eq!(m.record(P, "u", "app", 10_000.0, 0), 5_000);
        assert_eq!(m.measured_rate(P, "u", "app", 0), Some(1500.0));
        // Another user with the same client-id shares the clients/app sensor: at 2.5 s,
        // 2500 of the 5000 B of debt are paid back, and 1000 more is 3500 B of debt.
        assert_eq!(m.record(P, "other", "app", 1000.0, 2_500), 3_500);
        // A different client-id is unlimited.
        assert_eq!(m.record(P, "u", "app2", 1e12, 0), 0);
        assert_eq!(m.max_value_in_window(P, "u", "app"), Some(10_000.0));
        assert_eq!(m.max_value_in_window(P, "u", "app2"), None);
    }

    #[test]
    fn default_user_quota_is_per_user() {
        let mut m = manager_with(ClientQuotaEntity::for_user(None).unwrap(), P, 1000.0);
        // Each user may burst its own 10 000 B, whatever its client-ids.
        assert_eq!(m.record(P, "alice", "a1", 6000.0, 0), 0);
        assert_eq!(m.record(P, "alice", "a2", 4000.0, 0), 0);
        assert_eq!(m.record(P, "bob", "b1", 10_000.0, 0), 0);
        // Both users are now exactly at the quota; one more byte each throttles each.
        assert!(m.record(P, "alice", "a3", 1000.0, 0) > 0);
        assert!(m.record(P, "bob", "b1", 1000.0, 0) > 0);
        assert_eq!(m.tracked(), 2);
    }

    #[test]
    fn default_client_quota_is_per_client_id() {
        let mut m = manager_with(ClientQuotaEntity::for_client_id(None).unwrap(), P, 1000.0);
        assert_eq!(m.record(P, "alice", "c1", 10_000.0, 0), 0);
        assert_eq!(m.record(P, "alice", "c2", 10_000.0, 0), 0);
        // Same client-id from another user: same sensor.
        assert_eq!(m.record(P, "bob", "c1", 1000.0, 0), 1000);
    }

    /// What [`simulate`] saw.
    struct Run {
        /// (time, bytes) of every request.
        sends: Vec<(u64, f64)>,
        max_throttle: u64,
        /// The largest excess of bytes sent over `quota × (t + (window_num − 1) ×
        /// window)` (the burst allowance) at any time t.
        excess: f64,
        first_throttle: Option<u64>,
        end: u64,
    }

    impl Run {
        /// Bytes a second in `[from, from + len)`.
        fn rate(&self, from: u64, len: u64) -> f64 {
            let bytes: f64 = self
                .sends
                .iter()
                .filter(|(t, _)| (from..from + len).contains(t))
                .map(|(_, b)| b)
                .sum();
            bytes / (len as f64 / 1000.0)
        }
    }

    /// A client of a 1000 B/s quota that sends `chunk` bytes every `interval_ms` unless
    /// throttled, and then waits out the throttle (KIP-219), for `duration_ms`.
    fn simulate(cap: Option<u64>, chunk: f64, interval_ms: u64, duration_ms: u64) -> Run {
        let quota = 1000.0;
        let cfg = QuotaManagerConfig {
            max_byte_throttle_ms: cap,
            ..QuotaManagerConfig::default()
        };
        let mut m = QuotaManager::new(cfg).unwrap();
        m.alter(
            &ClientQuotaEntity::for_user(Some("u")).unwrap(),
            P,
            Some(quota),
        )
        .unwrap();
        let mut run = Run {
            sends: Vec::new(),
            max_throttle: 0,
            excess: f64::MIN,
            first_throttle: None,
            end: 0,
        };
        let (mut now, mut sent) = (0u64, 0.0);
        while now < duration_ms {
            let throttle = m.record(P, "u", "c", chunk, now);
            run.sends.push((now, chunk));
            sent += chunk;
            run.excess = run.excess.max(sent - quota * (now as f64 / 1000.0 + 10.0));
            run.max_throttle = run.max_throttle.max(throttle);
            if throttle > 0 {
                run.first_throttle.get_or_insert(now);
            }
            now += interval_ms.max(throttle);
        }
        run.end = now;
        run
    }

    #[test]
    fn a_throttled_client_is_paced_at_its_quota_in_every_30_s() {
        // From 1.3× to 5000× quota, in requests of 0.1 s to 2 s of quota: once first
        // throttled, every 30 s holds the quota's 30 000 B to within two requests (what
        // the bucket may hold at either end), so within 10 % (issue 18) while a request
        // is at most 1.5 s of quota.
        for (chunk, interval) in [
            (130.0, 100),
            (200.0, 100),
            (2000.0, 1000),
            (100.0, 1),
            (250.0, 1),
            (2000.0, 1),
        ] {
            let run = simulate(None, chunk, interval, 120_000);
            let first = run.first_throttle.expect("throttled");
            assert!(run.max_throttle <= 2_000, "{}", run.max_throttle);
            for from in (first..run.end - 30_000).step_by(500) {
                let rate = run.rate(from, 30_000);
                assert!(
                    (rate - 1000.0).abs() * 30.0 <= 2.0 * chunk,
                    "chunk {chunk}/{interval} ms from {from} ms: {rate} B/s"
                );
            }
        }
    }

    #[test]
    fn any_demand_is_bounded_by_quota_plus_burst_allowance() {
        // The bytes sent never exceed quota × (t + 10 s) by more than one request, and
        // the long-run rate is the quota.
        for (chunk, interval) in [
            (130.0, 100),
            (400.0, 100),
            (100.0, 1),
            (1000.0, 1),
            (5000.0, 1),
            (10_000.0, 1),
        ] {
            for cap in [None, Some(u64::MAX)] {
                let run = simulate(cap, chunk, interval, 300_000);
                assert!(
                    run.excess <= chunk * (1.0 + 1e-12),
                    "chunk {chunk}/{interval} ms: excess {}",
                    run.excess
                );
                let rate = run.rate(0, run.end);
                assert!(
                    (rate - 1000.0).abs() <= 50.0,
                    "chunk {chunk}/{interval} ms: {rate} B/s"
                );
            }
        }
        // Requests of 20 s of quota each: uncapped (Kafka), each is throttled 20 s and the
        // bound holds; the 11 s cap lets the client through more often than its quota
        // (the documented trade-off).
        let run = simulate(Some(u64::MAX), 20_000.0, 100, 120_000);
        assert!(run.max_throttle == 20_000 && run.excess <= 20_000.0);
        let run = simulate(None, 20_000.0, 100, 120_000);
        assert!(run.max_throttle == 11_000 && run.rate(0, run.end) > 1500.0);
    }

    #[test]
    fn a_client_ignoring_throttles_builds_debt() {
        // 2× quota for 30 s, never waiting: 60 000 B against 10 000 of burst and 30 000
        // of refill is 20 000 B of debt, 20 s at the quota; capped at 11 s by default.
        let run_open_loop = |cap| {
            let cfg = QuotaManagerConfig {
                max_byte_throttle_ms: cap,
                ..QuotaManagerConfig::default()
            };
            let mut m = QuotaManager::new(cfg).unwrap();
            m.alter(
                &ClientQuotaEntity::for_user(Some("u")).unwrap(),
                P,
                Some(1000.0),
            )
            .unwrap();
            let mut last = 0;
            for t in (0..=30_000).step_by(100) {
                last = m.record(P, "u", "c", 200.0, t);
            }
            last
        };
        assert_eq!(run_open_loop(None), 11_000);
        assert_eq!(run_open_loop(Some(u64::MAX)), 20_200);
    }

    #[test]
    fn request_percentage() {
        let r = QuotaKey::RequestPercentage;
        let mut m = manager_with(ClientQuotaEntity::for_user(Some("u")).unwrap(), r, 10.0);
        // 1.05 s of thread time at t=0: 105 %·s over 10 s = 10.5 % → 0.05 × 10 000 = 500 ms.
        assert_eq!(m.record_request_time("u", "c", 1_050_000_000, 0), 500);
        // Far over: Kafka bounds request throttles to one window (1 s).
        assert_eq!(m.record_request_time("u", "c", 5_000_000_000, 0), 1_000);
        // Network-thread time counts but never throttles by itself.
        let mut m = manager_with(ClientQuotaEntity::for_user(Some("u")).unwrap(), r, 10.0);
        m.record_no_throttle(r, "u", "c", 200.0, 0);
        assert_eq!(m.record_request_time("u", "c", 0, 0), 1_000);
        // Byte quotas are separate sensors.
        assert_eq!(m.record(P, "u", "c", 1e9, 0), 0);
    }

    #[test]
    fn removing_a_quota_stops_throttling_and_unrecord() {
        let e = ClientQuotaEntity::for_user(Some("u")).unwrap();
        let mut m = manager_with(e.clone(), QuotaKey::ConsumerByteRate, 1000.0);
        let c = QuotaKey::ConsumerByteRate;
        assert!(m.record(c, "u", "c", 20_000.0, 0) > 0);
        // A throttled fetch returns no data: take the bytes back.
        m.unrecord(c, "u", "c", 20_000.0, 0);
        assert_eq!(m.record(c, "u", "c", 1000.0, 10), 0);
        assert!(m.record(c, "u", "c", 20_000.0, 20) > 0);
        m.alter(&e, c, None).unwrap();
        assert_eq!(m.record(c, "u", "c", 20_000.0, 30), 0);
        // Raising it applies at once, to the usage already measured.
        m.alter(&e, c, Some(1000.0)).unwrap();
        assert!(m.record(c, "u", "c", 1.0, 40) > 0);
        m.alter(&e, c, Some(1e9)).unwrap();
        assert_eq!(m.record(c, "u", "c", 1.0, 50), 0);
    }

    #[test]
    fn expiry_and_lru_cap_bound_memory() {
        let cfg = QuotaManagerConfig {
            max_tracked: 1000,
            ..QuotaManagerConfig::default()
        };
        let mut m = QuotaManager::new(cfg).unwrap();
        m.alter(
            &ClientQuotaEntity::for_client_id(None).unwrap(),
            P,
            Some(1000.0),
        )
        .unwrap();
        // A client cycling client-ids: one sensor each, never more than the cap.
        m.record(P, "u", "steady", 20_000.0, 0);
        for i in 0..50_000u64 {
            m.record(P, "u", &format!("id-{i}"), 10.0, i / 10);
            if i % 100 == 0 {
                // The steady client keeps its sensor (and its measured usage).
                assert!(m.record(P, "u", "steady", 1.0, i / 10) > 0);
            }
            assert!(m.tracked() <= 1000);
        }
        assert_eq!(m.tracked(), 1000);
        // An hour of inactivity (strictly more) drops everything.
        // The oldest survivor was last used at 4900 ms, the newest at 4999 ms.
        assert_eq!(m.expire(4_900 + DEFAULT_INACTIVE_EXPIRY_MS), 0);
        assert_eq!(m.expire(4_999 + DEFAULT_INACTIVE_EXPIRY_MS + 1), 1000);
        assert_eq!(m.tracked(), 0);
        // Partial expiry keeps recently used sensors.
        m.record(P, "u", "a", 1.0, 0);
        m.record(P, "u", "b", 1.0, 2_000_000);
        assert_eq!(m.expire(DEFAULT_INACTIVE_EXPIRY_MS + 1), 1);
        assert_eq!(m.tracked(), 1);
        assert!(
            QuotaManager::new(QuotaManagerConfig {
                max_tracked: 0,
                ..QuotaManagerConfig::default()
            })
            .is_err()
        );
    }

    #[test]
    fn channel_throttle() {
        let mut t = ChannelThrottle::new();
        assert!(!t.is_muted(0));
        assert_eq!(t.mute_for(100, 0), 0);
        assert_eq!(t.mute_for(100, 500), 600);
        assert_eq!(t.mute_for(200, 100), 600);
        assert_eq!(t.remaining(250), 350);
        assert_eq!(t.deadline(250), Some(600));
        assert!(!t.is_muted(600));
        assert_eq!(t.deadline(600), None);
        assert_eq!(t.mute_for(700, 1000), 1700);
    }
}
