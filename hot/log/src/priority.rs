//! Background threads out of the way of request handlers: the broker's log cleaner
//! threads and strata-tier's Parquet conversion thread call [`lower_this_thread`] when
//! they start (it lives here, below both).

/// Puts the calling thread in the idle CPU scheduling class (SCHED_IDLE: the kernel runs
/// it only when no other thread wants the CPU, and a waking request handler preempts it
/// at once; a low nice value would still make handlers wait out its time slice) and in
/// the idle IO class (its reads and writes do not compete with producers' appends for
/// the disk; the scheduler ages idle requests, so the work still progresses on a busy
/// disk). `what` names the thread in the warning when either is refused.
///
/// Figures: `benches/parquet.sh`, a producer's throughput 0.80x of alone while
/// converting at the default IO class, 0.87-1.04x with the idle one; `benches/compaction.sh`,
/// a producer's p99 while the cleaner runs (docs/benchmarks.md).
pub fn lower_this_thread(what: &str) {
    use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
    if let Err(e) = thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
    ) {
        tracing::warn!(thread = what, error = ?e, "cannot lower the thread's CPU priority");
    }
    // Pid 0 is the calling thread.
    if let Err(e) = ioprio::set_priority(
        ioprio::Target::Process(ioprio::Pid::from_raw(0)),
        ioprio::Priority::new(ioprio::Class::Idle),
    ) {
        tracing::warn!(thread = what, error = %e, "cannot lower the thread's IO priority");
    }
}
