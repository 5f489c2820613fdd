//! The torch table (`contract/kb/torch.toml`) generated from an index's metadata.
//!
//! For every torch release from `since` on, the index's `x86_64` manylinux wheels give the
//! Python range (their `cpXY` tags), and one wheel's `METADATA` per build gives the build's
//! exact `Requires-Dist` pins on Linux `x86_64` (markers evaluated for every Python of the
//! range), its CUDA (the `cuda-toolkit` pin, else the CUDA runtime wheel's release), its cuDNN
//! (the `nvidia-cudnn-cu*` pin) and its tag (the local version, `+cu129`, else `cu` and the CUDA
//! release). torchvision and torchaudio are the releases whose `Requires-Dist` pins that torch
//! exactly; the triton a build pins must be on the index's triton page.
//!
//! What metadata cannot say stays in the table as maintainers wrote it, and [`apply`] never
//! touches it: the compute capabilities and PTX a build carries (`arch`, `ptx`, `aarch64_arch`,
//! cited by `arch_source`: only the fat-binary headers of the wheel's libraries tell them, and
//! the build reads those itself), `numpy` bounds, the builds of other indexes, and `notes`.

use std::collections::BTreeMap;
use std::str::FromStr as _;

use pep508_rs::{Requirement, VersionOrUrl};
use stackcontract::version::{PackageVersion, PythonVersion};
use toml_edit::{value, Array, ArrayOfTables, DocumentMut, Item, Table};

use crate::check::exact_requires;
use stackbuild_common::Platform;
use stackbuild_python::Target;
use stackbuild_python::{Index, IndexError, IndexFile};

/// Why the table could not be generated or updated.
#[derive(Debug, thiserror::Error)]
pub enum TorchTableError {
    /// The index could not answer.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// A wheel's metadata is not what the index's file name says.
    #[error("{file}: {reason}")]
    Metadata {
        /// The wheel.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The table is not the table's format.
    #[error("{table}: {reason}")]
    Table {
        /// The table file, as given.
        table: String,
        /// What is wrong.
        reason: String,
    },
}

/// How the table is generated.
#[derive(Debug, Clone)]
pub struct Options {
    /// The oldest torch release with a row.
    pub since: PackageVersion,
    /// The index's name in citations (`PyPI`): a name, never a host.
    pub index_name: String,
    /// Download each build's wheels into this directory (one at a time, removed after) and read
    /// `arch`/`ptx` from their fat binaries; `None`: the table's lists stay.
    pub read_arch: Option<std::path::PathBuf>,
}

/// What a build's fat binaries say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchRead {
    /// Compute capabilities with cubins, ascending (`x86_64` wheel).
    pub arch: Vec<String>,
    /// PTX of the highest of them.
    pub ptx: bool,
    /// The same for the `aarch64` wheel, where the index has one with CUDA code.
    pub aarch64: Vec<String>,
    /// The citation.
    pub source: String,
}

/// What the index says about one torch release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// `2.9.1`.
    pub version: PackageVersion,
    /// Oldest and newest Python minor with a wheel.
    pub python: (PythonVersion, PythonVersion),
    /// The torchvision release that pins it exactly, and the metadata file that says so.
    pub torchvision: Option<(String, String)>,
    /// The same for torchaudio.
    pub torchaudio: Option<(String, String)>,
    /// Its CUDA builds on this index.
    pub builds: Vec<Build>,
    /// The index has its plain (local-version-less) wheels: the package index, whose view of
    /// the release (Python range, companions) the row takes. A per-CUDA index (only `+cu129`
    /// files) adds builds and leaves the rest of the row alone.
    pub plain: bool,
    /// The citation of the row.
    pub source: String,
}

/// One CUDA build of a release, from one wheel's `METADATA`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    /// `cu128`.
    pub tag: String,
    /// Whether it is the plain (local-version-less) wheel: the package index's build.
    pub plain: bool,
    /// `12.8`.
    pub cuda: String,
    /// The cuDNN pin.
    pub cudnn: String,
    /// Exact pins on Linux `x86_64`.
    pub pins: BTreeMap<String, String>,
    /// With [`Options::read_arch`]: the wheels' fat binaries.
    pub code: Option<ArchRead>,
    /// The citation.
    pub source: String,
}

/// Everything read, and what did not add up.
#[derive(Debug, Clone, Default)]
pub struct Generated {
    /// The releases, ascending.
    pub releases: Vec<Release>,
    /// Problems that do not stop the table (a pinned triton the index lacks, a build without
    /// CUDA pins).
    pub warnings: Vec<String>,
}

/// A wheel file of the index, with what its name says.
struct Wheel<'a> {
    file: &'a IndexFile,
    version: PackageVersion,
    /// The Python minor of its `cpXY` tag.
    minor: u64,
    /// Free-threaded (`cp313t`).
    free_threaded: bool,
    /// The PEP 427 build tag's number (0 without one).
    build: u64,
}

