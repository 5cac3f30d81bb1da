//! Client quotas (KIP-13, KIP-55, KIP-124, KIP-219) over strata-quota.
//!
//! The quotas are cluster metadata (AlterClientQuotas through the controller); each
//! broker measures its own clients, as Kafka does, with Kafka's sensor keys per user and
//! client id. A produce request's bytes and a fetch response's bytes are recorded
//! against `producer_byte_rate` / `consumer_byte_rate`; the time a request's handling
//! holds the connection's task against `request_percentage`. Over its quota, the
//! response carries `throttle_time_ms` (the time the client's token bucket needs to pay
//! back its debt at the quota) and the connection is muted that long: its next request
//! is not read until the time has passed (KIP-219: the client also waits on its own).
//!
//! Replica fetches and this broker's own requests are exempt (Kafka throttles
//! replication with separate quotas).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use strata_quota::{QuotaKey, QuotaManager, QuotaManagerConfig};

/// The broker's quota state: the manager and the metadata version its configs are from.
#[derive(Debug)]
pub(crate) struct Quotas {
    manager: Mutex<QuotaManager>,
    /// Metadata version the manager's configs were taken from (u64::MAX: never).
    synced: AtomicU64,
    epoch: Instant,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            manager: Mutex::new(
                QuotaManager::new(QuotaManagerConfig::default())
                    .expect("the default quota window (11 samples of 1 s) is valid"),
            ),
            synced: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
        }
    }
}

/// A connection's mute deadline (KIP-219), milliseconds on the quotas' clock.
#[derive(Debug, Default)]
pub struct Mute(AtomicU64);

impl Mute {
    /// How long to wait, at `now` on the quotas' clock, before reading the next request.
    pub(crate) fn remaining(&self, now: u64) -> std::time::Duration {
        let until = self.0.load(Ordering::Relaxed);
        std::time::Duration::from_millis(until.saturating_sub(now))
    }

    fn extend(&self, until: u64) {
        self.0.fetch_max(until, Ordering::Relaxed);
    }
}

impl Quotas {
    pub(crate) fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Records `value` for `principal` and `client_id`; the throttle time, and the
    /// connection (`mute`) muted that long. Zero when no quota of `key` exists.
    pub(crate) fn record(
        &self,
        md: &strata_controller::ClusterMetadata,
        principal: &str,
        client_id: Option<&str>,
        mute: &Mute,
        key: QuotaKey,
        value: f64,
    ) -> i32 {
        if !md.security.quotas.has_quotas(key) {
            return 0;
        }
        let now = self.now_ms();
        let user = principal.strip_prefix("User:").unwrap_or(principal);
        let client_id = client_id.unwrap_or("");
        let throttle = {
            let mut m = self.manager.lock().unwrap_or_else(|e| e.into_inner());
            if self.synced.load(Ordering::Relaxed) != md.version {
                m.set_quotas(md.security.quotas.clone());
                self.synced.store(md.version, Ordering::Relaxed);
            }
            m.record(key, user, client_id, value, now)
        };
        if throttle > 0 {
            mute.extend(now + throttle);
            metrics::counter!("strata_quota_throttles_total", "quota" => key.as_str()).increment(1);
            metrics::histogram!("strata_quota_throttle_seconds", "quota" => key.as_str())
                .record(throttle as f64 / 1000.0);
        }
        i32::try_from(throttle).unwrap_or(i32::MAX)
    }

    /// Drops sensors idle for an hour (housekeeping).
    pub(crate) fn expire(&self) {
        let now = self.now_ms();
        self.manager
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .expire(now);
    }
}
