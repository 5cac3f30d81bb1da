//! Errors in Confluent REST Proxy's shape, `{"error_code": <int>, "message": "..."}`, and
//! the one place that maps Kafka error codes to HTTP statuses.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::service::{ServiceError, codes};

/// Confluent's error body. `error_code` is the HTTP status followed by two digits that
/// say which error (40401 unknown topic, 40403 unknown consumer instance, ...), or the
/// bare HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error_code: u32,
    pub message: String,
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

// Confluent's codes where it has one; ours continue its numbering.
pub const TOPIC_NOT_FOUND: u32 = 40401;
pub const PARTITION_NOT_FOUND: u32 = 40402;
pub const CONSUMER_INSTANCE_NOT_FOUND: u32 = 40403;
pub const CLUSTER_NOT_FOUND: u32 = 40404;
pub const STREAM_SESSION_NOT_FOUND: u32 = 40405;
/// A consumer group the cluster does not have (v3 admin).
pub const GROUP_NOT_FOUND: u32 = 40406;
/// A config a topic does not have (v3 admin).
pub const CONFIG_NOT_FOUND: u32 = 40407;
/// Confluent's KAFKA_BAD_REQUEST_ERROR_CODE: the broker refused an admin request as
/// invalid (a topic that exists, a bad partition count, replication factor or config).
pub const BAD_REQUEST: u32 = 40002;
pub const CONSUMER_FORMAT_MISMATCH: u32 = 40601;
/// The member does not own the partition (not assigned yet, or moved by a rebalance),
/// or its group moved to a new generation.
pub const NOT_OWNED: u32 = 40901;
pub const CONSUMER_ALREADY_EXISTS: u32 = 40902;
/// Confluent's ILLEGAL_STATE_ERROR_CODE: the consumer cannot do it in its state (a
/// partition without a committed offset under auto.offset.reset none, which its Kafka
/// client stopped reading).
pub const ILLEGAL_STATE: u32 = 40903;
pub const IDEMPOTENCY_KEY_REUSED: u32 = 42206;
pub const BODY_TOO_LARGE: u32 = 41301;
pub const RECORD_TOO_LARGE: u32 = 41302;
pub const UNSUPPORTED_MEDIA_TYPE: u32 = 41501;
pub const OFFSET_OUT_OF_RANGE: u32 = 41601;
pub const INVALID_BODY: u32 = 42201;
pub const INVALID_FIELD: u32 = 42202;
pub const NOT_JSON_RECORD: u32 = 42203;
pub const INVALID_CONSUMER_CONFIG: u32 = 42204;
pub const NOT_ASSIGNED: u32 = 42205;
pub const THROTTLED: u32 = 42901;
pub const TOO_MANY_CONSUMERS: u32 = 42902;
pub const KAFKA_ERROR: u32 = 50002;
pub const NOT_ENOUGH_REPLICAS: u32 = 50301;
pub const KAFKA_UNAVAILABLE: u32 = 50302;
pub const UNAUTHORIZED: u32 = 40101;
/// Confluent's KAFKA_AUTHORIZATION_ERROR_CODE: the principal may not (403).
pub const NOT_AUTHORIZED: u32 = 40301;