/// The Linux `x86_64` manylinux wheels of `project` on the page, parsed.
fn linux_wheels<'a>(project: &str, files: &'a [IndexFile]) -> Vec<Wheel<'a>> {
    machine_wheels(project, files, "x86_64")
}

/// The manylinux wheels of `project` for `machine` (`x86_64`, `aarch64`), parsed.
fn machine_wheels<'a>(project: &str, files: &'a [IndexFile], machine: &str) -> Vec<Wheel<'a>> {
    let suffix = format!("_{machine}");
    let prefix = format!("{}-", project.replace('-', "_"));
    files
        .iter()
        .filter(|f| !f.is_yanked() && f.filename.starts_with(&prefix))
        .filter_map(|file| {
            let stem = file.filename.strip_suffix(".whl")?;
            let parts: Vec<&str> = stem.split('-').collect();
            let (version, build, py, abi, plat) = match parts.as_slice() {
                [_, v, py, abi, plat] => (*v, 0, *py, *abi, *plat),
                [_, v, b, py, abi, plat] => {
                    let digits: String = b.chars().take_while(char::is_ascii_digit).collect();
                    (*v, digits.parse().ok()?, *py, *abi, *plat)
                }
                _ => return None,
            };
            if !plat.split('.').any(|p| p.starts_with("manylinux") && p.ends_with(&suffix)) {
                return None;
            }
            let version = PackageVersion::from_str(version).ok()?;
            if version.any_prerelease() {
                return None;
            }
            let minor = py.split('.').find_map(|t| t.strip_prefix("cp3").and_then(|m| m.parse().ok()))?;
            Some(Wheel { file, version, minor, free_threaded: abi.ends_with('t'), build })
        })
        .collect()
}

/// The wheel whose `METADATA` stands for a build: `CPython` 3.11 where there is one (every
/// release from 2.0 has it), else the oldest Python; not free-threaded; the highest build tag.
fn representative<'a, 'b>(wheels: &[&'b Wheel<'a>]) -> Option<&'b Wheel<'a>> {
    wheels
        .iter()
        .copied()
        .filter(|w| !w.free_threaded)
        .min_by_key(|w| (w.minor != 11, w.minor, std::cmp::Reverse(w.build), w.file.filename.clone()))
}

fn python(minor: u64) -> PythonVersion {
    PythonVersion::from_str(&format!("3.{minor}")).expect("3.X is a Python version")
}

/// Reads the index and returns the rows it supports.
pub fn generate(index: &mut Index, options: &Options) -> Result<Generated, TorchTableError> {
    let mut out = Generated::default();
    let files = index.files("torch")?;
    let wheels = linux_wheels("torch", &files);
    let mut by_release: BTreeMap<PackageVersion, Vec<&Wheel>> = BTreeMap::new();
    for w in &wheels {
        let release = w.version.clone().without_local();
        if release >= options.since {
            by_release.entry(release).or_default().push(w);
        }
    }
    let torchvision = companions(index, "torchvision", options)?;
    let torchaudio = companions(index, "torchaudio", options)?;
    let triton_files = index.files("triton")?;
    let triton = linux_wheels("triton", &triton_files);
    for (version, wheels) in &by_release {
        for w in wheels {
            index.consulted("torch", w.file);
        }
        let lo = wheels.iter().map(|w| w.minor).min().unwrap_or(0);
        let hi = wheels.iter().map(|w| w.minor).max().unwrap_or(0);
        let mut builds_of: BTreeMap<String, Vec<&Wheel>> = BTreeMap::new();
        for w in wheels {
            let local = w.version.local().iter().map(ToString::to_string).collect::<Vec<_>>().join(".");
            builds_of.entry(local).or_default().push(w);
        }
        let mut builds = Vec::new();
        for (local, group) in &builds_of {
            let Some(w) = representative(group) else { continue };
            let text = index.metadata("torch", w.file)?;
            check_identity(&text, "torch", &w.version, &w.file.filename)?;
            let pins = pins_for(&text, lo, hi, &w.file.filename, &mut out.warnings)?;
            let Some(cuda) = cuda_of(&pins) else {
                out.warnings.push(format!("{}: no CUDA pins (a CPU build): no row", w.file.filename));
                continue;
            };
            let tag = if local.is_empty() { format!("cu{}", cuda.replace('.', "")) } else { local.clone() };
            let cudnn = pins
                .iter()
                .find(|(n, _)| n.starts_with("nvidia-cudnn-cu"))
                .map(|(n, v)| (n.clone(), v.clone()));
            let Some((cudnn_name, cudnn)) = cudnn else {
                out.warnings.push(format!("{}: no nvidia-cudnn pin: no row", w.file.filename));
                continue;
            };
            if let Some(t) = pins.get("triton") {
                let published = triton.iter().find(|tw| tw.version.to_string() == *t);
                match published {
                    Some(tw) => index.consulted("triton", tw.file),
                    None => out.warnings.push(format!(
                        "{}: pins triton=={t}, which the index's triton page has no Linux x86_64 wheel of",
                        w.file.filename
                    )),
                }
            }
            let cuda_from = cuda_pin(&pins).map(|(n, v)| format!("{n}=={v}")).unwrap_or_default();
            let source = format!(
                "{} {}.metadata: Requires-Dist on Linux x86_64 (CUDA {cuda} from {cuda_from}, cuDNN from {cudnn_name}=={cudnn})",
                options.index_name, w.file.filename
            );
            let code = match &options.read_arch {
                Some(dir) => read_arch(index, &files, w, dir, &mut out.warnings)?,
                None => None,
            };
            builds.push(Build { tag, plain: local.is_empty(), cuda, cudnn, pins, code, source });
        }
        let tv = torchvision.get(version).cloned();
        let ta = torchaudio.get(version).cloned();
        let pinned = |name: &str, c: &Option<(String, String)>| match c {
            Some((v, file)) => format!("{name}-{v} ({file}.metadata)"),
            None => format!("{name}: no release pins torch=={version}"),
        };
        let source = format!(
            "{}: torch-{version} cp3{lo}..cp3{hi} manylinux x86_64 wheels; Requires-Dist torch=={version} in {}; {}",
            options.index_name,
            pinned("torchvision", &tv),
            pinned("torchaudio", &ta),
        );
        out.releases.push(Release {
            version: version.clone(),
            python: (python(lo), python(hi)),
            torchvision: tv,
            torchaudio: ta,
            plain: builds_of.contains_key(""),
            builds,
            source,
        });
    }
    Ok(out)
}

