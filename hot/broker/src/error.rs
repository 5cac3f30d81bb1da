//! The broker's error type and its mapping to Kafka error codes.

use strata_proto::ErrorCode;

/// A request-level failure with the Kafka error a client gets for it.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

impl From<strata_log::LogError> for ApiError {
    fn from(e: strata_log::LogError) -> Self {
        ApiError {
            code: e.error_code(),
            message: e.to_string(),
        }
    }
}
