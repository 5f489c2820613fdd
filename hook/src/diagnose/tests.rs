use super::*;
use crate::contract::kb;
use crate::contract::require::Expr;
use crate::fixture::{FixtureSpec, Preset};

fn request(requires: &[&str], selection: DeviceSelection) -> Request {
    let mut set = RequirementSet::default();
    for r in requires {
        // NVIDIA's evaluator knows only cuda, driver, arch and brand: ours go in our variables.
        let ours = Expr::parse(r).is_ok_and(|e| e.0.iter().flat_map(|t| &t.0).any(|f| !f.key.nvidia()));
        set.push(if ours { "STACKBUILD_REQUIRE_TEST" } else { "NVIDIA_REQUIRE_TEST" }, r).unwrap();
    }
    Request::new(selection, set)
}

/// Builds `spec`, probes it and diagnoses it; `None` (with a note) when device nodes could not
/// be made, since every Linux scenario's node checks would then fail.
fn run(spec: &FixtureSpec, requires: &[&str], selection: DeviceSelection) -> Option<Diagnosis> {
    let dir = tempfile::tempdir().unwrap();
    let host = spec.build(dir.path()).unwrap();
    if !host.real_device_nodes() {
        eprintln!("skipped: mknod is not permitted here, so device-node checks cannot pass");
        return None;
    }
    Some(diagnose(&probe::probe(dir.path()), &request(requires, selection)))
}

fn codes(d: &Diagnosis) -> Vec<&'static str> {
    d.findings.iter().map(|f| f.code).collect()
}

fn preset(p: Preset) {
    let Some(d) = run(&p.spec(), p.requires(), DeviceSelection::All) else { return };
    let expected = if p.allowed() { Verdict::Allow } else { Verdict::Block };
    assert_eq!(d.verdict(), expected, "{}: {:#?}", p.name(), d.findings);
    match p.expected_code() {
        Some(code) => assert!(d.has(code), "{}: expected {code}, got {:?}", p.name(), codes(&d)),
        None => assert!(
            d.findings.iter().all(|f| f.severity == Severity::Info),
            "{}: {:#?}",
            p.name(),
            d.findings
        ),
    }
    if !p.allowed() {
        // The expected code is the first error: the report leads with the cause.
        let first = d.of(Severity::Error).next().unwrap();
        assert_eq!(Some(first.code), p.expected_code(), "{}: {:?}", p.name(), codes(&d));
    }
    insta::assert_snapshot!(p.name(), d.render_human(false));
}

#[test]
fn preset_r610_cuda_13_3() {
    preset(Preset::R610Cuda133);
}
#[test]
fn preset_rtx_a6000_torch_2_1() {
    preset(Preset::RtxA6000Torch21);
}
#[test]
fn preset_rtx_6000_ada_torch_2_1() {
    preset(Preset::Rtx6000AdaTorch21);
}
#[test]
fn preset_unknown_gpu() {
    preset(Preset::UnknownGpu);
}
#[test]
fn preset_jetson_tx2() {
    preset(Preset::JetsonTx2);
}
#[test]
fn preset_healthy() {
    preset(Preset::Healthy);
}
#[test]
fn preset_driver_too_old() {
    preset(Preset::DriverTooOld);
}
#[test]
fn preset_nouveau() {
    preset(Preset::Nouveau);
}
#[test]
fn preset_uvm_missing() {
    preset(Preset::UvmMissing);
}
#[test]
fn preset_libcuda_missing() {
    preset(Preset::LibcudaMissing);
}
#[test]
fn preset_library_mismatch() {
    preset(Preset::LibraryMismatch);
}
#[test]
fn preset_secure_boot_unsigned() {
    preset(Preset::SecureBootUnsigned);
}
#[test]
fn preset_kernel_denied() {
    preset(Preset::KernelDenied);
}
#[test]
fn preset_arch_too_new() {
    preset(Preset::ArchTooNew);
}
#[test]
fn preset_model_unknown() {
    preset(Preset::ModelUnknown);
}
#[test]
fn preset_wsl2() {
    preset(Preset::Wsl2);
}
#[test]
fn preset_eight_gpus() {
    preset(Preset::EightGpus);
}
#[test]
fn preset_forward_compat_geforce() {
    preset(Preset::ForwardCompatGeforce);
}

#[test]
fn preset_jetson_orin() {
    preset(Preset::JetsonOrin);
}

#[test]
fn preset_mig_node() {
    preset(Preset::MigNode);
}

#[test]
fn every_preset_has_a_test() {
    // Keeps the list above in step with `Preset::ALL`.
    assert_eq!(Preset::ALL.len(), 20);
}

#[test]
fn forward_compat_on_a_data_center_gpu_is_allowed() {
    let spec = FixtureSpec::healthy_h100().driver("470.256.02").gpus_of(1, 0x20b0, "NVIDIA A100-SXM4-40GB");
    let Some(d) = run(&spec, &[crate::fixture::CUDA_12_1_REQUIRE], DeviceSelection::All) else { return };
    assert_eq!(d.verdict(), Verdict::Allow, "{:#?}", d.findings);
    assert!(d.has("L4-FORWARD-COMPAT"), "{:?}", codes(&d));
}