/// Downloads the build's `x86_64` wheel (and its `aarch64` one, where the index has it) and
/// reads the cubins and PTX of `torch/lib/libtorch_cuda.so` ([`crate::fatbin`]); `None` with a
/// warning when the table's shape (PTX of the highest cubin only) cannot say what they hold.
fn read_arch(
    index: &mut Index,
    files: &[IndexFile],
    w: &Wheel<'_>,
    dir: &std::path::Path,
    warnings: &mut Vec<String>,
) -> Result<Option<ArchRead>, TorchTableError> {
    let code_of = |index: &mut Index,
                   file: &IndexFile|
     -> Result<Option<crate::gpu_code::GpuCode>, TorchTableError> {
        tracing::info!("reading the fat binaries of {}", file.filename);
        let path = index.download(file, dir)?;
        let code = crate::fatbin::torch_wheel_code(&path, dir)
            .map_err(|e| TorchTableError::Metadata { file: file.filename.clone(), reason: e.to_string() });
        let _ = std::fs::remove_file(&path);
        code
    };
    let shape = |code: &crate::gpu_code::GpuCode| -> Option<(Vec<String>, bool)> {
        let arch: Vec<String> = code.cubins.iter().map(ToString::to_string).collect();
        let top = code.cubins.iter().next_back()?;
        match code.ptx.iter().collect::<Vec<_>>().as_slice() {
            [] => Some((arch, false)),
            [p] if *p == top => Some((arch, true)),
            _ => None,
        }
    };
    let Some(x86) = code_of(index, w.file)? else {
        warnings.push(format!("{}: no GPU code in torch/lib", w.file.filename));
        return Ok(None);
    };
    let Some((arch, ptx)) = shape(&x86) else {
        warnings.push(format!(
            "{}: PTX {:?} beside cubins {:?}: the table cannot say it",
            w.file.filename, x86.ptx, x86.cubins
        ));
        return Ok(None);
    };
    let mut source = format!("{}: cubins and PTX in the fat-binary headers", x86.from);
    if let Some(sha) = w.file.hashes.get("sha256") {
        source = format!("{source} (sha256 {sha})");
    }
    let arm_wheels = machine_wheels("torch", files, "aarch64");
    let same: Vec<&Wheel> = arm_wheels.iter().filter(|a| a.version == w.version).collect();
    let mut aarch64 = Vec::new();
    if let Some(a) = representative(&same) {
        if let Some(code) = code_of(index, a.file)? {
            match shape(&code) {
                Some((list, p)) if p == ptx => {
                    aarch64 = list;
                    source = format!("{source}; aarch64: {}", code.from);
                }
                _ => warnings
                    .push(format!("{}: its code differs in shape from the x86_64 wheel's", a.file.filename)),
            }
        }
    }
    Ok(Some(ArchRead { arch, ptx, aarch64, source }))
}

