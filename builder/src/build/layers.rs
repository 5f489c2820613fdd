//! Builds the layers above the base, each found in the cache by a key computed from its inputs
//! before anything is fetched or staged: one per Python package group, the sources with the
//! patches that target them, and the configuration layer (stack description, SBOM, package
//! patches).

// Every step returns the build's one error type, as the rest of `build` does; its size is
// that type's concern (clippy's `result_large_err`), not each step's.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};
use stackcontract::image::{Component, StackManifest, STACK_JSON_PATH};

use super::plan::{fetch_batch, python_layers, PythonLayer, PythonPlan, Wheel, WheelKey};
use super::platform::{LayerFinisher, PlatformBuilder};
use super::{debian_arch, io, reuse, tempdir, BuildError, LayerReport};
use stackbuild_cache::LayerKey;
use stackbuild_common::Compression;
use stackbuild_common::LayerBlob;
use stackbuild_common::Platform;
use stackbuild_image::{Encoding, LayerWriter};
use stackbuild_python::Artifact;
use stackbuild_python::{BytecodeKey, InstallKey, Scheme};
use stackbuild_recipe::{Patch, PatchChange, PatchTarget, SourceOrigin};
use stackbuild_source::PatchSpec;

/// The inputs of a Python layer: its key ([`PlatformBuilder::python_layer_key`]). The layer's
/// name is not one: it names the layer in the report, and the same wheels make the same bytes
/// whatever the layer is called.
#[derive(Debug, serde::Serialize)]
struct PythonLayerKey<'a> {
    /// The wheels, in install order (a later wheel's file replaces an earlier one's).
    members: Vec<WheelKey<'a>>,
    /// Where each part of a wheel goes, and the interpreter its launchers name.
    scheme: &'a Scheme,
    /// How the installer lays a wheel out (`INSTALLER`, which members stay deflated).
    install: InstallKey,
    /// What compiles the bytecode into the layer; `None`: no bytecode.
    bytecode: Option<BytecodeKey>,
    /// Every mtime, and the compiler's `SOURCE_DATE_EPOCH`.
    epoch: u64,
    /// How the entries become the blob.
    encoding: Encoding,
}

impl<'a> PythonLayerKey<'a> {
    const KIND: &'static str = "python-layer";

    fn new(
        layer: &'a PythonLayer<'a>,
        scheme: &'a Scheme,
        bytecode: Option<BytecodeKey>,
        epoch: u64,
        compression: Compression,
    ) -> Self {
        Self {
            members: layer.members.iter().map(|w| WheelKey::of(w)).collect(),
            scheme,
            install: InstallKey::current(),
            bytecode,
            epoch,
            encoding: Encoding::of(compression),
        }
    }
}

/// The inputs of the sources layer: its key ([`PlatformBuilder::sources_key`]).
#[derive(Debug, serde::Serialize)]
struct SourcesKey<'a> {
    /// Each source, in the recipe's order.
    sources: Vec<SourceKey<'a>>,
    /// The patches on the sources, in the recipe's order (each applies to what the ones before
    /// left).
    patches: Vec<PatchKey>,
    /// Every mtime.
    epoch: u64,
    /// How the entries become the blob.
    encoding: Encoding,
}

impl SourcesKey<'_> {
    const KIND: &'static str = "sources";
}

/// A source as the sources layer's key has it.
#[derive(Debug, serde::Serialize)]
struct SourceKey<'a> {
    /// Its name, by which patches name it (with `dest`: where each patch applies).
    name: &'a str,
    /// Where it goes in the image.
    dest: &'a str,
    /// What it holds: `tree:<sha256>` of a local directory's copy, or `git:<url>@<commit>`.
    identity: &'a str,
}

/// A patch as a key has it. Not its name: that names it in messages and the stack description
/// (whose digest the configuration layer's key has), and changes no file it patches.
#[derive(Debug, serde::Serialize)]
struct PatchKey {
    /// What it patches: `source NAME` or `package NAME`.
    target: String,
    /// What it changes ([`patch_identity`]).
    change: String,
}

/// The keys of `patches`, in order.
fn patch_keys<'a>(patches: impl Iterator<Item = &'a Patch>) -> Result<Vec<PatchKey>, BuildError> {
    patches
        .map(|p| {
            let target = match &p.target {
                PatchTarget::Package(n) => format!("package {n}"),
                PatchTarget::Source(s) => format!("source {s}"),
            };
            Ok(PatchKey { target, change: patch_identity(&p.change)? })
        })
        .collect()
}

