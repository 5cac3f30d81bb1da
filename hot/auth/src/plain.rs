//! SASL PLAIN (RFC 4616) as Kafka's `PlainSaslServer` applies it.
//!
//! The message is `[authzid] NUL authcid NUL passwd`. The password is checked against
//! the user's SCRAM credential ([`ScramCredential::verify_password`]), so a broker
//! that stores only SCRAM credentials (as Kafka's KRaft metadata does) can still
//! offer PLAIN, and no clear-text password is kept anywhere.

use std::fmt;

use crate::scram::{MIN_ITERATIONS, ScramCredential};
use crate::{AuthError, MAX_SASL_MESSAGE_LEN, Mechanism};

/// A parsed PLAIN initial response. `Debug` never shows the password, and the
/// password bytes are overwritten when the value is dropped.
pub struct PlainCredentials {
    authzid: String,
    username: String,
    password: String,
}

impl PlainCredentials {
    /// Parses a client's PLAIN response.
    ///
    /// Rules (RFC 4616 §2 and Kafka's `PlainSaslServer.evaluateResponse`): exactly
    /// three NUL-separated tokens, valid UTF-8, non-empty username and password, and
    /// an authzid that is empty or equal to the username (Kafka does not support
    /// impersonation).
    ///
    /// # Errors
    /// [`AuthError::TooLarge`] over [`MAX_SASL_MESSAGE_LEN`], otherwise
    /// [`AuthError::Malformed`] with Kafka's message texts.
    pub fn parse(message: &[u8]) -> Result<Self, AuthError> {
        if message.len() > MAX_SASL_MESSAGE_LEN {
            return Err(AuthError::TooLarge {
                len: message.len(),
                max: MAX_SASL_MESSAGE_LEN,
            });
        }
        let mut tokens = message.split(|&b| b == 0);
        let (Some(authzid), Some(username), Some(password), None) =
            (tokens.next(), tokens.next(), tokens.next(), tokens.next())
        else {
            let count = message.split(|&b| b == 0).count();
            return Err(AuthError::Malformed(format!(
                "Invalid SASL/PLAIN response: expected 3 tokens, got {count}"
            )));
        };
        // RFC 4616 §2: every field is UTF8SAFE. The error must not echo the bytes:
        // the password is among them.
        let utf8 = |b: &[u8]| {
            std::str::from_utf8(b).map(str::to_owned).map_err(|_| {
                AuthError::Malformed("Invalid SASL/PLAIN response: not valid UTF-8".into())
            })
        };
        let credentials = PlainCredentials {
            authzid: utf8(authzid)?,
            username: utf8(username)?,
            password: utf8(password)?,
        };
        if credentials.username.is_empty() {
            return Err(AuthError::Malformed(
                "Authentication failed: username not specified".into(),
            ));
        }
        if credentials.password.is_empty() {
            return Err(AuthError::Malformed(
                "Authentication failed: password not specified".into(),
            ));
        }
        if !credentials.authzid.is_empty() && credentials.authzid != credentials.username {
            return Err(AuthError::Malformed(
                "Authentication failed: Client requested an authorization id that is different from username"
                    .into(),
            ));
        }
        Ok(credentials)
    }

    /// Encodes a PLAIN response (the client side; `authzid` empty as Kafka's client
    /// sends it).
    #[must_use]
    pub fn encode(username: &str, password: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(username.len() + password.len() + 2);
        out.push(0);
        out.extend_from_slice(username.as_bytes());
        out.push(0);
        out.extend_from_slice(password.as_bytes());
        out
    }

    /// The authorization id, if the client sent one (then it equals the username).
    #[must_use]
    pub fn authzid(&self) -> Option<&str> {
        (!self.authzid.is_empty()).then_some(self.authzid.as_str())
    }

