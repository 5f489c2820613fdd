//! Tests of `check`: every conflict on a fixture recipe (knowledge base only, no network),
//! resolved stacks built from synthetic pins, and a locked stack whose torch wheel is at hand.

use std::io::Write as _;
use std::path::Path;
use std::str::FromStr;

use pep508_rs::PackageName;
use stackcontract::kb;
use stackcontract::version::PackageVersion;
use zip::write::SimpleFileOptions;

use super::facts::{library_cuda, wheel_requires};
use super::*;
use stackbuild_python::Artifact;
use stackbuild_python::Pinned;

/// Loads `tests/fixtures/check/<name>.toml` under a relative name, so reports do not depend on
/// where the checkout is (tests run in the crate directory, where no lock sits next to it).
fn fixture(name: &str) -> Recipe {
    let path = format!("tests/fixtures/check/{name}.toml");
    let text = std::fs::read_to_string(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(&path))
        .unwrap();
    Recipe::parse(&path, &text).unwrap()
}

fn offline(recipe: &Recipe) -> Report {
    check(recipe, &CheckOptions { offline: true, cache_dir: None }).unwrap()
}

fn kinds(report: &Report, severity: Severity) -> Vec<&'static str> {
    report.of(severity).map(|f| f.kind.as_str()).collect()
}

