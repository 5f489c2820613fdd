//! A package index read through its metadata only, as a table generator needs it.
//!
//! - Project pages: PEP 691's JSON form of the simple API (`Accept:
//!   application/vnd.pypi.simple.v1+json`), <https://peps.python.org/pep-0691/>, or, from an
//!   index that serves only HTML (the per-CUDA indexes of `PyTorch` are static PEP 503 pages), the
//!   anchors of PEP 503 with their PEP 592/658/714 `data-*` attributes.
//! - A wheel's `METADATA`: the PEP 658 file at `<wheel URL>.metadata`
//!   (<https://peps.python.org/pep-0658/>, PEP 714 renamed its key to `core-metadata`). Mirrors do
//!   not always carry it (the one this project is developed against answers 404 for most torch
//!   wheels and lists no `core-metadata` key at all), so where it is missing the wheel's zip is
//!   read the way uv's and pip's "lazy wheel" do it: HTTP range requests for the end of central
//!   directory, the central directory and the one `*.dist-info/METADATA` member, a few MiB of a
//!   wheel that can be 900 MiB. No wheel is downloaded whole; a wheel whose directory and
//!   member need more than [`RANGE_BUDGET`] is an error.
//!
//! A *recorded* index (a directory: `<project>.json`, PEP 691 pages holding the files that were
//! consulted, and `metadata/<wheel>.metadata`, the header part of each `METADATA` read) answers
//! the same questions offline. [`Index::record_into`] writes one while reading a live index, so
//! the generator's tests run against what an index really served.

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use stackbuild_common::InputError;

/// Largest project page read (torch's holds about a thousand files: 0.4 MiB).
const PAGE_CAP: u64 = 32 << 20;
/// Largest `METADATA` read (torch's is 30 KiB with its description).
const METADATA_CAP: u64 = 4 << 20;
/// Bytes fetched per range request.
const RANGE_BLOCK: u64 = 256 << 10;
/// Most bytes of one wheel fetched by range requests (torch's central directory is ~2 MiB).
pub(crate) const RANGE_BUDGET: u64 = 48 << 20;
/// Largest wheel downloaded whole (torch's are about 1 GiB).
const WHEEL_CAP: u64 = 4 << 30;
/// The media type of PEP 691's JSON pages.
const JSON_PAGE: &str = "application/vnd.pypi.simple.v1+json";

