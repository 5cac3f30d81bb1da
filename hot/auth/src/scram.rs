//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's
//! `ScramSaslServer`, `ScramSaslClient` and `ScramFormatter` implement them.
//!
//! Server flow (one [`ScramServer`] per connection):
//!
//! 1. [`ScramServer::handle_client_first`] parses `n,,n=<user>,r=<cnonce>` and
//!    returns the user name; the broker looks the user's [`ScramCredential`] up.
//! 2. [`ScramServer::server_first`] answers `r=<cnonce><snonce>,s=<salt>,i=<n>`. For an
//!    unknown user it answers with a decoy salt and iteration count from a
//!    [`ScramDecoy`], so the response looks the same (RFC 5802 §9 suggests this;
//!    Kafka instead fails here), and the exchange fails only at step 3.
//! 3. [`ScramServer::handle_client_final`] checks `c=`, `r=` and the proof, and
//!    answers the server-final `v=<signature>`.
//!
//! Deviations from RFC 5802, all matching Kafka: passwords are not SASLprep'ed
//! (Kafka's `ScramFormatter.normalize` is plain UTF-8), channel binding is never
//! offered (gs2 flags `y` and `p=` are rejected), and the `tokenauth` extension
//! (delegation tokens) is rejected because Strata has no delegation tokens.

use std::fmt;
use std::num::NonZeroU32;

use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::{constant_time, digest, hmac, pbkdf2};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

use crate::{AuthError, Mechanism};

/// Kafka's minimum iteration count for both SCRAM mechanisms
/// (`ScramMechanism.minIterations`).
pub const MIN_ITERATIONS: u32 = 4096;
/// Kafka's maximum iteration count accepted by AlterUserScramCredentials (KIP-554).
pub const MAX_ITERATIONS: u32 = 16384;
/// Length of the salts [`ScramCredential::generate`] makes (Kafka's are ~26 bytes;
/// RFC 5802 sets no length).
pub const SALT_LEN: usize = 32;
/// Longest salt a stored credential may have; keeps server-first bounded.
const MAX_SALT_LEN: usize = 1024;
/// Random bytes in a generated nonce (encoded as 32 base64url characters).
const NONCE_BYTES: usize = 24;

/// The hash behind a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    fn of(mechanism: Mechanism) -> Option<Hash> {
        match mechanism {
            Mechanism::ScramSha256 => Some(Hash::Sha256),
            Mechanism::ScramSha512 => Some(Hash::Sha512),
            Mechanism::Plain | Mechanism::OAuthBearer => None,
        }
    }

    fn len(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha512 => 64,
        }
    }

    /// `H(data)` of RFC 5802 §2.2.
    fn h(self, data: &[u8]) -> Vec<u8> {
        let alg = match self {
            Hash::Sha256 => &digest::SHA256,
            Hash::Sha512 => &digest::SHA512,
        };
        digest::digest(alg, data).as_ref().to_vec()
    }

    /// `HMAC(key, data)` of RFC 5802 §2.2.
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        let alg = match self {
            Hash::Sha256 => hmac::HMAC_SHA256,
            Hash::Sha512 => hmac::HMAC_SHA512,
        };
        hmac::sign(&hmac::Key::new(alg, key), data)
            .as_ref()
            .to_vec()
    }

    /// `SaltedPassword := Hi(Normalize(password), salt, i)` (RFC 5802 §3), where Hi is
    /// PBKDF2 with HMAC and Normalize is Kafka's (UTF-8 bytes, no SASLprep).
    fn salted_password(self, password: &str, salt: &[u8], iterations: NonZeroU32) -> Vec<u8> {
        let alg = match self {
            Hash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Hash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        };
        let mut out = vec![0; self.len()];
        pbkdf2::derive(alg, iterations, salt, password.as_bytes(), &mut out);
        out
    }

    /// ClientKey, StoredKey and ServerKey of RFC 5802 §3.
    fn keys(self, password: &str, salt: &[u8], iterations: NonZeroU32) -> Keys {
        let salted = self.salted_password(password, salt, iterations);
        self.keys_from_salted(&salted)
    }

    /// The keys from SaltedPassword itself (what AlterUserScramCredentials carries).
    fn keys_from_salted(self, salted: &[u8]) -> Keys {
        let client_key = self.hmac(salted, b"Client Key");
        Keys {
            stored_key: self.h(&client_key),
            server_key: self.hmac(salted, b"Server Key"),
            client_key,
        }
    }
}

