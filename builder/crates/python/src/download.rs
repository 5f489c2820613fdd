//! The locked wheels, downloaded at line rate: several connections at once, each file's sha256
//! checked as it streams, written once into the cache.
//!
//! For every pin the index's project page is read (PEP 691 JSON, `Accept:
//! application/vnd.pypi.simple.v1+json`, else the anchors of a PEP 503 page) and the file chosen
//! as pip chooses among a pin's candidates: one whose sha256 the pin lists (a file the page gives
//! no hash for is a candidate after those, verified once it has arrived), whose tags fit the
//! target, the best-ranked tag first ([`stackbuild_common::wheel_name`]). Pages are read by [`JOBS`] threads,
//! then the files are fetched by as many, the largest first (PEP 700 sizes), so a long torch
//! download overlaps all the small ones. Each file streams into a temporary file inside the
//! cache, hashed as it is written; a transport error or a 5xx/429 answer is retried with
//! exponential backoff, and a broken transfer resumes with `Range: bytes=N-` from what was
//! already written (a server that answers 200 to it starts the file over). The whole file's
//! digest is compared with the pin's at the end, and only then is it renamed into
//! `DEST/<sha256>/<filename>`; a failed download leaves nothing there.
//!
//! The index configuration is the one pip and uv are given on this machine, read exactly:
//!
//! - the index: the recipe's `[python] index`, else `UV_DEFAULT_INDEX`, `UV_INDEX_URL` (what the
//!   resolver, uv, was given), else pip's `index-url` (`PIP_INDEX_URL`, then the `[download]`
//!   and `[global]` sections of pip's configuration files as `pip config list` merges them:
//!   `/etc/pip.conf`, `~/.config/pip/pip.conf`, `PIP_CONFIG_FILE`), else pip's own default,
//!   which pip is asked for (no host is named in this code); pip is asked once and the answer
//!   remembered until a file or variable it came from changes ([`pip`]);
//! - extra indexes: the recipe's `extra_index`, `UV_EXTRA_INDEX_URL`, `UV_INDEX`, pip's
//!   `extra-index-url`; wheel locations: the recipe's `find_links`, `UV_FIND_LINKS`, pip's
//!   `find-links` (directories, `file://` directories, or HTML pages of links), all added
//!   together as pip adds its command line to its configuration; `no-index` / `UV_NO_INDEX`;
//! - credentials: `user:password@` in an index URL (also used for other URLs on the same host,
//!   as pip does), else the `machine` (or `default`) entry of `NETRC` or `~/.netrc`;
//! - a proxy: pip's `proxy` option, else `ALL_PROXY` / `HTTPS_PROXY` / `HTTP_PROXY`
//!   (ureq's `try_proxy_from_env`); pip's `timeout` and `retries`;
//! - trusted certificates: pip's `cert` (`PIP_CERT`), else `REQUESTS_CA_BUNDLE` or
//!   `CURL_CA_BUNDLE` (what pip's requests reads), handed to rustls; else `SSL_CERT_FILE` or the
//!   system store (ureq's `native-certs`). pip without any of them trusts its bundled certifi
//!   roots, the Mozilla set that Debian's `ca-certificates` also is.
//!
//! pip stays, as a fallback only, for what this client does not do the way pip does it: an
//! index that is not `http(s)://` (pip reads `file://` indexes as directory trees), pip's
//! `trusted-host` (no TLS verification for a host) and `client-cert` options, and CA
//! certificates given to pip as a directory. In those cases being exact
//! matters more than being fast, so [`Config::from_environment`] says why and
//! [`crate::fetch`] runs `pip download` as before. `STACKBUILD_DOWNLOADER=pip` asks for pip
//! always. Indexes without hashes, find-links directories and pages are handled here.

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::artifact::{Artifact, FetchError};
use crate::index::IndexFile;
use crate::solve::{Pinned, Target};
use stackbuild_common::parse_wheel_name;
use stackbuild_common::IoError;

mod pip;
#[cfg(test)]
use pip::parse_pip_config_list;

/// Connections at once (pages, then files).
pub(crate) const JOBS: usize = 8;
/// The media type of PEP 691's JSON pages.
const JSON_PAGE: &str = "application/vnd.pypi.simple.v1+json";
/// Largest project page read.
const PAGE_CAP: u64 = 32 << 20;
/// Largest wheel downloaded.
const WHEEL_CAP: u64 = 8 << 30;

/// A user name and password for HTTP basic authentication.
#[derive(Clone, PartialEq, Eq)]
struct Credentials {
    user: String,
    password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({:?}, <hidden>)", self.user)
    }
}

/// An index or a page of links, without the credentials its URL may carry.
#[derive(Debug, Clone)]
struct Remote {
    url: url::Url,
    credentials: Option<Credentials>,
}

/// Where wheels are looked for.
#[derive(Debug, Clone)]
enum Links {
    /// A local directory of wheels.
    Dir(PathBuf),
    /// An HTML page of links.
    Page(Remote),
}

/// Everything a download needs to know about the machine's index configuration.
#[derive(Debug, Clone)]
pub struct Config {
    indexes: Vec<Remote>,
    links: Vec<Links>,
    netrc: Vec<(Option<String>, Credentials)>,
    proxy: Option<String>,
    /// A CA bundle to trust instead of `SSL_CERT_FILE` / the system's.
    ca_bundle: Option<PathBuf>,
    timeout: Duration,
    attempts: u32,
    jobs: usize,
}

/// Why pip does the download instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback(pub String);