/// The inputs of the configuration layer: its key ([`PlatformBuilder::config_layer`]).
#[derive(Debug, serde::Serialize)]
struct ConfigKey<'a> {
    /// The hex sha256 of the stack description as the layer holds it.
    stack_json: String,
    /// What the SPDX and `CycloneDX` SBOMs the layer holds are made of
    /// ([`stackbuild_image::Sbom::key`]): written only when the layer is built or handed out.
    sbom: String,
    /// The package patches, in order: the patched files are the layer's.
    patches: Vec<PatchKey>,
    /// Where the patched packages' files go (`None`: no `[python]`).
    scheme: Option<&'a Scheme>,
    /// How a patched package is installed before it is patched.
    install: InstallKey,
    /// What compiles the patched modules; `None`: no bytecode.
    bytecode: Option<BytecodeKey>,
    /// Every mtime, and the compiler's `SOURCE_DATE_EPOCH`.
    epoch: u64,
    /// How the entries become the blob.
    encoding: Encoding,
}

impl ConfigKey<'_> {
    const KIND: &'static str = "config";
}

/// `bytes`' sha256, hex.
fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The history entry of a Python layer: what it holds.
fn python_created_by(layer: &PythonLayer<'_>) -> String {
    let names = layer.members.iter().map(|w| w.pin.to_string()).collect::<Vec<_>>().join(" ");
    format!("stackbuild: {}: {names}", layer.describe)
}