#[test]
fn minor_version_compatibility_is_not_forward_compatibility() {
    let req = "cuda>=12.1 brand=geforce,driver>=525,driver<526";
    let spec = FixtureSpec::healthy_h100().driver("525.60.13").gpus_of(1, 0x2684, "NVIDIA GeForce RTX 4090");
    let Some(d) = run(&spec, &[req], DeviceSelection::All) else { return };
    assert_eq!(d.verdict(), Verdict::Allow, "{:#?}", d.findings);
    assert!(d.has("L4-MINOR-VERSION-COMPAT"), "{:?}", codes(&d));
}

#[test]
fn warnings_do_not_block() {
    let spec = FixtureSpec::healthy_h100s(2).degraded_link(1).libcuda_stub().nouveau();
    let Some(d) = run(&spec, &[], DeviceSelection::All) else { return };
    assert_eq!(d.verdict(), Verdict::Allow, "{:#?}", d.findings);
    assert_eq!(codes(&d), ["L1-NOUVEAU-LOADED", "L2-LIBCUDA-STUB", "L4-PCIE-LINK-DEGRADED"]);
    assert!(d.findings.iter().all(|f| f.severity == Severity::Warning));
}

#[test]
fn selection_and_gpu_state() {
    let spec = FixtureSpec::healthy_h100s(2).excluded(1);
    let sel = |s: &str| DeviceSelection::parse(Some(s));
    let Some(d) = run(&spec, &[], sel("0")) else { return };
    assert_eq!(d.verdict(), Verdict::Allow, "GPU 1 is excluded but not selected: {:?}", codes(&d));
    let d = run(&spec, &[], sel("1")).unwrap();
    assert_eq!(codes(&d), ["L3-GPU-EXCLUDED"]);
    let d = run(&spec, &[], sel("GPU-deadbeef")).unwrap();
    assert_eq!(codes(&d), ["L3-SELECTION-UNMATCHED"]);
    let d = run(&spec, &["arch>=8.0"], sel("void")).unwrap();
    assert_eq!((d.verdict(), codes(&d)), (Verdict::Allow, vec!["L3-NO-GPU-REQUESTED"]));
    // `none`: no device, so no arch to compare; the driver's CUDA still is.
    let d = run(&spec, &["arch>=10.0"], sel("none")).unwrap();
    assert_eq!((d.verdict(), codes(&d)), (Verdict::Allow, vec!["L3-NO-DEVICES"]));
    let d = run(&spec, &["cuda>=12.4"], sel("none")).unwrap();
    assert_eq!(codes(&d), ["L3-NO-DEVICES", "L4-CUDA-REQUIREMENT"]);
}

#[test]
fn device_nodes_follow_the_selection() {
    let dir = tempfile::tempdir().unwrap();
    let host = FixtureSpec::healthy_h100s(2).build(dir.path()).unwrap();
    if !host.real_device_nodes() {
        eprintln!("skipped: mknod is not permitted here");
        return;
    }
    std::fs::remove_file(dir.path().join("dev/nvidia1")).unwrap();
    std::fs::remove_file(dir.path().join("dev/nvidiactl")).unwrap();
    std::fs::write(dir.path().join("dev/nvidiactl"), "").unwrap();
    let p = probe::probe(dir.path());
    let d = diagnose(&p, &request(&[], DeviceSelection::parse(Some("0"))));
    assert_eq!(codes(&d), ["L2-NVIDIACTL-MISSING"]);
    let d = diagnose(&p, &request(&[], DeviceSelection::All));
    assert_eq!(codes(&d), ["L2-NVIDIACTL-MISSING", "L2-GPU-NODE-MISSING"]);
    let f = &d.findings[1];
    assert_eq!(f.remedy.as_deref(), Some("sudo nvidia-modprobe -c=1"));
    assert_eq!(f.evidence[0], Evidence { path: "/dev/nvidia1".into(), value: "missing".into() });
    assert_eq!(d.findings[0].evidence[0].value, "a regular file, not a character device");
}

#[test]
fn uvm_node_with_the_wrong_major() {
    let dir = tempfile::tempdir().unwrap();
    let host = FixtureSpec::healthy_h100().no_uvm_node().build(dir.path()).unwrap();
    if !host.real_device_nodes() {
        return;
    }
    let d = diagnose(&probe::probe(dir.path()), &request(&[], DeviceSelection::All));
    assert_eq!(codes(&d), ["L2-UVM-NODE-MISSING"]);
    assert_eq!(d.findings[0].evidence[1].value, "510 nvidia-uvm");
}

