//! The base of an image: nothing, a Debian/Ubuntu rootfs assembled by `mmdebstrap`, or the
//! layers of an existing OCI image layout.
//!
//! A Debian base is built once per set of inputs (suite, packages, mirror, variant, epoch) and
//! kept in the cache as a finished layer, along with what was learned from its rootfs (the
//! Python interpreter's version, the package list), so a rebuild neither runs `mmdebstrap` nor
//! reads the rootfs again.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use stackcontract::version::PythonVersion;

use stackbuild_common::BaseFacts;

use crate::layer::{Encoding, LayerWriter, TarImport};
use sha2::{Digest as _, Sha256};
use stackbuild_cache::{Cache, LayerKey};
use stackbuild_common::Compression;
use stackbuild_common::LayerBlob;

/// Why a base could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum BaseError {
    /// `mmdebstrap` is missing or failed.
    #[error("mmdebstrap failed for {suite} ({packages}): {message}")]
    Mmdebstrap {
        /// The suite.
        suite: String,
        /// The packages asked for.
        packages: String,
        /// What it printed last, or why it could not start.
        message: String,
    },
    /// The host's apt sources could not be read.
    #[error("cannot read the host's apt sources ({path}): {source}")]
    Sources {
        /// The file or directory.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// Building or caching the layer failed.
    #[error(transparent)]
    Layer(#[from] crate::layer::LayerError),
    /// The cache failed.
    #[error(transparent)]
    Cache(#[from] stackbuild_cache::CacheError),
    /// A file the recipe names (a base archive, a layer blob) is not a readable regular file.
    #[error(transparent)]
    Input(#[from] stackbuild_common::InputError),
    /// An entry of a base layer is unsafe or malformed.
    #[error("{layer}: {source}")]
    BadLayer {
        /// Which layer of which base.
        layer: String,
        /// What is wrong.
        #[source]
        source: crate::layer::LayerError,
    },
    /// A base layer could not be read or decompressed.
    #[error("{layer}: reading {}: {source}", path.display())]
    LayerRead {
        /// Which layer of which base.
        layer: String,
        /// The blob.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A base layer's bytes are not the ones its image names.
    #[error(
        "{layer}: its {what} is {actual}, but the image says {expected}; the layer was altered or is \
         corrupt"
    )]
    LayerDigest {
        /// Which layer of which base.
        layer: String,
        /// `blob digest`, `diff_id (digest of the uncompressed tar)` or `size`.
        what: &'static str,
        /// What the manifest or config says.
        expected: String,
        /// What the bytes hash to.
        actual: String,
    },
    /// Reading the rootfs tar failed.
    #[error("cannot read the rootfs tar {path}: {source}")]
    Tar {
        /// The tar.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// What a Debian base is asked to be.
#[derive(Debug, Clone)]
pub struct DebianBase {
    /// Distribution (`debian` or `ubuntu`), for messages and components.
    pub distribution: String,
    /// Suite (`bookworm`).
    pub suite: String,
    /// Packages, `name` or `name=version`.
    pub packages: Vec<String>,
    /// A mirror URL; `None` uses the host's apt sources.
    pub mirror: Option<String>,
    /// mmdebstrap variant (`apt`, `essential`, ...).
    pub variant: String,
    /// `linux/amd64` -> `amd64`.
    pub architecture: String,
    /// The keyring that checks the archive, where the host's own lacks it (Ubuntu's on a Debian
    /// host); it decides nothing of the content.
    pub keyring: Option<PathBuf>,
}

/// The sources of an Ubuntu base with no mirror on a host whose apt is not Ubuntu's:
/// mmdebstrap's own default for an Ubuntu suite (Ubuntu's archive, or its ports archive for
/// other architectures; `-updates` and `-security` too), with these components.
const UBUNTU_DEFAULT: &str = "mmdebstrap's Ubuntu archive for the suite, components main universe";

/// A prepared base: its layer and facts, and whether it came from the cache.
#[derive(Debug, Clone)]
pub struct PreparedBase {
    /// The layer.
    pub layer: LayerBlob,
    /// What its rootfs holds.
    pub facts: BaseFacts,
    /// Reused from the cache without running mmdebstrap.
    pub cached: bool,
}

/// The inputs of a Debian base layer, its key ([`DebianBase::key`]): every input that changes
/// the rootfs mmdebstrap makes or the blob it is written into.
#[derive(Debug, serde::Serialize)]
struct DebianKey<'a> {
    /// `debian` or `ubuntu`: which archive the suite is of.
    distribution: &'a str,
    /// The suite (`bookworm`): which packages exist, at which versions.
    suite: &'a str,
    /// mmdebstrap's variant: which packages go in besides the ones asked for.
    variant: &'a str,
    /// The Debian architecture: which binaries.
    architecture: &'a str,
    /// The apt sources (the mirror, or the host's sources text): where the packages come from.
    sources: &'a str,
    /// The packages asked for, `name` or `name=version`, in the recipe's order.
    packages: &'a [String],
    /// mmdebstrap's arguments that are not the recipe's ([`MMDEBSTRAP_ARGS`]): the mode, the
    /// format, the hook that removes caches and logs.
    mmdebstrap: &'a [&'a str],
    /// Every mtime, and `SOURCE_DATE_EPOCH` for mmdebstrap.
    epoch: u64,
    /// How the rootfs tar is written into the blob.
    encoding: Encoding,
}

/// The arguments every mmdebstrap run gets; part of the base's key.
const MMDEBSTRAP_ARGS: [&str; 4] = [
    "--quiet",
    "--mode=unshare",
    "--format=tar",
    // Caches and logs are of no use in an image and only grow it.
    "--customize-hook=rm -rf \"$1\"/var/cache/apt/*.bin \"$1\"/var/cache/ldconfig/aux-cache \"$1\"/var/log/* \"$1\"/var/lib/apt/lists/*",
];

/// The arguments of an mmdebstrap run that adds packages to a base's rootfs
/// ([`DebianBase::prepare_on`]), beside [`MMDEBSTRAP_ARGS`]: the `apt` variant finds the
/// rootfs's Essential set and apt installed (its dpkg status says so), so it extracts nothing and
/// apt installs the packages asked for, and what they need beyond what the rootfs has, from
/// inside the chroot, as `apt-get install` does. (The `custom` variant extracted each package and
/// then installed it with `dpkg --install`, writing every file twice: a build root of bookworm
/// with build-essential and python3.11-dev took 20.3 s and 23 s of CPU, against 17.8 s and 19 s;
/// the same dpkg status.) The setup hook unpacks the base's rootfs (its tar, named by
/// `STACKBUILD_BASE_TAR`, an environment variable mmdebstrap hands its hooks, so no path becomes
/// part of a command) before apt runs; `/dev` is left to mmdebstrap, which makes its nodes itself.
const MMDEBSTRAP_ON_ARGS: [&str; 2] = [
    "--variant=apt",
    "--setup-hook=tar -C \"$1\" --anchored --exclude=dev/* --exclude=./dev/* -xf \"$STACKBUILD_BASE_TAR\"",
];

/// The inputs of a rootfs made of a base's and more packages ([`DebianBase::prepare_on`]).
#[derive(Debug, serde::Serialize)]
struct DebianOnKey<'a> {
    /// The base's rootfs: the `diff_id` of its layer.
    base: &'a str,
    /// The packages added, from which suite, sources and architecture, how, into which blob.
    added: DebianKey<'a>,
    /// The arguments that make it an addition ([`MMDEBSTRAP_ON_ARGS`]).
    on: &'a [&'a str],
}

