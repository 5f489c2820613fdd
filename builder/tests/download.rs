//! The downloader end to end, through the real CLI: a local PEP 691/503 index behind HTTP basic
//! authentication (credentials from a netrc file), uv resolving against it, and stackbuild
//! downloading from it with one slow wheel, one connection dropped mid-file and, in a second
//! build, one file whose bytes are not the ones the page hashes.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use test_support::digest::sha256_hex;
use test_support::wheel::write_wheel;

const USER: &str = "alice";
const PASSWORD: &str = "s3cret-pw";

/// One request the server answered.
#[derive(Debug, Clone)]
struct Logged {
    path: String,
    range: Option<String>,
    authorized: bool,
    user_agent: String,
    start: Instant,
    end: Instant,
}

/// A file the index serves, and how.
#[derive(Clone)]
struct Served {
    bytes: Vec<u8>,
    /// The sha256 the page gives (the bytes' own, unless the test lies).
    page_sha256: String,
    /// Sleep this long between 16 KiB chunks.
    slow: Option<Duration>,
    /// Close the connection after this many bytes of the first full GET.
    drop_after: Option<usize>,
}

struct Index {
    addr: std::net::SocketAddr,
    log: Arc<Mutex<Vec<Logged>>>,
    stop: Arc<AtomicBool>,
}

impl Index {
    /// Serves `files` (`filename -> Served`) as the projects their names give; the project
    /// `html` is a PEP 503 page whatever the client accepts, the others PEP 691 JSON.
    fn start(files: BTreeMap<String, Served>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let files = Arc::new(files);
        let dropped = Arc::new(Mutex::new(Vec::<String>::new()));
        let (log2, stop2) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (files, log, dropped) = (files.clone(), log2.clone(), dropped.clone());
                std::thread::spawn(move || serve(stream, &files, &log, &dropped));
            }
        });
        Self { addr, log, stop }
    }

    fn url(&self) -> String {
        format!("http://{}/simple", self.addr)
    }

    fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn project_of(filename: &str) -> String {
    filename.split('-').next().unwrap().to_ascii_lowercase().replace('_', "-")
}

fn metadata_of(filename: &str) -> String {
    let mut parts = filename.split('-');
    let (name, version) = (parts.next().unwrap(), parts.next().unwrap());
    format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
}

