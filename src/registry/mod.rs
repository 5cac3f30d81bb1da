//! The schema registry's REST API, as Confluent Schema Registry's clients use it
//! (`SchemaRegistryClient`, the serializers, `curl`), over the broker's registry service
//! (`strata_broker::schemas`; its state is the `_schemas` topic). Served on
//! `--schema-registry-addr`, under the same `--http-auth` as the HTTP address.
//!
//! Errors are Confluent's: `{"error_code": 40401, "message": "..."}` with its statuses.

mod access;
mod forward;

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use strata_broker::Broker;
use strata_broker::schemas::SchemasError;
use strata_gateway::auth::Caller;
use strata_registry::{Compatibility, Mode, NewSchema, Reference, RegistryError, SchemaType};

/// Confluent's media type; plain JSON is taken and answered too.
const MEDIA_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// The largest request body: a schema with its references (Confluent has no fixed limit;
/// this bounds what a client makes the registry hold).
const MAX_BODY: usize = 4 << 20;

type Shared = Arc<Broker>;

/// A registry answer: its JSON body with Confluent's media type.
fn ok(v: Value) -> Response {
    ([(header::CONTENT_TYPE, MEDIA_TYPE)], Json(v)).into_response()
}

/// An error in Confluent's shape.
fn error(status: u16, code: u32, message: impl Into<String>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, MEDIA_TYPE)],
        Json(json!({"error_code": code, "message": message.into()})),
    )
        .into_response()
}

fn refused(e: SchemasError) -> Response {
    match e {
        SchemasError::Registry(e) => error(e.http_status(), e.error_code(), e.to_string()),
        // Confluent's 50003: the request could not reach (or be done by) the writer.
        SchemasError::Unavailable { message, .. } => error(503, 50003, message),
    }
}

fn bad(e: RegistryError) -> Response {
    refused(SchemasError::Registry(e))
}

/// The routes, under `auth` (the HTTP address's `--http-auth`).
pub fn router(
    broker: Shared,
    auth: Option<strata_gateway::Auth>,
    audit: Option<strata_gateway::Audit>,
) -> Router {
    let api = Router::new()
        .route("/", get(|| async { ok(json!({})) }))
        .route("/schemas/types", get(schema_types))
        .route("/subjects", get(list_subjects))
        .route("/subjects/{subject}", post(lookup).delete(delete_subject))
        .route(
            "/subjects/{subject}/versions",
            get(list_versions).post(register),
        )
        .route(
            "/subjects/{subject}/versions/{version}",
            get(get_version).delete(delete_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/schema",
            get(get_version_schema),
        )
        .route(
            "/subjects/{subject}/versions/{version}/referencedby",
            get(referenced_by),
        )
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(raw_schema_by_id))
        .route("/schemas/ids/{id}/versions", get(versions_by_id))
        .route("/schemas/ids/{id}/subjects", get(subjects_by_id))
        .route(
            "/config",
            get(get_global_config)
                .put(put_global_config)
                .delete(delete_global_config),
        )
        .route(
            "/config/{subject}",
            get(get_config).put(put_config).delete(delete_config),
        )
        .route(
            "/mode",
            get(get_global_mode)
                .put(put_global_mode)
                .delete(delete_global_mode),
        )
        .route(
            "/mode/{subject}",
            get(get_mode).put(put_mode).delete(delete_mode),
        )
        .route(
            "/compatibility/subjects/{subject}/versions/{version}",
            post(check_version),
        )
        .route(
            "/compatibility/subjects/{subject}/versions",
            post(check_all),
        )
        // Inside authentication: authorized here, then answered here or by the writer.
        .route_layer(axum::middleware::from_fn_with_state(
            broker.clone(),
            forward::to_writer,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            broker.clone(),
            access::guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(broker);
    strata_gateway::require_auth(api, auth, audit)
}

/// `?deleted=true` (soft-deleted subjects and versions included).
#[derive(Deserialize, Default)]
struct DeletedQuery {
    #[serde(default, deserialize_with = "lenient_bool")]
    deleted: bool,
}

/// A list's query, as Confluent's clients send it: soft-deleted entries too (`deleted`)
/// or only them (`deleted_only`), a page (`offset`, `limit`; -1 is no limit), and for
/// subjects a name prefix (`subject`).
#[derive(Deserialize)]
struct ListQuery {
    #[serde(default, deserialize_with = "lenient_bool")]
    deleted: bool,
    #[serde(default, deserialize_with = "lenient_bool")]
    deleted_only: bool,
    #[serde(default)]
    offset: usize,
    #[serde(default = "no_limit")]
    limit: i64,
    #[serde(default)]
    subject: Option<String>,
}

/// A boolean query parameter in any case (`true`, `True`, `TRUE`: Confluent's server takes
/// them all, and Python clients send `False`).
fn lenient_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let s = String::deserialize(d)?;
    match s.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" | "" => Ok(false),
        _ => Err(serde::de::Error::custom(format!(
            "'{s}' is not true or false"
        ))),
    }
}

