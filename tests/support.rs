//! Helpers shared by the end-to-end tests: locating our binaries, and OCI bundles that real
//! runtimes (runc, crun) execute with stackhook installed as a hook.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_owned()
}

/// A release binary of ours, built by `cargo build --release` (as `.ci/test` does; the hook is static).
pub fn binary(name: &str) -> PathBuf {
    let var = format!("{}_BIN", name.to_ascii_uppercase());
    let path =
        std::env::var_os(&var).map_or_else(|| workspace().join("target/release").join(name), PathBuf::from);
    assert!(path.is_file(), "{} is missing: run .ci/test (or set {var})", path.display());
    path
}

/// Whether this process runs as root (runc, mknod and dockerd need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether `program` is on PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// An OCI bundle whose rootfs holds a static busybox.
pub struct Bundle {
    /// The bundle directory.
    pub dir: PathBuf,
    config: serde_json::Value,
}

impl Bundle {
    /// A bundle in `dir` that runs `args` (busybox applets), made by `runc spec`.
    pub fn busybox(dir: &Path, args: &[&str]) -> Self {
        let rootfs = dir.join("rootfs/bin");
        std::fs::create_dir_all(&rootfs).unwrap();
        std::fs::copy("/bin/busybox", rootfs.join("busybox")).expect("busybox-static is installed");
        std::os::unix::fs::symlink("busybox", rootfs.join("sh")).unwrap();
        let spec =
            Command::new("runc").args(["spec", "--bundle"]).arg(dir).output().expect("runc is installed");
        assert!(spec.status.success(), "runc spec: {}", String::from_utf8_lossy(&spec.stderr));
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        config["process"]["terminal"] = false.into();
        config["process"]["args"] =
            std::iter::once("/bin/busybox").chain(args.iter().copied()).collect::<Vec<_>>().into();
        Self { dir: dir.to_owned(), config }
    }

    /// Adds `KEY=VALUE` to the container's environment.
    pub fn env(mut self, entry: &str) -> Self {
        self.config["process"]["env"].as_array_mut().unwrap().push(entry.into());
        self
    }

    /// Adds a hook entry at `stage` (`createRuntime`, `prestart`, ...).
    pub fn hook(mut self, stage: &str, path: &Path, args: &[&str], env: &[&str]) -> Self {
        let entry = serde_json::json!({ "path": path, "args": args, "env": env, "timeout": 10 });
        let hooks =
            self.config.as_object_mut().unwrap().entry("hooks").or_insert_with(|| serde_json::json!({}));
        hooks
            .as_object_mut()
            .unwrap()
            .entry(stage)
            .or_insert_with(|| serde_json::json!([]))
            .as_array_mut()
            .unwrap()
            .push(entry);
        self
    }

    /// Writes `config.json`.
    pub fn write(self) -> Self {
        std::fs::write(self.dir.join("config.json"), serde_json::to_vec_pretty(&self.config).unwrap())
            .unwrap();
        self
    }

    /// Runs the bundle with `runtime` (`runc` or `crun`) under container id `id`.
    pub fn run(&self, runtime: &str, id: &str) -> Output {
        let mut cmd = Command::new(runtime);
        if runtime == "crun" {
            // crun cannot manage cgroups in this machine's hybrid cgroup mode.
            cmd.arg("--cgroup-manager=disabled");
        }
        let out = cmd.arg("run").arg("--bundle").arg(&self.dir).arg(id).output().expect("runtime runs");
        let _ = Command::new(runtime).args(["delete", "--force", id]).output();
        out
    }
}

