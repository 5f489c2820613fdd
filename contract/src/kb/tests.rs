//! Invariants of the embedded tables and spot values from the public tables of NVIDIA, the torch
//! project and the PCI ID Repository.

use std::collections::BTreeSet;
use std::str::FromStr;

use super::*;

fn cuda(s: &str) -> CudaVersion {
    s.parse().unwrap()
}
fn driver(s: &str) -> DriverVersion {
    s.parse().unwrap()
}
fn cc(s: &str) -> ComputeCapability {
    s.parse().unwrap()
}
fn py(s: &str) -> PythonVersion {
    s.parse().unwrap()
}
fn pkg(s: &str) -> PackageVersion {
    PackageVersion::from_str(s).unwrap()
}

#[test]
fn embedded_tables_parse() {
    if let Err(e) = validate() {
        panic!("{e}");
    }
    assert!(!all_gpus().is_empty());
    assert!(!cuda_toolkits().is_empty());
    assert!(!driver_branches().is_empty());
    assert!(!torch_releases().is_empty());
    assert!(!cudnn_lines().is_empty());
    assert!(!all_cuda_components().is_empty());
    assert!(!jetson_socs().is_empty());
}

#[test]
fn malformed_tables_are_errors_not_panics() {
    let broken = Tables { gpus: "[[gpu]]\nname = 3\n", ..TABLES };
    let err = Kb::parse(broken).unwrap_err();
    assert!(matches!(err, KbError::Parse { table: "gpus.toml", .. }), "{err}");

    let unknown_field = Tables { cudnn: "[[line]]\nline = \"9.1\"\nsourse = \"typo\"\n", ..TABLES };
    assert!(matches!(Kb::parse(unknown_field), Err(KbError::Parse { table: "cudnn.toml", .. })));

    let no_source = Tables {
        driver_branches: "[[branch]]\nbranch = 535\nmax_cuda = \"12.2\"\nsource = \" \"\n",
        ..TABLES
    };
    let err = Kb::parse(no_source).unwrap_err();
    assert_eq!(err.to_string(), r#"knowledge base table driver_branches.toml, row "535": empty source"#);

    let bad_version = Tables {
        cuda_driver: "minor_compat = []\n[[toolkit]]\ncuda = \"12.x\"\ndriver = \"530\"\nsource = \"s\"\n",
        ..TABLES
    };
    let err = Kb::parse(bad_version).unwrap_err();
    assert!(err.to_string().contains("12.x"), "{err}");

    let bad_soc = Tables {
        jetson_socs: "[[soc]]\ncompatible = \"tegra234\"\nname = \"Jetson Orin\"\nmodules = [\"Jetson AGX Orin\"]\n\
                      compute_capability = \"8.7\"\narchitecture = \"Ampere\"\nbrand = \"unknown\"\nsource = \"s\"\n",
        ..TABLES
    };
    let err = Kb::parse(bad_soc).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"knowledge base table jetson_socs.toml, row "tegra234": compatible is not of the form nvidia,tegra<N>"#
    );
    let twice = format!("{}\n{}", TABLES.jetson_socs, TABLES.jetson_socs);
    let leaked: &'static str = Box::leak(twice.into_boxed_str());
    let err = Kb::parse(Tables { jetson_socs: leaked, ..TABLES }).unwrap_err();
    assert!(err.to_string().ends_with("listed twice"), "{err}");

    let duplicate_id = format!("{}\n{}", TABLES.gpus, TABLES.gpus);
    let leaked: &'static str = Box::leak(duplicate_id.into_boxed_str());
    let err = Kb::parse(Tables { gpus: leaked, ..TABLES }).unwrap_err();
    assert!(err.to_string().contains("is also listed for"), "{err}");
}

#[test]
fn every_row_names_its_source() {
    let mut sources: Vec<&str> = Vec::new();
    sources.extend(cuda_toolkits().iter().map(|r| r.source.as_str()));
    sources.extend(kb().minor_compat.iter().map(|r| r.source.as_str()));
    sources.extend(driver_branches().iter().map(|r| r.source.as_str()));
    sources.extend(all_gpus().iter().map(|r| r.source.as_str()));
    sources.extend(cudnn_lines().iter().map(|r| r.source.as_str()));
    sources.extend(all_cuda_components().iter().map(|r| r.source.as_str()));
    sources.extend(jetson_socs().iter().map(|r| r.source.as_str()));
    for release in torch_releases() {
        sources.push(&release.source);
        sources.extend(release.variants.iter().map(|v| v.source.as_str()));
    }
    assert!(sources.iter().all(|s| !s.trim().is_empty()));
}

#[test]
fn host_table_rows_cite_public_sources() {
    // No row may cite a file outside the repository (or this repository's own notes).
    let mut sources: Vec<&str> = Vec::new();
    sources.extend(cuda_toolkits().iter().map(|r| r.source.as_str()));
    sources.extend(kb().minor_compat.iter().map(|r| r.source.as_str()));
    sources.extend(driver_branches().iter().map(|r| r.source.as_str()));
    sources.extend(all_gpus().iter().map(|r| r.source.as_str()));
    sources.extend(jetson_socs().iter().map(|r| r.source.as_str()));
    sources.extend(l4t_releases().iter().map(|r| r.source.as_str()));
    for s in sources {
        assert!(!s.contains("shared/") && !s.contains("reference/"), "{s}");
    }
}

#[test]
fn cuda_min_driver_is_monotone() {
    let rows = cuda_toolkits();
    for pair in rows.windows(2) {
        assert!(pair[0].cuda < pair[1].cuda, "CUDA rows out of order at {}", pair[1].cuda);
        assert!(
            pair[0].driver <= pair[1].driver,
            "driver decreases from {} to {}",
            pair[0].cuda,
            pair[1].cuda
        );
    }
    for row in rows {
        for update in &row.updates {
            assert!(update.driver >= row.driver, "{} needs less than its GA", update.cuda);
        }
        // Minor-version compatibility never asks more than a toolkit of that major needs, except
        // for 11.0, whose GA driver (450.51.05) predates the 11.x compatibility floor (450.80.02).
        let min = cuda_min_driver(&row.cuda).unwrap();
        if row.cuda != cuda("11.0") {
            assert!(min.minor_compat_driver <= min.toolkit_driver, "{}", row.cuda);
        }
    }
    let majors: Vec<u64> = kb().minor_compat.iter().map(|r| r.major).collect();
    assert_eq!(majors, [11, 12, 13]);
}

#[test]
fn driver_branch_max_cuda_is_monotone() {
    let rows = driver_branches();
    for pair in rows.windows(2) {
        assert!(pair[0].branch < pair[1].branch, "branches out of order at {}", pair[1].branch);
        if let (Some(a), Some(b)) = (&pair[0].max_cuda, &pair[1].max_cuda) {
            assert!(a < b, "max CUDA does not grow at {}", pair[1].branch);
        }
    }
    // Only branches newer than every verified one may lack a verified CUDA version.
    let last_verified = rows.iter().rposition(|r| r.max_cuda.is_some()).unwrap();
    assert!(rows[..last_verified].iter().all(|r| r.max_cuda.is_some()));
    // Every toolkit's own GA driver reports at least that toolkit.
    for toolkit in cuda_toolkits() {
        let max = driver_max_cuda(&toolkit.driver).unwrap();
        assert_eq!(max.major_minor(), toolkit.cuda.major_minor(), "driver {}", toolkit.driver);
    }
}

