//! `stackbuild audit`: a static `ldd` over an image's root filesystem.
//!
//! For every ELF object of the image, each `DT_NEEDED` is resolved the way glibc's `ld.so`
//! would inside a container of that image (`elf/dl-load.c`, `_dl_map_object`; `ld.so(8)`):
//!
//! 1. `DT_RPATH` of the object, then of the objects that loaded it up to the executable, but
//!    only while the object itself has no `DT_RUNPATH` (glibc ignores a `DT_RPATH` next to a
//!    `DT_RUNPATH`, `elf/get-dynamic-info.h`);
//! 2. `LD_LIBRARY_PATH` from the image's environment;
//! 3. `DT_RUNPATH` of the object itself;
//! 4. the directories of the image's `/etc/ld.so.conf` (what `ldconfig` puts in the cache);
//! 5. the default directories (`/lib/<triplet>`, `/usr/lib/<triplet>`, `/lib64`, `/usr/lib64`,
//!    `/lib`, `/usr/lib`); 4 and 5 are skipped for objects linked with `-z nodefaultlib`.
//!
//! `$ORIGIN` is the directory the object was found in (glibc does not resolve a library's
//! symlinks for it), `$LIB` is `lib64` for 64-bit objects and `lib` for 32-bit ones, and
//! `$PLATFORM` the `AT_PLATFORM` string of the architecture. A candidate of another ELF class
//! or machine is skipped, as `open_verify` does; a candidate that is not ELF at all stops the
//! search with `invalid ELF header`, as in glibc.
//!
//! Findings ([`FindingKind`]): unresolved libraries; libraries that the host's NVIDIA driver
//! provides (`libcuda.so.1`, `libnvidia-ml.so.1`, ...), which become [`AuditReport::host_provided`]
//! requirements instead; `LD_LIBRARY_PATH` entries that shadow the copy an object's `RUNPATH`
//! pins (a system cuDNN 8.9.7 loaded before the 8.9.2 of the `nvidia-cudnn-cu12` wheel that
//! torch 2.1 pins gives NaNs or undefined symbols, not a clean error); `libcuda.so` stubs or
//! copies on the search path (they make CUDA report "CUDA driver version is insufficient" on a
//! good host); objects of another machine than the image's platform.
//!
//! Each executable is loaded as `ld.so` loads it, breadth first, and a `DT_NEEDED` that matches
//! the name or `DT_SONAME` of an object loaded earlier is not searched for (`elf/dl-deps.c`):
//! systemd's `libsystemd-core` finds `libsystemd-shared` only that way. An object with a
//! `RUNPATH` that receives such an earlier copy while its `RUNPATH` pins another is reported as
//! shadowed too. A library that nothing in the image links to (a plugin, a Python extension
//! module) is loaded on its own; a dependency it cannot find on its own search path but that the image
//! has elsewhere is only a warning, since the process that `dlopen`s it may have loaded that
//! copy already (the loader then matches it by name without searching).
//!
//! Findings are recorded per root (an executable, or a `dlopen` root: a library that nothing
//! else in the image loads), and the severity of an unresolved library is decided at the end,
//! from the roots it was reached from. It is only a warning when every root that reaches it is
//!
//! - an *alternative build*: a `dlopen` root of a family of at least two in one directory whose
//!   names differ only in digits (bitsandbytes' `libbitsandbytes_cuda110.so` ...
//!   `libbitsandbytes_cuda122.so`, torchaudio's `_torchaudio_ffmpeg4.so` ... `_ffmpeg6.so`), at
//!   least one of which has no unresolved library in its closure: the package loads the build
//!   that matches what it finds (bitsandbytes' `cuda_setup`; torchaudio tries each major
//!   version of `FFmpeg`);
//! - a *plugin*: a `dlopen` root outside Python packages (`site-packages`, `dist-packages`,
//!   `lib-dynload`, `*.cpython-*.so`), outside the directories every object searches
//!   (`LD_LIBRARY_PATH`, `ld.so.conf`, the default directories) and in a directory that nothing
//!   outside it links into, such as libcaca's `caca/libgl_plugin.so`, loaded only when
//!   `CACA_DRIVER=gl`.
//!
//! Anything an executable loads keeps its errors, and so do Python extension modules and
//! libraries on the search path; shadowed copies, stubs and foreign machines stay errors.
//!
//! [`audit_dir`] reads an unpacked root filesystem; [`audit_layout`] streams the layers of an
//! OCI layout without extracting them.

mod auditor;
mod elf;
mod fs;
mod report;
mod search;
mod tap;

pub use report::{AuditError, AuditReport, FindingKind, POLICY_VERSION};
pub use tap::LayerTap;

use self::auditor::Auditor;
use self::search::parse_platform;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use self::fs::RootFs;
use stackbuild_common::{io_err, IoError};

#[cfg(test)]
/// Audits the unpacked root filesystem `root` of an image whose environment is `env`
/// (`NAME=value`, for `LD_LIBRARY_PATH`) and platform is `platform` (`linux/amd64`,
/// `linux/arm64`, ...). Symlinks under `root` are resolved inside it, never on the host.
pub(crate) fn audit_dir(root: &Path, env: &[String], platform: &str) -> Result<AuditReport, AuditError> {
    let started = Instant::now();
    // Check the platform before the (possibly long) walk.
    parse_platform(platform).ok_or_else(|| AuditError::Platform(platform.to_string()))?;
    let fs = RootFs::from_dir(root)?;
    let mut auditor = Auditor::new(&fs, env, platform)?;
    let scanned = auditor.audit();
    Ok(auditor.report(scanned, started))
}