#[test]
fn unsigned_module_loaded_under_secure_boot_warns() {
    let spec = FixtureSpec::healthy_h100().secure_boot(false).module_taint("POE");
    let Some(d) = run(&spec, &[], DeviceSelection::All) else { return };
    assert_eq!((d.verdict(), codes(&d)), (Verdict::Allow, vec!["L1-SECURE-BOOT-UNSIGNED-MODULE"]));
    let Some(d) =
        run(&FixtureSpec::healthy_h100().secure_boot(false).module_taint("PO"), &[], DeviceSelection::All)
    else {
        return;
    };
    assert!(d.findings.is_empty(), "{:?}", codes(&d));
}

#[test]
fn driver_missing_without_secure_boot_and_skips_the_rest() {
    let Some(d) =
        run(&FixtureSpec::healthy_h100().no_driver(), &["cuda>=12.1", "kernel>=6.1"], DeviceSelection::All)
    else {
        return;
    };
    assert_eq!(codes(&d), ["L1-NVIDIA-NOT-LOADED", "L1-KERNEL-REQUIREMENT", "L2-CHECKS-SKIPPED"]);
}

#[test]
fn module_and_gpu_count_requirements_map_to_their_layers() {
    let Some(d) = run(
        &FixtureSpec::healthy_h100(),
        &["module!=nvidia_drm", "gpus>=2", "machine=aarch64", "brand=tesla", "driver>=550"],
        DeviceSelection::All,
    ) else {
        return;
    };
    assert_eq!(
        codes(&d),
        [
            "L2-MODULE-REQUIREMENT",
            "L3-GPU-COUNT-REQUIREMENT",
            "L4-MACHINE-REQUIREMENT",
            "L4-BRAND-REQUIREMENT",
            "L4-DRIVER-REQUIREMENT"
        ]
    );
    assert_eq!(d.findings[0].remedy.as_deref(), Some("sudo modprobe -r nvidia_drm"));
    insta::assert_snapshot!(d.render_errors());
}

#[test]
fn disabled_requirements_are_reported_not_checked() {
    let dir = tempfile::tempdir().unwrap();
    FixtureSpec::healthy_h100().build(dir.path()).unwrap();
    let mut r = request(&["cuda>=99.0"], DeviceSelection::All);
    r.requirements_disabled = true;
    let d = diagnose(&probe::probe(dir.path()), &r);
    assert!(d.has("L4-REQUIREMENTS-DISABLED"));
    assert!(!d.has("L4-CUDA-REQUIREMENT"));
}

#[test]
fn doctor_exit_codes_json_and_colour() {
    let dir = tempfile::tempdir().unwrap();
    let host = Preset::LibraryMismatch.build(dir.path()).unwrap();
    let root = dir.path();
    let (text, code) = doctor(root, &["cuda>=12.1".to_owned()], "all", true, false);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["verdict"], "block");
    assert_eq!(code, 1);
    if host.real_device_nodes() {
        assert_eq!(json["findings"][0]["code"], "L2-DRIVER-LIBRARY-MISMATCH");
        assert_eq!(json["findings"][0]["layer"], "L2");
        assert_eq!(json["findings"][0]["severity"], "error");
    }
    let (text, _) = doctor(root, &[], "all", false, true);
    assert!(text.contains("\x1b[1;31m"), "{text}");
    let (text, code) = doctor(root, &["cuda>=12.x".to_owned()], "all", false, false);
    assert_eq!(code, 2);
    assert!(text.starts_with("stackhook doctor: invalid requirement"), "{text}");
    let healthy = tempfile::tempdir().unwrap();
    if Preset::Healthy.build(healthy.path()).unwrap().real_device_nodes() {
        assert_eq!(doctor(healthy.path(), &["cuda>=12.1".to_owned()], "all", false, false).1, 0);
    }
}

#[test]
fn doctor_includes_the_check_of_the_hosts_specs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    let host = Preset::Healthy.build(&root).unwrap();
    if !host.real_device_nodes() {
        eprintln!("skipped: mknod is not permitted here");
        return;
    }
    std::fs::create_dir_all(root.join("etc/cdi")).unwrap();
    let write = |spec: &serde_json::Value| {
        std::fs::write(root.join("etc/cdi/nvidia.yaml"), serde_norway::to_string(spec).unwrap()).unwrap();
    };
    write(&Preset::Healthy.spec().cdi_spec(&root, "nvidia.com/gpu"));
    let (text, code) = crate::diagnose::doctor(&root, &[], "all", false, false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("L2-CDI-SPEC-OK"), "{text}");
    assert!(text.contains("from    command-line: --gpus all"), "{text}");
    write(&Preset::Healthy.spec().driver("550.54.14").cdi_spec(&root, "nvidia.com/gpu"));
    let (text, code) = crate::diagnose::doctor(&root, &[], "all", false, false);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("L2-CDI-SPEC-STALE") && text.contains("nvidia-ctk cdi generate"), "{text}");
}

