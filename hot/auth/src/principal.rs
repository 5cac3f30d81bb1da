//! Principals of TLS clients: the certificate's subject as Java prints it, mapped by
//! Kafka's `ssl.principal.mapping.rules` (KIP-371, `SslPrincipalMapper`).
//!
//! Kafka's `DefaultKafkaPrincipalBuilder` takes `X500Principal.getName()` (RFC 2253
//! form) of the peer certificate and applies the rules to it, so both halves must
//! match Java exactly for existing rules and ACLs to keep working.

use std::fmt;

use regex::{Captures, Regex};
use x509_parser::asn1_rs::{Any, Class, Tag};
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

use crate::AuthError;

/// The subject of a DER certificate as Java's `X500Principal.getName()` (RFC 2253)
/// prints it, e.g. `CN=client1,OU=eng,O=Example,C=US`.
///
/// # Errors
/// [`AuthError::InvalidCertificate`] if the bytes are not one DER certificate.
pub fn subject_dn(cert_der: &[u8]) -> Result<String, AuthError> {
    let (rest, cert) = X509Certificate::from_der(cert_der)
        .map_err(|e| AuthError::InvalidCertificate(e.to_string()))?;
    if !rest.is_empty() {
        return Err(AuthError::InvalidCertificate(
            "trailing bytes after the certificate".into(),
        ));
    }
    Ok(rfc2253(cert.subject()))
}

/// Like [`subject_dn`] for a DER-encoded X.501 `Name` on its own.
///
/// # Errors
/// [`AuthError::InvalidCertificate`] if the bytes are not one DER `Name`.
pub fn name_to_rfc2253(name_der: &[u8]) -> Result<String, AuthError> {
    let (rest, name) =
        X509Name::from_der(name_der).map_err(|e| AuthError::InvalidCertificate(e.to_string()))?;
    if !rest.is_empty() {
        return Err(AuthError::InvalidCertificate(
            "trailing bytes after the name".into(),
        ));
    }
    Ok(rfc2253(&name))
}

/// Java's `X500Name.getRFC2253Name()`: RDNs last-to-first joined by `,`; the AVAs
/// of a multi-valued RDN in encoded order joined by `+` (RFC 2253 §2.1-2.2).
fn rfc2253(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| rdn.iter().map(ava).collect::<Vec<_>>().join("+"))
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// The attribute types Java's RFC 2253 output names by keyword (`AVAKeyword`
/// entries marked RFC 2253 compliant); all others print as dotted OIDs.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// Java's `AVA.toRFC2253String`.
fn ava(ava: &AttributeTypeAndValue<'_>) -> String {
    let oid = ava.attr_type().to_id_string();
    let value = ava.attr_value();
    // RFC 2253 §2.4: a dotted-OID type, or a value with no string form, prints as
    // '#' and the hex of the value's BER (here DER) encoding.
    match (keyword(&oid), directory_string(value)) {
        (Some(kw), Some(text)) => format!("{kw}={}", escape(&text)),
        (kw, _) => {
            let mut out = format!("{}=#", kw.unwrap_or(&oid));
            for b in der_encoding(value) {
                out.push_str(&format!("{b:02x}"));
            }
            out
        }
    }
}

/// The string types Java's `AVA.isDerString(value, false)` accepts, decoded as
/// `DerValue.getAsString()` does. UniversalString is not among them (so `#hex`).
fn directory_string(value: &Any<'_>) -> Option<String> {
    if value.header.class() != Class::Universal || value.header.is_constructed() {
        return None;
    }
    let data = value.data;
    let ascii = || {
        data.iter()
            .map(|&b| if b < 0x80 { char::from(b) } else { '\u{fffd}' })
            .collect()
    };
    Some(match value.header.tag() {
        Tag::Utf8String => String::from_utf8_lossy(data).into_owned(),
        Tag::PrintableString | Tag::Ia5String | Tag::GeneralString => ascii(),
        // T61 as ISO-8859-1, as Java does.
        Tag::TeletexString => data.iter().map(|&b| char::from(b)).collect(),
        Tag::BmpString => char::decode_utf16(
            data.chunks(2)
                .map(|c| u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])),
        )
        .map(|c| c.unwrap_or('\u{fffd}'))
        .collect(),
        _ => return None,
    })
}

