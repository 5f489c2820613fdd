//! Packages the resolution took from source whose build imports torch (flash-attn and the other
//! CUDA extensions, `stackbuild_python::torch_at_build`): the recipe builds them against the
//! image's torch, as their READMEs' `pip install --no-build-isolation` does, with the build
//! helpers their `setup.py` imports and, where their `PKG-INFO` is not static, its dependencies
//! as the metadata the lock cannot prepare before torch is resolved.

use std::fmt::Write as _;
use std::path::Path;

use stackbuild_python::TorchAtBuild;

use super::{Found, Plan};

/// The largest `setup.py` read.
const MAX_SCRIPT: u64 = 1 << 20;

/// The project itself, installed as a wheel, when its `setup.py` imports torch (detectron2,
/// `GroundingDINO`: their install guides say to install torch first; mamba's build system
/// requires torch, and its README says `--no-build-isolation`): it is built against the image's
/// torch, and torch is one of the image's packages even where the project's own requirements
/// leave it out.
pub(super) fn project(dir: &Path, found: &mut Found) {
    if found.project_wheel.is_none() {
        return;
    }
    let setup_path = dir.join("setup.py");
    let Ok(setup) = stackbuild_common::read_text(&setup_path, MAX_SCRIPT, "setup.py") else { return };
    let Some(build_requires) = stackbuild_python::build_against_torch(&setup) else { return };
    let name = setup_name(&setup)
        .or_else(|| found.name.as_ref().map(|(n, _)| n.clone()))
        .or_else(|| std::fs::canonicalize(dir).ok()?.file_name().map(|n| n.to_string_lossy().into_owned()));
    let Some(name) = name.map(|n| stackbuild_python::normalize_name(&n)) else { return };
    if !found.packages.iter().any(|(_, n, _)| stackbuild_python::normalize_name(n) == "torch") {
        found.packages.push(("torch".to_owned(), "torch".to_owned(), setup_path.display().to_string()));
        found.decide(format!(
            "{}: imports torch to build, and nothing lists torch: torch is added to the image's packages",
            setup_path.display()
        ));
    }
    let force_build = stackbuild_python::force_build_variable(&setup);
    found.torch_project =
        Some(TorchAtBuild { name, version: String::new(), build_requires, requires: None, force_build });
}

/// The name a `setup(...)` call passes: a literal (`name="detectron2"`), or a variable the
/// script assigns a literal to (flash-attention's `name=PACKAGE_NAME`).
pub(super) fn setup_name(setup: &str) -> Option<String> {
    let call = &setup[setup.find("setup(")?..];
    let at = call.find("name")?;
    let rest = call[at + 4..].trim_start().strip_prefix('=')?.trim_start();
    if let Some(value) = quoted(rest) {
        return Some(value);
    }
    let variable: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    if variable.is_empty() {
        return None;
    }
    setup.lines().find_map(|line| {
        let value = line.strip_prefix(variable.as_str())?.trim_start().strip_prefix('=')?.trim_start();
        quoted(value)
    })
}

/// The string literal `text` starts with, when it is a plain project name.
fn quoted(text: &str) -> Option<String> {
    let quote = text.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = &text[1..=text[1..].find(quote)?];
    let valid =
        !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    valid.then(|| value.to_owned())
}

impl Plan {
    /// `pkg` builds against the image's torch: said, and written in `[python.build]`.
    pub fn build_against_torch(&mut self, pkg: TorchAtBuild) {
        if pkg.version.is_empty() {
            // The project itself (`project`), said when it was found.
            self.decisions.push(format!(
                "the project ({}) builds against the image's torch: its setup.py imports torch ([python.build] \
                 no_isolation, as `pip install --no-build-isolation .`: an isolated build compiles against another \
                 torch, or none), with {} in its build environment",
                pkg.name,
                pkg.build_requires.join(", ")
            ));
            self.torch_builds.push(pkg);
            return;
        }
        let name = stackbuild_python::normalize_name(&pkg.name);
        if self.torch_builds.iter().any(|b| stackbuild_python::normalize_name(&b.name) == name) {
            return;
        }
        self.decisions.push(format!(
            "{name} {}: no wheel, and its setup.py imports torch: built against the image's torch \
             ([python.build] no_isolation, as its `pip install --no-build-isolation`: an isolated build compiles \
             against another torch, or none), with {} in its build environment{}{}",
            pkg.version,
            pkg.build_requires.join(", "),
            if pkg.requires.is_some() {
                "; its dependencies as its PKG-INFO says (dependency_metadata: its metadata cannot be prepared \
                 before torch is resolved)"
            } else {
                ""
            },
            pkg.force_build.as_ref().map_or_else(String::new, |var| format!(
                "; {var} = \"TRUE\" ([python.build.env]): compiled, not downloaded from the project's releases"
            ))
        ));
        self.torch_builds.push(TorchAtBuild { name, ..pkg });
    }