#[test]
fn cuda_min_driver_spot_values() {
    let row = cuda_min_driver(&cuda("12.1")).unwrap();
    assert_eq!(row.toolkit_driver, driver("530.30.02"));
    assert_eq!(row.minor_compat_driver, driver("525.60.13"));
    // The origin documents' "12.1 needs >= 515.48.07" is wrong.
    assert_ne!(row.toolkit_driver, driver("515.48.07"));
    assert!(row.source.contains("table 3") && row.source.contains("table 2"));

    assert_eq!(cuda_min_driver(&cuda("12.2")).unwrap().toolkit_driver, driver("535.54.03"));
    let u2 = cuda_min_driver(&cuda("12.2.2")).unwrap();
    assert_eq!((u2.cuda.as_str(), u2.toolkit_driver.as_str()), ("12.2.2", "535.104.05"));
    // Update releases whose minimum differs from GA (CUDA release notes, table 3).
    for (release, minimum) in [
        ("12.2.1", "535.86.09"),
        ("12.4.1", "550.54.15"),
        ("12.8.1", "570.124.06"),
        ("12.6.2", "560.35.03"),
        ("12.6.3", "560.35.05"),
        ("13.0.2", "580.95.05"),
        ("13.0.3", "580.126.20"),
        ("11.4.4", "470.82.01"),
        ("11.7.1", "515.48.07"),
    ] {
        let row = cuda_min_driver(&cuda(release)).unwrap();
        assert_eq!(row.toolkit_driver, driver(minimum), "{release}");
        assert!(row.unverified.is_none());
    }
    // An update the table lists no value for has its GA minimum.
    assert_eq!(cuda_min_driver(&cuda("12.1.1")).unwrap().cuda, cuda("12.1"));
    assert_eq!(cuda_min_driver(&cuda("13.3")).unwrap().toolkit_driver, driver("610.43.02"));

    assert_eq!(cuda_min_driver(&cuda("11.0")).unwrap().minor_compat_driver, driver("450.80.02"));
    assert_eq!(cuda_min_driver(&cuda("11.8")).unwrap().toolkit_driver, driver("520.61.05"));
    assert_eq!(cuda_min_driver(&cuda("12.8")).unwrap().toolkit_driver, driver("570.26"));
    assert_eq!(cuda_min_driver(&cuda("13.0")).unwrap().minor_compat_driver, driver("580"));
    assert!(cuda_min_driver(&cuda("12.7")).is_none(), "there is no 12.7 toolkit");
    // Before CUDA 11 there is no minor-version compatibility.
    let old = cuda_min_driver(&cuda("10.2")).unwrap();
    assert_eq!((old.toolkit_driver.as_str(), old.minor_compat_driver.as_str()), ("440.33", "440.33"));
    // CUDA 7.5 and 8.0 (the CUDA 11.0 notes' "CUDA Toolkit and Compatible Driver Versions"): a
    // legacy CUDA_VERSION=8 image needs 367.48, as NVIDIA's hook requires it.
    let cuda8 = cuda_min_driver(&cuda("8.0")).unwrap();
    assert_eq!((cuda8.toolkit_driver.as_str(), cuda8.minor_compat_driver.as_str()), ("367.48", "367.48"));
    assert!(cuda8.unverified.is_none() && cuda8.source.contains("8.0.44"));
    assert_eq!(cuda_min_driver(&cuda("8")).unwrap().toolkit_driver, driver("367.48"));
    assert_eq!(cuda_min_driver(&cuda("8.0.44")).unwrap().toolkit_driver, driver("367.48"));
    assert_eq!(cuda_min_driver(&cuda("8.0.61")).unwrap().toolkit_driver, driver("375.26"));
    let cuda75 = cuda_min_driver(&cuda("7.5")).unwrap();
    assert_eq!((cuda75.toolkit_driver.as_str(), cuda75.minor_compat_driver.as_str()), ("352.31", "352.31"));
    assert!(cuda_min_driver(&cuda("7.0")).is_none(), "older than the table");
    assert_eq!(cuda_toolkits().first().map(|t| t.cuda.clone()), Some(cuda("7.5")));
    // Releases without a verified minimum, and releases newer than the table, get the newest
    // verified floor, flagged, never an invented number and never "none".
    for newer in ["13.4", "13.5", "13.6.1", "14.0"] {
        let row = cuda_min_driver(&cuda(newer)).unwrap();
        assert_eq!(row.toolkit_driver, driver("610.43.02"), "{newer}");
        assert!(row.unverified.as_deref().is_some_and(|w| w.contains("lower bound")), "{newer}");
    }
    assert_eq!(cuda_min_driver(&cuda("13.4")).unwrap().minor_compat_driver, driver("580"));
    assert!(cuda_min_driver(&cuda("13.4")).unwrap().unverified.unwrap().contains("not verified"));
    assert!(cuda_min_driver(&cuda("14.0"))
        .unwrap()
        .unverified
        .unwrap()
        .contains("newer than the knowledge base"));
    // 13.4's numbering: 13.4.1 is the GA and 13.4.2 Update 1; neither has a verified minimum, and
    // the row says so, naming both.
    for release in ["13.4.1", "13.4.2", "13.4.3"] {
        let row = cuda_min_driver(&cuda(release)).unwrap();
        assert_eq!(row.toolkit_driver, driver("610.43.02"), "{release}");
        assert!(row.unverified.as_deref().is_some_and(|w| w.contains("not verified")), "{release}");
    }
    let numbering = &cuda_min_driver(&cuda("13.4.1")).unwrap().source;
    assert!(
        numbering.contains("versioned 13.4.1") && numbering.contains("Update 1 is 13.4.2"),
        "{numbering}"
    );
}

#[test]
fn driver_cuda_is_exact_only_for_verified_branches() {
    let exact = |d: &str| match driver_cuda(&driver(d)) {
        DriverCuda::Exact { cuda, .. } => Some(cuda),
        DriverCuda::Bounded { .. } => None,
    };
    assert_eq!(exact("610.43.02"), Some(cuda("13.3")));
    assert_eq!(exact("535.104.05"), Some(cuda("12.2")));
    assert_eq!(exact("418.39"), Some(cuda("10.1")));
    assert_eq!(exact("384.81"), Some(cuda("9.0")));
    let bounded = |d: &str| match driver_cuda(&driver(d)) {
        DriverCuda::Bounded { at_least, below, why } => (at_least, below, why),
        DriverCuda::Exact { .. } => panic!("{d} is exact"),
    };
    // R615/R620 exist but their CUDA is not verified: at least 13.3, no upper bound known.
    let (low, below, why) = bounded("615.10");
    assert_eq!((low, below), (Some(cuda("13.3")), None));
    assert!(why.contains("not verified"), "{why}");
    // Newer than the table: at least the newest verified value.
    let (low, below, why) = bounded("650.1");
    assert_eq!((low, below), (Some(cuda("13.3")), None));
    assert!(why.contains("newer than the knowledge base"), "{why}");
    // Between rows: bounded by the toolkit tables on both sides.
    assert_eq!(bounded("540.1").0, Some(cuda("12.2")));
    assert_eq!(bounded("540.1").1, Some(cuda("12.3")));
    // 375 (CUDA 8.0 GA2's driver) has no row: at least 8.0 (R367), below 9.0.
    assert_eq!(bounded("375.26").0, Some(cuda("8.0")));
    assert_eq!(bounded("375.26").1, Some(cuda("9.0")));
    assert_eq!(exact("367.48"), Some(cuda("8.0")));
    assert_eq!(exact("352.31"), Some(cuda("7.5")));
    // Older than the table: no lower bound, but below CUDA 7.5.
    assert_eq!(bounded("346.46").0, None);
    assert_eq!(bounded("346.46").1, Some(cuda("7.5")));
}