/// The environment, as a lookup (the process's, or a test's).
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

impl Config {
    /// The configuration for `sources` from this process's environment and pip's configuration
    /// (learned from pip once and kept in `memo`, a directory of the cache: [`pip::Settings`]).
    pub fn from_environment(
        sources: stackbuild_recipe::IndexSources<'_>,
        memo: Option<&Path>,
    ) -> Result<Self, Fallback> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if env("STACKBUILD_DOWNLOADER").is_some_and(|v| v == "pip") {
            return Err(Fallback("STACKBUILD_DOWNLOADER=pip".into()));
        }
        let pip = pip::Settings::of_this_machine(memo);
        let ask = || pip.default_index.clone();
        Self::resolve(sources, &env, &pip.config, &ask)
    }

    /// The configuration for `sources`, given the environment `env`, the output of `pip config
    /// list` as `section.key -> value` (`:env:.key` for `PIP_*` variables), and a way to learn
    /// pip's default index.
    pub fn resolve(
        sources: stackbuild_recipe::IndexSources<'_>,
        env: Env<'_>,
        pip: &BTreeMap<String, String>,
        default_index: &dyn Fn() -> Option<String>,
    ) -> Result<Self, Fallback> {
        // pip's `download` command reads `[global]`, then `[download]`, then `PIP_*`.
        let pip_opt = |key: &str| {
            [":env:", "download", "global"]
                .iter()
                .find_map(|s| pip.get(&format!("{s}.{key}")))
                .cloned()
                .filter(|v| !v.is_empty())
        };
        let truthy = |v: Option<String>| {
            v.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        };
        for key in ["trusted-host", "client-cert"] {
            if let Some(v) = pip_opt(key) {
                return Err(Fallback(format!("pip's {key} option is set ({v})")));
            }
        }
        // pip's `cert`, else what requests reads (pip's HTTP client), else `SSL_CERT_FILE`
        // (which ureq's native-certs reads itself), else the system's store.
        let ssl_cert_file = env("SSL_CERT_FILE");
        let bundle = pip_opt("cert").or_else(|| env("REQUESTS_CA_BUNDLE")).or_else(|| env("CURL_CA_BUNDLE"));
        let mut ca_bundle = None;
        if let Some(bundle) = bundle {
            let same = ssl_cert_file.as_ref().is_some_and(|f| {
                f == &bundle || std::fs::canonicalize(f).ok() == std::fs::canonicalize(&bundle).ok()
            });
            if Path::new(&bundle).is_dir() {
                return Err(Fallback(format!("the CA certificates given to pip are a directory ({bundle})")));
            }
            if !same {
                ca_bundle = Some(PathBuf::from(bundle));
            }
        }
        let no_index = truthy(pip_opt("no-index")) || truthy(env("UV_NO_INDEX"));
        let mut index_urls: Vec<String> = Vec::new();
        if !no_index {
            let primary = sources
                .index
                .map(str::to_owned)
                .or_else(|| env("UV_DEFAULT_INDEX"))
                .or_else(|| env("UV_INDEX_URL"))
                .or_else(|| pip_opt("index-url"))
                .or_else(default_index);
            let Some(primary) = primary else {
                return Err(Fallback("no index is configured and pip does not say its default".into()));
            };
            index_urls.push(primary);
            index_urls.extend(sources.extra.iter().cloned());
            let words = |v: Option<String>| -> Vec<String> {
                v.map(|v| v.split_whitespace().map(str::to_owned).collect()).unwrap_or_default()
            };
            index_urls.extend(words(env("UV_EXTRA_INDEX_URL")));
            // `UV_INDEX`: `[name=]url` entries.
            for entry in words(env("UV_INDEX")) {
                let url = match entry.split_once('=') {
                    Some((name, url)) if !name.contains(':') => url.to_owned(),
                    _ => entry,
                };
                index_urls.push(url);
            }
            index_urls.extend(words(pip_opt("extra-index-url")));
        }
        let mut link_specs: Vec<String> = sources.find_links.to_vec();
        if let Some(v) = env("UV_FIND_LINKS") {
            link_specs.extend(v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()));
        }
        if let Some(v) = pip_opt("find-links") {
            link_specs.extend(v.split_whitespace().map(str::to_owned));
        }

        let mut indexes = Vec::new();
        for raw in dedup(index_urls) {
            let remote = remote(&raw)?;
            if !matches!(remote.url.scheme(), "http" | "https") {
                return Err(Fallback(format!("the index {} is not an http(s) URL", remote.url)));
            }
            indexes.push(remote);
        }
        let links = links_of(dedup(link_specs))?;
        let netrc = netrc_of(env);
        let timeout = pip_opt("timeout")
            .or_else(|| pip_opt("default-timeout"))
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(Duration::from_mins(1), Duration::from_secs_f64);
        let attempts =
            pip_opt("retries").and_then(|v| v.parse::<u32>().ok()).map_or(5, |r| r.clamp(1, 20) + 1);
        let jobs =
            env("STACKBUILD_DOWNLOAD_JOBS").and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(JOBS);
        Ok(Self { indexes, links, netrc, proxy: pip_opt("proxy"), ca_bundle, timeout, attempts, jobs })
    }

    /// The configuration for the URLs a project's own lock names (`uv.lock`, `pylock.toml`):
    /// the machine's, as for an index of ours, so that the same credentials, proxy, CA bundle,
    /// timeout and retries apply. Where pip would be the fallback, only the netrc, the proxy
    /// variables and the defaults: there is no pip to hand a lock's URLs to, and every file is
    /// checked against the lock's digest either way.
    pub fn for_lock_urls(sources: stackbuild_recipe::IndexSources<'_>, memo: Option<&Path>) -> Self {
        Self::from_environment(sources, memo).unwrap_or_else(|Fallback(why)| {
            tracing::debug!("the lock's URLs with netrc and proxy variables only: {why}");
            Self::netrc_only()
        })
    }

    /// No index, the netrc's credentials, the proxy variables, the default timeout and retries.
    pub fn netrc_only() -> Self {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Self {
            indexes: Vec::new(),
            links: Vec::new(),
            netrc: netrc_of(&env),
            proxy: None,
            ca_bundle: None,
            timeout: Duration::from_mins(1),
            attempts: 5,
            jobs: JOBS,
        }
    }

    /// Why `url`'s server cannot be reached from here, when it cannot: one `HEAD` request
    /// through the configured proxy and CA bundle, no retries. Any HTTP answer (a 404, a 403
    /// without credentials) is reached; a DNS, connection or TLS failure or a timeout is not.
    pub fn unreachable(&self, url: &str) -> Option<String> {
        let agent = match self.agent() {
            Ok(agent) => agent,
            Err(why) => return Some(why),
        };
        match agent.head(url).timeout(self.timeout.min(Duration::from_secs(20))).call() {
            Ok(_) | Err(ureq::Error::Status(..)) => None,
            // The kind and message, without the URL the caller already names.
            Err(ureq::Error::Transport(t)) => Some(match t.message() {
                Some(m) => format!("{}: {m}", t.kind()),
                None => t.kind().to_string(),
            }),
        }
    }

    /// Connections at once.
    pub fn jobs(&self) -> usize {
        self.jobs
    }

    /// The indexes and link locations, for messages (no credentials).
    pub fn describe(&self) -> String {
        let mut all: Vec<String> = self.indexes.iter().map(|r| r.url.to_string()).collect();
        all.extend(self.links.iter().map(|l| match l {
            Links::Dir(p) => p.display().to_string(),
            Links::Page(r) => r.url.to_string(),
        }));
        if all.is_empty() {
            "no index (no-index, no find-links)".into()
        } else {
            all.join(", ")
        }
    }

    fn agent(&self) -> Result<ureq::Agent, String> {
        let mut builder = ureq::AgentBuilder::new()
            .timeout_connect(self.timeout.min(Duration::from_secs(30)))
            .timeout_read(self.timeout)
            .redirect_auth_headers(ureq::RedirectAuthHeaders::SameHost)
            .max_idle_connections_per_host(self.jobs * 2);
        if let Some(p) = &self.proxy {
            let proxy = ureq::Proxy::new(p).map_err(|e| format!("pip's proxy option {p:?}: {e}"))?;
            builder = builder.proxy(proxy);
        } else {
            builder = builder.try_proxy_from_env(true);
        }
        if let Some(bundle) = &self.ca_bundle {
            builder = builder.tls_config(tls_trusting(bundle)?);
        }
        Ok(builder.build())
    }

    /// Credentials for `url`: those of an index on the same host, else netrc's.
    fn credentials_for(&self, url: &url::Url) -> Option<Credentials> {
        let host = url.host_str()?;
        let same = |r: &Remote| {
            r.url.host_str() == Some(host) && r.url.port_or_known_default() == url.port_or_known_default()
        };
        let from_links = self.links.iter().filter_map(|l| match l {
            Links::Page(r) => Some(r),
            Links::Dir(_) => None,
        });
        self.indexes
            .iter()
            .chain(from_links)
            .filter(|r| same(r))
            .find_map(|r| r.credentials.clone())
            .or_else(|| self.netrc.iter().find(|(m, _)| m.as_deref() == Some(host)).map(|(_, c)| c.clone()))
            .or_else(|| self.netrc.iter().find(|(m, _)| m.is_none()).map(|(_, c)| c.clone()))
    }
}