impl ApiError {
    pub fn new(status: StatusCode, error_code: u32, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                error_code,
                message: message.into(),
            },
        }
    }

    pub fn invalid_body(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, INVALID_BODY, message)
    }

    pub fn invalid_field(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, INVALID_FIELD, message)
    }

    pub fn topic_not_found(topic: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            TOPIC_NOT_FOUND,
            format!("Topic '{topic}' not found."),
        )
    }

    pub fn partition_not_found(topic: &str, partition: i32) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            PARTITION_NOT_FOUND,
            format!("Partition {partition} of topic '{topic}' not found."),
        )
    }

    pub fn instance_not_found() -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            CONSUMER_INSTANCE_NOT_FOUND,
            "Consumer instance not found.",
        )
    }

    pub fn body_too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            BODY_TOO_LARGE,
            format!("Request body is larger than {limit} bytes."),
        )
    }

    pub fn unsupported_media_type(got: Option<&str>, want: &[&str]) -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Type {} is not supported here; use {}.",
                got.map_or_else(|| "(none)".to_string(), |g| format!("'{g}'")),
                want.join(" or ")
            ),
        )
    }

    /// The status and code of a cluster error.
    pub fn from_service(e: &ServiceError) -> ApiError {
        use codes::*;
        let (status, code) = match e.code {
            UNKNOWN_TOPIC_OR_PARTITION | LOCAL_UNKNOWN_TOPIC => {
                (StatusCode::NOT_FOUND, TOPIC_NOT_FOUND)
            }
            LOCAL_UNKNOWN_PARTITION => (StatusCode::NOT_FOUND, PARTITION_NOT_FOUND),
            MESSAGE_TOO_LARGE | RECORD_LIST_TOO_LARGE | LOCAL_MSG_SIZE_TOO_LARGE => {
                (StatusCode::PAYLOAD_TOO_LARGE, RECORD_TOO_LARGE)
            }
            THROTTLING_QUOTA_EXCEEDED | LOCAL_QUEUE_FULL | GATEWAY_QUEUE_FULL => {
                (StatusCode::TOO_MANY_REQUESTS, THROTTLED)
            }
            codes::NOT_ENOUGH_REPLICAS | NOT_ENOUGH_REPLICAS_AFTER_APPEND | KAFKA_STORAGE_ERROR => {
                (StatusCode::SERVICE_UNAVAILABLE, self::NOT_ENOUGH_REPLICAS)
            }
            LEADER_NOT_AVAILABLE
            | NOT_LEADER_OR_FOLLOWER
            | REQUEST_TIMED_OUT
            | NETWORK_EXCEPTION
            | COORDINATOR_NOT_AVAILABLE
            | NOT_COORDINATOR
            | REBALANCE_IN_PROGRESS
            | LOCAL_MSG_TIMED_OUT
            | LOCAL_TRANSPORT
            | LOCAL_ALL_BROKERS_DOWN
            | LOCAL_TIMED_OUT => (StatusCode::SERVICE_UNAVAILABLE, KAFKA_UNAVAILABLE),
            CORRUPT_MESSAGE
            | INVALID_RECORD
            | INVALID_TIMESTAMP
            | INVALID_TOPIC_EXCEPTION
            | LOCAL_INVALID_ARG => (StatusCode::UNPROCESSABLE_ENTITY, INVALID_FIELD),
            codes::OFFSET_OUT_OF_RANGE => {
                (StatusCode::RANGE_NOT_SATISFIABLE, self::OFFSET_OUT_OF_RANGE)
            }
            LOCAL_STATE | ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID | codes::NOT_ASSIGNED => {
                (StatusCode::CONFLICT, NOT_OWNED)
            }
            LOCAL_AUTO_OFFSET_RESET => (StatusCode::CONFLICT, ILLEGAL_STATE),
            TOPIC_ALREADY_EXISTS
            | INVALID_PARTITIONS
            | INVALID_REPLICATION_FACTOR
            | INVALID_REPLICA_ASSIGNMENT
            | INVALID_CONFIG
            | INVALID_REQUEST
            | POLICY_VIOLATION => (StatusCode::BAD_REQUEST, self::BAD_REQUEST),
            TOPIC_AUTHORIZATION_FAILED | CLUSTER_AUTHORIZATION_FAILED => {
                (StatusCode::FORBIDDEN, NOT_AUTHORIZED)
            }
            _ => (StatusCode::INTERNAL_SERVER_ERROR, KAFKA_ERROR),
        };
        ApiError::new(status, code, e.message.clone())
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> ApiError {
        ApiError::from_service(&e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"strata\", Basic realm=\"strata\""),
            );
        }
        r
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