#[test]
fn branch_lifecycle_and_architectures() {
    let eol = |b: &str| driver_branch(&driver(b)).unwrap().eol.clone();
    // R580: end of life June 2028 (not the superseded August 2028).
    assert_eq!(eol("580.95.05").as_deref(), Some("2028-06"));
    assert_eq!(eol("620.1").as_deref(), Some("2029-09"));
    assert!(driver_branch(&driver("620.1")).unwrap().lts);
    assert_eq!(architecture_support("Kepler").unwrap().last_branch, 470);
    for arch in ["Maxwell", "Pascal", "Volta"] {
        assert_eq!(architecture_support(arch).unwrap().last_branch, 580, "{arch}");
    }
    assert!(architecture_support("Turing").is_none());
    assert_eq!(newest_branch().unwrap().branch, 620);
}

#[test]
fn l4t_releases_map_to_cuda() {
    let l4t = |r: &str| l4t_release(&cuda(r)).map(|row| row.cuda.to_string());
    assert_eq!(l4t("32.7.1").as_deref(), Some("10.2"));
    assert_eq!(l4t("32.2.1").as_deref(), Some("10.0"));
    assert_eq!(l4t("35.4.1").as_deref(), Some("11.4"));
    assert_eq!(l4t("36.3").as_deref(), Some("12.2"));
    assert_eq!(l4t("36.4.3").as_deref(), Some("12.6"));
    assert_eq!(l4t("38.2.1").as_deref(), Some("13.0"));
    assert_eq!(l4t("28.2"), None, "a line the table lacks is not guessed");
    assert_eq!(l4t("40.1"), None);
    // JetPack 7.2 (L4T R39.2): CUDA 13.2 on Thor and on Orin.
    assert_eq!(l4t("39.2").as_deref(), Some("13.2"));
    assert_eq!(l4t("39.2.1").as_deref(), Some("13.2"));
    assert_eq!(l4t("39.1"), None, "before the first release of the line");
    let jp72 = l4t_release(&cuda("39.2")).unwrap();
    assert_eq!(jp72.jetpack, "7.2");
    assert!(jp72.source.contains("Orin") && jp72.source.contains("Thor"), "{}", jp72.source);
    assert_eq!(l4t_release(&cuda("32.7.1")).unwrap().cuda_compat, Some(false));
    assert_eq!(l4t_release(&cuda("35.4.1")).unwrap().cuda_compat, Some(true));
}

#[test]
fn l4t_rows_hold_for_every_soc_of_their_release() {
    // An L4T row names no SoC: R38 is Thor's alone, R39.2 is Thor's and Orin's, and neither SoC
    // caps the CUDA upgrade below what R39.2 ships, so a JetPack 7.2 Orin host has CUDA 13.2.
    let jp72 = l4t_release(&cuda("39.2")).unwrap();
    for compatible in ["nvidia,tegra234", "nvidia,tegra264"] {
        let soc = jetson_soc(compatible).unwrap();
        assert!(soc.cuda_compat_below.as_ref().is_none_or(|below| jp72.cuda < *below), "{compatible}");
    }
    assert_eq!(jp72.cuda, cuda("13.2"));
    // Every L4T line ships a CUDA the table knows the minimum driver of.
    for row in l4t_releases() {
        let known = cuda_min_driver(&row.cuda);
        assert!(known.is_some_and(|r| r.unverified.is_none()), "L4T R{}: CUDA {}", row.release, row.cuda);
    }
    let releases: Vec<&CudaVersion> = l4t_releases().iter().map(|r| &r.release).collect();
    assert!(releases.windows(2).all(|w| w[0] < w[1]), "L4T rows out of order: {releases:?}");
}

#[test]
fn driver_max_cuda_spot_values() {
    assert_eq!(driver_max_cuda(&driver("535.104.05")), Some(cuda("12.2")));
    assert_eq!(driver_max_cuda(&driver("470.57.02")), Some(cuda("11.4")));
    assert_eq!(driver_max_cuda(&driver("470")), Some(cuda("11.4")));
    assert_eq!(driver_max_cuda(&driver("565.57.01")), Some(cuda("12.7")));
    assert_eq!(driver_max_cuda(&driver("570.26")), Some(cuda("12.8")));
    assert_eq!(driver_max_cuda(&driver("595.45.04")), Some(cuda("13.2")));
    // Between rows: the row below; newer than the table or unverified: the newest verified row.
    assert_eq!(driver_max_cuda(&driver("540.1")), Some(cuda("12.2")));
    assert_eq!(driver_max_cuda(&driver("418.87.01")), Some(cuda("10.1")));
    assert_eq!(driver_max_cuda(&driver("610.43.02")), Some(cuda("13.3")));
    assert_eq!(driver_max_cuda(&driver("620.1")), Some(cuda("13.3")));
    assert_eq!(driver_max_cuda(&driver("375.26")), Some(cuda("8.0")));
    assert_eq!(driver_max_cuda(&driver("352.31")), Some(cuda("7.5")));
    assert_eq!(driver_max_cuda(&driver("346.46")), None);
    assert!(driver_branch(&driver("535.230.02")).unwrap().lts);
    assert!(driver_branch(&driver("580.65.06")).unwrap().lts);
    assert!(!driver_branch(&driver("550.54.14")).unwrap().lts);
}

#[test]
fn pci_ids_are_unique() {
    let mut seen = BTreeSet::new();
    for gpu in all_gpus() {
        for id in &gpu.pci_ids {
            assert!(seen.insert(*id), "{id:#06x} listed twice");
        }
    }
    assert_eq!(seen.len(), kb().gpu_by_id.len());
}

#[test]
fn every_name_pattern_and_model_name_resolves_to_its_own_gpu() {
    let mut patterns = BTreeSet::new();
    for gpu in all_gpus() {
        for pattern in &gpu.patterns {
            assert!(patterns.insert(pattern.to_ascii_lowercase()), "pattern {pattern} listed twice");
            assert_eq!(gpu_by_model_name(pattern).map(|g| &g.name), Some(&gpu.name), "pattern {pattern}");
            let lower = pattern.to_lowercase();
            assert_eq!(gpu_by_model_name(&lower).map(|g| &g.name), Some(&gpu.name), "pattern {lower}");
        }
        for model in &gpu.model_names {
            assert_eq!(gpu_by_model_name(model).map(|g| &g.name), Some(&gpu.name), "model {model}");
        }
        for id in &gpu.pci_ids {
            assert_eq!(gpu_by_pci_id(*id).map(|g| &g.name), Some(&gpu.name));
        }
    }
}