/// `Name` and `Version` of a `METADATA` must be the wheel's.
fn check_identity(
    text: &str,
    project: &str,
    version: &PackageVersion,
    file: &str,
) -> Result<(), TorchTableError> {
    let field = |key: &str| {
        text.lines().find_map(|l| {
            l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.trim())
        })
    };
    let name_ok = field("Name").is_some_and(|n| stackbuild_python::normalize_name(n) == project);
    let version_ok =
        field("Version").and_then(|v| PackageVersion::from_str(v).ok()).is_some_and(|v| v == *version);
    if name_ok && version_ok {
        Ok(())
    } else {
        Err(TorchTableError::Metadata {
            file: file.to_owned(),
            reason: format!(
                "METADATA says Name {:?}, Version {:?}; the file name says {project} {version}",
                field("Name").unwrap_or(""),
                field("Version").unwrap_or("")
            ),
        })
    }
}

/// Exact pins on Linux `x86_64` for any Python from `3.lo` to `3.hi`.
fn pins_for(
    text: &str,
    lo: u64,
    hi: u64,
    file: &str,
    warnings: &mut Vec<String>,
) -> Result<BTreeMap<String, String>, TorchTableError> {
    let mut pins = BTreeMap::new();
    for minor in lo..=hi {
        let target = Target::new(python(minor), Platform::LinuxAmd64);
        let found = exact_requires(text, &target)
            .map_err(|reason| TorchTableError::Metadata { file: file.to_owned(), reason })?;
        for (name, version) in found {
            let version = version.to_string();
            match pins.get(&name) {
                Some(v) if *v != version => {
                    warnings.push(format!(
                        "{file}: {name} is pinned to {v} and to {version} on Python 3.{minor}"
                    ));
                }
                Some(_) => {}
                None => {
                    pins.insert(name, version);
                }
            }
        }
    }
    Ok(pins)
}

/// The pin that says the build's CUDA: `cuda-toolkit` (CUDA 13 builds), else the CUDA runtime
/// wheel (`nvidia-cuda-runtime-cu12==12.8.90`, whose version is the CUDA release it ships).
fn cuda_pin(pins: &BTreeMap<String, String>) -> Option<(&String, &String)> {
    pins.get_key_value("cuda-toolkit").or_else(|| {
        pins.iter().find(|(n, _)| *n == "nvidia-cuda-runtime" || n.starts_with("nvidia-cuda-runtime-cu"))
    })
}

fn cuda_of(pins: &BTreeMap<String, String>) -> Option<String> {
    let (_, version) = cuda_pin(pins)?;
    let mut parts = version.split('.');
    Some(format!("{}.{}", parts.next()?, parts.next()?))
}

/// torch release -> (the companion release that pins it exactly, the metadata file), reading
/// the companion's releases newest first until one pins a torch older than `since`.
fn companions(
    index: &mut Index,
    project: &str,
    options: &Options,
) -> Result<BTreeMap<PackageVersion, (String, String)>, TorchTableError> {
    let files = index.files(project)?;
    let wheels = linux_wheels(project, &files);
    let mut by_version: BTreeMap<PackageVersion, Vec<&Wheel>> = BTreeMap::new();
    for w in &wheels {
        if w.version.local().is_empty() {
            by_version.entry(w.version.clone()).or_default().push(w);
        }
    }
    let mut out = BTreeMap::new();
    for (version, group) in by_version.iter().rev() {
        let Some(w) = representative(group) else { continue };
        let text = index.metadata(project, w.file)?;
        check_identity(&text, project, version, &w.file.filename)?;
        let Some(torch) = torch_pin(&text) else { continue };
        if torch < options.since {
            break;
        }
        // Newest first: a later companion of the same torch (0.15.2 after 0.15.1) wins.
        out.entry(torch).or_insert_with(|| (version.to_string(), w.file.filename.clone()));
    }
    Ok(out)
}

/// The exact `torch==X` of a `METADATA`, whatever its markers (none in practice).
fn torch_pin(text: &str) -> Option<PackageVersion> {
    text.lines()
        .filter_map(|l| l.split_once(':').filter(|(k, _)| k.trim().eq_ignore_ascii_case("Requires-Dist")))
        .filter_map(|(_, v)| Requirement::<pep508_rs::VerbatimUrl>::from_str(v.trim()).ok())
        .filter(|r| r.name.as_ref() == "torch")
        .find_map(|r| match r.version_or_url {
            Some(VersionOrUrl::VersionSpecifier(specs)) if specs.len() == 1 => {
                let spec = specs.iter().next()?;
                matches!(spec.operator(), pep440_rs::Operator::Equal | pep440_rs::Operator::ExactEqual)
                    .then(|| spec.version().clone())
            }
            _ => None,
        })
}