fn findings_text(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|f| {
            let fix = f.fix.as_ref().map_or_else(String::new, |x| format!("\n  fix: {x}"));
            format!("{}[{}]: {}{fix}", f.severity.as_str(), f.kind.as_str(), f.message)
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Each fixture: whether it is compatible, the errors and the warnings it must report.
const FIXTURES: &[(&str, bool, &[&str], &[&str])] = &[
    ("ok", true, &[], &[]),
    ("no-python", true, &[], &[]),
    ("cudnn-cuda-section", false, &["cudnn-mismatch"], &[]),
    ("cudnn-pin", false, &["cudnn-mismatch"], &[]),
    ("variant-cuda-section", false, &["cuda-mismatch"], &[]),
    ("variant-local", true, &[], &["torch-variant"]),
    ("cuda-mismatch", false, &["cuda-mismatch"], &[]),
    ("python312", false, &["python-unsupported"], &[]),
    ("numpy2-range", false, &["numpy-abi"], &[]),
    ("numpy2-pin", false, &["numpy-abi"], &[]),
    ("torchvision", false, &["companion-mismatch"], &[]),
    ("mixed-nvjitlink", true, &[], &["mixed-cuda-minor"]),
    // Offline, nvJitLink is unknown: only a resolution shows it (see check_cli.rs).
    ("unpinned-nvjitlink", true, &[], &[]),
    ("host-driver", false, &["host-driver"], &[]),
    ("host-arch", false, &["host-arch"], &[]),
    (
        "everything",
        false,
        &[
            "python-unsupported",
            "cuda-mismatch",
            "cudnn-mismatch",
            "cudnn-mismatch",
            "torch-requirement",
            "numpy-abi",
            "companion-mismatch",
            "companion-mismatch",
            "host-driver",
            "host-arch",
        ],
        &["mixed-cuda-minor"],
    ),
];

#[test]
fn fixtures_report_their_conflicts() {
    for &(name, compatible, errors, warnings) in FIXTURES {
        let report = offline(&fixture(name));
        assert_eq!(report.compatible, compatible, "{name}:\n{}", report.to_text());
        assert_eq!(kinds(&report, Severity::Error), errors, "{name}");
        assert_eq!(kinds(&report, Severity::Warning), warnings, "{name}");
        insta::assert_snapshot!(format!("fixture_{name}"), report.to_text());
    }
}

#[test]
fn predicted_stack_follows_the_recipe_pins() {
    let report = offline(&fixture("ok"));
    let [stack] = report.stacks.as_slice() else { panic!("one platform") };
    assert!(matches!(stack.resolution, Resolution::Predicted { .. }));
    let version = |name: &str| stack.packages.iter().find(|p| p.name == name).map(|p| p.version.to_string());
    assert_eq!(version("nvidia-cudnn-cu12").as_deref(), Some("8.9.2.26"));
    assert_eq!(version("nvidia-nvjitlink-cu12").as_deref(), Some("12.1.105"));
    assert_eq!(stack.cuda.as_deref(), Some("12.1"));
    let torch = stack.torch.as_ref().unwrap();
    assert_eq!((torch.variant.as_deref(), torch.cudnn.as_deref()), (Some("cu121"), Some("8.9.2.26")));
    // Same function, same packages as the build: the requirements the image will carry.
    let packages: Vec<crate::derive::Package<'_>> = stack
        .packages
        .iter()
        .map(|p| crate::derive::Package {
            name: &p.name,
            version: &p.version,
            platform: Platform::LinuxAmd64,
        })
        .collect();
    assert_eq!(stack.requirements, crate::derive::requirements(&packages, &fixture("ok").host));
}

#[test]
fn json_names_kinds_and_verdict() {
    let report = offline(&fixture("cudnn-pin"));
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    assert_eq!(json["compatible"], false);
    assert_eq!(json["findings"][0]["kind"], "cudnn-mismatch");
    assert_eq!(json["findings"][0]["severity"], "error");
    assert_eq!(json["stacks"][0]["resolution"]["mode"], "predicted");
    assert_eq!(json["stacks"][0]["requirements"][0]["variable"], "NVIDIA_REQUIRE_CUDA");
    let cudnn = json["stacks"][0]["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "nvidia-cudnn-cu12")
        .unwrap();
    assert_eq!((cudnn["version"].as_str(), cudnn["origin"].as_str()), (Some("8.9.7.29"), Some("recipe-pin")));
}

fn pin(name: &str, version: &str) -> Pinned {
    Pinned {
        name: PackageName::from_str(name).unwrap(),
        version: version.parse().unwrap(),
        hashes: vec![format!("{:064x}", name.len())],
    }
}

/// torch 2.1.0's pins from the knowledge base, as a resolution would give them.
fn torch_2_1_pins() -> Vec<Pinned> {
    let release = kb::torch_release(&"2.1.0".parse().unwrap()).unwrap();
    let mut pins: Vec<Pinned> = release.pypi_variant().unwrap().pins.iter().map(|(n, v)| pin(n, v)).collect();
    pins.push(pin("torch", "2.1.0"));
    pins
}

fn recipe_text(python: &str, packages: &str, extra: &str) -> Recipe {
    let text = format!(
        "[image]\nname = \"t\"\n[base]\nscratch = true\n[python]\nversion = \"{python}\"\npackages = {packages}\n{extra}"
    );
    Recipe::parse("t.toml", &text).unwrap()
}

fn resolved_findings(recipe: &Recipe, pins: &[Pinned]) -> Vec<Finding> {
    let target = stackbuild_python::targets(recipe).remove(0);
    let facts = facts::Facts::from_pins(recipe, &target, pins, None);
    rules::run(&facts, rules::Evidence::Found)
}

/// The real-world case: `nvidia-cusparse-cu12` asks for `nvidia-nvjitlink-cu12` without a
/// version, and the resolver takes the newest, from CUDA 12.9; numpy 2 comes in through a
/// loose range.
#[test]
fn resolved_stack_mixed_minor_and_numpy() {
    let recipe = recipe_text("3.11", r#"["torch==2.1.0", "numpy>=1.24"]"#, "");
    let mut pins = torch_2_1_pins();
    pins.push(pin("nvidia-nvjitlink-cu12", "12.9.86"));
    pins.push(pin("numpy", "2.0.0"));
    let findings = resolved_findings(&recipe, &pins);
    let kinds: Vec<_> = findings.iter().map(|f| (f.severity, f.kind)).collect();
    assert_eq!(
        kinds,
        [(Severity::Error, FindingKind::NumpyAbi), (Severity::Warning, FindingKind::MixedCudaMinor)]
    );
    assert!(findings[1].fix.as_deref().unwrap().contains("nvidia-nvjitlink-cu12==12.1.105"));
    insta::assert_snapshot!(findings_text(&findings));
}

/// A library older than the rest breaks its newer dependents with undefined versioned symbols
/// (a resolution can pick it: the table's pins are trusted less than the resolver's).
#[test]
fn older_library_warns_of_undefined_symbols() {
    let recipe = recipe_text("3.11", r#"["torch==2.5.0"]"#, "");
    let release = kb::torch_release(&"2.5.0".parse().unwrap()).unwrap();
    let mut pins: Vec<Pinned> = release
        .pypi_variant()
        .unwrap()
        .pins
        .iter()
        .map(|(n, v)| if n == "nvidia-nvjitlink-cu12" { pin(n, "12.1.105") } else { pin(n, v) })
        .collect();
    pins.push(pin("torch", "2.5.0"));
    let findings = resolved_findings(&recipe, &pins);
    let [warning] = findings.as_slice() else { panic!("{}", findings_text(&findings)) };
    assert_eq!(warning.kind, FindingKind::MixedCudaMinor);
    assert!(warning.message.contains("undefined versioned symbols"), "{}", warning.message);
    // torch 2.5.0's own exact requirement is the fix.
    assert!(warning.fix.as_deref().unwrap().contains("nvidia-nvjitlink-cu12==12.4.127"), "{:?}", warning.fix);
    insta::assert_snapshot!(findings_text(&findings));
}

/// The recipe pinning another version of one of torch's exact requirements is an error.
#[test]
fn pin_against_a_torch_requirement_is_an_error() {
    let recipe =
        recipe_text("3.11", r#"["torch==2.5.0"]"#, "constraints = [\"nvidia-nvjitlink-cu12==12.1.105\"]\n");
    let report = offline(&recipe);
    assert_eq!(kinds(&report, Severity::Error), ["torch-requirement"]);
    // Blamed once: not again as a mixed CUDA minor.
    assert!(kinds(&report, Severity::Warning).is_empty());
}

/// A resolution that disagrees with the table about cuDNN (another build of the same torch
/// version) is a warning: without the wheel, the resolver's view of Requires-Dist wins.
#[test]
fn resolved_disagreement_with_the_table_is_a_warning() {
    let recipe = recipe_text("3.11", r#"["torch==2.1.0"]"#, "");
    let mut pins: Vec<Pinned> =
        torch_2_1_pins().into_iter().filter(|p| p.name.as_ref() != "nvidia-cudnn-cu12").collect();
    pins.push(pin("nvidia-cudnn-cu12", "8.9.7.29"));
    let findings = resolved_findings(&recipe, &pins);
    let [f] = findings.as_slice() else { panic!("{}", findings_text(&findings)) };
    assert_eq!((f.severity, f.kind), (Severity::Warning, FindingKind::CudnnMismatch));
}

#[test]
fn unknown_and_unpinned_torch_are_notes() {
    let report = offline(&recipe_text("3.11", r#"["torch==1.13.1"]"#, ""));
    assert_eq!(kinds(&report, Severity::Note), ["unknown-torch"]);
    assert!(report.compatible);
    let report = offline(&recipe_text("3.11", r#"["torch>=2.1, <2.2"]"#, ""));
    assert_eq!(kinds(&report, Severity::Note), ["torch-unpinned"]);
}

#[test]
fn cpu_builds_are_not_unpublished_cuda_builds() {
    let report = offline(&recipe_text("3.11", r#"["torch==2.1.0+cpu"]"#, ""));
    assert!(report.findings.is_empty(), "{}", report.to_text());
    assert!(report.stacks[0].requirements.is_empty());
}

#[test]
fn markers_select_the_requirements_of_the_target() {
    let recipe = recipe_text(
        "3.11",
        r#"["torch==2.1.0", "nvidia-cudnn-cu12==8.9.7.29; platform_machine == 'aarch64'"]"#,
        "",
    );
    assert!(offline(&recipe).compatible);
}

/// A fake torch wheel whose METADATA pins another cuDNN than the table: the wheel wins.
fn fake_torch_wheel(path: &Path) {
    let metadata = "Metadata-Version: 2.1\nName: torch\nVersion: 2.1.0\n\
        Requires-Dist: filelock\n\
        Requires-Dist: nvidia-cudnn-cu12 (==8.9.9.9) ; platform_system == \"Linux\" and platform_machine == \"x86_64\"\n\
        Requires-Dist: nvidia-cublas-cu12==12.1.3.1; platform_system == \"Linux\" and\n \
         platform_machine == \"x86_64\"\n\
        Requires-Dist: nvidia-foo-cu12==1.0; platform_machine == \"aarch64\"\n\
        Requires-Dist: opt-einsum>=3.3; extra == \"opt-einsum\"\n\
        Requires-Dist: triton==2.1.0; extra == \"dynamo\"\n\
        \n\
        Requires-Dist: not-a-header==1\n";
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    zip.start_file("torch/__init__.py", SimpleFileOptions::default()).unwrap();
    zip.start_file("torch-2.1.0.dist-info/METADATA", SimpleFileOptions::default()).unwrap();
    zip.write_all(metadata.as_bytes()).unwrap();
    zip.finish().unwrap();
}

#[test]
fn reads_requires_dist_from_a_wheel() {
    let dir = tempfile::tempdir().unwrap();
    let wheel = dir.path().join("torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl");
    fake_torch_wheel(&wheel);
    let target = Target::new("3.11".parse().unwrap(), Platform::LinuxAmd64);
    let requires = wheel_requires(&wheel, &target).unwrap();
    let text: Vec<String> = requires.iter().map(|(n, v)| format!("{n}=={v}")).collect();
    assert_eq!(text, ["nvidia-cublas-cu12==12.1.3.1", "nvidia-cudnn-cu12==8.9.9.9"]);
    let arm = Target::new("3.11".parse().unwrap(), Platform::LinuxArm64);
    let text: Vec<String> = wheel_requires(&wheel, &arm).unwrap().keys().cloned().collect();
    assert_eq!(text, ["nvidia-foo-cu12"]);
    assert!(wheel_requires(&dir.path().join("missing.whl"), &target).is_err());
}

/// A current lock is used as is (no resolver), and the torch wheel in the cache is read.
#[test]
fn locked_stack_prefers_the_wheel_at_hand() {
    let dir = tempfile::tempdir().unwrap();
    let recipe_path = dir.path().join("r.toml");
    std::fs::write(
        &recipe_path,
        "[image]\nname = \"r\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
         packages = [\"torch==2.1.0\"]\n[cuda]\nversion = \"12.1\"\ncudnn = \"8.9.2.26\"\n",
    )
    .unwrap();
    let recipe = Recipe::load(&recipe_path).unwrap();
    let cache = dir.path().join("cache");
    let sha = "ab".repeat(32);
    let filename = "torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl";
    fake_torch_wheel(&cache.join("artifacts").join(&sha).join(filename));
    let mut artifacts: Vec<Artifact> = torch_2_1_pins()
        .into_iter()
        .filter(|p| p.name.as_ref() != "torch" && p.name.as_ref() != "nvidia-cudnn-cu12")
        .map(|p| Artifact {
            filename: format!(
                "{}-{}-py3-none-manylinux1_x86_64.whl",
                p.name.as_ref().replace('-', "_"),
                p.version
            ),
            sha256: p.hashes[0].clone(),
            size: 1,
            path: dir.path().join("unused"),
            name: p.name,
            version: p.version,
        })
        .collect();
    artifacts.push(Artifact {
        name: PackageName::from_str("torch").unwrap(),
        version: "2.1.0".parse().unwrap(),
        filename: filename.into(),
        sha256: sha,
        size: 1,
        path: dir.path().join("unused"),
    });
    artifacts.push(Artifact {
        name: PackageName::from_str("nvidia-cudnn-cu12").unwrap(),
        version: "8.9.9.9".parse().unwrap(),
        filename: "nvidia_cudnn_cu12-8.9.9.9-py3-none-manylinux1_x86_64.whl".into(),
        sha256: "cd".repeat(32),
        size: 1,
        path: dir.path().join("unused"),
    });
    let mut lock = Lock::new(&recipe);
    lock.set_packages(Platform::LinuxAmd64, &artifacts);
    lock.save(stackbuild_python::Lock::path_for(&recipe.path)).unwrap();

    // Not offline, yet no resolver runs: the lock is current.
    let report = check(&recipe, &CheckOptions { offline: false, cache_dir: Some(cache) }).unwrap();
    let [stack] = report.stacks.as_slice() else { panic!() };
    assert_eq!(stack.resolution, Resolution::Lock { path: stackbuild_python::Lock::path_for(&recipe.path) });
    let torch = stack.torch.as_ref().unwrap();
    assert_eq!(torch.requires_from.as_deref(), Some(format!("Requires-Dist of {filename}").as_str()));
    assert_eq!(torch.cudnn.as_deref(), Some("8.9.9.9"));
    // The locked cuDNN matches the wheel's pin; the recipe's [cuda] cudnn does not.
    let [f] = report.findings.as_slice() else { panic!("{}", report.to_text()) };
    assert_eq!(f.kind, FindingKind::CudnnMismatch);
    assert!(f.message.contains(&format!("(Requires-Dist of {filename})")), "{}", f.message);
    // The same requirements the build derives from the same lock.
    let locked: Vec<_> = lock.packages_for(Platform::LinuxAmd64).collect();
    let packages: Vec<crate::derive::Package<'_>> = locked
        .iter()
        .map(|p| crate::derive::Package {
            name: p.name.as_ref(),
            version: &p.version,
            platform: Platform::LinuxAmd64,
        })
        .collect();
    assert_eq!(stack.requirements, crate::derive::requirements(&packages, &recipe.host));
}

#[test]
fn specifier_sets_that_cannot_meet() {
    let disjoint = rules::disjoint_for_tests;
    assert!(disjoint(">=2", "<2"));
    assert!(disjoint("==2.0.0", "<2"));
    assert!(disjoint("~=2.1", "<2"));
    assert!(disjoint("==2.*", "<2"));
    assert!(disjoint(">2", "<=2"));
    assert!(!disjoint(">=1.24", "<2"));
    assert!(!disjoint("<3", "<2"));
    assert!(!disjoint("==1.26.4", "<2"));
    assert!(!disjoint(">=2", ""));
}

#[test]
fn cuda_release_of_library_wheels() {
    let cuda = |name: &str, v: &str| library_cuda(name, &PackageVersion::from_str(v).unwrap());
    assert_eq!(cuda("nvidia-cuda-runtime-cu12", "12.1.105"), Some((12, 1)));
    assert_eq!(cuda("nvidia-nvjitlink-cu12", "12.9.86"), Some((12, 9)));
    assert_eq!(cuda("nvidia-cublas-cu12", "12.4.5.8"), Some((12, 4)));
    assert_eq!(cuda("nvidia-curand-cu12", "10.3.2.106"), Some((12, 1)));
    assert_eq!(cuda("nvidia-cublas-cu11", "11.11.3.6"), Some((11, 8)));
    // Versioned apart from CUDA, or not known to the table.
    assert_eq!(cuda("nvidia-cudnn-cu12", "8.9.2.26"), None);
    assert_eq!(cuda("nvidia-nccl-cu12", "2.18.1"), None);
    assert_eq!(cuda("nvidia-curand-cu12", "10.9.9.9"), None);
    assert_eq!(cuda("numpy", "1.26.4"), None);
}

/// `fix_version` stands NVRTC's version in for nvJitLink's where the table lacks it; that holds
/// only while NVIDIA ships both with one version, which every row listing both shows.
#[test]
fn nvjitlink_ships_with_the_nvrtc_version() {
    let rows: Vec<_> = kb::all_cuda_components().iter().filter(|r| r.nvjitlink.is_some()).collect();
    assert!(!rows.is_empty());
    for row in rows {
        assert_eq!(row.nvjitlink.as_deref(), Some(row.nvrtc.as_str()), "CUDA {}", row.cuda);
    }
}

/// torch 2.11's wheel on the Python Package Index is a CUDA 13 build through `cuda-toolkit[...]==13.0.2`: its stack
/// needs CUDA 13.0, on `x86_64` and (from 2.11) on `aarch64` too.
#[test]
fn torch_2_11_derives_cuda_13() {
    for platform in ["linux/amd64", "linux/arm64"] {
        let recipe = Recipe::parse(
            "t.toml",
            &format!(
                "[image]\nname = \"t\"\nplatforms = [\"{platform}\"]\n[base]\nscratch = true\n[python]\nversion = \"3.12\"\npackages = [\"torch==2.11.0\"]\n"
            ),
        )
        .unwrap();
        let report = offline(&recipe);
        assert!(report.compatible, "{}", report.to_text());
        let stack = &report.stacks[0];
        assert_eq!(stack.cuda.as_deref(), Some("13.0"), "{platform}");
        let cuda = &stack.requirements[0];
        assert_eq!(cuda.variable, "NVIDIA_REQUIRE_CUDA");
        // The release wheels carry cubins only (their fat binaries: no PTX), so every GPU they
        // run on runs a cubin, which CUDA 13's minor-version compatibility lets any R580 run.
        assert_eq!(cuda.expr, "cuda>=13.0 driver>=580", "{platform}");
        let torch = stack.torch.as_ref().unwrap();
        assert_eq!(torch.cudnn.as_deref(), Some("9.19.0.56"));
        let arch = stack.requirements.iter().find(|r| r.variable == "STACKBUILD_REQUIRE_ARCH").unwrap();
        stackcontract::require::Expr::parse(&arch.expr).unwrap();
        // Thor (11.0) has a cubin only in the aarch64 wheel.
        assert_eq!(arch.expr.contains("arch<11.0"), platform == "linux/amd64", "{platform}: {}", arch.expr);
    }
}

/// The same stack as a resolution gives it: CUDA 13 wheels without a `-cu13` suffix.
#[test]
fn resolved_cuda_13_wheels_are_seen() {
    let recipe =
        recipe_text("3.12", r#"["torch==2.11.0"]"#, "[cuda]\nversion = \"13.0\"\ncudnn = \"9.19\"\n");
    let pins = [
        pin("torch", "2.11.0"),
        pin("cuda-toolkit", "13.0.2"),
        pin("nvidia-cuda-runtime", "13.0.96"),
        pin("nvidia-cublas", "13.1.0.3"),
        pin("nvidia-nvjitlink", "13.0.88"),
        pin("nvidia-cudnn-cu13", "9.19.0.56"),
    ];
    let findings = resolved_findings(&recipe, &pins);
    assert!(findings.is_empty(), "{}", findings_text(&findings));
    // A newer nvJitLink beside the 13.0 libraries is a mixed minor, as with -cu12 names.
    let mut pins = pins.to_vec();
    pins.retain(|p| p.name.as_ref() != "nvidia-nvjitlink");
    pins.push(pin("nvidia-nvjitlink", "13.2.86"));
    let findings = resolved_findings(&recipe, &pins);
    let kinds: Vec<_> = findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [FindingKind::MixedCudaMinor], "{}", findings_text(&findings));
}

/// A torch release the table does not know is checked from what its metadata resolved to
/// (CUDA runtime, cuDNN), not skipped.
#[test]
fn unknown_torch_is_checked_from_its_wheels() {
    let recipe = recipe_text("3.12", r#"["torch==2.99.0"]"#, "[cuda]\nversion = \"13.0\"\ncudnn = \"9.1\"\n");
    let pins =
        [pin("torch", "2.99.0"), pin("nvidia-cuda-runtime", "13.0.96"), pin("nvidia-cudnn-cu13", "9.30.0.1")];
    let findings = resolved_findings(&recipe, &pins);
    let kinds: Vec<_> = findings.iter().map(|f| (f.severity, f.kind)).collect();
    assert_eq!(
        kinds,
        [(Severity::Note, FindingKind::UnknownTorch), (Severity::Error, FindingKind::CudnnMismatch)],
        "{}",
        findings_text(&findings)
    );
    assert!(findings[0].message.contains("build time"), "{}", findings[0].message);
    let target = stackbuild_python::targets(&recipe).remove(0);
    let facts = facts::Facts::from_pins(&recipe, &target, &pins, None);
    let reqs = crate::derive::requirements(&facts.derive_packages(), &recipe.host);
    assert_eq!(reqs[0].expr, "cuda>=13.0 driver>=580");
}

/// torch 2.4 had a CUDA 12.4 build (RELEASE.md): `torch==2.4.0+cu124` is compatible.
#[test]
fn torch_2_4_cu124_is_compatible() {
    let report = offline(&recipe_text(
        "3.11",
        r#"["torch==2.4.0+cu124"]"#,
        "[cuda]\nversion = \"12.4\"\ncudnn = \"9.1.0.70\"\n",
    ));
    assert!(report.compatible, "{}", report.to_text());
    assert!(report.findings.is_empty(), "{}", findings_text(&report.findings));
    let torch = report.stacks[0].torch.as_ref().unwrap();
    assert_eq!((torch.variant.as_deref(), torch.cudnn.as_deref()), (Some("cu124"), Some("9.1.0.70")));
}

/// A CUDA release newer than the driver table: the newest known floor, and a warning.
#[test]
fn newer_cuda_is_a_warning_not_none() {
    let recipe = recipe_text("3.12", r#"["nvidia-cuda-runtime==13.9.10"]"#, "");
    let findings = resolved_findings(&recipe, &[pin("nvidia-cuda-runtime", "13.9.10")]);
    let kinds: Vec<_> = findings.iter().map(|f| (f.severity, f.kind)).collect();
    assert_eq!(kinds, [(Severity::Warning, FindingKind::UnknownCuda)], "{}", findings_text(&findings));
}
