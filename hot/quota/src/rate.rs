//! A sampled rate with the exact arithmetic of Kafka's `Rate` over a `WindowedSum`
//! (`org.apache.kafka.common.metrics.stats.{Rate, SampledStat}`), and the throttle time
//! of `QuotaUtils.throttleTime`. Sans-IO: every call takes `now_ms`, a monotonic
//! millisecond timestamp.

use crate::entity::QuotaError;

/// Kafka's `quota.window.num` default.
pub const DEFAULT_WINDOW_NUM: u32 = 11;
/// Kafka's `quota.window.size.seconds` default, in milliseconds.
pub const DEFAULT_WINDOW_SIZE_MS: u64 = 1_000;

/// The sampling of a rate: `samples` windows of `window_ms` each (Kafka's `MetricConfig`
/// with `samples(quota.window.num)` and `timeWindow(quota.window.size.seconds)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateConfig {
    samples: u32,
    window_ms: u64,
}

impl Default for RateConfig {
    fn default() -> Self {
        Self {
            samples: DEFAULT_WINDOW_NUM,
            window_ms: DEFAULT_WINDOW_SIZE_MS,
        }
    }
}

impl RateConfig {
    /// Both must be at least 1 (Kafka's validators: `atLeast(1)`).
    pub fn new(samples: u32, window_ms: u64) -> Result<Self, QuotaError> {
        if samples == 0 {
            return Err(QuotaError::InvalidConfig(
                "quota window count must be at least 1",
            ));
        }
        if window_ms == 0 {
            return Err(QuotaError::InvalidConfig(
                "quota window size must be at least 1 ms",
            ));
        }
        Ok(Self { samples, window_ms })
    }

    pub fn samples(&self) -> u32 {
        self.samples
    }

    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// `samples × window_ms`: how long a sample is remembered after its last event.
    pub fn span_ms(&self) -> u64 {
        u64::from(self.samples).saturating_mul(self.window_ms)
    }
}

/// One `SampledStat.Sample`. Kafka's `eventCount` only serves `MetricConfig.eventWindow`,
/// which quota sensors leave at `Long.MAX_VALUE`, so it is not kept.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    value: f64,
    start_ms: u64,
    last_event_ms: u64,
}

impl Sample {
    fn new(now_ms: u64) -> Self {
        Self {
            value: 0.0,
            start_ms: now_ms,
            last_event_ms: now_ms,
        }
    }
}

/// A rate (per second) of a recorded quantity, measured over up to `samples + 1`
/// windows exactly as Kafka's `Rate` measures it:
///
/// * `record` adds to the current sample, starting a new one (recycling the oldest of a
///   ring of `samples + 1`) once the current one is `window_ms` old;
/// * samples whose last event is `samples × window_ms` old are obsolete and reset;
/// * the rate is the sum of the samples over the window size, which is the time since the
///   oldest sample started, padded, while fewer than `samples − 1` whole windows have
///   elapsed, by the missing whole windows (`Rate.windowSize`). So a fresh or long-idle
///   client is measured over about `(samples − 1) × window_ms`: it may burst up to
///   `quota × (samples − 1) × window` before being throttled.
///
/// Memory: one sample of 24 bytes until a second window is used, then room for
/// `samples + 1` (288 bytes with Kafka's defaults).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampledRate {
    samples: Vec<Sample>,
    current: usize,
}

impl SampledRate {
    pub fn new() -> Self {
        Self::default()
    }

    /// `SampledStat.record`. Non-finite values are ignored (they would poison the sum).
    pub fn record(&mut self, cfg: &RateConfig, value: f64, now_ms: u64) {
        if self.samples.is_empty() {
            // One sample until a second is needed: a client that appears once (a cycled
            // client-id) costs 24 bytes of samples, not the whole ring.
            self.samples.reserve_exact(1);
            self.samples.push(Sample::new(now_ms));
            self.current = 0;
        }
        let complete = self
            .samples
            .get(self.current)
            .is_none_or(|s| now_ms.saturating_sub(s.start_ms) >= cfg.window_ms);
        if complete {
            self.advance(cfg, now_ms);
        }
        if let Some(s) = self.samples.get_mut(self.current) {
            if value.is_finite() {
                s.value += value;
            }
            s.last_event_ms = now_ms;
        }
    }

