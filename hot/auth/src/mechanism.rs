//! SASL mechanism names as Kafka spells them (SaslHandshake, `sasl.enabled.mechanisms`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::AuthError;

/// A SASL mechanism this crate implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// RFC 4616.
    Plain,
    /// RFC 5802 / RFC 7677 with SHA-256.
    ScramSha256,
    /// RFC 5802 with SHA-512 (Kafka's extension, same construction).
    ScramSha512,
    /// RFC 7628.
    OAuthBearer,
}

impl Mechanism {
    /// Every mechanism, in the order Kafka lists them.
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::OAuthBearer,
    ];

    /// The IANA / Kafka name, e.g. `"SCRAM-SHA-256"`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// Whether this is one of the SCRAM mechanisms.
    #[must_use]
    pub const fn is_scram(self) -> bool {
        matches!(self, Mechanism::ScramSha256 | Mechanism::ScramSha512)
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mechanism {
    type Err = AuthError;

    /// Case-sensitive, as Kafka's `SaslServerAuthenticator` compares the handshake's
    /// mechanism with `sasl.enabled.mechanisms` using `String.equals`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                // The name comes from the client; bound what we echo back.
                let shown: String = s.chars().take(64).collect();
                AuthError::UnsupportedMechanism(shown)
            })
    }
}

impl Serialize for Mechanism {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Mechanism {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mechanism::ALL {
            assert_eq!(m.name().parse::<Mechanism>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
        }
        assert!(Mechanism::ScramSha256.is_scram());
        assert!(!Mechanism::OAuthBearer.is_scram());
    }

    #[test]
    fn case_sensitive_and_error_lists_valid_names() {
        let err = "scram-sha-256".parse::<Mechanism>().unwrap_err();
        assert_eq!(err, AuthError::UnsupportedMechanism("scram-sha-256".into()));
        let text = err.to_string();
        for m in Mechanism::ALL {
            assert!(text.contains(m.name()), "{text}");
        }
        assert!("GSSAPI".parse::<Mechanism>().is_err());
        assert!("".parse::<Mechanism>().is_err());
    }

    #[test]
    fn serde_uses_kafka_names() {
        let json = serde_json::to_string(&Mechanism::ScramSha512).unwrap();
        assert_eq!(json, "\"SCRAM-SHA-512\"");
        let back: Mechanism = serde_json::from_str(&json).unwrap();
        assert_eq!(back, Mechanism::ScramSha512);
        assert!(serde_json::from_str::<Mechanism>("\"MD5\"").is_err());
    }
}