/// The entries of `NETRC`, else `~/.netrc` (none when it cannot be read).
fn netrc_of(env: Env<'_>) -> Vec<(Option<String>, Credentials)> {
    let path = env("NETRC").map(PathBuf::from).or_else(|| env("HOME").map(|h| Path::new(&h).join(".netrc")));
    path.and_then(|p| std::fs::read_to_string(p).ok()).map(|text| parse_netrc(&text)).unwrap_or_default()
}

/// A TLS configuration that trusts the certificates of the PEM file `bundle` (as pip's `cert`).
fn tls_trusting(bundle: &Path) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::CertificateDer;
    let what = |e: &dyn std::fmt::Display| format!("the CA bundle {}: {e}", bundle.display());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(bundle).map_err(|e| what(&e))? {
        let cert = cert.map_err(|e| what(&e))?;
        roots.add(cert).map_err(|e| what(&e))?;
    }
    if roots.is_empty() {
        return Err(what(&"no certificates in it"));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| what(&e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(std::sync::Arc::new(config))
}

/// Wheel locations: directories (paths or `file://` URLs) and http(s) pages of links.
fn links_of(specs: Vec<String>) -> Result<Vec<Links>, Fallback> {
    let mut links = Vec::new();
    for raw in specs {
        if raw.starts_with("http://") || raw.starts_with("https://") {
            links.push(Links::Page(remote(&raw)?));
        } else if let Some(path) = raw.strip_prefix("file://") {
            let path = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
            links.push(Links::Dir(PathBuf::from(path.as_ref())));
        } else if raw.contains("://") {
            return Err(Fallback(format!("find-links {raw} is neither a directory nor an http(s) page")));
        } else {
            links.push(Links::Dir(PathBuf::from(raw)));
        }
    }
    Ok(links)
}

fn dedup(list: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in list {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// A URL with its `user:password@` taken out into credentials.
fn remote(raw: &str) -> Result<Remote, Fallback> {
    let mut url = url::Url::parse(raw).map_err(|e| Fallback(format!("index URL {raw:?}: {e}")))?;
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
    let credentials = (!url.username().is_empty() || url.password().is_some()).then(|| Credentials {
        user: decode(url.username()),
        password: decode(url.password().unwrap_or("")),
    });
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Ok(Remote { url, credentials })
}

/// The entries of a `.netrc` file: `(machine, credentials)`, `None` for `default`.
fn parse_netrc(text: &str) -> Vec<(Option<String>, Credentials)> {
    let mut out = Vec::new();
    let mut tokens =
        text.lines().filter(|l| !l.trim_start().starts_with('#')).flat_map(str::split_whitespace).peekable();
    let mut current: Option<(Option<String>, Credentials)> = None;
    while let Some(tok) = tokens.next() {
        match tok {
            "machine" | "default" => {
                if let Some(entry) = current.take() {
                    out.push(entry);
                }
                let machine = if tok == "machine" { tokens.next().map(str::to_owned) } else { None };
                if tok == "machine" && machine.is_none() {
                    break;
                }
                current = Some((machine, Credentials { user: String::new(), password: String::new() }));
            }
            "login" => {
                if let (Some((_, c)), Some(v)) = (current.as_mut(), tokens.next()) {
                    v.clone_into(&mut c.user);
                }
            }
            "password" => {
                if let (Some((_, c)), Some(v)) = (current.as_mut(), tokens.next()) {
                    v.clone_into(&mut c.password);
                }
            }
            "account" => {
                tokens.next();
            }
            "macdef" => {
                // A macro runs to the next blank line; whitespace splitting cannot see it, so
                // skip to the next entry.
                while tokens.peek().is_some_and(|t| *t != "machine" && *t != "default") {
                    tokens.next();
                }
            }
            _ => {}
        }
    }
    if let Some(entry) = current {
        out.push(entry);
    }
    out
}

/// One way to get a pin's file.
#[derive(Debug, Clone)]
enum Location {
    Url(url::Url),
    Path(PathBuf),
}

/// A file that may be the pin's.
#[derive(Debug, Clone)]
struct Candidate {
    filename: String,
    location: Location,
    /// The sha256 the page gives (one of the pin's), if it gives one.
    sha256: Option<String>,
    size: Option<u64>,
    /// The index or link location it was found on.
    source: String,
    rank: usize,
}

/// The project pages of one project, read into files.
#[derive(Deserialize)]
struct JsonPage {
    files: Vec<IndexFile>,
}

use serde::Deserialize;

/// Downloads `pins` for `target` into `dest` (`DEST/<sha256>/<filename>`), verified, returning
/// one artifact per pin in order.
pub(crate) fn fetch(
    pins: &[&Pinned],
    target: &Target,
    config: &Config,
    dest: &Path,
) -> Result<Vec<Artifact>, FetchError> {
    let http = Http::new(config).map_err(|reason| FetchError::Index {
        pin: pins.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        index: config.describe(),
        reason,
    })?;
    let client = Client { http, target };
    let jobs = config.jobs.min(pins.len()).max(1);

    // Pages first, every pin's in parallel.
    let chosen: Vec<Vec<Candidate>> = parallel(pins.len(), jobs, |i| client.candidates(pins[i]))?;

    // Then the files, the largest first.
    let mut order: Vec<usize> = (0..pins.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(chosen[i].first().and_then(|c| c.size).unwrap_or(u64::MAX)));
    let total: u64 = chosen.iter().filter_map(|c| c.first().and_then(|c| c.size)).sum();
    let spinner = stackbuild_common::Progress::spinner(format!(
        "downloading {} wheel(s){}",
        pins.len(),
        if total > 0 {
            format!(", {}.{} MB", total / 1_000_000, total / 100_000 % 10)
        } else {
            String::new()
        }
    ));
    let tmp = tempfile::Builder::new().prefix(".fetch-").tempdir_in(dest).map_err(|source| {
        FetchError::Io(IoError { op: "creating a temporary directory in", path: dest.to_owned(), source })
    })?;
    let done = parallel(order.len(), jobs, |k| {
        let i = order[k];
        client.download(pins[i], &chosen[i], tmp.path(), dest)
    });
    drop(spinner);
    let done = done?;
    let mut out: Vec<Option<Artifact>> = vec![None; pins.len()];
    for (k, artifact) in done.into_iter().enumerate() {
        out[order[k]] = Some(artifact);
    }
    Ok(out.into_iter().map(|a| a.expect("every job ran")).collect())
}

/// Runs `f(0..n)` on `jobs` threads; the first error stops the others from starting new work,
/// and the error returned is that of the lowest index that failed, whatever the timing.
pub(crate) fn parallel<T: Send, E: Send>(
    n: usize,
    jobs: usize,
    f: impl Fn(usize) -> Result<T, E> + Sync,
) -> Result<Vec<T>, E> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    let first_error: Mutex<Option<(usize, E)>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..jobs.min(n) {
            s.spawn(|| loop {
                if failed.load(Ordering::SeqCst) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                match f(i) {
                    Ok(v) => results.lock().expect("no panics while held")[i] = Some(v),
                    Err(e) => {
                        failed.store(true, Ordering::SeqCst);
                        let mut slot = first_error.lock().expect("no panics while held");
                        if slot.as_ref().is_none_or(|(j, _)| i < *j) {
                            *slot = Some((i, e));
                        }
                    }
                }
            });
        }
    });
    if let Some((_, e)) = first_error.into_inner().expect("threads joined") {
        return Err(e);
    }
    Ok(results.into_inner().expect("threads joined").into_iter().map(|r| r.expect("every job ran")).collect())
}