/// Why the index could not answer.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// A request failed.
    #[error("{url}: {reason}")]
    Http {
        /// What was asked for.
        url: String,
        /// What happened.
        reason: String,
    },
    /// A page or file is not what the specification says.
    #[error("{what}: {reason}")]
    Invalid {
        /// The page or file.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// A recorded index could not be read.
    #[error("recorded index: {0}")]
    Recorded(#[from] InputError),
    /// A recording could not be written.
    #[error("recording {path}: {source}")]
    Record {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// One file of a project page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexFile {
    /// The file name (`torch-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl`).
    pub filename: String,
    /// Where it is, as the page gives it (relative URLs resolve against the page).
    pub url: String,
    /// Its hashes (`sha256`).
    #[serde(default)]
    pub hashes: BTreeMap<String, String>,
    /// `Requires-Python`, where the page gives it.
    #[serde(rename = "requires-python", default, skip_serializing_if = "Option::is_none")]
    pub requires_python: Option<String>,
    /// Yanked (PEP 592): `false`, `true` or the reason.
    #[serde(default, skip_serializing_if = "is_not_yanked")]
    pub yanked: serde_json::Value,
    /// PEP 658/714: the index serves `<url>.metadata`.
    #[serde(rename = "core-metadata", default, skip_serializing_if = "Option::is_none")]
    pub core_metadata: Option<serde_json::Value>,
    /// The same, under PEP 658's first name.
    #[serde(rename = "data-dist-info-metadata", default, skip_serializing)]
    pub dist_info_metadata: Option<serde_json::Value>,
    /// Size in bytes (PEP 700).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

fn is_not_yanked(v: &serde_json::Value) -> bool {
    v.is_null() || v == &serde_json::Value::Bool(false)
}

impl IndexFile {
    /// Yanked files are not candidates (PEP 592: installers skip them unless pinned).
    pub fn is_yanked(&self) -> bool {
        !is_not_yanked(&self.yanked)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Page {
    #[serde(default)]
    meta: serde_json::Value,
    #[serde(default)]
    name: String,
    files: Vec<IndexFile>,
}

/// Where the answers come from.
enum Source {
    /// A live index: its simple API base URL (`.../simple`).
    Http { base: url::Url, agent: ureq::Agent },
    /// A recorded index directory.
    Dir(PathBuf),
}

/// A package index, live or recorded, optionally recording what it reads.
pub struct Index {
    source: Source,
    record: Option<Recording>,
}

struct Recording {
    dir: PathBuf,
    pages: BTreeMap<String, Page>,
}

impl Recording {
    /// The recorded page of `project`, begun empty.
    fn page(&mut self, project: &str) -> &mut Page {
        self.pages.entry(project.to_owned()).or_insert_with(|| Page {
            meta: serde_json::json!({"api-version": "1.1"}),
            name: project.to_owned(),
            files: Vec::new(),
        })
    }
}

impl Index {
    /// A live index at `base` (the simple API's URL, as `--index-url` takes it).
    pub fn http(base: &str) -> Result<Self, IndexError> {
        let mut base = url::Url::parse(base).map_err(|e| IndexError::Invalid {
            what: format!("index URL {base:?}"),
            reason: e.to_string(),
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(IndexError::Invalid {
                what: format!("index URL {base}"),
                reason: "expected an http or https URL (or a recorded index directory)".into(),
            });
        }
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(30))
            .timeout_read(Duration::from_mins(2))
            .try_proxy_from_env(true)
            .build();
        Ok(Self { source: Source::Http { base, agent }, record: None })
    }

    /// A recorded index directory.
    pub fn recorded(dir: &Path) -> Self {
        Self { source: Source::Dir(dir.to_owned()), record: None }
    }

    /// Also write what is read into `dir` (a recorded index), when [`Index::finish`] is called.
    pub fn record_into(&mut self, dir: &Path) {
        self.record = Some(Recording { dir: dir.to_owned(), pages: BTreeMap::new() });
    }

    /// The files of `project`'s page.
    pub fn files(&mut self, project: &str) -> Result<Vec<IndexFile>, IndexError> {
        if !project.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
            return Err(IndexError::Invalid {
                what: format!("project {project:?}"),
                reason: "expected a normalized project name".into(),
            });
        }
        let page: Page = match &self.source {
            Source::Http { base, agent } => {
                let url = join(base, &format!("{project}/"))?;
                let resp = agent
                    .get(url.as_str())
                    .set("Accept", &format!("{JSON_PAGE}, text/html;q=0.1"))
                    .call()
                    .map_err(|e| IndexError::Http { url: url.to_string(), reason: e.to_string() })?;
                let kind = resp.content_type().to_owned();
                let bytes = read_capped(resp.into_reader(), PAGE_CAP, url.as_str())?;
                let mut page: Page = if kind.starts_with(JSON_PAGE) || kind.starts_with("application/json") {
                    serde_json::from_slice(&bytes)
                        .map_err(|e| IndexError::Invalid { what: url.to_string(), reason: e.to_string() })?
                } else if kind.starts_with("text/html") {
                    html_page(&text(bytes, url.as_str())?)
                } else {
                    return Err(IndexError::Invalid {
                        what: url.to_string(),
                        reason: format!(
                            "served {kind:?}, expected PEP 691 JSON ({JSON_PAGE}) or PEP 503 HTML"
                        ),
                    });
                };
                for f in &mut page.files {
                    f.url = join(&url, &f.url)?.to_string();
                }
                page
            }
            Source::Dir(dir) => {
                let path = dir.join(format!("{project}.json"));
                let bytes = stackbuild_common::read_capped(&path, PAGE_CAP, "recorded project page")?;
                serde_json::from_slice(&bytes).map_err(|e| IndexError::Invalid {
                    what: path.display().to_string(),
                    reason: e.to_string(),
                })?
            }
        };
        if let Some(rec) = &mut self.record {
            rec.page(project);
        }
        Ok(page.files)
    }

    /// Marks `file` of `project` as consulted: it goes into the recording's page.
    pub fn consulted(&mut self, project: &str, file: &IndexFile) {
        if let Some(rec) = &mut self.record {
            let page = rec.page(project);
            if !page.files.iter().any(|f| f.filename == file.filename) {
                let mut kept = file.clone();
                // The recording names files, not hosts: its URLs are relative to the page.
                kept.url.clone_from(&file.filename);
                kept.core_metadata = None;
                page.files.push(kept);
            }
        }
    }

    /// The header part (up to the first blank line) of the wheel's `METADATA`.
    pub fn metadata(&mut self, project: &str, file: &IndexFile) -> Result<String, IndexError> {
        self.consulted(project, file);
        if file.filename.contains(['/', '\\']) || file.filename.starts_with('.') {
            return Err(IndexError::Invalid {
                what: format!("file {:?}", file.filename),
                reason: "expected a plain file name".into(),
            });
        }
        let text = match &self.source {
            Source::Http { agent, .. } => http_metadata(agent, file)?,
            Source::Dir(dir) => {
                let path = dir.join("metadata").join(format!("{}.metadata", file.filename));
                stackbuild_common::read_text(&path, METADATA_CAP, "recorded METADATA")?
            }
        };
        let headers = headers_of(&text).to_owned();
        if let Some(rec) = &self.record {
            let path = rec.dir.join("metadata").join(format!("{}.metadata", file.filename));
            write_file(&path, headers.as_bytes())?;
        }
        Ok(headers)
    }

    /// Downloads the whole wheel into `dir` (for what only its bytes tell: the fat binaries),
    /// verifying the sha256 the page gives as it streams; a recorded index has no wheels.
    pub fn download(&mut self, file: &IndexFile, dir: &Path) -> Result<PathBuf, IndexError> {
        let Source::Http { agent, .. } = &self.source else {
            return Err(IndexError::Invalid {
                what: file.filename.clone(),
                reason: "a recorded index holds metadata, not wheels".into(),
            });
        };
        if file.filename.contains(['/', '\\']) || file.filename.starts_with('.') {
            return Err(IndexError::Invalid {
                what: format!("file {:?}", file.filename),
                reason: "expected a plain file name".into(),
            });
        }
        let resp = agent
            .get(&file.url)
            .call()
            .map_err(|e| IndexError::Http { url: file.url.clone(), reason: e.to_string() })?;
        let path = dir.join(&file.filename);
        let err = |source| IndexError::Record { path: path.clone(), source };
        let mut out = std::fs::File::create(&path).map_err(err)?;
        let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
        let mut reader = resp.into_reader().take(WHEEL_CAP + 1);
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = reader
                .read(&mut buf)
                .map_err(|e| IndexError::Http { url: file.url.clone(), reason: e.to_string() })?;
            if n == 0 {
                break;
            }
            total += n as u64;
            sha2::Digest::update(&mut hasher, &buf[..n]);
            io::Write::write_all(&mut out, &buf[..n]).map_err(err)?;
        }
        if total > WHEEL_CAP {
            return Err(IndexError::Invalid {
                what: file.url.clone(),
                reason: format!("larger than {WHEEL_CAP} bytes"),
            });
        }
        let got = hex::encode(sha2::Digest::finalize(hasher));
        if let Some(want) = file.hashes.get("sha256").filter(|w| **w != got) {
            let _ = std::fs::remove_file(&path);
            return Err(IndexError::Invalid {
                what: file.url.clone(),
                reason: format!("sha256 {got}, the page says {want}"),
            });
        }
        Ok(path)
    }

    /// Writes the recording's pages (files sorted by name).
    pub fn finish(&mut self) -> Result<(), IndexError> {
        let Some(rec) = &mut self.record else { return Ok(()) };
        for (project, page) in &mut rec.pages {
            page.files.sort_by(|a, b| a.filename.cmp(&b.filename));
            let mut text = serde_json::to_string_pretty(page).map_err(|e| IndexError::Record {
                path: rec.dir.join(project),
                source: io::Error::other(e),
            })?;
            text.push('\n');
            write_file(&rec.dir.join(format!("{project}.json")), text.as_bytes())?;
        }
        Ok(())
    }
}

/// The index pip and uv use on this machine, without naming any host in this code: uv's and
/// pip's variables, pip's configuration, else pip's own default.
pub fn configured_index() -> Result<String, IndexError> {
    for var in ["UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"] {
        if let Some(v) = std::env::var(var).ok().filter(|v| !v.is_empty()) {
            return Ok(v);
        }
    }
    let ask = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("python3")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    ask(&["-m", "pip", "config", "get", "global.index-url"])
        .or_else(|| ask(&["-c", "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"]))
        .ok_or_else(|| IndexError::Invalid {
            what: "the configured index".into(),
            reason: "neither uv's nor pip's configuration names one, and pip is not there to say its default (give --index)".into(),
        })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), IndexError> {
    let err = |source| IndexError::Record { path: path.to_owned(), source };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    stackbuild_common::write_atomic(path, bytes).map_err(err)
}

/// The headers of a `METADATA` text: everything before the first blank line (the body is the
/// description, core metadata 2.1+).
fn headers_of(text: &str) -> &str {
    let end = text.find("\n\n").map_or(text.len(), |i| i + 1);
    &text[..end]
}

/// A PEP 503 page: each `<a href="URL#sha256=...">FILE</a>`, with `data-requires-python`,
/// `data-yanked` (PEP 592) and `data-core-metadata` / `data-dist-info-metadata` (PEP 714/658).
/// Anchors are all a simple page holds, so this reads them and nothing else. Tags and attribute
/// names in any case; the file name is the last segment of the URL's path, percent-decoded
/// (PEP 503 makes it the anchor's text too, but a pip find-links page need not), else the text.
fn html_page(html: &str) -> Page {
    let mut files = Vec::new();
    let lower = html.to_ascii_lowercase();
    let mut at = 0;
    while let Some(i) = lower[at..].find("<a") {
        let start = at + i + 2;
        at = start;
        if !lower[start..].starts_with(|c: char| c.is_ascii_whitespace()) {
            continue;
        }
        let Some(tag_end) = lower[start..].find('>') else { break };
        let attrs = &html[start..start + tag_end];
        let body_start = start + tag_end + 1;
        let close = lower[body_start..].find("</a>").map_or(html.len(), |c| body_start + c);
        let text = unescape(html[body_start..close].trim());
        at = close.min(html.len());
        let Some(href) = attribute(attrs, "href") else { continue };
        let (url, fragment) = href.split_once('#').map_or((href.as_str(), ""), |(u, f)| (u, f));
        let last = url.split('?').next().unwrap_or("").rsplit('/').next().unwrap_or("");
        let filename = percent_encoding::percent_decode_str(last).decode_utf8_lossy().into_owned();
        let filename = if filename.is_empty() { text } else { filename };
        if filename.is_empty() {
            continue;
        }
        let mut hashes = BTreeMap::new();
        if let Some((algo, digest)) = fragment.split_once('=') {
            hashes.insert(algo.to_owned(), digest.to_owned());
        }
        let metadata = |name| {
            attribute(attrs, name).map(|v| match v.split_once('=') {
                Some((algo, digest)) => serde_json::json!({ algo: digest }),
                None => serde_json::Value::Bool(v != "false"),
            })
        };
        files.push(IndexFile {
            filename,
            url: url.to_owned(),
            hashes,
            requires_python: attribute(attrs, "data-requires-python"),
            yanked: attribute(attrs, "data-yanked").map_or(serde_json::Value::Bool(false), |r| {
                if r.is_empty() {
                    true.into()
                } else {
                    r.into()
                }
            }),
            core_metadata: metadata("data-core-metadata"),
            dist_info_metadata: metadata("data-dist-info-metadata"),
            size: None,
        });
    }
    Page { meta: serde_json::Value::Null, name: String::new(), files }
}

/// The files of a PEP 503 page or a pip find-links page ([`html_page`]).
pub(crate) fn html_files(html: &str) -> Vec<IndexFile> {
    html_page(html).files
}

/// The value of `name` in a tag's attributes (quoted with `"` or `'`, or bare; a bare
/// attribute is the empty string), HTML entities decoded.
fn attribute(attrs: &str, name: &str) -> Option<String> {
    let lower = attrs.to_ascii_lowercase();
    let mut at = 0;
    while let Some(i) = lower[at..].find(name) {
        let start = at + i;
        at = start + name.len();
        let before_ok = start == 0 || attrs.as_bytes()[start - 1].is_ascii_whitespace();
        let tail = &attrs[at..];
        if !before_ok || tail.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-') {
            continue;
        }
        let tail = tail.trim_start();
        let Some(value) = tail.strip_prefix('=') else { return Some(String::new()) };
        let value = value.trim_start();
        let raw = match value.chars().next() {
            Some(q @ ('"' | '\'')) => value[1..].split(q).next().unwrap_or(""),
            _ => value.split(|c: char| c.is_ascii_whitespace()).next().unwrap_or(""),
        };
        return Some(unescape(raw));
    }
    None
}

/// The character references a simple page uses (`&gt;=3.8`, `&lt;`, `&amp;`, `&quot;`, `&#39;`).
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&amp;", "&")
}

fn join(base: &url::Url, rel: &str) -> Result<url::Url, IndexError> {
    base.join(rel)
        .map_err(|e| IndexError::Invalid { what: format!("URL {rel:?} on {base}"), reason: e.to_string() })
}

fn read_capped(reader: impl Read, cap: u64, what: &str) -> Result<Vec<u8>, IndexError> {
    let mut bytes = Vec::new();
    reader
        .take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| IndexError::Http { url: what.to_owned(), reason: e.to_string() })?;
    if bytes.len() as u64 > cap {
        return Err(IndexError::Invalid {
            what: what.to_owned(),
            reason: format!("larger than {cap} bytes"),
        });
    }
    Ok(bytes)
}