fn no_limit() -> i64 {
    -1
}

impl ListQuery {
    /// The page of `all` this query asks for; `live` tells whether an entry is not
    /// soft-deleted.
    fn page<T>(&self, all: Vec<T>, live: impl Fn(&T) -> bool) -> Vec<T> {
        let take = usize::try_from(self.limit).unwrap_or(usize::MAX);
        all.into_iter()
            .filter(|x| {
                if self.deleted_only {
                    !live(x)
                } else {
                    self.deleted || live(x)
                }
            })
            .skip(self.offset)
            .take(take)
            .collect()
    }
}

/// `?deleted=` and Confluent's `?format=` (`serialized`: a Protobuf schema's descriptor).
#[derive(Deserialize, Default)]
struct ReadQuery {
    #[serde(default, deserialize_with = "lenient_bool")]
    deleted: bool,
    #[serde(default)]
    format: Option<String>,
}

#[derive(Deserialize, Default)]
struct PermanentQuery {
    #[serde(default, deserialize_with = "lenient_bool")]
    permanent: bool,
}

/// A schema as a request gives it (Confluent's `RegisterSchemaRequest`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SchemaBody {
    schema: String,
    #[serde(default)]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<Reference>,
    #[serde(default)]
    id: Option<i32>,
    #[serde(default)]
    version: Option<i32>,
    /// Confluent's rule sets and metadata (data contracts): not built here.
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    rule_set: Option<Value>,
}

impl SchemaBody {
    fn parse(body: &[u8]) -> Result<NewSchema, RegistryError> {
        let b: SchemaBody = serde_json::from_slice(body)
            .map_err(|e| RegistryError::InvalidSchema(format!("the request body: {e}")))?;
        if b.metadata.as_ref().is_some_and(|m| !m.is_null())
            || b.rule_set.as_ref().is_some_and(|r| !r.is_null())
        {
            return Err(RegistryError::InvalidSchema(
                "metadata and ruleSet (data contracts) are not supported by this registry".into(),
            ));
        }
        let schema_type = match &b.schema_type {
            Some(t) => SchemaType::parse(t)?,
            None => SchemaType::Avro,
        };
        Ok(NewSchema {
            schema_type,
            schema: b.schema,
            references: b.references,
            id: b.id,
            version: b.version,
        })
    }
}

/// A version's JSON, as Confluent answers it (`schemaType` and `references` only when
/// not the defaults).
fn version_json(v: &strata_registry::VersionInfo) -> Value {
    let mut out = json!({
        "subject": v.subject,
        "version": v.version,
        "id": v.id,
        "schema": v.schema.schema,
    });
    add_type_and_refs(&mut out, &v.schema);
    out
}

fn add_type_and_refs(out: &mut Value, s: &strata_registry::StoredSchema) {
    if s.schema_type != SchemaType::Avro {
        out["schemaType"] = json!(s.schema_type.name());
    }
    if !s.references.is_empty() {
        out["references"] = json!(s.references);
    }
}

async fn schema_types() -> Response {
    ok(json!(["AVRO", "JSON", "PROTOBUF"]))
}

