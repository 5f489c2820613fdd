//! Helpers shared by the end-to-end tests: OCI bundles that real runtimes (runc, crun) execute
//! with stackhook installed as a hook, checks of what stackbuild leaves on disk, the GPU test
//! image. What other suites share too (tool probes, our binaries, dockerd, wheels, the index
//! server, the seeded generator) comes from the `test-support` crate, re-exported here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "support/containerd.rs"]
pub mod containerd;

pub use test_support::digest::sha256_file;
pub use test_support::dockerd::Dockerd;
pub use test_support::process::{kill_group, text};
pub use test_support::rng::XorShift;
pub use test_support::server::FileServer;
pub use test_support::tools::{binary, have, is_root, workspace};
pub use test_support::wheel::{write_simple_index, write_wheel};

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
    #[must_use]
    pub fn env(mut self, entry: &str) -> Self {
        self.config["process"]["env"].as_array_mut().unwrap().push(entry.into());
        self
    }

    /// Adds a hook entry at `stage` (`createRuntime`, `prestart`, ...).
    #[must_use]
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

    /// Applies what the CDI devices `names` of `spec` edit into a container, as containerd and
    /// CRI-O do before they hand the bundle to runc: env, `linux.devices` with their cgroup
    /// rules, bind mounts ([`stackhook::fixture::cdi::apply`]).
    #[must_use]
    pub fn cdi(mut self, spec: &serde_json::Value, names: &[&str]) -> Self {
        let edited = stackhook::fixture::cdi::apply(spec, names, &[]);
        for e in edited["process"]["env"].as_array().into_iter().flatten() {
            self.config["process"]["env"].as_array_mut().unwrap().push(e.clone());
        }
        let linux = self.config["linux"].as_object_mut().unwrap();
        linux.insert("devices".into(), edited["linux"]["devices"].clone());
        let rules = linux
            .entry("resources")
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()
            .unwrap()
            .entry("devices")
            .or_insert_with(|| serde_json::json!([]));
        rules
            .as_array_mut()
            .unwrap()
            .extend(edited["linux"]["resources"]["devices"].as_array().unwrap().clone());
        let mounts = self.config["mounts"].as_array_mut().unwrap();
        mounts.extend(edited["mounts"].as_array().unwrap().clone());
        self
    }

    /// Writes `config.json`.
    #[must_use]
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

// ---------------------------------------------------------------------------------------------
// Fault injection (tests/faults.rs): a small tmpfs, and checks of an image layout and of a
// build cache (the seeded generator, wheels, index and its server are test-support's).
// ---------------------------------------------------------------------------------------------

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

/// `stackhook` copied to `<dir>/bin`, where an installed binary sits: `install` puts the
/// `stackhook-runtime` link next to it, and the engines run this copy.
///
/// It returns once the copy runs: a file just written stays open for writing in any child that
/// another test forked while it was being written, until that child execs, and until then
/// executing it fails with ETXTBSY ("text file busy", execve(2)); the children forked later
/// do not inherit the descriptor.
pub fn installed_copy(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let copy = bin.join("stackhook");
    std::fs::copy(binary("stackhook"), &copy).unwrap();
    for _ in 0..100 {
        match std::process::Command::new(&copy).arg("--version").output() {
            Err(e) if e.raw_os_error() == Some(26) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => {
                other.unwrap();
                break;
            }
        }
    }
    copy
}

/// Writes the wrapper's (and hooks.d's) configuration: probe `host`, with `policy`, reports
/// into `reports`.
pub fn write_config(path: &Path, host: &Path, policy: &str, reports: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        path,
        format!(
            "policy = {policy:?}\nhost_root = {:?}\nreport_dir = {:?}\nhook_timeout = 20\n",
            host.to_str().unwrap(),
            reports.to_str().unwrap()
        ),
    )
    .unwrap();
}

/// A shared object whose constructor creates `marker` when a dynamic loader loads it (the
/// `LD_PRELOAD` attack on the hook), built with `cc` in `dir`; `None` without a C compiler.
pub fn preload_library(dir: &Path, marker: &Path) -> Option<PathBuf> {
    if !have("cc") {
        return None;
    }
    let src = dir.join("preload.c");
    std::fs::write(
        &src,
        format!(
            "#include <fcntl.h>\n#include <unistd.h>\n__attribute__((constructor)) static void preloaded(void) \
             {{ int fd = open(\"{}\", O_CREAT | O_WRONLY, 0644); if (fd >= 0) close(fd); }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let so = dir.join("preload.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    built.then_some(so)
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
    build_busybox_image(dir, reference, "", "\n[host]\nmodules = [\"nvidia_uvm\"]\n")
}

/// An image built by stackbuild from scratch and `<dir>/rootfs/bin` (a static busybox with its
/// applets, made here when absent), with `image_keys` added to its `[image]` table and `tail`
/// to the recipe; returns its archive.
pub fn build_busybox_image(
    dir: &Path,
    reference: &str,
    image_keys: &str,
    tail: &str,
) -> Result<PathBuf, String> {
    let (name, tag) = reference.split_once(':').ok_or("the reference has no tag")?;
    let bin = dir.join("rootfs/bin");
    if !bin.join("busybox").is_file() {
        std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
        std::fs::copy("/bin/busybox", bin.join("busybox")).map_err(|e| format!("/bin/busybox: {e}"))?;
        for applet in ["sh", "echo", "cat", "sleep", "true"] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).map_err(|e| e.to_string())?;
        }
    }
    std::fs::write(
        dir.join("recipe.toml"),
        format!(
            "[image]\nname = \"{name}\"\ntag = \"{tag}\"\n{image_keys}\n[base]\nscratch = true\n\n[[source]]\n\
             name = \"busybox\"\npath = \"rootfs/bin\"\ndest = \"/bin\"\n{tail}"
        ),
    )
    .map_err(|e| e.to_string())?;
    let archive = dir.join(format!("{}.tar", name.replace('/', "_")));
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

/// Every Kubernetes version kubernetes-validate bundles from 1.34 on.
pub fn k8s_versions(venv: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for py in std::fs::read_dir(venv.join("lib")).into_iter().flatten().flatten() {
        let schemas = py.path().join("site-packages/kubernetes_validate/kubernetes-json-schema");
        for e in std::fs::read_dir(schemas).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some(v) = n.strip_prefix('v').and_then(|v| v.strip_suffix("-local-strict")) {
                let minor: u32 = v.split('.').nth(1).and_then(|m| m.parse().ok()).unwrap_or(0);
                if v.starts_with("1.") && minor >= 34 {
                    out.push(v.to_owned());
                }
            }
        }
    }
    out.sort();
    out
}