impl DebianBase {
    /// The cache key: every input that changes the rootfs (the struct `DebianKey`).
    pub fn key(&self, sources: &str, epoch: u64, compression: Compression) -> LayerKey {
        LayerKey::of("base-debian", &self.key_inputs(sources, epoch, compression))
    }

    fn on_key_inputs<'a>(
        &'a self,
        base: &'a str,
        sources: &'a str,
        epoch: u64,
        compression: Compression,
    ) -> DebianOnKey<'a> {
        DebianOnKey { base, added: self.key_inputs(sources, epoch, compression), on: &MMDEBSTRAP_ON_ARGS }
    }

    fn key_inputs<'a>(&'a self, sources: &'a str, epoch: u64, compression: Compression) -> DebianKey<'a> {
        DebianKey {
            distribution: &self.distribution,
            suite: &self.suite,
            variant: &self.variant,
            architecture: &self.architecture,
            sources,
            packages: &self.packages,
            mmdebstrap: &MMDEBSTRAP_ARGS,
            epoch,
            encoding: Encoding::of(compression),
        }
    }

    /// The apt sources mmdebstrap is given: the mirror, else the host's made to name the suite.
    fn sources(&self) -> Result<String, BaseError> {
        Ok(if let Some(m) = &self.mirror {
            m.clone()
        } else {
            let host = host_apt_sources()?;
            // The host's Debian sources cannot serve an Ubuntu suite.
            if self.distribution == "ubuntu" && !host.contains("/ubuntu") {
                UBUNTU_DEFAULT.to_owned()
            } else {
                for_suite(&host, &self.distribution, &self.suite)
            }
        })
    }

    /// Builds (or reuses) the base layer.
    pub fn prepare(
        &self,
        cache: &Cache,
        epoch: u64,
        compression: Compression,
    ) -> Result<PreparedBase, BaseError> {
        let sources = self.sources()?;
        let key = self.key(&sources, epoch, compression);
        match cached(cache, &key) {
            Some(found) => Ok(found),
            None => self.build(cache, &key, &sources, epoch, compression, None),
        }
    }

    /// The base layer as the cache has it, in `compression` or, failing that, in any other, else
    /// built in `compression`: a rootfs that only needs to be read (a build root made on it) is
    /// the same whatever its layer's compression.
    pub fn prepare_any(
        &self,
        cache: &Cache,
        epoch: u64,
        compression: Compression,
    ) -> Result<PreparedBase, BaseError> {
        let sources = self.sources()?;
        let others = [Compression::Gzip, Compression::Zstd, Compression::ZstdChunked, Compression::Estargz];
        for c in std::iter::once(compression).chain(others.into_iter().filter(|c| *c != compression)) {
            if let Some(found) = cached(cache, &self.key(&sources, epoch, c)) {
                return Ok(found);
            }
        }
        self.prepare(cache, epoch, compression)
    }

    /// The rootfs of `base` (a layer of a base prepared by [`DebianBase::prepare`]) with this
    /// base's packages added to it by mmdebstrap's `custom` variant ([`MMDEBSTRAP_ON_ARGS`]):
    /// apt installs what the base lacks, instead of bootstrapping every package again. A build
    /// root of bookworm with `DreamZero`'s 18 base packages and the 2 build packages took 109 s
    /// from nothing and 49 s on the base's rootfs (2 cores, `time mmdebstrap`).
    pub fn prepare_on(
        &self,
        base: &LayerBlob,
        cache: &Cache,
        epoch: u64,
        compression: Compression,
    ) -> Result<PreparedBase, BaseError> {
        let sources = self.sources()?;
        let key =
            LayerKey::of("base-debian-on", &self.on_key_inputs(&base.diff_id, &sources, epoch, compression));
        match cached(cache, &key) {
            Some(found) => Ok(found),
            None => self.build(cache, &key, &sources, epoch, compression, Some(base)),
        }
    }

    /// Runs mmdebstrap (on `on`'s rootfs, when given) and stores what it made under `key`.
    fn build(
        &self,
        cache: &Cache,
        key: &LayerKey,
        sources: &str,
        epoch: u64,
        compression: Compression,
        on: Option<&LayerBlob>,
    ) -> Result<PreparedBase, BaseError> {
        let tmp = tempfile::Builder::new()
            .prefix("mmdebstrap-")
            .tempdir_in(cache.root())
            .map_err(|source| BaseError::Tar { path: cache.root().to_owned(), source })?;
        let tar = tmp.path().join("rootfs.tar");
        let Some(base) = on else {
            self.run_mmdebstrap(sources, &tar, epoch, None, false)?;
            return self.store(cache, key, &tar, epoch, compression);
        };
        let base_tar = plain_tar(base, tmp.path())?;
        self.run_mmdebstrap(sources, &tar, epoch, Some(&base_tar), false)?;
        std::fs::remove_file(&base_tar)
            .map_err(|source| BaseError::Tar { path: base_tar.clone(), source })?;
        self.store(cache, key, &tar, epoch, compression)
    }

    /// The key of this base's packages added to `base` (a base's layer) as a directory
    /// ([`DebianBase::make_dir_on`]), or `None` where that cannot be: only as root, since in
    /// unshare mode as another user a directory's files belong to that user's subordinate ids,
    /// which the user can neither read as its own nor remove ([`DebianBase::prepare_on`] then).
    pub fn dir_key_on(&self, base: &LayerBlob, epoch: u64) -> Result<Option<LayerKey>, BaseError> {
        if !rustix::process::geteuid().is_root() {
            return Ok(None);
        }
        let sources = self.sources()?;
        Ok(Some(LayerKey::of(
            "build-root-dir",
            &self.on_key_inputs(&base.diff_id, &sources, epoch, Compression::None),
        )))
    }

    /// The rootfs of `base` with this base's packages added, as [`DebianBase::prepare_on`]
    /// makes it, but written by mmdebstrap in place as the directory `into` (which must not
    /// exist), for builds to run in: a layer is written as a tar, stored, and unpacked again (a
    /// build root of bookworm with build-essential and python3.11-dev: 17.8 s for the tar alone,
    /// 14.8 s as a directory, and the store and unpack of 1 GB no longer follow). `key` is
    /// [`DebianBase::dir_key_on`]'s. Returns what identifies the root's content: the key and
    /// every package and version its dpkg status lists (a mirror that moved makes another root).
    pub fn make_dir_on(
        &self,
        base: &LayerBlob,
        cache: &Cache,
        epoch: u64,
        key: &LayerKey,
        into: &Path,
    ) -> Result<String, BaseError> {
        let sources = self.sources()?;
        let tmp = tempfile::Builder::new()
            .prefix("mmdebstrap-")
            .tempdir_in(cache.root())
            .map_err(|source| BaseError::Tar { path: cache.root().to_owned(), source })?;
        let base_tar = plain_tar(base, tmp.path())?;
        self.run_mmdebstrap(&sources, into, epoch, Some(&base_tar), true)?;
        let status = into.join("var/lib/dpkg/status");
        let mut h = Sha256::new();
        h.update(key.as_hex().as_bytes());
        h.update(stackbuild_common::read_capped(&status, 64 << 20, "dpkg status")?);
        Ok(format!("sha256:{}", hex::encode(h.finalize())))
    }

    /// The rootfs `tar` mmdebstrap wrote, as a layer in the cache under `key`, with its facts.
    fn store(
        &self,
        cache: &Cache,
        key: &LayerKey,
        tar: &Path,
        epoch: u64,
        compression: Compression,
    ) -> Result<PreparedBase, BaseError> {
        let facts_path = facts_path(cache, key);
        let facts = scan_rootfs_tar(tar)?;
        let mut writer = LayerWriter::new(cache, epoch);
        let file =
            std::fs::File::open(tar).map_err(|source| BaseError::Tar { path: tar.to_owned(), source })?;
        writer.add_tar(
            std::io::BufReader::with_capacity(1 << 20, file),
            &TarImport {
                name: format!("{} {} rootfs", self.distribution, self.suite),
                ..TarImport::default()
            },
        )?;
        let layer = writer.finish(compression)?;
        if let Ok(json) = serde_json::to_vec(&facts) {
            if let Some(dir) = facts_path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|source| BaseError::Tar { path: dir.to_owned(), source })?;
            }
            stackbuild_common::write_atomic(&facts_path, &json)
                .map_err(|source| BaseError::Tar { path: facts_path.clone(), source })?;
        }
        cache.put_layer(key, &layer)?;
        Ok(PreparedBase { layer, facts, cached: false })
    }

    /// Runs mmdebstrap into `out`, a tar or, with `directory`, a directory that does not exist;
    /// with `on`, on that rootfs tar ([`MMDEBSTRAP_ON_ARGS`]).
    fn run_mmdebstrap(
        &self,
        sources: &str,
        out: &Path,
        epoch: u64,
        on: Option<&Path>,
        directory: bool,
    ) -> Result<(), BaseError> {
        let fail = |message: String| BaseError::Mmdebstrap {
            suite: self.suite.clone(),
            packages: self.packages.join(","),
            message,
        };
        let mut cmd = Command::new("mmdebstrap");
        cmd.arg(MMDEBSTRAP_ARGS[0]);
        match on {
            Some(base) => cmd.args(MMDEBSTRAP_ON_ARGS).env("STACKBUILD_BASE_TAR", base),
            None => cmd.arg(format!("--variant={}", self.variant)),
        };
        let (mode, format, hook) = (MMDEBSTRAP_ARGS[1], MMDEBSTRAP_ARGS[2], MMDEBSTRAP_ARGS[3]);
        cmd.arg(format!("--architectures={}", self.architecture))
            .arg(mode)
            .arg(if directory { "--format=directory" } else { format })
            .arg(hook)
            .env("SOURCE_DATE_EPOCH", epoch.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if !self.packages.is_empty() {
            cmd.arg(format!("--include={}", self.packages.join(",")));
        }
        if let Some(keyring) = &self.keyring {
            cmd.arg(format!("--keyring={}", keyring.display()));
        }
        let default_mirror = sources == UBUNTU_DEFAULT;
        if default_mirror {
            cmd.arg("--components=main,universe").arg(&self.suite).arg(out);
        } else {
            cmd.arg(&self.suite).arg(out).arg("-");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| fail(format!("cannot run mmdebstrap: {e} (apt-get install mmdebstrap)")))?;
        if let Some(mut stdin) = child.stdin.take().filter(|_| !default_mirror) {
            use std::io::Write;
            let _ = stdin.write_all(sources.as_bytes());
        }
        let output = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
        if !output.status.success() {
            let err = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = err.lines().rev().take(12).collect();
            return Err(fail(tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
        }
        Ok(())
    }
}

/// `base`'s rootfs as a plain tar in `dir`, which mmdebstrap's setup hook unpacks.
fn plain_tar(base: &LayerBlob, dir: &Path) -> Result<PathBuf, BaseError> {
    let base_tar = dir.join("base.tar");
    let layer = format!("the base layer {}", base.digest);
    let read = |source| BaseError::LayerRead { layer: layer.clone(), path: base.path.clone(), source };
    let blob = std::fs::File::open(&base.path).map_err(read)?;
    let mut decoded = Compression::from_media_type(&base.media_type)
        .unwrap_or(Compression::None)
        .decoder(std::io::BufReader::with_capacity(1 << 20, blob))
        .map_err(read)?;
    let mut out = std::fs::File::create(&base_tar)
        .map_err(|source| BaseError::Tar { path: base_tar.clone(), source })?;
    std::io::copy(&mut decoded, &mut out).map_err(read)?;
    Ok(base_tar)
}

/// Where the facts of the layer of `key` are kept.
fn facts_path(cache: &Cache, key: &LayerKey) -> PathBuf {
    cache.root().join("facts").join(format!("{}.json", key.as_hex()))
}

/// The layer of `key` and its facts, when the cache has both.
fn cached(cache: &Cache, key: &LayerKey) -> Option<PreparedBase> {
    let layer = cache.get_layer(key)?;
    let facts = std::fs::read(facts_path(cache, key)).ok().and_then(|b| serde_json::from_slice(&b).ok())?;
    Some(PreparedBase { layer, facts, cached: true })
}

/// The host's apt `sources` made to name `suite`: mmdebstrap takes sources given on stdin as
/// they are, whatever its suite argument says, so a trixie base built on a bookworm host from
/// the host's sources would be bookworm. Each suite of the host's Debian archive (`bookworm`,
/// `bookworm-updates`, `bookworm-security`) becomes the same of `suite`, in deb822
/// (`Suites:`) and one-line (`deb URI SUITE ...`) entries. Sources of another distribution
/// than the base's (an Ubuntu base on a Debian host) are left as they are.
pub(crate) fn for_suite(sources: &str, distribution: &str, suite: &str) -> String {
    let host = host_suite(sources);
    let Some(host) = host.filter(|h| h != suite && distribution == "debian") else {
        return sources.to_owned();
    };
    let map = |token: &str| -> String {
        match token.strip_prefix(host.as_str()) {
            Some("") => suite.to_owned(),
            Some(rest) if rest.starts_with('-') || rest.starts_with('/') => format!("{suite}{rest}"),
            _ => token.to_owned(),
        }
    };
    let mut out = String::new();
    for line in sources.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("Suites:") {
            let suites: Vec<String> = rest.split_whitespace().map(map).collect();
            out.push_str("Suites: ");
            out.push_str(&suites.join(" "));
        } else if trimmed.starts_with("deb ") || trimmed.starts_with("deb-src ") {
            // `deb [options] URI SUITE COMPONENT...`: the suite is the token after the URI.
            let mut tokens: Vec<String> = trimmed.split_whitespace().map(str::to_owned).collect();
            let mut i = 1;
            if tokens.get(i).is_some_and(|t| t.starts_with('[')) {
                while i < tokens.len() && !tokens[i].ends_with(']') {
                    i += 1;
                }
                i += 1;
            }
            if let Some(t) = tokens.get_mut(i + 1) {
                *t = map(t);
            }
            out.push_str(&tokens.join(" "));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The suite the host's sources are of: the first `Suites:` or one-line suite of the Debian
/// archive that names no pocket (`bookworm`, not `bookworm-updates`).
fn host_suite(sources: &str) -> Option<String> {
    const DEBIAN: &[&str] = &["buster", "bullseye", "bookworm", "trixie", "forky", "sid"];
    sources
        .lines()
        .flat_map(|l| {
            let l = l.trim_start();
            let tokens: Vec<&str> = if let Some(rest) = l.strip_prefix("Suites:") {
                rest.split_whitespace().collect()
            } else if l.starts_with("deb ") {
                l.split_whitespace()
                    .filter(|t| !t.starts_with('[') && !t.ends_with(']'))
                    .skip(2)
                    .take(1)
                    .collect()
            } else {
                Vec::new()
            };
            tokens.into_iter().map(str::to_owned).collect::<Vec<_>>()
        })
        .find(|t| DEBIAN.contains(&t.as_str()))
}

/// The host's apt sources in deb822 or one-line format, which mmdebstrap reads on stdin.
pub fn host_apt_sources() -> Result<String, BaseError> {
    let mut text = String::new();
    let list = Path::new("/etc/apt/sources.list");
    if let Ok(s) = std::fs::read_to_string(list) {
        text.push_str(&s);
        text.push('\n');
    }
    let dir = Path::new("/etc/apt/sources.list.d");
    let mut names: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(e) if text.is_empty() => return Err(BaseError::Sources { path: dir.to_owned(), source: e }),
        Err(_) => Vec::new(),
    };
    names.sort();
    for path in names {
        if path.extension().is_some_and(|e| e == "sources" || e == "list") {
            let s = std::fs::read_to_string(&path)
                .map_err(|source| BaseError::Sources { path: path.clone(), source })?;
            text.push_str(&s);
            text.push('\n');
        }
    }
    Ok(text)
}

/// Reads a rootfs tar's headers (and the dpkg status file) to learn what it holds.
pub(crate) fn scan_rootfs_tar(path: &Path) -> Result<BaseFacts, BaseError> {
    let err = |source| BaseError::Tar { path: path.to_owned(), source };
    let file = std::fs::File::open(path).map_err(err)?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    let mut facts = BaseFacts::default();
    let mut best: Option<PythonVersion> = None;
    for entry in archive.entries().map_err(err)? {
        let mut entry = entry.map_err(err)?;
        let name = entry.path().map_err(err)?.to_string_lossy().trim_start_matches("./").to_owned();
        if let Some(v) = name.strip_prefix("usr/bin/python3.") {
            if let Ok(v) = format!("3.{v}").parse::<PythonVersion>() {
                if best.as_ref().is_none_or(|b| v > *b) {
                    best = Some(v);
                }
            }
        } else if name == "var/lib/dpkg/status" {
            let mut text = String::new();
            entry.by_ref().take(64 << 20).read_to_string(&mut text).map_err(err)?;
            facts.packages = dpkg_status(&text);
        }
    }
    facts.python = best.map(|v| v.to_string());
    Ok(facts)
}

/// `(package, version)` of every installed package in a dpkg status file.
pub(crate) fn dpkg_status(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')).map(str::trim))
        };
        if let (Some(p), Some(v), Some(status)) = (field("Package"), field("Version"), field("Status")) {
            if status.ends_with(" installed") {
                out.push((p.to_owned(), v.to_owned()));
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_hosts_sources_are_made_to_name_the_bases_suite() {
        let deb822 = "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n\
                      Types: deb\nURIs: http://deb.example/debian-security\nSuites: bookworm-security\nComponents: main\n";
        let got = super::for_suite(deb822, "debian", "trixie");
        assert!(got.contains("Suites: trixie trixie-updates\n"), "{got}");
        assert!(got.contains("Suites: trixie-security\n"), "{got}");
        assert!(got.contains("URIs: http://deb.example/debian\n"), "{got}");
        let one_line = "deb [signed-by=/k.gpg] http://deb.example/debian bookworm main\ndeb http://deb.example/debian-security bookworm-security main\n";
        let got = super::for_suite(one_line, "debian", "trixie");
        assert_eq!(got, "deb [signed-by=/k.gpg] http://deb.example/debian trixie main\ndeb http://deb.example/debian-security trixie-security main\n");
        // The same suite, or another distribution: unchanged.
        assert_eq!(super::for_suite(deb822, "debian", "bookworm"), deb822);
        assert_eq!(super::for_suite(deb822, "ubuntu", "noble"), deb822);
    }
    use super::*;

    /// A bookworm amd64 base of `packages`, from the host's sources.
    fn bookworm(packages: &[&str]) -> DebianBase {
        DebianBase {
            distribution: "debian".into(),
            suite: "bookworm".into(),
            packages: packages.iter().map(|p| (*p).to_owned()).collect(),
            mirror: None,
            variant: "apt".into(),
            architecture: "amd64".into(),
            keyring: None,
        }
    }

    #[test]
    fn every_input_of_a_rootfs_added_to_a_base_is_part_of_its_key() {
        let root = bookworm(&["build-essential", "python3.11-dev"]);
        let base = format!("sha256:{}", "ab".repeat(32));
        let sources = "deb http://deb.debian.org/debian bookworm main\n";
        let inputs = root.on_key_inputs(&base, sources, 1, Compression::None);
        let changed = stackbuild_cache::assert_every_input_changes_key(
            "base-debian-on",
            &inputs,
            &["base", "added", "on"],
        );
        for path in ["added.packages[1]", "added.sources", "on[1]"] {
            assert!(changed.iter().any(|p| p == path), "{path}: {changed:?}");
        }
    }

    #[test]
    fn every_input_of_a_debian_base_is_part_of_its_key() {
        let base = bookworm(&["python3", "curl=7.88.1-10+deb12u8"]);
        let sources = "deb http://deb.debian.org/debian bookworm main\n";
        let inputs = base.key_inputs(sources, 1_700_000_000, Compression::Gzip);
        stackbuild_cache::assert_every_input_changes_key(
            "base-debian",
            &inputs,
            &[
                "distribution",
                "suite",
                "variant",
                "architecture",
                "sources",
                "packages",
                "mmdebstrap",
                "epoch",
                "encoding",
            ],
        );
        assert_eq!(base.key(sources, 1_700_000_000, Compression::Gzip), LayerKey::of("base-debian", &inputs));
        assert_ne!(
            base.key(sources, 1_700_000_000, Compression::Gzip),
            base.key(sources, 1_700_000_000, Compression::Zstd)
        );
    }

    #[test]
    fn dpkg_status_lists_installed_packages() {
        let text = "Package: python3\nStatus: install ok installed\nVersion: 3.11.2-1+b1\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n\nPackage: bash\nStatus: install ok installed\nVersion: 5.2.15-2+b2\n";
        assert_eq!(
            dpkg_status(text),
            vec![("bash".into(), "5.2.15-2+b2".into()), ("python3".into(), "3.11.2-1+b1".into())]
        );
    }

    #[test]
    fn base_layers_are_checked_against_their_digests_whatever_the_compression() {
        for compression in [Compression::Gzip, Compression::Zstd, Compression::None] {
            let dir = tempfile::tempdir().unwrap();
            let cache = Cache::open(dir.path()).unwrap();
            let mut w = LayerWriter::new(&cache, 0);
            w.add_file("/etc/motd", vec![b'h'; 4096], 0o644).unwrap();
            let blob = w.finish(compression).unwrap();
            check_layout_layers(std::slice::from_ref(&blob), &cache, "base").unwrap();
            // The size, the blob digest and the diff_id are each checked.
            let mut wrong = blob.clone();
            wrong.size += 1;
            let err = check_layout_layers(&[wrong], &cache, "base").unwrap_err();
            assert!(err.to_string().contains("its size is"), "{err}");
            let mut wrong = blob.clone();
            wrong.diff_id = format!("sha256:{}", "0".repeat(64));
            let err = check_layout_layers(&[wrong], &cache, "base").unwrap_err();
            assert!(err.to_string().contains("diff_id"), "{err}");
            // A copy with one byte changed (its size kept).
            let copy = dir.path().join("copy");
            let mut bytes = std::fs::read(&blob.path).unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 1;
            std::fs::write(&copy, bytes).unwrap();
            let tampered = LayerBlob { path: copy, ..blob.clone() };
            let err = check_layout_layers(&[tampered], &cache, "base").unwrap_err();
            assert!(
                matches!(
                    err,
                    BaseError::LayerDigest { .. } | BaseError::LayerRead { .. } | BaseError::BadLayer { .. }
                ),
                "{err}"
            );
            assert!(err.to_string().contains("base layer 0"), "{err}");
        }
    }

    #[test]
    fn scans_python_from_a_rootfs_tar() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.tar");
        let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
        for name in [
            "./usr/bin/python3.11",
            "./usr/bin/python3.9",
            "./usr/bin/python3.11-config",
            "./usr/bin/python3",
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_mode(0o755);
            h.set_cksum();
            b.append_data(&mut h, name, &[][..]).unwrap();
        }
        b.finish().unwrap();
        drop(b);
        assert_eq!(scan_rootfs_tar(&path).unwrap().python.as_deref(), Some("3.11"));
    }
}

/// A base taken from an image archive or the local Docker daemon: its layers (transcoded into
/// our own deterministic layers) and its runtime configuration.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ImportedBase {
    /// The layers, base first.
    pub layers: Vec<LayerBlob>,
    /// `Env`, `Cmd`, ... of the source image.
    pub config: crate::oci::RuntimeConfig,
}

/// Names an image archive may hold that an import reads: `docker save` (legacy) and OCI layouts.
fn archive_name_allowed(name: &str) -> bool {
    let hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    matches!(name, "manifest.json" | "index.json" | "oci-layout" | "repositories")
        || name.strip_prefix("blobs/sha256/").is_some_and(hex)
        || name.strip_suffix(".json").is_some_and(hex)
        || name.strip_suffix("/layer.tar").is_some_and(hex)
}

/// Copies the files an image archive's import needs into `dir`, by name only: nothing in the
/// archive can name a path outside `dir` or plant a link (CVE-2021-29136 and kin).
pub fn extract_image_archive(archive: &Path, dir: &Path) -> Result<(), BaseError> {
    let err = |source| BaseError::Tar { path: archive.to_owned(), source };
    // A regular file only: a FIFO would block, /dev/zero never end.
    let file = stackbuild_common::open_regular(archive, "base archive")?;
    let mut tar = tar::Archive::new(std::io::BufReader::new(file));
    for entry in tar.entries().map_err(err)? {
        let mut entry = entry.map_err(err)?;
        let name = entry.path().map_err(err)?.to_string_lossy().trim_start_matches("./").to_owned();
        let kind = entry.header().entry_type();
        if kind.is_dir() || !archive_name_allowed(&name) {
            continue;
        }
        if !kind.is_file() {
            return Err(err(std::io::Error::other(format!("{name} in the archive is not a regular file"))));
        }
        let dest = dir.join(&name);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        // A tar may hold one name twice: the later entry wins, as tar(1) and every runtime
        // apply an archive (POSIX pax, "a later copy replaces an earlier one"). `dest` is a
        // regular file this loop wrote into a directory of ours, so removing it loses nothing.
        if std::fs::symlink_metadata(&dest).is_ok_and(|m| m.is_file()) {
            std::fs::remove_file(&dest).map_err(err)?;
        }
        let mut out = std::fs::File::create_new(&dest).map_err(err)?;
        std::io::copy(&mut entry, &mut out).map_err(err)?;
    }
    Ok(())
}

/// The part of a Docker image config we take over (and check the layers against).
#[derive(serde::Deserialize)]
struct SavedConfig {
    #[serde(default)]
    config: crate::oci::RuntimeConfig,
    #[serde(default)]
    rootfs: SavedRootFs,
}

/// `rootfs` of a Docker image config: the digests of the uncompressed layers.
#[derive(Default, serde::Deserialize)]
struct SavedRootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// The sha256 of a base archive file, which identifies it in the cache (`sha256:<hex>`-less).
pub fn archive_identity(path: &Path) -> Result<String, BaseError> {
    let file = stackbuild_common::open_regular(path, "base archive")?;
    let (digest, _) = stackbuild_common::sha256_reader(std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(|source| BaseError::Tar { path: path.to_owned(), source })?;
    Ok(digest.trim_start_matches("sha256:").to_owned())
}

/// What the bytes of one base layer must hash to, as its manifest and config say.
#[derive(Debug, Clone, Default)]
pub(crate) struct LayerExpect {
    /// `sha256:<hex>` of the blob, as stored (compressed or not).
    pub digest: Option<String>,
    /// Size of the blob in bytes.
    pub size: Option<u64>,
    /// `sha256:<hex>` of the uncompressed tar (the config's `rootfs.diff_ids`).
    pub diff_id: Option<String>,
}

/// A reader that hashes and counts what passes through it.
struct HashingReader<R> {
    inner: R,
    hasher: sha2::Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    fn new(inner: R) -> Self {
        use sha2::Digest as _;
        Self { inner, hasher: sha2::Sha256::new(), count: 0 }
    }

    /// Reads what is left, then returns `sha256:<hex>` of everything read and its length.
    fn finish(mut self) -> std::io::Result<(String, u64)> {
        use sha2::Digest as _;
        std::io::copy(&mut self, &mut std::io::sink())?;
        Ok((format!("sha256:{}", hex::encode(self.hasher.finalize())), self.count))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use sha2::Digest as _;
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// Reads the base layer blob at `path` (compressed as `compression`) into `writer`, every entry
/// validated by [`LayerWriter::add_tar`] (no `..` or absolute names, nothing through a symlink,
/// hardlinks only to files of the layer, well-formed whiteouts), and checks that the blob and
/// its uncompressed tar hash to what the image says, so that a tampered layer fails here rather
/// than in the tools that later read the image. `layer` names it in errors.
pub(crate) fn read_base_layer(
    path: &Path,
    compression: Compression,
    expect: &LayerExpect,
    layer: &str,
    writer: &mut LayerWriter,
) -> Result<(), BaseError> {
    let tar_err = |source| BaseError::LayerRead { layer: layer.to_owned(), path: path.to_owned(), source };
    let file = stackbuild_common::open_regular(path, "base layer blob")?;
    let mut raw = HashingReader::new(std::io::BufReader::with_capacity(1 << 20, file));
    let diff = {
        let decoded = compression.decoder(&mut raw).map_err(tar_err)?;
        let mut tar = HashingReader::new(decoded);
        // BadLayer names the layer; the tar error says where in its stream.
        let opts = TarImport { name: "stream".to_owned(), ..TarImport::default() };
        writer
            .add_tar(&mut tar, &opts)
            .map_err(|source| BaseError::BadLayer { layer: layer.to_owned(), source })?;
        tar.finish().map_err(tar_err)?.0
    };
    let (digest, size) = raw.finish().map_err(tar_err)?;
    let mismatch = |what, expected: &str, actual: String| BaseError::LayerDigest {
        layer: layer.to_owned(),
        what,
        expected: expected.to_owned(),
        actual,
    };
    if let Some(want) = expect.digest.as_deref().filter(|w| *w != digest) {
        return Err(mismatch("blob digest", want, digest));
    }
    if let Some(want) = expect.size.filter(|w| *w != size) {
        return Err(mismatch("size", &format!("{want} bytes"), format!("{size} bytes")));
    }
    if let Some(want) = expect.diff_id.as_deref().filter(|w| *w != diff) {
        return Err(mismatch("diff_id (digest of the uncompressed tar)", want, diff));
    }
    Ok(())
}

/// Checks the layers of an OCI layout base, which are reused as they are: every entry as an
/// archive base's (see [`read_base_layer`]), and every digest. `name` names the base in errors.
pub fn check_layout_layers(layers: &[LayerBlob], cache: &Cache, name: &str) -> Result<(), BaseError> {
    for (i, l) in layers.iter().enumerate() {
        let label = format!("{name} layer {i} ({})", l.digest);
        let compression = Compression::from_media_type(&l.media_type).ok_or_else(|| BaseError::Tar {
            path: l.path.clone(),
            source: std::io::Error::other(format!("{label}: unsupported layer media type {}", l.media_type)),
        })?;
        let expect = LayerExpect {
            digest: Some(l.digest.clone()),
            size: Some(l.size),
            diff_id: Some(l.diff_id.clone()),
        };
        let mut checker = LayerWriter::checker(cache);
        read_base_layer(&l.path, compression, &expect, &label, &mut checker)?;
        checker.check().map_err(|source| BaseError::BadLayer { layer: label, source })?;
    }
    Ok(())
}

fn import_facts_path(key: &LayerKey, cache: &Cache) -> PathBuf {
    cache.root().join("facts").join(format!("{}.json", key.as_hex()))
}

/// A previous import under `key`, when every one of its blobs is still in the cache.
pub fn cached_import(key: &LayerKey, cache: &Cache) -> Option<ImportedBase> {
    let bytes = std::fs::read(import_facts_path(key, cache)).ok()?;
    let mut base: ImportedBase = serde_json::from_slice(&bytes).ok()?;
    for l in &mut base.layers {
        if !cache.has_blob(&l.digest) {
            return None;
        }
        l.path = cache.blob_path(&l.digest).ok()?;
    }
    Some(base)
}

/// One layer of an image archive: its file, its compression and what it must hash to.
type Source = (PathBuf, Option<Compression>, LayerExpect);

/// Imports an image archive (`docker save` of any Docker version, or an OCI layout archive):
/// every layer is transcoded entry by entry into a deterministic layer of ours, so the result
/// does not depend on how the archive was compressed or ordered. Cached under `key`.
pub fn import_archive(
    archive: &Path,
    key: &LayerKey,
    cache: &Cache,
    epoch: u64,
    compression: Compression,
) -> Result<ImportedBase, BaseError> {
    if let Some(base) = cached_import(key, cache) {
        return Ok(base);
    }
    let facts_path = import_facts_path(key, cache);
    let tmp = tempfile::Builder::new()
        .prefix("import-")
        .tempdir_in(cache.root())
        .map_err(|source| BaseError::Tar { path: cache.root().to_owned(), source })?;
    extract_image_archive(archive, tmp.path())?;
    let bad = |why: String| BaseError::Tar { path: archive.to_owned(), source: std::io::Error::other(why) };
    let (config, sources): (crate::oci::RuntimeConfig, Vec<Source>) =
        if tmp.path().join("index.json").is_file() {
            let image = crate::oci::read_layout(tmp.path(), None).map_err(|e| bad(e.to_string()))?;
            let layers = image
                .layers
                .iter()
                .map(|l| {
                    let expect = LayerExpect {
                        digest: Some(l.digest.clone()),
                        size: Some(l.size),
                        diff_id: Some(l.diff_id.clone()),
                    };
                    (l.path.clone(), Compression::from_media_type(&l.media_type), expect)
                })
                .collect();
            (image.config.config, layers)
        } else {
            let text = std::fs::read(tmp.path().join("manifest.json"))
                .map_err(|e| bad(format!("no manifest.json: {e}")))?;
            let saved: Vec<crate::oci::DockerSaveEntry> =
                serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
            let [saved] = &saved[..] else {
                return Err(bad("the archive must hold exactly one image".into()));
            };
            for name in std::iter::once(&saved.config).chain(&saved.layers) {
                if !archive_name_allowed(name) {
                    return Err(bad(format!(
                        "manifest.json names {name:?}, which is not a file of an image archive"
                    )));
                }
            }
            let config: SavedConfig = serde_json::from_slice(
                &std::fs::read(tmp.path().join(&saved.config))
                    .map_err(|e| bad(format!("{}: {e}", saved.config)))?,
            )
            .map_err(|e| bad(e.to_string()))?;
            if config.rootfs.diff_ids.len() != saved.layers.len() {
                return Err(bad(format!(
                    "the image config lists {} diff_ids for {} layers",
                    config.rootfs.diff_ids.len(),
                    saved.layers.len()
                )));
            }
            let layers = saved
                .layers
                .iter()
                .zip(&config.rootfs.diff_ids)
                .map(|(l, diff_id)| {
                    // `blobs/sha256/<hex>` (Docker 25+) is named by its digest; `<id>/layer.tar` is not.
                    let digest = l.strip_prefix("blobs/sha256/").map(|hex| format!("sha256:{hex}"));
                    let expect = LayerExpect { digest, size: None, diff_id: Some(diff_id.clone()) };
                    (tmp.path().join(l), Some(Compression::None), expect)
                })
                .collect();
            (config.config, layers)
        };
    let mut layers = Vec::new();
    for (i, (path, compressed, expect)) in sources.iter().enumerate() {
        let mut writer = LayerWriter::new(cache, epoch);
        let label = format!("{} layer {i}", archive.display());
        read_base_layer(path, compressed.unwrap_or(Compression::None), expect, &label, &mut writer)?;
        layers
            .push(writer.finish(compression).map_err(|source| BaseError::BadLayer { layer: label, source })?);
    }
    let base = ImportedBase { layers, config };
    if let Ok(json) = serde_json::to_vec(&base) {
        if let Some(dir) = facts_path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| BaseError::Tar { path: dir.to_owned(), source })?;
        }
        stackbuild_common::write_atomic(&facts_path, &json)
            .map_err(|source| BaseError::Tar { path: facts_path.clone(), source })?;
    }
    Ok(base)
}
