//! Debian's `docker-registry` (the CNCF distribution registry 2.8) as a test's own registry.

use std::fmt::Write as _;
use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `docker-registry serve` on a free loopback port with its storage in a temporary directory;
/// killed when dropped. The distribution registry's configuration format:
/// <https://distribution.github.io/distribution/about/configuration/>.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_on_loopback_and_starts_empty() {
        let Some(registry) = Registry::start(None) else { return };
        assert!(registry.addr.starts_with("127.0.0.1:"), "{}", registry.addr);
        assert!(TcpStream::connect(&registry.addr).is_ok());
        assert!(registry.tags("nothing").is_empty());
        assert!(registry.blob_data(&format!("sha256:{}", "ab".repeat(32))).ends_with("data"));
    }
}
