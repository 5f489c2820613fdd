//! Credentials and `WWW-Authenticate` challenges.
//!
//! Credentials are looked up per registry, first in `STACKBUILD_REGISTRY_USER` and
//! `STACKBUILD_REGISTRY_PASSWORD`, then in the `auths` map of Docker's `config.json`
//! (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`), whose entries hold
//! `base64(user:password)` in `auth` or the two in `username`/`password`
//! (<https://github.com/docker/cli/blob/master/cli/config/configfile/file.go>). Credential helpers
//! (`credsStore`, `credHelpers`) are not run.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::RegistryError;

/// The environment variable holding the registry user name.
pub const ENV_USER: &str = "STACKBUILD_REGISTRY_USER";
/// The environment variable holding the registry password (or token).
pub const ENV_PASSWORD: &str = "STACKBUILD_REGISTRY_PASSWORD";

/// Largest `config.json` read.
const MAX_CONFIG: u64 = 4 * 1024 * 1024;

/// A user name and password for HTTP Basic authentication (and for getting bearer tokens).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password or access token.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// The value of an `Authorization: Basic` header.
    pub fn basic_header(&self) -> String {
        format!("Basic {}", base64_encode(format!("{}:{}", self.username, self.password).as_bytes()))
    }

    /// Decodes the `auth` field of a Docker `config.json` entry (`base64(user:password)`).
    pub fn from_docker_auth(auth: &str) -> Option<Self> {
        let decoded = String::from_utf8(base64_decode(auth.trim())?).ok()?;
        let (username, password) = decoded.split_once(':')?;
        Some(Self { username: username.to_string(), password: password.to_string() })
    }
}

/// Where a [`Client`](super::Client) takes credentials from.
#[derive(Clone, Debug)]
pub(super) enum CredentialSource {
    /// None: every request is anonymous.
    Anonymous,
    /// The environment variables, then Docker's `config.json` (this path, or the default one).
    Ambient {
        /// An explicit `config.json`.
        docker_config: Option<PathBuf>,
    },
    /// These credentials for these registries.
    Fixed(BTreeMap<String, Credentials>),
}

impl CredentialSource {
    /// The credentials for `registry` (`host[:port]`), if any.
    pub(super) fn lookup(&self, registry: &str) -> Result<Option<Credentials>, RegistryError> {
        match self {
            Self::Anonymous => Ok(None),
            Self::Fixed(map) => Ok(map.get(registry).cloned()),
            Self::Ambient { docker_config } => {
                let user = std::env::var(ENV_USER).ok().filter(|v| !v.is_empty());
                let password = std::env::var(ENV_PASSWORD).ok();
                match (user, password) {
                    (Some(username), Some(password)) => return Ok(Some(Credentials { username, password })),
                    (Some(_), None) => {
                        return Err(RegistryError::Credentials {
                            source_name: format!("${ENV_USER}"),
                            reason: format!("{ENV_USER} is set but {ENV_PASSWORD} is not"),
                        })
                    }
                    _ => {}
                }
                let path = match docker_config {
                    Some(path) => Some(path.clone()),
                    None => default_docker_config(),
                };
                match path {
                    Some(path) => docker_config_lookup(&path, registry),
                    None => Ok(None),
                }
            }
        }
    }
}

/// `$DOCKER_CONFIG/config.json`, else `$HOME/.docker/config.json`.
fn default_docker_config() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|d| !d.is_empty())
        .map(|home| PathBuf::from(home).join(".docker/config.json"))
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default, rename = "identitytoken")]
    identity_token: Option<String>,
}

/// `https://host:5000/v1/` -> `host:5000`, as docker's `ConvertToHostname` does.
fn auth_key_host(key: &str) -> &str {
    let key = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

/// The credentials for `registry` in the Docker config at `path` (absent file: none).
pub(super) fn docker_config_lookup(
    path: &Path,
    registry: &str,
) -> Result<Option<Credentials>, RegistryError> {
    let bad = |reason: String| RegistryError::Credentials { source_name: path.display().to_string(), reason };
    let bytes = match std::fs::File::open(path) {
        Ok(file) => {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_CONFIG + 1), &mut bytes)
                .map_err(|e| bad(e.to_string()))?;
            if bytes.len() as u64 > MAX_CONFIG {
                return Err(bad(format!("larger than {MAX_CONFIG} bytes")));
            }
            bytes
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let config: DockerConfig = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    let Some(entry) = config.auths.iter().find(|(key, _)| auth_key_host(key) == registry).map(|(_, v)| v)
    else {
        if config.cred_helpers.contains_key(registry) || config.creds_store.is_some() {
            tracing::warn!(
                "{}: credential helpers are not supported; set {ENV_USER} and {ENV_PASSWORD} for {registry}",
                path.display()
            );
        }
        return Ok(None);
    };
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        return Credentials::from_docker_auth(auth)
            .map(Some)
            .ok_or_else(|| bad(format!("the `auth` of {registry} is not base64 of `user:password`")));
    }
    if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Some(Credentials { username: username.clone(), password: password.clone() }));
    }
    if entry.identity_token.is_some() {
        tracing::warn!("{}: identity tokens are not supported (entry for {registry})", path.display());
    }
    Ok(None)
}

/// One challenge of a `WWW-Authenticate` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The scheme, lowercase (`bearer`, `basic`).
    pub scheme: String,
    /// The parameters, keys lowercase (`realm`, `service`, `scope`).
    pub params: BTreeMap<String, String>,
}

impl Challenge {
    /// A parameter.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }
}

