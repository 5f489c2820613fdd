//! The hook on containers given their GPUs as device nodes: the `config.json` containerd and
//! CRI-O write after applying CDI edits (`NVIDIA_VISIBLE_DEVICES=void`, `linux.devices`, library
//! mounts), Kubernetes' CDI annotations, privileged containers.

use serde_json::{json, Value};

use super::*;
use crate::fixture::{cdi, FixtureSpec, Preset};

struct Run {
    out: HookOutcome,
    report: Value,
}

/// Runs the hook on the host `spec` builds for the bundle `config` (and state annotations).
fn run_on(spec: &FixtureSpec, config: &Value, annotations: &Value) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let host = spec.build(&dir.path().join("host")).unwrap();
    run_built(host.root(), dir.path(), config, annotations)
}

fn run_built(root: &Path, dir: &Path, config: &Value, annotations: &Value) -> Run {
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("config.json"), config.to_string()).unwrap();
    let state = json!({ "ociVersion": "1.0.2", "id": "c1", "status": "creating", "bundle": bundle,
                        "annotations": annotations });
    let reports = dir.join("reports");
    let hc = HookConfig {
        host_root: root.to_path_buf(),
        policy: Policy::Enforce,
        report_dir: Some(reports.clone()),
    };
    let out = run(state.to_string().as_bytes(), &hc);
    let report = serde_json::from_slice(&std::fs::read(reports.join("c1.json")).unwrap()).unwrap();
    Run { out, report }
}

/// A container of an image with `env`, given CDI devices `names` of the spec generated on
/// `generated_on`, started on `host`.
fn cdi_run(host: &FixtureSpec, generated_on: &FixtureSpec, names: &[&str], env: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    host.build(&root).unwrap();
    let spec = generated_on.cdi_spec(&root, "nvidia.com/gpu");
    run_built(&root, dir.path(), &cdi::apply(&spec, names, env), &json!({}))
}

fn codes(r: &Run) -> Vec<String> {
    r.report["diagnosis"]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f["code"].as_str().unwrap_or_default().to_owned())
        .collect()
}

const CUDA13: &str = "STACKBUILD_REQUIRE_CUDA=cuda>=13.0";

#[test]
fn a_cuda_13_image_given_gpu_0_through_cdi_is_blocked_on_r535() {
    let h = Preset::Healthy.spec();
    let r = cdi_run(&h, &h, &["0"], &[CUDA13]);
    assert_eq!(r.out.code, 1, "{}", r.out.stderr);
    assert!(r.out.stderr.contains("L4-CUDA-REQUIREMENT"), "{}", r.out.stderr);
    let sources = &r.report["diagnosis"]["gpu_sources"];
    assert_eq!(sources[0]["source"], "environment", "{sources}");
    assert_eq!(sources[0]["devices"][0], "void");
    assert_eq!(sources[1]["source"], "device-nodes");
    let nodes = sources[1]["devices"].to_string();
    assert!(
        nodes.contains("/dev/nvidia0 (195:0) -> GPU 0 (0000:17:00.0)") || nodes.contains("-> GPU 0"),
        "{nodes}"
    );
    assert!(nodes.contains("/dev/nvidiactl (195:255) -> the driver"), "{nodes}");
}

#[test]
fn an_rtx_5090_given_through_cdi_is_checked_against_the_arch_bound() {
    let h = Preset::ArchTooNew.spec();
    let r = cdi_run(&h, &h, &["0"], &["STACKBUILD_REQUIRE_ARCH=arch<=9.0"]);
    assert_eq!(r.out.code, 1, "{}", r.out.stderr);
    assert!(codes(&r).contains(&"L4-ARCH-REQUIREMENT".to_owned()), "{:?}", codes(&r));
}

#[test]
fn a_healthy_host_starts_a_cdi_container_and_names_only_the_given_gpus() {
    let h = Preset::EightGpus.spec();
    let r = cdi_run(&h, &h, &["3", "5"], &["STACKBUILD_REQUIRE_CUDA=cuda>=12.1"]);
    assert_eq!(r.out.code, 0, "{}", r.out.stderr);
    assert_eq!(r.report["decision"], "allowed");
    let selected: Vec<u64> = r.report["diagnosis"]["host"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["selected"] == true)
        .map(|g| g["index"].as_u64().unwrap())
        .collect();
    assert_eq!(selected, [3, 5]);
}

#[test]
fn void_without_a_gpu_node_is_not_a_gpu_container() {
    let h = Preset::Nouveau.spec();
    let config = json!({ "process": { "env": ["NVIDIA_VISIBLE_DEVICES=void", CUDA13] },
        "linux": { "devices": [ { "path": "/dev/fuse", "type": "c", "major": 10, "minor": 229 } ] } });
    let r = run_on(&h, &config, &json!({}));
    assert_eq!((r.out.code, r.report["decision"].as_str()), (0, Some("skipped")));
}

