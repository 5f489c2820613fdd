//! What the rules look at: the recipe's own requirements for the target, the stack's packages
//! (locked, resolved, or predicted), and the torch build with its exact requirements.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pep440_rs::Operator;
use pep508_rs::{Requirement, VersionOrUrl};
use serde::Serialize;
use stackcontract::kb;
use stackcontract::version::{PackageSpecifiers, PackageVersion};

use super::TorchBuild;
use crate::derive;
pub(crate) use crate::derive::{component_version, library_component};
use stackbuild_common::Platform;
use stackbuild_python::Lock;
use stackbuild_python::{Pinned, Target};
use stackbuild_recipe::Recipe;

/// Largest `METADATA` read from a wheel (torch's is about 30 KiB).
const METADATA_CAP: u64 = 4 << 20;

/// Where a package of the stack comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// The lock file.
    Lock,
    /// A fresh resolution.
    Resolved,
    /// Predicted: the recipe pins it exactly.
    RecipePin,
    /// Predicted: the torch wheel requires it exactly.
    TorchRequirement,
}

/// One Python package of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackPackage {
    /// Normalized name.
    pub name: String,
    /// Version.
    pub version: PackageVersion,
    /// Where it comes from.
    pub origin: Origin,
    /// For a CUDA library wheel (`nvidia-*-cu12`): the CUDA release it belongs to (`12.1`),
    /// where its version tells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
}

impl StackPackage {
    fn new(name: &str, version: PackageVersion, origin: Origin) -> Self {
        let cuda = library_cuda(name, &version).map(|(major, minor)| format!("{major}.{minor}"));
        Self { name: name.to_owned(), version, origin, cuda }
    }
}

/// A requirement of the recipe's `[python]` section that applies to the target.
#[derive(Debug, Clone)]
pub(crate) struct RecipeReq {
    /// Normalized name.
    pub name: String,
    /// Its version specifiers (empty for a URL requirement).
    pub specs: PackageSpecifiers,
    /// `packages` or `constraints`.
    pub section: &'static str,
}

impl RecipeReq {
    /// The exact version, when pinned with `==` (no wildcard) or `===`.
    pub(super) fn exact(&self) -> Option<PackageVersion> {
        self.specs
            .iter()
            .find(|s| matches!(s.operator(), Operator::Equal | Operator::ExactEqual))
            .map(|s| s.version().clone())
    }

    /// `` `numpy>=2` in [python] packages ``: the requirement as the recipe states it.
    pub(super) fn describe(&self) -> String {
        format!("`{}{}` in [python] {}", self.name, self.specs, self.section)
    }
}

/// The torch of a stack and what its wheel requires.
#[derive(Debug, Clone)]
pub(crate) struct TorchFacts {
    /// Its version, with the local tag if any (`2.1.0+cu124`).
    pub version: PackageVersion,
    /// The knowledge base's release row.
    pub release: Option<&'static kb::TorchRelease>,
    /// The build: the local tag's, or the plain wheel on the package index; `None` when the
    /// knowledge base does not know it.
    pub variant: Option<&'static kb::TorchVariant>,
    /// Exact requirements of the wheel (`nvidia-cudnn-cu12` -> `8.9.2.26`).
    pub requires: BTreeMap<String, PackageVersion>,
    /// Where `requires` comes from, in words; `None` when nothing is known.
    pub requires_from: Option<Requires>,
    /// torch is the recipe's own `[[python.wheel]]`: an artifact in hand, published whatever the
    /// tables say.
    pub user_wheel: bool,
}

/// Where torch's exact requirements were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Requires {
    /// The `Requires-Dist` of a wheel file at hand.
    Wheel(String),
    /// The knowledge base's row (its source).
    Kb(String),
}

impl Requires {
    /// In a message: "the Requires-Dist of torch-2.1.0-....whl" or "per the knowledge base".
    pub(super) fn short(&self) -> String {
        match self {
            Self::Wheel(file) => format!("Requires-Dist of {file}"),
            Self::Kb(_) => "its wheel's Requires-Dist, per the knowledge base".into(),
        }
    }
}