/// Re-encodes the value's tag and length in DER before its content (Java's
/// `DerValue.toByteArray()`).
fn der_encoding(value: &Any<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.data.len() + 8);
    let mut first = (value.header.class() as u8) << 6;
    if value.header.is_constructed() {
        first |= 0x20;
    }
    let tag = value.header.tag().0;
    if tag < 31 {
        out.push(first | tag as u8);
    } else {
        out.push(first | 0x1f);
        let mut groups = Vec::new();
        let mut t = tag;
        loop {
            groups.push((t & 0x7f) as u8);
            t >>= 7;
            if t == 0 {
                break;
            }
        }
        let last = groups.len() - 1;
        for (i, g) in groups.iter().rev().enumerate() {
            out.push(if i < last { g | 0x80 } else { *g });
        }
    }
    let len = value.data.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(value.data);
    out
}

/// Java's value escaping in `AVA.toRFC2253String`: a backslash before each of
/// `,=+<>#;"\` anywhere (RFC 2253 §2.4 requires `#` only when leading and not `=`;
/// Java escapes more, which RFC 2253 permits), `\00` for NUL, and a backslash
/// before leading and trailing spaces (and carriage returns).
fn escape(value: &str) -> String {
    let mut chars: Vec<char> = Vec::with_capacity(value.len());
    for c in value.chars() {
        if ",=+<>#;\"\\".contains(c) {
            chars.push('\\');
            chars.push(c);
        } else if c == '\0' {
            chars.extend(['\\', '0', '0']);
        } else {
            chars.push(c);
        }
    }
    let is_ws = |c: &char| *c == ' ' || *c == '\r';
    let lead = chars.iter().take_while(|c| is_ws(c)).count();
    let trail_start = chars.len() - chars.iter().rev().take_while(|c| is_ws(c)).count();
    let mut out = String::with_capacity(chars.len() + 4);
    for (i, c) in chars.into_iter().enumerate() {
        if i < lead || i >= trail_start {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One replacement piece, parsed with `java.util.regex.Matcher` semantics.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Group(usize),
    Named(String),
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Pattern {
        source: String,
        replacement_source: String,
        find: Regex,
        whole: Regex,
        replacement: Vec<Piece>,
        lower: bool,
        upper: bool,
    },
}

impl fmt::Display for Rule {
    /// Kafka's `Rule.toString()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Default => f.write_str("DEFAULT"),
            Rule::Pattern {
                source,
                replacement_source,
                lower,
                upper,
                ..
            } => {
                write!(f, "RULE:{source}/{replacement_source}")?;
                if *lower {
                    f.write_str("/L")?;
                } else if *upper {
                    f.write_str("/U")?;
                }
                Ok(())
            }
        }
    }
}

/// Kafka's `SslPrincipalMapper.RULE_PATTERN`; groups: 1 DEFAULT, 2 pattern,
/// 4 replacement, 6 case flag, 7 anything else.
const RULE_PATTERN: &str = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)";

/// Java's `Matcher.find()` loop: every match from the left, where an empty match
/// is followed by a search one character further on (so `replaceAll` and the rule
/// splitter see what Java sees).
fn java_find_iter<'h>(re: &Regex, text: &'h str) -> Vec<Captures<'h>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos <= text.len() {
        let Some(caps) = re.captures_at(text, pos) else {
            break;
        };
        let Some(m) = caps.get(0) else { break };
        pos = if m.is_empty() {
            text[m.end()..]
                .chars()
                .next()
                .map_or(text.len() + 1, |c| m.end() + c.len_utf8())
        } else {
            m.end()
        };
        out.push(caps);
    }
    out
}

/// Kafka's `ssl.principal.mapping.rules` (KIP-371): `RULE:pattern/replacement/[LU]`
/// and `DEFAULT` entries, separated by commas (or, as an extension, newlines).
/// The first rule whose pattern matches the whole DN gives the principal.
#[derive(Debug, Clone)]
pub struct PrincipalMappingRules {
    rules: Vec<Rule>,
}

impl Default for PrincipalMappingRules {
    /// Kafka's default, `DEFAULT`: the DN itself.
    fn default() -> Self {
        PrincipalMappingRules {
            rules: vec![Rule::Default],
        }
    }
}

