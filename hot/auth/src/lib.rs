//! Strata's authentication (strata-auth), sans-IO: bytes in, bytes or a verdict out. No sockets,
//! no runtime, no clock (the time is a parameter) and injectable randomness, so the
//! broker's SaslHandshake / SaslAuthenticate handlers and its TLS listener drive it.
//!
//! * [`Mechanism`]: the SASL mechanism names of SaslHandshake.
//! * [`plain`]: SASL PLAIN (RFC 4616), verified against SCRAM credentials so no
//!   clear-text password is ever stored.
//! * [`scram`]: SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): stored
//!   credentials, the server state machine, and a client.
//! * [`oauth`]: OAUTHBEARER (RFC 7628) with unsecured (development) or JWKS/PEM
//!   signed JWT validation in the style of KIP-768.
//! * [`principal`]: client-certificate subjects as Java's `X500Principal.getName()`
//!   prints them, and Kafka's `ssl.principal.mapping.rules` (KIP-371).
//! * [`AuthError`]: one error type whose variants map onto Kafka error codes.
//! * `gs2` (private): the GS2 header and `saslname` encoding SCRAM and OAUTHBEARER share.
//!
//! Users: the broker (`api/sasl.rs`, `api/users.rs`, `security/`), strata-client's SASL
//! login, and the binary's security flags (`src/cli/security.rs`).
//!
//! Every parser bounds its input before looking at it ([`MAX_SASL_MESSAGE_LEN`],
//! [`oauth::MAX_TOKEN_LEN`]) and never panics on arbitrary bytes (property-tested).
//! All cryptography is aws-lc-rs; comparisons of secrets are constant-time.
//!
//! A SCRAM exchange, as the broker drives it:
//!
//! ```
//! use aws_lc_rs::rand::SystemRandom;
//! use strata_auth::{Mechanism, ScramClient, ScramCredential, ScramDecoy, ScramServer};
//!
//! # fn main() -> Result<(), strata_auth::AuthError> {
//! let rng = SystemRandom::new();
//! let stored = ScramCredential::generate(Mechanism::ScramSha256, "pencil", 4096, &rng)?;
//! let decoy = ScramDecoy::generate(&rng)?; // one per broker
//!
//! let mut client = ScramClient::with_random_nonce(Mechanism::ScramSha256, "user", "pencil", &rng)?;
//! let mut server = ScramServer::with_random_nonce(Mechanism::ScramSha256, &rng)?;
//!
//! let first = server.handle_client_first(&client.client_first())?;
//! let credential = (first.username == "user").then_some(&stored); // the store lookup
//! let server_first = server.server_first(credential, &decoy)?;
//! let client_final = client.handle_server_first(&server_first)?;
//! let server_final = server.handle_client_final(&client_final)?;
//! client.handle_server_final(&server_final)?;
//! assert_eq!(server.authenticated_username(), Some("user"));
//! # Ok(())
//! # }
//! ```

mod error;
mod gs2;
mod mechanism;
pub mod oauth;
pub mod plain;
pub mod principal;
pub mod scram;

pub use error::{
    AuthError, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, UNACCEPTABLE_CREDENTIAL,
    UNSUPPORTED_SASL_MECHANISM,
};
pub use mechanism::Mechanism;
pub use oauth::{ClientInitialResponse, JwkSet, TokenValidator, ValidatedToken, ValidatorConfig};
pub use plain::PlainCredentials;
pub use principal::{PrincipalMappingRules, subject_dn};
pub use scram::{ClientFirst, ScramClient, ScramCredential, ScramDecoy, ScramServer};

/// The largest PLAIN or SCRAM message accepted (8 KiB); real ones are a few hundred
/// bytes. Larger input is rejected before it is parsed.
pub const MAX_SASL_MESSAGE_LEN: usize = 8 * 1024;

/// Checks the length bound, then UTF-8 (SCRAM and OAUTHBEARER messages are UTF-8).
pub(crate) fn bounded_utf8(message: &[u8], max: usize) -> Result<&str, AuthError> {
    if message.len() > max {
        return Err(AuthError::TooLarge {
            len: message.len(),
            max,
        });
    }
    std::str::from_utf8(message)
        .map_err(|_| AuthError::Malformed("Invalid SASL message: not valid UTF-8".into()))
}

/// Best-effort erasure of a secret string before its memory is freed.
pub(crate) fn wipe(secret: String) {
    let mut bytes = secret.into_bytes();
    bytes.iter_mut().for_each(|b| *b = 0);
    std::hint::black_box(&bytes);
}