struct Client<'a> {
    http: Http<'a>,
    target: &'a Target,
}

/// Why a download failed: after its retries, or at once (a 4xx answer, a full disk).
pub(crate) enum Failure {
    Retry(String),
    Fatal(String),
}

impl Failure {
    pub(crate) fn into_reason(self) -> String {
        match self {
            Self::Retry(r) | Self::Fatal(r) => r,
        }
    }
}

/// GETs with the machine's configuration: its proxy and CA bundle (in the agent), credentials
/// by host, pip's timeout and retries. Shared by the index client and by the downloads of a
/// project's own lock ([`crate::given_lock`]), whose URLs need the same credentials.
pub(crate) struct Http<'a> {
    config: &'a Config,
    agent: ureq::Agent,
}

/// What [`Client::candidates`] does with each file it finds: its file name, where it is, its
/// sha256 when the page gives one, its size when known, and the page or directory it came from.
type Consider<'a> = dyn FnMut(String, Location, Option<String>, Option<u64>, &str) + 'a;

impl Client<'_> {
    /// Every file the page at `url` lists, its link resolved against `url`, handed to
    /// `consider` with `source` (the index or find-links page it came from).
    fn consider_page(
        &self,
        pin: &Pinned,
        url: &url::Url,
        source: &str,
        consider: &mut Consider<'_>,
    ) -> Result<(), FetchError> {
        for f in self.page(url).map_err(|r| index_error(pin, source, r))? {
            let Ok(link) = url.join(&f.url) else { continue };
            consider(
                f.filename.clone(),
                Location::Url(strip_fragment(link)),
                f.hashes.get("sha256").map(|h| h.to_ascii_lowercase()),
                f.size,
                source,
            );
        }
        Ok(())
    }

    /// Every file that may be `pin`'s, best first; an error when there is none.
    fn candidates(&self, pin: &Pinned) -> Result<Vec<Candidate>, FetchError> {
        let tags = self.target.platform_tags();
        let mut found: Vec<Candidate> = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        let mut consider = |filename: String,
                            location: Location,
                            sha256: Option<String>,
                            size: Option<u64>,
                            source: &str| {
            let rank = if let Some(wheel) = parse_wheel_name(&filename) {
                if wheel.name != pin.name || wheel.version != pin.version {
                    return;
                }
                seen.push(filename.clone());
                let Some(rank) = wheel.rank(&self.target.python, &tags) else { return };
                rank
            } else if let Some((name, version)) = stackbuild_common::parse_sdist_name(&filename) {
                // A source distribution, after every wheel that fits: it is fetched only for a
                // pin whose hashes name it (a package resolved to its source, built later by
                // `stackbuild-wheelbuild`), since a fitting wheel's hash is always among them.
                if name != pin.name || version != pin.version {
                    return;
                }
                seen.push(filename.clone());
                usize::MAX
            } else {
                return;
            };
            if let Some(h) = &sha256 {
                if !pin.hashes.contains(h) {
                    return;
                }
            }
            found.push(Candidate { filename, location, sha256, size, source: source.to_owned(), rank });
        };
        let project = pin.name.to_string();
        for index in &self.http.config.indexes {
            let mut base = index.url.clone();
            if !base.path().ends_with('/') {
                base.set_path(&format!("{}/", base.path()));
            }
            let page_base = base
                .join(&format!("{project}/"))
                .map_err(|e| index_error(pin, index.url.as_str(), e.to_string()))?;
            self.consider_page(pin, &page_base, index.url.as_str(), &mut consider)?;
        }
        for links in &self.http.config.links {
            match links {
                Links::Dir(dir) => {
                    let Ok(entries) = std::fs::read_dir(dir) else {
                        tracing::debug!(dir = %dir.display(), "find-links directory is not there");
                        continue;
                    };
                    for entry in entries.filter_map(Result::ok) {
                        let filename = entry.file_name().to_string_lossy().into_owned();
                        consider(
                            filename,
                            Location::Path(entry.path()),
                            None,
                            None,
                            &dir.display().to_string(),
                        );
                    }
                }
                Links::Page(remote) => {
                    self.consider_page(pin, &remote.url, remote.url.as_str(), &mut consider)?;
                }
            }
        }
        // pip's order: a file with an allowed hash first, then the best tags; local copies
        // before downloads of the same rank.
        found.sort_by_key(|c| (c.sha256.is_none(), c.rank, matches!(c.location, Location::Url(_))));
        if found.is_empty() {
            let reason = if seen.is_empty() {
                format!("no file of {project} {} is there", pin.version)
            } else {
                format!(
                    "of the files of {project} {} there ({}), none fits {} with one of the lock's \
                     sha256 digests ({})",
                    pin.version,
                    seen.join(", "),
                    self.target,
                    pin.hashes.join(", ")
                )
            };
            return Err(index_error(pin, &self.http.config.describe(), reason));
        }
        Ok(found)
    }

    /// A project page or a page of links: its files (a 404 is a page without files).
    fn page(&self, url: &url::Url) -> Result<Vec<IndexFile>, String> {
        let mut last = String::new();
        for attempt in 0..self.http.config.attempts {
            backoff(attempt);
            let resp = match self.http.get(url).set("Accept", &format!("{JSON_PAGE}, text/html;q=0.1")).call()
            {
                Ok(r) => r,
                Err(ureq::Error::Status(404 | 410, _)) => return Ok(Vec::new()),
                Err(ureq::Error::Status(code, _)) if code >= 500 || code == 429 => {
                    last = format!("{url}: HTTP {code}");
                    continue;
                }
                Err(ureq::Error::Status(code, r)) => {
                    return Err(format!("{url}: HTTP {code} {}", r.status_text()))
                }
                Err(ureq::Error::Transport(t)) => {
                    last = format!("{url}: {t}");
                    continue;
                }
            };
            let kind = resp.content_type().to_owned();
            let mut bytes = Vec::new();
            if let Err(e) = resp.into_reader().take(PAGE_CAP + 1).read_to_end(&mut bytes) {
                last = format!("{url}: {e}");
                continue;
            }
            if bytes.len() as u64 > PAGE_CAP {
                return Err(format!("{url}: page larger than {PAGE_CAP} bytes"));
            }
            if kind.starts_with(JSON_PAGE) || kind == "application/json" {
                let page: JsonPage =
                    serde_json::from_slice(&bytes).map_err(|e| format!("{url}: not a PEP 691 page: {e}"))?;
                return Ok(page.files);
            }
            return Ok(crate::index::html_files(&String::from_utf8_lossy(&bytes)));
        }
        Err(format!("{last} (after {} attempts)", self.http.config.attempts))
    }

    /// Gets `pin`'s file from the first candidate that works, into `tmp`, then into `dest`.
    fn download(
        &self,
        pin: &Pinned,
        candidates: &[Candidate],
        tmp: &Path,
        dest: &Path,
    ) -> Result<Artifact, FetchError> {
        let mut last: Option<FetchError> = None;
        for c in candidates {
            let dir = tmp.join(format!("{}-{}", pin.name, c.rank));
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(&c.filename);
            let got = match &c.location {
                Location::Path(p) => {
                    copy_local(p, &file).map_err(|e| Failure::Fatal(format!("{}: {e}", p.display())))
                }
                Location::Url(u) => self.http.get_file(u, &file, c.size),
            };
            let (sha256, size) = match got {
                Ok(v) => v,
                Err(Failure::Retry(r) | Failure::Fatal(r)) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(index_error(pin, &c.source, r));
                }
            };
            if !pin.hashes.contains(&sha256) {
                let _ = std::fs::remove_dir_all(&dir);
                let from = match &c.location {
                    Location::Url(u) => u.to_string(),
                    Location::Path(p) => p.display().to_string(),
                };
                let said = c.sha256.as_ref().map_or(String::new(), |h| format!(" (its page says {h})"));
                last = Some(index_error(
                    pin,
                    &c.source,
                    format!(
                        "{from} has sha256 {sha256}{said}, but the lock allows only {}; nothing was kept",
                        pin.hashes.join(", ")
                    ),
                ));
                // A file the page gave the right hash for is not the pin's: do not look further.
                if c.sha256.is_some() {
                    break;
                }
                continue;
            }
            let path = crate::artifact::place(&file, &c.filename, &sha256, &dir, dest)?;
            let _ = std::fs::remove_dir_all(&dir);
            return Ok(Artifact {
                name: pin.name.clone(),
                version: pin.version.clone(),
                filename: c.filename.clone(),
                sha256,
                size,
                path,
            });
        }
        Err(last.unwrap_or_else(|| index_error(pin, &self.http.config.describe(), "no candidate".into())))
    }
}