/// What [`apply`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// One line per changed field or added row.
    pub lines: Vec<String>,
}

/// Writes the generated rows into the table's text: the fields the index tells are set, rows
/// for new releases and builds added (in version order), everything else kept as it is,
/// comments included. With `known_only`, releases the table lacks are reported, not added.
pub fn apply(
    table_name: &str,
    text: &str,
    generated: &Generated,
    known_only: bool,
) -> Result<(String, Changes), TorchTableError> {
    let bad = |reason: String| TorchTableError::Table { table: table_name.to_owned(), reason };
    let mut doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| bad(e.to_string()))?;
    let releases = doc
        .get_mut("release")
        .and_then(Item::as_array_of_tables_mut)
        .ok_or_else(|| bad("expected [[release]] tables".into()))?;
    let mut rows: Vec<Table> = releases.iter().cloned().collect();
    let mut changes = Changes::default();
    for release in &generated.releases {
        let version = release.version.to_string();
        let at = rows.iter().position(|t| t.get("version").and_then(Item::as_str) == Some(version.as_str()));
        let row = if let Some(i) = at {
            &mut rows[i]
        } else {
            if !release.plain {
                changes.lines.push(format!("{version}: only builds of another index here; add the release from the package index first"));
                continue;
            }
            if known_only {
                changes
                    .lines
                    .push(format!("{version}: on the index, not in the table (not added: --known-only)"));
                continue;
            }
            changes.lines.push(format!("{version}: new release row"));
            let mut t = Table::new();
            t.insert("version", value(version.as_str()));
            t.insert("numpy", value(""));
            let pos = rows
                .iter()
                .position(|r| {
                    r.get("version")
                        .and_then(Item::as_str)
                        .and_then(|v| PackageVersion::from_str(v).ok())
                        .is_some_and(|v| v > release.version)
                })
                .unwrap_or(rows.len());
            rows.insert(pos, t);
            &mut rows[pos]
        };
        if !release.plain {
            apply_builds(row, release, &version, &mut changes).map_err(bad)?;
            continue;
        }
        let mut python: Array =
            [release.python.0.to_string(), release.python.1.to_string()].into_iter().collect();
        python.fmt();
        set(row, "python", Item::Value(python.into()), &version, &mut changes);
        let companion =
            |c: &Option<(String, String)>| c.as_ref().map_or_else(String::new, |(v, _)| v.clone());
        set(row, "torchvision", value(companion(&release.torchvision)), &version, &mut changes);
        set(row, "torchaudio", value(companion(&release.torchaudio)), &version, &mut changes);
        set(row, "source", value(release.source.as_str()), &version, &mut changes);
        apply_builds(row, release, &version, &mut changes).map_err(bad)?;
    }
    let releases = doc.get_mut("release").and_then(Item::as_array_of_tables_mut).expect("checked above");
    let mut fresh = ArrayOfTables::new();
    for t in rows {
        fresh.push(t);
    }
    *releases = fresh;
    Ok((doc.to_string(), changes))
}

fn apply_builds(
    row: &mut Table,
    release: &Release,
    version: &str,
    changes: &mut Changes,
) -> Result<(), String> {
    if !row.contains_key("variant") {
        row.insert("variant", Item::ArrayOfTables(ArrayOfTables::new()));
    }
    let variants = row
        .get_mut("variant")
        .and_then(Item::as_array_of_tables_mut)
        .ok_or_else(|| format!("release {version}: `variant` is not an array of tables"))?;
    for build in &release.builds {
        let at =
            variants.iter().position(|v| v.get("tag").and_then(Item::as_str) == Some(build.tag.as_str()));
        let where_ = format!("{version} {}", build.tag);
        let v = if let Some(i) = at {
            variants.get_mut(i).expect("position is in range")
        } else {
            changes.lines.push(format!("{where_}: new build row"));
            let mut t = Table::new();
            t.insert("tag", value(build.tag.as_str()));
            t.insert("cuda", value(""));
            t.insert("cudnn", value(""));
            t.insert("arch", Item::Value(Array::new().into()));
            t.insert("ptx", value(false));
            t.insert(
                "arch_source",
                value("not read yet: the build reads the architectures from the wheel's fat binaries"),
            );
            variants.push(t);
            variants.get_mut(variants.len() - 1).expect("just pushed")
        };
        set(v, "cuda", value(build.cuda.as_str()), &where_, changes);
        set(v, "cudnn", value(build.cudnn.as_str()), &where_, changes);
        if build.plain {
            set(v, "pypi", value(true), &where_, changes);
        }
        set(v, "source", value(build.source.as_str()), &where_, changes);
        if let Some(code) = &build.code {
            let list = |l: &[String]| {
                let mut a: Array = l.iter().map(String::as_str).collect();
                a.fmt();
                Item::Value(a.into())
            };
            set(v, "arch", list(&code.arch), &where_, changes);
            set(v, "ptx", value(code.ptx), &where_, changes);
            if build.plain && !code.aarch64.is_empty() {
                set(v, "aarch64_arch", list(&code.aarch64), &where_, changes);
            }
            set(v, "arch_source", value(code.source.as_str()), &where_, changes);
        }
        let mut pins = Table::new();
        for (name, pin) in &build.pins {
            pins.insert(name, value(pin.as_str()));
        }
        let old: BTreeMap<String, String> = v
            .get("pins")
            .and_then(Item::as_table_like)
            .map(|t| {
                t.iter().map(|(k, v)| (k.to_owned(), v.as_str().unwrap_or_default().to_owned())).collect()
            })
            .unwrap_or_default();
        if old != build.pins {
            changes.lines.push(format!("{where_}: pins {old:?} -> {:?}", build.pins));
            v.insert("pins", Item::Table(pins));
        }
    }
    // Only one build is the package index's plain wheel.
    if let Some(plain) = release.builds.iter().find(|b| b.plain) {
        for v in variants.iter_mut() {
            if v.get("tag").and_then(Item::as_str) != Some(plain.tag.as_str()) && v.contains_key("pypi") {
                changes.lines.push(format!("{version} {:?}: no longer the plain wheel", v.get("tag")));
                v.remove("pypi");
                v.remove("pins");
            }
        }
    }
    Ok(())
}