#[test]
fn a_missing_host_root_blocks() {
    let (text, code) = doctor(Path::new("/nonexistent/stackhook"), &[], "all", false, false);
    assert_eq!(code, 1);
    assert!(text.contains("L1-NVIDIA-NOT-LOADED"), "{text}");
}

#[test]
fn jetson_orin_arch_is_checked_on_its_integrated_gpu() {
    let orin = Preset::JetsonOrin.spec();
    let Some(d) = run(&orin, &["arch>=8.7"], DeviceSelection::All) else { return };
    assert_eq!((d.verdict(), codes(&d)), (Verdict::Allow, vec!["L1-JETSON"]));
    assert_eq!(d.host.gpus[0].compute_capability.as_deref(), Some("8.7"));

    let d = run(&orin, &["arch>=9.0"], DeviceSelection::All).unwrap();
    // Nothing that assumes a PCI GPU fires: no device node, link, binding, UUID or minor check.
    assert_eq!((d.verdict(), codes(&d)), (Verdict::Block, vec!["L1-JETSON", "L4-ARCH-REQUIREMENT"]));
    let f = &d.findings[1];
    assert_eq!(
        f.message,
        "NVIDIA_REQUIRE_TEST: GPU 0 (Jetson Orin (tegra234)): needs arch>=9.0; host has 8.7"
    );
    assert_eq!(
        f.evidence[1..],
        [
            Evidence { path: "/proc/device-tree/compatible".into(), value: "nvidia,tegra234".into() },
            Evidence {
                path: "(knowledge base)".into(),
                value: "nvidia,tegra234 = Jetson Orin (compute capability 8.7)".into()
            },
        ]
    );
    insta::assert_snapshot!(d.render_errors(), @"stackhook: [L4-ARCH-REQUIREMENT] NVIDIA_REQUIRE_TEST: GPU 0 (Jetson Orin (tegra234)): needs arch>=9.0; host has 8.7 (fix: run on a GPU the image was built for, or rebuild the image with this GPU's architecture in its arch list)");

    // `0` selects the GPU as `all` does; `1` names a GPU the board does not have.
    let d = run(&orin, &["arch>=9.0"], DeviceSelection::parse(Some("0"))).unwrap();
    assert!(d.has("L4-ARCH-REQUIREMENT"), "{:?}", codes(&d));
    let d = run(&orin, &["arch>=8.7"], DeviceSelection::parse(Some("1"))).unwrap();
    assert_eq!(codes(&d), ["L1-JETSON", "L3-SELECTION-UNMATCHED"]);
    // Per-GPU keys and the GPU count now see the one GPU; cuda/driver still cannot be read.
    let d = run(&orin, &["brand=unknown", "gpus>=1", "cuda>=12.2"], DeviceSelection::All).unwrap();
    assert_eq!((d.verdict(), codes(&d)), (Verdict::Allow, vec!["L1-JETSON", "L4-REQUIREMENT-UNVERIFIABLE"]));
}

#[test]
fn jetson_with_an_unknown_soc_keeps_per_gpu_checks_unverifiable() {
    let spec = FixtureSpec::bare().jetson(&["nvidia,future-board", "nvidia,tegra999"]);
    let Some(d) = run(&spec, &["arch>=9.0"], DeviceSelection::All) else { return };
    assert_eq!(
        (d.verdict(), codes(&d)),
        (Verdict::Allow, vec!["L1-JETSON", "L3-GPUS-NOT-LISTED", "L4-REQUIREMENT-UNVERIFIABLE"])
    );
    assert!(d.findings[1].message.contains("SoC"), "{}", d.findings[1].message);
}

#[test]
fn platform_requirements() {
    let req = ["platform=wsl2"];
    let Some(d) = run(&Preset::Healthy.spec(), &req, DeviceSelection::All) else { return };
    assert_eq!((d.verdict(), codes(&d)), (Verdict::Block, vec!["L4-PLATFORM-REQUIREMENT"]));
    insta::assert_snapshot!(d.render_errors(), @"stackhook: [L4-PLATFORM-REQUIREMENT] STACKBUILD_REQUIRE_TEST: needs platform=wsl2; host has linux (fix: run under WSL2 on a Windows host with the NVIDIA driver)");
    let d = run(&Preset::Wsl2.spec(), &req, DeviceSelection::All).unwrap();
    assert!(!d.has("L4-PLATFORM-REQUIREMENT") && d.verdict() == Verdict::Allow, "{:?}", codes(&d));

    let orin = Preset::JetsonOrin.spec();
    let d = run(&orin, &["platform=jetson,arch>=8.7"], DeviceSelection::All).unwrap();
    assert_eq!((d.verdict(), codes(&d)), (Verdict::Allow, vec!["L1-JETSON"]));
    let d = run(&orin, &["platform!=jetson"], DeviceSelection::All).unwrap();
    assert_eq!(codes(&d), ["L1-JETSON", "L4-PLATFORM-REQUIREMENT"]);
    let f = &d.findings[1];
    assert_eq!(f.message, "STACKBUILD_REQUIRE_TEST: needs platform!=jetson; host has jetson");
    assert_eq!(f.evidence[1].path, "/etc/nv_tegra_release");
    assert_eq!(f.remedy.as_deref(), Some("run on a host whose platform is not jetson"));
    // As with every requirement, nothing applies when no GPU is requested.
    let d = run(&Preset::Healthy.spec(), &req, DeviceSelection::None).unwrap();
    assert_eq!(d.verdict(), Verdict::Allow);
}