impl TorchFacts {
    /// The knowledge base's view of torch `version` for `target`. The table's pins are those
    /// of the Linux `x86_64` wheel; before torch 2.11 their markers name `x86_64`, so `aarch64`
    /// gets them only for builds that publish an `aarch64` CUDA wheel (from torch 2.11, whose
    /// markers say only `platform_system == "Linux"`).
    fn new(version: PackageVersion, target: &Target) -> Self {
        let release = kb::torch_release(&version);
        let variant = release.and_then(|r| derive::torch_build(r, &version, target.platform));
        let pins_apply =
            |v: &kb::TorchVariant| target.platform == Platform::LinuxAmd64 || !v.aarch64_arch.is_empty();
        let (requires, requires_from) = match variant {
            Some(v) if !v.pins.is_empty() && pins_apply(v) => {
                let pins = v
                    .pins
                    .iter()
                    .filter_map(|(n, ver)| Some((n.clone(), PackageVersion::from_str(ver).ok()?)))
                    .collect();
                (pins, Some(Requires::Kb(v.source.clone())))
            }
            _ => (BTreeMap::new(), None),
        };
        Self { version, release, variant, requires, requires_from, user_wheel: false }
    }

    /// The requirements of the wheel at `wheel`, over the table's; a wheel that cannot be read
    /// leaves the table's, with a warning.
    fn read_wheel(&mut self, wheel: &Path, target: &Target) {
        match wheel_requires(wheel, target) {
            Ok(requires) => {
                self.requires = requires;
                let file = wheel.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned());
                self.requires_from = Some(Requires::Wheel(file));
            }
            Err(why) => {
                tracing::warn!("reading {}: {why}; using the knowledge base instead", wheel.display());
            }
        }
    }

    /// `torch 2.1.0+cu121`: the version with the build's tag, as messages name it.
    pub(super) fn display(&self) -> String {
        match self.variant {
            Some(v) if local_tag(&self.version).is_empty() => format!("torch {}+{}", self.version, v.tag),
            _ => format!("torch {}", self.version),
        }
    }

    /// The release without local tag (`2.1.0`).
    pub(super) fn base_version(&self) -> PackageVersion {
        self.version.clone().without_local()
    }

    /// The cuDNN wheel the build requires and its version: the exact requirement, else the
    /// knowledge base's build row.
    pub(super) fn cudnn(&self) -> Option<(String, PackageVersion, String)> {
        if let Some((name, version)) = self.requires.iter().find(|(n, _)| n.starts_with("nvidia-cudnn-cu")) {
            let from = self.requires_from.as_ref().map_or_else(String::new, Requires::short);
            return Some((name.clone(), version.clone(), from));
        }
        let v = self.variant?;
        let version = PackageVersion::from_str(&v.cudnn).ok()?;
        Some((format!("nvidia-cudnn-cu{}", v.cuda.part(0)), version, "per the knowledge base".into()))
    }

    /// The build's GPU code per the knowledge base, for `platform`.
    pub(super) fn code(&self, platform: Platform) -> Option<crate::gpu_code::GpuCode> {
        crate::gpu_code::GpuCode::from_variant(self.release?, self.variant?, platform)
    }

    pub(super) fn describe(&self, platform: Platform) -> TorchBuild {
        let code = self.code(platform);
        TorchBuild {
            version: self.version.to_string(),
            variant: self.variant.map(|v| v.tag.clone()),
            cuda: self.variant.map(|v| v.cuda.to_string()),
            cudnn: self.cudnn().map(|(_, v, _)| v.to_string()),
            arch: code
                .as_ref()
                .map(|c| c.cubins.iter().map(ToString::to_string).collect())
                .unwrap_or_default(),
            ptx: code.as_ref().is_some_and(|c| !c.ptx.is_empty()),
            runs_on: code.as_ref().map(|c| c.arch_set().describe()),
            requires_from: self.requires_from.as_ref().map(|r| match r {
                Requires::Wheel(file) => format!("Requires-Dist of {file}"),
                Requires::Kb(source) => format!("knowledge base: {source}"),
            }),
        }
    }
}

