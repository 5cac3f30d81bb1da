//! The store's one error type, and the one place where object_store's errors are mapped.
//!
//! Callers branch on [`ErrorKind`], never on messages: the kind says what happened and
//! [`ErrorKind::is_retriable`] whether trying again can help. The retry wrapper is the
//! only code that acts on it; everything else either reports the error or, for
//! `NotFound`/`AlreadyExists`/`PreconditionFailed`, treats it as an answer.

use std::fmt;

/// A boxed error kept as the source, so no context is dropped on the way up.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong, at the granularity a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The object (or the multipart upload) does not exist. S3 404 NoSuchKey/NoSuchUpload.
    NotFound,
    /// A `Create` put found an object already there (S3 `If-None-Match: *` answered 412).
    AlreadyExists,
    /// An `Update` put found another version than the one it was conditioned on
    /// (S3 `If-Match` answered 412): someone else wrote in between. This is how a fenced
    /// leader learns it lost the race for the manifest (metadata is only ever written
    /// with conditional puts).
    PreconditionFailed,
    /// The backend cannot do this at all (for example conditional update on the local
    /// filesystem). Retrying cannot help; the deployment has to change.
    Unsupported,
    /// The request is malformed: a bad key, a range past the end of the object, a bad URL.
    InvalidInput,
    /// One attempt ran past its deadline. The operation may or may not have taken effect.
    Timeout,
    /// The caller cancelled (a cancellation token fired). Never retried.
    Cancelled,
    /// The server asked us to slow down: S3 503 SlowDown, HTTP 429.
    Throttled,
    /// A failure that may pass: connection refused or reset, 500/502/504, a body cut short.
    Transient,
    /// Everything else, including 403 and other 4xx: retrying the same request cannot help.
    Permanent,
}

impl ErrorKind {
    /// Whether retrying the same request can succeed. Only throttling, transient faults
    /// and timeouts qualify; the retry wrapper never retries anything else.
    pub fn is_retriable(self) -> bool {
        matches!(self, Self::Throttled | Self::Transient | Self::Timeout)
    }

    /// A stable lower-case name, used as a metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::AlreadyExists => "already_exists",
            Self::PreconditionFailed => "precondition_failed",
            Self::Unsupported => "unsupported",
            Self::InvalidInput => "invalid_input",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Throttled => "throttled",
            Self::Transient => "transient",
            Self::Permanent => "permanent",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Self::NotFound => "not found",
            Self::AlreadyExists => "already exists",
            Self::PreconditionFailed => "precondition failed",
            Self::Unsupported => "unsupported",
            Self::InvalidInput => "invalid input",
            Self::Timeout => "timed out",
            Self::Cancelled => "cancelled",
            Self::Throttled => "throttled",
            Self::Transient => "transient failure",
            Self::Permanent => "failed",
        };
        f.write_str(text)
    }
}

/// The operation that failed, named as in metrics labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Opening a store from its URL and settings.
    Open,
    /// A single-request put.
    Put,
    /// A whole-object GET.
    Get,
    /// A ranged GET.
    GetRange,
    /// HEAD.
    Head,
    /// DELETE.
    Delete,
    /// LIST (recovery and cleanup only).
    List,
    /// Starting a multipart upload (S3 CreateMultipartUpload).
    MultipartStart,
    /// Uploading one part (S3 UploadPart).
    PutPart,
    /// Completing a multipart upload (S3 CompleteMultipartUpload, plus the conditional
    /// copy for `Create` mode).
    MultipartComplete,
    /// Aborting a multipart upload (S3 AbortMultipartUpload).
    MultipartAbort,
    /// Reading the local file that `put_file` uploads.
    ReadFile,
}

impl Op {
    /// All operations, for tests and dashboards.
    pub const ALL: [Op; 12] = [
        Op::Open,
        Op::Put,
        Op::Get,
        Op::GetRange,
        Op::Head,
        Op::Delete,
        Op::List,
        Op::MultipartStart,
        Op::PutPart,
        Op::MultipartComplete,
        Op::MultipartAbort,
        Op::ReadFile,
    ];

