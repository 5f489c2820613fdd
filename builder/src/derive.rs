//! What the host must provide, derived from the resolved stack and the recipe's `[host]` rules.
//!
//! The result becomes the image's `NVIDIA_REQUIRE_CUDA` and `STACKBUILD_REQUIRE_*` variables and
//! the `requirements` of `/etc/stackbuild/stack.json`, each with the reasons it exists.

use stackhook::contract::image::DerivedRequirement;
use stackhook::contract::kb;
use stackhook::contract::version::{ComputeCapability, CudaVersion, PackageVersion};

use crate::recipe::HostRules;

/// A resolved package, as far as derivation needs it.
#[derive(Debug, Clone, Copy)]
pub struct Package<'a> {
    /// Normalized name.
    pub name: &'a str,
    /// Version.
    pub version: &'a PackageVersion,
}

/// The CUDA runtime the stack ships, from its `nvidia-cuda-runtime-cu*` wheel
/// (`12.1.105` -> `12.1`).
pub fn cuda_runtime(packages: &[Package<'_>]) -> Option<CudaVersion> {
    let p = packages.iter().find(|p| p.name.starts_with("nvidia-cuda-runtime-cu"))?;
    let release = p.version.release();
    format!("{}.{}", release.first()?, release.get(1).copied().unwrap_or(0)).parse().ok()
}

/// The torch build of the stack, from the knowledge base: the variant named by a local version
/// (`+cu121`) or the plain wheel of the package index.
pub fn torch_variant(
    packages: &[Package<'_>],
) -> Option<(&'static kb::TorchRelease, &'static kb::TorchVariant)> {
    let torch = packages.iter().find(|p| p.name == "torch")?;
    let release = kb::torch_release(torch.version)?;
    let local = torch.version.local().iter().map(ToString::to_string).collect::<Vec<_>>().join(".");
    let variant = if local.is_empty() { release.pypi_variant() } else { release.variant(&local) }?;
    Some((release, variant))
}

/// Every requirement of the image, with reasons.
pub fn requirements(packages: &[Package<'_>], host: &HostRules) -> Vec<DerivedRequirement> {
    let mut out = Vec::new();
    let torch = torch_variant(packages);
    let cuda = cuda_runtime(packages).or_else(|| torch.map(|(_, v)| v.cuda.clone()));
    if let Some(cuda) = &cuda {
        let (major, minor) = cuda.major_minor();
        let ptx = torch.is_some_and(|(_, v)| v.ptx);
        let row = kb::cuda_min_driver(cuda);
        let mut reasons = vec![format!("CUDA {major}.{minor} libraries in the image")];
        let expr = match row.as_ref().filter(|_| !ptx) {
            // Minor-version compatibility (CUDA compatibility guide): an application built with
            // 12.x runs on any 12.x driver >= the major's minimum, unless it JIT-compiles PTX.
            Some(row) => {
                reasons.push(format!(
                    "driver>={}: CUDA {major}.{minor} libraries, minor-version compatibility ({})",
                    row.minor_compat_driver, row.source
                ));
                format!("cuda>={major}.{minor} driver>={}", row.minor_compat_driver)
            }
            None => {
                if ptx {
                    reasons.push(
                        "the torch wheels carry PTX, which needs a driver of the full CUDA version".into(),
                    );
                }
                format!("cuda>={major}.{minor}")
            }
        };
        out.push(DerivedRequirement { variable: "NVIDIA_REQUIRE_CUDA".into(), expr, reasons });
    }
    let mut arch_factors = Vec::new();
    let mut arch_reasons = Vec::new();
    if let Some((release, variant)) = torch {
        if let (Some(low), Some(high)) = (variant.arch.first(), variant.arch.last()) {
            arch_factors.push(format!("arch>={low}"));
            let list = variant.arch.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" ");
            if variant.ptx {
                arch_reasons.push(format!(
                    "arch>={low}: torch {}+{} wheels carry cubins for {list} and PTX for {high}",
                    release.version, variant.tag
                ));
            } else {
                // A cubin runs on GPUs of the same major and a higher minor, never across majors.
                let next = ComputeCapability::new(high.major + 1, 0);
                arch_factors.push(format!("arch<{next}"));
                arch_reasons.push(format!(
                    "arch {low}-{}.x: torch {}+{} wheels carry cubins for {list} and no PTX",
                    high.major, release.version, variant.tag
                ));
            }
        }
    }
    for (rule, expr) in host.expressions() {
        if rule == "arch" {
            arch_factors.push(expr);
            arch_reasons.push("[host] arch rule of the recipe".into());
            continue;
        }
        let variable = match rule {
            "kernel_deny" => "STACKBUILD_REQUIRE_KERNEL",
            "modules" | "modules_deny" => "STACKBUILD_REQUIRE_MODULES",
            "gpus" => "STACKBUILD_REQUIRE_GPUS",
            _ => "STACKBUILD_REQUIRE_DRIVER",
        };
        let reason = format!("[host] {rule} rule of the recipe");
        if let Some(existing) = out.iter_mut().find(|r| r.variable == variable) {
            existing.expr = format!("{},{expr}", existing.expr);
            existing.reasons.push(reason);
        } else {
            out.push(DerivedRequirement { variable: variable.into(), expr, reasons: vec![reason] });
        }
    }
    if !arch_factors.is_empty() {
        out.push(DerivedRequirement {
            variable: "STACKBUILD_REQUIRE_ARCH".into(),
            expr: arch_factors.join(","),
            reasons: arch_reasons,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> PackageVersion {
        s.parse().unwrap()
    }

    #[test]
    fn torch_2_1_cu121_stack() {
        let (t, rt, np) = (v("2.1.0"), v("12.1.105"), v("1.26.4"));
        let packages = [
            Package { name: "torch", version: &t },
            Package { name: "nvidia-cuda-runtime-cu12", version: &rt },
            Package { name: "numpy", version: &np },
        ];
        let recipe = crate::recipe::Recipe::parse(
            "r.toml",
            "[image]\nname = \"x\"\n[base]\nscratch = true\n[host]\nkernel_deny = [\"5.15.0-107-generic\"]\nmodules = [\"nvidia_uvm\"]\ndriver = \"<560\"\n",
        )
        .unwrap();
        let reqs = requirements(&packages, &recipe.host);
        let text: Vec<String> =
            reqs.iter().map(|r| format!("{}={}  # {}", r.variable, r.expr, r.reasons.join("; "))).collect();
        insta::assert_snapshot!(text.join("\n"));
        // Everything we write parses in the contract's own language.
        for r in &reqs {
            stackhook::contract::require::Expr::parse(&r.expr).unwrap();
        }
    }

    #[test]
    fn no_cuda_no_requirement() {
        let np = v("1.26.4");
        assert!(requirements(&[Package { name: "numpy", version: &np }], &HostRules::default()).is_empty());
    }
}