/// The local version tag (`cu121`), empty when there is none.
pub(crate) fn local_tag(version: &PackageVersion) -> String {
    version.local().iter().map(ToString::to_string).collect::<Vec<_>>().join(".")
}

/// Everything the rules know about one platform's stack.
#[derive(Debug, Clone)]
pub(crate) struct Facts<'r> {
    /// The recipe.
    pub recipe: &'r Recipe,
    /// The platform.
    pub platform: Platform,
    /// The recipe's requirements that apply to the target.
    pub reqs: Vec<RecipeReq>,
    /// The stack's packages, sorted by name.
    pub packages: Vec<StackPackage>,
    /// The torch of the stack.
    pub torch: Option<TorchFacts>,
}

impl<'r> Facts<'r> {
    /// A recipe without `[python]`.
    pub(super) fn without_python(recipe: &'r Recipe, platform: Platform) -> Self {
        Self { recipe, platform, reqs: Vec::new(), packages: Vec::new(), torch: None }
    }

    /// The packages the lock pins for the target's platform; torch's requirements from its
    /// wheel when the cache has it.
    pub(super) fn from_lock(
        recipe: &'r Recipe,
        target: &Target,
        lock: &Lock,
        artifacts: Option<&Path>,
    ) -> Self {
        let packages: Vec<StackPackage> = lock
            .packages_for(target.platform)
            .map(|p| StackPackage::new(p.name.as_ref(), p.version.clone(), Origin::Lock))
            .collect();
        let wheel = lock
            .packages_for(target.platform)
            .find(|p| p.name.as_ref() == "torch")
            .and_then(|p| artifacts.map(|dir| dir.join(&p.sha256).join(&p.filename)))
            .filter(|p| p.is_file());
        Self::resolved(recipe, target, packages, wheel)
    }

    /// The packages of a fresh resolution; torch's requirements from its wheel when the cache
    /// has one of its files for the target.
    pub(super) fn from_pins(
        recipe: &'r Recipe,
        target: &Target,
        pins: &[Pinned],
        artifacts: Option<&Path>,
    ) -> Self {
        let packages: Vec<StackPackage> = pins
            .iter()
            .map(|p| StackPackage::new(p.name.as_ref(), p.version.clone(), Origin::Resolved))
            .collect();
        let wheel = pins
            .iter()
            .find(|p| p.name.as_ref() == "torch")
            .and_then(|p| artifacts.and_then(|dir| find_cached_wheel(dir, p, target)));
        Self::resolved(recipe, target, packages, wheel)
    }

    fn resolved(
        recipe: &'r Recipe,
        target: &Target,
        mut packages: Vec<StackPackage>,
        wheel: Option<PathBuf>,
    ) -> Self {
        packages.sort_by(|a, b| a.name.cmp(&b.name));
        let mut torch =
            packages.iter().find(|p| p.name == "torch").map(|p| TorchFacts::new(p.version.clone(), target));
        if let Some(torch) = &mut torch {
            torch.user_wheel = user_wheel(recipe, target, "torch").is_some();
            if let Some(wheel) = wheel {
                torch.read_wheel(&wheel, target);
            }
        }
        Self { recipe, platform: target.platform, reqs: recipe_reqs(recipe, target), packages, torch }
    }