/// A root file system holding a static busybox (`/bin/busybox` and links for `sh`, `echo`,
/// `cat`, `sleep`, `true`), packed as `<dir>/rootfs.tar` for `docker import`/`podman import`.
/// Returns the tar's path.
pub fn busybox_rootfs_tar(dir: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("busybox-static is installed");
    for applet in ["sh", "echo", "cat", "sleep", "true"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    let tar = dir.join("rootfs.tar");
    let out =
        Command::new("tar").arg("-C").arg(&root).arg("-cf").arg(&tar).arg(".").output().expect("tar runs");
    assert!(out.status.success(), "tar: {}", String::from_utf8_lossy(&out.stderr));
    tar
}

/// A dockerd of the test's own: its own data root, exec root, pid file and socket, no bridge
/// and no iptables rules, and the daemon.json it is given; the machine's Docker (its config,
/// images and containers) is not touched. It starts its own containerd (unless a system one
/// answers at `/run/containerd/containerd.sock`), so the environment it is started with reaches
/// the runtimes it runs. Stopped (SIGTERM, then SIGKILL) on drop.
pub struct Dockerd {
    socket: PathBuf,
    log: PathBuf,
    child: std::process::Child,
}

impl Dockerd {
    /// The Debian `docker.io` binaries; a newer CLI may sit in /usr/local/bin.
    pub const DOCKERD: &'static str = "/usr/sbin/dockerd";
    /// The Docker CLI used against it.
    pub const DOCKER: &'static str = "/usr/bin/docker";

    /// Starts dockerd with its state under `dir`, `config_file` as its daemon.json and `env`
    /// added to its environment; waits up to 60 s for it to answer.
    pub fn start(dir: &Path, config_file: &Path, env: &[(&str, &Path)]) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let socket = dir.join("docker.sock");
        let log = dir.join("dockerd.log");
        let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let log_err = log_file.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(Self::DOCKERD);
        cmd.arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("--host")
            .arg(format!("unix://{}", socket.display()))
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .arg("--config-file")
            .arg(config_file)
            .stdin(std::process::Stdio::null())
            .stdout(log_file)
            .stderr(log_err);
        for (key, value) in env {
            cmd.env(key, value);
        }
        let child = cmd.spawn().map_err(|e| format!("{}: {e}", Self::DOCKERD))?;
        let mut daemon = Self { socket, log, child };
        for _ in 0..240 {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!("dockerd exited ({status}):\n{}", daemon.log_tail(30)));
            }
            if daemon.docker().arg("version").output().is_ok_and(|o| o.status.success()) {
                return Ok(daemon);
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        Err(format!("dockerd did not answer within 60 s:\n{}", daemon.log_tail(30)))
    }

    /// `docker --host <this daemon>`.
    pub fn docker(&self) -> Command {
        let mut cmd = Command::new(Self::DOCKER);
        cmd.arg("--host").arg(format!("unix://{}", self.socket.display()));
        cmd
    }

    /// The last `lines` lines of dockerd's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        for _ in 0..120 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Fault injection (tests/faults.rs): a seeded generator, hand-made wheels, a local package
// index, a small tmpfs, and checks of an image layout and of a build cache.
// ---------------------------------------------------------------------------------------------

/// xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift generators"): a
/// tiny seeded generator, so that a failing run of random fault points can be replayed from the
/// seed it printed.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (0, a fixed point of xorshift, is replaced by a constant).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed })
    }

    /// A seed from `$name` when set (to replay a run), else from the clock.
    pub fn seed_from_env(name: &str) -> u64 {
        std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            // Truncation is fine: any 64 bits of the clock make a seed.
            #[allow(clippy::cast_possible_truncation)]
            let nanos = now.as_nanos() as u64;
            nanos ^ u64::from(std::process::id())
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo).max(1)
    }

    /// `n` pseudo-random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(n);
        out
    }
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex_lower(&sha2::Sha256::digest(bytes))
}

/// Lowercase hex sha256 of a file's content, streamed.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(hex_lower(&hasher.finalize()))
}