fn text(bytes: Vec<u8>, what: &str) -> Result<String, IndexError> {
    String::from_utf8(bytes)
        .map_err(|_| IndexError::Invalid { what: what.to_owned(), reason: "not UTF-8".into() })
}

/// PEP 658's `.metadata` file, verified against the hash the page gives for it; where the index
/// has none (404), the `METADATA` member read by range requests.
fn http_metadata(agent: &ureq::Agent, file: &IndexFile) -> Result<String, IndexError> {
    let url = format!("{}.metadata", file.url);
    match agent.get(&url).call() {
        Ok(resp) => {
            let bytes = read_capped(resp.into_reader(), METADATA_CAP, &url)?;
            let declared = file.core_metadata.as_ref().or(file.dist_info_metadata.as_ref());
            if let Some(want) = declared.and_then(|m| m.get("sha256")).and_then(|v| v.as_str()) {
                use sha2::Digest as _;
                let got = hex::encode(sha2::Sha256::digest(&bytes));
                if got != want {
                    return Err(IndexError::Invalid {
                        what: url,
                        reason: format!("sha256 {got}, the page says {want}"),
                    });
                }
            }
            text(bytes, &url)
        }
        Err(ureq::Error::Status(404 | 403 | 410, _)) => lazy_metadata(agent, file),
        Err(e) => Err(IndexError::Http { url, reason: e.to_string() }),
    }
}