/// Sets `key` when its value differs (compared as rendered TOML), so an unchanged table keeps
/// its bytes.
fn set(table: &mut Table, key: &str, new: Item, row: &str, changes: &mut Changes) {
    let render = |i: &Item| i.as_value().map(canonical);
    let old = table.get(key).and_then(render);
    if old != render(&new) {
        changes.lines.push(format!(
            "{row}: {key} {} -> {}",
            old.as_deref().unwrap_or("(none)"),
            render(&new).unwrap_or_default()
        ));
        table.insert(key, new);
    }
}

/// Replaces the table file atomically (only a file [`apply`] parsed as a torch table is given
/// here).
pub fn write_table(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    stackbuild_common::write_atomic(path, text.as_bytes())
}

/// A value as TOML without its decoration (spaces, comments), arrays element by element.
fn canonical(v: &toml_edit::Value) -> String {
    match v {
        toml_edit::Value::Array(a) => format!("[{}]", a.iter().map(canonical).collect::<Vec<_>>().join(", ")),
        other => other.clone().decorated("", "").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The release versions a table lists (as a set: the order is checked apart).
    fn releases_in(text: &str) -> std::collections::BTreeSet<String> {
        text.parse::<DocumentMut>()
            .ok()
            .and_then(|d| {
                d.get("release").and_then(Item::as_array_of_tables).map(|a| {
                    a.iter()
                        .filter_map(|t| t.get("version").and_then(Item::as_str).map(str::to_owned))
                        .collect()
                })
            })
            .unwrap_or_default()
    }

    fn options() -> Options {
        Options {
            since: PackageVersion::from_str("2.0.0").unwrap(),
            index_name: "PyPI".into(),
            read_arch: None,
        }
    }

    const TORCH_META: &str = "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1\n\
        Requires-Dist: filelock\n\
        Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == \"Linux\" and platform_machine == \"x86_64\"\n\
        Requires-Dist: nvidia-cudnn-cu12==9.10.2.21; platform_system == \"Linux\" and platform_machine == \"x86_64\"\n\
        Requires-Dist: nvidia-foo-cu12==1.0; platform_machine == \"aarch64\"\n\
        Requires-Dist: triton==3.5.1; platform_system == \"Linux\" and platform_machine == \"x86_64\" and python_version < \"3.14\"\n\
        Requires-Dist: opt-einsum>=3.3; extra == \"opt-einsum\"\n";

    /// A recorded index of one torch release with a plain wheel and a `+cu129` build, a
    /// torchvision pinning it, an older one pinning a torch below `since`, and triton.
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let page = |name: &str, files: &[&str]| {
            let files: Vec<serde_json::Value> =
                files.iter().map(|f| serde_json::json!({"filename": f, "url": f, "hashes": {}})).collect();
            let text =
                serde_json::json!({"meta": {"api-version": "1.1"}, "name": name, "files": files}).to_string();
            std::fs::write(dir.path().join(format!("{name}.json")), text).unwrap();
        };
        page(
            "torch",
            &[
                "torch-2.9.1-cp310-cp310-manylinux_2_28_x86_64.whl",
                "torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl",
                "torch-2.9.1-cp314-cp314t-manylinux_2_28_x86_64.whl",
                "torch-2.9.1-cp311-cp311-manylinux_2_28_aarch64.whl",
                "torch-2.9.1+cu129-cp311-cp311-manylinux_2_28_x86_64.whl",
                "torch-1.13.1-cp310-cp310-manylinux1_x86_64.whl",
                "torch-2.10.0rc1-cp311-cp311-manylinux_2_28_x86_64.whl",
            ],
        );
        page(
            "torchvision",
            &[
                "torchvision-0.24.1-cp311-cp311-manylinux_2_28_x86_64.whl",
                "torchvision-0.14.1-cp310-cp310-manylinux1_x86_64.whl",
            ],
        );
        page("torchaudio", &["torchaudio-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl"]);
        page("triton", &["triton-3.5.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"]);
        let meta = dir.path().join("metadata");
        std::fs::create_dir(&meta).unwrap();
        let write =
            |file: &str, text: &str| std::fs::write(meta.join(format!("{file}.metadata")), text).unwrap();
        write("torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl", TORCH_META);
        write(
            "torch-2.9.1+cu129-cp311-cp311-manylinux_2_28_x86_64.whl",
            &TORCH_META
                .replace("Version: 2.9.1", "Version: 2.9.1+cu129")
                .replace("cuda-runtime-cu12==12.8.90", "cuda-runtime-cu12==12.9.79"),
        );
        write(
            "torchvision-0.24.1-cp311-cp311-manylinux_2_28_x86_64.whl",
            "Name: torchvision\nVersion: 0.24.1\nRequires-Dist: numpy\nRequires-Dist: torch==2.9.1\n",
        );
        write(
            "torchvision-0.14.1-cp310-cp310-manylinux1_x86_64.whl",
            "Name: torchvision\nVersion: 0.14.1\nRequires-Dist: torch (==1.13.1)\n",
        );
        write(
            "torchaudio-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "Name: torchaudio\nVersion: 2.11.0\n",
        );
        dir
    }

    #[test]
    fn rows_come_from_the_metadata() {
        let dir = fixture();
        let g = generate(&mut Index::recorded(dir.path()), &options()).unwrap();
        let [r] = g.releases.as_slice() else { panic!("{g:?}") };
        assert_eq!(r.version.to_string(), "2.9.1");
        assert_eq!((r.python.0.to_string(), r.python.1.to_string()), ("3.10".into(), "3.14".into()));
        assert_eq!(r.torchvision.as_ref().map(|t| t.0.as_str()), Some("0.24.1"));
        assert_eq!(r.torchaudio, None);
        let tags: Vec<(&str, bool, &str)> =
            r.builds.iter().map(|b| (b.tag.as_str(), b.plain, b.cuda.as_str())).collect();
        assert_eq!(tags, [("cu128", true, "12.8"), ("cu129", false, "12.9")]);
        let plain = &r.builds[0];
        assert_eq!(plain.cudnn, "9.10.2.21");
        // Markers are evaluated for Linux x86_64 and every Python of the range: the aarch64-only
        // pin is out, the triton pin (Python < 3.14) is in, extras are out.
        let names: Vec<&str> = plain.pins.keys().map(String::as_str).collect();
        assert_eq!(names, ["nvidia-cuda-runtime-cu12", "nvidia-cudnn-cu12", "triton"]);
        assert!(
            plain.source.contains("torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl.metadata"),
            "{}",
            plain.source
        );
        assert!(
            r.source.contains("torchvision-0.24.1-cp311-cp311-manylinux_2_28_x86_64.whl.metadata"),
            "{}",
            r.source
        );
        assert!(g.warnings.is_empty(), "{:?}", g.warnings);
    }

    #[test]
    fn a_metadata_file_that_is_not_the_wheel_is_refused() {
        let dir = fixture();
        let path = dir.path().join("metadata/torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl.metadata");
        std::fs::write(&path, TORCH_META.replace("Version: 2.9.1", "Version: 2.9.0")).unwrap();
        let err = generate(&mut Index::recorded(dir.path()), &options()).unwrap_err().to_string();
        assert!(err.contains("Version \"2.9.0\"") && err.contains("torch 2.9.1"), "{err}");
    }

    const TABLE: &str = "# hand comment\n\n[[release]]\nversion = \"2.9.1\"\npython = [\"3.10\", \"3.13\"]\n\
        torchvision = \"0.24.0\"\ntorchaudio = \"\"\nnumpy = \"\"\nnotes = \"kept\"\nsource = \"old\"\n\n\
        [[release.variant]]\ntag = \"cu126\"\ncuda = \"12.6\"\ncudnn = \"9.10.2.21\"\narch = [\"5.0\"]\nptx = false\n\
        source = \"hand row of another index\"\n\n\
        [[release.variant]]\ntag = \"cu128\"\ncuda = \"12.8\"\ncudnn = \"9.1.0.70\"\narch = [\"7.0\", \"12.0\"]\nptx = false\n\
        pypi = true\narch_source = \"fat binaries\"\nsource = \"old\"\n[release.variant.pins]\n\"triton\" = \"3.5.0\"\n";

    #[test]
    fn apply_sets_what_the_index_tells_and_keeps_the_rest() {
        let dir = fixture();
        let g = generate(&mut Index::recorded(dir.path()), &options()).unwrap();
        let (text, changes) = apply("torch.toml", TABLE, &g, false).unwrap();
        assert!(text.starts_with("# hand comment"), "{text}");
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        let r = &parsed["release"][0];
        assert_eq!(r["python"].as_array().unwrap()[1].as_str(), Some("3.14"));
        assert_eq!(r["torchvision"].as_str(), Some("0.24.1"));
        assert_eq!(r["notes"].as_str(), Some("kept"));
        let v = r["variant"].as_array().unwrap();
        assert_eq!(v[0]["source"].as_str(), Some("hand row of another index"));
        assert_eq!(v[1]["cudnn"].as_str(), Some("9.10.2.21"));
        assert_eq!(v[1]["arch"].as_array().unwrap().len(), 2, "arch is the table's");
        assert_eq!(v[1]["arch_source"].as_str(), Some("fat binaries"));
        assert_eq!(v[1]["pins"]["triton"].as_str(), Some("3.5.1"));
        assert_eq!(v[2]["tag"].as_str(), Some("cu129"));
        assert!(v[2]["arch"].as_array().unwrap().is_empty());
        assert!(v[2].get("pypi").is_none());
        assert!(!changes.lines.is_empty());
        // Applying again changes nothing: the table is a fixed point of its generator.
        let (again, changes) = apply("torch.toml", &text, &g, false).unwrap();
        assert_eq!(again, text);
        assert!(changes.lines.is_empty(), "{changes:?}");
    }

    #[test]
    fn a_per_cuda_index_adds_its_builds_and_leaves_the_row_alone() {
        let dir = fixture();
        // Only the +cu129 files: what PyTorch's cu129 index holds.
        let torch = dir.path().join("torch.json");
        let page = std::fs::read_to_string(&torch).unwrap();
        let mut page: serde_json::Value = serde_json::from_str(&page).unwrap();
        page["files"].as_array_mut().unwrap().retain(|f| f["filename"].as_str().unwrap().contains("+cu129"));
        std::fs::write(&torch, page.to_string()).unwrap();
        let options = Options { index_name: "PyTorch's cu129 index".into(), ..options() };
        let g = generate(&mut Index::recorded(dir.path()), &options).unwrap();
        assert!(!g.releases[0].plain);
        let (text, _) = apply("torch.toml", TABLE, &g, false).unwrap();
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        let r = &parsed["release"][0];
        assert_eq!(
            r["python"].as_array().unwrap()[1].as_str(),
            Some("3.13"),
            "the package index's view stays"
        );
        assert_eq!(r["source"].as_str(), Some("old"));
        let v = r["variant"].as_array().unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[1]["pypi"].as_bool(), Some(true), "the plain build stays the plain build");
        assert_eq!(v[2]["tag"].as_str(), Some("cu129"));
        assert!(v[2]["source"].as_str().unwrap().starts_with("PyTorch's cu129 index torch-2.9.1+cu129-"));
        // A release the table lacks is not started from another index's builds.
        let (same, changes) = apply("torch.toml", "[[release]]\nversion = \"2.0.0\"\n", &g, false).unwrap();
        assert_eq!(same, "[[release]]\nversion = \"2.0.0\"\n");
        assert!(changes.lines[0].contains("only builds of another index"), "{changes:?}");
    }

    #[test]
    fn new_releases_go_in_version_order_unless_known_only() {
        let dir = fixture();
        let g = generate(&mut Index::recorded(dir.path()), &options()).unwrap();
        let table = "[[release]]\nversion = \"2.10.0\"\npython = [\"3.10\", \"3.14\"]\ntorchvision = \"\"\n\
            torchaudio = \"\"\nnumpy = \"\"\nsource = \"x\"\n\n[[release.variant]]\ntag = \"cu128\"\n";
        let (text, _) = apply("t", table, &g, false).unwrap();
        let order: Vec<String> = releases_in(&text).into_iter().collect();
        assert_eq!(order, ["2.10.0", "2.9.1"]);
        assert!(text.find("2.9.1").unwrap() < text.find("2.10.0").unwrap(), "{text}");
        let (same, changes) = apply("t", table, &g, true).unwrap();
        assert_eq!(same, table);
        assert_eq!(changes.lines, ["2.9.1: on the index, not in the table (not added: --known-only)"]);
    }
}