    /// `[python.build]` for the packages built against torch, or nothing.
    pub(super) fn render_build(&self, out: &mut String) {
        if self.torch_builds.is_empty() {
            return;
        }
        let q = |s: &str| toml::Value::String(s.to_owned()).to_string();
        let list =
            |items: &[String]| format!("[{}]", items.iter().map(|s| q(s)).collect::<Vec<_>>().join(", "));
        let names: Vec<String> = self.torch_builds.iter().map(|b| b.name.clone()).collect();
        // (The project's own build needs no metadata given: the lock prepares it with torch.)
        out.push_str(
            "\n[python.build]\n# Their setup.py imports torch: built against the image's torch, as their READMEs'\n\
             # `pip install --no-build-isolation` (an isolated build compiles against another torch, or\n\
             # none, and the extension fails to load beside the image's). Each CUDA\n\
             # extension compiles for torch's own GPU architectures unless cuda_arch_list names fewer\n\
             # (e.g. \"8.0;9.0\" for the A100 and H100), and may need more memory_mib and timeout_s.\n",
        );
        let _ = writeln!(out, "no_isolation = {}", list(&names));
        out.push_str("\n[python.build.extra_requires]\n# What their setup.py imports besides torch; ninja compiles in parallel.\n");
        for b in &self.torch_builds {
            let _ = writeln!(out, "{} = {}", q(&b.name), list(&b.build_requires));
        }
        let with_metadata: Vec<&TorchAtBuild> =
            self.torch_builds.iter().filter(|b| b.requires.is_some()).collect();
        if !with_metadata.is_empty() {
            out.push_str(
                "\n[python.build.dependency_metadata]\n# Their dependencies as their PKG-INFO says (not static, PEP 643): the lock cannot\n\
                 # prepare their metadata before torch is resolved (uv's dependency-metadata).\n",
            );
            for b in with_metadata {
                let _ = writeln!(out, "{} = {}", q(&b.name), list(b.requires.as_deref().unwrap_or_default()));
            }
        }
        let forced: Vec<&TorchAtBuild> =
            self.torch_builds.iter().filter(|b| b.force_build.is_some()).collect();
        if !forced.is_empty() {
            out.push_str("\n[python.build.env]\n");
            out.push_str(
                "# Compile, rather than download a prebuilt wheel from the project's releases: a build\n",
            );
            out.push_str("# has no network, and their setup.py reads this switch.\n");
            for b in forced {
                let var = b.force_build.as_deref().unwrap_or_default();
                let _ = writeln!(out, "{} = {{ {var} = \"TRUE\" }}", q(&b.name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn setup_names_in_their_usual_spellings() {
        assert_eq!(super::setup_name("setup(\n    name=\"detectron2\",\n)").as_deref(), Some("detectron2"));
        assert_eq!(
            super::setup_name("setup(name = 'groundingdino', version=v)").as_deref(),
            Some("groundingdino")
        );
        assert_eq!(super::setup_name("setup(name=NAME)"), None);
        assert_eq!(
            super::setup_name("PACKAGE_NAME = \"flash_attn\"\nsetup(\n    name=PACKAGE_NAME,\n)").as_deref(),
            Some("flash_attn")
        );
        assert_eq!(super::setup_name("name='x'"), None);
    }
}