async fn list_subjects(
    State(b): State<Shared>,
    caller: Option<Extension<Caller>>,
    Query(q): Query<ListQuery>,
) -> Response {
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    let (all, live) = b.schemas.read(|r| (r.subjects(true), r.subjects(false)));
    let prefix = q.subject.clone().unwrap_or_default();
    let caller = caller.map(|Extension(c)| c);
    let all: Vec<String> = all
        .into_iter()
        .filter(|s| s.starts_with(&prefix) && access::may_read(&b, caller.as_ref(), s))
        .collect();
    ok(json!(q.page(all, |s| live.contains(s))))
}

async fn list_versions(
    State(b): State<Shared>,
    Path(subject): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    let found = b.schemas.read(|r| {
        let all = r.versions(&subject, q.deleted || q.deleted_only)?;
        let live = r.versions(&subject, false).unwrap_or_default();
        Ok::<_, RegistryError>(q.page(all, |v| live.contains(v)))
    });
    match found {
        Ok(v) => ok(json!(v)),
        Err(e) => bad(e),
    }
}

async fn get_version(
    State(b): State<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Query<ReadQuery>,
) -> Response {
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    match b.schemas.read(|r| {
        let mut v = r.version(&subject, &version, q.deleted)?;
        v.schema.schema = r.render(&v.schema, q.format.as_deref())?;
        Ok::<_, RegistryError>(v)
    }) {
        Ok(v) => ok(version_json(&v)),
        Err(e) => bad(e),
    }
}

async fn get_version_schema(
    State(b): State<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Query<ReadQuery>,
) -> Response {
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    match b.schemas.read(|r| {
        let v = r.version(&subject, &version, q.deleted)?;
        r.render(&v.schema, q.format.as_deref())
    }) {
        Ok(text) => raw(text),
        Err(e) => bad(e),
    }
}

/// A schema's text as the body (Confluent's `/schema` endpoints).
fn raw(text: String) -> Response {
    ([(header::CONTENT_TYPE, MEDIA_TYPE)], text).into_response()
}

async fn referenced_by(
    State(b): State<Shared>,
    Path((subject, version)): Path<(String, String)>,
) -> Response {
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    match b.schemas.read(|r| {
        r.version(&subject, &version, false)
            .map(|v| r.referenced_by(&subject, v.version))
    }) {
        Ok(ids) => ok(json!(ids)),
        Err(e) => bad(e),
    }
}

async fn register(
    State(b): State<Shared>,
    Path(subject): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let s = match SchemaBody::parse(&body) {
        Ok(s) => s,
        Err(e) => return bad(e),
    };
    let done = b
        .schemas
        .write(|r| {
            let done = r.register(&subject, &s)?;
            Ok((done.id, done.records))
        })
        .await;
    match done {
        Ok(id) => ok(json!({"id": id})),
        Err(e) => refused(e),
    }
}

async fn lookup(
    State(b): State<Shared>,
    Path(subject): Path<String>,
    Query(q): Query<DeletedQuery>,
    body: axum::body::Bytes,
) -> Response {
    let s = match SchemaBody::parse(&body) {
        Ok(s) => s,
        Err(e) => return bad(e),
    };
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    match b.schemas.read(|r| {
        let (id, version) = r.lookup(&subject, &s, q.deleted)?;
        r.version(&subject, &version.to_string(), true)
            .map(|v| (id, v))
    }) {
        Ok((_, v)) => ok(version_json(&v)),
        Err(e) => bad(e),
    }
}

async fn delete_subject(
    State(b): State<Shared>,
    Path(subject): Path<String>,
    Query(q): Query<PermanentQuery>,
) -> Response {
    match b
        .schemas
        .write(|r| r.delete_subject(&subject, q.permanent))
        .await
    {
        Ok(versions) => ok(json!(versions)),
        Err(e) => refused(e),
    }
}

async fn delete_version(
    State(b): State<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Query<PermanentQuery>,
) -> Response {
    match b
        .schemas
        .write(|r| r.delete_version(&subject, &version, q.permanent))
        .await
    {
        Ok(v) => ok(json!(v)),
        Err(e) => refused(e),
    }
}

