//! Process resources the broker depends on: the open-file limit.
//!
//! Segment files take descriptors from a bounded cache (`strata_log::files`, sized by
//! `--log-open-files`), whatever the partition count; every connection holds one. The
//! soft limit is raised to the hard one at start; the count of open descriptors is
//! watched, with a warning at 80% of the limit, so running out is seen coming and,
//! when it happens, is reported naming the limit.

use std::sync::atomic::{AtomicU64, Ordering};

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The open-file limit in force (0 until [`raise_nofile_limit`] ran).
static NOFILE_LIMIT: AtomicU64 = AtomicU64::new(0);

/// The limits before and after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub soft_before: Option<u64>,
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (what an unprivileged process may
/// do) and logs both.
pub fn raise_nofile_limit() -> NofileLimit {
    let before = getrlimit(Resource::Nofile);
    if before.current != before.maximum
        && let Err(e) = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: before.maximum,
                maximum: before.maximum,
            },
        )
    {
        tracing::warn!(error = %e, soft = ?before.current, hard = ?before.maximum, "cannot raise the open-file limit");
    }
    let after = getrlimit(Resource::Nofile);
    NOFILE_LIMIT.store(after.current.unwrap_or(u64::MAX), Ordering::Relaxed);
    let limit = NofileLimit {
        soft_before: before.current,
        soft: after.current,
        hard: after.maximum,
    };
    tracing::info!(
        soft_before = ?limit.soft_before,
        soft = ?limit.soft,
        hard = ?limit.hard,
        "open-file limit (RLIMIT_NOFILE)"
    );
    limit
}

/// The soft open-file limit in force, read now.
pub fn nofile_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// Descriptors this process has open (entries of /proc/self/fd).
pub fn open_files() -> Option<u64> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64)
}

/// Whether an IO error is the process running out of descriptors.
pub fn is_out_of_files(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::MFILE.raw_os_error() || code == rustix::io::Errno::NFILE.raw_os_error())
}

/// What to tell an operator when descriptors ran out.
pub fn out_of_files_hint() -> String {
    match nofile_limit() {
        Some(n) => format!(
            "the process reached its open-file limit (RLIMIT_NOFILE {n}): raise it (ulimit -n, or LimitNOFILE= in a systemd unit), or lower --max-connections or --log-open-files"
        ),
        None => "the process ran out of file descriptors".to_string(),
    }
}

/// Checks the open descriptors against the limit: exports both, and warns (at most
/// once per crossing) at 80%.
pub(crate) fn watch_open_files(warned: &mut bool) {
    let (Some(open), Some(limit)) = (open_files(), nofile_limit()) else {
        return;
    };
    metrics::gauge!("strata_open_files").set(open as f64);
    metrics::gauge!("strata_open_files_limit").set(limit as f64);
    let high = open.saturating_mul(10) >= limit.saturating_mul(8);
    if high && !*warned {
        tracing::warn!(
            open,
            limit,
            "{open} of {limit} file descriptors are open (80% of RLIMIT_NOFILE): raise the limit, or lower --max-connections or --log-open-files"
        );
    }
    *warned = high;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let l = raise_nofile_limit();
        assert_eq!(l.soft, l.hard);
        let open = open_files().unwrap();
        assert!(open >= 3, "{open}");
    }

    #[test]
    fn running_out_of_files_is_recognised() {
        let e = std::io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
        assert!(is_out_of_files(&e));
        assert!(!is_out_of_files(&std::io::Error::other("x")));
        assert!(out_of_files_hint().contains("RLIMIT_NOFILE"));
    }
}
