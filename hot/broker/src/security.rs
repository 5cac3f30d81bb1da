//! The broker's security settings: how client certificates become principals (and, as
//! they are built, SASL mechanisms and the authorizer).

/// Security settings shared by every listener.
#[derive(Clone, Debug, Default)]
pub struct SecurityConfig {
    /// Kafka's ssl.principal.mapping.rules: how a client certificate's subject becomes a
    /// user name. `None` is Kafka's `DEFAULT`: the whole distinguished name.
    pub principal_mapping: Option<strata_auth::PrincipalMappingRules>,
    /// What SASL listeners offer.
    pub sasl: crate::sasl::SaslConfig,
    /// ACL authorization (super users, allow.everyone.if.no.acl.found); `None` is off:
    /// every request is allowed, as Kafka without an authorizer.
    pub authorizer: Option<strata_authz::AuthorizerConfig>,
}

impl SecurityConfig {
    /// The principal (`User:NAME`) of a client certificate on an SSL listener.
    pub fn certificate_principal(&self, cert_der: &[u8]) -> Result<String, String> {
        let dn = strata_auth::subject_dn(cert_der)
            .map_err(|e| format!("cannot read the client certificate's subject: {e}"))?;
        // As Kafka: a subject no rule matches fails the authentication.
        let name = match &self.principal_mapping {
            Some(rules) => rules.map(&dn).map_err(|e| e.to_string())?,
            None => dn,
        };
        Ok(format!("User:{name}"))
    }
}