impl<'a> Http<'a> {
    pub(crate) fn new(config: &'a Config) -> Result<Self, String> {
        Ok(Self { agent: config.agent()?, config })
    }

    fn get(&self, url: &url::Url) -> ureq::Request {
        let mut req =
            self.agent.get(url.as_str()).set("User-Agent", concat!("stackbuild/", env!("CARGO_PKG_VERSION")));
        if let Some(c) = self.config.credentials_for(url) {
            use base64::Engine as _;
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.user, c.password));
            req = req.set("Authorization", &format!("Basic {token}"));
        }
        req
    }

    /// GETs `url` into `file`, retrying and resuming; returns the sha256 and size.
    pub(crate) fn get_file(
        &self,
        url: &url::Url,
        path: &Path,
        size: Option<u64>,
    ) -> Result<(String, u64), Failure> {
        let fatal = |e: std::io::Error| Failure::Fatal(format!("writing {}: {e}", path.display()));
        let mut file = std::fs::File::create(path).map_err(fatal)?;
        let mut hasher = Sha256::new();
        let mut written = 0u64;
        let mut last = String::new();
        let mut buf = vec![0u8; 256 << 10];
        for attempt in 0..self.config.attempts {
            backoff(attempt);
            let mut req = self.get(url);
            if written > 0 {
                req = req.set("Range", &format!("bytes={written}-"));
            }
            let resp = match req.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(416, _)) if written > 0 => {
                    last = format!("{url}: HTTP 416 to a resumed request; starting over");
                    restart(&mut file, &mut hasher, &mut written).map_err(fatal)?;
                    continue;
                }
                Err(ureq::Error::Status(code, _)) if code >= 500 || code == 429 => {
                    last = format!("{url}: HTTP {code}");
                    continue;
                }
                Err(ureq::Error::Status(code, r)) => {
                    return Err(Failure::Fatal(format!("{url}: HTTP {code} {}", r.status_text())))
                }
                Err(ureq::Error::Transport(t)) => {
                    last = format!("{url}: {t}");
                    continue;
                }
            };
            let resumed = written > 0
                && resp.status() == 206
                && resp
                    .header("Content-Range")
                    .and_then(|v| v.strip_prefix("bytes "))
                    .and_then(|v| v.split('-').next())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    == Some(written);
            if written > 0 && !resumed {
                tracing::debug!(%url, "the server did not resume; starting over");
                restart(&mut file, &mut hasher, &mut written).map_err(fatal)?;
                if resp.status() != 200 {
                    // Some other part of the file: ask for all of it next time.
                    last = format!("{url}: HTTP {} with another range than asked for", resp.status());
                    continue;
                }
            } else if written == 0 && resp.status() != 200 {
                last = format!("{url}: HTTP {} to a plain GET", resp.status());
                continue;
            }
            let mut reader = resp.into_reader();
            let broke = loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break None,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => break Some(e.to_string()),
                };
                hasher.update(&buf[..n]);
                file.write_all(&buf[..n]).map_err(fatal)?;
                written += n as u64;
                if written > WHEEL_CAP {
                    return Err(Failure::Fatal(format!("{url}: larger than {WHEEL_CAP} bytes")));
                }
            };
            if let Some(why) = broke {
                last = format!("{url}: the connection broke after {written} bytes: {why}");
                tracing::warn!("{last}; resuming");
                continue;
            }
            if let Some(size) = size.filter(|s| *s != written) {
                if written < size {
                    last = format!("{url}: the connection closed after {written} of {size} bytes");
                    continue;
                }
            }
            file.sync_all().map_err(fatal)?;
            let hex = hex::encode(hasher.finalize());
            // Before the rename that publishes it (`cache::stamp`).
            stackbuild_cache::stamp::record_new(&file, &hex);
            return Ok((hex, written));
        }
        Err(Failure::Retry(format!("{last} (after {} attempts)", self.config.attempts)))
    }
}

