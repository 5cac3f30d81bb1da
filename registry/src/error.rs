//! The registry's errors, each with the HTTP status and Confluent's error code its REST
//! API answers with (Confluent Schema Registry's `Errors`).

/// Why a registry call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("Subject '{0}' not found.")]
    SubjectNotFound(String),
    #[error("Version {version} not found.")]
    VersionNotFound { version: String },
    #[error("Schema {0} not found")]
    SchemaNotFound(String),
    #[error("Subject '{0}' was soft deleted. Set permanent=true to delete permanently")]
    SubjectSoftDeleted(String),
    #[error("Subject '{0}' was not deleted first before being permanently deleted")]
    SubjectNotSoftDeleted(String),
    #[error(
        "Version {version} of subject '{subject}' was not deleted first before being permanently deleted"
    )]
    VersionNotSoftDeleted { subject: String, version: i32 },
    #[error("Subject '{0}' does not have subject-level compatibility configured")]
    SubjectCompatibilityNotConfigured(String),
    #[error("Subject '{0}' does not have subject-level mode configured")]
    SubjectModeNotConfigured(String),
    /// 409: the schema does not keep the subject's compatibility level.
    #[error("Schema being registered is incompatible with an earlier schema for subject \"{subject}\", details: [{}]", .details.join(", "))]
    Incompatible {
        subject: String,
        details: Vec<String>,
    },
    /// 409: IMPORT mode with an id already taken by another schema.
    #[error("Schema already registered with id {id} instead of input id {requested}")]
    IdInUse { id: i32, requested: i32 },
    #[error("Invalid schema: {0}")]
    InvalidSchema(String),
    #[error(
        "The specified version '{0}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""
    )]
    InvalidVersion(String),
    #[error(
        "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive"
    )]
    InvalidCompatibilityLevel,
    #[error("Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT")]
    InvalidMode,
    #[error("{0}")]
    OperationNotPermitted(String),
    #[error("One or more references exist to the schema {{subject={subject},version={version}}}")]
    ReferenceExists { subject: String, version: i32 },
    #[error("Subject '{0}' is not a valid subject name")]
    InvalidSubject(String),
}

impl RegistryError {
    /// The HTTP status Confluent's API answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            RegistryError::SubjectNotFound(_)
            | RegistryError::VersionNotFound { .. }
            | RegistryError::SchemaNotFound(_)
            | RegistryError::SubjectSoftDeleted(_)
            | RegistryError::SubjectNotSoftDeleted(_)
            | RegistryError::VersionNotSoftDeleted { .. }
            | RegistryError::SubjectCompatibilityNotConfigured(_)
            | RegistryError::SubjectModeNotConfigured(_) => 404,
            RegistryError::Incompatible { .. } | RegistryError::IdInUse { .. } => 409,
            RegistryError::InvalidSchema(_)
            | RegistryError::InvalidVersion(_)
            | RegistryError::InvalidCompatibilityLevel
            | RegistryError::InvalidMode
            | RegistryError::OperationNotPermitted(_)
            | RegistryError::ReferenceExists { .. }
            | RegistryError::InvalidSubject(_) => 422,
        }
    }

    /// Confluent's `error_code` in the answer's body.
    pub fn error_code(&self) -> u32 {
        match self {
            RegistryError::SubjectNotFound(_) => 40401,
            RegistryError::VersionNotFound { .. } => 40402,
            RegistryError::SchemaNotFound(_) => 40403,
            RegistryError::SubjectSoftDeleted(_) => 40404,
            RegistryError::SubjectNotSoftDeleted(_) => 40405,
            RegistryError::VersionNotSoftDeleted { .. } => 40407,
            RegistryError::SubjectCompatibilityNotConfigured(_) => 40408,
            RegistryError::SubjectModeNotConfigured(_) => 40409,
            RegistryError::Incompatible { .. } => 409,
            RegistryError::IdInUse { .. } => 40905,
            RegistryError::InvalidSchema(_) => 42201,
            RegistryError::InvalidVersion(_) => 42202,
            RegistryError::InvalidCompatibilityLevel => 42203,
            RegistryError::InvalidMode => 42204,
            RegistryError::OperationNotPermitted(_) => 42205,
            RegistryError::ReferenceExists { .. } => 42206,
            RegistryError::InvalidSubject(_) => 42208,
        }
    }
}