struct Keys {
    client_key: Vec<u8>,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

fn scram_hash(mechanism: Mechanism) -> Result<Hash, AuthError> {
    Hash::of(mechanism).ok_or_else(|| {
        AuthError::InvalidCredential(format!("{mechanism} is not a SCRAM mechanism"))
    })
}

fn check_iterations(iterations: u32) -> Result<NonZeroU32, AuthError> {
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        return Err(AuthError::InvalidCredential(format!(
            "iterations {iterations} must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
        )));
    }
    NonZeroU32::new(iterations)
        .ok_or_else(|| AuthError::InvalidCredential("iterations must not be zero".into()))
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// A user's stored SCRAM credential (RFC 5802 §3; Kafka's `ScramCredential` /
/// `UserScramCredentialRecord`). Holds no password: only the salt, the iteration
/// count, StoredKey and ServerKey. `Debug` does not show the keys.
///
/// JSON form: `{"mechanism":"SCRAM-SHA-256","salt":"<base64>","iterations":4096,
/// "stored_key":"<base64>","server_key":"<base64>"}`; deserializing validates it as
/// [`ScramCredential::from_parts`] does.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "CredentialJson", into = "CredentialJson")]
pub struct ScramCredential {
    mechanism: Mechanism,
    salt: Vec<u8>,
    iterations: u32,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

impl ScramCredential {
    /// Derives the credential for `password` with the given salt (RFC 5802 §3).
    ///
    /// # Errors
    /// [`AuthError::InvalidCredential`] if `mechanism` is not SCRAM, the salt is empty
    /// or over 1 KiB, or `iterations` is outside [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`]
    /// (the check AlterUserScramCredentials reports as `UNACCEPTABLE_CREDENTIAL`).
    pub fn new(
        mechanism: Mechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, AuthError> {
        let hash = scram_hash(mechanism)?;
        check_salt(salt)?;
        let keys = hash.keys(password, salt, check_iterations(iterations)?);
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: keys.stored_key,
            server_key: keys.server_key,
        })
    }

    /// Like [`ScramCredential::new`] with a fresh random salt of [`SALT_LEN`] bytes.
    /// Pass `&aws_lc_rs::rand::SystemRandom::new()` outside tests.
    ///
    /// # Errors
    /// As [`ScramCredential::new`], or [`AuthError::Random`].
    pub fn generate(
        mechanism: Mechanism,
        password: &str,
        iterations: u32,
        rng: &dyn SecureRandom,
    ) -> Result<Self, AuthError> {
        let mut salt = [0u8; SALT_LEN];
        rng.fill(&mut salt).map_err(|_| AuthError::Random)?;
        Self::new(mechanism, password, &salt, iterations)
    }

    /// The credential from a salted password (Hi(password, salt, i), RFC 5802 §3), as
    /// Kafka's AlterUserScramCredentials sends it (KIP-554): the password itself never
    /// reaches the broker.
    ///
    /// # Errors
    /// [`AuthError::InvalidCredential`] as [`ScramCredential::new`], or a salted
    /// password whose length is not the hash's.
    pub fn from_salted_password(
        mechanism: Mechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, AuthError> {
        let hash = scram_hash(mechanism)?;
        check_salt(salt)?;
        check_iterations(iterations)?;
        if salted_password.len() != hash.len() {
            return Err(AuthError::InvalidCredential(format!(
                "a {mechanism} salted password is {} bytes, not {}",
                hash.len(),
                salted_password.len()
            )));
        }
        let keys = hash.keys_from_salted(salted_password);
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: keys.stored_key,
            server_key: keys.server_key,
        })
    }

    /// Rebuilds a stored credential (e.g. from a metadata record), checking it.
    ///
    /// # Errors
    /// [`AuthError::InvalidCredential`] for a non-SCRAM mechanism, a bad salt or
    /// iteration count, or keys whose length is not the hash's.
    pub fn from_parts(
        mechanism: Mechanism,
        salt: Vec<u8>,
        iterations: u32,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
    ) -> Result<Self, AuthError> {
        let hash = scram_hash(mechanism)?;
        check_salt(&salt)?;
        check_iterations(iterations)?;
        if stored_key.len() != hash.len() || server_key.len() != hash.len() {
            return Err(AuthError::InvalidCredential(format!(
                "{mechanism} keys must be {} bytes",
                hash.len()
            )));
        }
        Ok(ScramCredential {
            mechanism,
            salt,
            iterations,
            stored_key,
            server_key,
        })
    }

    /// The mechanism this credential is for.
    #[must_use]
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The salt.
    #[must_use]
    pub fn salt(&self) -> &[u8] {
        &self.salt
    }

    /// The PBKDF2 iteration count.
    #[must_use]
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// StoredKey = H(ClientKey).
    #[must_use]
    pub fn stored_key(&self) -> &[u8] {
        &self.stored_key
    }

    /// ServerKey = HMAC(SaltedPassword, "Server Key").
    #[must_use]
    pub fn server_key(&self) -> &[u8] {
        &self.server_key
    }

