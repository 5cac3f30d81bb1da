//! The GS2 header and `saslname` encoding shared by SCRAM (RFC 5802 §5.1, §7) and
//! OAUTHBEARER (RFC 7628 §3.1), both from RFC 5801 §4.

use crate::AuthError;

/// Decodes an RFC 5802 §5.1 `saslname`: `=2C` is `,`, `=3D` is `=`, and any other
/// `=` is an error. NUL is not a `value-safe-char`.
pub(crate) fn decode_saslname(s: &str) -> Result<String, AuthError> {
    let bad = || AuthError::Malformed("Invalid escape or character in SASL name".into());
    if s.contains('\0') || s.contains(',') {
        return Err(bad());
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix("2C") {
            out.push(',');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("3D") {
            out.push('=');
            rest = tail;
        } else {
            return Err(bad());
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Encodes a name as an RFC 5802 §5.1 `saslname`.
pub(crate) fn encode_saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

/// The GS2 header that starts SCRAM and OAUTHBEARER client messages (RFC 5801 §4).
pub(crate) struct Gs2Header<'a> {
    /// The header text including its final comma (the `c=` input).
    pub header: &'a str,
    /// The decoded authzid, if any.
    pub authzid: Option<String>,
    /// What follows the header.
    pub rest: &'a str,
}

/// Parses `gs2-cbind-flag "," [ "a=" saslname ] ","`. Only `n` is accepted: we offer
/// no channel binding, and Kafka's servers accept only `n` as well.
pub(crate) fn parse_gs2_header(text: &str) -> Result<Gs2Header<'_>, AuthError> {
    let missing = || AuthError::Malformed("Invalid SASL message: missing GS2 header".into());
    let (flag, after) = text.split_once(',').ok_or_else(missing)?;
    match flag {
        "n" => {}
        "y" => {
            return Err(AuthError::Unsupported(
                "Channel binding is not supported (GS2 flag 'y')".into(),
            ));
        }
        f if f.starts_with("p=") => {
            return Err(AuthError::Unsupported(
                "Channel binding is not supported (GS2 flag 'p=')".into(),
            ));
        }
        _ => {
            return Err(AuthError::Malformed(
                "Invalid SASL message: bad GS2 channel-binding flag".into(),
            ));
        }
    }
    let (authz, rest) = after.split_once(',').ok_or_else(missing)?;
    let authzid = if authz.is_empty() {
        None
    } else if let Some(name) = authz.strip_prefix("a=") {
        let name = decode_saslname(name)?;
        if name.is_empty() {
            return Err(missing());
        }
        Some(name)
    } else {
        return Err(AuthError::Malformed(
            "Invalid SASL message: bad GS2 authzid".into(),
        ));
    };
    let header_len = flag.len() + authz.len() + 2;
    Ok(Gs2Header {
        header: &text[..header_len],
        authzid,
        rest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn saslname_codec() {
        assert_eq!(decode_saslname("a=2Cb=3Dc").unwrap(), "a,b=c");
        assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");
        assert_eq!(decode_saslname("=3D2C").unwrap(), "=2C");
        assert!(decode_saslname("=").is_err());
        assert!(decode_saslname("=2").is_err());
        assert!(decode_saslname("=41").is_err());
        assert_eq!(decode_saslname("\u{e9}").unwrap(), "\u{e9}");
    }

    #[test]
    fn gs2_headers() {
        let h = parse_gs2_header("n,,rest").unwrap();
        assert_eq!((h.header, h.authzid, h.rest), ("n,,", None, "rest"));
        let h = parse_gs2_header("n,a=b=3Dc,rest").unwrap();
        assert_eq!(
            (h.header, h.authzid.as_deref(), h.rest),
            ("n,a=b=3Dc,", Some("b=c"), "rest")
        );
        assert!(matches!(
            parse_gs2_header("y,,x"),
            Err(AuthError::Unsupported(_))
        ));
        assert!(matches!(
            parse_gs2_header("p=tls-exporter,,x"),
            Err(AuthError::Unsupported(_))
        ));
        for bad in ["", "n", "n,", "x,,", "n,a=,", "n,b=c,", "n,a=x=1,"] {
            assert!(
                matches!(parse_gs2_header(bad), Err(AuthError::Malformed(_))),
                "{bad}"
            );
        }
    }

    proptest! {
        #[test]
        fn saslname_round_trips(name in "\\PC{1,20}") {
            let name: String = name.chars().filter(|&c| c != '\0').collect();
            prop_assert_eq!(decode_saslname(&encode_saslname(&name)).unwrap(), name);
        }
    }
}