    /// The authentication id: the user name to look the credential up by, and the
    /// principal once [`PlainCredentials::verify`] succeeds.
    #[must_use]
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The clear-text password.
    #[must_use]
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Checks the password against the user's stored SCRAM credential (`None` for an
    /// unknown user).
    ///
    /// An unknown user costs a PBKDF2 derivation like a known one (with
    /// [`MIN_ITERATIONS`], the usual count) so response timing does not reveal which
    /// users exist; both fail with the same [`AuthError::BadCredentials`].
    ///
    /// # Errors
    /// [`AuthError::BadCredentials`] (mechanism PLAIN) for an unknown user or a wrong
    /// password.
    pub fn verify(&self, credential: Option<&ScramCredential>) -> Result<(), AuthError> {
        let ok = match credential {
            Some(credential) => credential.verify_password(&self.password),
            None => {
                // Decoy work; the result is irrelevant.
                let _ = ScramCredential::new(
                    Mechanism::ScramSha512,
                    &self.password,
                    b"strata-plain-decoy-salt",
                    MIN_ITERATIONS,
                );
                false
            }
        };
        if ok {
            Ok(())
        } else {
            Err(AuthError::BadCredentials {
                mechanism: Mechanism::Plain,
            })
        }
    }
}

impl fmt::Debug for PlainCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainCredentials")
            .field("authzid", &self.authzid)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Drop for PlainCredentials {
    fn drop(&mut self) {
        crate::wipe(std::mem::take(&mut self.password));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn malformed(msg: &[u8]) -> String {
        match PlainCredentials::parse(msg) {
            Err(AuthError::Malformed(m)) => m,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn parses_without_authzid() {
        let c = PlainCredentials::parse(b"\0alice\0secret").unwrap();
        assert_eq!(c.username(), "alice");
        assert_eq!(c.password(), "secret");
        assert_eq!(c.authzid(), None);
        assert_eq!(
            PlainCredentials::parse(&PlainCredentials::encode("alice", "secret"))
                .unwrap()
                .username(),
            "alice"
        );
    }

    #[test]
    fn authzid_must_equal_username() {
        let c = PlainCredentials::parse(b"alice\0alice\0secret").unwrap();
        assert_eq!(c.authzid(), Some("alice"));
        assert!(malformed(b"admin\0alice\0secret").contains("authorization id"));
    }

    #[test]
    fn token_count() {
        assert!(malformed(b"alice\0secret").contains("expected 3 tokens, got 2"));
        assert!(malformed(b"\0a\0b\0c").contains("got 4"));
        assert!(malformed(b"").contains("got 1"));
    }

    #[test]
    fn empty_fields() {
        assert!(malformed(b"\0\0secret").contains("username not specified"));
        assert!(malformed(b"\0alice\0").contains("password not specified"));
    }

    #[test]
    fn utf8_required_and_not_echoed() {
        let m = malformed(b"\0alice\0s\xffcret");
        assert!(m.contains("UTF-8"));
        assert!(!m.contains("cret"));
        // Non-ASCII UTF-8 is fine.
        let c = PlainCredentials::parse("\0jos\u{e9}\0p\u{e4}ss".as_bytes()).unwrap();
        assert_eq!(c.username(), "jos\u{e9}");
    }

    #[test]
    fn oversized() {
        let mut msg = b"\0alice\0".to_vec();
        msg.resize(MAX_SASL_MESSAGE_LEN + 1, b'x');
        assert!(matches!(
            PlainCredentials::parse(&msg),
            Err(AuthError::TooLarge { .. })
        ));
    }

    #[test]
    fn debug_redacts_password() {
        let c = PlainCredentials::parse(b"\0alice\0hunter2").unwrap();
        let shown = format!("{c:?}");
        assert!(shown.contains("alice"));
        assert!(!shown.contains("hunter2"));
    }

    #[test]
    fn verify_against_scram_credential() {
        let cred =
            ScramCredential::new(Mechanism::ScramSha256, "hunter2", b"salt-salt", 4096).unwrap();
        let good = PlainCredentials::parse(b"\0alice\0hunter2").unwrap();
        assert_eq!(good.verify(Some(&cred)), Ok(()));
        let bad = PlainCredentials::parse(b"\0alice\0hunter3").unwrap();
        let wrong_password = bad.verify(Some(&cred)).unwrap_err();
        let unknown_user = good.verify(None).unwrap_err();
        assert_eq!(wrong_password, unknown_user);
        assert_eq!(
            wrong_password,
            AuthError::BadCredentials {
                mechanism: Mechanism::Plain
            }
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = PlainCredentials::parse(&bytes);
        }
    }
}
