//! The one error type of the crate.
//!
//! Every variant maps onto a Kafka error code ([`AuthError::kafka_error_code`]) so the
//! broker's SaslHandshake / SaslAuthenticate handlers need no per-mechanism logic.
//! Display texts never contain passwords, keys, proofs or tokens: they may be logged,
//! and the SASL-level ones may be sent to the client as the `error_message` of a
//! SaslAuthenticate response.

use crate::Mechanism;

/// Kafka's `UNSUPPORTED_SASL_MECHANISM` error code.
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// Kafka's `ILLEGAL_SASL_STATE` error code.
pub const ILLEGAL_SASL_STATE: i16 = 34;
/// Kafka's `SASL_AUTHENTICATION_FAILED` error code.
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// Kafka's `UNACCEPTABLE_CREDENTIAL` error code (AlterUserScramCredentials, KIP-554).
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;

/// Why an authentication step (or the configuration behind it) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The client asked for a mechanism this crate does not implement (or the broker
    /// has not enabled). Kafka: `UNSUPPORTED_SASL_MECHANISM`.
    #[error(
        "Unsupported SASL mechanism {0}; valid mechanisms are PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"
    )]
    UnsupportedMechanism(String),

    /// A SASL message that does not follow its RFC grammar (or Kafka's extra rules,
    /// such as "authzid must equal the username"). Kafka: `SASL_AUTHENTICATION_FAILED`.
    #[error("{0}")]
    Malformed(String),

    /// A message larger than the bound we accept; rejected before any parsing or
    /// allocation proportional to it. Kafka: `SASL_AUTHENTICATION_FAILED`.
    #[error("SASL message of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The size received.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// Wrong password, unknown user, or a bad SCRAM proof: deliberately one variant
    /// with Kafka's exact text so a client cannot tell which. Kafka:
    /// `SASL_AUTHENTICATION_FAILED`.
    #[error(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    )]
    BadCredentials {
        /// The mechanism in use (part of Kafka's message).
        mechanism: Mechanism,
    },

    /// A state machine was driven out of order (a message after completion or
    /// failure, or before the previous step). Kafka: `ILLEGAL_SASL_STATE`.
    #[error("Unexpected SASL message in state {0}")]
    IllegalState(&'static str),

    /// A feature the client asked for that we do not offer: channel binding, SCRAM
    /// delegation-token authentication (`tokenauth=true`), mandatory extensions.
    /// Kafka: `SASL_AUTHENTICATION_FAILED`.
    #[error("{0}")]
    Unsupported(String),

    /// A SCRAM credential that cannot be created or used (iterations outside
    /// [4096, 16384], empty salt, key of the wrong length, mechanism mismatch).
    /// Kafka (AlterUserScramCredentials): `UNACCEPTABLE_CREDENTIAL`.
    #[error("Invalid SCRAM credential: {0}")]
    InvalidCredential(String),

    /// The OAUTHBEARER token's `exp` (plus the allowed clock skew) has passed.
    /// Kafka: `SASL_AUTHENTICATION_FAILED`.
    #[error(
        "The token expired at {expired_at_ms} ms, which is before the current time {now_ms} ms"
    )]
    ExpiredToken {
        /// The token's `exp` claim in milliseconds since the epoch.
        expired_at_ms: i64,
        /// The time the validation ran at.
        now_ms: i64,
    },

    /// The OAUTHBEARER token is malformed, unsigned where a signature is required,
    /// badly signed, not yet valid, or has the wrong issuer/audience/principal.
    /// Kafka: `SASL_AUTHENTICATION_FAILED`.
    #[error("Invalid token: {0}")]
    InvalidToken(String),

    /// The token is valid but lacks a scope the validator requires (RFC 7628 §3.2.2
    /// `insufficient_scope`). Kafka: `SASL_AUTHENTICATION_FAILED`.
    #[error("Token lacks required scope: {0}")]
    InsufficientScope(String),

    /// A JWKS document or PEM key that cannot be used (configuration error).
    #[error("Invalid token verification key: {0}")]
    InvalidKey(String),

    /// A client certificate whose subject cannot be read.
    #[error("Invalid client certificate: {0}")]
    InvalidCertificate(String),

    /// An `ssl.principal.mapping.rules` entry that does not parse (configuration
    /// error); the text names the rule.
    #[error("Invalid principal mapping rule: {0}")]
    InvalidRule(String),

    /// No `ssl.principal.mapping.rules` rule matched the DN (Kafka's
    /// `NoMatchingRule`, which fails the connection's authentication).
    #[error("No rules apply to {0}")]
    NoMatchingRule(String),

    /// The SCRAM server (seen from our client) failed authentication or proved it
    /// does not know the credential: `e=` server-final or a wrong `v=` signature.
    #[error("Server authentication failed: {0}")]
    ServerAuthentication(String),

    /// The random number generator failed.
    #[error("Random number generation failed")]
    Random,
}

impl AuthError {
    /// The Kafka error code to put in a SaslHandshake/SaslAuthenticate (or
    /// AlterUserScramCredentials) response for this error.
    ///
    /// Configuration errors ([`AuthError::InvalidKey`], [`AuthError::InvalidRule`]) are
    /// not expected on the wire; they map to `SASL_AUTHENTICATION_FAILED` so that a
    /// misconfiguration can never authenticate anyone.
    #[must_use]
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            AuthError::UnsupportedMechanism(_) => UNSUPPORTED_SASL_MECHANISM,
            AuthError::IllegalState(_) => ILLEGAL_SASL_STATE,
            AuthError::InvalidCredential(_) => UNACCEPTABLE_CREDENTIAL,
            _ => SASL_AUTHENTICATION_FAILED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_credentials_text_is_kafkas() {
        let e = AuthError::BadCredentials {
            mechanism: Mechanism::ScramSha512,
        };
        assert_eq!(
            e.to_string(),
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        );
        assert_eq!(e.kafka_error_code(), SASL_AUTHENTICATION_FAILED);
    }

    #[test]
    fn codes() {
        assert_eq!(
            AuthError::UnsupportedMechanism("GSSAPI".into()).kafka_error_code(),
            33
        );
        assert_eq!(AuthError::IllegalState("complete").kafka_error_code(), 34);
        assert_eq!(
            AuthError::InvalidCredential("x".into()).kafka_error_code(),
            93
        );
        assert_eq!(AuthError::InvalidToken("x".into()).kafka_error_code(), 58);
    }
}
