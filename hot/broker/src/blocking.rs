//! Work that may wait on the device for milliseconds (an fsync, a segment roll), run
//! where it cannot hold up an async worker's other tasks.
//!
//! The broker serves connections on a few async workers (two on a 2-core machine). An
//! append is a copy and one write, and runs inline; but one that fsyncs (a topic with
//! `flush.messages=1`, say) or rolls a segment waits on the device, and every task
//! queued behind it on that worker (other connections, other partitions) waited too.
//! [`may_wait`] runs such work in `tokio::task::block_in_place`: the runtime hands the
//! worker's queue to another thread first, so only the caller waits. Local reads that
//! may go to the device (direct mode below the tail buffer; a sealed segment through
//! the page cache, which it may have left) run the same way (`Log::read_may_wait`).

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `f`, which may block for milliseconds: in `block_in_place` on a worker of a
/// multi-thread runtime, inline anywhere else (a current-thread runtime, where
/// `block_in_place` is not allowed, or a plain thread). Counted in
/// `strata_blocking_calls_total{what}`.
pub fn may_wait<T>(what: &'static str, f: impl FnOnce() -> T) -> T {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            metrics::counter!("strata_blocking_calls_total", "what" => what).increment(1);
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_inline_outside_a_runtime() {
        assert_eq!(may_wait("test", || 7), 7);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn runs_inline_on_a_current_thread_runtime() {
        assert_eq!(may_wait("test", || 8), 8);
    }

    /// While one task blocks in `may_wait`, another task spawned on the same worker
    /// still runs (the runtime moved the worker's queue to another thread).
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn other_tasks_run_while_one_waits() {
        let (tx, rx) = std::sync::mpsc::channel();
        let other = tokio::spawn(async move {
            tx.send(()).unwrap();
        });
        // With one worker, `other` can only run if this task gives the worker up.
        let got = may_wait("test", || {
            rx.recv_timeout(std::time::Duration::from_secs(10))
        });
        assert!(got.is_ok(), "the other task ran while this one blocked");
        other.await.unwrap();
    }
}
