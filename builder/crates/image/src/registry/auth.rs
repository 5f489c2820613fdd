//! Credentials and `WWW-Authenticate` challenges.
//!
//! Credentials are looked up per registry, first in `STACKBUILD_REGISTRY_USER` and
//! `STACKBUILD_REGISTRY_PASSWORD`, then in the `auths` map of Docker's `config.json`
//! (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`), whose entries hold
//! `base64(user:password)` in `auth` or the two in `username`/`password`
//! (<https://github.com/docker/cli/blob/master/cli/config/configfile/file.go>), or from the
//! credential helper the file names (`credHelpers` for the registry, else `credsStore`), as
//! `docker login` stores them: the `docker_credential` crate reads the file's entries and runs
//! `docker-credential-<name> get` with the registry on its standard input (Docker's credential
//! helper protocol, <https://github.com/docker/docker-credential-helpers>). The helper's name
//! comes from the user's own Docker configuration, never from a recipe or an image.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use docker_credential::{CredentialRetrievalError, DockerCredential};

use super::RegistryError;

/// The environment variable holding the registry user name.
pub(super) const ENV_USER: &str = "STACKBUILD_REGISTRY_USER";
/// The environment variable holding the registry password (or token).
pub(super) const ENV_PASSWORD: &str = "STACKBUILD_REGISTRY_PASSWORD";

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
        let pair = format!("{}:{}", self.username, self.password);
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
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
    match docker_credential::get_credential_from_reader(bytes.as_slice(), registry) {
        Ok(DockerCredential::UsernamePassword(username, password)) => {
            Ok(Some(Credentials { username, password }))
        }
        Ok(DockerCredential::IdentityToken(_)) => {
            tracing::warn!("{}: identity tokens are not supported (entry for {registry})", path.display());
            Ok(None)
        }
        Err(CredentialRetrievalError::NoCredentialConfigured) => Ok(None),
        // A helper that knows nothing of this registry answers "credentials not found" and exits
        // non-zero; Docker then goes on anonymously, and so do we.
        Err(CredentialRetrievalError::HelperFailure { stdout, .. })
            if stdout.to_ascii_lowercase().contains("credentials not found") =>
        {
            Ok(None)
        }
        Err(CredentialRetrievalError::HelperCommunicationError) => {
            tracing::warn!(
                "{}: the credential helper for {registry} could not be run; going on without credentials",
                path.display()
            );
            Ok(None)
        }
        Err(CredentialRetrievalError::ConfigReadError) => Err(bad("not a Docker config.json".into())),
        Err(CredentialRetrievalError::CredentialDecodingError) => {
            Err(bad(format!("the `auth` of {registry} is not base64 of `user:password`")))
        }
        Err(e) => Err(bad(format!("{registry}: {e}"))),
    }
}

/// One challenge of a `WWW-Authenticate` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Challenge {
    /// The scheme, lowercase (`bearer`, `basic`).
    pub scheme: String,
    /// The parameters, keys lowercase (`realm`, `service`, `scope`).
    pub params: BTreeMap<String, String>,
}

impl Challenge {
    /// A parameter.
    pub(super) fn param(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }
}

/// Parses a `WWW-Authenticate` header (RFC 7235 section 4.1: challenges of a scheme followed by
/// comma-separated `key=token` or `key="quoted string"` parameters; several challenges may share
/// one header). Unparseable parts are skipped; this never fails.
pub(super) fn parse_www_authenticate(header: &str) -> Vec<Challenge> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_helpers_are_asked() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        // A helper as `docker login` uses them: the registry on stdin, JSON on stdout; it knows
        // one registry and answers "credentials not found" for the others.
        let helper = dir.path().join("docker-credential-stackbuildtest");
        std::fs::write(
            &helper,
            "#!/bin/sh\nread -r server\ncase \"$server\" in\n  h:1) echo '{\"Username\":\"hu\",\"Secret\":\"hs\"}' ;;\n  *) echo 'credentials not found in native keychain'; exit 1 ;;\nesac\n",
        )
        .unwrap();
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, r#"{"credHelpers":{"h:1":"stackbuildtest","h:2":"stackbuildtest"}}"#).unwrap();
        // The helper is found on PATH, as Docker finds it; the rest of PATH stays for other tests.
        let old = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![dir.path().to_path_buf()];
        paths.extend(std::env::split_paths(&old));
        std::env::set_var("PATH", std::env::join_paths(paths).unwrap());
        let found = docker_config_lookup(&path, "h:1");
        let absent = docker_config_lookup(&path, "h:2");
        std::fs::write(&path, r#"{"credsStore":"stackbuildtest"}"#).unwrap();
        let stored = docker_config_lookup(&path, "h:1");
        std::env::set_var("PATH", old);
        let found = found.unwrap().unwrap();
        assert_eq!((found.username.as_str(), found.password.as_str()), ("hu", "hs"));
        assert_eq!(absent.unwrap(), None);
        assert_eq!(stored.unwrap().unwrap().username, "hu");
    }

    #[test]
    fn basic_header_keeps_the_password_out_of_debug() {
        let c = Credentials { username: "user".into(), password: "pa:ss".into() };
        assert_eq!(c.basic_header(), "Basic dXNlcjpwYTpzcw==");
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