/// Audits the image tagged `tag` (`None`: the only image) of the OCI layout `layout_dir`, with
/// the environment and architecture of its config. Layers are streamed (gzip, zstd or plain)
/// on parallel threads and never extracted: only ELF files and `ld.so.conf` files are read, an
/// ELF file above 64 MiB through an anonymous temporary file. Layer digests are not re-hashed
/// ([`stackbuild_image::verify_layout_blob`] does that).
pub fn audit_layout(layout_dir: &Path, tag: Option<&str>) -> Result<AuditReport, AuditError> {
    audit_layout_with(layout_dir, tag, None, fs::SPOOL_ABOVE, None)
}

#[cfg(test)]
/// [`audit_layout`] of one platform's image of a multi-platform `tag` (`None`: the only image),
/// keeping what it reads of each layer in `layer_cache` by layer digest, so that the audit of an
/// image that shares layers with one audited before reads only its new layers (a changed pin
/// rebuilds one layer of seven; reading the others again costs most of the audit).
pub(crate) fn audit_layout_cached(
    layout_dir: &Path,
    tag: Option<&str>,
    platform: Option<&stackbuild_image::Platform>,
    layer_cache: &Path,
) -> Result<AuditReport, AuditError> {
    audit_layout_with(layout_dir, tag, platform, fs::SPOOL_ABOVE, Some(layer_cache))
}

/// The version of the cached layer reading ([`fs::Op`] as JSON): bump it when `Op` or what
/// `fs::read_layer` records changes.
const LAYER_CACHE_FORMAT: u32 = 1;

/// A layer's changes from `cache` (by digest), else read from its blob and stored there. The
/// cache is only an accelerator: an entry that does not parse is read again and replaced.
fn layer_ops(layer: &stackbuild_common::LayerBlob, spool_above: u64, cache: Option<&Path>) -> LayerResult {
    let entry = cache.and_then(|dir| layer_cache_entry(dir, &layer.digest));
    if let Some(ops) = entry
        .as_ref()
        .and_then(|path| std::fs::read(path).ok())
        .and_then(|bytes| serde_json::from_slice::<Vec<fs::Op>>(&bytes).ok())
    {
        return Ok(ops);
    }
    let ops = fs::read_layer(&layer.path, &layer.media_type, spool_above).map_err(|source| {
        AuditError::Layer { digest: layer.digest.clone(), source: io_err("reading", &layer.path)(source) }
    })?;
    if let Some(path) = &entry {
        store_layer_ops(path, &layer.digest, &ops);
    }
    Ok(ops)
}

/// Where the changes of the layer `digest` are kept in the layer cache `dir`.
fn layer_cache_entry(dir: &Path, digest: &str) -> Option<PathBuf> {
    let hex = digest.strip_prefix("sha256:")?;
    Some(dir.join(format!("v{LAYER_CACHE_FORMAT}-{hex}.json")))
}

/// Keeps a layer's changes at `path`; failing only costs reading the layer again later.
fn store_layer_ops(path: &Path, digest: &str, ops: &[fs::Op]) {
    let stored = serde_json::to_vec(ops).map_err(io::Error::other).and_then(|json| {
        path.parent().map_or(Ok(()), std::fs::create_dir_all)?;
        stackbuild_common::write_atomic(path, &json)
    });
    if let Err(e) = stored {
        tracing::debug!("not caching the audit of layer {digest}: {e}");
    }
}

/// The changes of one layer, as a worker thread read them.
type LayerResult = Result<Vec<fs::Op>, AuditError>;

fn audit_layout_with(
    layout_dir: &Path,
    tag: Option<&str>,
    platform: Option<&stackbuild_image::Platform>,
    spool_above: u64,
    layer_cache: Option<&Path>,
) -> Result<AuditReport, AuditError> {
    let started = Instant::now();
    let image = stackbuild_image::read_layout_for(layout_dir, tag, platform)?;
    audit_layers(&image.config, &image.layers, spool_above, layer_cache, started)
}

/// [`audit_layout_cached`] of an image not written anywhere yet (its layers in the cache), so
/// that a build audits before it touches its output.
pub fn audit_image_cached(
    image: &stackbuild_image::Image,
    layer_cache: &Path,
) -> Result<AuditReport, AuditError> {
    audit_layers(image.config(), image.layers(), fs::SPOOL_ABOVE, Some(layer_cache), Instant::now())
}

fn audit_layers(
    config: &stackbuild_image::ImageConfig,
    layers: &[stackbuild_common::LayerBlob],
    spool_above: u64,
    layer_cache: Option<&Path>,
    started: Instant,
) -> Result<AuditReport, AuditError> {
    let platform = if config.os.is_empty() {
        config.architecture.clone()
    } else {
        format!("{}/{}", config.os, config.architecture)
    };
    parse_platform(&platform).ok_or_else(|| AuditError::Platform(platform.clone()))?;
    let results: Vec<Mutex<Option<LayerResult>>> = layers.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, usize::from).min(layers.len()).max(1);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(layer) = layers.get(i) else { break };
                let result = layer_ops(layer, spool_above, layer_cache);
                *results[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
            });
        }
    });
    let mut rootfs = RootFs::default();
    for (i, slot) in results.into_iter().enumerate() {
        let ops = slot.into_inner().unwrap_or_else(PoisonError::into_inner).unwrap_or_else(|| {
            Err(AuditError::Io(IoError {
                op: "reading layer",
                path: layers[i].path.clone(),
                source: io::Error::other("worker did not finish"),
            }))
        })?;
        rootfs.apply(ops, i + 1);
    }
    let mut auditor = Auditor::new(&rootfs, &config.config.env, &platform)?;
    let scanned = auditor.audit();
    Ok(auditor.report(scanned, started))
}

#[cfg(test)]
mod tests;
