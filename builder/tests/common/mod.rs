//! Helpers the builder's end-to-end tests share (each test file includes this module).
#![allow(dead_code)]

use std::fmt::Write as _;
use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The Debian base of the small test recipes: bookworm with its Python.
pub const BOOKWORM_PYTHON: &str = "[base]\ndebian = \"bookworm\"\npackages = [\"python3\"]\n";

/// The small test recipes' patch of `six`: `find` replaced by a `+patched` version, once.
pub fn six_patch(find: &str) -> String {
    format!(
        "[[patch]]\nname = \"six-version\"\npackage = \"six\"\nfile = \"six.py\"\nfind = '{find}'\n\
         replace = '__version__ = \"1.16.0+patched\"'\ncount = 1\n"
    )
}

/// The builder under test.
pub const STACKBUILD: &str = env!("CARGO_BIN_EXE_stackbuild");

/// Whether `program` is on PATH (a constant name, never input).
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The machine's architecture in Go's spelling, as OCI platforms write it.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// Runs git in `dir` with a fixed identity and no system configuration; its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Whether builds on a Debian base can run here: root, mmdebstrap, uv and the programs in
/// `more`; prints what is missing (the test then reports itself skipped).
pub fn debian_builds_ready(more: &[&str]) -> bool {
    let root = rustix::process::geteuid().is_root();
    let missing: Vec<&str> = ["mmdebstrap", "uv"].iter().chain(more).copied().filter(|p| !have(p)).collect();
    if !root || !missing.is_empty() {
        eprintln!("skipped: needs root and mmdebstrap, uv {} (run .ci/install)", more.join(" "));
        return false;
    }
    true
}

/// A stand-in for a model's source repository: a git repo with one commit.
pub fn stand_in_repo(dir: &Path) -> (String, String) {
    std::fs::create_dir_all(dir.join("model")).unwrap();
    std::fs::write(dir.join("model/__init__.py"), "NAME = 'stand-in'\n").unwrap();
    std::fs::write(dir.join("train.py"), "print('training')\n").unwrap();
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "stand-in"]);
    (format!("file://{}", dir.display()), git(dir, &["rev-parse", "HEAD"]))
}

/// One `stackbuild` run: the digest it printed, its report, its process output.
pub struct Built {
    pub digest: String,
    pub report: serde_json::Value,
    pub out: Output,
}

/// Builds `recipe` into the layout `out` with the cache `cache` (`SOURCE_DATE_EPOCH=0`).
pub fn build(recipe: &Path, cache: &Path, out: &Path, extra: &[&str]) -> Built {
    let report = out.with_extension("report.json");
    let output = Command::new(STACKBUILD)
        .arg(recipe)
        .arg("--cache-dir")
        .arg(cache)
        .arg("--out")
        .arg(out)
        .arg("--report")
        .arg(&report)
        .args(extra)
        .env("SOURCE_DATE_EPOCH", "0")
        .output()
        .unwrap();
    let digest = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let report =
        std::fs::read(&report).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    Built { digest, report, out: output }
}

/// Asserts that the build succeeded and printed only the digest.
pub fn ok(b: &Built) -> &Built {
    assert!(b.out.status.success(), "build failed: {}", String::from_utf8_lossy(&b.out.stderr));
    assert!(
        b.digest.starts_with("sha256:") && b.digest.len() == 71,
        "stdout is the digest alone: {:?}",
        b.digest
    );
    b
}

/// [`build`] that must succeed.
pub fn build_ok(recipe: &Path, cache: &Path, out: &Path, extra: &[&str]) -> Built {
    let b = build(recipe, cache, out, extra);
    ok(&b);
    b
}

/// A `docker-registry serve` on a free loopback port with its storage in a temporary directory;
/// killed when dropped.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry (with htpasswd Basic authentication when `htpasswd` is given), or
    /// `None` with a note when `docker-registry` is not installed.
    pub fn start(htpasswd: Option<&str>) -> Option<Self> {
        if Command::new("docker-registry").arg("--version").output().is_err() {
            eprintln!("note: docker-registry not installed (apt install docker-registry); skipping");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let addr = format!("127.0.0.1:{port}");
            let mut config = format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  \
                 filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                dir.path().join("storage").display()
            );
            if let Some(htpasswd) = htpasswd {
                let path = dir.path().join("htpasswd");
                fs::write(&path, htpasswd).unwrap();
                let _ = write!(config, "auth:\n  htpasswd:\n    realm: test\n    path: {}\n", path.display());
            }
            let config_path = dir.path().join("config.yml");
            fs::write(&config_path, config).unwrap();
            let log = fs::File::create(dir.path().join("registry.log")).unwrap();
            let mut child = Command::new("docker-registry")
                .arg("serve")
                .arg(&config_path)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if TcpStream::connect(&addr).is_ok() {
                    return Some(Self { child, addr, dir });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("registry on {addr} did not start: {}", self::log(dir.path()));
        }
        panic!("docker-registry did not start");
    }

    /// A reference to `rest` (`NAME:TAG`) in this registry.
    pub fn reference(&self, rest: &str) -> stackbuild::registry::Reference {
        stackbuild::registry::Reference::parse(&format!("{}/{rest}", self.addr)).unwrap()
    }

    /// The file in which the registry keeps a blob.
    pub fn blob_data(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir.path().join("storage/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }

    /// The tags of `repository`, from the registry's storage.
    pub fn tags(&self, repository: &str) -> Vec<String> {
        let dir = self.dir.path().join("storage/docker/registry/v2/repositories").join(repository);
        let mut tags: Vec<String> = fs::read_dir(dir.join("_manifests/tags"))
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        tags.sort();
        tags
    }
}

fn log(dir: &Path) -> String {
    fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
