//! `stackbuild [build] RECIPE`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::bail;
use stackbuild::build::{build, BuildOptions, LayerSource};
use stackbuild_common::Compression;
use stackbuild_recipe::Recipe;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The recipe (TOML).
    recipe: Option<PathBuf>,
    /// Where to write the OCI image layout [default: images/<name>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write an archive that `docker load`, `podman load` and skopeo accept.
    #[arg(long, value_name = "FILE")]
    archive: Option<PathBuf>,
    /// Load the image into the local Docker daemon and tag it `name:tag`.
    #[arg(long)]
    load: bool,
    /// Skip the library audit (static ldd) that runs before the image is written.
    #[arg(long)]
    no_audit: bool,
    /// Push the image to a registry: `--push 127.0.0.1:5000/dreamzero:tag`.
    #[arg(long, value_name = "REF")]
    push: Option<String>,
    /// A registry host to reach over plain HTTP (loopback always is); repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST")]
    insecure_registries: Vec<String>,
    /// Fail when the lock file is missing or stale instead of resolving again.
    #[arg(long)]
    locked: bool,
    /// Cache directory [default: `$STACKBUILD_CACHE`, else `~/.cache/stackbuild`, for root
    /// `/var/cache/stackbuild`].
    #[arg(long, env = "STACKBUILD_CACHE")]
    cache_dir: Option<PathBuf>,
    /// Layer compression: gzip, zstd, estargz or zstd:chunked (gzip or zstd that the stargz
    /// snapshotter mounts lazily) or none.
    #[arg(long, default_value = "gzip")]
    compression: Compression,
    /// Use a local directory instead of a recipe source: `--source dreamzero=../dreamzero`.
    #[arg(long = "source", value_name = "NAME=PATH")]
    sources: Vec<String>,
    /// Write the build report (layers built or reused, the stack) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Also write the image's SBOM (SPDX 2.3 and `CycloneDX` 1.6 JSON, as in `/etc/stackbuild/`) here.
    #[arg(long, value_name = "DIR")]
    sbom: Option<PathBuf>,
    /// Share layers through a registry repository: each layer missing from the local cache is
    /// pulled from it when there, and each layer built is pushed to it (loopback and
    /// --insecure-registry hosts over plain HTTP).
    #[arg(long, value_name = "HOST[:PORT]/REPO", env = "STACKBUILD_CACHE_REGISTRY")]
    cache_registry: Option<String>,
    /// Also write the image's Python stack as a PEP 751 lock (`pylock.toml`) for uv and pip,
    /// as `stackbuild lock --pylock` does.
    #[arg(long, value_name = "FILE")]
    pylock: Option<PathBuf>,
}

impl Args {
    pub(super) fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let Some(path) = self.recipe else { bail!("no recipe given; usage: stackbuild RECIPE (see --help)") };
        if let Some(file) = &self.report {
            // Before the build, not after it: a report path that is not ours to write fails fast.
            stackbuild_image::check_output_file("--report", file)?;
        }
        if let Some(file) = &self.pylock {
            stackbuild_python::may_write(file)?;
        }
        let recipe = Recipe::load(&path)?;
        let source_overrides = source_overrides(&recipe, &self.sources)?;
        let opts = BuildOptions {
            out: self.out,
            archive: self.archive,
            load: self.load,
            audit: !self.no_audit,
            push: self.push,
            insecure_registries: self.insecure_registries,
            locked: self.locked,
            cache_dir: self.cache_dir,
            compression: self.compression,
            source_overrides,
            sbom_dir: self.sbom,
            cache_registry: self.cache_registry,
        };
        let report = build(&recipe, &opts)?;
        if let Some(file) = &self.report {
            stackbuild_image::write_file("--report", file, &serde_json::to_vec_pretty(&report)?)?;
        }
        if let Some(file) = &self.pylock {
            let lock = stackbuild_python::Lock::load(stackbuild_python::Lock::path_for(&recipe.path))?;
            stackbuild_python::write_from_index(&recipe, &lock, file)?;
            tracing::info!("wrote {}", file.display());
        }
        let built = report.layers.iter().filter(|l| l.built).count();
        let pulled = report.layers.iter().filter(|l| l.source == LayerSource::Registry).count();
        let pulled = if pulled > 0 { format!(", {pulled} pulled") } else { String::new() };
        tracing::info!(
            "{} -> {} ({} layers, {built} built{pulled}, {:.2}s)",
            report.reference,
            report.layout.display(),
            report.layers.len(),
            report.seconds
        );
        println!("{}", report.manifest_digest);
        Ok(std::process::ExitCode::SUCCESS)
    }
}

/// `--source NAME=PATH` arguments, each naming a source of the recipe.
pub(super) fn source_overrides(
    recipe: &Recipe,
    given: &[String],
) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let mut overrides = BTreeMap::new();
    for s in given {
        let Some((name, dir)) = s.split_once('=') else { bail!("--source {s:?}: expected NAME=PATH") };
        if !recipe.sources.iter().any(|r| r.name == name) {
            bail!("--source {s:?}: the recipe has no source named {name:?}");
        }
        overrides.insert(name.to_owned(), PathBuf::from(dir));
    }
    Ok(overrides)
}