#[allow(clippy::too_many_lines)] // one request, routed: pages, metadata, files
fn serve(
    stream: TcpStream,
    files: &BTreeMap<String, Served>,
    log: &Mutex<Vec<Logged>>,
    dropped: &Mutex<Vec<String>>,
) {
    let start = Instant::now();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() || request.is_empty() {
        return;
    }
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let mut words = request.split_whitespace();
    let method = words.next().unwrap_or("").to_owned();
    let path = words.next().unwrap_or("").to_owned();
    let expected = {
        use base64::Engine as _;
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}")))
    };
    let authorized = headers.get("authorization") == Some(&expected);
    let range = headers.get("range").cloned();
    let user_agent = headers.get("user-agent").cloned().unwrap_or_default();
    let record = |end: Instant| {
        log.lock().unwrap().push(Logged {
            path: path.clone(),
            range: range.clone(),
            authorized,
            user_agent: user_agent.clone(),
            start,
            end,
        });
    };
    let respond = |w: &mut TcpStream, status: &str, kind: &str, extra: &str, body: &[u8]| {
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
            body.len()
        );
        let _ = w.write_all(head.as_bytes());
        if method != "HEAD" {
            let _ = w.write_all(body);
        }
    };
    if !authorized {
        respond(
            &mut writer,
            "401 Unauthorized",
            "text/plain",
            "WWW-Authenticate: Basic realm=\"test\"\r\n",
            b"no",
        );
        record(Instant::now());
        return;
    }
    let json = headers.get("accept").is_some_and(|a| a.contains("application/vnd.pypi.simple.v1+json"));
    if let Some(project) = path.strip_prefix("/simple/").map(|p| p.trim_end_matches('/')) {
        let mine: Vec<(&String, &Served)> = files.iter().filter(|(f, _)| project_of(f) == project).collect();
        if mine.is_empty() {
            respond(&mut writer, "404 Not Found", "text/plain", "", b"none");
        } else if json && project != "html" {
            let files: Vec<serde_json::Value> = mine
                .iter()
                .map(|(f, s)| {
                    serde_json::json!({
                        "filename": f, "url": format!("../../files/{f}"),
                        "hashes": {"sha256": s.page_sha256},
                        "core-metadata": {"sha256": sha256_hex(metadata_of(f).as_bytes())},
                        "size": s.bytes.len(),
                    })
                })
                .collect();
            let page = serde_json::json!({"meta": {"api-version": "1.1"}, "name": project, "files": files, "versions": []});
            respond(
                &mut writer,
                "200 OK",
                "application/vnd.pypi.simple.v1+json",
                "",
                page.to_string().as_bytes(),
            );
        } else {
            let mut html = String::from("<!DOCTYPE html><html><body>\n");
            for (f, s) in &mine {
                let meta = sha256_hex(metadata_of(f).as_bytes());
                let _ = writeln!(
                    html,
                    "<a href=\"/files/{f}#sha256={}\" data-dist-info-metadata=\"sha256={meta}\" data-core-metadata=\"sha256={meta}\">{f}</a><br/>",
                    s.page_sha256
                );
            }
            html.push_str("</body></html>\n");
            respond(&mut writer, "200 OK", "text/html", "", html.as_bytes());
        }
    } else if let Some(name) = path.strip_prefix("/files/") {
        if let Some(wheel) = name.strip_suffix(".metadata").filter(|w| files.contains_key(*w)) {
            respond(&mut writer, "200 OK", "application/octet-stream", "", metadata_of(wheel).as_bytes());
        } else if let Some(s) = files.get(name) {
            let from = range
                .as_deref()
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.strip_suffix('-'))
                .and_then(|r| r.parse::<usize>().ok());
            let (status, extra, body) = match from {
                Some(n) if n < s.bytes.len() => (
                    "206 Partial Content",
                    format!("Content-Range: bytes {n}-{}/{}\r\n", s.bytes.len() - 1, s.bytes.len()),
                    &s.bytes[n..],
                ),
                _ => ("200 OK", String::new(), &s.bytes[..]),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nAccept-Ranges: bytes\r\n{extra}Connection: close\r\n\r\n",
                body.len()
            );
            let _ = writer.write_all(head.as_bytes());
            let first_full = from.is_none() && {
                let mut d = dropped.lock().unwrap();
                let first = !d.contains(&name.to_owned());
                d.push(name.to_owned());
                first
            };
            let limit = s.drop_after.filter(|_| first_full && method == "GET").unwrap_or(body.len());
            if method == "GET" {
                for chunk in body[..limit.min(body.len())].chunks(16 << 10) {
                    if writer.write_all(chunk).is_err() {
                        break;
                    }
                    if let Some(d) = s.slow {
                        std::thread::sleep(d);
                    }
                }
            }
            let _ = writer.flush();
            let _ = writer.shutdown(std::net::Shutdown::Both);
        } else {
            respond(&mut writer, "404 Not Found", "text/plain", "", b"none");
        }
    } else {
        respond(&mut writer, "404 Not Found", "text/plain", "", b"none");
    }
    record(Instant::now());
}

fn served(path: &Path) -> Served {
    let bytes = std::fs::read(path).unwrap();
    Served { page_sha256: sha256_hex(&bytes), bytes, slow: None, drop_after: None }
}

/// The environment of one stackbuild run: the netrc, a HOME and caches of its own, none of the
/// machine's index settings.
fn stackbuild(home: &Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    stackbuild_with(home, args, &[])
}

