//! CUDA 12's compiler from Debian: trixie's `nvidia-cuda-toolkit` (12.4, non-free), laid out as
//! the `CUDA_HOME` that `torch.utils.cpp_extension` expects.
//!
//! NVIDIA's `nvidia-cuda-nvcc-cu12` wheels hold only `ptxas` and headers (12.1, 12.4 and 12.8
//! checked), so CUDA 12 extensions need nvcc from elsewhere. NVIDIA's redistributable archives
//! (with sha256 in its `redistrib_<version>.json` manifests) are the other source; this machine
//! cannot reach them, so Debian's packages are the one supported and tested. They come through
//! apt with a configuration of their own under the cache (the mirror of the host's apt sources,
//! suite trixie, components main and non-free), so apt checks the archive's signature and each
//! package's sha256; the files are then taken out of the packages with `dpkg-deb
//! --fsys-tarfile` and placed in NVIDIA's layout: `bin/` (nvcc, cicc, ptxas, fatbinary, nvlink,
//! cudafe++, `crt/`, and an `nvcc.profile` of ours), `include/`, `lib64/` (the CUDA runtime,
//! `cudadevrt`, the link stubs) and `nvvm/libdevice`. The binaries need glibc 2.34 (their
//! `Depends`), so they run in a bookworm build root too; the host compiler is the build root's
//! gcc, which nvcc 12.4 accepts up to gcc 13 (bookworm's 12; trixie's default 14 is refused by
//! nvcc, so a trixie build root needs `g++-13` and `CC`/`CXX` set).
//!
//! torch's `cpp_extension` refuses an nvcc of another CUDA major than torch's and only warns on
//! another minor, so the 12.4 toolkit builds against any CUDA 12 torch (`PyPI`'s torch 2.8 is
//! 12.8). What 12.4 cannot do is compile for architectures newer than 9.0 (Blackwell's 10.0 and
//! 12.0 came with CUDA 12.8); nvcc says so, naming the architecture.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use stackbuild_cache::{Cache, LayerKey};

/// The Debian packages the toolkit is made of: nvcc and its tools, the headers and link
/// libraries of every CUDA library (torch's headers include cuBLAS', cuSPARSE's, cuSOLVER's),
/// libnvvm, the runtime, and CCCL (Thrust, CUB, libcu++).
pub const DEBIAN_CUDA12_PACKAGES: &[&str] = &[
    "nvidia-cuda-toolkit",
    "nvidia-cuda-dev",
    "libnvvm4",
    "libcudart12",
    "libcu++-dev",
    "libcub-dev",
    "libthrust-dev",
];

/// The suite and components they are in.
const SUITE: &str = "trixie";
const COMPONENTS: &str = "main contrib non-free";
/// How the tree is laid out: part of its identity, changed when the layout does.
const LAYOUT: u32 = 1;
/// The largest single file taken out of a package (cicc is 37 MB).
const MAX_FILE: u64 = 512 << 20;

/// Why the toolkit could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ToolkitError {
    /// apt or dpkg-deb failed or is missing.
    #[error("the CUDA 12 toolkit from Debian {SUITE} non-free: {0}")]
    Apt(String),
    /// A downloaded package is not what the archive's index says.
    #[error("the CUDA 12 toolkit: {file} has sha256 {got}, the archive's index says {want}")]
    Digest {
        /// The package file.
        file: String,
        /// Its sha256.
        got: String,
        /// The index's.
        want: String,
    },
    /// A file operation failed.
    #[error("{0}")]
    Io(#[from] stackbuild_common::IoError),
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ToolkitError + 'a {
    move |e| ToolkitError::Io(stackbuild_common::io_err(op, path)(e))
}

/// One package of the toolkit as the archive's index lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DebianPackage {
    /// Package name.
    pub name: String,
    /// Version (`12.4.131~12.4.1-2`).
    pub version: String,
    /// sha256 of the `.deb`.
    pub sha256: String,
}