fn index_error(pin: &Pinned, index: &str, reason: String) -> FetchError {
    FetchError::Index { pin: pin.to_string(), index: index.to_owned(), reason }
}

fn restart(file: &mut std::fs::File, hasher: &mut Sha256, written: &mut u64) -> std::io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    *hasher = Sha256::new();
    *written = 0;
    Ok(())
}

/// Waits before attempt `n` (none before the first): 0.25 s, 0.5 s, 1 s, ... at most 8 s.
fn backoff(attempt: u32) {
    if attempt > 0 {
        let ms = 250u64.saturating_mul(1 << (attempt - 1).min(5));
        std::thread::sleep(Duration::from_millis(ms));
    }
}

fn strip_fragment(mut url: url::Url) -> url::Url {
    url.set_fragment(None);
    url
}

/// Copies a local wheel (a find-links directory) to `to`, hashing it.
fn copy_local(from: &Path, to: &Path) -> std::io::Result<(String, u64)> {
    let mut src =
        stackbuild_common::open_regular(from, "wheel").map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut out = std::fs::File::create(to)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    loop {
        let n = src.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])?;
        total += n as u64;
    }
    out.sync_all()?;
    let hex = hex::encode(hasher.finalize());
    stackbuild_cache::stamp::record_new(&out, &hex);
    Ok((hex, total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackbuild_recipe::IndexSources;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |k| map.get(k).cloned()
    }

    fn none() -> Option<String> {
        None
    }

    #[test]
    fn pip_config_list_is_read() {
        let text = "global.cert='/etc/ssl/a b.crt'\n:env:.find-links='/opt/wheels'\n\
                    global.extra-index-url='https://a.invalid/simple\\nhttps://b.invalid/simple'\n\
                    download.index-url=\"https://c.invalid/it's\"\n";
        let map = parse_pip_config_list(text);
        assert_eq!(map["global.cert"], "/etc/ssl/a b.crt");
        assert_eq!(map[":env:.find-links"], "/opt/wheels");
        assert_eq!(map["global.extra-index-url"], "https://a.invalid/simple\nhttps://b.invalid/simple");
        assert_eq!(map["download.index-url"], "https://c.invalid/it's");
    }

    #[test]
    fn netrc_entries() {
        let text = "# comment\nmachine a.invalid login alice password s3cret\n\
                    machine b.invalid\n  login bob\n  account x\n  password pw\ndefault login anon password none\n";
        let entries = parse_netrc(text);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].0.as_deref(), Some("a.invalid"));
        assert_eq!(entries[0].1, Credentials { user: "alice".into(), password: "s3cret".into() });
        assert_eq!(entries[1].1, Credentials { user: "bob".into(), password: "pw".into() });
        assert_eq!(entries[2].0, None);
    }

    #[test]
    fn configuration_precedence() {
        let pip: BTreeMap<String, String> = [
            ("global.index-url", "https://global.invalid/simple"),
            ("download.index-url", "https://download.invalid/simple"),
            ("global.extra-index-url", "https://x1.invalid/simple https://x2.invalid/simple"),
            ("global.find-links", "/nowhere"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let urls = |c: &Config| c.indexes.iter().map(|r| r.url.to_string()).collect::<Vec<_>>();
        let c = Config::resolve(IndexSources::default(), &env_of(&[]), &pip, &none).unwrap();
        assert_eq!(
            urls(&c),
            ["https://download.invalid/simple", "https://x1.invalid/simple", "https://x2.invalid/simple"]
        );
        assert_eq!(c.links.len(), 1);
        let mut with_env = pip.clone();
        with_env.insert(":env:.index-url".into(), "https://env.invalid/simple".into());
        let c = Config::resolve(IndexSources::default(), &env_of(&[]), &with_env, &none).unwrap();
        assert_eq!(urls(&c)[0], "https://env.invalid/simple");
        let c = Config::resolve(
            IndexSources::default(),
            &env_of(&[("UV_INDEX_URL", "https://uv.invalid/simple")]),
            &with_env,
            &none,
        )
        .unwrap();
        assert_eq!(urls(&c)[0], "https://uv.invalid/simple");
        let extra = vec!["https://recipe-extra.invalid/simple".to_owned()];
        let sources = IndexSources {
            index: Some("https://u:p%40ss@recipe.invalid/simple"),
            extra: &extra,
            find_links: &[],
        };
        let c =
            Config::resolve(sources, &env_of(&[("UV_INDEX_URL", "https://uv.invalid/simple")]), &pip, &none)
                .unwrap();
        assert_eq!(urls(&c)[..2], ["https://recipe.invalid/simple", "https://recipe-extra.invalid/simple"]);
        assert_eq!(c.indexes[0].credentials, Some(Credentials { user: "u".into(), password: "p@ss".into() }));
        assert!(!c.describe().contains("p@ss") && !c.describe().contains("u:"), "{}", c.describe());
        let file_url = url::Url::parse("https://recipe.invalid/files/x.whl").unwrap();
        assert_eq!(c.credentials_for(&file_url).unwrap().user, "u");

        // Nothing configured: pip's default.
        let c = Config::resolve(IndexSources::default(), &env_of(&[]), &BTreeMap::new(), &|| {
            Some("https://default.invalid/simple/".into())
        })
        .unwrap();
        assert_eq!(urls(&c), ["https://default.invalid/simple/"]);
        // What only pip does.
        let f = |pip: &[(&str, &str)], env: &[(&str, &str)]| {
            let pip = pip.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            Config::resolve(IndexSources::default(), &env_of(env), &pip, &none)
        };
        assert!(f(&[("global.index-url", "file:///srv/simple")], &[]).is_err());
        assert!(f(&[("global.index-url", "https://a.invalid/"), ("global.trusted-host", "a.invalid")], &[])
            .is_err());
        let c = f(&[("global.index-url", "https://a.invalid/"), ("global.cert", "/x.pem")], &[]).unwrap();
        assert_eq!(c.ca_bundle.as_deref(), Some(Path::new("/x.pem")));
        assert!(f(
            &[("global.index-url", "https://a.invalid/"), ("global.cert", "/x.pem")],
            &[("SSL_CERT_FILE", "/x.pem")]
        )
        .is_ok());
        let c =
            f(&[("global.index-url", "https://a.invalid/")], &[("REQUESTS_CA_BUNDLE", "/y.pem")]).unwrap();
        assert_eq!(c.ca_bundle.as_deref(), Some(Path::new("/y.pem")));
        assert!(f(&[("global.index-url", "https://a.invalid/"), ("global.cert", "/")], &[]).is_err());
        // no-index: find-links only.
        let c = f(&[("global.no-index", "true"), ("global.find-links", "/w")], &[]).unwrap();
        assert!(c.indexes.is_empty() && c.links.len() == 1);
    }

    #[test]
    fn netrc_gives_credentials_by_host() {
        let dir = tempfile::tempdir().unwrap();
        let netrc = dir.path().join("netrc");
        std::fs::write(&netrc, "machine 127.0.0.1 login user password pw\n").unwrap();
        let sources = IndexSources { index: Some("http://127.0.0.1:1/simple"), ..IndexSources::default() };
        let c =
            Config::resolve(sources, &env_of(&[("NETRC", netrc.to_str().unwrap())]), &BTreeMap::new(), &none)
                .unwrap();
        let u = url::Url::parse("http://127.0.0.1:1/simple/x/").unwrap();
        assert_eq!(c.credentials_for(&u).unwrap().password, "pw");
        assert!(c.credentials_for(&url::Url::parse("http://other.invalid/").unwrap()).is_none());
    }

    #[test]
    fn a_ca_bundle_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        assert!(tls_trusting(&junk).unwrap_err().contains("no certificates"));
        assert!(tls_trusting(&dir.path().join("missing.pem")).is_err());
        let system = Path::new("/etc/ssl/certs/ca-certificates.crt");
        if system.is_file() {
            tls_trusting(system).unwrap();
        }
    }

    #[test]
    fn html_pages() {
        let html = "<html><body><A HREF=\"../../packages/demo-1.0-py3-none-any.whl#sha256=AB\" data-x>demo</A>\n\
                    <a href='https://h.invalid/p/demo%2B1-2.0-py3-none-any.whl?x=1'>y</a><a name=x>no</a></body></html>";
        let files = crate::index::html_files(html);
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].filename, "demo-1.0-py3-none-any.whl");
        assert_eq!(files[0].hashes["sha256"], "AB");
        assert_eq!(files[1].filename, "demo+1-2.0-py3-none-any.whl");
    }
}