    /// `SampledStat.advance`: Kafka keeps one sample more than configured.
    fn advance(&mut self, cfg: &RateConfig, now_ms: u64) {
        let ring = cfg.samples as usize + 1;
        self.current = (self.current + 1) % ring;
        if self.current >= self.samples.len() {
            self.samples.reserve_exact(ring - self.samples.len());
            self.samples.push(Sample::new(now_ms));
            self.current = self.samples.len() - 1;
        } else if let Some(s) = self.samples.get_mut(self.current) {
            *s = Sample::new(now_ms);
        }
    }

    /// `SampledStat.purgeObsoleteSamples`: a sample with no event in the last
    /// `samples × window_ms` is reset (to start now, empty).
    fn purge_obsolete(&mut self, cfg: &RateConfig, now_ms: u64) {
        let expire_age = cfg.span_ms();
        for s in &mut self.samples {
            if now_ms.saturating_sub(s.last_event_ms) >= expire_age {
                *s = Sample::new(now_ms);
            }
        }
    }

    /// `Rate.windowSize`, in milliseconds (at least 1).
    pub fn window_size_ms(&mut self, cfg: &RateConfig, now_ms: u64) -> u64 {
        self.purge_obsolete(cfg, now_ms);
        // `SampledStat.oldest`: the earliest-started sample (a fresh one if none).
        let oldest_start = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let mut elapsed = now_ms.saturating_sub(oldest_start);
        let full_windows = elapsed / cfg.window_ms;
        let min_full_windows = u64::from(cfg.samples - 1);
        if full_windows < min_full_windows {
            elapsed += (min_full_windows - full_windows) * cfg.window_ms;
        }
        elapsed.max(1)
    }

    /// `Rate.measure`: the sum of the retained samples per second of window.
    pub fn measure(&mut self, cfg: &RateConfig, now_ms: u64) -> f64 {
        self.purge_obsolete(cfg, now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total / (self.window_size_ms(cfg, now_ms) as f64 / 1000.0)
    }

    /// `Sensor.checkQuotas` then `QuotaUtils.throttleTime`: 0 while the measured rate is
    /// within `quota` (`Quota.acceptable`: `value <= bound`), else the delay that brings
    /// it back to `quota`, at most `max_throttle_ms`.
    pub fn throttle_ms(
        &mut self,
        cfg: &RateConfig,
        quota: f64,
        now_ms: u64,
        max_throttle_ms: u64,
    ) -> u64 {
        let observed = self.measure(cfg, now_ms);
        if observed <= quota {
            return 0;
        }
        let window = self.window_size_ms(cfg, now_ms);
        throttle_time_ms(observed, quota, window).min(max_throttle_ms)
    }
}

/// A token bucket (Kafka's `TokenBucket` stat, KIP-599, which Kafka uses for controller
/// mutation quotas), here for throttling byte rates and request time.
///
/// The bucket holds up to `burst` tokens and refills at `quota` per second; a record takes
/// its value out and may leave the bucket in debt; the throttle is the time the refill
/// needs to pay the debt back, `−tokens / quota`. A fresh bucket is full, so a new or
/// long-idle client may burst `burst` at once, as the sampled [`SampledRate`] lets it burst
/// `(samples − 1)` windows of quota.
///
/// Why not the sampled rate: its window forgets a whole sample at a time, so a client held
/// at its quota re-bursts each time the sample holding an earlier burst expires (one
/// window of quota at once, then nothing), and any 30 s of it can be 10–20% over or under
/// the quota. The bucket's debt is paid only by time, so a throttled client is paced at
/// the quota: after the first burst, the bytes in any interval `d` are at most
/// `quota × d` plus one request.
///
/// Memory: 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket at `now_ms` (whatever the burst: the first refill caps it).
    pub fn full(now_ms: u64) -> Self {
        Self {
            tokens: f64::INFINITY,
            last_ms: now_ms,
        }
    }

    fn refill(&mut self, quota: f64, burst: f64, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.tokens = (self.tokens + quota * elapsed).min(burst);
        self.last_ms = self.last_ms.max(now_ms);
    }

    /// Takes `value` out (a negative value puts it back: Kafka's unrecord), never above
    /// `burst`. Non-finite values are ignored.
    pub fn record(&mut self, quota: f64, burst: f64, value: f64, now_ms: u64) {
        self.refill(quota, burst, now_ms);
        if value.is_finite() {
            self.tokens = (self.tokens - value).min(burst);
        }
    }

