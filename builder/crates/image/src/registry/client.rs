//! The HTTP side: a [`Client`] holding the connection pool, settings and the authentication
//! state, and a per-operation [`Session`] that sends requests, answers `401` challenges, retries
//! transient failures and counts what it sent.

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;

use super::auth::{parse_www_authenticate, Challenge, CredentialSource, Credentials, ENV_PASSWORD, ENV_USER};
use super::reference::host_of;
use super::{io_err, RegistryError};

/// Default size of one `PATCH` of a chunked upload; blobs up to this size go in one `PUT`.
pub(super) const DEFAULT_CHUNK_SIZE: u64 = 16 * 1024 * 1024;
/// Default number of attempts of a request (or of one chunk) before giving up.
/// Largest manifest pushed or pulled (distribution's default limit is 4 MiB).
pub(super) const MAX_MANIFEST: u64 = 4 * 1024 * 1024;

const DEFAULT_ATTEMPTS: u32 = 5;
/// Default delay before the first retry; it doubles with each further attempt.
const DEFAULT_BACKOFF: Duration = Duration::from_millis(500);
/// Longest delay between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How much of an error body is kept for the message.
const MAX_ERROR_BODY: u64 = 64 * 1024;
/// Largest token response read.
const MAX_TOKEN_BODY: u64 = 1024 * 1024;

/// A registry client: connection pool, settings, credentials and cached tokens.
///
/// One client can serve several operations (also from several threads); bearer tokens are
/// cached per registry and scope and fetched again when a registry rejects one (they expire).
pub struct Client {
    agent: ureq::Agent,
    insecure: Vec<String>,
    credentials: CredentialSource,
    chunk_size: u64,
    max_attempts: u32,
    backoff: Duration,
    state: Mutex<AuthState>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("insecure", &self.insecure)
            .field("chunk_size", &self.chunk_size)
            .field("max_attempts", &self.max_attempts)
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

/// What the client learned about the registries it talked to.
#[derive(Default)]
struct AuthState {
    /// The challenge each registry answered with.
    challenges: HashMap<String, Challenge>,
    /// Bearer tokens by (registry, scope).
    tokens: HashMap<(String, String), String>,
    /// Credentials looked up, by registry.
    credentials: HashMap<String, Option<Credentials>>,
}

impl Default for Client {
    /// [`Client::new`] with no extra plain-HTTP hosts.
    fn default() -> Self {
        Self::new(Vec::<String>::new())
    }
}

impl Client {
    /// A client that talks plain HTTP to the loopback registries (`localhost`, `127.0.0.0/8`,
    /// `[::1]`, as Docker does) and to `insecure_http_hosts` (`host` or `host:port`), HTTPS to
    /// every other, and takes credentials from the environment or Docker's `config.json`.
    pub fn new<I, S>(insecure_http_hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(30))
            .timeout_read(Duration::from_mins(5))
            .timeout_write(Duration::from_mins(5))
            .user_agent(concat!("stackbuild/", env!("CARGO_PKG_VERSION")))
            // Redirects (blob downloads from object storage) never carry our Authorization.
            .redirect_auth_headers(ureq::RedirectAuthHeaders::Never)
            .build();
        Self {
            agent,
            insecure: insecure_http_hosts.into_iter().map(Into::into).collect(),
            credentials: CredentialSource::Ambient { docker_config: None },
            chunk_size: DEFAULT_CHUNK_SIZE,
            max_attempts: DEFAULT_ATTEMPTS,
            backoff: DEFAULT_BACKOFF,
            state: Mutex::new(AuthState::default()),
        }
    }

    /// Uses no credentials at all (ignores the environment and Docker's config).
    #[must_use]
    pub fn anonymous(mut self) -> Self {
        self.credentials = CredentialSource::Anonymous;
        self
    }

    /// Uses `credentials` for `registry` (`host[:port]`) instead of the environment; may be
    /// called for several registries.
    #[must_use]
    pub fn with_credentials(mut self, registry: &str, credentials: Credentials) -> Self {
        let mut map = match self.credentials {
            CredentialSource::Fixed(map) => map,
            _ => BTreeMap::new(),
        };
        map.insert(registry.to_string(), credentials);
        self.credentials = CredentialSource::Fixed(map);
        self
    }

