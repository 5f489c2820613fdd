//! What the host must provide, derived from the resolved stack and the recipe's `[host]` rules.
//!
//! The result becomes the image's `NVIDIA_REQUIRE_CUDA` and `STACKBUILD_REQUIRE_*` variables and
//! the `requirements` of `/etc/stackbuild/stack.json`, each with the reasons it exists.
//!
//! Facts come from the artifacts first and the knowledge base second:
//! - the CUDA release from the CUDA runtime wheel, whatever its name: `nvidia-cuda-runtime-cu11`,
//!   `-cu12`, the suffix-less `nvidia-cuda-runtime` of CUDA 13, or the `cuda-toolkit`
//!   metapackage whose extras pull it in (torch 2.11 on the Python Package Index requires
//!   `cuda-toolkit[cublas,cudart,...]==13.0.2`);
//! - the torch build's GPU code from the CUDA fat binaries in torch's own libraries
//!   ([`crate::fatbin`], read at build time), else from the knowledge base's row of the build.
//!
//! The architecture requirement is exact ([`ArchSet`]), after NVIDIA's CUDA C++ Programming Guide
//! ("Binary Compatibility" and "PTX Compatibility",
//! <https://docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility>): a cubin for
//! X.y runs on X.z with z >= y, never across majors, and not on the integrated GPUs of Tegra
//! chips, which need their own cubin; PTX for X.y is JIT-compiled by the driver for any compute
//! capability >= X.y. The requirement language is libnvidia-container's (`src/cli/dsl.c`): terms
//! separated by spaces are alternatives (OR), factors separated by commas must all hold (AND).

use stackcontract::image::DerivedRequirement;
use stackcontract::kb;
use stackcontract::require::{Expr, Factor, Key, KeySpec, Op, Term, KEYS};
use stackcontract::version::{CudaVersion, DriverVersion, PackageVersion};

use crate::gpu_code::{ArchSet, GpuCode};
use stackbuild_common::Platform;
use stackbuild_recipe::HostRules;

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

/// The CUDA toolkit components NVIDIA publishes as wheels without a `-cuNN` suffix from CUDA 13
/// on (the `Requires-Dist` of `cuda-toolkit` 13.0.2 on the Python Package Index: `nvidia-cuda-runtime`,
/// `nvidia-cublas`, ...). With a suffix (`nvidia-cublas-cu12`) any component is recognized.
const SUFFIXLESS_COMPONENTS: &[&str] = &[
    "cuda-runtime",
    "cuda-nvrtc",
    "cuda-cupti",
    "cuda-nvcc",
    "cuda-cccl",
    "cuda-crt",
    "cuda-culibos",
    "cuda-opencl",
    "cuda-profiler-api",
    "cuda-sanitizer-api",
    "nvtx",
    "nvjitlink",
    "nvvm",
    "nvfatbin",
    "cublas",
    "cufft",
    "curand",
    "cusolver",
    "cusparse",
    "cufile",
    "npp",
    "nvjpeg",
];

/// The CUDA library component of a wheel: `nvidia-cuda-runtime-cu12` and `nvidia-cuda-runtime`
/// -> `cuda-runtime`; `None` for other names.
pub fn library_component(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("nvidia-")?;
    if let Some((component, major)) = rest.rsplit_once("-cu") {
        if !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit()) {
            return Some(component);
        }
    }
    SUFFIXLESS_COMPONENTS.contains(&rest).then_some(rest)
}

/// Components versioned with the toolkit's own numbering (`12.1.105` is CUDA 12.1).
fn toolkit_numbered(component: &str) -> bool {
    matches!(component, "cuda-runtime" | "cuda-nvrtc" | "cuda-cupti" | "nvtx" | "nvjitlink" | "cuda-nvcc")
}