#[test]
fn the_control_and_uvm_nodes_alone_are_the_driver_without_a_gpu() {
    let h = Preset::Healthy.spec();
    let r = cdi_run(&h, &h, &[], &[CUDA13]);
    assert_eq!(r.out.code, 1, "{}", r.out.stderr);
    assert!(codes(&r).contains(&"L3-NO-DEVICES".to_owned()), "{:?}", codes(&r));
    assert!(codes(&r).contains(&"L4-CUDA-REQUIREMENT".to_owned()));
    let ok = cdi_run(&h, &h, &[], &["STACKBUILD_REQUIRE_CUDA=cuda>=12.0"]);
    assert_eq!(ok.out.code, 0, "{}", ok.out.stderr);
}

#[test]
fn a_spec_written_for_the_old_driver_blocks_with_both_versions_and_the_remedy() {
    let host = Preset::Healthy.spec();
    let old = Preset::Healthy.spec().driver("550.54.14");
    let r = cdi_run(&host, &old, &["0"], &[]);
    assert_eq!(r.out.code, 1, "{}", r.out.stderr);
    let first = r.out.stderr.lines().next().unwrap_or_default();
    assert!(first.contains("[L2-CDI-STALE-LIBRARIES]"), "{first}");
    assert!(first.contains("550.54.14") && first.contains("535.104.05"), "{first}");
    assert!(r.out.stderr.contains("nvidia-ctk cdi generate --output="), "{}", r.out.stderr);
    assert!(r.out.stderr.contains("nvidia-cdi-refresh"), "{}", r.out.stderr);
    // The same spec regenerated starts.
    let fresh = cdi_run(&host, &host, &["0"], &[]);
    assert_eq!(fresh.out.code, 0, "{}", fresh.out.stderr);
}