#[test]
fn model_names_match_at_word_boundaries() {
    let name = |model: &str| gpu_by_model_name(model).map(|g| g.name.as_str());
    assert_eq!(name("NVIDIA A100-SXM4-80GB"), Some("NVIDIA A100"));
    assert_eq!(name("NVIDIA A10"), Some("NVIDIA A10"));
    assert_eq!(name("NVIDIA A10G"), Some("NVIDIA A10G"));
    assert_eq!(name("NVIDIA GeForce RTX 4090"), Some("NVIDIA GeForce RTX 4090"));
    assert_eq!(name("NVIDIA GeForce RTX 4090 D"), Some("NVIDIA GeForce RTX 4090 D"));
    assert_eq!(name("NVIDIA GeForce RTX 4060 Ti"), Some("NVIDIA GeForce RTX 4060 Ti"));
    assert_eq!(name("  nvidia   geforce rtx 4060  "), Some("NVIDIA GeForce RTX 4060"));
    assert_eq!(name("NVIDIA GH200 480GB"), Some("NVIDIA GH200"));
    assert_eq!(name("NVIDIA GB200"), Some("NVIDIA GB200"));
    assert_eq!(name("NVIDIA L40S"), Some("NVIDIA L40S"));
    assert_eq!(name("NVIDIA L4"), Some("NVIDIA L4"));
    assert_eq!(name("Tesla V100S-PCIE-32GB"), Some("Tesla V100S"));
    assert_eq!(name("NVIDIA RTX A6000"), Some("NVIDIA RTX A6000"));
    assert_eq!(name("NVIDIA RTX A60000"), None);
    assert_eq!(name("NVIDIA GeForce RTX 40900"), None);
    assert_eq!(name(""), None);
}

#[test]
fn gpu_spot_values() {
    let by_name = |model: &str| gpu_by_model_name(model).unwrap();
    assert_eq!(by_name("NVIDIA GeForce RTX 4090").compute_capability, cc("8.9"));
    // The origin documents' "RTX 4060 Ti is 8.7" is wrong: 8.7 is Jetson Orin.
    assert_eq!(by_name("NVIDIA GeForce RTX 4060 Ti").compute_capability, cc("8.9"));
    assert_eq!(by_name("Orin (nvgpu)").compute_capability, cc("8.7"));
    // The origin documents' "A100 is Hopper" is wrong.
    let a100 = by_name("NVIDIA A100-SXM4-40GB");
    assert_eq!((a100.compute_capability, a100.architecture.as_str()), (cc("8.0"), "Ampere"));
    assert_eq!(by_name("NVIDIA H100 80GB HBM3").architecture, "Hopper");
    assert_eq!(by_name("NVIDIA H100 80GB HBM3").compute_capability, cc("9.0"));
    assert_eq!(by_name("NVIDIA B200").compute_capability, cc("10.0"));
    assert_eq!(by_name("NVIDIA GeForce RTX 5090").compute_capability, cc("12.0"));
    assert_eq!(by_name("NVIDIA GeForce GTX 1080").compute_capability, cc("6.1"));
    assert_eq!(by_name("Tesla T4").compute_capability, cc("7.5"));
    assert_eq!(by_name("Tesla V100-SXM2-16GB").brand, "tesla");
    assert_eq!(by_name("NVIDIA GeForce RTX 3090").brand, "geforce");

    for (id, name, cap) in [
        (0x2330, "NVIDIA H100", "9.0"),
        (0x2331, "NVIDIA H100", "9.0"),
        (0x2335, "NVIDIA H200", "9.0"),
        (0x20b0, "NVIDIA A100", "8.0"),
        (0x20b2, "NVIDIA A100", "8.0"),
        (0x20f1, "NVIDIA A100", "8.0"),
        (0x1eb8, "Tesla T4", "7.5"),
        (0x1db1, "Tesla V100", "7.0"),
        (0x2684, "NVIDIA GeForce RTX 4090", "8.9"),
        (0x2204, "NVIDIA GeForce RTX 3090", "8.6"),
        (0x27b8, "NVIDIA L4", "8.9"),
        (0x26b9, "NVIDIA L40S", "8.9"),
        (0x2236, "NVIDIA A10", "8.6"),
        (0x2901, "NVIDIA B200", "10.0"),
        (0x2b85, "NVIDIA GeForce RTX 5090", "12.0"),
        (0x1b80, "NVIDIA GeForce GTX 1080", "6.1"),
    ] {
        let gpu = gpu_by_pci_id(id).unwrap_or_else(|| panic!("{id:#06x}"));
        assert_eq!((gpu.name.as_str(), gpu.compute_capability), (name, cc(cap)), "{id:#06x}");
    }
    assert!(gpu_by_pci_id(0x0000).is_none());

    // Forward compatibility: data-center GPUs and Jetson, not GeForce.
    assert!(by_name("NVIDIA A100-SXM4-80GB").forward_compat && by_name("NVIDIA A100-SXM4-80GB").datacenter);
    assert!(by_name("Orin (nvgpu)").forward_compat && !by_name("Orin (nvgpu)").datacenter);
    assert!(!by_name("NVIDIA GeForce RTX 4090").forward_compat);
}

#[test]
fn torch_rows_are_consistent() {
    let releases = torch_releases();
    for pair in releases.windows(2) {
        assert!(pair[0].parsed < pair[1].parsed, "torch rows out of order at {}", pair[1].version);
    }
    for release in releases {
        assert_eq!(release.pypi_variant().iter().count(), 1, "{} has one PyPI build", release.version);
        let mut tags = BTreeSet::new();
        for variant in &release.variants {
            assert!(tags.insert(&variant.tag), "{} lists {} twice", release.version, variant.tag);
            assert!(
                variant.arch.windows(2).all(|w| w[0] < w[1]),
                "{} {} arch list is not sorted",
                release.version,
                variant.tag
            );
            assert_eq!(
                variant.pypi,
                !variant.pins.is_empty(),
                "{} {}: pins iff PyPI",
                release.version,
                variant.tag
            );
            if variant.pypi {
                let cudnn_pin = variant.pins.iter().find(|(name, _)| name.starts_with("nvidia-cudnn-cu"));
                assert_eq!(
                    cudnn_pin.map(|(_, v)| v),
                    Some(&variant.cudnn),
                    "{} {}",
                    release.version,
                    variant.tag
                );
                // From 2.14 the wheel asks for `triton~=3.8.0`, not an exact version.
                let exact_triton = release.parsed < pkg("2.14");
                assert!(
                    !exact_triton || variant.pins.contains_key("triton"),
                    "{} pins triton",
                    release.version
                );
            }
            let line = cudnn_line(&variant.cudnn);
            if let Some(line) = line {
                let supported =
                    line.builds.iter().any(|b| b.cuda.0 <= variant.cuda && variant.cuda <= b.cuda.1);
                assert!(
                    supported,
                    "{} {}: cuDNN {} has no build for it",
                    release.version, variant.tag, variant.cudnn
                );
            }
        }
        // From 2.1 to 2.10 torchaudio's version equals torch's; later torchaudio pins no torch.
        if release.parsed >= pkg("2.1") && release.parsed < pkg("2.11") {
            assert_eq!(release.torchaudio, release.version);
        }
        let _ = release.numpy_specifiers();
    }
}