#[test]
fn doctor_on_a_jetson_orin() {
    let dir = tempfile::tempdir().unwrap();
    Preset::JetsonOrin.build(dir.path()).unwrap();
    let (text, code) = doctor(dir.path(), &["arch>=8.7".to_owned()], "all", false, false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("GPU 0   Jetson Orin (tegra234) at soc, compute capability 8.7"), "{text}");
    let (text, code) = doctor(dir.path(), &["arch>=9.0".to_owned()], "0", false, false);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(
            "L4-ARCH-REQUIREMENT: --require: GPU 0 (Jetson Orin (tegra234)): needs arch>=9.0; host has 8.7"
        ),
        "{text}"
    );
    let (text, code) = doctor(dir.path(), &["platform=wls2".to_owned()], "all", false, false);
    assert_eq!(code, 2);
    assert!(text.contains("unknown platform \"wls2\""), "{text}");
}

/// The diagnosis of `spec` with `files` (path under the root, text) added to the host tree.
fn run_with(spec: &FixtureSpec, files: &[(&str, &str)], requires: &[&str]) -> Option<Diagnosis> {
    let dir = tempfile::tempdir().unwrap();
    let host = spec.build(dir.path()).unwrap();
    if !host.real_device_nodes() {
        eprintln!("skipped: mknod is not permitted here, so device-node checks cannot pass");
        return None;
    }
    for (rel, text) in files {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    Some(diagnose(&probe::probe(dir.path()), &request(requires, DeviceSelection::All)))
}

const FUTURE_GPU: u16 = 0x3ff0;

fn future_gpu_host(driver: &str) -> FixtureSpec {
    FixtureSpec::healthy_h100().driver(driver).gpus_of(1, FUTURE_GPU, "NVIDIA Future GPU 9000")
}

#[test]
fn a_driver_branch_newer_than_the_tables_is_not_read_as_the_last_row() {
    let spec = FixtureSpec::healthy_h100().driver("630.10.01");
    // Known to hold: R630 supports at least what R610 does (13.3).
    let Some(d) = run_with(&spec, &[], &["cuda>=13.3"]) else { return };
    assert_eq!(d.verdict(), Verdict::Allow, "{:#?}", d.findings);
    // The doctor says the knowledge base is older than the driver, and nothing else.
    assert_eq!(codes(&d), ["L4-KB-OLDER-THAN-DRIVER"]);
    assert_eq!(d.host.cuda.as_deref(), Some(">= 13.3"));
    // Not known: a warning that says how to confirm it; the container starts.
    let d = run_with(&spec, &[], &["cuda>=13.5"]).unwrap();
    assert_eq!(d.verdict(), Verdict::Allow, "{:#?}", d.findings);
    let f = d.findings.iter().find(|f| f.code == "L4-REQUIREMENT-UNVERIFIABLE").unwrap();
    assert_eq!(f.severity, Severity::Warning);
    assert!(f.message.contains("cuda>=13.5 (host has at least 13.3)"), "{}", f.message);
    assert!(
        f.evidence.iter().any(|e| e.value.contains("newer than the knowledge base")),
        "{:#?}",
        f.evidence
    );
    assert!(f.remedy.as_deref().is_some_and(|r| r.contains("nvidia-smi")));
    insta::assert_snapshot!("driver_newer_than_tables", d.render_human(false));
}

#[test]
fn a_driver_known_to_be_too_old_still_blocks() {
    // Branch 600 is in no table; 13.3's minimum (610.43.02) is of a newer branch, so 600 reports
    // less than 13.3: known wrong.
    let Some(d) = run_with(&FixtureSpec::healthy_h100().driver("600.20.01"), &[], &["cuda>=13.3"]) else {
        return;
    };
    assert_eq!(d.verdict(), Verdict::Block, "{:#?}", d.findings);
    assert!(d.has("L4-CUDA-REQUIREMENT"));
    let d = run_with(&FixtureSpec::healthy_h100().driver("535.104.05"), &[], &["cuda>=13.3"]).unwrap();
    assert_eq!(d.verdict(), Verdict::Block);
}

#[test]
fn an_unknown_gpu_is_a_warning_and_known_wrong_arch_blocks() {
    let Some(d) = run_with(&future_gpu_host("570.133.07"), &[], &["arch>=5.0,arch<10.0"]) else { return };
    assert_eq!(d.verdict(), Verdict::Allow, "{:#?}", d.findings);
    assert!(d.has("L3-GPU-NOT-IN-KB") && d.has("L4-REQUIREMENT-UNVERIFIABLE"), "{:?}", codes(&d));
    // A known GPU outside the range still blocks (RTX 5090, 12.0).
    let spec = FixtureSpec::healthy_h100().driver("570.133.07").gpus_of(1, 0x2b85, "NVIDIA GeForce RTX 5090");
    let d = run_with(&spec, &[], &["arch>=5.0,arch<10.0"]).unwrap();
    assert_eq!(d.verdict(), Verdict::Block);
}

/// The facts `stackhook doctor --record` writes for one GPU.
fn facts_json(driver: &str, boot_id: &str, cuda: &str, cc: &str) -> String {
    serde_json::json!({
        "schema": 1,
        "recorded_at": "2026-12-01T08:00:00Z",
        "boot_id": boot_id,
        "driver_version": driver,
        "cuda_version": cuda,
        "gpus": [{
            "index": 0,
            "uuid": crate::fixture::fixture_uuid(0),
            "pci_bus_id": "00000000:18:00.0",
            "name": "NVIDIA Future GPU 9000",
            "compute_cap": cc,
        }],
    })
    .to_string()
}

#[test]
fn recorded_facts_are_used_while_driver_and_boot_id_match() {
    use crate::fixture::FIXTURE_BOOT_ID;
    use crate::probe::recorded::FACTS_PATH;
    let spec = future_gpu_host("630.10.01");
    let requires = ["cuda>=13.6", "arch>=5.0,arch<10.0"];
    let current = facts_json("630.10.01", FIXTURE_BOOT_ID, "13.6", "12.0");
    let Some(d) = run_with(&spec, &[(FACTS_PATH, &current)], &requires) else { return };
    // nvidia-smi said CUDA 13.6 and compute capability 12.0: both known; the arch one fails.
    assert_eq!(d.host.cuda.as_deref(), Some("13.6"));
    assert!(d.host.cuda_source.path.ends_with("host-facts.json"), "{:?}", d.host.cuda_source);
    assert_eq!(d.host.gpus[0].compute_capability.as_deref(), Some("12.0"));
    assert_eq!(d.verdict(), Verdict::Block, "{:#?}", d.findings);
    let arch = d.findings.iter().find(|f| f.code == "L4-ARCH-REQUIREMENT").unwrap();
    assert!(
        arch.evidence.iter().any(|e| e.value.contains("nvidia-smi compute_cap 12.0")),
        "{:#?}",
        arch.evidence
    );
    assert!(!d.has("L4-REQUIREMENT-UNVERIFIABLE"), "{:?}", codes(&d));
    insta::assert_snapshot!("recorded_facts", d.render_human(false));

    // After a reboot (another boot id) or a driver change, the facts are stale and ignored.
    let rebooted = facts_json("630.10.01", "another-boot", "13.6", "12.0");
    let d = run_with(&spec, &[(FACTS_PATH, &rebooted)], &requires).unwrap();
    assert_eq!(d.verdict(), Verdict::Allow, "{:#?}", d.findings);
    assert_eq!(d.host.cuda.as_deref(), Some(">= 13.3"));
    assert!(d.has("L4-REQUIREMENT-UNVERIFIABLE"));
    assert!(d.has("L4-RECORDED-FACTS-IGNORED"), "{:?}", codes(&d));
    let upgraded = facts_json("620.1.1", FIXTURE_BOOT_ID, "13.6", "12.0");
    let p = {
        let dir = tempfile::tempdir().unwrap();
        spec.build(dir.path()).unwrap();
        let path = dir.path().join(FACTS_PATH);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, upgraded).unwrap();
        probe::probe(dir.path())
    };
    assert!(p.recorded.is_none());
    assert_eq!(
        p.recorded_ignored.as_deref(),
        Some("recorded for driver 620.1.1, the loaded driver is 630.10.01")
    );
}