/// A component's version in a row of the component table, by wheel component name.
pub(crate) fn component_version<'a>(row: &'a kb::CudaComponents, component: &str) -> Option<&'a str> {
    Some(match component {
        "cuda-runtime" => &row.cudart,
        "cublas" => &row.cublas,
        "cufft" => &row.cufft,
        "curand" => &row.curand,
        "cusolver" => &row.cusolver,
        "cusparse" => &row.cusparse,
        "cuda-nvrtc" => &row.nvrtc,
        "nvjitlink" => return row.nvjitlink.as_deref(),
        _ => return None,
    })
}

/// The CUDA release a CUDA library wheel belongs to, where its version tells: the component
/// table's full release (`12.8.90` of the runtime -> `12.8.1`) where a row lists this version,
/// else, for the components numbered like the toolkit (runtime, NVRTC, CUPTI, NVTX, nvJitLink,
/// nvcc), the version's `major.minor` (`13.0.96` -> `13.0`). cuBLAS, cuFFT and the others have
/// their own numbers and answer only through the table; cuDNN, NCCL and cuSPARSELt are
/// versioned apart from CUDA and answer `None`.
pub(crate) fn library_release(name: &str, version: &PackageVersion) -> Option<CudaVersion> {
    let component = library_component(name)?;
    let row = kb::all_cuda_components().iter().find(|row| {
        component_version(row, component)
            .and_then(|text| text.parse::<PackageVersion>().ok())
            .is_some_and(|v| v == version.clone().without_local())
    });
    if let Some(row) = row {
        return Some(row.cuda.clone());
    }
    if !toolkit_numbered(component) {
        return None;
    }
    let release = version.release();
    format!("{}.{}", release.first()?, release.get(1)?).parse().ok()
}