    /// Without a resolution: torch from the recipe's exact pin, its exact requirements from
    /// the knowledge base, and every exact pin of the recipe over them.
    pub(super) fn predicted(recipe: &'r Recipe, target: &Target) -> Self {
        let reqs = recipe_reqs(recipe, target);
        let exact = |name: &str| reqs.iter().filter(|r| r.name == name).find_map(RecipeReq::exact);
        let mut torch = exact("torch").map(|v| TorchFacts::new(v, target));
        // The recipe's own torch wheel is at hand: its Requires-Dist, not a table's row.
        if let (Some(t), Some(wheel)) = (&mut torch, user_wheel(recipe, target, "torch")) {
            t.user_wheel = true;
            t.read_wheel(&wheel.path, target);
        }
        let mut by_name: BTreeMap<String, StackPackage> = BTreeMap::new();
        if let Some(t) = &torch {
            by_name.insert("torch".into(), StackPackage::new("torch", t.version.clone(), Origin::RecipePin));
            for (name, version) in &t.requires {
                by_name
                    .insert(name.clone(), StackPackage::new(name, version.clone(), Origin::TorchRequirement));
            }
        }
        for r in &reqs {
            if let Some(version) = r.exact() {
                by_name.insert(r.name.clone(), StackPackage::new(&r.name, version, Origin::RecipePin));
            }
        }
        Self { recipe, platform: target.platform, reqs, packages: by_name.into_values().collect(), torch }
    }

    /// A package of the stack.
    pub(super) fn package(&self, name: &str) -> Option<&StackPackage> {
        self.packages.iter().find(|p| p.name == name)
    }

    /// The recipe's requirements on `name`.
    pub(super) fn reqs_for<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a RecipeReq> + 'a {
        self.reqs.iter().filter(move |r| r.name == name)
    }

    /// The recipe's exact pin of `name`.
    pub(super) fn exact_pin(&self, name: &str) -> Option<&RecipeReq> {
        self.reqs.iter().find(|r| r.name == name && r.exact().is_some())
    }

    /// The stack in [`derive`]'s terms.
    pub(super) fn derive_packages(&self) -> Vec<derive::Package<'_>> {
        self.packages
            .iter()
            .map(|p| derive::Package { name: &p.name, version: &p.version, platform: self.platform })
            .collect()
    }

    /// How a message names a package of the stack: name, version and where it comes from
    /// (`nvidia-cudnn-cu12 8.9.7.29 (pinned: `nvidia-cudnn-cu12==8.9.7.29` in [python] packages)`).
    pub(super) fn named(&self, p: &StackPackage) -> String {
        let pinned = self.exact_pin(&p.name).filter(|r| r.exact().as_ref() == Some(&p.version));
        let how = match (pinned, p.origin) {
            (Some(pin), _) => format!("pinned: {}", pin.describe()),
            (None, Origin::Lock) => "locked".into(),
            (None, Origin::Resolved) => match self.reqs_for(&p.name).next() {
                Some(req) => format!("resolved from {}", req.describe()),
                None => "resolved".into(),
            },
            (None, Origin::RecipePin) => "pinned by the recipe".into(),
            (None, Origin::TorchRequirement) => "required by torch".into(),
        };
        format!("{} {} ({how})", p.name, p.version)
    }
}

/// The recipe's own `[[python.wheel]]` of package `name` for the target's platform.
fn user_wheel<'r>(
    recipe: &'r Recipe,
    target: &Target,
    name: &str,
) -> Option<&'r stackbuild_recipe::LocalWheel> {
    let python = recipe.python.as_ref()?;
    python.wheels.iter().find(|w| w.fits(target.platform) && w.name.as_ref() == name)
}

/// The recipe's `[python]` packages and constraints whose markers hold for the target.
fn recipe_reqs(recipe: &Recipe, target: &Target) -> Vec<RecipeReq> {
    let Some(python) = &recipe.python else { return Vec::new() };
    let env = target.marker_env();
    let sections = [("packages", &python.packages), ("constraints", &python.constraints)];
    let mut out = Vec::new();
    for (section, list) in sections {
        for req in list {
            if env.as_ref().is_some_and(|env| !req.evaluate_markers(env, &[])) {
                continue;
            }
            let specs = match &req.version_or_url {
                Some(VersionOrUrl::VersionSpecifier(s)) => s.clone(),
                _ => PackageSpecifiers::empty(),
            };
            out.push(RecipeReq { name: req.name.to_string(), specs, section });
        }
    }
    // A recipe's own wheel pins its package to the version its file name gives.
    for wheel in python.wheels.iter().filter(|w| w.fits(target.platform)) {
        if let Ok(specs) = PackageSpecifiers::from_str(&format!("=={}", wheel.version)) {
            out.push(RecipeReq { name: wheel.name.to_string(), specs, section: "wheel" });
        }
    }
    out
}

