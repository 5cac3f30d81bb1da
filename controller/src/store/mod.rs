//! The controller's durable state in one directory:
//!
//! ```text
//! {data_dir}/vote            the raft vote (term, voted-for, committed), atomically replaced
//! {data_dir}/committed       the last committed log id (a hint: lets a restarted voter
//!                            re-apply its log at once; losing it loses nothing)
//! {data_dir}/purged          the last purged log id, atomically replaced
//! {data_dir}/log/{first_index:020}.log   append-only log segments of CRC-framed entries
//! {data_dir}/snapshot        the last state-machine snapshot, atomically replaced
//! ```
//!
//! Every record on disk is a frame: `u32 length LE | u32 CRC-32C LE | payload`, the
//! payload JSON. A torn frame at the end of the last segment (a crash mid-append) is cut
//! off at start-up; damage anywhere else is an error (the voter does not start rather
//! than serve a log it cannot trust).

mod file;
pub mod log;
pub mod sm;

use std::path::PathBuf;

pub use log::LogStore;
pub use sm::StateMachineStore;

/// A failure of the controller's local storage.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is damaged: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> StoreError {
        let path = path.into();
        move |source| StoreError::Io { path, source }
    }
}

/// Opens the log store and the state machine of a voter's directory.
pub fn open(
    dir: &std::path::Path,
    segment_bytes: u64,
) -> Result<(LogStore, StateMachineStore), StoreError> {
    Ok((
        LogStore::open(dir, segment_bytes)?,
        StateMachineStore::open(dir)?,
    ))
}