/// An assembled toolkit: a `CUDA_HOME` in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebianCuda {
    /// The tree (`bin/nvcc`, `include/`, `lib64/`, `nvvm/`).
    pub home: PathBuf,
    /// The packages it was made of: its identity in every built wheel's key.
    pub packages: Vec<DebianPackage>,
    /// nvcc's CUDA release (`12.4`).
    pub release: String,
    /// What identifies it in a built wheel's key: the key of its packages, arch and layout.
    pub identity: String,
}

/// How long the toolkit's package set read from the index is used before asking again.
const REFRESH: std::time::Duration = std::time::Duration::from_hours(24);

/// The toolkit for `arch` (Debian's name: `amd64`, `arm64`), from the Debian mirror `mirror`
/// (`http://deb.debian.org/debian` or the host's own), assembled once per set of packages
/// and kept in `cache`. Without a network, the last set the index named is used if its tree
/// is in the cache.
pub fn debian_cuda12(cache: &Cache, mirror: &str, arch: &str) -> Result<DebianCuda, ToolkitError> {
    let apt = cache.root().join("apt").join(format!("{SUITE}-{arch}"));
    let record = apt.join("cuda12-packages.json");
    let kept = || -> Option<Vec<DebianPackage>> {
        std::fs::read(&record).ok().and_then(|b| serde_json::from_slice(&b).ok())
    };
    // The set read from the index within the last day is used as it is, as apt's daily
    // update (`APT::Periodic::Update-Package-Lists "1"`) would: asking the mirror again took
    // 6 s of every build against torch, a rebuild with nothing changed included.
    let recent = std::fs::metadata(&record)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < REFRESH);
    let packages = match recent.then(kept).flatten() {
        Some(p) => p,
        None => match index(&apt, mirror, arch) {
            Ok(p) => {
                let json = serde_json::to_vec_pretty(&p).unwrap_or_default();
                stackbuild_common::write_atomic(&record, &json).map_err(io("writing", &record))?;
                p
            }
            Err(e) => match kept() {
                Some(p) => {
                    tracing::warn!("{e}; using the CUDA 12 toolkit's packages listed before");
                    p
                }
                None => return Err(e),
            },
        },
    };
    let key = LayerKey::of("cuda12-debian", &(&packages, arch, LAYOUT));
    let home = cache.root().join("toolchains").join(format!("cuda12-debian-{}", key.as_hex()));
    let release = packages
        .iter()
        .find(|p| p.name == "nvidia-cuda-toolkit")
        .and_then(|p| {
            let mut parts = p.version.split('.');
            Some(format!("{}.{}", parts.next()?, parts.next()?))
        })
        .unwrap_or_else(|| "12".to_owned());
    if !home.join(".complete").is_file() {
        assemble(&apt, arch, &packages, &home)?;
    }
    Ok(DebianCuda { home, packages, release, identity: key.as_hex().to_owned() })
}

/// apt's options for the private configuration under `apt`.
fn apt_options(apt: &Path) -> Vec<String> {
    let d = apt.display();
    [
        "Dir::Etc::sourcelist=-".to_owned(),
        format!("Dir::Etc::sourceparts={d}/sources"),
        format!("Dir::State::lists={d}/lists"),
        format!("Dir::Cache={d}/cache"),
        "Dir::State::status=/dev/null".to_owned(),
        "Debug::NoLocking=1".to_owned(),
        "APT::Sandbox::User=root".to_owned(),
    ]
    .into_iter()
    .flat_map(|o| ["-o".to_owned(), o])
    .collect()
}

/// Refreshes the private index and reads the candidate of each package.
fn index(apt: &Path, mirror: &str, arch: &str) -> Result<Vec<DebianPackage>, ToolkitError> {
    refresh(apt, mirror, arch)?;
    DEBIAN_CUDA12_PACKAGES.iter().map(|name| candidate(apt, arch, name)).collect()
}

/// Writes the private sources of `mirror`'s trixie and runs `apt-get update` on them.
fn refresh(apt: &Path, mirror: &str, arch: &str) -> Result<(), ToolkitError> {
    apt_update(apt, mirror, SUITE, COMPONENTS, arch, &[]).map_err(ToolkitError::Apt)
}