/// The wheel's `*.dist-info/METADATA`, read from the zip by range requests.
fn lazy_metadata(agent: &ureq::Agent, file: &IndexFile) -> Result<String, IndexError> {
    let len = if let Some(n) = file.size {
        n
    } else {
        let resp = agent
            .head(&file.url)
            .call()
            .map_err(|e| IndexError::Http { url: file.url.clone(), reason: e.to_string() })?;
        resp.header("Content-Length").and_then(|v| v.parse().ok()).ok_or_else(|| IndexError::Invalid {
            what: file.url.clone(),
            reason: "no size on the page and no Content-Length".into(),
        })?
    };
    let reader =
        RangeReader { agent, url: &file.url, len, pos: 0, blocks: BTreeMap::new(), fetched: 0, error: None };
    let mut archive = zip::ZipArchive::new(reader).map_err(|e| IndexError::Invalid {
        what: file.url.clone(),
        reason: format!("reading the wheel's zip directory by range requests: {e}"),
    })?;
    crate::wheel::dist_info_metadata(&mut archive, METADATA_CAP)
        .map(|(_, text)| text)
        .map_err(|reason| IndexError::Invalid { what: file.filename.clone(), reason })
}

/// A remote file as `Read + Seek`, fetched in [`RANGE_BLOCK`] blocks with `Range` requests
/// (RFC 9110 section 14), at most [`RANGE_BUDGET`] bytes.
struct RangeReader<'a> {
    agent: &'a ureq::Agent,
    url: &'a str,
    len: u64,
    pos: u64,
    blocks: BTreeMap<u64, Vec<u8>>,
    fetched: u64,
    error: Option<String>,
}

