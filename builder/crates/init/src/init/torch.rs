//! Packages the resolution took from source whose build imports torch (flash-attn and the other
//! CUDA extensions, `stackbuild_python::torch_at_build`): the recipe builds them against the
//! image's torch, as their READMEs' `pip install --no-build-isolation` does, with the build
//! helpers their `setup.py` imports and, where their `PKG-INFO` is not static, its dependencies
//! as the metadata the lock cannot prepare before torch is resolved.

use std::fmt::Write as _;

use stackbuild_python::TorchAtBuild;

use super::Plan;

impl Plan {
    /// `pkg` builds against the image's torch: said, and written in `[python.build]`.
    pub fn build_against_torch(&mut self, pkg: TorchAtBuild) {
        let name = stackbuild_python::normalize_name(&pkg.name);
        if self.torch_builds.iter().any(|b| stackbuild_python::normalize_name(&b.name) == name) {
            return;
        }
        self.decisions.push(format!(
            "{name} {}: no wheel, and its setup.py imports torch, which its build system does not require: \
             built against the image's torch ([python.build] no_isolation, as its `pip install \
             --no-build-isolation`), with {} in its build environment{}",
            pkg.version,
            pkg.build_requires.join(", "),
            if pkg.requires.is_some() {
                "; its dependencies as its PKG-INFO says (dependency_metadata: its metadata cannot be prepared \
                 before torch is resolved)"
            } else {
                ""
            }
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
        out.push_str(
            "\n[python.build]\n# Their setup.py imports torch, which their build system does not require: built against\n\
             # the image's torch, as their READMEs' `pip install --no-build-isolation`. Each CUDA\n\
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
    }
}