impl PrincipalMappingRules {
    /// Parses the rules as Kafka's `SslPrincipalMapper` splits and parses them.
    /// Patterns are compiled with the `regex` crate, whose syntax is Java's for
    /// everything but backreferences and look-around (rejected here) and `\w`/`\d`
    /// meaning Unicode classes. Replacements follow `Matcher.appendReplacement`
    /// (`$n`, `${name}`, `\` escapes); as in Kafka, `$n` beyond the pattern's groups
    /// is literal text.
    ///
    /// # Errors
    /// [`AuthError::InvalidRule`] naming the rule that does not parse or compile.
    pub fn parse(rules: &str) -> Result<Self, AuthError> {
        let splitter = Regex::new(&format!(r"\s*({RULE_PATTERN})\s*(,\s*|$)"))
            .map_err(|e| AuthError::InvalidRule(e.to_string()))?;
        let parser = Regex::new(&format!("^(?:{RULE_PATTERN})"))
            .map_err(|e| AuthError::InvalidRule(e.to_string()))?;
        let text = rules.replace(['\r', '\n'], ",");
        let text = text.trim_matches(|c: char| c <= ' ');
        let mut parsed = Vec::new();
        for split in java_find_iter(&splitter, text) {
            let rule = split.get(1).map_or("", |m| m.as_str());
            let bad = |why: &str| AuthError::InvalidRule(format!("`{rule}`: {why}"));
            let caps = parser.captures(rule).ok_or_else(|| bad("not a rule"))?;
            let end = caps.get(0).map_or(0, |m| m.end());
            if end != rule.len() {
                return Err(bad(&format!("unmatched substring `{}`", &rule[end..])));
            }
            if caps.get(1).is_some() {
                parsed.push(Rule::Default);
            } else if let Some(pattern) = caps.get(2) {
                let replacement = caps.get(4).map_or("", |m| m.as_str());
                let flag = caps.get(6).map_or("", |m| m.as_str());
                parsed
                    .push(Self::compile(pattern.as_str(), replacement, flag).map_err(|e| bad(&e))?);
            }
            // Anything else is an empty rule, which Kafka ignores.
        }
        Ok(PrincipalMappingRules { rules: parsed })
    }

    fn compile(pattern: &str, replacement: &str, flag: &str) -> Result<Rule, String> {
        let find = Regex::new(pattern).map_err(|e| e.to_string())?;
        let whole = Regex::new(&format!(r"\A(?:{pattern})\z")).map_err(|e| e.to_string())?;
        let groups = find.captures_len() - 1;
        let names: Vec<&str> = find.capture_names().flatten().collect();
        Ok(Rule::Pattern {
            source: pattern.to_owned(),
            replacement_source: replacement.to_owned(),
            replacement: parse_replacement(replacement, groups, &names)?,
            find,
            whole,
            lower: flag == "L",
            upper: flag == "U",
        })
    }

    /// The principal for `dn`: the first matching rule's result, or `None` when no
    /// rule matches (Kafka then fails authentication with `NoMatchingRule`).
    #[must_use]
    pub fn try_apply(&self, dn: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| apply_rule(rule, dn))
    }

    /// The principal for `dn`, or `dn` unchanged when no rule matches.
    #[must_use]
    pub fn apply(&self, dn: &str) -> String {
        self.try_apply(dn).unwrap_or_else(|| dn.to_owned())
    }

    /// Kafka's strict form: [`AuthError::NoMatchingRule`] when no rule matches.
    ///
    /// # Errors
    /// [`AuthError::NoMatchingRule`].
    pub fn map(&self, dn: &str) -> Result<String, AuthError> {
        self.try_apply(dn)
            .ok_or_else(|| AuthError::NoMatchingRule(dn.to_owned()))
    }

    /// [`subject_dn`] then [`PrincipalMappingRules::map`].
    ///
    /// # Errors
    /// As those two.
    pub fn principal_for_certificate(&self, cert_der: &[u8]) -> Result<String, AuthError> {
        self.map(&subject_dn(cert_der)?)
    }
}