    /// A stable lower-case name, used as the `op` metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::Put => "put",
            Op::Get => "get",
            Op::GetRange => "get_range",
            Op::Head => "head",
            Op::Delete => "delete",
            Op::List => "list",
            Op::MultipartStart => "multipart_start",
            Op::PutPart => "put_part",
            Op::MultipartComplete => "multipart_complete",
            Op::MultipartAbort => "multipart_abort",
            Op::ReadFile => "read_file",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An object-store error: what kind, during which operation, on which key, and why.
#[derive(Debug, thiserror::Error)]
#[error("object store {op} {path:?}: {kind}: {message}")]
pub struct StoreError {
    kind: ErrorKind,
    op: Op,
    path: String,
    message: String,
    #[source]
    source: Option<BoxError>,
}

impl StoreError {
    /// An error with a message and no underlying cause.
    pub fn new(
        kind: ErrorKind,
        op: Op,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            op,
            path: path.into(),
            message: message.into(),
            source: None,
        }
    }

    /// An error caused by `source`, whose text becomes the message.
    pub fn with_source(
        kind: ErrorKind,
        op: Op,
        path: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        let source = source.into();
        Self {
            kind,
            op,
            path: path.into(),
            message: source.to_string(),
            source: Some(source),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// During which operation.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The key (relative to the store's root) or, for [`Op::Open`], the setting.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The human-readable detail.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying can help; see [`ErrorKind::is_retriable`].
    pub fn is_retriable(&self) -> bool {
        self.kind.is_retriable()
    }
}

/// The crate's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Maps an object_store error to a [`StoreError`]. This is the only place that looks
/// inside object_store's errors.
///
/// object_store keeps the HTTP status of a failed S3 request in a type it does not
/// export (`client::retry::RetryError`), so the status is read from the error text
/// ("...status code: 503 Service Unavailable...") and the S3 error code from the body
/// it quotes (`<Code>SlowDown</Code>`); transport failures are found by downcasting
/// the source chain to the exported `object_store::client::HttpError`.
pub(crate) fn map_object_store_error(op: Op, path: &str, err: object_store::Error) -> StoreError {
    use object_store::Error as E;
    let kind = match &err {
        E::NotFound { .. } => ErrorKind::NotFound,
        E::AlreadyExists { .. } => ErrorKind::AlreadyExists,
        E::Precondition { .. } | E::NotModified { .. } => ErrorKind::PreconditionFailed,
        E::NotSupported { .. } | E::NotImplemented { .. } => ErrorKind::Unsupported,
        E::InvalidPath { .. } | E::UnknownConfigurationKey { .. } => ErrorKind::InvalidInput,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => ErrorKind::Permanent,
        E::JoinError { .. } => ErrorKind::Permanent,
        _ => classify_generic(&err),
    };
    StoreError::with_source(kind, op, path, err)
}

/// Classifies an error object_store did not type: HTTP status, S3 error code, transport
/// error kind, or I/O error kind, whichever the source chain carries first.
fn classify_generic(err: &(dyn std::error::Error + 'static)) -> ErrorKind {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let mut text_kind = None;
    while let Some(e) = current {
        if let Some(http) = e.downcast_ref::<object_store::client::HttpError>() {
            use object_store::client::HttpErrorKind as H;
            return match http.kind() {
                H::Timeout => ErrorKind::Timeout,
                // Connect: refused or reset before a response; Request/Interrupted: the
                // connection dropped mid-request; Decode: the body was cut short.
                H::Connect | H::Request | H::Interrupted | H::Decode => ErrorKind::Transient,
                _ => ErrorKind::Permanent,
            };
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as I;
            return match io.kind() {
                I::NotFound => ErrorKind::NotFound,
                I::AlreadyExists => ErrorKind::AlreadyExists,
                I::TimedOut => ErrorKind::Timeout,
                I::Interrupted
                | I::ConnectionReset
                | I::ConnectionAborted
                | I::ConnectionRefused
                | I::BrokenPipe
                | I::UnexpectedEof => ErrorKind::Transient,
                I::InvalidInput => ErrorKind::InvalidInput,
                _ => ErrorKind::Permanent,
            };
        }
        if text_kind.is_none() {
            text_kind = classify_text(&e.to_string());
        }
        current = e.source();
    }
    text_kind.unwrap_or(ErrorKind::Permanent)
}

/// Classifies the text of an HTTP-backed error: the status code object_store prints,
/// then the S3 error code in the quoted body, then the range errors of the local and
/// in-memory stores.
pub(crate) fn classify_text(text: &str) -> Option<ErrorKind> {
    // S3 error codes (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html)
    // come first: S3 sends some of them with a 200 status (CompleteMultipartUpload).
    const CODES: [(&str, ErrorKind); 9] = [
        ("<Code>SlowDown</Code>", ErrorKind::Throttled),
        ("<Code>ServiceUnavailable</Code>", ErrorKind::Throttled),
        ("<Code>RequestLimitExceeded</Code>", ErrorKind::Throttled),
        ("<Code>InternalError</Code>", ErrorKind::Transient),
        // 400 RequestTimeout: the server gave up reading our body; the request can be resent.
        ("<Code>RequestTimeout</Code>", ErrorKind::Transient),
        // 409 during concurrent conditional writes to one key: AWS says retry.
        (
            "<Code>ConditionalRequestConflict</Code>",
            ErrorKind::Transient,
        ),
        ("<Code>NoSuchKey</Code>", ErrorKind::NotFound),
        ("<Code>NoSuchUpload</Code>", ErrorKind::NotFound),
        ("<Code>InvalidRange</Code>", ErrorKind::InvalidInput),
    ];
    for (code, kind) in CODES {
        if text.contains(code) {
            return Some(kind);
        }
    }
    if let Some(status) = status_in(text) {
        return Some(match status {
            429 | 503 => ErrorKind::Throttled,
            408 => ErrorKind::Timeout,
            404 => ErrorKind::NotFound,
            412 => ErrorKind::PreconditionFailed,
            416 => ErrorKind::InvalidInput,
            500..=599 => ErrorKind::Transient,
            _ => ErrorKind::Permanent,
        });
    }
    let lower = text.to_ascii_lowercase();
    if lower.contains("range") && (lower.contains("invalid") || lower.contains("out of bounds")) {
        return Some(ErrorKind::InvalidInput);
    }
    None
}

/// The HTTP status in object_store's "Server returned non-2xx status code: 503 ..." text.
fn status_in(text: &str) -> Option<u16> {
    let rest = text.split("status code: ").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.to_string().into(),
        }
    }

    #[test]
    fn s3_statuses_map_to_kinds() {
        let cases = [
            (
                "Server returned non-2xx status code: 503 Service Unavailable: <Error><Code>SlowDown</Code></Error>",
                ErrorKind::Throttled,
            ),
            (
                "Server returned non-2xx status code: 429 Too Many Requests: ",
                ErrorKind::Throttled,
            ),
            (
                "Server returned non-2xx status code: 500 Internal Server Error: ",
                ErrorKind::Transient,
            ),
            (
                "Server returned non-2xx status code: 502 Bad Gateway: ",
                ErrorKind::Transient,
            ),
            (
                "Server returned non-2xx status code: 403 Forbidden: ",
                ErrorKind::Permanent,
            ),
            (
                "Server returned non-2xx status code: 400 Bad Request: <Code>RequestTimeout</Code>",
                ErrorKind::Transient,
            ),
            (
                "Server returned error response: <Error><Code>InternalError</Code></Error>",
                ErrorKind::Transient,
            ),
            (
                "Server returned non-2xx status code: 416 Range Not Satisfiable: ",
                ErrorKind::InvalidInput,
            ),
            ("something else entirely", ErrorKind::Permanent),
        ];
        for (text, kind) in cases {
            let err = map_object_store_error(Op::Get, "k", generic(text));
            assert_eq!(err.kind(), kind, "{text}");
        }
    }

    #[test]
    fn typed_object_store_errors_map_directly() {
        let err = object_store::Error::NotImplemented {
            operation: "update".into(),
            implementer: "LocalFileSystem".into(),
        };
        assert_eq!(
            map_object_store_error(Op::Put, "k", err).kind(),
            ErrorKind::Unsupported
        );
        let err = object_store::Error::Precondition {
            path: "k".into(),
            source: "412".into(),
        };
        assert_eq!(
            map_object_store_error(Op::Put, "k", err).kind(),
            ErrorKind::PreconditionFailed
        );
    }

    #[test]
    fn only_throttled_transient_and_timeout_are_retriable() {
        use ErrorKind::*;
        for kind in [
            NotFound,
            AlreadyExists,
            PreconditionFailed,
            Unsupported,
            InvalidInput,
            Timeout,
            Cancelled,
            Throttled,
            Transient,
            Permanent,
        ] {
            assert_eq!(
                kind.is_retriable(),
                matches!(kind, Throttled | Transient | Timeout)
            );
        }
    }

    #[test]
    fn display_names_op_path_and_kind() {
        let err = StoreError::new(ErrorKind::Timeout, Op::GetRange, "a/b", "after 5s");
        assert_eq!(
            err.to_string(),
            "object store get_range \"a/b\": timed out: after 5s"
        );
    }
}
