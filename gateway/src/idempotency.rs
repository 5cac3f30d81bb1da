//! `Idempotency-Key` on produce: the first answer to a key is kept (bounded count, with
//! a time to live), a retry with the same key and the same request gets it back byte for
//! byte without appending anything, and a retry that arrives while the first is still
//! running waits for it. A key reused for a different request is refused.
//!
//! Only successful answers (2xx) are kept: a request refused as a whole appended nothing
//! (the gateway validates every record before producing any), so retrying it must run
//! it again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode};
use bytes::Bytes;
use tokio::sync::watch;

/// A kept answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
}

#[derive(Debug)]
enum Entry {
    /// The first request is running; waiters see the sender dropped when it ends.
    Pending {
        fingerprint: u64,
        done: watch::Receiver<()>,
    },
    Done {
        fingerprint: u64,
        stored: Arc<Stored>,
        at: Instant,
    },
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Entry>,
    /// Completed keys, oldest first, for eviction.
    order: VecDeque<(String, Instant)>,
}

/// The kept answers.
#[derive(Debug)]
pub struct Idempotency {
    inner: Mutex<Inner>,
    capacity: usize,
    ttl: Duration,
}

/// What a request with a key must do.
#[derive(Debug)]
pub enum Claim {
    /// Run the request, then `complete` the guard.
    First(Guard),
    /// Answer this again.
    Replay(Arc<Stored>),
    /// The key was used for a different request.
    Conflict,
}

impl Idempotency {
    pub fn new(capacity: usize, ttl: Duration) -> Arc<Idempotency> {
        Arc::new(Idempotency {
            inner: Mutex::default(),
            capacity: capacity.max(1),
            ttl,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves the maps consistent (every mutation is
        // a single insert or remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn expire(&self, inner: &mut Inner, now: Instant) {
        while let Some((key, at)) = inner.order.front().cloned() {
            let over = inner.order.len() > self.capacity;
            if !over && now.duration_since(at) < self.ttl {
                break;
            }
            inner.order.pop_front();
            // Remove only the completed entry this queue slot stands for.
            if matches!(inner.map.get(&key), Some(Entry::Done { at: a, .. }) if *a == at) {
                inner.map.remove(&key);
            }
        }
    }

    pub async fn claim(self: &Arc<Self>, key: &str, fingerprint: u64) -> Claim {
        loop {
            let mut wait = {
                let mut inner = self.lock();
                self.expire(&mut inner, Instant::now());
                match inner.map.get(key) {
                    None => {
                        let (tx, rx) = watch::channel(());
                        inner.map.insert(
                            key.to_string(),
                            Entry::Pending {
                                fingerprint,
                                done: rx,
                            },
                        );
                        return Claim::First(Guard {
                            owner: self.clone(),
                            key: key.to_string(),
                            _done: tx,
                            completed: false,
                        });
                    }
                    Some(Entry::Done {
                        fingerprint: f,
                        stored,
                        ..
                    }) => {
                        return if *f == fingerprint {
                            Claim::Replay(stored.clone())
                        } else {
                            Claim::Conflict
                        };
                    }
                    Some(Entry::Pending { fingerprint: f, .. }) if *f != fingerprint => {
                        return Claim::Conflict;
                    }
                    Some(Entry::Pending { done, .. }) => done.clone(),
                }
            };
            // Returns once the first request's guard is gone (completed or dropped);
            // then look again.
            while wait.changed().await.is_ok() {}
        }
    }

    #[cfg(test)]
    pub fn keys(&self) -> usize {
        self.lock().map.len()
    }
}

/// Held by the request that runs first for a key.
#[derive(Debug)]
pub struct Guard {
    owner: Arc<Idempotency>,
    key: String,
    _done: watch::Sender<()>,
    completed: bool,
}

impl Guard {
    /// Keeps `stored` for the key, or (None) forgets the key so a retry runs again.
    pub fn complete(mut self, stored: Option<Stored>) {
        self.completed = true;
        let mut inner = self.owner.lock();
        match stored {
            Some(s) => {
                let at = Instant::now();
                let fingerprint = match inner.map.get(&self.key) {
                    Some(Entry::Pending { fingerprint, .. }) => *fingerprint,
                    _ => return,
                };
                inner.map.insert(
                    self.key.clone(),
                    Entry::Done {
                        fingerprint,
                        stored: Arc::new(s),
                        at,
                    },
                );
                inner.order.push_back((self.key.clone(), at));
                let owner = self.owner.clone();
                owner.expire(&mut inner, at);
            }
            None => {
                inner.map.remove(&self.key);
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // The request was cancelled (client gone) before it completed: forget the key.
        if !self.completed {
            let mut inner = self.owner.lock();
            if matches!(inner.map.get(&self.key), Some(Entry::Pending { .. })) {
                inner.map.remove(&self.key);
            }
        }
    }
}

/// A request's fingerprint: a retry must match the first request exactly.
pub fn fingerprint(parts: &[&[u8]]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn stored(b: &'static str) -> Stored {
        Stored {
            status: StatusCode::OK,
            content_type: None,
            body: Bytes::from_static(b.as_bytes()),
        }
    }

    #[tokio::test]
    async fn replays_conflicts_and_forgets() {
        let idem = Idempotency::new(2, Duration::from_secs(60));
        let Claim::First(g) = idem.claim("k", 1).await else {
            panic!("first")
        };
        g.complete(Some(stored("a")));
        assert!(matches!(idem.claim("k", 1).await, Claim::Replay(s) if s.body == "a"));
        assert!(matches!(idem.claim("k", 2).await, Claim::Conflict));
        // A failed first attempt is forgotten.
        let Claim::First(g) = idem.claim("f", 1).await else {
            panic!()
        };
        g.complete(None);
        assert!(matches!(idem.claim("f", 1).await, Claim::First(_)));
        // Bounded: the oldest completed key goes.
        for k in ["x", "y", "z"] {
            let Claim::First(g) = idem.claim(k, 1).await else {
                panic!()
            };
            g.complete(Some(stored("b")));
        }
        assert!(idem.keys() <= 3, "{}", idem.keys());
        assert!(matches!(idem.claim("k", 1).await, Claim::First(_)));
    }

    #[tokio::test]
    async fn expires_after_ttl() {
        let idem = Idempotency::new(10, Duration::from_millis(1));
        let Claim::First(g) = idem.claim("k", 1).await else {
            panic!()
        };
        g.complete(Some(stored("a")));
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(matches!(idem.claim("k", 1).await, Claim::First(_)));
    }

    #[tokio::test]
    async fn a_concurrent_duplicate_waits_for_the_first() {
        let idem = Idempotency::new(10, Duration::from_secs(60));
        let Claim::First(g) = idem.claim("k", 1).await else {
            panic!()
        };
        let i2 = idem.clone();
        let waiter = tokio::spawn(async move { i2.claim("k", 1).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        g.complete(Some(stored("first")));
        assert!(matches!(waiter.await.unwrap(), Claim::Replay(s) if s.body == "first"));
        // A dropped (cancelled) first lets a waiter run it.
        let Claim::First(g) = idem.claim("c", 1).await else {
            panic!()
        };
        let i2 = idem.clone();
        let waiter = tokio::spawn(async move { i2.claim("c", 1).await });
        tokio::task::yield_now().await;
        drop(g);
        assert!(matches!(waiter.await.unwrap(), Claim::First(_)));
    }
}