/// A wheel of `pin` for `target` in the artifact directory (`<dir>/<sha256>/<file>`), if one
/// was fetched before. The directory is named by the content and fetch verified it when it
/// stored it, so it is not hashed again here (a torch wheel is 2 GB).
fn find_cached_wheel(dir: &Path, pin: &Pinned, target: &Target) -> Option<PathBuf> {
    let python_tag = target.python_tag();
    for hash in &pin.hashes {
        let Ok(entries) = std::fs::read_dir(dir.join(hash)) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let filename = entry.file_name().to_string_lossy().into_owned();
            let Some(wheel) = stackbuild_common::parse_wheel_name(&filename) else { continue };
            let fits_python = wheel.python.iter().any(|p| *p == python_tag || p == "py3");
            let fits_platform =
                wheel.platform.iter().any(|p| p == "any" || p.ends_with(target.platform.machine()));
            if wheel.name == pin.name && wheel.version == pin.version && fits_python && fits_platform {
                return Some(entry.path());
            }
        }
    }
    None
}

/// The exact requirements (`name==version`) of a wheel's `METADATA` that apply to `target`
/// (markers evaluated, no extras).
pub(crate) fn wheel_requires(
    wheel: &Path,
    target: &Target,
) -> Result<BTreeMap<String, PackageVersion>, String> {
    let file = std::fs::File::open(wheel).map_err(|e| e.to_string())?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| e.to_string())?;
    let (name, text) = stackbuild_python::dist_info_metadata(&mut archive, METADATA_CAP)?;
    exact_requires(&text, target).map_err(|e| format!("{name}: {e}"))
}

/// The exact requirements (`name==version`) of a `METADATA` text that apply to `target`
/// (markers evaluated, no extras).
pub(crate) fn exact_requires(
    text: &str,
    target: &Target,
) -> Result<BTreeMap<String, PackageVersion>, String> {
    let env = target.marker_env();
    let mut out = BTreeMap::new();
    for value in requires_dist(text) {
        let req = Requirement::<pep508_rs::VerbatimUrl>::from_str(&value)
            .map_err(|e| format!("Requires-Dist {value:?}: {e}"))?;
        if env.as_ref().is_some_and(|env| !req.evaluate_markers(env, &[])) {
            continue;
        }
        if let Some(VersionOrUrl::VersionSpecifier(specs)) = &req.version_or_url {
            if let [spec] = &specs[..] {
                if matches!(spec.operator(), Operator::Equal | Operator::ExactEqual) {
                    out.insert(req.name.to_string(), spec.version().clone());
                }
            }
        }
    }
    Ok(out)
}

/// The `Requires-Dist` values of a `METADATA` file (email headers up to the first blank line;
/// continuation lines start with whitespace).
fn requires_dist(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut in_requires = false;
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if in_requires {
                if let Some(last) = out.last_mut() {
                    last.push(' ');
                    last.push_str(line.trim());
                }
            }
            continue;
        }
        in_requires = false;
        if let Some((key, value)) = line.split_once(':') {
            if key.trim().eq_ignore_ascii_case("Requires-Dist") {
                out.push(value.trim().to_owned());
                in_requires = true;
            }
        }
    }
    out
}

/// The CUDA release (`major`, `minor`) a CUDA library wheel (`nvidia-*-cu12`, or the
/// suffix-less `nvidia-*` of CUDA 13) belongs to, where its version tells
/// ([`derive::library_release`]).
pub(crate) fn library_cuda(name: &str, version: &PackageVersion) -> Option<(u64, u64)> {
    derive::library_release(name, version).map(|c| c.major_minor())
}