/// Parses a `WWW-Authenticate` header (RFC 7235 section 4.1: challenges of a scheme followed by
/// comma-separated `key=token` or `key="quoted string"` parameters; several challenges may share
/// one header). Unparseable parts are skipped; this never fails.
pub fn parse_www_authenticate(header: &str) -> Vec<Challenge> {
    let chars: Vec<char> = header.chars().collect();
    let mut i = 0;
    let mut out: Vec<Challenge> = Vec::new();
    let is_token = |c: char| !c.is_whitespace() && c != ',' && c != '=' && c != '"';
    while i < chars.len() {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
            i += 1;
        }
        let start = i;
        while i < chars.len() && is_token(chars[i]) {
            i += 1;
        }
        if start == i {
            // `=` or `"` where a token should be: skip it.
            i += usize::from(i < chars.len());
            continue;
        }
        let token: String = chars[start..i].iter().collect::<String>().to_ascii_lowercase();
        let mut j = i;
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        let Some(current) = out.last_mut().filter(|_| chars.get(j) == Some(&'=')) else {
            out.push(Challenge { scheme: token, params: BTreeMap::new() });
            continue;
        };
        i = j + 1;
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if chars.get(i) == Some(&'"') {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    i += 1;
                }
                value.push(chars[i]);
                i += 1;
            }
            i += 1;
        } else {
            while i < chars.len() && chars[i] != ',' && !chars[i].is_whitespace() {
                value.push(chars[i]);
                i += 1;
            }
        }
        current.params.insert(token, value);
    }
    out
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (RFC 4648 section 4).
pub(super) fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (k, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(char::from(B64[(n >> shift & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64; padding is optional. `None` on any other character.
pub(super) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let v = u32::try_from(B64.iter().position(|&b| b == c)?).ok()?;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from(acc >> bits & 0xff).ok()?);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("user:pa:ss", "dXNlcjpwYTpzcw=="),
        ] {
            assert_eq!(base64_encode(plain.as_bytes()), encoded);
            assert_eq!(base64_decode(encoded).unwrap(), plain.as_bytes());
        }
        assert_eq!(base64_decode("Zm9vYg").unwrap(), b"foob");
        assert_eq!(base64_decode("Zm9v!"), None);
    }

    #[test]
    fn basic_header_and_docker_auth() {
        let c = Credentials { username: "user".into(), password: "pa:ss".into() };
        assert_eq!(c.basic_header(), "Basic dXNlcjpwYTpzcw==");
        assert_eq!(Credentials::from_docker_auth("dXNlcjpwYTpzcw=="), Some(c.clone()));
        assert_eq!(Credentials::from_docker_auth("bm9jb2xvbg=="), None); // "nocolon"
        assert!(!format!("{c:?}").contains("pa:ss"));
    }

    #[test]
    fn docker_config_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        assert_eq!(docker_config_lookup(&path, "h:1").unwrap(), None);
        std::fs::write(
            &path,
            r#"{"auths":{"https://h:1/v1/":{"auth":"dXNlcjpwYTpzcw=="},
                "other.example":{"username":"u","password":"p"},
                "bad.example":{"auth":"!!"}}, "credsStore":"desktop"}"#,
        )
        .unwrap();
        let found = docker_config_lookup(&path, "h:1").unwrap().unwrap();
        assert_eq!((found.username.as_str(), found.password.as_str()), ("user", "pa:ss"));
        let found = docker_config_lookup(&path, "other.example").unwrap().unwrap();
        assert_eq!((found.username.as_str(), found.password.as_str()), ("u", "p"));
        assert_eq!(docker_config_lookup(&path, "h:2").unwrap(), None);
        let err = docker_config_lookup(&path, "bad.example").unwrap_err();
        assert!(err.to_string().contains("not base64"), "{err}");
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(docker_config_lookup(&path, "h:1"), Err(RegistryError::Credentials { .. })));
        let source = CredentialSource::Fixed(BTreeMap::from([("h:1".to_string(), found.clone())]));
        assert_eq!(source.lookup("h:1").unwrap(), Some(found));
        assert_eq!(source.lookup("h:2").unwrap(), None);
        assert_eq!(CredentialSource::Anonymous.lookup("h:1").unwrap(), None);
    }

    #[test]
    fn parses_bearer_challenge() {
        let header = r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:ns/a:pull,push""#;
        let challenges = parse_www_authenticate(header);
        assert_eq!(challenges.len(), 1);
        let c = &challenges[0];
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.param("realm"), Some("https://auth.example/token"));
        assert_eq!(c.param("service"), Some("registry.example"));
        assert_eq!(c.param("scope"), Some("repository:ns/a:pull,push"));
    }

    #[test]
    fn parses_several_challenges_and_odd_input() {
        let challenges = parse_www_authenticate(
            r#"Basic realm="a \"q\" b", BEARER Realm=http://t/x , error="insufficient_scope""#,
        );
        assert_eq!(challenges.len(), 2);
        assert_eq!(challenges[0].scheme, "basic");
        assert_eq!(challenges[0].param("realm"), Some(r#"a "q" b"#));
        assert_eq!(challenges[1].scheme, "bearer");
        assert_eq!(challenges[1].param("realm"), Some("http://t/x"));
        assert_eq!(challenges[1].param("error"), Some("insufficient_scope"));
        // Garbage never panics.
        for junk in ["", "=", "\"", "realm=", "Bearer realm=\"unterminated", ",,, =\"x", "Basic =,="] {
            let _ = parse_www_authenticate(junk);
        }
        assert_eq!(parse_www_authenticate("Basic").len(), 1);
    }
}
