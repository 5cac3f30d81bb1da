//! Test certificates (rcgen): a CA per test, server and client certificates it signs,
//! written as PEM files the broker and the clients read.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate authority writing into `dir`.
pub struct Pki {
    dir: PathBuf,
    name: String,
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    /// A new CA named `name`; its certificate is `DIR/NAME-ca.pem`.
    pub fn new(dir: &Path, name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join(format!("{name}-ca.pem")), ca.pem()).unwrap();
        Pki {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            ca,
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self, stem: &str) -> Issued {
        self.issue(
            stem,
            &[(DnType::CommonName, "strata")],
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A cluster node's certificate: a server (for `ip`) and a client (it connects to
    /// the other brokers and the controller voters) whose subject is CN=`cn`.
    pub fn node(&self, stem: &str, cn: &str, ip: &str) -> Issued {
        self.issue_with(
            stem,
            &[
                (DnType::CommonName, cn),
                (DnType::OrganizationName, "Strata"),
            ],
            &[ip, "localhost"],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    /// A client certificate whose subject is CN=`cn`,OU=`ou`,O=Strata.
    pub fn client(&self, stem: &str, cn: &str, ou: &str) -> Issued {
        self.issue(
            stem,
            &[
                (DnType::CommonName, cn),
                (DnType::OrganizationalUnitName, ou),
                (DnType::OrganizationName, "Strata"),
            ],
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    fn issue(
        &self,
        stem: &str,
        subject: &[(DnType, &str)],
        sans: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> Issued {
        self.issue_with(stem, subject, sans, vec![usage])
    }

    fn issue_with(
        &self,
        stem: &str,
        subject: &[(DnType, &str)],
        sans: &[&str],
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> Issued {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        // rcgen's default subject is a CN; start empty. A DN prints (RFC 2253, as Kafka
        // maps principals) last attribute first, so push them reversed: the subject
        // then prints as listed (CN=...,OU=...,O=...).
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in subject.iter().rev() {
            params.distinguished_name.push(t.clone(), *v);
        }
        params.extended_key_usages = usages;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let out = Issued {
            cert: self.dir.join(format!("{stem}.pem")),
            key: self.dir.join(format!("{stem}-key.pem")),
        };
        // Written whole and renamed, as an operator's tooling would: a reload never
        // sees half a file.
        write_atomic(&out.cert, &cert.pem());
        write_atomic(&out.key, &key.serialize_pem());
        out
    }
}

pub fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