/// [`stackbuild`] with `extra` variables set.
fn stackbuild_with(home: &Path, args: &[&std::ffi::OsStr], extra: &[(&str, &str)]) -> std::process::Output {
    let netrc = home.join("netrc");
    std::fs::write(&netrc, format!("machine 127.0.0.1\n  login {USER}\n  password {PASSWORD}\n")).unwrap();
    let mut cmd = Command::new(common::STACKBUILD);
    cmd.args(args)
        .env("SOURCE_DATE_EPOCH", "0")
        .env("NETRC", &netrc)
        .env("HOME", home)
        .env("UV_CACHE_DIR", home.join("uv-cache"))
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("STACKBUILD_DOWNLOAD_JOBS", "4");
    for var in [
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "PIP_NO_INDEX",
        "UV_INDEX_URL",
        "UV_DEFAULT_INDEX",
        "UV_EXTRA_INDEX_URL",
        "UV_INDEX",
        "UV_FIND_LINKS",
        "STACKBUILD_DOWNLOADER",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn recipe(dir: &Path, name: &str, index: &str, packages: &[&str]) -> PathBuf {
    let list: Vec<String> = packages.iter().map(|p| format!("{p:?}")).collect();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[image]\nname = \"{name}\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\nindex = \"{index}\"\npackages = [{}]\n",
            list.join(", ")
        ),
    )
    .unwrap();
    path
}

/// Everything under the cache's artifact directory: `(sha256 dir, file)` pairs and stray entries.
fn artifacts(cache: &Path) -> Vec<String> {
    let dir = cache.join("artifacts");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let inner: Vec<String> = std::fs::read_dir(entry.path())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        out.push(format!("{name}/{}", inner.join(",")));
    }
    out.sort();
    out
}