impl RangeReader<'_> {
    fn block(&mut self, index: u64) -> io::Result<&[u8]> {
        if !self.blocks.contains_key(&index) {
            let start = index * RANGE_BLOCK;
            let end = (start + RANGE_BLOCK).min(self.len) - 1;
            if self.fetched + (end + 1 - start) > RANGE_BUDGET {
                return Err(io::Error::other(format!(
                    "more than {RANGE_BUDGET} bytes of {} needed",
                    self.url
                )));
            }
            let resp = self
                .agent
                .get(self.url)
                .set("Range", &format!("bytes={start}-{end}"))
                .call()
                .map_err(|e| io::Error::other(format!("{}: {e}", self.url)))?;
            if resp.status() != 206 {
                let why = format!("{}: answered {} to a range request, not 206", self.url, resp.status());
                self.error = Some(why.clone());
                return Err(io::Error::other(why));
            }
            let mut bytes = Vec::new();
            resp.into_reader().take(RANGE_BLOCK).read_to_end(&mut bytes)?;
            if bytes.len() as u64 != end + 1 - start {
                return Err(io::Error::other(format!("{}: short range answer", self.url)));
            }
            self.fetched += bytes.len() as u64;
            self.blocks.insert(index, bytes);
        }
        Ok(&self.blocks[&index])
    }
}