    /// Reads Docker credentials from this `config.json` instead of the default one (the
    /// environment variables still come first).
    #[must_use]
    pub fn with_docker_config(mut self, path: impl Into<PathBuf>) -> Self {
        self.credentials = CredentialSource::Ambient { docker_config: Some(path.into()) };
        self
    }

    /// Sets the chunk size of uploads (at least 1 byte); blobs up to it go in one request.
    #[must_use]
    pub fn with_chunk_size(mut self, bytes: u64) -> Self {
        self.chunk_size = bytes.max(1);
        self
    }

    /// Sets the attempts per request or chunk (at least 1) and the first retry delay.
    #[must_use]
    pub fn with_retries(mut self, max_attempts: u32, backoff: Duration) -> Self {
        self.max_attempts = max_attempts.max(1);
        self.backoff = backoff;
        self
    }

    /// The upload chunk size.
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// The attempts per request or chunk.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Whether `registry` (`host[:port]`) is spoken to over plain HTTP.
    pub fn uses_http(&self, registry: &str) -> bool {
        let host = host_of(registry);
        host == "localhost"
            || host == "::1"
            || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
            || self.insecure.iter().any(|h| h == registry || h == host)
    }

    /// `http(s)://registry`.
    pub(super) fn base_url(&self, registry: &str) -> String {
        let scheme = if self.uses_http(registry) { "http" } else { "https" };
        format!("{scheme}://{registry}")
    }

    /// Starts counting the requests of one operation.
    pub(super) fn session(&self) -> Session<'_> {
        Session { client: self, requests: 0 }
    }

    /// The delay before retry number `attempt` (1-based).
    pub(super) fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.backoff.saturating_mul(factor).min(MAX_BACKOFF)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, AuthState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn credentials(&self, registry: &str) -> Result<Option<Credentials>, RegistryError> {
        if let Some(found) = self.state().credentials.get(registry) {
            return Ok(found.clone());
        }
        let found = self.credentials.lookup(registry)?;
        self.state().credentials.insert(registry.to_string(), found.clone());
        Ok(found)
    }
}

/// The body of a request, in a form that can be sent again (after a `401` or a failure).
#[derive(Clone, Copy, Debug)]
pub(super) enum Body<'a> {
    /// No body.
    Empty,
    /// Bytes in memory (manifests).
    Bytes(&'a [u8]),
    /// `len` bytes of a file from `offset`, streamed.
    File {
        /// The file.
        path: &'a Path,
        /// Where to start.
        offset: u64,
        /// How many bytes.
        len: u64,
    },
}

/// One request.
#[derive(Debug)]
pub(super) struct Req<'a> {
    /// What the request is for, for messages (`upload of blob sha256:..`).
    pub what: &'a str,
    /// The method.
    pub method: &'static str,
    /// The absolute URL.
    pub url: String,
    /// The registry (`host[:port]`), for credentials and tokens.
    pub registry: &'a str,
    /// The token scope (`repository:name:pull,push`, space-separated if several).
    pub scope: &'a str,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Body<'a>,
}

/// The requests of one operation.
pub(super) struct Session<'c> {
    /// The client.
    pub client: &'c Client,
    /// HTTP requests sent so far (token requests and retries included).
    pub requests: u64,
}

/// `408`, `429` and server errors are worth another try.
pub(super) fn is_retryable_status(status: u16) -> bool {
    status == 408 || status == 429 || status >= 500
}

#[derive(Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