/// What [`artifacts`] lists once exactly `wheels` are in the cache: `<sha256>/<file name>`.
fn cached_as<'a>(wheels: impl Iterator<Item = &'a PathBuf>) -> Vec<String> {
    let mut out: Vec<String> = wheels
        .map(|w| {
            format!("{}/{}", sha256_hex(&std::fs::read(w).unwrap()), w.file_name().unwrap().to_string_lossy())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn downloads_in_parallel_with_netrc_resuming_a_dropped_transfer() {
    if !common::have("uv") {
        eprintln!("skipped: no uv to resolve against the test index");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    let mut files = BTreeMap::new();
    let slow = write_wheel(&wheels, "slowpkg", "1.0", 400 << 10, 1);
    let broken = write_wheel(&wheels, "brokenpkg", "2.0", 600 << 10, 2);
    let html = write_wheel(&wheels, "html", "0.3", 50 << 10, 3);
    let mut all = vec![slow.clone(), broken.clone(), html.clone()];
    for i in 0..5 {
        all.push(write_wheel(&wheels, &format!("fast{i}"), "1.0", 100 << 10, 10 + i));
    }
    for w in &all {
        files.insert(w.file_name().unwrap().to_string_lossy().into_owned(), served(w));
    }
    // 400 KiB in 16 KiB chunks, 60 ms apart: 1.5 s.
    files.get_mut("slowpkg-1.0-py3-none-any.whl").unwrap().slow = Some(Duration::from_millis(60));
    files.get_mut("brokenpkg-2.0-py3-none-any.whl").unwrap().drop_after = Some(200 << 10);
    let index = Index::start(files);

    let packages = [
        "slowpkg==1.0",
        "brokenpkg==2.0",
        "html==0.3",
        "fast0==1.0",
        "fast1==1.0",
        "fast2==1.0",
        "fast3==1.0",
        "fast4==1.0",
    ];
    let recipe = recipe(tmp.path(), "good", &index.url(), &packages);
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    let o = stackbuild(
        tmp.path(),
        &[recipe.as_os_str(), "--cache-dir".as_ref(), cache.as_os_str(), "--out".as_ref(), out.as_os_str()],
    );
    assert!(o.status.success(), "build failed: {}", String::from_utf8_lossy(&o.stderr));

    // Every wheel is in the cache under its own digest, intact; nothing else is there.
    assert_eq!(artifacts(&cache), cached_as(all.iter()));
    for w in &all {
        let name = w.file_name().unwrap().to_string_lossy().into_owned();
        let digest = sha256_hex(&std::fs::read(w).unwrap());
        assert_eq!(
            std::fs::read(cache.join("artifacts").join(&digest).join(&name)).unwrap(),
            std::fs::read(w).unwrap()
        );
    }

    let log = index.log();
    let gets = |name: &str| -> Vec<Logged> {
        log.iter().filter(|l| l.path == format!("/files/{name}")).cloned().collect()
    };
    // The dropped transfer was resumed from where it broke, not started over.
    let b = gets("brokenpkg-2.0-py3-none-any.whl");
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(b[0].range, None);
    assert_eq!(b[1].range.as_deref(), Some(format!("bytes={}-", 200 << 10).as_str()), "{b:?}");
    // Every wheel was fetched with the netrc's credentials; each once (besides the resume).
    for w in &all {
        let name = w.file_name().unwrap().to_string_lossy().into_owned();
        let g = gets(&name);
        assert!(g.iter().all(|l| l.authorized && l.user_agent.starts_with("stackbuild/")), "{name}: {g:?}");
        assert_eq!(g.len(), if name.starts_with("brokenpkg") { 2 } else { 1 }, "{name}: {g:?}");
    }
    // The slow wheel did not hold up the others: they were fetched while it streamed.
    let s = &gets("slowpkg-1.0-py3-none-any.whl")[0];
    assert!(s.end - s.start >= Duration::from_secs(1), "{s:?}");
    let during = (0..5)
        .filter(|i| {
            gets(&format!("fast{i}-1.0-py3-none-any.whl"))
                .iter()
                .any(|l| l.start >= s.start && l.end <= s.end)
        })
        .count();
    assert!(during >= 3, "only {during} of 5 fast wheels came while the slow one streamed: {log:#?}");

    // A second build finds every wheel in the cache and downloads nothing.
    let before = index
        .log()
        .iter()
        .filter(|l| l.path.starts_with("/files/") && !l.path.ends_with(".metadata"))
        .count();
    let out2 = tmp.path().join("out2");
    let o = stackbuild(
        tmp.path(),
        &[recipe.as_os_str(), "--cache-dir".as_ref(), cache.as_os_str(), "--out".as_ref(), out2.as_os_str()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let after = index
        .log()
        .iter()
        .filter(|l| l.path.starts_with("/files/") && !l.path.ends_with(".metadata"))
        .count();
    assert_eq!(before, after);
}

#[test]
fn a_wrong_file_is_an_error_naming_the_package_and_leaves_nothing() {
    if !common::have("uv") {
        eprintln!("skipped: no uv to resolve against the test index");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    let good = write_wheel(&wheels, "goodpkg", "1.0", 64 << 10, 5);
    let bad = write_wheel(&wheels, "badpkg", "1.0", 64 << 10, 6);
    let mut files = BTreeMap::new();
    files.insert("goodpkg-1.0-py3-none-any.whl".to_owned(), served(&good));
    // The page gives the real file's digest (so the lock pins it); the bytes served are others.
    let mut lie = served(&bad);
    lie.bytes = test_support::rng::noise(lie.bytes.len(), 99);
    files.insert("badpkg-1.0-py3-none-any.whl".to_owned(), lie);
    let index = Index::start(files);

    let recipe = recipe(tmp.path(), "bad", &index.url(), &["badpkg==1.0"]);
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    let o = stackbuild(
        tmp.path(),
        &[recipe.as_os_str(), "--cache-dir".as_ref(), cache.as_os_str(), "--out".as_ref(), out.as_os_str()],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(stderr.contains("downloading badpkg==1.0 from"), "{stderr}");
    assert!(stderr.contains(&index.url()), "{stderr}");
    assert!(stderr.contains("has sha256"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    assert_eq!(artifacts(&cache), Vec::<String>::new(), "{stderr}");
}

/// A project's own lock (`pylock.toml`) whose wheels are on an index that needs credentials:
/// they are fetched with the netrc's, a dropped transfer resumes with `Range`, and without
/// credentials the build fails naming the package and the URL, with nothing left in the cache.
#[test]
fn a_projects_lock_downloads_with_the_netrc_credentials_resuming_a_dropped_transfer() {
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    let one = write_wheel(&wheels, "lockone", "1.0", 300 << 10, 21);
    let two = write_wheel(&wheels, "locktwo", "2.0", 40 << 10, 22);
    let mut files = BTreeMap::new();
    for w in [&one, &two] {
        files.insert(w.file_name().unwrap().to_string_lossy().into_owned(), served(w));
    }
    files.get_mut("lockone-1.0-py3-none-any.whl").unwrap().drop_after = Some(100 << 10);
    let index = Index::start(files);
    let mut lock = String::from("lock-version = \"1.0\"\ncreated-by = \"test\"\n");
    for (w, name, version) in [(&one, "lockone", "1.0"), (&two, "locktwo", "2.0")] {
        let bytes = std::fs::read(w).unwrap();
        let file = w.file_name().unwrap().to_string_lossy().into_owned();
        writeln!(
            lock,
            "[[packages]]\nname = \"{name}\"\nversion = \"{version}\"\nwheels = [{{ url = \"http://{}/files/{file}\", \
             size = {}, hashes = {{ sha256 = \"{}\" }} }}]",
            index.addr,
            bytes.len(),
            sha256_hex(&bytes)
        )
        .unwrap();
    }
    std::fs::write(tmp.path().join("pylock.toml"), lock).unwrap();
    let recipe = tmp.path().join("given.toml");
    std::fs::write(
        &recipe,
        "[image]\nname = \"given\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\nlock = \"pylock.toml\"\n",
    )
    .unwrap();
    let cache = tmp.path().join("cache");
    let run = |out: &str, extra: &[(&str, &str)]| {
        let out = tmp.path().join(out);
        let args = [
            recipe.as_os_str(),
            "--cache-dir".as_ref(),
            cache.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
        ];
        stackbuild_with(tmp.path(), &args, extra)
    };

    // Without credentials: the index's 401, naming the package and the URL; nothing kept.
    let empty = tmp.path().join("empty-netrc");
    std::fs::write(&empty, "").unwrap();
    let o = run("out0", &[("NETRC", empty.to_str().unwrap())]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(stderr.contains("pylock.toml: package lockone 1.0: downloading http://"), "{stderr}");
    assert!(stderr.contains("HTTP 401"), "{stderr}");
    assert_eq!(artifacts(&cache), Vec::<String>::new(), "{stderr}");

    let o = run("out", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(artifacts(&cache), cached_as([&one, &two].into_iter()));
    let log = index.log();
    let gets: Vec<&Logged> =
        log.iter().filter(|l| l.path == "/files/lockone-1.0-py3-none-any.whl" && l.authorized).collect();
    assert_eq!(gets.len(), 2, "{log:#?}");
    assert_eq!(gets[1].range.as_deref(), Some(format!("bytes={}-", 100 << 10).as_str()), "{log:#?}");
    assert!(gets.iter().all(|l| l.user_agent.starts_with("stackbuild/")), "{log:#?}");
}

/// `STACKBUILD_DOWNLOADER=pip`: pip downloads instead (the fallback), from the same index with
/// the same netrc, into the same cache layout.
#[test]
fn pip_remains_as_the_fallback() {
    if !common::have("uv")
        || !Command::new("python3")
            .args(["-m", "pip", "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: needs uv and python3 -m pip");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wheel = write_wheel(&tmp.path().join("wheels"), "viapip", "1.0", 32 << 10, 7);
    let index = Index::start(BTreeMap::from([("viapip-1.0-py3-none-any.whl".to_owned(), served(&wheel))]));
    let recipe = recipe(tmp.path(), "pip", &index.url(), &["viapip==1.0"]);
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    let args =
        [recipe.as_os_str(), "--cache-dir".as_ref(), cache.as_os_str(), "--out".as_ref(), out.as_os_str()];
    let o = stackbuild_with(tmp.path(), &args, &[("STACKBUILD_DOWNLOADER", "pip")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let digest = sha256_hex(&std::fs::read(&wheel).unwrap());
    assert_eq!(artifacts(&cache), [format!("{digest}/viapip-1.0-py3-none-any.whl")]);
    // pip fetched it, once.
    let log = index.log();
    let gets: Vec<&Logged> =
        log.iter().filter(|l| l.path == "/files/viapip-1.0-py3-none-any.whl" && l.authorized).collect();
    assert_eq!(gets.len(), 1, "{log:#?}");
    assert!(gets[0].user_agent.starts_with("pip/"), "{:?}", gets[0]);
}

/// Pins of a `uv pip compile --generate-hashes` output: `name==version` and its hashes.
fn read_requirements(text: &str) -> Vec<stackbuild_python::Pinned> {
    let joined = text.replace("\\\n", " ");
    let mut pins = Vec::new();
    for line in joined.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut words = line.split_whitespace();
        let spec = words.next().unwrap();
        let (name, version) = spec.split_once("==").unwrap();
        let version = version.split(';').next().unwrap();
        let hashes = words.filter_map(|w| w.strip_prefix("--hash=sha256:")).map(str::to_owned).collect();
        pins.push(stackbuild_python::Pinned {
            name: name.parse().unwrap(),
            version: version.parse().unwrap(),
            hashes,
        });
    }
    pins
}

/// A cold download of the wheels of `STACKBUILD_BENCH_REQUIREMENTS` (a `uv pip compile
/// --generate-hashes` file for `CPython` 3.11 on `x86_64` `manylinux_2_28`) from the machine's
/// configured index: ours, `pip download` (what fetch.rs ran before) and `uv pip install
/// --target` (fresh cache), interleaved, `STACKBUILD_BENCH_ROUNDS` rounds (default 2).
/// `cargo test --release -p stackbuild --test download -- --ignored --nocapture bench_`
#[test]
#[ignore = "a benchmark: downloads from the configured index"]
fn bench_cold_download() {
    let Ok(req) = std::env::var("STACKBUILD_BENCH_REQUIREMENTS") else {
        eprintln!("skipped: set STACKBUILD_BENCH_REQUIREMENTS");
        return;
    };
    let pins = read_requirements(&std::fs::read_to_string(&req).unwrap());
    let target =
        stackbuild_python::Target::new("3.11".parse().unwrap(), stackbuild_common::Platform::LinuxAmd64);
    let rounds: usize =
        std::env::var("STACKBUILD_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(2);
    let mut times: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut bytes = 0u64;
    for round in 0..rounds {
        let tmp = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let got = stackbuild_python::fetch_wheels(
            &pins,
            &target,
            stackbuild_recipe::IndexSources::default(),
            &tmp.path().join("ours"),
            None,
        )
        .unwrap();
        times.entry("stackbuild").or_default().push(t.elapsed().as_secs_f64());
        bytes = got.iter().map(|a| a.size).sum();

        let mut pip = Command::new("python3");
        pip.args([
            "-m",
            "pip",
            "download",
            "--no-cache-dir",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
        ])
        .args(["--disable-pip-version-check", "--progress-bar", "off", "-q"])
        .args([
            "--implementation",
            "cp",
            "--python-version",
            "3.11",
            "--abi",
            "cp311",
            "--abi",
            "abi3",
            "--abi",
            "none",
        ]);
        for tag in target.platform_tags() {
            pip.args(["--platform", &tag]);
        }
        pip.arg("-d").arg(tmp.path().join("pip")).arg("-r").arg(&req);
        let t = Instant::now();
        assert!(pip.status().unwrap().success());
        times.entry("pip download").or_default().push(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let uv = Command::new("uv")
            .args(["pip", "install", "--no-deps", "--require-hashes", "--only-binary", ":all:", "-q"])
            .args([
                "--python-version",
                "3.11",
                "--python-platform",
                "x86_64-manylinux_2_28",
                "--no-python-downloads",
            ])
            .arg("--target")
            .arg(tmp.path().join("uv-target"))
            .arg("--cache-dir")
            .arg(tmp.path().join("uv-cache"))
            .arg("-r")
            .arg(&req)
            .status()
            .unwrap();
        assert!(uv.success());
        times.entry("uv pip install --target").or_default().push(t.elapsed().as_secs_f64());
        eprintln!("round {round}: {:?}", times.iter().map(|(k, v)| (k, v[round])).collect::<Vec<_>>());
    }
    let best = |k: &str| times[k].iter().copied().fold(f64::INFINITY, f64::min);
    #[allow(clippy::cast_precision_loss)] // MB to one decimal
    let mb = bytes as f64 / 1e6;
    eprintln!("{} wheels, {mb:.1} MB; best of {rounds}:", pins.len());
    for k in times.keys() {
        eprintln!(
            "  {k:<26} {:>6.2} s  {:>6.1} MB/s  ours/this {:.2}",
            best(k),
            mb / best(k),
            best("stackbuild") / best(k)
        );
    }
}