/// The CUDA runtime the stack ships: the release of its CUDA runtime wheel
/// (`nvidia-cuda-runtime-cu12==12.1.105` -> `12.1.1`, `nvidia-cuda-runtime==13.0.96` -> `13.0`),
/// else the version of the `cuda-toolkit` metapackage that pulls it in (`13.0.2`).
pub(crate) fn cuda_runtime(packages: &[Package<'_>]) -> Option<CudaVersion> {
    let runtime = packages
        .iter()
        .filter(|p| library_component(p.name) == Some("cuda-runtime"))
        .find_map(|p| library_release(p.name, p.version));
    runtime.or_else(|| {
        let toolkit = packages.iter().find(|p| p.name == "cuda-toolkit")?;
        let release = toolkit.version.release();
        let parts: Vec<String> = release.iter().take(3).map(ToString::to_string).collect();
        (parts.len() >= 2).then(|| parts.join(".").parse().ok()).flatten()
    })
}

/// The torch build of the stack, from the knowledge base: the variant named by a local version
/// (`+cu121`) or the plain wheel of the package index.
pub(crate) fn torch_variant(
    packages: &[Package<'_>],
) -> Option<(&'static kb::TorchRelease, &'static kb::TorchVariant)> {
    let torch = packages.iter().find(|p| p.name == "torch")?;
    let release = kb::torch_release(torch.version)?;
    Some((release, torch_build(release, torch.version, torch.platform)?))
}

/// Which published build of `release` the torch `version` for `platform` is: the one its local
/// version names (`+cu118`), else the index's plain wheel. That plain wheel is a CUDA build on
/// `x86_64`; on `aarch64` it is one only where the knowledge base lists the build's `aarch64` code
/// (from torch 2.11 the `aarch64` wheel requires `cuda-toolkit` and `nvidia-cudnn-cu13` too,
/// per its metadata on the Python Package Index); the index's `aarch64` wheels before 2.11 are
/// CPU builds.
pub(crate) fn torch_build(
    release: &'static kb::TorchRelease,
    version: &PackageVersion,
    platform: Platform,
) -> Option<&'static kb::TorchVariant> {
    let local = version.local().iter().map(ToString::to_string).collect::<Vec<_>>().join(".");
    match (local.is_empty(), platform) {
        (true, Platform::LinuxAmd64) => release.pypi_variant(),
        (true, Platform::LinuxArm64) => release.pypi_variant().filter(|v| !v.aarch64_arch.is_empty()),
        (false, _) => release.variant(&local),
    }
}

/// The CUDA version of the stack: its runtime wheel's, else the torch build's.
pub(crate) fn stack_cuda(packages: &[Package<'_>]) -> Option<CudaVersion> {
    cuda_runtime(packages).or_else(|| torch_variant(packages).map(|(_, v)| v.cuda.clone()))
}

/// The GPU code of the stack's torch build, from the knowledge base (the build at hand is read
/// at build time instead, [`crate::fatbin`]); `None` without torch or for a build the table does
/// not know.
pub fn torch_code(packages: &[Package<'_>]) -> Option<GpuCode> {
    let platform = packages.iter().find(|p| p.name == "torch")?.platform;
    torch_variant(packages).and_then(|(release, variant)| GpuCode::from_variant(release, variant, platform))
}

/// The oldest driver that runs the stack's CUDA libraries, as [`requirements`] demands it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DriverFloor {
    /// The stack's CUDA version ([`stack_cuda`]).
    pub cuda: CudaVersion,
    /// The oldest driver on which the stack runs on some GPU.
    pub driver: DriverVersion,
    /// `true`: `driver` is the minor-version compatibility minimum of the CUDA major, enough for
    /// GPUs that run the build's cubins; `false`: the toolkit's own minimum, because every GPU
    /// needs the JIT of the build's PTX (or the major is unknown).
    pub minor_compat: bool,
    /// The toolkit's own minimum (CUDA release notes, table 3), which GPUs that JIT-compile PTX
    /// need (PTX newer than the driver's does not compile).
    pub toolkit_driver: DriverVersion,
    /// Where the figures come from.
    pub source: String,
    /// Set when the CUDA release is newer than the table: the newest known toolkit's minimum
    /// stands in, a lower bound; the text says so.
    pub estimated: Option<String>,
}

/// The toolkit minimum, the minor-compatibility minimum (if the major is known), their source,
/// and the warning for a release newer than the table (whose newest row stands in).
fn driver_rows(cuda: &CudaVersion) -> Option<(DriverVersion, Option<DriverVersion>, String, Option<String>)> {
    // The knowledge base answers a release newer than its verified rows with the newest
    // verified floor, flagged: a newer toolkit never needs an older driver.
    let row = kb::cuda_min_driver(cuda)?;
    let minor = kb::minor_compat(cuda.part(0)).map(|_| row.minor_compat_driver.clone());
    let warning = row.unverified.map(|why| {
        let (major, minor_v) = cuda.major_minor();
        format!(
            "CUDA {major}.{minor_v} is newer than the knowledge base's verified driver minimums: {why}, and the \
             release's own minimum may be higher"
        )
    });
    Some((row.toolkit_driver, minor, row.source, warning))
}

/// The oldest driver that runs the stack's CUDA libraries with the torch build of the knowledge
/// base; `None` without CUDA or for a CUDA release inside the table's span that it lacks.
pub(crate) fn driver_floor(packages: &[Package<'_>]) -> Option<DriverFloor> {
    driver_floor_with(packages, torch_code(packages).as_ref())
}

/// [`driver_floor`] with the torch build's GPU code `code` (read from its fat binaries).
///
/// Minor-version compatibility (CUDA compatibility guide, table 2): an application built with
/// 12.x runs on any driver >= the major's minimum, unless it JIT-compiles PTX newer than the
/// driver. So GPUs that run a cubin need only that minimum; GPUs reached only through PTX need
/// the toolkit's own driver.
pub(crate) fn driver_floor_with(packages: &[Package<'_>], code: Option<&GpuCode>) -> Option<DriverFloor> {
    let cuda = stack_cuda(packages)?;
    let (toolkit_driver, minor, source, estimated) = driver_rows(&cuda)?;
    let cubins = code.is_none_or(|c| !c.cubins.is_empty());
    let (driver, minor_compat) = match minor {
        Some(m) if cubins => (m, true),
        _ => (toolkit_driver.clone(), false),
    };
    Some(DriverFloor { cuda, driver, minor_compat, toolkit_driver, source, estimated })
}

/// Every requirement of the image, with reasons, with the torch build's GPU code from the
/// knowledge base.
pub fn requirements(packages: &[Package<'_>], host: &HostRules) -> Vec<DerivedRequirement> {
    requirements_with(packages, host, torch_code(packages).as_ref())
}

/// Every requirement of the image, with reasons; `code`: the torch build's GPU code (from its
/// fat binaries at build time, else the knowledge base), `None` when unknown.
pub fn requirements_with(
    packages: &[Package<'_>],
    host: &HostRules,
    code: Option<&GpuCode>,
) -> Vec<DerivedRequirement> {
    requirements_with_extensions(packages, host, code, &[])
}

/// A package built from source whose shared objects carry GPU code (a CUDA extension): the
/// image runs only on GPUs that both torch and it have code for.
#[derive(Debug, Clone)]
pub struct Extension<'a> {
    /// Its normalized name.
    pub name: &'a str,
    /// Its version.
    pub version: &'a PackageVersion,
    /// What its fat binaries carry.
    pub code: GpuCode,
}

/// [`requirements_with`], with the architectures of `extensions` joined (and) into `STACKBUILD_REQUIRE_ARCH`,
/// each with a reason that names it and how to rebuild it for more GPUs.
pub fn requirements_with_extensions(
    packages: &[Package<'_>],
    host: &HostRules,
    code: Option<&GpuCode>,
    extensions: &[Extension<'_>],
) -> Vec<DerivedRequirement> {
    // Each variable's expression and reasons, in the order the variables first appear.
    let mut out: Vec<(String, Expr, Vec<String>)> = Vec::new();
    if let Some(req) = cuda_requirement(packages, code) {
        out.push(req);
    }
    // The key a `[host]` rule states, whose row names the variable it goes in.
    let stated = |rule: &str| -> &'static KeySpec {
        KEYS.iter().find(|s| s.recipe.rules().contains(&rule)).expect("every [host] rule has its key's row")
    };
    let host_arch =
        host.expressions().into_iter().find(|(rule, _)| stated(rule).key == Key::Arch).map(|(_, e)| e);
    for (rule, expr) in host.expressions() {
        let spec = stated(rule);
        if spec.key == Key::Arch {
            continue; // with the GPU code's terms, below
        }
        let variable = spec.variable.expect("a key that a [host] rule states has a variable");
        let reason = format!("[host] {rule} rule of the recipe");
        if let Some((_, existing, reasons)) = out.iter_mut().find(|(v, _, _)| v == variable) {
            *existing = existing.and(&expr);
            reasons.push(reason);
        } else {
            out.push((variable.into(), expr, vec![reason]));
        }
    }
    let set = code.map(GpuCode::arch_set).filter(|s| !s.is_empty());
    let mut reasons = Vec::new();
    let expr = match (&set, host_arch) {
        (Some(set), host) => {
            reasons.extend(arch_reasons(packages, code, set));
            if host.is_some() {
                reasons.push("[host] arch rule of the recipe (ANDed with each term)".into());
            }
            Some(host.map_or_else(|| set.expr(), |host| set.expr().and(&host)))
        }
        (None, Some(host)) => {
            reasons.push("[host] arch rule of the recipe".into());
            Some(host)
        }
        (None, None) => None,
    };
    let mut expr = expr;
    for ext in extensions {
        let set = ext.code.arch_set();
        if set.is_empty() {
            continue;
        }
        reasons.push(format!(
            "{} {} (built from source) carries {} ({}); it runs on {}",
            ext.name,
            ext.version,
            ext.code.describe(),
            ext.code.from,
            set.describe()
        ));
        reasons.push(format!(
            "rebuild {} for other GPUs: [python.build] cuda_arch_list (TORCH_CUDA_ARCH_LIST) with their compute \
             capability, e.g. \"8.0;9.0+PTX\"",
            ext.name
        ));
        expr = Some(expr.map_or_else(|| set.expr(), |e| e.and(&set.expr())));
    }
    if let Some(expr) = expr {
        out.push((variable_of(Key::Arch).into(), expr, reasons));
    }
    out.into_iter()
        .map(|(variable, expr, reasons)| DerivedRequirement { variable, expr: expr.to_string(), reasons })
        .collect()
}

/// `NVIDIA_REQUIRE_CUDA`: `cuda>=X.Y` (a driver of the full release), or the minor-version
/// compatibility minimum on the GPUs that run a cubin.
fn cuda_requirement(packages: &[Package<'_>], code: Option<&GpuCode>) -> Option<(String, Expr, Vec<String>)> {
    let cuda = stack_cuda(packages)?;
    let (major, minor) = cuda.major_minor();
    let full = Term(vec![Factor::new(Key::Cuda, Op::Ge, cuda.release())]);
    let mut reasons = vec![format!("CUDA {major}.{minor} libraries in the image")];
    let floor = driver_floor_with(packages, code);
    if let Some(warning) = floor.as_ref().and_then(|f| f.estimated.as_ref()) {
        reasons.push(format!("warning: {warning}"));
    }
    let Some(floor) = floor.as_ref().filter(|f| f.minor_compat) else {
        if code.is_some_and(|c| c.cubins.is_empty() && !c.ptx.is_empty()) {
            reasons.push(
                "the torch build carries only PTX, which needs a driver of the full CUDA version".into(),
            );
        }
        return Some((variable_of(Key::Cuda).into(), Expr(vec![full]), reasons));
    };
    let compat_driver = Term(vec![Factor::new(Key::Driver, Op::Ge, floor.driver.clone())]);
    let compat = format!(
        "driver>={}: CUDA {major}.{minor} libraries, minor-version compatibility ({})",
        floor.driver, floor.source
    );
    let expr = if let Some(code) = code.filter(|c| !c.ptx.is_empty()) {
        let cubins = code.cubin_set();
        reasons.push(format!(
            "{compat}, on GPUs that run one of the torch build's cubins ({})",
            cubins.describe()
        ));
        reasons.push(format!(
            "cuda>={major}.{minor} on the others: they JIT-compile the build's PTX, which needs a driver of the \
             full CUDA version"
        ));
        Expr(vec![full]).or(&Expr(vec![compat_driver]).and(&cubins.expr()))
    } else {
        reasons.push(compat);
        Expr(vec![full, compat_driver])
    };
    Some((variable_of(Key::Cuda).into(), expr, reasons))
}

/// The variable the builder writes requirements on `key` in (`NVIDIA_REQUIRE_CUDA`).
fn variable_of(key: Key) -> &'static str {
    key.spec().variable.expect("a key the builder derives has a variable")
}

/// Why the arch set is what it is.
fn arch_reasons(packages: &[Package<'_>], code: Option<&GpuCode>, set: &ArchSet) -> Vec<String> {
    let Some(code) = code else { return Vec::new() };
    let torch = packages
        .iter()
        .find(|p| p.name == "torch")
        .map_or_else(String::new, |p| format!("torch {} ", p.version));
    let mut out = vec![format!("{torch}carries {} ({})", code.describe(), code.from)];
    out.push(format!("it runs on {}", set.describe()));
    out.push(
        "a cubin for X.y runs on X.z (z >= y) of discrete GPUs, never across majors; Tegra SoCs (5.3 6.2 7.2 8.7 \
         10.1 11.0) need their own cubin; PTX for X.y is JIT-compiled for any cc >= X.y (CUDA C++ Programming \
         Guide, binary and PTX compatibility)"
            .into(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackcontract::version::ComputeCapability;

    fn v(s: &str) -> PackageVersion {
        s.parse().unwrap()
    }

    fn cc(s: &str) -> ComputeCapability {
        s.parse().unwrap()
    }

    fn code(cubins: &[&str], ptx: &[&str]) -> GpuCode {
        GpuCode {
            cubins: cubins.iter().map(|s| cc(s)).collect(),
            ptx: ptx.iter().map(|s| cc(s)).collect(),
            from: "test".into(),
        }
    }

    /// Evaluates an `arch` expression (terms are alternatives, factors must all hold) for one compute capability.
    fn admits(expr: &str, gpu: ComputeCapability) -> bool {
        expr.split(' ').any(|term| {
            term.split(',').all(|factor| {
                let factor = factor.strip_prefix("arch").unwrap();
                let (op, value) =
                    ["!=", ">=", "<"].iter().find_map(|op| Some((*op, factor.strip_prefix(op)?))).unwrap();
                let value = cc(value);
                match op {
                    "!=" => gpu != value,
                    ">=" => gpu >= value,
                    _ => gpu < value,
                }
            })
        })
    }

    /// Every compute capability from 3.0 to 15.9.
    fn all_ccs() -> impl Iterator<Item = ComputeCapability> {
        (3..16).flat_map(|major| (0..10).map(move |minor| ComputeCapability::new(major, minor)))
    }

    #[test]
    fn an_extension_built_for_fewer_gpus_narrows_the_arch_requirement() {
        let (t, fa) = (v("2.8.0"), v("2.8.3"));
        let packages = [
            Package { name: "torch", version: &t, platform: Platform::LinuxAmd64 },
            Package { name: "flash-attn", version: &fa, platform: Platform::LinuxAmd64 },
        ];
        let torch = code(&["8.0", "9.0"], &["9.0"]);
        let ext = Extension { name: "flash-attn", version: &fa, code: code(&["9.0"], &[]) };
        let reqs = requirements_with_extensions(&packages, &HostRules::default(), Some(&torch), &[ext]);
        let arch = reqs.iter().find(|r| r.variable == "STACKBUILD_REQUIRE_ARCH").unwrap();
        assert!(!admits(&arch.expr, cc("8.0")), "an A100 lacks flash-attn's code: {}", arch.expr);
        assert!(admits(&arch.expr, cc("9.0")), "{}", arch.expr);
        assert!(!admits(&arch.expr, cc("10.0")), "torch's PTX alone does not run flash-attn: {}", arch.expr);
        let text = arch.reasons.join("\n");
        assert!(text.contains("flash-attn 2.8.3 (built from source) carries cubins for 9.0"), "{text}");
        assert!(text.contains("rebuild flash-attn for other GPUs"), "{text}");
        // Without extensions, torch's own set.
        let plain = requirements_with(&packages, &HostRules::default(), Some(&torch));
        let arch = plain.iter().find(|r| r.variable == "STACKBUILD_REQUIRE_ARCH").unwrap();
        assert!(admits(&arch.expr, cc("8.0")));
    }

    #[test]
    fn torch_2_1_cu121_stack() {
        let (t, rt, np) = (v("2.1.0"), v("12.1.105"), v("1.26.4"));
        let packages = [
            Package { name: "torch", version: &t, platform: Platform::LinuxAmd64 },
            Package { name: "nvidia-cuda-runtime-cu12", version: &rt, platform: Platform::LinuxAmd64 },
            Package { name: "numpy", version: &np, platform: Platform::LinuxAmd64 },
        ];
        let recipe = stackbuild_recipe::Recipe::parse(
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

    /// torch 2.7.0+cu128 carries cubins for 7.5 to 10.0 and 12.0, and PTX for 12.0: GPUs with a
    /// cubin need only the minor-version compatibility driver, the JIT path (13.0 and up) the
    /// toolkit's; 11.0 (Thor) has neither.
    #[test]
    fn ptx_raises_the_driver_floor_only_for_jit_gpus() {
        let t = v("2.7.0+cu128");
        let packages = [Package { name: "torch", version: &t, platform: Platform::LinuxAmd64 }];
        let floor = driver_floor(&packages).unwrap();
        assert_eq!(
            (floor.cuda.as_str(), floor.driver.as_str(), floor.minor_compat, floor.toolkit_driver.as_str()),
            ("12.8", "525.60.13", true, "570.26")
        );
        let reqs = requirements(&packages, &HostRules::default());
        let exprs: Vec<&str> = reqs.iter().map(|r| r.expr.as_str()).collect();
        assert_eq!(
            exprs,
            [
                "cuda>=12.8 driver>=525.60.13,arch>=7.5,arch<11.0,arch!=8.7,arch!=10.1 \
                 driver>=525.60.13,arch>=12.0,arch<13.0",
                "arch>=7.5,arch<11.0,arch!=8.7,arch!=10.1 arch>=12.0"
            ]
        );
        for r in &reqs {
            stackcontract::require::Expr::parse(&r.expr).unwrap();
        }
    }

    /// Cubins 8.0, 8.6, 9.0 and PTX 9.0: Orin (8.7) has no cubin of its own; 8.9 runs the 8.6
    /// cubin; 10.0 and 12.0 only through the JIT.
    #[test]
    fn arch_set_is_exact() {
        let c = code(&["8.0", "8.6", "9.0"], &["9.0"]);
        assert!(!c.runs_on(cc("8.7")));
        assert!(c.cubin_runs_on(cc("8.9")));
        assert!(!c.cubin_runs_on(cc("10.0")) && c.runs_on(cc("10.0")));
        assert!(!c.runs_on(cc("7.5")));
        let set = c.arch_set().to_string();
        assert_eq!(set, "arch>=8.0,arch!=8.7");
        assert_eq!(c.cubin_set().to_string(), "arch>=8.0,arch<10.0,arch!=8.7");
        for (name, c) in [
            ("ptx", c),
            ("cubins", code(&["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"], &[])),
            ("gap", code(&["7.5", "8.0", "8.6", "9.0", "10.0"], &["12.0"])),
            ("tegra", code(&["7.2", "8.7"], &[])),
            ("ptx-only", code(&[], &["8.0"])),
            ("thor", code(&["8.0", "9.0", "10.0", "11.0", "12.0"], &["12.0"])),
        ] {
            let set = c.arch_set().to_string();
            stackcontract::require::Expr::parse(&set).unwrap();
            for gpu in all_ccs() {
                assert_eq!(admits(&set, gpu), c.runs_on(gpu), "{name}: {set} at {gpu}");
            }
            let cubins = c.cubin_set().to_string();
            for gpu in all_ccs() {
                assert_eq!(
                    !cubins.is_empty() && admits(&cubins, gpu),
                    c.cubin_runs_on(gpu),
                    "{name}: {cubins}"
                );
            }
        }
        assert_eq!(
            code(&["7.2", "8.7"], &[]).arch_set().to_string(),
            "arch>=7.2,arch<8.0 arch>=8.7,arch<9.0"
        );
        assert_eq!(
            code(&["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"], &[]).arch_set().to_string(),
            "arch>=5.0,arch<10.0,arch!=5.3,arch!=6.2,arch!=7.2,arch!=8.7"
        );
    }

    /// A PTX-only build needs the toolkit's own driver everywhere.
    #[test]
    fn ptx_only_needs_the_toolkit_driver() {
        let rt = v("12.8.57");
        let packages =
            [Package { name: "nvidia-cuda-runtime-cu12", version: &rt, platform: Platform::LinuxAmd64 }];
        let c = code(&[], &["8.0"]);
        let floor = driver_floor_with(&packages, Some(&c)).unwrap();
        assert!(!floor.minor_compat);
        assert_eq!(floor.driver.as_str(), "570.26");
        let reqs = requirements_with(&packages, &HostRules::default(), Some(&c));
        assert_eq!(reqs[0].expr, "cuda>=12.8");
        assert_eq!(reqs[1].expr, "arch>=8.0");
    }

    /// CUDA 13 wheels have no `-cu13` suffix; `cuda-toolkit` alone names the release too.
    #[test]
    fn cuda_13_runtime_whatever_its_name() {
        let (rt, tk) = (v("13.0.96"), v("13.0.2"));
        for name in ["nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13"] {
            let packages = [Package { name, version: &rt, platform: Platform::LinuxAmd64 }];
            assert_eq!(cuda_runtime(&packages).unwrap().major_minor(), (13, 0), "{name}");
        }
        let packages = [Package { name: "cuda-toolkit", version: &tk, platform: Platform::LinuxArm64 }];
        assert_eq!(cuda_runtime(&packages).unwrap().as_str(), "13.0.2");
        assert_eq!(library_component("nvidia-cublas"), Some("cublas"));
        assert_eq!(library_component("nvidia-cublas-cu12"), Some("cublas"));
        assert_eq!(library_component("nvidia-ml-py"), None);
        assert_eq!(library_component("nvidia-cudnn-cu13"), Some("cudnn"));
        let cublas = v("13.1.0.3");
        assert_eq!(library_release("nvidia-cublas", &cublas).unwrap().major_minor(), (13, 0));
        let packages =
            [Package { name: "nvidia-cuda-runtime", version: &rt, platform: Platform::LinuxAmd64 }];
        let reqs = requirements(&packages, &HostRules::default());
        assert_eq!(reqs[0].expr, "cuda>=13.0 driver>=580");
    }

    /// A CUDA newer than the driver table: the newest known floor stands in, with a warning.
    #[test]
    fn newer_cuda_gets_the_newest_floor_and_a_warning() {
        let rt = v("13.9.10");
        let packages =
            [Package { name: "nvidia-cuda-runtime", version: &rt, platform: Platform::LinuxAmd64 }];
        let floor = driver_floor(&packages).unwrap();
        assert!(floor.estimated.is_some());
        let newest = kb::cuda_toolkits().last().unwrap();
        assert!(floor.toolkit_driver >= newest.driver);
        let reqs = requirements(&packages, &HostRules::default());
        assert!(reqs[0].reasons.iter().any(|r| r.starts_with("warning: CUDA 13.9 is newer")), "{reqs:?}");
        let rt = v("14.1.5");
        let packages =
            [Package { name: "nvidia-cuda-runtime", version: &rt, platform: Platform::LinuxAmd64 }];
        let floor = driver_floor(&packages).unwrap();
        assert!(!floor.minor_compat && floor.estimated.is_some());
        assert_eq!(requirements(&packages, &HostRules::default())[0].expr, "cuda>=14.1");
    }

    /// The hook's own evaluation of what torch 2.7.0+cu128 writes: an A100 (8.0) on R550 runs
    /// its cubin under minor-version compatibility; Orin (8.7) and Thor (11.0) have no code; a
    /// GPU reached only through the PTX JIT needs a CUDA 12.8 driver.
    #[test]
    fn the_hook_reads_the_requirements_as_meant() {
        use stackcontract::require::{GpuFacts, HostFacts, RequirementSet};
        let t = v("2.7.0+cu128");
        let packages = [Package { name: "torch", version: &t, platform: Platform::LinuxAmd64 }];
        let mut set = RequirementSet::default();
        for r in requirements(&packages, &HostRules::default()) {
            set.push(r.variable, &r.expr).unwrap();
        }
        let host = |driver: &str, cuda: &str, gpu: &str| HostFacts {
            driver: Some(driver.parse().unwrap()),
            cuda: Some(cuda.parse().unwrap()),
            gpus: vec![GpuFacts { arch: Some(cc(gpu)), brand: None }],
            ..HostFacts::default()
        };
        assert!(set.evaluate(&host("550.54.15", "12.4", "8.0")).is_empty());
        assert!(set.evaluate(&host("550.54.15", "12.4", "8.9")).is_empty());
        assert!(!set.evaluate(&host("580.65.06", "13.0", "8.7")).is_empty());
        assert!(!set.evaluate(&host("580.65.06", "13.0", "11.0")).is_empty());
        assert!(!set.evaluate(&host("550.54.15", "12.4", "13.0")).is_empty());
        assert!(set.evaluate(&host("570.26", "12.8", "13.0")).is_empty());
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