fn hex_lower(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Unpadded urlsafe base64, as a wheel's `RECORD` writes hashes (PEP 376, RFC 4648 §5).
fn base64_urlsafe(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Writes a pure-Python wheel `<name>-<version>-py3-none-any.whl` into `dir`: a package
/// `<name>/__init__.py` and `<name>/payload.bin` of `payload` pseudo-random (incompressible)
/// bytes drawn from `seed`, with a correct `RECORD`. The same arguments give the same bytes.
pub fn write_wheel(dir: &Path, name: &str, version: &str, payload: usize, seed: u64) -> PathBuf {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let dist_info = format!("{name}-{version}.dist-info");
    let mut members: Vec<(String, Vec<u8>)> = vec![
        (format!("{name}/__init__.py"), format!("VERSION = {version:?}\n").into_bytes()),
        (format!("{name}/payload.bin"), XorShift::new(seed).bytes(payload)),
        (
            format!("{dist_info}/METADATA"),
            format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n").into_bytes(),
        ),
        (
            format!("{dist_info}/WHEEL"),
            b"Wheel-Version: 1.0\nGenerator: e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_vec(),
        ),
    ];
    let mut record = String::new();
    for (member, bytes) in &members {
        use sha2::Digest as _;
        let hash = base64_urlsafe(&sha2::Sha256::digest(bytes));
        let _ = writeln!(record, "{member},sha256={hash},{}", bytes.len());
    }
    let _ = writeln!(record, "{dist_info}/RECORD,,");
    members.push((format!("{dist_info}/RECORD"), record.into_bytes()));

    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{name}-{version}-py3-none-any.whl"));
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .last_modified_time(zip::DateTime::default())
        .unix_permissions(0o644);
    for (member, bytes) in &members {
        zip.start_file(member.as_str(), options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
    path
}

/// Writes a PEP 503 "simple" index under `<root>/simple` that lists `wheels` (copied into
/// `<root>/simple/<project>/`), each link carrying its `#sha256=` as the spec recommends.
/// Returns the copies' paths, in the order given.
pub fn write_simple_index(root: &Path, wheels: &[PathBuf]) -> Vec<PathBuf> {
    use std::fmt::Write as _;
    let simple = root.join("simple");
    let mut projects: std::collections::BTreeMap<String, Vec<(String, String)>> =
        std::collections::BTreeMap::new();
    let mut copies = Vec::new();
    for wheel in wheels {
        let file = wheel.file_name().unwrap().to_string_lossy().into_owned();
        let project = file.split('-').next().unwrap().to_ascii_lowercase().replace('_', "-");
        let dir = simple.join(&project);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(wheel, dir.join(&file)).unwrap();
        copies.push(dir.join(&file));
        projects.entry(project).or_default().push((file, sha256_file(wheel).unwrap()));
    }
    let mut top = String::from("<!DOCTYPE html>\n<html><body>\n");
    for (project, files) in &projects {
        let _ = writeln!(top, "<a href=\"{project}/\">{project}</a>");
        let mut page = String::from("<!DOCTYPE html>\n<html><body>\n");
        for (file, sha) in files {
            let _ = writeln!(page, "<a href=\"{file}#sha256={sha}\">{file}</a>");
        }
        page.push_str("</body></html>\n");
        std::fs::write(simple.join(project).join("index.html"), page).unwrap();
    }
    top.push_str("</body></html>\n");
    std::fs::write(simple.join("index.html"), top).unwrap();
    copies
}

/// A static HTTP/1.1 file server on 127.0.0.1 (an ephemeral port) for one directory: enough
/// for pip and uv to read a PEP 503 index. Every response closes its connection and says
/// `Cache-Control: no-store`, so no client keeps a copy of a file a test swaps. Stopped on drop.
pub struct FileServer {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FileServer {
    /// Serves `root`.
    pub fn start(root: &Path) -> Self {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (root, flag) = (root.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let root = root.clone();
                std::thread::spawn(move || serve_one(stream, &root));
            }
        });
        Self { addr, stop, thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT/<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.addr, path.trim_start_matches('/'))
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(stream: std::net::TcpStream, root: &Path) {
    use std::io::{BufRead as _, Write as _};
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = std::io::BufReader::new(stream);
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.trim().is_empty() => break,
            Ok(_) => {}
        }
    }
    let mut parts = request.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
    let path = target.split(['?', '#']).next().unwrap_or("/");
    let mut file = root.join(path.trim_start_matches('/'));
    if path.split('/').any(|c| c == "..") {
        file = root.join("\0refused");
    }
    if file.is_dir() {
        file = file.join("index.html");
    }
    let (status, body, kind) = match std::fs::read(&file) {
        Ok(body) => {
            let html = file.extension().is_some_and(|e| e == "html");
            ("200 OK", body, if html { "text/html" } else { "application/octet-stream" })
        }
        Err(_) => ("404 Not Found", b"not found\n".to_vec(), "text/plain"),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    let _ = writer.write_all(head.as_bytes());
    if method != "HEAD" {
        let _ = writer.write_all(&body);
    }
    let _ = writer.flush();
}

/// A tmpfs mounted at a directory (root only), unmounted on drop: a small disk to fill.
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`20m`) at `dir` (created if needed).
    pub fn mount(dir: &Path, size: &str) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount tmpfs at {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(Self { dir: dir.to_owned() })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount").arg(&self.dir).status().is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Checks an OCI image layout the way a registry would: every blob under `blobs/sha256` hashes
/// to its name, and the manifest tagged `tag` and everything it names are present. Returns the
/// manifest digest.
pub fn verify_layout(dir: &Path, tag: &str) -> Result<String, String> {
    let blobs = dir.join("blobs/sha256");
    let entries = std::fs::read_dir(&blobs).map_err(|e| format!("{}: {e}", blobs.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            return Err(format!("temporary file left in the layout: {}", entry.path().display()));
        }
        let actual = sha256_file(&entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
        if actual != name {
            return Err(format!("layout blob {} hashes to sha256:{actual}", entry.path().display()));
        }
    }
    let read = |path: PathBuf| -> Result<serde_json::Value, String> {
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    };
    let index = read(dir.join("index.json"))?;
    let manifest = index["manifests"]
        .as_array()
        .and_then(|ms| {
            ms.iter().find(|m| m["annotations"]["org.opencontainers.image.ref.name"].as_str() == Some(tag))
        })
        .ok_or_else(|| format!("{}: no manifest tagged {tag}", dir.display()))?;
    let digest = manifest["digest"].as_str().unwrap_or_default().to_owned();
    let blob = |d: &str| blobs.join(d.trim_start_matches("sha256:"));
    let m = read(blob(&digest))?;
    let mut named = vec![m["config"]["digest"].as_str().unwrap_or_default().to_owned()];
    for layer in m["layers"].as_array().into_iter().flatten() {
        named.push(layer["digest"].as_str().unwrap_or_default().to_owned());
    }
    for d in named {
        if !blob(&d).is_file() {
            return Err(format!("{}: the manifest names {d}, which is missing", dir.display()));
        }
    }
    Ok(digest)
}

/// What [`verify_cache`] found in a build cache.
#[derive(Debug, Default)]
pub struct CacheCheck {
    /// Blobs under `blobs/sha256`, each hashing to its name.
    pub blobs: usize,
    /// Artifacts under `artifacts/<sha256>/`, each hashing to its directory's name.
    pub artifacts: usize,
    /// Key records under `keys/`, each parsing and naming a digest.
    pub keys: usize,
    /// Leftovers of interrupted writers: entries of `tmp/`, `artifacts/.fetch-*`,
    /// `mmdebstrap-*`, `keys/.stackbuild-tmp-*` (garbage, never read as content).
    pub leftovers: Vec<PathBuf>,
    /// Bytes in the leftovers.
    pub leftover_bytes: u64,
}

fn tree_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path).map_or(0, |es| es.flatten().map(|e| tree_bytes(&e.path())).sum())
}

/// Checks a stackbuild cache: content under its name is the content the name promises, and
/// key records are whole. Anything else (leftovers of killed writers) is counted, not failed.
pub fn verify_cache(dir: &Path) -> Result<CacheCheck, String> {
    let mut check = CacheCheck::default();
    let list = |p: &Path| -> Vec<std::fs::DirEntry> {
        std::fs::read_dir(p).map(|es| es.flatten().collect()).unwrap_or_default()
    };
    let leftover = |check: &mut CacheCheck, p: PathBuf| {
        check.leftover_bytes += tree_bytes(&p);
        check.leftovers.push(p);
    };
    for entry in list(&dir.join("blobs/sha256")) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let actual = sha256_file(&entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
        if actual != name {
            return Err(format!("cache blob {} hashes to sha256:{actual}", entry.path().display()));
        }
        check.blobs += 1;
    }
    for entry in list(&dir.join("artifacts")) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            leftover(&mut check, entry.path());
            continue;
        }
        for file in list(&entry.path()) {
            let actual = sha256_file(&file.path()).map_err(|e| format!("{}: {e}", file.path().display()))?;
            if actual != name {
                return Err(format!("cache artifact {} hashes to {actual}", file.path().display()));
            }
            check.artifacts += 1;
        }
    }
    for entry in list(&dir.join("keys")) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".stackbuild-tmp-") {
            leftover(&mut check, entry.path());
            continue;
        }
        let bytes = std::fs::read(entry.path()).map_err(|e| e.to_string())?;
        let record: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("cache key record {} is not whole: {e}", entry.path().display()))?;
        if !record["digest"].as_str().is_some_and(|d| d.starts_with("sha256:")) {
            return Err(format!("cache key record {} names no digest", entry.path().display()));
        }
        check.keys += 1;
    }
    for entry in list(&dir.join("tmp")) {
        leftover(&mut check, entry.path());
    }
    for entry in list(dir) {
        if entry.file_name().to_string_lossy().starts_with("mmdebstrap-") {
            leftover(&mut check, entry.path());
        }
    }
    Ok(check)
}