#[test]
fn torch_spot_values() {
    let t210 = torch_release(&pkg("2.1.0")).unwrap();
    assert_eq!(t210.version, "2.1.0");
    assert_eq!(t210.python, (py("3.8"), py("3.11")));
    assert!(t210.supports_python(&py("3.11.7")) && !t210.supports_python(&py("3.12")));
    assert_eq!(t210.torchvision, "0.16.0");
    let cu121 = t210.variant("cu121").unwrap();
    assert_eq!(cu121.cudnn, "8.9.2.26");
    assert_eq!(cu121.cuda, cuda("12.1"));
    assert!(!cu121.ptx);
    assert_eq!(cu121.arch.first(), Some(&cc("5.0")));
    assert_eq!(cu121.arch.last(), Some(&cc("9.0")));
    assert_eq!(cu121.pins.get("nvidia-cuda-runtime-cu12").map(String::as_str), Some("12.1.105"));
    assert_eq!(cu121.pins.get("nvidia-nccl-cu12").map(String::as_str), Some("2.18.1"));
    assert_eq!(cu121.pins.get("triton").map(String::as_str), Some("2.1.0"));
    assert!(t210.variant("cu124").is_none(), "torch 2.1.0 has no cu124 build");
    assert!(t210.numpy_specifiers().contains(&pkg("1.26.4")));
    assert!(!t210.numpy_specifiers().contains(&pkg("2.0.0")));

    // sm_86 cubins run on 8.9; nothing crosses a major without PTX.
    assert!(cu121.runs_on(cc("8.9")) && cu121.runs_on(cc("9.0")) && cu121.runs_on(cc("6.1")));
    assert!(!cu121.runs_on(cc("12.0")) && !cu121.runs_on(cc("10.0")) && !cu121.runs_on(cc("3.7")));

    let t212 = torch_release(&pkg("2.1.2+cu118")).unwrap();
    assert_eq!(t212.version, "2.1.2");
    assert_eq!(t212.variant("cu118").unwrap().cudnn, "8.7.0.84");

    // The 12.1 builds of 2.1, 2.2 and 2.3 all pin cuDNN 8.9.2.26.
    for v in ["2.1.1", "2.2.1", "2.3.0"] {
        assert_eq!(torch_release(&pkg(v)).unwrap().variant("cu121").unwrap().cudnn, "8.9.2.26", "{v}");
    }
    // 2.2.x includes 2.2.1; line fallback answers the newest of the line.
    assert_eq!(torch_release(&pkg("2.2.1")).unwrap().version, "2.2.1");
    assert_eq!(torch_release(&pkg("2.2.9")).unwrap().version, "2.2.2");
    assert_eq!(torch_release(&pkg("2.3.0rc1")).unwrap().version, "2.3.0");
    assert!(torch_release(&pkg("1.13.1")).is_none());
    assert!(torch_release(&pkg("2.99.0")).is_none());

    let t250 = torch_release(&pkg("2.5.0")).unwrap();
    assert_eq!(t250.variant("cu124").unwrap().cudnn, "9.1.0.70");
    assert!(t250.numpy_specifiers().contains(&pkg("2.1.0")));
    let t270 = torch_release(&pkg("2.7.0")).unwrap();
    let cu128 = t270.variant("cu128").unwrap();
    assert!(cu128.ptx && cu128.runs_on(cc("12.0")) && !cu128.runs_on(cc("7.0")));
    assert_eq!(t270.python, (py("3.9"), py("3.13")));

    // torch 2.4 had an experimental CUDA 12.4 build (RELEASE.md).
    assert_eq!(torch_release(&pkg("2.4.0+cu124")).unwrap().variant("cu124").unwrap().cudnn, "9.1.0.70");
    // From 2.11 the PyPI wheel is CUDA 13 through cuda-toolkit, with nvidia-cudnn-cu13, on
    // x86_64 and aarch64.
    let t211 = torch_release(&pkg("2.11.0")).unwrap().pypi_variant().unwrap();
    assert_eq!((t211.tag.as_str(), t211.cudnn.as_str()), ("cu130", "9.19.0.56"));
    assert_eq!(t211.pins.get("cuda-toolkit").map(String::as_str), Some("13.0.2"));
    assert_eq!(t211.pins.get("nvidia-cudnn-cu13").map(String::as_str), Some("9.19.0.56"));
    assert!(!t211.aarch64_arch.is_empty());
    let t215 = torch_release(&pkg("2.15.0")).unwrap();
    assert_eq!(t215.python, (py("3.11"), py("3.15")));
    assert_eq!(t215.pypi_variant().unwrap().pins.get("cuda-toolkit").map(String::as_str), Some("13.2.2"));
    for v in ["2.6.0", "2.8.0", "2.9.1", "2.10.0", "2.12.1", "2.13.0", "2.14.1"] {
        assert!(torch_release(&pkg(v)).is_some_and(|r| r.version == v), "{v}");
    }
}

#[test]
fn cudnn_spot_values() {
    let line = cudnn_line("8.9.2.26").unwrap();
    assert_eq!(line.line, "8.9");
    let cuda12 = line.builds.iter().find(|b| b.package == "for CUDA 12.x").unwrap();
    assert_eq!(cuda12.cuda, (cuda("12.0"), cuda("12.2")));
    assert_eq!(cuda12.driver, driver("525.60.13"));
    assert_eq!(cuda12.compute_capability, (cc("5.0"), cc("9.0")));
    let cuda11 = line.builds.iter().find(|b| b.package == "for CUDA 11.x").unwrap();
    assert_eq!(cuda11.driver, driver("450.80.02"));
    assert_eq!(cudnn_line("9.1.0.70").unwrap().line, "9.1");
    let blackwell = cudnn_line("9.10.2").unwrap().builds.iter().map(|b| b.compute_capability.1).max();
    assert_eq!(blackwell, Some(cc("12.0")));
    assert_eq!(cudnn_line("9.5.1.17").unwrap().line, "9.5");
    let lines: Vec<Vec<u64>> =
        cudnn_lines().iter().map(|r| r.line.split('.').map(|p| p.parse().unwrap()).collect()).collect();
    assert!(lines.windows(2).all(|w| w[0] < w[1]), "cuDNN lines out of order: {lines:?}");
    assert!(cudnn_line("7.6.5").is_none());
    assert!(cudnn_line("9").is_none());
    assert!(cudnn_line("").is_none());
    for row in cudnn_lines() {
        for build in &row.builds {
            assert!(build.cuda.0 <= build.cuda.1 && build.compute_capability.0 <= build.compute_capability.1);
            let needs = cuda_min_driver(&build.cuda.0).map(|r| r.minor_compat_driver);
            assert!(needs.is_none_or(|d| build.driver >= d), "{} {}", row.line, build.package);
        }
    }
}