/// Writes the private sources under `apt` (Debian's `suite` of `mirror`, `components`, `arch`,
/// checked with Debian's archive keyring) and runs `apt-get update` on them with `options`
/// (`-o` settings: which indices to fetch).
pub(crate) fn apt_update(
    apt: &Path,
    mirror: &str,
    suite: &str,
    components: &str,
    arch: &str,
    options: &[String],
) -> Result<(), String> {
    for dir in ["sources", "lists/partial", "cache/archives/partial"] {
        let d = apt.join(dir);
        std::fs::create_dir_all(&d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    let sources = apt.join(format!("sources/{suite}.sources"));
    let text = format!(
        "Types: deb\nURIs: {mirror}\nSuites: {suite}\nComponents: {components}\nArchitectures: {arch}\n\
         Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    );
    stackbuild_common::write_atomic(&sources, text.as_bytes())
        .map_err(|e| format!("writing {}: {e}", sources.display()))?;
    apt_run(
        Command::new("apt-get")
            .args(apt_options(apt))
            .args(["-o", &format!("APT::Architecture={arch}")])
            .args(options.iter().flat_map(|o| ["-o", o.as_str()]))
            .args(["update", "-qq"]),
        "apt-get update",
    )
    .map(drop)
}

/// The version and sha256 of the candidate of package `name` in the private index.
fn candidate(apt: &Path, arch: &str, name: &str) -> Result<DebianPackage, ToolkitError> {
    let opts = apt_options(apt);
    let text = run(
        Command::new("apt-cache").args(&opts).args([
            "-o",
            &format!("APT::Architecture={arch}"),
            "show",
            "--no-all-versions",
            name,
        ]),
        &format!("apt-cache show {name}"),
    )?;
    let field = |f: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(f).and_then(|r| r.strip_prefix(':')).map(|v| v.trim().to_owned()))
    };
    match (field("Version"), field("SHA256")) {
        (Some(version), Some(sha256)) if sha256.len() == 64 => {
            Ok(DebianPackage { name: name.to_owned(), version, sha256 })
        }
        _ => Err(ToolkitError::Apt(format!("{name} is not in {SUITE} for {arch}"))),
    }
}

/// Downloads `packages` into `debs` and checks each against the index's sha256; their files.
fn download(
    apt: &Path,
    arch: &str,
    packages: &[DebianPackage],
    debs: &Path,
) -> Result<Vec<PathBuf>, ToolkitError> {
    let wanted: Vec<String> = packages.iter().map(|p| format!("{}={}", p.name, p.version)).collect();
    run(
        Command::new("apt-get")
            .current_dir(debs)
            .args(apt_options(apt))
            .args(["-o", &format!("APT::Architecture={arch}"), "download", "-qq"])
            .args(&wanted),
        "apt-get download",
    )?;
    let mut files = Vec::new();
    for p in packages {
        let file = std::fs::read_dir(debs)
            .map_err(io("reading", debs))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|f| f.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{}_", p.name))))
            .ok_or_else(|| ToolkitError::Apt(format!("apt-get download left no {}", p.name)))?;
        let got = stackbuild_common::sha256_file(&file).map_err(io("hashing", &file))?;
        if got != p.sha256 {
            return Err(ToolkitError::Digest {
                file: file.display().to_string(),
                got,
                want: p.sha256.clone(),
            });
        }
        files.push(file);
    }
    Ok(files)
}

/// Ubuntu's archive keys for an Ubuntu base built on a Debian host that lacks them: Debian's
/// `ubuntu-keyring` package (trixie main; bookworm has none), which Debian's archive signs and
/// apt checks, its `ubuntu-archive-keyring.gpg` kept in the cache. Returns that file.
pub fn ubuntu_keyring(cache: &Cache, mirror: &str) -> Result<PathBuf, String> {
    let plain = |e: ToolkitError| match e {
        ToolkitError::Apt(m) => format!("Ubuntu's archive keyring from Debian {SUITE}: {m}"),
        other => other.to_string(),
    };
    // A keyring already in the cache is used as it is: it only checks the Ubuntu archive's
    // signature, and asking Debian's index again would put apt and the network on every build
    // of an Ubuntu base, the cached ones too.
    let toolchains = cache.root().join("toolchains");
    let kept = std::fs::read_dir(&toolchains).into_iter().flatten().flatten().find_map(|e| {
        let file = e.path().join("ubuntu-archive-keyring.gpg");
        (e.file_name().to_string_lossy().starts_with("ubuntu-keyring-") && file.is_file()).then_some(file)
    });
    if let Some(keyring) = kept {
        return Ok(keyring);
    }
    let apt = cache.root().join("apt").join(format!("{SUITE}-amd64"));
    refresh(&apt, mirror, "amd64").map_err(plain)?;
    let package = candidate(&apt, "amd64", "ubuntu-keyring").map_err(plain)?;
    let dir = toolchains.join(format!("ubuntu-keyring-{}", &package.sha256[..16]));
    let keyring = dir.join("ubuntu-archive-keyring.gpg");
    let parent = dir.parent().unwrap_or(&dir);
    std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".ubuntu-keyring-")
        .tempdir_in(parent)
        .map_err(|e| format!("creating a directory in {}: {e}", parent.display()))?;
    let debs = tmp.path().join("debs");
    let tree = tmp.path().join("tree");
    std::fs::create_dir_all(&debs).map_err(|e| format!("creating {}: {e}", debs.display()))?;
    let files = download(&apt, "amd64", std::slice::from_ref(&package), &debs).map_err(plain)?;
    let name = "usr/share/keyrings/ubuntu-archive-keyring.gpg";
    extract(&files[0], &tree, |p| {
        (p.trim_start_matches("./") == name).then(|| "ubuntu-archive-keyring.gpg".into())
    })
    .map_err(plain)?;
    if !tree.join("ubuntu-archive-keyring.gpg").is_file() {
        return Err(format!("Debian's ubuntu-keyring {} holds no /{name}", package.version));
    }
    if std::fs::rename(&tree, &dir).is_err() && !keyring.is_file() {
        return Err(format!("placing {}", dir.display()));
    }
    Ok(keyring)
}