impl Session<'_> {
    /// Sends `req`, answering one authentication challenge; every HTTP status is `Ok` except
    /// a `401` that persists, which is [`RegistryError::Unauthorized`].
    pub(super) fn send(&mut self, req: &Req<'_>) -> Result<ureq::Response, RegistryError> {
        let mut answered = false;
        loop {
            let auth = self.authorization(req)?;
            let resp = self.send_once(req, auth.as_deref())?;
            if resp.status() != 401 {
                return Ok(resp);
            }
            if answered {
                return Err(self.unauthorized(req, resp));
            }
            answered = true;
            let challenges: Vec<Challenge> =
                resp.all("www-authenticate").into_iter().flat_map(parse_www_authenticate).collect();
            let chosen = challenges
                .iter()
                .find(|c| c.scheme == "bearer" && c.param("realm").is_some())
                .or_else(|| challenges.iter().find(|c| c.scheme == "basic"))
                .cloned();
            let Some(chosen) = chosen else { return Err(self.unauthorized(req, resp)) };
            if chosen.scheme == "basic" && self.client.credentials(req.registry)?.is_none() {
                return Err(self.unauthorized(req, resp));
            }
            let mut state = self.client.state();
            state.tokens.remove(&(req.registry.to_string(), req.scope.to_string()));
            state.challenges.insert(req.registry.to_string(), chosen);
        }
    }

    /// Sends `req` again after transport failures and retryable statuses (see
    /// [`is_retryable_status`]), with exponential backoff; for requests that may be repeated.
    pub(super) fn send_retrying(&mut self, req: &Req<'_>) -> Result<ureq::Response, RegistryError> {
        let mut attempt = 1;
        loop {
            let result = self.send(req);
            let failure = match &result {
                Ok(resp) if is_retryable_status(resp.status()) => format!("HTTP {}", resp.status()),
                Err(e @ RegistryError::Transport { .. }) => e.to_string(),
                _ => return result,
            };
            if attempt >= self.client.max_attempts {
                return result;
            }
            tracing::warn!("{} ({failure}); retrying", req.what);
            std::thread::sleep(self.client.backoff(attempt));
            attempt += 1;
        }
    }

    fn send_once(&mut self, req: &Req<'_>, auth: Option<&str>) -> Result<ureq::Response, RegistryError> {
        let mut request = self.client.agent.request(req.method, &req.url);
        for (name, value) in &req.headers {
            request = request.set(name, value);
        }
        if let Some(auth) = auth {
            request = request.set("Authorization", auth);
        }
        self.requests += 1;
        tracing::debug!("{} {}", req.method, req.url);
        let result = match req.body {
            Body::Empty if matches!(req.method, "GET" | "HEAD" | "DELETE") => request.call(),
            Body::Empty => request.send_bytes(&[]),
            Body::Bytes(bytes) => request.send_bytes(bytes),
            Body::File { path, offset, len } => {
                let mut file = File::open(path).map_err(io_err("opening", path))?;
                file.seek(SeekFrom::Start(offset)).map_err(io_err("seeking in", path))?;
                request.set("Content-Length", &len.to_string()).send(file.take(len))
            }
        };
        match result {
            Ok(resp) | Err(ureq::Error::Status(_, resp)) => Ok(resp),
            Err(ureq::Error::Transport(source)) => Err(RegistryError::Transport {
                what: req.what.to_string(),
                method: req.method.to_string(),
                url: req.url.clone(),
                source: Box::new(source),
            }),
        }
    }

    /// The `Authorization` header for `req`: none until the registry has challenged, then
    /// Basic credentials or a bearer token for the request's scope. Never sent to another origin.
    fn authorization(&mut self, req: &Req<'_>) -> Result<Option<String>, RegistryError> {
        let base = self.client.base_url(req.registry);
        if !req.url.strip_prefix(&base).is_some_and(|rest| rest.starts_with('/')) {
            return Ok(None);
        }
        let (challenge, token) = {
            let state = self.client.state();
            let Some(challenge) = state.challenges.get(req.registry).cloned() else { return Ok(None) };
            let token = state.tokens.get(&(req.registry.to_string(), req.scope.to_string())).cloned();
            (challenge, token)
        };
        if challenge.scheme == "basic" {
            return Ok(self.client.credentials(req.registry)?.map(|c| c.basic_header()));
        }
        if let Some(token) = token {
            return Ok(Some(format!("Bearer {token}")));
        }
        let token = self.fetch_token(&challenge, req.registry, req.scope)?;
        self.client.state().tokens.insert((req.registry.to_string(), req.scope.to_string()), token.clone());
        Ok(Some(format!("Bearer {token}")))
    }

    /// `GET realm?service=..&scope=..` (with Basic credentials when there are any and the realm
    /// is HTTPS or a plain-HTTP host this client trusts).
    fn fetch_token(
        &mut self,
        challenge: &Challenge,
        registry: &str,
        scope: &str,
    ) -> Result<String, RegistryError> {
        let realm = challenge.param("realm").unwrap_or_default();
        let fail = |reason: String| RegistryError::Token {
            realm: realm.to_string(),
            scope: scope.to_string(),
            reason,
        };
        let realm_authority = if let Some(rest) = realm.strip_prefix("https://") {
            rest.split('/').next().map(|_| None)
        } else {
            realm.strip_prefix("http://").map(|rest| Some(rest.split(['/', '?']).next().unwrap_or(rest)))
        };
        let Some(plain_http_authority) = realm_authority else {
            return Err(fail("the realm is not an http(s) URL".into()));
        };
        let mut url = realm.to_string();
        let mut params = Vec::new();
        if let Some(service) = challenge.param("service") {
            params.push(format!("service={}", percent_encode(service)));
        }
        for scope in scope.split(' ').filter(|s| !s.is_empty()) {
            params.push(format!("scope={}", percent_encode(scope)));
        }
        if !params.is_empty() {
            url = with_query(&url, &params.join("&"));
        }
        let credentials = self.client.credentials(registry)?;
        let send_credentials = plain_http_authority.is_none_or(|authority| self.client.uses_http(authority));
        let mut request = self.client.agent.get(&url);
        if let Some(credentials) = credentials.as_ref().filter(|_| send_credentials) {
            request = request.set("Authorization", &credentials.basic_header());
        }
        self.requests += 1;
        tracing::debug!("GET {url} (token)");
        let resp = match request.call() {
            Ok(resp) => resp,
            Err(ureq::Error::Status(status, resp)) => {
                let hint = if credentials.is_none() && (status == 401 || status == 403) {
                    format!(" (no credentials for {registry}: set {ENV_USER} and {ENV_PASSWORD})")
                } else {
                    String::new()
                };
                return Err(fail(format!("HTTP {status}: {}{hint}", error_body(resp))));
            }
            Err(ureq::Error::Transport(t)) => return Err(fail(t.to_string())),
        };
        let mut bytes = Vec::new();
        resp.into_reader().take(MAX_TOKEN_BODY).read_to_end(&mut bytes).map_err(|e| fail(e.to_string()))?;
        let parsed: TokenResponse = serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
        parsed
            .token
            .filter(|t| !t.is_empty())
            .or(parsed.access_token.filter(|t| !t.is_empty()))
            .ok_or_else(|| fail("the response has no token".into()))
    }

    fn unauthorized(&self, req: &Req<'_>, resp: ureq::Response) -> RegistryError {
        let has_credentials = self.client.credentials(req.registry).ok().flatten().is_some();
        let hint = if has_credentials {
            format!("check the credentials for {}", req.registry)
        } else {
            format!(
                "no credentials for {}: set {ENV_USER} and {ENV_PASSWORD}, or an `auths` entry in \
                 Docker's config.json",
                req.registry
            )
        };
        RegistryError::Unauthorized {
            what: req.what.to_string(),
            registry: req.registry.to_string(),
            body: error_body(resp),
            hint,
        }
    }
}

