//! What the host must provide, derived from the resolved stack and the recipe's `[host]` rules.
//!
//! The result becomes the image's `NVIDIA_REQUIRE_CUDA` and `STACKBUILD_REQUIRE_*` variables and
//! the `requirements` of `/etc/stackbuild/stack.json`, each with the reasons it exists.

use stackcontract::image::DerivedRequirement;
use stackcontract::kb;
use stackcontract::version::{ComputeCapability, CudaVersion, DriverVersion, PackageVersion};

use crate::recipe::{HostRules, Platform};

/// A resolved package, as far as derivation needs it.
#[derive(Debug, Clone, Copy)]
pub struct Package<'a> {
    /// Normalized name.
    pub name: &'a str,
    /// Version.
    pub version: &'a PackageVersion,
    /// The image platform it was resolved for.
    pub platform: Platform,
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
    Some((release, torch_build(release, torch.version, torch.platform)?))
}

/// Which published build of `release` the torch `version` for `platform` is: the one its local
/// version names (`+cu118`), else the index's plain wheel. That plain wheel is a CUDA build on
/// `x86_64` only; the index's aarch64 wheels of these releases are CPU builds, and aarch64 CUDA
/// builds (`JetPack`) say what they are in their own version, which the knowledge base does not
/// list.
pub fn torch_build(
    release: &'static kb::TorchRelease,
    version: &PackageVersion,
    platform: Platform,
) -> Option<&'static kb::TorchVariant> {
    let local = version.local().iter().map(ToString::to_string).collect::<Vec<_>>().join(".");
    match (local.is_empty(), platform) {
        (true, Platform::LinuxAmd64) => release.pypi_variant(),
        (true, Platform::LinuxArm64) => None,
        (false, _) => release.variant(&local),
    }
}

/// The CUDA version of the stack: its runtime wheel's, else the torch build's.
pub fn stack_cuda(packages: &[Package<'_>]) -> Option<CudaVersion> {
    cuda_runtime(packages).or_else(|| torch_variant(packages).map(|(_, v)| v.cuda.clone()))
}

/// The oldest driver that runs the stack's CUDA libraries, as [`requirements`] demands it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFloor {
    /// The stack's CUDA version ([`stack_cuda`]).
    pub cuda: CudaVersion,
    /// The oldest driver.
    pub driver: DriverVersion,
    /// `true`: the minor-version compatibility minimum of the CUDA major; `false`: the
    /// toolkit's own minimum, because the torch build carries PTX that the driver JIT-compiles.
    pub minor_compat: bool,
    /// Where the figure comes from.
    pub source: String,
}

/// The oldest driver that runs the stack's CUDA libraries; `None` without CUDA or for a CUDA
/// release the knowledge base does not know.
pub fn driver_floor(packages: &[Package<'_>]) -> Option<DriverFloor> {
    let cuda = stack_cuda(packages)?;
    let row = kb::cuda_min_driver(&cuda)?;
    let ptx = torch_variant(packages).is_some_and(|(_, v)| v.ptx);
    // Minor-version compatibility (CUDA compatibility guide): an application built with 12.x
    // runs on any driver >= the major's minimum, unless it JIT-compiles PTX newer than the driver.
    let driver = if ptx { row.toolkit_driver } else { row.minor_compat_driver };
    Some(DriverFloor { cuda, driver, minor_compat: !ptx, source: row.source })
}

/// The compute capabilities a torch build has code for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchSpan {
    /// The lowest architecture with a cubin.
    pub low: ComputeCapability,
    /// The highest architecture with a cubin (and with PTX, when `below` is `None`).
    pub high: ComputeCapability,
    /// The first architecture without code (exclusive bound), when the build has no PTX: a cubin
    /// runs on GPUs of its major and a higher minor, never across majors.
    pub below: Option<ComputeCapability>,
}