#[test]
fn an_admin_kb_d_row_makes_an_unknown_gpu_known() {
    let row = r#"
[[gpu]]
name = "NVIDIA Future GPU 9000"
patterns = ["Future GPU 9000"]
pci_ids = [0x3ff0]
compute_capability = "10.0"
architecture = "Blackwell"
brand = "nvidia"
datacenter = true
source = "nvidia-smi --query-gpu=compute_cap on this fleet, 2026-11-30"
"#;
    let no_source = row.replace(
        "source = \"nvidia-smi --query-gpu=compute_cap on this fleet, 2026-11-30\"",
        "source = \"\"",
    );
    let files =
        [("etc/stackhook/kb.d/fleet.toml", row), ("etc/stackhook/kb.d/broken.toml", no_source.as_str())];
    let Some(d) = run_with(&future_gpu_host("570.133.07"), &files, &["arch>=5.0,arch<10.0"]) else { return };
    // 10.0 is outside arch<10.0: the admin row makes it known, and known wrong blocks.
    assert_eq!(d.verdict(), Verdict::Block, "{:#?}", d.findings);
    assert!(!d.has("L3-GPU-NOT-IN-KB"));
    assert_eq!(d.host.knowledge_base.kb_d, ["/etc/stackhook/kb.d/fleet.toml"]);
    let src = d.host.gpus[0].compute_capability_source.as_ref().unwrap();
    assert_eq!(src.path, "(kb.d) /etc/stackhook/kb.d/fleet.toml");
    let d = run_with(&future_gpu_host("570.133.07"), &files, &["arch>=5.0,arch<12.0"]).unwrap();
    assert_eq!(d.verdict(), Verdict::Allow);
    assert!(d.findings.iter().all(|f| f.severity == Severity::Info), "{:#?}", d.findings);
}