impl PlatformBuilder<'_> {
    /// The layers of the locked wheels ([`python_layers`]), in layer order; then the wheels'
    /// components of the stack description.
    pub(super) fn python_layers(&mut self, py: &PythonPlan<'_>) -> Result<(), BuildError> {
        if let Some(scheme) = &py.scheme {
            let planned: Vec<(PythonLayer<'_>, LayerKey)> = python_layers(&py.wheels)
                .into_iter()
                .map(|layer| {
                    let key = self.python_layer_key(py, scheme, &layer);
                    (layer, key)
                })
                .collect();
            let reused: Vec<Option<LayerBlob>> =
                planned.iter().map(|(_, key)| reuse(self.cache, key, self.out, self.opts)).collect();
            self.write_python_layers(py, scheme, &planned, reused)?;
        }
        let python = py.python;
        self.components.extend(py.wheels.iter().map(|w| Component {
            kind: "wheel".into(),
            name: w.pin.name.to_string(),
            version: w.pin.version.to_string(),
            source: if python.is_some_and(|p| p.wheels.iter().any(|l| l.name == w.pin.name)) {
                "recipe wheel".into()
            } else {
                python
                    .and_then(|p| p.index.clone())
                    .map_or_else(|| "python package index".into(), |_| "recipe index".into())
            },
            sha256: w.sha256.clone(),
        }));
        Ok(())
    }

    /// The cache key of a Python layer, from its inputs alone ([`PythonLayerKey`]).
    pub(super) fn python_layer_key(
        &self,
        py: &PythonPlan<'_>,
        scheme: &Scheme,
        layer: &PythonLayer<'_>,
    ) -> LayerKey {
        let inputs = PythonLayerKey::new(layer, scheme, py.bytecode.key(), self.epoch, self.compression);
        LayerKey::of(PythonLayerKey::KIND, &inputs)
    }

    /// Writes the Python layers, pushed in order: reused ones from the cache; the others are
    /// fetched on one thread, layer by layer, and each is staged, compiled and written whole by
    /// the first free worker of [`layer_workers`], so that the downloads, the installs, the
    /// bytecode and the writing of several layers overlap.
    ///
    /// Workers, not a pipeline of one thread per step: the steps' costs are uneven across
    /// layers, so a pipeline is as slow as its slowest step on each layer. The CUDA, cuDNN and
    /// torch layers are almost all writing (each large member inflated once, on one thread: a
    /// deflate stream cannot be split), a package such as `sympy` is almost all compiling (one
    /// interpreter per top-level entry, so one process for the whole package); one of each at
    /// once keeps both cores busy. On `recipes/dreamzero.toml` on the 2-core VM, the pipeline
    /// left a core idle a third of the build (`perf`: 18% of samples idle, whole seconds at a
    /// time while one large member inflated or one package compiled).
    /// Each layer's bytes depend on its inputs alone, never on which worker wrote it or when.
    fn write_python_layers(
        &mut self,
        py: &PythonPlan<'_>,
        scheme: &Scheme,
        planned: &[(PythonLayer<'_>, LayerKey)],
        reused: Vec<Option<LayerBlob>>,
    ) -> Result<(), BuildError> {
        let to_build: Vec<&(PythonLayer<'_>, LayerKey)> =
            planned.iter().zip(&reused).filter(|(_, hit)| hit.is_none()).map(|(p, _)| p).collect();
        let (fetcher, cache, epoch, finisher) = (py.fetcher(), self.cache, self.epoch, self.finisher());
        let bytecode = &py.bytecode;
        let torch = py.torch();
        let to_build = &to_build;
        std::thread::scope(|scope| {
            // The downloads stay one layer ahead of the workers.
            let (fetched_tx, fetched_rx) = std::sync::mpsc::sync_channel(1);
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            scope.spawn(move || {
                let mut batch_end = 0;
                for (i, (layer, _)) in to_build.iter().enumerate() {
                    if i == batch_end {
                        batch_end = fetch_batch(to_build[i..].iter().map(|(l, _)| l)) + i;
                        // Into the run's memo of verified wheels; an error comes again below,
                        // for the layer it belongs to.
                        let all: Vec<&Wheel> = to_build[i..batch_end]
                            .iter()
                            .flat_map(|(l, _)| l.members.iter().copied())
                            .collect();
                        let _ = fetcher.fetch(cache, &all);
                    }
                    let wheels = fetcher.fetch(cache, &layer.members);
                    let has_torch = wheels.is_ok()
                        && torch.is_some_and(|t| layer.members.iter().any(|m| std::ptr::eq(*m, t)));
                    if fetched_tx.send((i, wheels)).is_err() {
                        return;
                    }
                    // The torch wheel is here now: its fat binaries are read (seconds of
                    // inflating) while the layers are written, not after them.
                    if has_torch {
                        py.torch_code(cache);
                    }
                }
            });
            // Shared by the workers; gone (and the downloads stopped) when the last one stops.
            let fetched_rx = std::sync::Arc::new(std::sync::Mutex::new(fetched_rx));
            for _ in 0..layer_workers(to_build.len()) {
                let (fetched_rx, done_tx) = (fetched_rx.clone(), done_tx.clone());
                scope.spawn(move || {
                    // The interpreter's copy of the base is unpacked while the first wheels
                    // download; an error comes again, with its layer, when that layer compiles.
                    let _ = bytecode.prepare();
                    loop {
                        let next =
                            fetched_rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).recv();
                        let Ok((i, wheels)) = next else { return };
                        let (layer, key) = to_build[i];
                        let written = wheels.and_then(|artifacts| {
                            let staged =
                                stage_python_layer(bytecode, scheme, layer, key, &artifacts, cache, epoch)?;
                            write_staged(finisher, key, staged)
                        });
                        // The receiver is gone when the build stopped at an earlier layer's error.
                        if done_tx.send((i, written)).is_err() {
                            return;
                        }
                    }
                });
            }
            drop((fetched_rx, done_tx));
            // The workers' layers, kept until their turn comes.
            let mut early = BTreeMap::new();
            let mut next = 0;
            for ((layer, key), hit) in planned.iter().zip(reused) {
                let created_by = python_created_by(layer);
                if let Some(blob) = hit {
                    // Written in this run beside the builds (`ahead`), or by an earlier build.
                    let ahead = self.ahead.remove(key.as_hex());
                    self.push(&layer.name, created_by, blob, ahead.is_some());
                    self.note_bytecode(bytecode, key, ahead.flatten());
                    continue;
                }
                let written = loop {
                    if let Some(w) = early.remove(&next) {
                        break w;
                    }
                    let (i, w) = done_rx.recv().map_err(|_| {
                        BuildError::Unsupported(
                            "the layer workers stopped before every layer was written".into(),
                        )
                    })?;
                    early.insert(i, w);
                };
                next += 1;
                let written: Written = written?;
                // Removed when the platform's image is assembled, not now: see `spent_stages`.
                self.spent_stages.push(written.stage);
                self.set_spooled(written.spooled);
                self.push(&layer.name, created_by, written.blob, true);
                self.note_bytecode(bytecode, key, written.added);
            }
            Ok::<(), BuildError>(())
        })
    }

    /// The sources, with the patches that target them: one layer, when the recipe has sources.
    /// Local directories are digested in place first ([`stackbuild_source::digest_path_excluding`]) and
    /// staged only when no layer has that key, so an unchanged checkout copies nothing.
    pub(super) fn sources_layer(&mut self) -> Result<(), BuildError> {
        let (recipe, cache, out, opts) = (self.recipe, self.cache, self.out, self.opts);
        if recipe.sources.is_empty() {
            return Ok(());
        }
        // Each source: its local directory (a path source, or any source given `--source`), or
        // its git identity.
        let local =
            |src: &stackbuild_recipe::Source| match (opts.source_overrides.get(&src.name), &src.origin) {
                (Some(path), _) | (None, SourceOrigin::Path { path }) => Ok(path.clone()),
                (None, SourceOrigin::Git { url, commit }) => Err(format!("git:{url}@{commit}")),
            };
        let source_error = |src: &stackbuild_recipe::Source| {
            let name = src.name.clone();
            move |source| BuildError::Source { name, source }
        };
        let mut identities = Vec::with_capacity(recipe.sources.len());
        for src in &recipe.sources {
            identities.push(match local(src) {
                // The cache and the output never go into the image, even with `path = "."`.
                Ok(path) => {
                    let found = stackbuild_source::digest_path_excluding(&path, &[cache.root(), out])
                        .map_err(source_error(src))?;
                    format!("tree:{}", found.tree_sha256)
                }
                Err(git) => git,
            });
        }
        let key = self.sources_key(&identities)?;
        if let Some(blob) = reuse(cache, &key, out, opts) {
            self.note_sources(&identities);
            self.push("sources", "stackbuild: sources".into(), blob, false);
            return Ok(());
        }
        // Staged, then keyed by the copy: what the layer holds is what was digested.
        let stage = tempdir(cache)?;
        for (src, identity) in recipe.sources.iter().zip(&mut identities) {
            if let Ok(path) = local(src) {
                let staged = stackbuild_source::stage_path_excluding(
                    &path,
                    &src.dest,
                    stage.path(),
                    &[cache.root(), out],
                )
                .map_err(source_error(src))?;
                *identity = format!("tree:{}", staged.tree_sha256);
            }
        }
        self.note_sources(&identities);
        let key = self.sources_key(&identities)?;
        if let Some(blob) = reuse(cache, &key, out, opts) {
            self.push("sources", "stackbuild: sources".into(), blob, false);
            return Ok(());
        }
        let staged_all = recipe.sources.iter().all(|s| local(s).is_ok());
        if !staged_all {
            for src in recipe.sources.iter().filter(|s| !opts.source_overrides.contains_key(&s.name)) {
                if let SourceOrigin::Git { url, commit } = &src.origin {
                    stackbuild_source::stage_git(
                        url,
                        commit,
                        &src.dest,
                        stage.path(),
                        &cache.root().join("git"),
                    )
                    .map_err(|source| BuildError::Source { name: src.name.clone(), source })?;
                }
            }
        }
        for p in &recipe.patches {
            let PatchTarget::Source(name) = &p.target else { continue };
            let src = recipe.sources.iter().find(|s| &s.name == name).ok_or_else(|| {
                BuildError::PatchSourceMissing { patch: p.name.clone(), source_name: name.clone() }
            })?;
            let root = stage.path().join(src.dest.trim_start_matches('/'));
            let report = stackbuild_source::apply(&p.name, &patch_spec(&p.change)?, &root)?;
            tracing::info!("patch {}: {} change(s) in {}", p.name, report.changes, report.files.join(", "));
        }
        let mut writer = LayerWriter::new(cache, self.epoch);
        writer.add_dir(stage.path(), "")?;
        let blob = self.finish_layer(writer)?;
        cache.put_layer(&key, &blob)?;
        self.push("sources", "stackbuild: sources".into(), blob, true);
        Ok(())
    }

    /// The sources' components of the stack description.
    fn note_sources(&mut self, identities: &[String]) {
        for (src, identity) in self.recipe.sources.iter().zip(identities) {
            self.components.push(Component {
                kind: "source".into(),
                name: src.name.clone(),
                version: identity.clone(),
                source: match &src.origin {
                    SourceOrigin::Git { url, .. } if !self.opts.source_overrides.contains_key(&src.name) => {
                        url.clone()
                    }
                    _ => "local directory".into(),
                },
                sha256: String::new(),
            });
        }
    }

    /// The sources layer's key ([`SourcesKey`]): each source's name, place and identity, the
    /// patches on them.
    fn sources_key(&self, identities: &[String]) -> Result<LayerKey, BuildError> {
        let inputs = SourcesKey {
            sources: self
                .recipe
                .sources
                .iter()
                .zip(identities)
                .map(|(src, identity)| SourceKey { name: &src.name, dest: &src.dest, identity })
                .collect(),
            patches: patch_keys(
                self.recipe.patches.iter().filter(|p| matches!(p.target, PatchTarget::Source(_))),
            )?,
            epoch: self.epoch,
            encoding: Encoding::of(self.compression),
        };
        Ok(LayerKey::of(SourcesKey::KIND, &inputs))
    }

    /// The stack description: every component so far and the patches, and the host
    /// requirements derived from the locked packages.
    pub(super) fn stack_manifest(&mut self, py: &PythonPlan<'_>) -> Result<StackManifest, BuildError> {
        let (recipe, platform, cache, wheels) = (self.recipe, self.platform, self.cache, &py.wheels);
        let packages: Vec<stackbuild_check::Package<'_>> = wheels
            .iter()
            .map(|w| stackbuild_check::Package {
                name: w.pin.name.as_ref(),
                version: &w.pin.version,
                platform,
            })
            .collect();
        // The torch build's architectures from its own fat binaries, else the knowledge base's row.
        let torch_code = py.torch_code(cache).cloned().or_else(|| stackbuild_check::torch_code(&packages));
        // The GPU code of the wheels built from source (CUDA extensions), from their own fat
        // binaries: the image runs only where torch and each of them have code.
        let mut extensions = Vec::new();
        for w in wheels.iter().filter(|w| py.built.iter().any(|b| b == w.pin.name.as_ref())) {
            match stackbuild_check::extension_code_for_build(cache.root(), &w.filename, &w.sha256) {
                Ok(Some(code)) => {
                    tracing::info!("{} {}: built for {}", w.pin.name, w.pin.version, code.describe());
                    extensions.push(stackbuild_check::Extension {
                        name: w.pin.name.as_ref(),
                        version: &w.pin.version,
                        code,
                    });
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    "{}: its GPU code cannot be read ({e}); the contract leaves it out",
                    w.filename
                ),
            }
        }
        let requirements = stackbuild_check::requirements_with_extensions(
            &packages,
            &recipe.host,
            torch_code.as_ref(),
            &extensions,
        );
        for p in &recipe.patches {
            self.components.push(Component {
                kind: "patch".into(),
                name: p.name.clone(),
                version: String::new(),
                source: match &p.target {
                    PatchTarget::Package(n) => format!("package {n}"),
                    PatchTarget::Source(s) => format!("source {s}"),
                },
                sha256: patch_identity(&p.change)?,
            });
        }
        Ok(StackManifest {
            schema: 1,
            image: format!("{}:{}", recipe.image.name, recipe.image.tag),
            platform: platform.as_str().to_owned(),
            components: std::mem::take(&mut self.components),
            requirements,
        })
    }

    /// The last layer: the stack description, the SBOM and the package patches. Returns the
    /// SBOM it holds, when it was written: the layer was built, or `--sbom` or `--push` hand the
    /// documents out (a reused layer needs only their key).
    pub(super) fn config_layer(
        &mut self,
        py: &PythonPlan<'_>,
        stack: &StackManifest,
    ) -> Result<Option<stackbuild_image::Sbom>, BuildError> {
        let (recipe, platform, cache, out, opts, epoch, compression) =
            (self.recipe, self.platform, self.cache, self.out, self.opts, self.epoch, self.compression);
        let bytecode = &py.bytecode;
        let mut stack_json =
            serde_json::to_vec_pretty(stack).map_err(|e| BuildError::Unsupported(e.to_string()))?;
        stack_json.push(b'\n');
        let package_patches: Vec<&Patch> =
            recipe.patches.iter().filter(|p| matches!(p.target, PatchTarget::Package(_))).collect();
        let placed: BTreeMap<String, String> = python_layers(&py.wheels)
            .into_iter()
            .flat_map(|l| l.members.into_iter().map(move |w| (w.pin.name.to_string(), l.name.clone())))
            .collect();
        let sbom_input = SbomPlan::new(stack, &self.layers, &placed, platform, epoch);
        let inputs = ConfigKey {
            stack_json: sha256_hex(&stack_json),
            sbom: sbom_input.with(stackbuild_image::Sbom::key),
            patches: patch_keys(package_patches.iter().copied())?,
            scheme: py.scheme.as_ref(),
            install: InstallKey::current(),
            bytecode: bytecode.key(),
            epoch,
            encoding: Encoding::of(compression),
        };
        let key = LayerKey::of(ConfigKey::KIND, &inputs);
        if let Some(blob) = reuse(cache, &key, out, opts) {
            self.push("config", "stackbuild: patches and configuration".into(), blob, false);
            self.note_bytecode(bytecode, &key, None);
            let wanted = opts.sbom_dir.is_some() || opts.push.is_some();
            return Ok(wanted.then(|| sbom_input.with(stackbuild_image::Sbom::new)));
        }
        let sbom = sbom_input.with(stackbuild_image::Sbom::new);
        let mut writer = LayerWriter::new(cache, epoch);
        writer.add_file(STACK_JSON_PATH, stack_json.clone(), 0o644)?;
        writer.add_file(stackbuild_image::SPDX_PATH, sbom.spdx.clone(), 0o644)?;
        writer.add_file(stackbuild_image::CYCLONEDX_PATH, sbom.cyclonedx.clone(), 0o644)?;
        // The writer reads file contents in `finish`: the stage must outlive it.
        let stage = tempdir(cache)?;
        let mut added = None;
        if !package_patches.is_empty() {
            let Some(scheme) = &py.scheme else {
                return Err(BuildError::Unsupported("package patches need a [python] section".into()));
            };
            self.stage_package_patches(py, scheme, &package_patches, stage.path())?;
            // The patched modules' own bytecode, over the earlier layer's stale one.
            added = bytecode.compile(stage.path(), scheme, epoch, &key)?;
            writer.add_dir(stage.path(), "")?;
        }
        let blob = self.finish_layer(writer)?;
        cache.put_layer(&key, &blob)?;
        self.push("config", "stackbuild: patches and configuration".into(), blob, true);
        self.note_bytecode(bytecode, &key, added);
        Ok(Some(sbom))
    }

    /// Installs each package a patch targets into a scratch directory, applies the patch there
    /// and copies the files it changed into `stage` (at their place under site-packages).
    fn stage_package_patches(
        &self,
        py: &PythonPlan<'_>,
        scheme: &Scheme,
        package_patches: &[&Patch],
        stage: &Path,
    ) -> Result<(), BuildError> {
        let cache = self.cache;
        let targets: Vec<&Wheel> = py
            .wheels
            .iter()
            .filter(|w| {
                package_patches
                    .iter()
                    .any(|p| matches!(&p.target, PatchTarget::Package(n) if *n == w.pin.name))
            })
            .collect();
        let artifacts = py.fetcher().fetch(cache, &targets)?;
        for p in package_patches {
            let PatchTarget::Package(name) = &p.target else { continue };
            let artifact = artifacts.get(name.as_ref()).ok_or_else(|| BuildError::PatchTargetMissing {
                patch: p.name.clone(),
                package: name.to_string(),
            })?;
            let pristine = tempdir(cache)?;
            stackbuild_python::install_wheel_as(
                &artifact.path,
                scheme,
                pristine.path(),
                artifact.name.as_ref(),
                &artifact.version.to_string(),
            )
            .map_err(|source| BuildError::Wheel {
                wheel: artifact.filename.clone(),
                source: Box::new(source),
            })?;
            let site_rel = scheme.purelib.trim_start_matches('/');
            let site = pristine.path().join(site_rel);
            let report = stackbuild_source::apply(&p.name, &patch_spec(&p.change)?, &site)?;
            tracing::info!("patch {}: {} change(s) in {}", p.name, report.changes, report.files.join(", "));
            for file in &report.files {
                let from = site.join(file);
                let to = stage.join(site_rel).join(file);
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
                }
                if from.exists() {
                    std::fs::copy(&from, &to).map_err(io("copying", &from))?;
                }
            }
        }
        Ok(())
    }
}

/// The SBOM of one platform's image: the layers built so far by digest, then the configuration
/// layer that will hold it; each component placed in the layer that holds it (a wheel in the
/// Python layer `wheel_layers` names for it: [`python_layers`]).
/// The inputs of one platform's SBOM: the layers it lists and where each component is.
struct SbomPlan<'a> {
    stack: &'a StackManifest,
    layers: Vec<stackbuild_image::SbomLayer>,
    placement: Vec<usize>,
    platform: Platform,
    epoch: u64,
}

