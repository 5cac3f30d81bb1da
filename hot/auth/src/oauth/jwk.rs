//! Verification keys: JWKS (RFC 7517) and PEM public keys, and JWS signature
//! checks (RFC 7515, RFC 7518 §3.3-3.4) with aws-lc-rs.

use std::fmt;

use aws_lc_rs::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use base64::Engine;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::Deserialize;
use serde_json::Value;

use super::invalid;
use crate::AuthError;

/// base64url for key material, where some JWKS producers pad.
const URL_SAFE_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The JWS algorithms accepted under a key set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JwsAlg {
    Rs256,
    Rs384,
    Rs512,
    Es256,
    Es384,
}

impl JwsAlg {
    pub(super) fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "RS256" => JwsAlg::Rs256,
            "RS384" => JwsAlg::Rs384,
            "RS512" => JwsAlg::Rs512,
            "ES256" => JwsAlg::Es256,
            "ES384" => JwsAlg::Es384,
            _ => return None,
        })
    }

    fn fits(self, key: &KeyMaterial) -> bool {
        matches!(
            (self, key),
            (
                JwsAlg::Rs256 | JwsAlg::Rs384 | JwsAlg::Rs512,
                KeyMaterial::Rsa { .. }
            ) | (
                JwsAlg::Es256,
                KeyMaterial::Ec {
                    curve: Curve::P256,
                    ..
                }
            ) | (
                JwsAlg::Es384,
                KeyMaterial::Ec {
                    curve: Curve::P384,
                    ..
                }
            )
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Curve {
    P256,
    P384,
}

impl Curve {
    fn coordinate_len(self) -> usize {
        match self {
            Curve::P256 => 32,
            Curve::P384 => 48,
        }
    }

    fn algorithm(self) -> &'static signature::EcdsaVerificationAlgorithm {
        // JWS ECDSA signatures are the fixed-width R || S (RFC 7518 §3.4).
        match self {
            Curve::P256 => &signature::ECDSA_P256_SHA256_FIXED,
            Curve::P384 => &signature::ECDSA_P384_SHA384_FIXED,
        }
    }
}

#[derive(Clone)]
pub(super) enum KeyMaterial {
    /// Modulus and exponent, big-endian without leading zeros.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// The uncompressed point `04 || x || y`.
    Ec { curve: Curve, point: Vec<u8> },
}

impl KeyMaterial {
    fn rsa(n: &[u8], e: &[u8]) -> Result<Self, AuthError> {
        let strip = |b: &[u8]| b.iter().position(|&x| x != 0).map(|i| b[i..].to_vec());
        let (Some(n), Some(e)) = (strip(n), strip(e)) else {
            return Err(AuthError::InvalidKey("RSA key with zero n or e".into()));
        };
        // RSA_PKCS1_2048_8192_*: keys outside 2048..=8192 bits would fail every
        // verification; say so at load time instead.
        let bits = n.len() * 8 - n.first().map_or(0, |b| b.leading_zeros() as usize);
        if !(2048..=8192).contains(&bits) {
            return Err(AuthError::InvalidKey(format!(
                "RSA key of {bits} bits; 2048 to 8192 are supported"
            )));
        }
        RsaPublicKeyComponents {
            n: n.as_slice(),
            e: e.as_slice(),
        }
        .to_parsed_public_key(&signature::RSA_PKCS1_2048_8192_SHA256)
        .map_err(|e| AuthError::InvalidKey(format!("RSA key rejected: {e}")))?;
        Ok(KeyMaterial::Rsa { n, e })
    }

    fn ec(curve: Curve, point: Vec<u8>) -> Result<Self, AuthError> {
        if point.len() != 1 + 2 * curve.coordinate_len() || point.first() != Some(&4) {
            return Err(AuthError::InvalidKey(
                "EC key must be an uncompressed point of the curve's size".into(),
            ));
        }
        signature::ParsedPublicKey::new(curve.algorithm(), &point)
            .map_err(|e| AuthError::InvalidKey(format!("EC key rejected: {e}")))?;
        Ok(KeyMaterial::Ec { curve, point })
    }

    pub(super) fn verify(&self, alg: JwsAlg, message: &[u8], sig: &[u8]) -> bool {
        match (alg, self) {
            (JwsAlg::Rs256 | JwsAlg::Rs384 | JwsAlg::Rs512, KeyMaterial::Rsa { n, e }) => {
                let params = match alg {
                    JwsAlg::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    JwsAlg::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    _ => &signature::RSA_PKCS1_2048_8192_SHA512,
                };
                RsaPublicKeyComponents { n, e }
                    .verify(params, message, sig)
                    .is_ok()
            }
            (JwsAlg::Es256 | JwsAlg::Es384, KeyMaterial::Ec { curve, point }) => {
                alg.fits(self)
                    && UnparsedPublicKey::new(curve.algorithm(), point)
                        .verify(message, sig)
                        .is_ok()
            }
            _ => false,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            KeyMaterial::Rsa { .. } => "RSA",
            KeyMaterial::Ec {
                curve: Curve::P256, ..
            } => "EC P-256",
            KeyMaterial::Ec {
                curve: Curve::P384, ..
            } => "EC P-384",
        }
    }
}

#[derive(Clone)]
pub(super) struct Jwk {
    kid: Option<String>,
    alg: Option<JwsAlg>,
    pub(super) key: KeyMaterial,
}

/// Public keys to verify token signatures with: from a JWKS document (RFC 7517) or
/// PEM. Keys of types we cannot use (`oct`, `OKP`, other curves, `use: enc`, other
/// `alg`s) are skipped; a set with no usable key is an error.
#[derive(Clone)]
pub struct JwkSet {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct JwksDocument {
    keys: Vec<Value>,
}

#[derive(Deserialize)]
struct RawJwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

impl JwkSet {
    /// Parses a JWKS document `{"keys":[...]}` (RSA keys with `n`/`e`, EC keys on
    /// P-256 or P-384 with `x`/`y`).
    ///
    /// # Errors
    /// [`AuthError::InvalidKey`] for bad JSON, a usable-looking key with bad
    /// material, or no usable key.
    pub fn from_jwks(json: &str) -> Result<Self, AuthError> {
        let doc: JwksDocument = serde_json::from_str(json)
            .map_err(|e| AuthError::InvalidKey(format!("JWKS is not valid: {e}")))?;
        let mut keys = Vec::new();
        for (i, value) in doc.keys.into_iter().enumerate() {
            let raw: RawJwk = serde_json::from_value(value)
                .map_err(|e| AuthError::InvalidKey(format!("JWKS key #{i}: {e}")))?;
            if let Some(jwk) = Self::parse_jwk(&raw)
                .map_err(|e| AuthError::InvalidKey(format!("JWKS key #{i}: {e}")))?
            {
                keys.push(jwk);
            }
        }
        Self::non_empty(keys)
    }

    fn parse_jwk(raw: &RawJwk) -> Result<Option<Jwk>, String> {
        if raw.use_.as_deref().is_some_and(|u| u != "sig") {
            return Ok(None);
        }
        let alg = match raw.alg.as_deref() {
            None => None,
            Some(name) => match JwsAlg::parse(name) {
                Some(alg) => Some(alg),
                None => return Ok(None),
            },
        };
        let b64 = |field: &str, v: &Option<String>| {
            let v = v.as_deref().ok_or_else(|| format!("missing '{field}'"))?;
            URL_SAFE_LENIENT
                .decode(v)
                .map_err(|_| format!("'{field}' is not base64url"))
        };
        let key = match raw.kty.as_str() {
            "RSA" => KeyMaterial::rsa(&b64("n", &raw.n)?, &b64("e", &raw.e)?),
            "EC" => {
                let curve = match raw.crv.as_deref() {
                    Some("P-256") => Curve::P256,
                    Some("P-384") => Curve::P384,
                    _ => return Ok(None),
                };
                let (x, y) = (b64("x", &raw.x)?, b64("y", &raw.y)?);
                let len = curve.coordinate_len();
                if x.len() != len || y.len() != len {
                    return Err(format!("EC coordinates must be {len} bytes"));
                }
                KeyMaterial::ec(curve, [&[4u8][..], &x, &y].concat())
            }
            _ => return Ok(None),
        }
        .map_err(|e| e.to_string())?;
        if let Some(alg) = alg
            && !alg.fits(&key)
        {
            return Err(format!("alg {alg:?} does not fit a {} key", key.kind()));
        }
        Ok(Some(Jwk {
            kid: raw.kid.clone(),
            alg,
            key,
        }))
    }

    /// Reads public keys from PEM: `PUBLIC KEY` (SubjectPublicKeyInfo, RSA or EC
    /// P-256/P-384), `RSA PUBLIC KEY` (PKCS#1) or `CERTIFICATE` (its key; the
    /// certificate itself is not validated). The keys have no `kid`, so they match
    /// any token of a fitting algorithm (there should be one per type).
    ///
    /// # Errors
    /// [`AuthError::InvalidKey`] for bad PEM or DER, unsupported key types, or no key.
    pub fn from_pem(pem: &str) -> Result<Self, AuthError> {
        use x509_parser::prelude::{FromDer, X509Certificate};
        use x509_parser::public_key::RSAPublicKey;
        use x509_parser::x509::SubjectPublicKeyInfo;

        let bad = |what: &str| AuthError::InvalidKey(format!("PEM: {what}"));
        let mut keys = Vec::new();
        for block in x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()) {
            let block = block.map_err(|e| bad(&e.to_string()))?;
            let key = match block.label.as_str() {
                "PUBLIC KEY" => {
                    let (_, spki) = SubjectPublicKeyInfo::from_der(&block.contents)
                        .map_err(|_| bad("invalid SubjectPublicKeyInfo"))?;
                    spki_key(&spki)?
                }
                "CERTIFICATE" => {
                    let (_, cert) = X509Certificate::from_der(&block.contents)
                        .map_err(|_| bad("invalid certificate"))?;
                    spki_key(cert.public_key())?
                }
                "RSA PUBLIC KEY" => {
                    let (_, rsa) = RSAPublicKey::from_der(&block.contents)
                        .map_err(|_| bad("invalid RSAPublicKey"))?;
                    KeyMaterial::rsa(rsa.modulus, rsa.exponent)?
                }
                other => return Err(bad(&format!("unsupported block '{other}'"))),
            };
            keys.push(Jwk {
                kid: None,
                alg: None,
                key,
            });
        }
        Self::non_empty(keys)
    }

    fn non_empty(keys: Vec<Jwk>) -> Result<Self, AuthError> {
        if keys.is_empty() {
            return Err(AuthError::InvalidKey("no usable signing key".into()));
        }
        Ok(JwkSet { keys })
    }

    /// How many usable keys the set holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set is empty (never, once built).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key for a token: by `kid` when the token has one (falling back to keys
    /// without a kid, e.g. from PEM); otherwise the only key that fits `alg`.
    pub(super) fn select(&self, alg: JwsAlg, kid: Option<&str>) -> Result<&Jwk, AuthError> {
        let fits = |k: &&Jwk| alg.fits(&k.key) && k.alg.is_none_or(|a| a == alg);
        let by_kid: Vec<&Jwk> = match kid {
            Some(kid) => {
                let named: Vec<&Jwk> = self
                    .keys
                    .iter()
                    .filter(|k| k.kid.as_deref() == Some(kid))
                    .collect();
                if named.is_empty() {
                    self.keys.iter().filter(|k| k.kid.is_none()).collect()
                } else {
                    named
                }
            }
            None => self.keys.iter().collect(),
        };
        let candidates: Vec<&Jwk> = by_kid.into_iter().filter(fits).collect();
        match (candidates.as_slice(), kid) {
            ([key], _) => Ok(key),
            ([], Some(kid)) => Err(invalid(format!(
                "no key with kid {:?} for {alg:?}",
                kid.chars().take(64).collect::<String>()
            ))),
            ([], None) => Err(invalid(format!("no key for {alg:?}"))),
            (_, _) => Err(invalid(format!(
                "the token names no single key: {} keys fit {alg:?}",
                candidates.len()
            ))),
        }
    }
}

fn spki_key(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> Result<KeyMaterial, AuthError> {
    use x509_parser::asn1_rs::Tag;
    use x509_parser::oid_registry::{OID_EC_P256, OID_NIST_EC_P384};
    use x509_parser::public_key::PublicKey;

    match spki.parsed() {
        Ok(PublicKey::RSA(rsa)) => KeyMaterial::rsa(rsa.modulus, rsa.exponent),
        Ok(PublicKey::EC(point)) => {
            let curve_oid = spki
                .algorithm
                .parameters
                .as_ref()
                .filter(|p| p.header.tag() == Tag::Oid)
                .map(|p| p.data);
            let curve = if curve_oid == Some(OID_EC_P256.as_bytes()) {
                Curve::P256
            } else if curve_oid == Some(OID_NIST_EC_P384.as_bytes()) {
                Curve::P384
            } else {
                return Err(AuthError::InvalidKey(
                    "PEM: EC keys must be on P-256 or P-384".into(),
                ));
            };
            KeyMaterial::ec(curve, point.data().to_vec())
        }
        _ => Err(AuthError::InvalidKey(
            "PEM: only RSA and EC public keys are supported".into(),
        )),
    }
}

impl fmt::Debug for JwkSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self
            .keys
            .iter()
            .map(|k| format!("{}({})", k.key.kind(), k.kid.as_deref().unwrap_or("-")))
            .collect();
        f.debug_struct("JwkSet").field("keys", &keys).finish()
    }
}