impl Read for RangeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let index = self.pos / RANGE_BLOCK;
        let offset = usize::try_from(self.pos % RANGE_BLOCK).map_err(io::Error::other)?;
        let block = self.block(index)?;
        let n = buf.len().min(block.len() - offset);
        buf[..n].copy_from_slice(&block[offset..offset + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RangeReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let next = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos =
            next.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_stop_at_the_description() {
        assert_eq!(headers_of("Name: a\nVersion: 1\n\nbody\n"), "Name: a\nVersion: 1\n");
        assert_eq!(headers_of("Name: a\n"), "Name: a\n");
    }

    #[test]
    fn pep_503_pages_are_read_with_their_data_attributes() {
        let html = r#"<!DOCTYPE html><html><body><h1>Links for torch</h1>
<a href="/whl/cu129/torch-2.9.1%2Bcu129-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=abc" data-requires-python="&gt;=3.10" data-dist-info-metadata="sha256=def" data-core-metadata="sha256=def">torch-2.9.1+cu129-cp311-cp311-manylinux_2_28_x86_64.whl</a><br/>
<a href='../torch-2.0.0-cp38-none-any.whl' data-yanked>torch-2.0.0-cp38-none-any.whl</a>
</body></html>"#;
        let page = html_page(html);
        let [a, b] = page.files.as_slice() else { panic!("{:?}", page.files) };
        assert_eq!(a.filename, "torch-2.9.1+cu129-cp311-cp311-manylinux_2_28_x86_64.whl");
        assert_eq!(a.url, "/whl/cu129/torch-2.9.1%2Bcu129-cp311-cp311-manylinux_2_28_x86_64.whl");
        assert_eq!(a.hashes.get("sha256").map(String::as_str), Some("abc"));
        assert_eq!(a.requires_python.as_deref(), Some(">=3.10"));
        assert_eq!(a.core_metadata, Some(serde_json::json!({"sha256": "def"})));
        assert!(!a.is_yanked() && b.is_yanked());
        assert_eq!(b.url, "../torch-2.0.0-cp38-none-any.whl");
        assert!(html_page("<a>no href</a><a href=x").files.is_empty());
    }

    #[test]
    fn a_recording_names_files_not_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let src = tempfile::tempdir().unwrap();
        std::fs::write(
            src.path().join("demo.json"),
            r#"{"meta":{"api-version":"1.1"},"name":"demo","files":[
              {"filename":"demo-1.0-py3-none-any.whl","url":"https://files.example.invalid/x/demo-1.0-py3-none-any.whl",
               "hashes":{"sha256":"00"},"requires-python":">=3.8","core-metadata":{"sha256":"11"}},
              {"filename":"demo-0.9-py3-none-any.whl","url":"demo-0.9-py3-none-any.whl","hashes":{}}]}"#,
        )
        .unwrap();
        std::fs::create_dir(src.path().join("metadata")).unwrap();
        std::fs::write(
            src.path().join("metadata/demo-1.0-py3-none-any.whl.metadata"),
            "Name: demo\nVersion: 1.0\n\nlong description\n",
        )
        .unwrap();
        let mut index = Index::recorded(src.path());
        index.record_into(dir.path());
        let files = index.files("demo").unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(index.metadata("demo", &files[0]).unwrap(), "Name: demo\nVersion: 1.0\n");
        index.finish().unwrap();
        let page = std::fs::read_to_string(dir.path().join("demo.json")).unwrap();
        assert!(!page.contains("example.invalid"), "{page}");
        assert!(!page.contains("demo-0.9"), "only consulted files are recorded: {page}");
        let again = Index::recorded(dir.path()).files("demo").unwrap();
        assert_eq!(again[0].url, "demo-1.0-py3-none-any.whl");
        assert!(Index::recorded(src.path()).files("../etc").is_err());
    }
}
