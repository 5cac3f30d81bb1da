//! Requests another broker must answer, passed on to it: every write goes to the leader
//! of `_schemas` (the registry's one writer), and a read to it when this broker holds no
//! replica of the topic (Confluent's followers forward to the leader in the same way).
//! The caller's credentials go along: the writer authenticates and authorizes the request
//! again. A request is passed on once; one that arrives passed on is answered here.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{MAX_BODY, Shared, error, refused};

/// Marks a request one broker passed on to another (its value: the sender's id).
const FORWARDED: HeaderName = HeaderName::from_static("x-strata-forwarded-by");

/// How long a passed-on request may take (the writer waits up to 10 s for a write to
/// be replicated).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a request changes the registry. Lookups and compatibility checks are POSTs
/// that only read.
fn is_write(method: &Method, path: &str) -> bool {
    match *method {
        Method::GET | Method::HEAD | Method::OPTIONS => false,
        Method::POST => {
            !(path.starts_with("/compatibility/")
                || (path.starts_with("/subjects/") && !path.ends_with("/versions")))
        }
        _ => true,
    }
}

/// The middleware: answers here, or passes the request on to the broker that must.
pub(super) async fn to_writer(State(b): State<Shared>, req: Request, next: Next) -> Response {
    if req.headers().contains_key(&FORWARDED) {
        return next.run(req).await;
    }
    let write = is_write(req.method(), req.uri().path());
    match b.schemas.route(write).await {
        Ok(None) => next.run(req).await,
        Ok(Some((node, host, port))) => {
            let me = b.config.node_id;
            forward(req, me, node, &host, port)
                .await
                .unwrap_or_else(|message| error(503, 50003, message))
        }
        Err(e) => refused(e),
    }
}

/// One client for every forwarded request, so connections to the writer are reused.
fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    if let Some(c) = CLIENT.get() {
        return Ok(c);
    }
    let c = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(CLIENT.get_or_init(|| c))
}

async fn forward(
    req: Request,
    me: i32,
    node: i32,
    host: &str,
    port: u16,
) -> Result<Response, String> {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let url = format!("http://{host}:{port}{path}");
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| format!("the request body: {e}"))?;
    let mut out = client()
        .map_err(|e| format!("cannot reach broker {node}'s registry: {e}"))?
        .request(parts.method, &url)
        .header(&FORWARDED, me.to_string())
        .body(body);
    for name in [header::AUTHORIZATION, header::CONTENT_TYPE, header::ACCEPT] {
        if let Some(v) = parts.headers.get(&name) {
            out = out.header(name, v);
        }
    }
    let answer = out.send().await.map_err(|e| {
        format!("cannot reach broker {node}'s registry at {url} (it writes the schema registry): {e}; retry")
    })?;
    let status =
        StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = answer.headers().get(header::CONTENT_TYPE).cloned();
    let bytes = answer.bytes().await.map_err(|e| {
        format!("broker {node}'s registry answered {status} but not its body: {e}; retry")
    })?;
    let mut response = (status, Body::from(bytes)).into_response();
    if let Some(ct) = content_type {
        response.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_and_checks_are_reads() {
        assert!(!is_write(&Method::POST, "/subjects/orders-value"));
        assert!(!is_write(
            &Method::POST,
            "/compatibility/subjects/orders-value/versions/latest"
        ));
        assert!(is_write(&Method::POST, "/subjects/orders-value/versions"));
        assert!(is_write(&Method::PUT, "/config"));
        assert!(is_write(&Method::DELETE, "/subjects/orders-value"));
        assert!(!is_write(&Method::GET, "/subjects"));
    }
}