    /// The tokens left at `now_ms` (negative: the debt).
    pub fn tokens(&mut self, quota: f64, burst: f64, now_ms: u64) -> f64 {
        self.refill(quota, burst, now_ms);
        self.tokens
    }

    /// 0 while the bucket is not in debt, else the ms until it is not (rounded up), at
    /// most `max_throttle_ms`.
    pub fn throttle_ms(
        &mut self,
        quota: f64,
        burst: f64,
        now_ms: u64,
        max_throttle_ms: u64,
    ) -> u64 {
        let tokens = self.tokens(quota, burst, now_ms);
        if tokens >= 0.0 || quota <= 0.0 || quota.is_nan() {
            return 0;
        }
        // `as` saturates: +inf becomes u64::MAX.
        ((-tokens / quota * 1000.0).ceil() as u64).min(max_throttle_ms)
    }
}

/// `QuotaUtils.throttleTime`: if `observed` (O) exceeds `quota` (T) over a window W, the
/// delay X with `O × W / (W + X) = T`, i.e. `X = (O − T) / T × W`, rounded (`Math.round`).
/// Never negative: 0 when within quota; saturates rather than overflowing.
pub fn throttle_time_ms(observed: f64, quota: f64, window_ms: u64) -> u64 {
    if observed.is_nan() || observed <= quota || quota <= 0.0 {
        return 0;
    }
    let x = (observed - quota) / quota * window_ms as f64;
    // `as` saturates: +inf becomes u64::MAX, NaN 0.
    x.round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RateConfig {
        RateConfig::default()
    }

    #[test]
    fn first_window_is_padded_to_samples_minus_one() {
        let c = cfg();
        let mut r = SampledRate::new();
        r.record(&c, 5000.0, 0);
        // elapsed 0 → padded to 10 whole windows: 5000 B / 10 s.
        assert_eq!(r.window_size_ms(&c, 0), 10_000);
        assert_eq!(r.measure(&c, 0), 500.0);
        // 2.5 s later: elapsed 2500, 2 whole windows → +8 windows.
        assert_eq!(r.window_size_ms(&c, 2_500), 10_500);
    }

    #[test]
    fn kafka_throttle_values() {
        let c = cfg();
        let mut r = SampledRate::new();
        // 5000 B at t=0 against 1000 B/s: 500 B/s measured, no throttle.
        r.record(&c, 5000.0, 0);
        assert_eq!(r.throttle_ms(&c, 1000.0, 0, u64::MAX), 0);
        // 10 000 more: 15 000 / 10 s = 1500 B/s → (1500−1000)/1000 × 10 000 = 5000 ms.
        r.record(&c, 10_000.0, 0);
        assert_eq!(r.throttle_ms(&c, 1000.0, 0, u64::MAX), 5_000);
        // At 2.5 s, 1000 more (a new sample): 16 000 / 10.5 s; X = 16 000 − 10 500 = 5500 ms.
        r.record(&c, 1000.0, 2_500);
        assert_eq!(r.throttle_ms(&c, 1000.0, 2_500, u64::MAX), 5_500);
        assert_eq!(r.throttle_ms(&c, 1000.0, 2_500, 3_000), 3_000);
        // Exactly at quota is acceptable.
        let mut r = SampledRate::new();
        r.record(&c, 10_000.0, 0);
        assert_eq!(r.throttle_ms(&c, 1000.0, 0, u64::MAX), 0);
    }

    #[test]
    fn ring_keeps_samples_plus_one_and_purges_idle() {
        let c = RateConfig::new(3, 1000).unwrap();
        let mut r = SampledRate::new();
        for t in 0..10u64 {
            r.record(&c, 100.0, t * 1000);
        }
        assert_eq!(r.samples.len(), 4);
        // Samples started at 6, 7, 8, 9 s; at 9 s the one from 6 s has had no event for
        // 3 × 1 s and is purged, leaving 7..9: window 2 s (= (3 − 1) windows), sum 300.
        assert_eq!(r.window_size_ms(&c, 9_000), 2_000);
        assert_eq!(r.measure(&c, 9_000), 150.0);
        // 3 s after the last event every sample is obsolete.
        assert_eq!(r.measure(&c, 12_000), 0.0);
    }

    #[test]
    fn throttle_time_edges() {
        assert_eq!(throttle_time_ms(2000.0, 1000.0, 11_000), 11_000);
        assert_eq!(throttle_time_ms(999.0, 1000.0, 11_000), 0);
        assert_eq!(throttle_time_ms(f64::NAN, 1000.0, 11_000), 0);
        assert_eq!(throttle_time_ms(f64::INFINITY, 1000.0, 11_000), u64::MAX);
        assert!(RateConfig::new(0, 1).is_err());
        assert!(RateConfig::new(1, 0).is_err());
        // One sample: never padded; the window is at least 1 ms.
        let c = RateConfig::new(1, 1000).unwrap();
        let mut r = SampledRate::new();
        r.record(&c, 1.0, 5);
        assert_eq!(r.window_size_ms(&c, 5), 1);
    }

    #[test]
    fn token_bucket_debt_refill_and_burst() {
        let (q, burst) = (1000.0, 10_000.0);
        let mut b = TokenBucket::full(0);
        // A fresh bucket is full: 10 000 B at once is not throttled, one byte more is.
        b.record(q, burst, 10_000.0, 0);
        assert_eq!(b.throttle_ms(q, burst, 0, u64::MAX), 0);
        b.record(q, burst, 1.0, 0);
        assert_eq!(b.throttle_ms(q, burst, 0, u64::MAX), 1);
        // 5000 B of debt is 5 s at 1000 B/s; 2 s later, 3 s are left; capped on request.
        b.record(q, burst, 4999.0, 0);
        assert_eq!(b.throttle_ms(q, burst, 0, u64::MAX), 5_000);
        assert_eq!(b.throttle_ms(q, burst, 2_000, u64::MAX), 3_000);
        assert_eq!(b.throttle_ms(q, burst, 2_000, 1_000), 1_000);
        // Idle refills to the burst and no further.
        assert_eq!(b.tokens(q, burst, 60_000), burst);
        // Unrecord (a negative value) puts tokens back, never above the burst.
        b.record(q, burst, 3000.0, 60_000);
        b.record(q, burst, -5000.0, 60_000);
        assert_eq!(b.tokens(q, burst, 60_000), burst);
        // A clock going backwards neither refills nor panics.
        b.record(q, burst, 20_000.0, 60_000);
        assert_eq!(b.throttle_ms(q, burst, 59_000, u64::MAX), 10_000);
    }

    /// Why byte quotas throttle with the bucket: a client sending requests of 1 MiB
    /// against a 4 MiB/s quota, waiting out each throttle. Kafka's formula over the
    /// sampled rate lets it re-burst each time the sample holding an earlier burst
    /// expires; the bucket paces it.
    #[test]
    fn kafka_formula_strays_over_30_s_where_the_bucket_does_not() {
        let (q, chunk) = (4.0 * 1_048_576.0, 1_048_576.0);
        let burst = q * 10.0;
        let cfg = RateConfig::default();
        let mut worst = [0.0f64; 2];
        for (which, worst) in worst.iter_mut().enumerate() {
            let mut rate = SampledRate::new();
            let mut bucket = TokenBucket::full(0);
            let (mut now, mut first, mut sends) = (0u64, None, vec![]);
            while now < 150_000 {
                let throttle = if which == 0 {
                    rate.record(&cfg, chunk, now);
                    rate.throttle_ms(&cfg, q, now, 11_000)
                } else {
                    bucket.record(q, burst, chunk, now);
                    bucket.throttle_ms(q, burst, now, 11_000)
                };
                sends.push(now);
                if throttle > 0 {
                    first.get_or_insert(now);
                }
                now += throttle.max(20);
            }
            // Every 30 s from one window after the first throttle on.
            let first = first.expect("throttled") + 11_000;
            for from in (first..first + 60_000).step_by(1000) {
                let n = sends
                    .iter()
                    .filter(|&&t| (from..from + 30_000).contains(&t));
                let ratio = n.count() as f64 * chunk / 30.0 / q;
                *worst = worst.max((ratio - 1.0).abs());
            }
        }
        assert!(worst[0] > 0.15, "Kafka's formula strayed {:.3}", worst[0]);
        assert!(
            worst[1] <= 2.0 * chunk / (30.0 * q),
            "the bucket strayed {:.3}",
            worst[1]
        );
    }
}