fn run(cmd: &mut Command, what: &str) -> Result<String, ToolkitError> {
    apt_run(cmd, what).map_err(ToolkitError::Apt)
}

/// Runs apt (or dpkg) and returns its output, or what it said on failure.
fn apt_run(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {what}: {e} (apt and dpkg come with Debian)"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last: Vec<&str> = err.lines().filter(|l| !l.starts_with("W:")).collect();
        return Err(format!("{what} failed: {}", last.join(" / ")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Downloads the packages, checks them against the index, and lays the tree out at `home`
/// (through a temp dir and a rename: a killed build leaves no half tree).
fn assemble(apt: &Path, arch: &str, packages: &[DebianPackage], home: &Path) -> Result<(), ToolkitError> {
    let parent = home.parent().unwrap_or(home);
    std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    let tmp = tempfile::Builder::new()
        .prefix(".cuda12-")
        .tempdir_in(parent)
        .map_err(io("creating a directory in", parent))?;
    let debs = tmp.path().join("debs");
    let tree = tmp.path().join("home");
    std::fs::create_dir_all(&debs).map_err(io("creating", &debs))?;
    let wanted: Vec<String> = packages.iter().map(|p| format!("{}={}", p.name, p.version)).collect();
    tracing::info!("fetching the CUDA 12 toolkit from Debian {SUITE} non-free ({})", wanted.join(", "));
    for file in download(apt, arch, packages, &debs)? {
        extract(&file, &tree, place)?;
    }
    let profile = tree.join("bin/nvcc.profile");
    // NVIDIA's own profile, relative to nvcc: Debian's names /usr paths.
    let text = "TOP = $(_HERE_)/..\n\nNVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice\n\nPATH += $(_HERE_):\n\n\
                INCLUDES += \"-I$(TOP)/include\" $(_SPACE_)\n\n\
                LIBRARIES =+ $(_SPACE_) \"-L$(TOP)/lib64/stubs\" \"-L$(TOP)/lib64\"\n\nCUDAFE_FLAGS +=\nPTXAS_FLAGS +=\n";
    std::fs::write(&profile, text).map_err(io("writing", &profile))?;
    if !tree.join("bin/nvcc").is_file()
        || !tree.join("bin/cicc").is_file()
        || !tree.join("include/cuda_runtime.h").is_file()
    {
        return Err(ToolkitError::Apt(
            "the packages did not hold nvcc, cicc and cuda_runtime.h where Debian puts them".into(),
        ));
    }
    std::fs::write(tree.join(".complete"), b"").map_err(io("writing", &tree))?;
    std::fs::remove_dir_all(&debs).map_err(io("removing", &debs))?;
    if std::fs::rename(&tree, home).is_err() && !home.join(".complete").is_file() {
        return Err(ToolkitError::Io(stackbuild_common::io_err("placing", home)(std::io::Error::other(
            "rename failed",
        ))));
    }
    Ok(())
}

/// Where a file of a package goes in NVIDIA's layout; `None`: not needed.
fn place(path: &str) -> Option<String> {
    let p = path.trim_start_matches("./");
    if let Some(rest) = p.strip_prefix("usr/lib/nvidia-cuda-toolkit/bin/") {
        // Debian's gcc/g++ wrappers pick its gcc-13: the build root's compiler is used instead.
        return (!matches!(rest, "gcc" | "g++" | "nvcc.profile")).then(|| format!("bin/{rest}"));
    }
    if let Some(rest) = p.strip_prefix("usr/lib/nvidia-cuda-toolkit/libdevice/") {
        return Some(format!("nvvm/libdevice/{rest}"));
    }
    if let Some(rest) = p.strip_prefix("usr/bin/") {
        let tools = [
            "ptxas",
            "fatbinary",
            "nvlink",
            "cudafe++",
            "bin2c",
            "nvprune",
            "cuobjdump",
            "nvdisasm",
            "cu++filt",
        ];
        return tools.contains(&rest).then(|| format!("bin/{rest}"));
    }
    if let Some(rest) = p.strip_prefix("usr/include/") {
        return Some(format!("include/{rest}"));
    }
    let lib = p
        .strip_prefix("usr/lib/x86_64-linux-gnu/")
        .or_else(|| p.strip_prefix("usr/lib/aarch64-linux-gnu/"))?;
    if let Some(stub) = lib.strip_prefix("stubs/") {
        return Some(format!("lib64/stubs/{stub}"));
    }
    if lib.starts_with("libnvvm.so") {
        return Some(format!("nvvm/lib64/{lib}"));
    }
    let keep = lib.starts_with("libcudart.so")
        || matches!(lib, "libcudart_static.a" | "libcudadevrt.a" | "libculibos.a");
    keep.then(|| format!("lib64/{lib}"))
}

/// Takes the files `place` wants out of one package. Entries are never written through a
/// symbolic link: a link is made only as a leaf, with a relative target, and a path whose
/// parent is a link is refused.
fn extract(deb: &Path, tree: &Path, place: impl Fn(&str) -> Option<String>) -> Result<(), ToolkitError> {
    let mut child = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ToolkitError::Apt(format!("cannot run dpkg-deb: {e}")))?;
    let stdout = child.stdout.take().ok_or_else(|| ToolkitError::Apt("dpkg-deb gave no output".into()))?;
    let mut archive = tar::Archive::new(stdout);
    let bad = |e: std::io::Error| ToolkitError::Apt(format!("{}: {e}", deb.display()));
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let name = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let Some(rel) = place(&name) else { continue };
        if rel.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
            continue;
        }
        let dest = tree.join(&rel);
        let parent = dest.parent().unwrap_or(tree);
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        let mut at = parent;
        while at != tree {
            if std::fs::symlink_metadata(at).map_err(io("reading", at))?.file_type().is_symlink() {
                return Err(ToolkitError::Apt(format!("{}: {name} is under a symbolic link", deb.display())));
            }
            at = at.parent().unwrap_or(tree);
        }
        let kind = entry.header().entry_type();
        if kind.is_symlink() {
            let target =
                entry.link_name().map_err(bad)?.map(|t| t.to_string_lossy().into_owned()).unwrap_or_default();
            if target.starts_with('/') || target.is_empty() {
                continue;
            }
            let _ = std::fs::remove_file(&dest);
            std::os::unix::fs::symlink(&target, &dest).map_err(io("linking", &dest))?;
        } else if kind.is_file() {
            if entry.header().size().map_err(bad)? > MAX_FILE {
                return Err(ToolkitError::Apt(format!(
                    "{}: {name} is larger than {MAX_FILE} bytes",
                    deb.display()
                )));
            }
            let mode = entry.header().mode().map_err(bad)? & 0o755;
            let mut bytes = Vec::new();
            entry.by_ref().take(MAX_FILE).read_to_end(&mut bytes).map_err(bad)?;
            let _ = std::fs::remove_file(&dest);
            std::fs::write(&dest, &bytes).map_err(io("writing", &dest))?;
            std::fs::set_permissions(&dest, std::os::unix::fs::PermissionsExt::from_mode(mode | 0o444))
                .map_err(io("setting the mode of", &dest))?;
        }
    }
    let out = child.wait_with_output().map_err(|e| ToolkitError::Apt(format!("dpkg-deb: {e}")))?;
    if !out.status.success() {
        return Err(ToolkitError::Apt(format!(
            "dpkg-deb --fsys-tarfile {} failed: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The first Debian archive (not its security archive) that apt `sources` name, in deb822
/// (`URIs:`) or one-line (`deb [options] URI ...`) form, or that a bare mirror URL is.
pub fn debian_mirror(sources: &str) -> Option<String> {
    sources
        .split_whitespace()
        .map(|w| w.trim_end_matches('/'))
        .find(|u| (u.starts_with("http://") || u.starts_with("https://")) && u.ends_with("/debian"))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::{debian_mirror, place};

    #[test]
    fn the_debian_mirror_of_apt_sources() {
        let deb822 = "Types: deb\nURIs: http://deb.example/debian-security\nSuites: bookworm-security\n\n\
                      Types: deb\nURIs: http://deb.example/debian/\nSuites: bookworm\n";
        assert_eq!(debian_mirror(deb822).as_deref(), Some("http://deb.example/debian"));
        let one_line = "deb [signed-by=/k.gpg] https://mirror.example/debian bookworm main\n";
        assert_eq!(debian_mirror(one_line).as_deref(), Some("https://mirror.example/debian"));
        assert_eq!(debian_mirror("http://archive.ubuntu.example/ubuntu"), None);
    }

    #[test]
    fn debians_paths_land_in_nvidias_layout() {
        let cases = [
            ("./usr/lib/nvidia-cuda-toolkit/bin/nvcc", Some("bin/nvcc")),
            ("./usr/lib/nvidia-cuda-toolkit/bin/cicc", Some("bin/cicc")),
            ("./usr/lib/nvidia-cuda-toolkit/bin/crt/link.stub", Some("bin/crt/link.stub")),
            ("./usr/lib/nvidia-cuda-toolkit/bin/g++", None),
            ("./usr/bin/nvcc", None),
            ("./usr/bin/ptxas", Some("bin/ptxas")),
            (
                "./usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc",
                Some("nvvm/libdevice/libdevice.10.bc"),
            ),
            ("./usr/include/cuda_runtime.h", Some("include/cuda_runtime.h")),
            ("./usr/include/thrust/version.h", Some("include/thrust/version.h")),
            ("./usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127", Some("lib64/libcudart.so.12.4.127")),
            ("./usr/lib/x86_64-linux-gnu/stubs/libcuda.so", Some("lib64/stubs/libcuda.so")),
            ("./usr/lib/x86_64-linux-gnu/libcublasLt_static.a", None),
            ("./usr/lib/x86_64-linux-gnu/libnvvm.so.4", Some("nvvm/lib64/libnvvm.so.4")),
            ("./usr/share/doc/nvidia-cuda-dev/copyright", None),
        ];
        for (path, want) in cases {
            assert_eq!(place(path).as_deref(), want, "{path}");
        }
    }
}