impl<'a> SbomPlan<'a> {
    fn new(
        stack: &'a StackManifest,
        layers: &[(LayerReport, LayerBlob, String)],
        wheel_layers: &BTreeMap<String, String>,
        platform: Platform,
        epoch: u64,
    ) -> Self {
        let mut list: Vec<stackbuild_image::SbomLayer> = layers
            .iter()
            .map(|(r, _, _)| stackbuild_image::SbomLayer {
                name: r.name.clone(),
                digest: Some(r.digest.clone()),
            })
            .collect();
        let config = list.len();
        list.push(stackbuild_image::SbomLayer { name: "config".into(), digest: None });
        let find = |name: &str| list.iter().position(|l| l.name == name).unwrap_or(config);
        let placement: Vec<usize> = stack
            .components
            .iter()
            .map(|c| match c.kind.as_str() {
                "base" | "deb" => find("base"),
                "wheel" => wheel_layers.get(&c.name).map_or(config, |l| find(l)),
                "source" => find("sources"),
                "patch" if c.source.starts_with("source ") => find("sources"),
                _ => config,
            })
            .collect();
        Self { stack, layers: list, placement, platform, epoch }
    }

    /// `f` (the documents, or their key) of this plan.
    fn with<T>(&self, f: impl FnOnce(&stackbuild_image::SbomInput<'_>) -> T) -> T {
        f(&stackbuild_image::SbomInput {
            stack: self.stack,
            layers: &self.layers,
            placement: &self.placement,
            deb_arch: debian_arch(self.platform),
            epoch: self.epoch,
        })
    }
}

fn patch_spec(change: &PatchChange) -> Result<PatchSpec, BuildError> {
    Ok(match change {
        PatchChange::Replace { file, find, replace, count } => PatchSpec::FindReplace {
            file: file.to_string_lossy().into_owned(),
            find: find.clone(),
            replace: replace.clone(),
            count: *count as usize,
        },
        PatchChange::Diff { path } => PatchSpec::Diff {
            diff_text: stackbuild_common::read_text(path, stackbuild_common::MAX_TEXT, "patch")?,
            diff_path: path.clone(),
        },
    })
}

/// A digest of what a patch does, for cache keys and the stack description.
fn patch_identity(change: &PatchChange) -> Result<String, BuildError> {
    let mut h = Sha256::new();
    match change {
        PatchChange::Replace { file, find, replace, count } => {
            for part in
                [file.to_string_lossy().as_bytes(), find.as_bytes(), replace.as_bytes(), &count.to_le_bytes()]
            {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part);
            }
        }
        PatchChange::Diff { path } => {
            h.update(stackbuild_common::read_capped(path, stackbuild_common::MAX_TEXT, "patch")?);
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// A Python layer's files, installed and compiled, waiting to be written.
pub(super) struct Staged {
    stage: tempfile::TempDir,
    /// The wheels' large members, left in the wheels for the layer to carry as they are.
    deferred: stackbuild_python::Deferred,
    /// The bytecode compiled into the stage.
    added: Option<stackbuild_python::Added>,
}

/// A Python layer a worker wrote, waiting for its turn to be pushed.
pub(super) struct Written {
    blob: LayerBlob,
    /// `--load`: the layer's tar, for the daemon.
    spooled: Option<stackbuild_image::SpooledTar>,
    /// Kept until the image is assembled (`PlatformBuilder::spent_stages`).
    pub(super) stage: tempfile::TempDir,
    pub(super) added: Option<stackbuild_python::Added>,
}

/// Most layers written at once. Each writer compresses on every core already
/// ([`stackbuild_image::LayerWriter`]); more of them than cores only adds memory (each holds its
/// compressor's chunks and the audit's queue).
const MAX_LAYER_WORKERS: usize = 4;

/// How many layers are staged and written at once: one per core, at most
/// [`MAX_LAYER_WORKERS`], at most one per layer to build (none when every layer is reused: a
/// worker first readies the compiler, which a rebuild without changes must not pay for).
fn layer_workers(layers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    cores.min(MAX_LAYER_WORKERS).min(layers)
}

/// Writes a staged Python layer: the stage's files and the wheels' deferred members; records
/// it in the cache under `key`.
pub(super) fn write_staged(
    finisher: LayerFinisher<'_>,
    key: &LayerKey,
    staged: Staged,
) -> Result<Written, BuildError> {
    let mut writer = LayerWriter::new(finisher.cache(), finisher.epoch());
    writer.add_dir(staged.stage.path(), "")?;
    for (path, member, mode) in staged.deferred.into_members() {
        writer.add_zip_member(&path, member, mode)?;
    }
    let (blob, spooled) = finisher.finish(writer)?;
    finisher.cache().put_layer(key, &blob)?;
    Ok(Written { blob, spooled, stage: staged.stage, added: staged.added })
}

/// Installs a Python layer's fetched wheels into a new stage (their large members deferred)
/// and compiles their bytecode there.
pub(super) fn stage_python_layer(
    bytecode: &stackbuild_python::Plan<'_>,
    scheme: &Scheme,
    layer: &PythonLayer<'_>,
    key: &LayerKey,
    artifacts: &BTreeMap<String, Artifact>,
    cache: &stackbuild_cache::Cache,
    epoch: u64,
) -> Result<Staged, BuildError> {
    let stage = tempdir(cache)?;
    let mut deferred = stackbuild_python::Deferred::default();
    for w in &layer.members {
        let artifact = artifacts
            .get(w.pin.name.as_ref())
            .ok_or_else(|| BuildError::Unsupported(format!("wheel {} was not fetched", w.filename)))?;
        // The lock's name and version, checked against the wheel's METADATA: stack.json
        // records the lock's, so the wheel must be that package.
        let version = w.pin.version.to_string();
        stackbuild_python::install_wheel_deferring(
            &artifact.path,
            scheme,
            stage.path(),
            (w.pin.name.as_ref(), &version),
            &mut deferred,
        )
        .map_err(|source| BuildError::Wheel { wheel: w.filename.clone(), source: Box::new(source) })?;
    }
    let added = bytecode.compile(stage.path(), scheme, epoch, key)?;
    Ok(Staged { stage, deferred, added })
}

#[cfg(test)]
mod tests {
    use std::str::FromStr as _;

    use super::*;

    fn wheel(name: &str, sha: &str) -> Wheel {
        Wheel {
            pin: stackbuild_python::Pinned {
                name: pep508_rs::PackageName::from_str(name).unwrap(),
                version: "1.0".parse().unwrap(),
                hashes: Vec::new(),
            },
            filename: format!("{name}-1.0-py3-none-any.whl"),
            sha256: sha.repeat(32),
            size: 1 << 20,
            lock_size: 1 << 20,
            commit: None,
            source: None,
            build: (Vec::new(), Vec::new()),
        }
    }

    fn patch(name: &str, target: PatchTarget) -> Patch {
        Patch {
            name: name.into(),
            target,
            change: PatchChange::Replace {
                file: "six.py".into(),
                find: "__version__ = \"1.16.0\"".into(),
                replace: "__version__ = \"1.16.0+patched\"".into(),
                count: 1,
            },
        }
    }

    /// A bytecode plan that compiles, with the `diff_id` of a stand-in base.
    fn bytecode_key() -> BytecodeKey {
        let dir = tempfile::tempdir().unwrap();
        let cache = stackbuild_cache::Cache::open(dir.path()).unwrap();
        let (base, facts, section) = stackbuild_python::stand_in(dir.path());
        stackbuild_python::Plan::new(Some(&section), &facts, Some(&base), &cache).key().unwrap()
    }

    fn scheme() -> Scheme {
        Scheme::debian_local(&"3.11".parse().unwrap())
    }

    #[test]
    fn every_input_of_a_python_layer_is_part_of_its_key() {
        let wheels = [wheel("six", "aa"), wheel("tomli", "bb")];
        let layer =
            PythonLayer { name: "python".into(), describe: String::new(), members: wheels.iter().collect() };
        let scheme = scheme();
        let inputs = PythonLayerKey::new(&layer, &scheme, Some(bytecode_key()), 0, Compression::Gzip);
        let changed = stackbuild_cache::assert_every_input_changes_key(
            PythonLayerKey::KIND,
            &inputs,
            &["members", "scheme", "install", "bytecode", "epoch", "encoding"],
        );
        for path in [
            "members[1].sha256",
            "members[0].filename",
            "scheme.platlib",
            "scheme.interpreter",
            "install.defer_min",
            "install.revision",
            "bytecode",
            "bytecode.base",
            "bytecode.run.driver",
            "encoding.codec.members.member.gzip.level",
            "encoding.codec.members.chunk",
            "encoding.writer_revision",
        ] {
            assert!(changed.iter().any(|p| p == path), "{path} not checked: {changed:?}");
        }
        // Without bytecode, with another compression: other keys.
        let key = LayerKey::of(PythonLayerKey::KIND, &inputs);
        let none = PythonLayerKey::new(&layer, &scheme, None, 0, Compression::Gzip);
        assert_ne!(LayerKey::of(PythonLayerKey::KIND, &none), key);
        let zstd = PythonLayerKey::new(&layer, &scheme, Some(bytecode_key()), 0, Compression::Zstd);
        assert_ne!(LayerKey::of(PythonLayerKey::KIND, &zstd), key);
    }

    #[test]
    fn every_input_of_the_sources_layer_is_part_of_its_key() {
        let patches = [patch("model-fix", PatchTarget::Source("model".into()))];
        let tree = format!("tree:{}", "cd".repeat(32));
        let inputs = SourcesKey {
            sources: vec![
                SourceKey { name: "model", dest: "/workspace/model", identity: "git:file:///repo@0123abc" },
                SourceKey { name: "data", dest: "/data", identity: &tree },
            ],
            patches: patch_keys(patches.iter()).unwrap(),
            epoch: 1_700_000_000,
            encoding: Encoding::of(Compression::Estargz),
        };
        let changed = stackbuild_cache::assert_every_input_changes_key(
            SourcesKey::KIND,
            &inputs,
            &["sources", "patches", "epoch", "encoding"],
        );
        for path in [
            "sources[0].identity",
            "sources[1].dest",
            "patches[0].target",
            "patches[0].change",
            "encoding.toc",
        ] {
            assert!(changed.iter().any(|p| p == path), "{path} not checked: {changed:?}");
        }
    }

    #[test]
    fn every_input_of_the_config_layer_is_part_of_its_key() {
        let patches =
            [patch("six-version", PatchTarget::Package(pep508_rs::PackageName::from_str("six").unwrap()))];
        let scheme = scheme();
        let inputs = ConfigKey {
            stack_json: sha256_hex(b"{\"schema\":1}\n"),
            sbom: sha256_hex(b"sbom inputs"),
            patches: patch_keys(patches.iter()).unwrap(),
            scheme: Some(&scheme),
            install: InstallKey::current(),
            bytecode: Some(bytecode_key()),
            epoch: 0,
            encoding: Encoding::of(Compression::ZstdChunked),
        };
        let changed = stackbuild_cache::assert_every_input_changes_key(
            ConfigKey::KIND,
            &inputs,
            &["stack_json", "sbom", "patches", "scheme", "install", "bytecode", "epoch", "encoding"],
        );
        for path in ["stack_json", "sbom", "patches[0].change", "scheme", "scheme.purelib", "bytecode.python"]
        {
            assert!(changed.iter().any(|p| p == path), "{path} not checked: {changed:?}");
        }
    }
}