/// Sends `SIGKILL` to the process group `pid` leads (a child spawned with
/// `process_group(0)`), reaps the child, and waits up to 10 s until no member of the group is
/// left. Returns whether the group is gone.
pub fn kill_group(child: &mut std::process::Child) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(child.id().cast_signed()) else { return false };
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    let _ = child.wait();
    for _ in 0..200 {
        // Signal 0 probes for members without touching them; ESRCH means the group is empty.
        if rustix::process::test_kill_process_group(pid).is_err() {
            return true;
        }
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// The builder the end-to-end tests run: `STACKBUILD_BIN`, else the workspace's release build.
pub fn stackbuild_bin() -> PathBuf {
    std::env::var_os("STACKBUILD_BIN")
        .map_or_else(|| workspace().join("target/release/stackbuild"), PathBuf::from)
}

/// Builds with stackbuild the GPU test image `reference` (`NAME:TAG`): scratch, the static busybox
/// tree at `dir/rootfs/bin` as `/bin`, `[host] modules = ["nvidia_uvm"]`. Returns its `docker load`
/// archive under `dir`, or what went wrong.
pub fn build_gpu_test_image(dir: &Path, reference: &str) -> Result<PathBuf, String> {
    let (name, tag) = reference.split_once(':').ok_or("the reference has no tag")?;
    std::fs::write(
        dir.join("recipe.toml"),
        format!(
            "[image]\nname = \"{name}\"\ntag = \"{tag}\"\n\n[base]\nscratch = true\n\n[[source]]\n\
             name = \"busybox\"\npath = \"rootfs/bin\"\ndest = \"/bin\"\n\n[host]\nmodules = [\"nvidia_uvm\"]\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let archive = dir.join("gpu-image.tar");
    let out = Command::new(stackbuild_bin())
        .args(["build", "--quiet", "--out"])
        .arg(dir.join("layout"))
        .arg("--archive")
        .arg(&archive)
        .arg("--cache-dir")
        .arg(dir.join("stackbuild-cache"))
        .arg(dir.join("recipe.toml"))
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(archive)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}
