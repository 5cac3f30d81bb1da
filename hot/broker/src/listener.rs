//! Kafka listeners as Kafka names them: `PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094`
//! (listeners and advertised.listeners), each with its security protocol.
//!
//! A listener's name is its security protocol (Kafka also allows custom names mapped
//! through listener.security.protocol.map; Strata does not, and refuses other names), so
//! a broker has at most one listener of each protocol.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// How a listener's connections are secured (Kafka's security.protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SecurityProtocol {
    /// No TLS, no authentication: every connection is `User:ANONYMOUS`.
    Plaintext,
    /// TLS; with client certificates required, the principal comes from the certificate.
    Ssl,
    /// SASL authentication over plain TCP.
    SaslPlaintext,
    /// SASL authentication inside TLS.
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SecurityProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown listener '{s}': use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
            })
    }
}

/// One listener: what it binds, what it tells clients, how it is secured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerConfig {
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    /// HOST:PORT clients of this listener are told to connect to; `None` for the bound
    /// address (which must then not be a wildcard).
    pub advertised: Option<(String, u16)>,
}

impl ListenerConfig {
    pub fn plaintext(bind: SocketAddr) -> ListenerConfig {
        ListenerConfig {
            protocol: SecurityProtocol::Plaintext,
            bind,
            advertised: None,
        }
    }

    pub fn name(&self) -> &'static str {
        self.protocol.name()
    }

    /// The address advertised once bound (port 0 binds a free port).
    pub fn advertised(&self, bound: SocketAddr) -> (String, u16) {
        match &self.advertised {
            Some((h, p)) => (h.clone(), *p),
            None => (bound.ip().to_string(), bound.port()),
        }
    }
}

/// One `PROTOCOL://HOST:PORT` entry of a listener list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerAddr {
    pub protocol: SecurityProtocol,
    pub host: String,
    pub port: u16,
}

/// Parses `PLAINTEXT://127.0.0.1:9092,SASL_SSL://[::1]:9094`; errors name `flag`. Each
/// protocol at most once.
pub fn parse_listener_list(flag: &str, v: &str) -> Result<Vec<ListenerAddr>, String> {
    let mut out: Vec<ListenerAddr> = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, addr) = part.split_once("://").ok_or_else(|| {
            format!("{flag} entry '{part}' must be PROTOCOL://HOST:PORT, e.g. PLAINTEXT://127.0.0.1:9092")
        })?;
        let protocol: SecurityProtocol = name.parse().map_err(|e| format!("{flag}: {e}"))?;
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("{flag} entry '{part}' has no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{flag} entry '{part}': '{port}' is not a port number"))?;
        let host = host.trim_matches(['[', ']']).to_string();
        if out.iter().any(|l| l.protocol == protocol) {
            return Err(format!(
                "{flag} names {protocol} twice: a broker has at most one listener per protocol"
            ));
        }
        out.push(ListenerAddr {
            protocol,
            host,
            port,
        });
    }
    if out.is_empty() {
        return Err(format!(
            "{flag} is empty: give at least one PROTOCOL://HOST:PORT"
        ));
    }
    Ok(out)
}

/// Resolves `--listeners` and `--advertised-listeners` into listener configs: every
/// advertised entry must name a listener; a listener binding a wildcard must be
/// advertised (telling clients to connect to 0.0.0.0 breaks every one of them).
pub fn resolve_listeners(
    listeners: &[ListenerAddr],
    advertised: &[ListenerAddr],
) -> Result<Vec<ListenerConfig>, String> {
    for a in advertised {
        if !listeners.iter().any(|l| l.protocol == a.protocol) {
            return Err(format!(
                "--advertised-listeners names {}, which --listeners does not have",
                a.protocol
            ));
        }
        if a.host.is_empty() || a.port == 0 {
            return Err(format!(
                "--advertised-listeners {}://{}:{} must name a host and a port other than 0",
                a.protocol, a.host, a.port
            ));
        }
    }
    let mut out = Vec::new();
    for l in listeners {
        let host = if l.host.is_empty() {
            "0.0.0.0"
        } else {
            l.host.as_str()
        };
        let ip: std::net::IpAddr = host.parse().map_err(|_| {
            format!(
                "--listeners {}://{host}:{}: '{host}' is not an IP address to bind (give the host name in --advertised-listeners)",
                l.protocol, l.port
            )
        })?;
        let bind = SocketAddr::new(ip, l.port);
        let advertised = advertised
            .iter()
            .find(|a| a.protocol == l.protocol)
            .map(|a| (a.host.clone(), a.port));
        if bind.ip().is_unspecified() && advertised.is_none() {
            return Err(format!(
                "--listeners {}://{bind} binds every interface: also give --advertised-listeners {}://HOST:PORT, the address clients should connect to",
                l.protocol, l.protocol
            ));
        }
        out.push(ListenerConfig {
            protocol: l.protocol,
            bind,
            advertised,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kafka_listener_lists() {
        let l = parse_listener_list(
            "--listeners",
            "PLAINTEXT://127.0.0.1:9092, sasl_ssl://[::1]:9094",
        )
        .unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(l[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(l[1].host, "::1");
        assert_eq!(l[1].port, 9094);
    }

    #[test]
    fn refuses_bad_lists_naming_the_flag() {
        for (v, want) in [
            ("", "is empty"),
            ("127.0.0.1:9092", "PROTOCOL://HOST:PORT"),
            ("INTERNAL://127.0.0.1:9092", "unknown listener 'INTERNAL'"),
            ("PLAINTEXT://127.0.0.1", "no port"),
            ("PLAINTEXT://127.0.0.1:x", "not a port"),
            ("PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", "twice"),
        ] {
            let e = parse_listener_list("--listeners", v).unwrap_err();
            assert!(e.contains("--listeners") && e.contains(want), "{v}: {e}");
        }
    }

    #[test]
    fn wildcard_needs_an_advertised_address() {
        let l = parse_listener_list("--listeners", "SSL://0.0.0.0:9093").unwrap();
        let e = resolve_listeners(&l, &[]).unwrap_err();
        assert!(e.contains("--advertised-listeners SSL://"), "{e}");
        let a =
            parse_listener_list("--advertised-listeners", "SSL://broker1.example:9093").unwrap();
        let r = resolve_listeners(&l, &a).unwrap();
        assert_eq!(
            r[0].advertised(r[0].bind),
            ("broker1.example".to_string(), 9093)
        );
        let other = parse_listener_list("--advertised-listeners", "SASL_SSL://h:1").unwrap();
        assert!(
            resolve_listeners(&l, &other)
                .unwrap_err()
                .contains("does not have")
        );
    }

    #[test]
    fn host_names_are_not_bound() {
        let l = parse_listener_list("--listeners", "PLAINTEXT://localhost:9092").unwrap();
        assert!(
            resolve_listeners(&l, &[])
                .unwrap_err()
                .contains("not an IP address")
        );
    }
}