#[test]
fn cuda_components_spot_values() {
    let c121 = cuda_components(&cuda("12.1")).unwrap();
    assert_eq!(c121.cuda, cuda("12.1.1"));
    assert_eq!(
        [&c121.cudart, &c121.cublas, &c121.cufft, &c121.curand, &c121.cusolver, &c121.cusparse, &c121.nvrtc],
        ["12.1.105", "12.1.3.1", "11.0.2.54", "10.3.2.106", "11.4.5.107", "12.1.0.106", "12.1.105"]
    );
    assert_eq!(cuda_components(&cuda("12.4")).unwrap().nvjitlink.as_deref(), Some("12.4.127"));
    assert!(cuda_components(&cuda("11.8")).unwrap().nvjitlink.is_none());
    assert!(cuda_components(&cuda("12.4.0")).is_none(), "a full version must match exactly");
    assert!(cuda_components(&cuda("12.3")).is_none());
    // CUDA 12.9 Update 1 (NVIDIA's redistrib_12.9.1.json; the cu129 torch builds' pins).
    let c129 = cuda_components(&cuda("12.9")).unwrap();
    assert_eq!(c129.cuda, cuda("12.9.1"));
    assert_eq!(
        [&c129.cudart, &c129.cublas, &c129.cufft, &c129.curand, &c129.cusolver, &c129.cusparse, &c129.nvrtc],
        ["12.9.79", "12.9.1.4", "11.4.1.4", "10.3.10.19", "11.7.5.82", "12.5.10.65", "12.9.86"]
    );
    assert_eq!(c129.nvjitlink.as_deref(), Some("12.9.86"));
    assert_eq!(cuda_components(&cuda("12.9.1")).map(|c| &c.cuda), Some(&cuda("12.9.1")));
    for release in ["11.8", "12.1", "12.4", "12.6", "12.8", "12.9", "13.0", "13.2"] {
        assert!(cuda_components(&cuda(release)).is_some(), "{release}");
    }
    let rows = all_cuda_components();
    assert!(rows.windows(2).all(|w| w[0].cuda < w[1].cuda));

    // The PyPI torch wheels pin the runtime of the toolkit they were built with.
    for release in torch_releases() {
        let Some(variant) = release.pypi_variant() else { continue };
        let Some(components) = cuda_components(&variant.cuda) else { continue };
        let runtime = variant.pins.iter().find(|(name, _)| name.starts_with("nvidia-cuda-runtime-cu"));
        if variant.cuda.major_minor() == (12, 1) || variant.cuda.major_minor() == (12, 4) {
            assert_eq!(runtime.map(|(_, v)| v), Some(&components.cudart), "torch {}", release.version);
        }
    }
}

#[test]
fn jetson_soc_spot_values() {
    // developer.nvidia.com/cuda-gpus, Jetson products.
    // Forward compatibility (the CUDA upgrade package) only on JetPack 5+ boards: Orin, and
    // Xavier below CUDA 13; TX1, TX2 and Nano stop at JetPack 4 / CUDA 10.2.
    for (compatible, name, cap, compat) in [
        ("nvidia,tegra264", "Jetson Thor (tegra264)", "11.0", None),
        ("nvidia,tegra234", "Jetson Orin (tegra234)", "8.7", Some(true)),
        ("nvidia,tegra194", "Jetson Xavier (tegra194)", "7.2", Some(true)),
        ("nvidia,tegra186", "Jetson TX2 (tegra186)", "6.2", Some(false)),
        ("nvidia,tegra210", "Jetson Nano / TX1 (tegra210)", "5.3", Some(false)),
    ] {
        let soc = jetson_soc(compatible).unwrap_or_else(|| panic!("{compatible}"));
        assert_eq!((soc.model_name().as_str(), soc.gpu().compute_capability), (name, cc(cap)));
        let gpu = soc.gpu();
        assert_eq!((gpu.compute_capability, gpu.pci_ids.len()), (cc(cap), 0));
        assert_eq!(soc.forward_compat, compat, "{compatible}");
        assert_eq!(gpu.forward_compat, compat == Some(true), "{compatible}");
        assert!(!gpu.datacenter);
    }
    assert_eq!(jetson_soc("nvidia,tegra194").unwrap().cuda_compat_below, Some(cuda("13.0")));
    assert_eq!(jetson_soc(" nvidia,tegra234\n").map(JetsonSoc::soc), Some("tegra234"));
    // Board and module strings of the same property are not SoCs; a newer SoC is not guessed.
    assert!(jetson_soc("nvidia,p3701-0005").is_none());
    assert!(jetson_soc("nvidia,tegra274").is_none());
    assert!(jetson_soc("NVIDIA,TEGRA234").is_none());
    // The Orin row of gpus.toml (nvidia-smi's "Orin (nvgpu)") agrees with the SoC table.
    let orin = gpu_by_model_name("Orin (nvgpu)").unwrap();
    assert_eq!(orin.compute_capability, jetson_soc("nvidia,tegra234").unwrap().gpu().compute_capability);
    // "RTX 4060 Ti is 8.7" is wrong: 8.7 belongs to Orin alone.
    assert_eq!(jetson_socs().iter().filter(|s| s.gpu().compute_capability == cc("8.7")).count(), 1);
}

#[test]
fn gpus_of_todays_hosts_are_known() {
    // developer.nvidia.com/cuda-gpus; PCI ids from pci.ids 2026.08.22.
    for (model, id, cap) in [
        ("NVIDIA RTX A6000", 0x2230, "8.6"),
        ("NVIDIA RTX A5000", 0x2231, "8.6"),
        ("NVIDIA RTX A4000", 0x24b0, "8.6"),
        ("NVIDIA A16", 0x25b6, "8.6"),
        ("NVIDIA A2", 0x25b6, "8.6"),
        ("NVIDIA RTX 6000 Ada Generation", 0x26b1, "8.9"),
        ("NVIDIA RTX 5000 Ada Generation", 0x26b2, "8.9"),
        ("NVIDIA RTX 4500 Ada Generation", 0x27b1, "8.9"),
        ("NVIDIA RTX 4000 Ada Generation", 0x27b2, "8.9"),
        ("NVIDIA RTX 2000 Ada Generation", 0x28b0, "8.9"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 0x2bb5, "12.0"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 0x2bb1, "12.0"),
        ("NVIDIA RTX PRO 5000 Blackwell", 0x2bb3, "12.0"),
        ("NVIDIA RTX PRO 4500 Blackwell", 0x2c31, "12.0"),
        ("NVIDIA RTX PRO 4000 Blackwell", 0x2c34, "12.0"),
        ("NVIDIA RTX PRO 2000 Blackwell", 0x2d30, "12.0"),
        ("NVIDIA H20", 0x2329, "9.0"),
        ("NVIDIA H800", 0x2324, "9.0"),
        ("NVIDIA A800-SXM4-80GB", 0x20f3, "8.0"),
        ("NVIDIA L20", 0x26b7, "8.9"),
        ("NVIDIA T4G", 0x1eb4, "7.5"),
        ("NVIDIA GB10", 0x2e12, "12.1"),
        ("NVIDIA Thor", 0x2b00, "11.0"),
        ("Tesla P100-PCIE-16GB", 0x15f8, "6.0"),
        ("Tesla P40", 0x1b38, "6.1"),
        ("Tesla P4", 0x1bb3, "6.1"),
        ("NVIDIA TITAN V", 0x1d81, "7.0"),
        ("NVIDIA GeForce GTX 1660 SUPER", 0x21c4, "7.5"),
        ("NVIDIA GeForce GTX 1650", 0x1f82, "7.5"),
        ("NVIDIA GeForce RTX 2060", 0x1e89, "7.5"),
        ("NVIDIA GeForce RTX 2070 SUPER", 0x1e84, "7.5"),
        ("NVIDIA GeForce RTX 4050 Laptop GPU", 0x28a1, "8.9"),
        ("Quadro RTX 8000", 0x1e30, "7.5"),
        ("NVIDIA TITAN RTX", 0x1e02, "7.5"),
        ("NVIDIA RTX A4500", 0x2232, "8.6"),
        ("Tesla K80", 0x102d, "3.7"),
    ] {
        let by_name = gpu_by_model_name(model).unwrap_or_else(|| panic!("{model}"));
        let by_id = gpu_by_pci_id(id).unwrap_or_else(|| panic!("{id:#06x}"));
        assert_eq!(by_name.name, by_id.name, "{model}");
        assert_eq!(by_name.compute_capability, cc(cap), "{model}");
    }
    // Word boundaries keep neighbours apart.
    assert_eq!(gpu_by_model_name("NVIDIA H200").unwrap().name, "NVIDIA H200");
    assert_eq!(gpu_by_model_name("Tesla P40").unwrap().name, "NVIDIA Tesla P40");
    assert_eq!(gpu_by_model_name("NVIDIA GB100").map(|g| g.name.as_str()), None);
    assert_eq!(gpu_by_model_name("Quadro RTX 6000").unwrap().compute_capability, cc("7.5"));
    assert_eq!(gpu_by_model_name("NVIDIA RTX 6000 Ada Generation").unwrap().compute_capability, cc("8.9"));
}