/// A healthy H100 host on driver `driver` with a second NVIDIA GPU (PCI device `device`) on
/// the bus that the driver does not list; `None` (reported) where mknod is not permitted.
fn host_with_an_unbound_gpu(driver: &str, device: &str) -> Option<tempfile::TempDir> {
    let spec = FixtureSpec::healthy_h100().driver(driver);
    let dir = tempfile::tempdir().unwrap();
    let host = spec.build(dir.path()).unwrap();
    if !host.real_device_nodes() {
        eprintln!("skipped: mknod is not permitted here, so device-node checks cannot pass");
        return None;
    }
    let d = dir.path().join("sys/devices/pci0000:3b/0000:3b:00.0");
    std::fs::create_dir_all(&d).unwrap();
    for (attr, value) in [("vendor", "0x10de\n"), ("device", &format!("{device}\n")), ("class", "0x030200\n")]
    {
        std::fs::write(d.join(attr), value).unwrap();
    }
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:3b/0000:3b:00.0",
        dir.path().join("sys/bus/pci/devices/0000:3b:00.0"),
    )
    .unwrap();
    Some(dir)
}

#[test]
fn a_gpu_whose_architecture_the_driver_dropped_is_explained() {
    // A Tesla V100 (Volta) left unbound by a driver of branch 590: R580 was Volta's last branch.
    let Some(dir) = host_with_an_unbound_gpu("590.44.01", "0x1db4") else { return };
    let diagnosis = diagnose(&probe::probe(dir.path()), &request(&[], DeviceSelection::All));
    let f = diagnosis.findings.iter().find(|f| f.code == "L3-GPU-NOT-OWNED").expect("finding");
    assert!(f.message.contains("R580 was the last driver branch for Volta"), "{}", f.message);
}

#[test]
fn an_admin_kb_d_branch_row_makes_a_newer_driver_exact() {
    let row = r#"
[[branch]]
branch = 630
max_cuda = "13.6"
source = "nvidia-smi 'CUDA Version: 13.6' on driver 630.10.01, this fleet"

[[toolkit]]
cuda = "13.7"
driver = "640.10"
source = "CUDA 13.7 release notes, table 3"
"#;
    let files = [("etc/stackhook/kb.d/branches.toml", row)];
    let spec = FixtureSpec::healthy_h100().driver("630.10.01");
    let Some(d) = run_with(&spec, &files, &["cuda>=13.6"]) else { return };
    assert_eq!(d.verdict(), Verdict::Allow, "{:#?}", d.findings);
    assert_eq!(d.host.cuda.as_deref(), Some("13.6"));
    assert_eq!(d.host.cuda_source.path, "(kb.d) /etc/stackhook/kb.d/branches.toml");
    // The admin toolkit row names 13.7's minimum in the remedy.
    let d = run_with(&spec, &files, &["cuda>=13.7"]).unwrap();
    assert_eq!(d.verdict(), Verdict::Block);
    let f = d.findings.iter().find(|f| f.code == "L4-CUDA-REQUIREMENT").unwrap();
    assert!(
        f.remedy.as_deref().is_some_and(|r| r.contains("install driver 640.10 or newer")),
        "{:?}",
        f.remedy
    );
}