/// The id asked for, once the registry is current and the caller may read a subject
/// that uses it (an id only other subjects use is not found, as one that does not exist).
async fn visible_id(
    b: &Broker,
    caller: Option<Extension<Caller>>,
    id: &str,
) -> Result<i32, Response> {
    let id = parse_id(id).map_err(bad)?;
    b.schemas.current().await.map_err(refused)?;
    let caller = caller.map(|Extension(c)| c);
    let visible = b.schemas.read(|r| {
        r.versions_of(id, true)
            .any(|(s, _)| access::may_read(b, caller.as_ref(), s))
    });
    if visible || !b.security.authorizer_enabled() {
        Ok(id)
    } else {
        Err(bad(RegistryError::SchemaNotFound(format!("with id {id}"))))
    }
}

fn parse_id(id: &str) -> Result<i32, RegistryError> {
    id.parse::<i32>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| RegistryError::SchemaNotFound(format!("with id {id}")))
}

async fn schema_by_id(
    State(b): State<Shared>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    Query(q): Query<ReadQuery>,
) -> Response {
    let id = match visible_id(&b, caller, &id).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    match b.schemas.read(|r| {
        let s = r.schema(id)?;
        Ok::<_, RegistryError>((s.clone(), r.render(s, q.format.as_deref())?))
    }) {
        Ok((s, text)) => {
            let mut out = json!({"schema": text});
            add_type_and_refs(&mut out, &s);
            ok(out)
        }
        Err(e) => bad(e),
    }
}

async fn raw_schema_by_id(
    State(b): State<Shared>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    Query(q): Query<ReadQuery>,
) -> Response {
    let id = match visible_id(&b, caller, &id).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    match b
        .schemas
        .read(|r| r.schema(id).and_then(|s| r.render(s, q.format.as_deref())))
    {
        Ok(s) => raw(s),
        Err(e) => bad(e),
    }
}

async fn versions_by_id(
    State(b): State<Shared>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
) -> Response {
    let id = match visible_id(&b, caller, &id).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    let found = b.schemas.read(|r| {
        r.schema(id).map(|_| {
            r.versions_of(id, false)
                .map(|(s, v)| json!({"subject": s, "version": v}))
                .collect::<Vec<_>>()
        })
    });
    match found {
        Ok(v) => ok(json!(v)),
        Err(e) => bad(e),
    }
}

async fn subjects_by_id(
    State(b): State<Shared>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
) -> Response {
    let id = match visible_id(&b, caller, &id).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    let found = b.schemas.read(|r| {
        r.schema(id).map(|_| {
            let mut s: Vec<&str> = r.versions_of(id, false).map(|(s, _)| s).collect();
            s.dedup();
            s.into_iter().map(str::to_string).collect::<Vec<_>>()
        })
    });
    match found {
        Ok(v) => ok(json!(v)),
        Err(e) => bad(e),
    }
}

/// A compatibility body: Confluent takes `compatibility` (and reports
/// `compatibilityLevel` on GET).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigBody {
    compatibility: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ConfigQuery {
    #[serde(default, deserialize_with = "lenient_bool")]
    default_to_global: bool,
}

async fn get_global_config(State(b): State<Shared>) -> Response {
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    let level = b.schemas.read(|r| r.compatibility(None));
    ok(json!({"compatibilityLevel": level.name()}))
}

async fn get_config(
    State(b): State<Shared>,
    Path(subject): Path<String>,
    Query(q): Query<ConfigQuery>,
) -> Response {
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    let level = b.schemas.read(|r| {
        if q.default_to_global {
            Ok(r.compatibility(Some(&subject)))
        } else {
            r.subject_compatibility(&subject)
        }
    });
    match level {
        Ok(l) => ok(json!({"compatibilityLevel": l.name()})),
        Err(e) => bad(e),
    }
}

async fn set_config(b: &Broker, subject: Option<&str>, body: &[u8]) -> Response {
    let level = match serde_json::from_slice::<ConfigBody>(body) {
        Ok(c) => match Compatibility::parse(&c.compatibility) {
            Ok(l) => l,
            Err(e) => return bad(e),
        },
        Err(_) => return bad(RegistryError::InvalidCompatibilityLevel),
    };
    match b
        .schemas
        .write(|r| Ok(((), r.set_compatibility(subject, level)?)))
        .await
    {
        Ok(()) => ok(json!({"compatibility": level.name()})),
        Err(e) => refused(e),
    }
}

async fn put_global_config(State(b): State<Shared>, body: axum::body::Bytes) -> Response {
    set_config(&b, None, &body).await
}

