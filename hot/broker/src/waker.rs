//! Long-polling fetches wait with one waker each, however many partitions they read.
//!
//! A fetch with min_bytes waits until a partition it reads moves (the high-water mark
//! for a consumer, the log end for a follower). A follower of 5,000 partitions used to
//! take a watch receiver of each and wait on all 5,000 futures at once (5,000
//! allocations and registrations per wait, every one polled on each wakeup). Now it makes
//! one [`FetchWaker`] and registers a weak reference to it with each partition's
//! [`Mark`]; a mark that moves wakes the wakers registered with it. A registration lasts
//! as long as its fetch (dead ones are dropped when the mark next moves, or when the
//! list doubles), so a fetch registers once however often it wakes.

use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{Notify, watch};

/// One long-polling fetch's wakeup.
#[derive(Debug, Default)]
pub struct FetchWaker {
    notify: Notify,
}

impl FetchWaker {
    pub fn new() -> Arc<FetchWaker> {
        Arc::new(FetchWaker::default())
    }

    /// Completes once a mark this waker is registered with moved (at once if one moved
    /// since the last wait).
    pub async fn woken(&self) {
        self.notify.notified().await
    }
}

/// An offset (a partition's high-water mark or log end) that requests wait on: a watch
/// for those that wait on this one partition (an acks=all produce), and the wakers of
/// fetches.
#[derive(Debug)]
pub struct Mark {
    tx: watch::Sender<i64>,
    wakers: Mutex<Vec<Weak<FetchWaker>>>,
}

impl Mark {
    pub fn new(v: i64) -> Mark {
        Mark {
            tx: watch::channel(v).0,
            wakers: Mutex::new(Vec::new()),
        }
    }

    fn wakers(&self) -> std::sync::MutexGuard<'_, Vec<Weak<FetchWaker>>> {
        self.wakers.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self) -> i64 {
        *self.tx.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.tx.subscribe()
    }

    /// Sets the mark; wakes the fetches waiting on it if it moved.
    pub fn set(&self, v: i64) {
        if self.tx.send_replace(v) != v {
            self.wake();
        }
    }

    /// Raises the mark to `v` (never lowers it); wakes the fetches waiting on it if it
    /// moved.
    pub fn raise(&self, v: i64) {
        let moved = self.tx.send_if_modified(|cur| {
            let moved = v > *cur;
            if moved {
                *cur = v;
            }
            moved
        });
        if moved {
            self.wake();
        }
    }

    /// Registers a fetch's waker (before the fetch reads what the mark guards, so that
    /// no move is missed).
    pub fn register(&self, w: &Arc<FetchWaker>) {
        let mut wakers = self.wakers();
        // Fetches that finished leave dead entries; an idle mark drops them each time
        // its list doubles (amortized constant per registration).
        if wakers.len() >= 8 && wakers.len().is_power_of_two() {
            wakers.retain(|w| w.strong_count() > 0);
        }
        wakers.push(Arc::downgrade(w));
    }

    fn wake(&self) {
        self.wakers().retain(|w| match w.upgrade() {
            Some(w) => {
                w.notify.notify_one();
                true
            }
            None => false,
        });
    }

    /// Registered wakers, dead ones included (tests).
    #[cfg(test)]
    fn registered(&self) -> usize {
        self.wakers().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_move_wakes_every_registered_fetch_once_registered() {
        let marks: Vec<Mark> = (0..3).map(Mark::new).collect();
        let w = FetchWaker::new();
        for m in &marks {
            m.register(&w);
        }
        // Nothing moved: no wakeup.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), w.woken())
                .await
                .is_err()
        );
        // Lowering-free raise that does not move is no wakeup either.
        marks[2].raise(1);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), w.woken())
                .await
                .is_err()
        );
        // A move before the wait is not lost.
        marks[1].raise(5);
        assert_eq!(marks[1].get(), 5);
        tokio::time::timeout(Duration::from_secs(5), w.woken())
            .await
            .unwrap();
        // The registration lasts: another move wakes it again.
        let waiter = {
            let w = w.clone();
            tokio::spawn(async move { w.woken().await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        marks[0].set(9);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
    }

    #[test]
    fn finished_fetches_do_not_pile_up_on_an_idle_mark() {
        let m = Mark::new(0);
        let live = FetchWaker::new();
        m.register(&live);
        for _ in 0..10_000 {
            let w = FetchWaker::new();
            m.register(&w);
        }
        assert!(m.registered() <= 16, "{} registered", m.registered());
        m.set(1);
        assert_eq!(
            m.registered(),
            1,
            "a move drops the dead and keeps the live"
        );
    }
}