impl fmt::Display for PrincipalMappingRules {
    /// As Kafka's `SslPrincipalMapper.toString()` lists its rules: `[RULE:.../..., DEFAULT]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules: Vec<String> = self.rules.iter().map(ToString::to_string).collect();
        write!(f, "[{}]", rules.join(", "))
    }
}

/// Kafka's `Rule.apply`: if the pattern matches the whole DN, the result of
/// `dn.replaceAll(pattern, replacement)`, then the case flag.
fn apply_rule(rule: &Rule, dn: &str) -> Option<String> {
    let Rule::Pattern {
        find,
        whole,
        replacement,
        lower,
        upper,
        ..
    } = rule
    else {
        return Some(dn.to_owned());
    };
    if !whole.is_match(dn) {
        return None;
    }
    let mut out = String::with_capacity(dn.len());
    let mut last = 0;
    for caps in java_find_iter(find, dn) {
        let Some(m) = caps.get(0) else { continue };
        out.push_str(&dn[last..m.start()]);
        for piece in replacement {
            match piece {
                Piece::Literal(s) => out.push_str(s),
                Piece::Group(i) => out.push_str(caps.get(*i).map_or("", |g| g.as_str())),
                Piece::Named(n) => out.push_str(caps.name(n).map_or("", |g| g.as_str())),
            }
        }
        last = m.end();
    }
    out.push_str(&dn[last..]);
    Some(if *lower {
        out.to_lowercase()
    } else if *upper {
        out.to_uppercase()
    } else {
        out
    })
}

/// Parses a Java replacement string. Kafka first escapes `$n` references beyond the
/// group count (after Java's "use fewer digits" rule) so that they are literal
/// (`escapeLiteralBackReferences`); Java then reads `\x` as a literal `x`, `$n`
/// taking as many digits as still name a group, and `${name}`.
fn parse_replacement(src: &str, groups: usize, names: &[&str]) -> Result<Vec<Piece>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let c = chars
                    .get(i + 1)
                    .ok_or("character to be escaped is missing")?;
                literal.push(*c);
                i += 2;
            }
            '$' => {
                let next = chars.get(i + 1).copied();
                if next == Some('{') {
                    let close = chars[i + 2..]
                        .iter()
                        .position(|&c| c == '}')
                        .ok_or("named capturing group is missing trailing '}'")?;
                    let name: String = chars[i + 2..i + 2 + close].iter().collect();
                    if !names.contains(&name.as_str()) {
                        return Err(format!("no group with name {{{name}}}"));
                    }
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    pieces.push(Piece::Named(name));
                    i += 3 + close;
                } else if next.is_some_and(|c| c.is_ascii_digit()) {
                    let digits: String = chars[i + 1..]
                        .iter()
                        .take_while(|c| c.is_ascii_digit())
                        .collect();
                    if groups > 0 && !digits.starts_with('0') && kafka_escapes(&digits, groups) {
                        literal.push('$');
                        i += 1;
                        continue;
                    }
                    // Java: the first digit, then more while the number names a group.
                    let mut n = digits.as_bytes()[0].wrapping_sub(b'0') as usize;
                    let mut used = 1;
                    for d in digits.bytes().skip(1) {
                        let wider = n * 10 + (d - b'0') as usize;
                        if wider > groups {
                            break;
                        }
                        n = wider;
                        used += 1;
                    }
                    if n > groups {
                        return Err(format!("no group {n}"));
                    }
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    pieces.push(Piece::Group(n));
                    i += 1 + used;
                } else {
                    return Err("illegal group reference".into());
                }
            }
            c => {
                literal.push(c);
                i += 1;
            }
        }
    }
    pieces.push(Piece::Literal(literal));
    pieces.retain(|p| !matches!(p, Piece::Literal(s) if s.is_empty()));
    Ok(pieces)
}

/// Kafka's `escapeLiteralBackReferences` test: drop trailing digits while the
/// number is over the group count and at least 10; escape if still over.
fn kafka_escapes(digits: &str, groups: usize) -> bool {
    // More digits than any usize: certainly beyond the groups; reduce by length.
    let mut n: u128 = digits
        .bytes()
        .take(30)
        .fold(0, |acc, d| acc * 10 + u128::from(d - b'0'));
    while n > groups as u128 && n >= 10 {
        n /= 10;
    }
    n > groups as u128
}

#[cfg(test)]
mod tests;