async fn put_config(
    State(b): State<Shared>,
    Path(subject): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    set_config(&b, Some(&subject), &body).await
}

async fn remove_config(b: &Broker, subject: Option<&str>) -> Response {
    let before = b.schemas.read(|r| r.compatibility(subject));
    match b
        .schemas
        .write(|r| Ok(((), r.delete_compatibility(subject)?)))
        .await
    {
        Ok(()) => ok(json!({"compatibilityLevel": before.name()})),
        Err(e) => refused(e),
    }
}

async fn delete_global_config(State(b): State<Shared>) -> Response {
    remove_config(&b, None).await
}

async fn delete_config(State(b): State<Shared>, Path(subject): Path<String>) -> Response {
    remove_config(&b, Some(&subject)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModeBody {
    mode: String,
}

async fn get_global_mode(State(b): State<Shared>) -> Response {
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    ok(json!({"mode": b.schemas.read(|r| r.mode(None)).name()}))
}

async fn get_mode(
    State(b): State<Shared>,
    Path(subject): Path<String>,
    Query(q): Query<ConfigQuery>,
) -> Response {
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    let mode = b.schemas.read(|r| {
        if q.default_to_global {
            Ok(r.mode(Some(&subject)))
        } else {
            r.subject_mode(&subject)
        }
    });
    match mode {
        Ok(m) => ok(json!({"mode": m.name()})),
        Err(e) => bad(e),
    }
}

async fn set_mode(b: &Broker, subject: Option<&str>, body: &[u8]) -> Response {
    let mode = match serde_json::from_slice::<ModeBody>(body) {
        Ok(m) => match Mode::parse(&m.mode) {
            Ok(m) => m,
            Err(e) => return bad(e),
        },
        Err(_) => return bad(RegistryError::InvalidMode),
    };
    match b
        .schemas
        .write(|r| Ok(((), r.set_mode(subject, mode)?)))
        .await
    {
        Ok(()) => ok(json!({"mode": mode.name()})),
        Err(e) => refused(e),
    }
}

async fn put_global_mode(State(b): State<Shared>, body: axum::body::Bytes) -> Response {
    set_mode(&b, None, &body).await
}

async fn put_mode(
    State(b): State<Shared>,
    Path(subject): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    set_mode(&b, Some(&subject), &body).await
}

async fn remove_mode(b: &Broker, subject: Option<&str>) -> Response {
    let before = b.schemas.read(|r| r.mode(subject));
    match b.schemas.write(|r| Ok(((), r.delete_mode(subject)?))).await {
        Ok(()) => ok(json!({"mode": before.name()})),
        Err(e) => refused(e),
    }
}

async fn delete_global_mode(State(b): State<Shared>) -> Response {
    remove_mode(&b, None).await
}

async fn delete_mode(State(b): State<Shared>, Path(subject): Path<String>) -> Response {
    remove_mode(&b, Some(&subject)).await
}

#[derive(Deserialize, Default)]
struct VerboseQuery {
    #[serde(default, deserialize_with = "lenient_bool")]
    verbose: bool,
}

async fn check(
    b: &Broker,
    subject: &str,
    version: Option<&str>,
    verbose: bool,
    body: &[u8],
) -> Response {
    let s = match SchemaBody::parse(body) {
        Ok(s) => s,
        Err(e) => return bad(e),
    };
    if let Err(e) = b.schemas.current().await {
        return refused(e);
    }
    match b.schemas.read(|r| r.check(subject, version, &s)) {
        Ok(problems) => {
            let mut out = json!({"is_compatible": problems.is_empty()});
            if verbose {
                out["messages"] = json!(problems);
            }
            ok(out)
        }
        Err(e) => bad(e),
    }
}

async fn check_version(
    State(b): State<Shared>,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Query<VerboseQuery>,
    body: axum::body::Bytes,
) -> Response {
    check(&b, &subject, Some(&version), q.verbose, &body).await
}

async fn check_all(
    State(b): State<Shared>,
    Path(subject): Path<String>,
    Query(q): Query<VerboseQuery>,
    body: axum::body::Bytes,
) -> Response {
    check(&b, &subject, None, q.verbose, &body).await
}