/// The architectures `variant` has code for; `None` for an empty arch list.
pub fn arch_span(variant: &kb::TorchVariant) -> Option<ArchSpan> {
    let (low, high) = (*variant.arch.first()?, *variant.arch.last()?);
    let below = (!variant.ptx).then(|| ComputeCapability::new(high.major + 1, 0));
    Some(ArchSpan { low, high, below })
}

/// Every requirement of the image, with reasons.
pub fn requirements(packages: &[Package<'_>], host: &HostRules) -> Vec<DerivedRequirement> {
    let mut out = Vec::new();
    let torch = torch_variant(packages);
    let cuda = stack_cuda(packages);
    if let Some(cuda) = &cuda {
        let (major, minor) = cuda.major_minor();
        let floor = driver_floor(packages);
        let mut reasons = vec![format!("CUDA {major}.{minor} libraries in the image")];
        let expr = if let Some(floor) = floor.as_ref().filter(|f| f.minor_compat) {
            reasons.push(format!(
                "driver>={}: CUDA {major}.{minor} libraries, minor-version compatibility ({})",
                floor.driver, floor.source
            ));
            format!("cuda>={major}.{minor} driver>={}", floor.driver)
        } else {
            if torch.is_some_and(|(_, v)| v.ptx) {
                reasons
                    .push("the torch wheels carry PTX, which needs a driver of the full CUDA version".into());
            }
            format!("cuda>={major}.{minor}")
        };
        out.push(DerivedRequirement { variable: "NVIDIA_REQUIRE_CUDA".into(), expr, reasons });
    }
    let mut arch_factors = Vec::new();
    let mut arch_reasons = Vec::new();
    if let Some((release, variant)) = torch {
        if let Some(span) = arch_span(variant) {
            let low = span.low;
            arch_factors.push(format!("arch>={low}"));
            let list = variant.arch.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ");
            match span.below {
                None => arch_reasons.push(format!(
                    "arch>={low}: torch {}+{} wheels carry cubins for {list} and PTX for {}",
                    release.version, variant.tag, span.high
                )),
                Some(next) => {
                    arch_factors.push(format!("arch<{next}"));
                    arch_reasons.push(format!(
                        "arch {low}-{}.x: torch {}+{} wheels carry cubins for {list} and no PTX",
                        span.high.major, release.version, variant.tag
                    ));
                }
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
            "platform" => "STACKBUILD_REQUIRE_PLATFORM",
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
            Package { name: "torch", version: &t, platform: Platform::LinuxAmd64 },
            Package { name: "nvidia-cuda-runtime-cu12", version: &rt, platform: Platform::LinuxAmd64 },
            Package { name: "numpy", version: &np, platform: Platform::LinuxAmd64 },
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
            stackcontract::require::Expr::parse(&r.expr).unwrap();
        }
    }

    /// torch 2.7.0+cu128 carries PTX: no upper arch bound, and the toolkit's own driver.
    #[test]
    fn ptx_build_needs_the_toolkit_driver() {
        let t = v("2.7.0+cu128");
        let packages = [Package { name: "torch", version: &t, platform: Platform::LinuxAmd64 }];
        let floor = driver_floor(&packages).unwrap();
        assert_eq!(
            (floor.cuda.as_str(), floor.driver.as_str(), floor.minor_compat),
            ("12.8", "570.26", false)
        );
        let reqs = requirements(&packages, &HostRules::default());
        let exprs: Vec<&str> = reqs.iter().map(|r| r.expr.as_str()).collect();
        assert_eq!(exprs, ["cuda>=12.8", "arch>=7.5"]);
        let (_, variant) = torch_variant(&packages).unwrap();
        let span = arch_span(variant).unwrap();
        assert_eq!(
            (span.low.to_string(), span.high.to_string(), span.below),
            ("7.5".into(), "12.0".into(), None)
        );
    }

    #[test]
    fn no_cuda_no_requirement() {
        let np = v("1.26.4");
        assert!(requirements(
            &[Package { name: "numpy", version: &np, platform: Platform::LinuxAmd64 }],
            &HostRules::default()
        )
        .is_empty());
    }
}