#[test]
fn a_gpu_newer_than_the_driver_branch_is_a_known_failure() {
    // A B200 (Blackwell, 10.0) on R550: R570 is Blackwell's first branch.
    let spec = FixtureSpec::healthy_h100().driver("550.54.15").gpus_of(1, 0x2901, "NVIDIA B200");
    let Some(d) = run(&spec, &["cuda>=12.0"], DeviceSelection::All) else { return };
    assert_eq!(d.verdict(), Verdict::Block, "{:#?}", d.findings);
    let f = d.findings.iter().find(|f| f.code == "L3-DRIVER-TOO-OLD-FOR-GPU").expect("finding");
    assert_eq!(f.severity, Severity::Error);
    insta::assert_snapshot!(d.render_errors(), @"stackhook: [L3-DRIVER-TOO-OLD-FOR-GPU] GPU 0 (0000:18:00.0): it is a Blackwell GPU (NVIDIA B200, compute capability 10.0), and R570 is the first driver branch for Blackwell (the loaded driver is 550.54.15): this driver cannot drive it (fix: install a driver of branch R570 or later)");
    // On R570 it passes.
    let spec = FixtureSpec::healthy_h100().driver("570.133.07").gpus_of(1, 0x2901, "NVIDIA B200");
    let d = run(&spec, &["cuda>=12.0"], DeviceSelection::All).unwrap();
    assert_eq!(d.verdict(), Verdict::Allow, "{:#?}", d.findings);
    // GB10 (12.1) ships on R580: its own row overrides Blackwell's R570.
    let spec = FixtureSpec::healthy_h100().driver("575.57.08").gpus_of(1, 0x2e12, "NVIDIA GB10");
    let d = run(&spec, &[], DeviceSelection::All).unwrap();
    let f = d.findings.iter().find(|f| f.code == "L3-DRIVER-TOO-OLD-FOR-GPU").expect("GB10 finding");
    assert!(f.message.contains("R580 is the first driver branch for Blackwell 12.1"), "{}", f.message);
    assert_eq!(f.remedy.as_deref(), Some("install a driver of branch R580 or later"));
    // Rubin (10.7) needs R615.
    let spec = FixtureSpec::healthy_h100().driver("610.43.02").gpus_of(1, 0x3000, "NVIDIA Rubin");
    let d = run(&spec, &[], DeviceSelection::All).unwrap();
    assert_eq!(d.verdict(), Verdict::Block, "{:#?}", d.findings);
    let f = d.findings.iter().find(|f| f.code == "L3-DRIVER-TOO-OLD-FOR-GPU").expect("Rubin finding");
    assert_eq!(f.remedy.as_deref(), Some("install a driver of branch R615 or later"));
    // The doctor says the same.
    let dir = tempfile::tempdir().unwrap();
    let host = FixtureSpec::healthy_h100()
        .driver("550.54.15")
        .gpus_of(1, 0x2901, "NVIDIA B200")
        .build(dir.path())
        .unwrap();
    let (text, code) = doctor(host.root(), &[], "all", false, false);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("L3-DRIVER-TOO-OLD-FOR-GPU")
            && text.contains("install a driver of branch R570 or later"),
        "{text}"
    );
    // And how old its knowledge is.
    assert!(text.contains(&format!("built-in tables of {}", kb::KB_DATE)), "{text}");
}

#[test]
fn a_gpu_the_driver_branch_is_too_old_for_is_explained() {
    // A B200 left unbound by a driver of branch 550, beside an H100 it drives.
    let Some(dir) = host_with_an_unbound_gpu("550.54.15", "0x2901") else { return };
    let diagnosis = diagnose(&probe::probe(dir.path()), &request(&[], DeviceSelection::All));
    let f = diagnosis.findings.iter().find(|f| f.code == "L3-GPU-NOT-OWNED").expect("finding");
    assert!(f.message.contains("R570 is the first driver branch for Blackwell"), "{}", f.message);
    assert_eq!(f.remedy.as_deref(), Some("install a driver of branch R570 or later"));
    // With no GPU the driver lists, the B200 it cannot drive is the known cause.
    std::fs::remove_dir_all(dir.path().join("proc/driver/nvidia/gpus")).unwrap();
    std::fs::create_dir_all(dir.path().join("proc/driver/nvidia/gpus")).unwrap();
    let diagnosis = diagnose(&probe::probe(dir.path()), &request(&[], DeviceSelection::All));
    assert_eq!(diagnosis.verdict(), Verdict::Block);
    assert!(diagnosis.has("L3-NO-GPUS"), "{:?}", codes(&diagnosis));
    let f = diagnosis.findings.iter().find(|f| f.code == "L3-DRIVER-TOO-OLD-FOR-GPU").expect("finding");
    assert_eq!(f.remedy.as_deref(), Some("install a driver of branch R570 or later"));
}

#[test]
fn a_cuda_8_image_on_an_r352_driver_is_refused() {
    // R352 reports CUDA 7.5 (352.31 is CUDA 7.5's driver, 367.48 CUDA 8.0's): NVIDIA's CLI
    // refuses cuda>=8.0 there, and so does the hook, naming 8.0's minimum driver.
    let spec = FixtureSpec::healthy_h100().driver("352.93").gpus_of(1, 0x15f8, "Tesla P100-PCIE-16GB");
    let Some(d) = run(&spec, &["cuda>=8.0"], DeviceSelection::All) else { return };
    assert_eq!(d.verdict(), Verdict::Block, "{:#?}", d.findings);
    let f = d.findings.iter().find(|f| f.code == "L4-CUDA-REQUIREMENT").expect("finding");
    assert!(f.message.contains("needs cuda>=8.0; host has 7.5"), "{}", f.message);
    assert!(f.remedy.as_deref().is_some_and(|r| r.contains("367.48")), "{:?}", f.remedy);
    assert_eq!(run(&spec, &["cuda>=7.5"], DeviceSelection::All).unwrap().verdict(), Verdict::Allow);
}
