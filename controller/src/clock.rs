//! The time the controller-leader duties read (broker liveness, rebalancing delay).
//!
//! Raft's own timers run on tokio's clock (openraft's runtime); only the duties read this
//! one, so tests can move broker liveness forward without waiting and without pausing
//! tokio's clock under real sockets and file IO (a paused clock auto-advances whenever
//! the runtime is idle, which fires raft election timers while a fsync is in flight).

use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A monotonic clock.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> Instant;
}

/// Tokio's clock (the real one, or the paused one in `start_paused` tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Instant>,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            now: Mutex::new(Instant::now()),
        }
    }
}

impl ManualClock {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}