/// [`RegistryError::Http`] for an unexpected response.
pub(super) fn http_error(req: &Req<'_>, resp: ureq::Response) -> RegistryError {
    RegistryError::Http {
        what: req.what.to_string(),
        method: req.method.to_string(),
        url: req.url.clone(),
        status: resp.status(),
        body: error_body(resp),
    }
}

#[derive(Deserialize)]
struct ErrorsBody {
    errors: Vec<ErrorEntry>,
}

#[derive(Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    detail: Option<serde_json::Value>,
}

/// The registry's error: `CODE: message (detail)` for each entry of the distribution error
/// body (`{"errors":[{"code","message","detail"}]}`), else the start of the body as text.
pub(super) fn error_body(resp: ureq::Response) -> String {
    let mut bytes = Vec::new();
    let _ = resp.into_reader().take(MAX_ERROR_BODY).read_to_end(&mut bytes);
    if let Ok(body) = serde_json::from_slice::<ErrorsBody>(&bytes) {
        if !body.errors.is_empty() {
            let parts: Vec<String> = body
                .errors
                .iter()
                .map(|e| match &e.detail {
                    Some(detail) if !detail.is_null() => format!("{}: {} ({detail})", e.code, e.message),
                    _ => format!("{}: {}", e.code, e.message),
                })
                .collect();
            return parts.join("; ");
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    if text.is_empty() {
        "no error body".to_string()
    } else {
        text.chars().take(500).collect()
    }
}

/// Resolves a `Location` header against the URL of the request that returned it.
pub(super) fn resolve_location(request_url: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let scheme_end = request_url.find("://").map_or(0, |i| i + 3);
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{}{rest}", &request_url[..scheme_end]);
    }
    let path_start = request_url[scheme_end..].find('/').map_or(request_url.len(), |i| scheme_end + i);
    if location.starts_with('/') {
        return format!("{}{location}", &request_url[..path_start]);
    }
    let without_query = request_url.split('?').next().unwrap_or(request_url);
    let dir_end =
        without_query.rfind('/').filter(|&i| i >= path_start).map_or(without_query.len(), |i| i + 1);
    if dir_end == without_query.len() && !without_query.ends_with('/') {
        return format!("{without_query}/{location}");
    }
    format!("{}{location}", &without_query[..dir_end])
}

/// Appends `query` (`k=v&..`) to `url`, which may already have a query.
pub(super) fn with_query(url: &str, query: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{query}")
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub(super) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_listed_hosts_use_http() {
        let client = Client::new(["registry.internal", "10.0.0.1:5000"]);
        for host in [
            "127.0.0.1:5000",
            "localhost",
            "localhost:5000",
            "[::1]:5000",
            "127.1.2.3",
            "registry.internal:443",
        ] {
            assert!(client.uses_http(host), "{host}");
        }
        assert!(client.uses_http("10.0.0.1:5000"));
        for host in ["10.0.0.1:5001", "registry.example", "128.0.0.1:5000"] {
            assert!(!client.uses_http(host), "{host}");
        }
        assert_eq!(client.base_url("127.0.0.1:5000"), "http://127.0.0.1:5000");
        assert_eq!(client.base_url("registry.example"), "https://registry.example");
    }

    #[test]
    fn locations_resolve() {
        let req = "http://h:1/v2/a/blobs/uploads/";
        assert_eq!(
            resolve_location(req, "/v2/a/blobs/uploads/u?_state=x"),
            "http://h:1/v2/a/blobs/uploads/u?_state=x"
        );
        assert_eq!(resolve_location(req, "https://o/x"), "https://o/x");
        assert_eq!(resolve_location(req, "//o/x"), "http://o/x");
        assert_eq!(resolve_location(req, "u1"), "http://h:1/v2/a/blobs/uploads/u1");
        assert_eq!(resolve_location("http://h:1/v2/a/x?q=1", "u1"), "http://h:1/v2/a/u1");
        assert_eq!(resolve_location("http://h:1", "u1"), "http://h:1/u1");
        assert_eq!(
            with_query("http://h/u?_state=x", "digest=sha256:1"),
            "http://h/u?_state=x&digest=sha256:1"
        );
        assert_eq!(with_query("http://h/u", "digest=sha256:1"), "http://h/u?digest=sha256:1");
        assert_eq!(percent_encode("repository:a/b:pull,push"), "repository%3Aa%2Fb%3Apull%2Cpush");
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let client = Client::new(Vec::<String>::new()).with_retries(3, Duration::from_millis(100));
        assert_eq!(client.backoff(1), Duration::from_millis(100));
        assert_eq!(client.backoff(3), Duration::from_millis(400));
        assert_eq!(client.backoff(40), MAX_BACKOFF);
        assert_eq!(client.max_attempts(), 3);
        assert_eq!(Client::new(["x"]).with_chunk_size(0).chunk_size(), 1);
    }
}