    /// Whether `password` is the one this credential was made from: recomputes
    /// SaltedPassword → ClientKey → StoredKey and compares in constant time. This is
    /// how PLAIN authenticates users stored only as SCRAM credentials.
    #[must_use]
    pub fn verify_password(&self, password: &str) -> bool {
        let (Some(hash), Some(iterations)) =
            (Hash::of(self.mechanism), NonZeroU32::new(self.iterations))
        else {
            return false;
        };
        let keys = hash.keys(password, &self.salt, iterations);
        constant_time::verify_slices_are_equal(&keys.stored_key, &self.stored_key).is_ok()
    }
}

fn check_salt(salt: &[u8]) -> Result<(), AuthError> {
    if salt.is_empty() || salt.len() > MAX_SALT_LEN {
        return Err(AuthError::InvalidCredential(format!(
            "salt must be 1 to {MAX_SALT_LEN} bytes"
        )));
    }
    Ok(())
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("salt_len", &self.salt.len())
            .field("iterations", &self.iterations)
            .field("stored_key", &"<redacted>")
            .field("server_key", &"<redacted>")
            .finish()
    }
}

/// The serde shape of [`ScramCredential`]: byte strings as base64.
#[derive(Serialize, Deserialize)]
struct CredentialJson {
    mechanism: Mechanism,
    salt: String,
    iterations: u32,
    stored_key: String,
    server_key: String,
}

impl From<ScramCredential> for CredentialJson {
    fn from(c: ScramCredential) -> Self {
        CredentialJson {
            mechanism: c.mechanism,
            salt: B64.encode(&c.salt),
            iterations: c.iterations,
            stored_key: B64.encode(&c.stored_key),
            server_key: B64.encode(&c.server_key),
        }
    }
}

impl TryFrom<CredentialJson> for ScramCredential {
    type Error = AuthError;

    fn try_from(j: CredentialJson) -> Result<Self, AuthError> {
        let decode = |field: &str, s: &str| {
            B64.decode(s)
                .map_err(|_| AuthError::InvalidCredential(format!("{field} is not valid base64")))
        };
        ScramCredential::from_parts(
            j.mechanism,
            decode("salt", &j.salt)?,
            j.iterations,
            decode("stored_key", &j.stored_key)?,
            decode("server_key", &j.server_key)?,
        )
    }
}

/// The secret behind the decoy salts [`ScramServer::server_first`] sends for unknown
/// users. Keep one per broker (or per cluster, so all brokers agree): the decoy
/// salt for a name is `HMAC(secret, mechanism || NUL || name)`, stable across
/// attempts (a salt that changed on every try would reveal that the user does not
/// exist) yet unpredictable without the secret. `Debug` does not show the secret.
pub struct ScramDecoy {
    key: hmac::Key,
    iterations: u32,
}

impl ScramDecoy {
    /// A decoy from a secret of at least 16 bytes, announcing `iterations` (use the
    /// count most real credentials have, usually [`MIN_ITERATIONS`]).
    ///
    /// # Errors
    /// [`AuthError::InvalidCredential`] for a short secret or iterations out of range.
    pub fn new(secret: &[u8], iterations: u32) -> Result<Self, AuthError> {
        if secret.len() < 16 {
            return Err(AuthError::InvalidCredential(
                "decoy secret must be at least 16 bytes".into(),
            ));
        }
        check_iterations(iterations)?;
        Ok(ScramDecoy {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            iterations,
        })
    }

    /// A decoy with a fresh random 32-byte secret and [`MIN_ITERATIONS`].
    ///
    /// # Errors
    /// [`AuthError::Random`].
    pub fn generate(rng: &dyn SecureRandom) -> Result<Self, AuthError> {
        let mut secret = [0u8; 32];
        rng.fill(&mut secret).map_err(|_| AuthError::Random)?;
        Self::new(&secret, MIN_ITERATIONS)
    }

    fn salt(&self, mechanism: Mechanism, username: &str) -> Vec<u8> {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(mechanism.name().as_bytes());
        ctx.update(&[0]);
        ctx.update(username.as_bytes());
        let tag = ctx.sign();
        tag.as_ref().iter().copied().take(SALT_LEN).collect()
    }
}

impl fmt::Debug for ScramDecoy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramDecoy")
            .field("iterations", &self.iterations)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// RFC 5802 §7 `printable`: `%x21-2B / %x2D-7E` (no comma).
fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

fn random_nonce(rng: &dyn SecureRandom) -> Result<String, AuthError> {
    let mut bytes = [0u8; NONCE_BYTES];
    rng.fill(&mut bytes).map_err(|_| AuthError::Random)?;
    // base64url has no comma, so it is a valid `printable` nonce.
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

fn malformed(msg: &str) -> AuthError {
    AuthError::Malformed(format!("Invalid SCRAM message: {msg}"))
}

mod client;
mod server;

pub use client::ScramClient;
pub use server::{ClientFirst, ScramServer};

#[cfg(test)]
mod tests;