#[test]
fn nodes_are_gpus_by_number_whatever_their_path() {
    let h = Preset::EightGpus.spec();
    let config = json!({ "process": { "env": ["NVIDIA_VISIBLE_DEVICES=void"] },
        "linux": { "devices": [
            { "path": "/dev/accel/any-name", "type": "c", "major": 195, "minor": 6 },
            { "path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 9 }
        ] } });
    let r = run_on(&h, &config, &json!({}));
    let gpus = &r.report["diagnosis"]["host"]["gpus"];
    assert_eq!(gpus[6]["selected"], true, "{gpus}");
    assert_eq!(gpus[0]["selected"], false, "the path /dev/nvidia0 does not make it GPU 0");
    assert_eq!(r.out.code, 1, "minor 9 is no GPU of an eight-GPU host: {}", r.out.stderr);
    assert!(codes(&r).contains(&"L3-CDI-UNKNOWN-DEVICE".to_owned()), "{:?}", codes(&r));
}

#[test]
fn mig_devices_are_checked_on_their_parent() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    Preset::MigNode.build(&root).unwrap();
    let probe = crate::probe::probe(&root);
    let cap = |gpu_minor: u32| {
        probe.mig.instances.iter().find(|i| i.gpu_minor == gpu_minor).and_then(|i| i.ci_minor).unwrap()
    };
    // GPU 0 is an A100 (8.0), GPU 1 an H100 (9.0).
    for (gpu_minor, code) in [(1, 0), (0, 1)] {
        let config = json!({ "process": { "env": ["NVIDIA_VISIBLE_DEVICES=void", "STACKBUILD_REQUIRE_ARCH=arch>=9.0"] },
            "linux": { "devices": [
                { "path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255 },
                { "path": format!("/dev/nvidia-caps/nvidia-cap{}", cap(gpu_minor)), "type": "c", "major": 237, "minor": cap(gpu_minor) }
            ] } });
        let sub = dir.path().join(format!("run{gpu_minor}"));
        let r = run_built(&root, &sub, &config, &json!({}));
        assert_eq!(r.out.code, code, "MIG on GPU minor {gpu_minor}: {}", r.out.stderr);
    }
}

#[test]
fn a_kubernetes_cdi_annotation_selects_gpus() {
    let h = Preset::Healthy.spec();
    let config = json!({ "process": { "env": ["NVIDIA_VISIBLE_DEVICES=void", CUDA13] } });
    let ann = json!({ "cdi.k8s.io/nvidia-device-plugin_0123": "nvidia.com/gpu=0" });
    let r = run_on(&h, &config, &ann);
    assert_eq!(r.out.code, 1, "{}", r.out.stderr);
    assert_eq!(r.report["diagnosis"]["gpu_sources"][1]["source"], "cdi-annotation");
    let other = json!({ "cdi.k8s.io/net": "vendor.com/nic=eth1" });
    assert_eq!(run_on(&h, &config, &other).report["decision"], "skipped");
}

#[test]
fn disable_require_keeps_its_meaning_under_cdi() {
    let h = Preset::Healthy.spec();
    let r = cdi_run(&h, &h, &["0"], &[CUDA13, "NVIDIA_DISABLE_REQUIRE=true"]);
    assert_eq!(r.out.code, 0, "{}", r.out.stderr);
}

/// `docker run --privileged` and privileged pods: every host device, NVIDIA's included.
fn privileged_config(env: &[&str]) -> Value {
    json!({
        "process": { "env": env, "capabilities": { "bounding": ["CAP_SYS_ADMIN", "CAP_MKNOD"] } },
        "linux": { "devices": [
            { "path": "/dev/null", "type": "c", "major": 1, "minor": 3 },
            { "path": "/dev/sda", "type": "b", "major": 8, "minor": 0 },
            { "path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255 },
            { "path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0 },
            { "path": "/dev/nvidia-uvm", "type": "c", "major": 510, "minor": 0 }
        ] }
    })
}

#[test]
fn a_privileged_container_without_a_gpu_request_starts_on_a_host_whose_driver_is_not_ready() {
    // The GPU Operator's driver container: privileged, on a host where nouveau holds the GPU.
    let h = Preset::Nouveau.spec();
    let r = run_on(&h, &privileged_config(&[CUDA13]), &json!({}));
    assert_eq!(r.out.code, 0, "{}", r.out.stderr);
    assert_eq!(r.report["decision"], "skipped");
    assert!(r.report["reason"].as_str().unwrap().contains("privileged"), "{}", r.report);
    // Its other side: a privileged container that asks for GPUs is checked.
    let asks = run_on(&h, &privileged_config(&["NVIDIA_VISIBLE_DEVICES=all"]), &json!({}));
    assert_eq!(asks.out.code, 1, "{}", asks.out.stderr);
    assert!(asks.out.stderr.contains("L1-NOUVEAU-LOADED"), "{}", asks.out.stderr);
    // CAP_SYS_ADMIN alone (`--cap-add SYS_ADMIN`) with CDI nodes only is still a GPU request.
    let mut cap_only = privileged_config(&[CUDA13]);
    cap_only["linux"]["devices"].as_array_mut().unwrap().drain(0..2);
    let r = run_on(&Preset::Healthy.spec(), &cap_only, &json!({}));
    assert_eq!(r.out.code, 1, "{}", r.out.stderr);
}

#[test]
fn a_uvm_node_of_a_previous_major_is_stale() {
    let h = Preset::Healthy.spec();
    let config = json!({ "process": { "env": ["NVIDIA_VISIBLE_DEVICES=void"] },
        "linux": { "devices": [
            { "path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0 },
            { "path": "/dev/nvidia-uvm", "type": "c", "major": 507, "minor": 0 }
        ] } });
    let r = run_on(&h, &config, &json!({}));
    assert_eq!(r.out.code, 1, "{}", r.out.stderr);
    assert!(r.out.stderr.contains("nvidia-uvm is 510 now"), "{}", r.out.stderr);
}

#[test]
fn wsl2_and_jetson_gpus_given_through_their_nodes_are_checked() {
    for (preset, node, numbers) in
        [(Preset::Wsl2, "/dev/dxg", (10, 63)), (Preset::JetsonOrin, "/dev/nvhost-gpu", (497, 2))]
    {
        let dir = tempfile::tempdir().unwrap();
        let host = preset.build(&dir.path().join("host")).unwrap();
        if !host.real_device_nodes() {
            return;
        }
        let config = json!({ "process": { "env": ["NVIDIA_VISIBLE_DEVICES=void", "STACKBUILD_REQUIRE_MACHINE=machine=riscv64"] },
            "linux": { "devices": [ { "path": node, "type": "c", "major": numbers.0, "minor": numbers.1 } ] } });
        let r = run_built(host.root(), dir.path(), &config, &json!({}));
        assert_eq!(r.out.code, 1, "{}: {}", preset.name(), r.out.stderr);
        assert!(r.out.stderr.contains("machine=riscv64"), "{}", r.out.stderr);
    }
}

/// The daemon-reload loss, warned at start: a container whose GPUs a runtime hook adds (the
/// environment asks, `linux.devices` has none) under systemd's cgroup driver, on a host whose
/// nodes have no `/dev/char` link. It starts (a warning), and the report says why and what to do;
/// the same container given its GPU as a device node (CDI) gets no warning.
#[test]
fn a_legacy_gpu_container_under_systemd_cgroups_is_warned_about_daemon_reload() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    let host = Preset::Healthy.build(&root).unwrap();
    if !host.real_device_nodes() {
        eprintln!("skipped: mknod is not permitted here, so the fixture has no device nodes");
        return;
    }
    host.systemd_cgroup2().unwrap();
    let config = |cgroups: &str| {
        json!({ "ociVersion": "1.0.2", "process": { "env": ["NVIDIA_VISIBLE_DEVICES=0"] },
                "root": { "path": "rootfs" }, "linux": { "cgroupsPath": cgroups } })
    };
    let legacy = run_built(&root, dir.path(), &config("system.slice:docker:c1"), &json!({}));
    assert_eq!(legacy.out.code, 0, "{}", legacy.out.stderr);
    assert!(codes(&legacy).contains(&"L2-DAEMON-RELOAD-EXPOSED".to_owned()), "{:?}", codes(&legacy));
    // The cgroupfs driver: systemd never rewrites its device rules.
    let cgroupfs = run_built(&root, dir.path(), &config("/docker/c1"), &json!({}));
    assert!(!codes(&cgroupfs).contains(&"L2-DAEMON-RELOAD-EXPOSED".to_owned()), "{:?}", codes(&cgroupfs));
}