#[test]
fn gpus_added_for_issue_25_are_known() {
    // PCI ids from pci.ids 2026.08.22; compute capabilities from developer.nvidia.com/cuda-gpus and
    // /cuda-legacy-gpus (or the chip's, where the row says so).
    for (model, id, cap, arch) in [
        ("NVIDIA GeForce RTX 2050", 0x25a9, "8.6", "Ampere"),
        ("NVIDIA GeForce RTX 2050", 0x25ad, "8.6", "Ampere"),
        ("NVIDIA GeForce RTX 2050", 0x25ed, "8.6", "Ampere"),
        ("NVIDIA GeForce GTX 1070", 0x1b81, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1070 Ti", 0x1b82, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1060 6GB", 0x1b83, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1060 3GB", 0x1b84, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1060 3GB", 0x1c02, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1060 6GB", 0x1c03, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1060 5GB", 0x1c04, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1060 6GB", 0x1c06, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1050", 0x1c81, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1050 Ti", 0x1c82, "6.1", "Pascal"),
        ("NVIDIA GeForce GTX 1050 3GB", 0x1c83, "6.1", "Pascal"),
        ("NVIDIA GeForce GT 1030", 0x1d01, "6.1", "Pascal"),
        ("NVIDIA TITAN X (Pascal)", 0x1b00, "6.1", "Pascal"),
        ("NVIDIA TITAN Xp", 0x1b02, "6.1", "Pascal"),
        ("Quadro P6000", 0x1b30, "6.1", "Pascal"),
        ("Quadro P5000", 0x1bb0, "6.1", "Pascal"),
        ("Quadro P4000", 0x1bb1, "6.1", "Pascal"),
        ("Quadro P2000", 0x1c30, "6.1", "Pascal"),
        ("Quadro P1000", 0x1cb1, "6.1", "Pascal"),
        ("Quadro P620", 0x1cb6, "6.1", "Pascal"),
        ("Quadro P400", 0x1cb3, "6.1", "Pascal"),
        ("Quadro GP100", 0x15f0, "6.0", "Pascal"),
        ("NVIDIA T400 4GB", 0x1ff2, "7.5", "Turing"),
        ("NVIDIA T600", 0x1fb1, "7.5", "Turing"),
        ("NVIDIA T1000 8GB", 0x1ff0, "7.5", "Turing"),
        ("NVIDIA RTX A5500", 0x2233, "8.6", "Ampere"),
        ("NVIDIA RTX A1000", 0x25b0, "8.6", "Ampere"),
        ("NVIDIA RTX A400", 0x25b2, "8.6", "Ampere"),
        ("NVIDIA RTX 5880 Ada Generation", 0x26b3, "8.9", "Ada Lovelace"),
        ("NVIDIA L40G", 0x26b8, "8.9", "Ada Lovelace"),
        ("NVIDIA L30", 0x26bb, "8.9", "Ada Lovelace"),
        ("NVIDIA L2", 0x27b6, "8.9", "Ada Lovelace"),
        ("NVIDIA L16", 0x27b7, "8.9", "Ada Lovelace"),
        ("NVIDIA A10M", 0x2238, "8.6", "Ampere"),
        ("NVIDIA H100 CNX", 0x2313, "9.0", "Hopper"),
        ("NVIDIA H20B", 0x2328, "9.0", "Hopper"),
        ("NVIDIA GB300 MaxQ", 0x31a1, "10.3", "Blackwell"),
        ("NVIDIA GeForce RTX 3050 A Laptop GPU", 0x2822, "8.9", "Ada Lovelace"),
        ("NVIDIA GeForce RTX 3050 A Laptop GPU", 0x28a3, "8.9", "Ada Lovelace"),
        ("NVIDIA GeForce RTX 3050 A Laptop GPU", 0x28e3, "8.9", "Ada Lovelace"),
    ] {
        let by_name = gpu_by_model_name(model).unwrap_or_else(|| panic!("{model}"));
        let by_id = gpu_by_pci_id(id).unwrap_or_else(|| panic!("{id:#06x}"));
        assert_eq!(by_name.name, by_id.name, "{model} / {id:#06x}");
        assert_eq!((by_id.compute_capability, by_id.architecture.as_str()), (cc(cap), arch), "{id:#06x}");
    }
    // Rubin: compute capability 10.7; pci.ids has only GR100 placeholders.
    for id in [0x3000, 0x3021, 0x3040] {
        let rubin = gpu_by_pci_id(id).unwrap_or_else(|| panic!("{id:#06x}"));
        assert_eq!((rubin.compute_capability, rubin.architecture.as_str()), (cc("10.7"), "Rubin"));
        assert!(rubin.datacenter);
    }
    // Brands follow the product line: GeForce, Titan, Quadro, NVIDIA RTX, NVIDIA.
    let brand = |model: &str| gpu_by_model_name(model).unwrap().brand.as_str();
    assert_eq!(brand("NVIDIA GeForce GTX 1070"), "geforce");
    assert_eq!(brand("NVIDIA TITAN Xp"), "titan");
    assert_eq!(brand("Quadro P4000"), "quadro");
    assert_eq!(brand("NVIDIA RTX A400"), "nvidiartx");
    assert_eq!(brand("NVIDIA L40G"), "nvidia");
    assert!(gpu_by_model_name("NVIDIA L2").unwrap().forward_compat);
    assert!(!gpu_by_model_name("NVIDIA GeForce RTX 2050").unwrap().forward_compat);
}

#[test]
fn neighbouring_gpu_names_stay_apart() {
    let name = |model: &str| gpu_by_model_name(model).map(|g| g.name.as_str());
    let cap = |model: &str| gpu_by_model_name(model).map(|g| g.compute_capability);
    // The Ada "RTX 3050 A Laptop GPU" is not the Ampere RTX 3050 (the longest pattern wins).
    assert_eq!(name("NVIDIA GeForce RTX 3050 A Laptop GPU"), Some("NVIDIA GeForce RTX 3050 A Laptop GPU"));
    assert_eq!(cap("NVIDIA GeForce RTX 3050 A Laptop GPU"), Some(cc("8.9")));
    for ampere in
        ["NVIDIA GeForce RTX 3050", "NVIDIA GeForce RTX 3050 Laptop GPU", "NVIDIA GeForce RTX 3050 OEM"]
    {
        assert_eq!(name(ampere), Some("NVIDIA GeForce RTX 3050"), "{ampere}");
        assert_eq!(cap(ampere), Some(cc("8.6")), "{ampere}");
    }
    assert_eq!(gpu_by_pci_id(0x2507).unwrap().compute_capability, cc("8.6"));
    // Short data-center names do not swallow their neighbours.
    assert_eq!(name("NVIDIA L40G"), Some("NVIDIA L40G"));
    assert_eq!(name("NVIDIA L40"), Some("NVIDIA L40"));
    assert_eq!(name("NVIDIA L2"), Some("NVIDIA L2"));
    assert_eq!(name("NVIDIA L20"), Some("NVIDIA L20"));
    assert_eq!(name("NVIDIA A10M"), Some("NVIDIA A10M"));
    assert_eq!(name("NVIDIA A10"), Some("NVIDIA A10"));
    assert_eq!(name("NVIDIA H20B"), Some("NVIDIA H20B"));
    assert_eq!(name("NVIDIA H20"), Some("NVIDIA H20"));
    assert_eq!(name("NVIDIA H100 CNX"), Some("NVIDIA H100 CNX"));
    assert_eq!(name("NVIDIA H100 80GB HBM3"), Some("NVIDIA H100"));
    assert_eq!(name("NVIDIA GB300 MaxQ"), Some("NVIDIA GB300 MaxQ"));
    assert_eq!(name("NVIDIA GB300"), Some("NVIDIA GB300"));
    // Workstation cards are not the data-center cards their names contain.
    assert_eq!(name("Quadro P4000"), Some("NVIDIA Quadro P4000"));
    assert_eq!(name("Tesla P4"), Some("NVIDIA Tesla P4"));
    assert_eq!(name("Quadro P400"), Some("NVIDIA Quadro P400"));
    assert_eq!(name("Tesla P40"), Some("NVIDIA Tesla P40"));
    assert_eq!(name("Quadro P6000"), Some("NVIDIA Quadro P6000"));
    assert_eq!(name("NVIDIA T400 4GB"), Some("NVIDIA T400"));
    assert_eq!(name("Tesla T4"), Some("Tesla T4"));
    assert_eq!(name("NVIDIA RTX A400"), Some("NVIDIA RTX A400"));
    assert_eq!(name("NVIDIA RTX A4000"), Some("NVIDIA RTX A4000"));
    assert_eq!(name("NVIDIA RTX A1000"), Some("NVIDIA RTX A1000"));
    assert_eq!(name("NVIDIA GeForce GTX 1070 Ti"), Some("NVIDIA GeForce GTX 1070 Ti"));
    assert_eq!(name("NVIDIA GeForce GTX 1050 Ti"), Some("NVIDIA GeForce GTX 1050 Ti"));
    // The Pascal TITAN X is told apart from the Maxwell GeForce GTX TITAN X (5.2), which the
    // table does not know.
    assert_eq!(cap("NVIDIA TITAN X (Pascal)"), Some(cc("6.1")));
    assert_eq!(name("NVIDIA GeForce GTX TITAN X"), None);
    assert_eq!(name("NVIDIA TITAN Xp COLLECTORS EDITION"), Some("NVIDIA TITAN Xp"));
}

/// Substrings that mark a citation of a file in some repository (or of this project), or of an
/// unpublished observation, rather than of a public page.
/// In torch.toml: repository paths without a URL, and readings of installed environments.
const TORCH_NOT_A_PUBLIC_PAGE: &[&str] = &[
    "pytorch/pytorch .ci",
    "pytorch/pytorch RELEASE.md",
    "pytorch/pytorch issue",
    "pytorch/builder manywheel",
    "pytorch/builder PR",
    "get_arch_list sm_",
    "cudnn.version()",
    "environments",
    "observ",
    "pip install --dry-run",
];

const NOT_A_PUBLIC_PAGE: &[&str] = &[
    ".lock",
    ".dtsi",
    "arch/arm64/boot",
    "nixpkgs",
    "as mirrored",
    "recipes/",
    "shared/",
    "observed",
    "observation",
    "on hardware",
    "Product Brand",
    "build_cuda.sh",
    "manywheel/",
    ".github/",
    "uv sync",
    "environments",
];

#[test]
fn rows_cite_public_pages_not_repository_files_or_observations() {
    // Every row of the host tables (all but torch.toml, whose rows come from the index's
    // metadata) cites a public page.
    let mut sources: Vec<(&str, &str)> = Vec::new();
    let table = loaded(&CUDA_DRIVER);
    sources.extend(table.toolkits.iter().map(|r| ("cuda_driver.toml", r.source.as_str())));
    sources.extend(table.minor_compat.iter().map(|r| ("cuda_driver.toml", r.source.as_str())));
    sources.extend(table.unverified.iter().map(|r| ("cuda_driver.toml", r.source.as_str())));
    sources.extend(driver_branches().iter().map(|r| ("driver_branches.toml", r.source.as_str())));
    sources.extend(all_gpus().iter().map(|r| ("gpus.toml", r.source.as_str())));
    sources.extend(jetson_socs().iter().map(|r| ("jetson_socs.toml", r.source.as_str())));
    sources.extend(l4t_releases().iter().map(|r| ("jetson_socs.toml", r.source.as_str())));
    sources.extend(cudnn_lines().iter().map(|r| ("cudnn.toml", r.source.as_str())));
    sources.extend(all_cuda_components().iter().map(|r| ("cuda_components.toml", r.source.as_str())));
    let mut bad = Vec::new();
    for (file, source) in &sources {
        if let Some(pattern) = NOT_A_PUBLIC_PAGE.iter().find(|p| source.contains(**p)) {
            bad.push(format!("{file}: {pattern:?} in {source:?}"));
        }
    }
    assert!(bad.is_empty(), "rows citing a repository file or an observation:\n{}", bad.join("\n"));
    // The scan sees what it should: a row with such a citation fails it.
    let planted = "resolved into recipes/dreamzero.toml.lock";
    assert!(NOT_A_PUBLIC_PAGE.iter().any(|p| planted.contains(p)));
    // torch.toml: what the index tells cites the metadata file it was read from; the rest cites
    // public pages (a URL at the release's tag, not a bare repository path), never an
    // observation of an installed environment.
    for r in torch_releases() {
        assert!(
            r.source.contains(".whl.metadata") || r.source.contains("no release pins"),
            "{}: {}",
            r.version,
            r.source
        );
        for v in &r.variants {
            let at = format!("{} {}", r.version, v.tag);
            if v.pypi {
                assert!(v.source.contains(".whl.metadata: Requires-Dist"), "{at}: {}", v.source);
            }
            for text in [&v.source, &v.arch_source, &v.notes, &r.notes] {
                for bare in TORCH_NOT_A_PUBLIC_PAGE {
                    assert!(!text.contains(bare), "{at}: {bare:?} in {text:?}");
                }
            }
            assert!(!v.arch.is_empty() || !v.arch_source.is_empty(), "{at}");
        }
    }
    // The brand rows cite NVML's documented brand type.
    for gpu in all_gpus() {
        assert!(gpu.source.contains("nvmlBrandType_t"), "{}: {}", gpu.name, gpu.source);
    }
    // R610's end of life is on the R615 edition of NVIDIA's page, not the R620 one.
    let r610 = driver_branches().iter().find(|r| r.branch == 610).unwrap();
    assert!(r610.source.contains("drivers/615/"), "{}", r610.source);
}
