//! `stackbuild affinity` against `stackhook labels`: the node affinity printed for an image
//! selects the fixture hosts whose hook accepts the image's requirements, and only those.
//!
//! The selector is evaluated here by a small evaluator of its own over the printed JSON (not the
//! library's `matches`), with Kubernetes' semantics: `In`, `NotIn` (also true when the label is
//! absent), `Exists`, `DoesNotExist`, `Gt`/`Lt` (the label's value as an integer); expressions
//! of a term AND-ed, terms OR-ed.

use std::collections::BTreeMap;
use std::path::Path;

use stackbuild_image::{Image, ImageConfig, RuntimeConfig};
use stackbuild_k8s::AffinityOptions as Options;
use stackhook::contract::image::DeviceSelection;
use stackhook::contract::require::RequirementSet;
use stackhook::diagnose::{self, Request, Severity, Verdict};
use stackhook::fixture::{Preset, CUDA_12_1_REQUIRE};
use stackhook::labels;

/// Writes an OCI layout (tag `test`) and an archive of an image with no layers and `env`.
fn write_image(dir: &Path, env: &[&str]) -> (String, String) {
    let config = ImageConfig {
        created: Some(stackhook::contract::time::rfc3339(0)),
        architecture: "amd64".into(),
        os: "linux".into(),
        config: RuntimeConfig {
            env: env.iter().map(|e| (*e).to_owned()).collect(),
            ..RuntimeConfig::default()
        },
        ..ImageConfig::default()
    };
    let image = Image::new(config, Vec::new(), BTreeMap::new()).unwrap();
    let layout = dir.join("layout");
    stackbuild_image::write_layout(&layout, &image, "test").unwrap();
    let archive = dir.join("image.tar");
    stackbuild_image::write_archive(&archive, &image, "affinity-test:latest").unwrap();
    (format!("{}:test", layout.display()), archive.display().to_string())
}

/// Whether one `NodeSelectorRequirement` (as printed) matches `labels`.
fn expression_matches(e: &serde_json::Value, labels: &BTreeMap<String, String>) -> bool {
    let key = e["key"].as_str().expect("key");
    let values: Vec<&str> =
        e["values"].as_array().map(|v| v.iter().filter_map(|s| s.as_str()).collect()).unwrap_or_default();
    let value = labels.get(key).map(String::as_str);
    let int = |s: &str| s.parse::<i64>().ok();
    let compare = |want: fn(i64, i64) -> bool| {
        assert_eq!(values.len(), 1, "{e}");
        match (value.and_then(int), int(values[0])) {
            (Some(v), Some(b)) => want(v, b),
            _ => false,
        }
    };
    match e["operator"].as_str().expect("operator") {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(|v, b| v > b),
        "Lt" => compare(|v, b| v < b),
        other => panic!("unknown operator {other}"),
    }
}

/// Whether the printed affinity (JSON) selects a node with `labels`.
fn selects(affinity_json: &str, labels: &BTreeMap<String, String>) -> bool {
    let doc: serde_json::Value = serde_json::from_str(affinity_json).unwrap();
    let terms = doc["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
        .expect("nodeSelectorTerms");
    assert!(!terms.is_empty());
    terms.iter().any(|t| {
        let exprs = t["matchExpressions"].as_array().expect("matchExpressions");
        // An empty term matches no node in Kubernetes; we never print one.
        !exprs.is_empty() && exprs.iter().all(|e| expression_matches(e, labels))
    })
}

/// A built fixture host: its node labels (with the kubelet's `kubernetes.io/arch`) and probe.
struct Node {
    labels: BTreeMap<String, String>,
    probe: stackhook::probe::HostProbe,
    real_device_nodes: bool,
}

fn node(preset: Preset, dir: &Path) -> Node {
    let host = preset.build(&dir.join(preset.name())).unwrap();
    let probe = stackhook::probe::probe(host.root());
    let mut labels = labels::node_labels(&probe);
    if let Some(arch) = labels::kubernetes_arch(&probe.machine.value) {
        labels.insert(labels::KUBERNETES_ARCH.to_owned(), arch.to_owned());
    }
    Node { labels, probe, real_device_nodes: host.real_device_nodes() }
}

fn requirement_set(requires: &[&str]) -> RequirementSet {
    let mut set = RequirementSet::default();
    for (i, r) in requires.iter().enumerate() {
        set.push(format!("STACKBUILD_REQUIRE_R{i}"), r).unwrap();
    }
    set
}

/// The hook's verdict on the requirements alone: no error that a requirement caused.
fn hook_accepts_requirements(node: &Node, set: &RequirementSet) -> bool {
    let d = diagnose::diagnose(&node.probe, &Request::new(DeviceSelection::All, set.clone()));
    let refused = d
        .of(Severity::Error)
        .any(|f| f.code.ends_with("-REQUIREMENT") || f.code == "L4-FORWARD-COMPAT-UNSUPPORTED");
    !refused
}

/// The hook's whole verdict.
fn hook_allows(node: &Node, set: &RequirementSet) -> bool {
    diagnose::diagnose(&node.probe, &Request::new(DeviceSelection::All, set.clone())).verdict()
        == Verdict::Allow
}

fn env_of(requires: &[&str]) -> Vec<String> {
    requires.iter().enumerate().map(|(i, r)| format!("STACKBUILD_REQUIRE_R{i}={r}")).collect()
}

/// The four scenarios of the brief, through images: the same selector from the layout and the
/// archive, printed YAML snapshot-tested, and the verdict agreeing with the hook's.
#[test]
fn image_affinity_agrees_with_the_hook() {
    let work = tempfile::tempdir().unwrap();
    let hosts = tempfile::tempdir().unwrap();
    let cases: [(Preset, &[&str], bool); 4] = [
        (Preset::Healthy, &["cuda>=12.1", "arch>=8.0,arch<=9.0"], true),
        (Preset::DriverTooOld, &["cuda>=12.4"], false),
        (Preset::ArchTooNew, &["arch<=9.0"], false),
        (Preset::UvmMissing, &["module=nvidia_uvm"], false),
    ];
    let mut yaml = String::new();
    for (preset, requires, selected) in cases {
        let dir = work.path().join(preset.name());
        std::fs::create_dir_all(&dir).unwrap();
        let env = env_of(requires);
        let env: Vec<&str> = env.iter().map(String::as_str).collect();
        let (layout, archive) = write_image(&dir, &env);
        let options = Options { require_ready: false };
        let from_layout = stackbuild_k8s::affinity_for_image(&layout, &[], &options).unwrap();
        let from_archive = stackbuild_k8s::affinity_for_image(&archive, &[], &options).unwrap();
        assert_eq!(from_layout.terms, from_archive.terms, "{}", preset.name());
        yaml.push_str(&from_layout.to_yaml(preset.name()));
        yaml.push('\n');

        let node = node(preset, hosts.path());
        let set = requirement_set(requires);
        let json = from_layout.to_json();
        assert_eq!(selects(&json, &node.labels), selected, "{}: {json}", preset.name());
        assert_eq!(hook_accepts_requirements(&node, &set), selected, "{}: the hook disagrees", preset.name());

        // With host readiness required (the default), the verdict is the hook's whole one.
        if node.real_device_nodes {
            let full =
                stackbuild_k8s::affinity_for_image(&layout, &[], &Options::default()).unwrap().to_json();
            assert_eq!(selects(&full, &node.labels), selected, "{}", preset.name());
            assert_eq!(hook_allows(&node, &set), selected, "{}", preset.name());
        }
    }
    insta::assert_snapshot!("four_scenarios", yaml);
}

/// Every preset host against a matrix of requirements: a selected host is always one whose hook
/// accepts the requirements (the selector is never wider than the hook), and on hosts whose
/// driver and GPUs the labels fully describe it is exactly as wide, except where noted.
#[test]
fn selector_is_never_wider_than_the_hook() {
    let hosts = tempfile::tempdir().unwrap();
    let matrix: &[&[&str]] = &[
        &["cuda>=12.1"],
        &["cuda>=12.4"],
        &["cuda<12.2"],
        &["cuda=12.2"],
        &["driver>=535"],
        &["driver<530"],
        &["driver=535.104.05"],
        &["driver!=535.104.05"],
        &["arch>=8.0,arch<=9.0"],
        &["arch<=9.0"],
        &["arch!=9.0"],
        &["arch=12.0"],
        &["brand=nvidia"],
        &["brand!=geforce"],
        &["kernel!=5.15.0-107-generic"],
        &["kernel>=5.15.0-106-generic"],
        &["kernel>=5.15"],
        &["kernel<6"],
        &["module=nvidia_uvm"],
        &["module!=nouveau"],
        &["gpus>=2"],
        &["gpus>=8"],
        &["machine=x86_64"],
        &["machine!=x86_64"],
        &["platform=jetson"],
        &["platform!=wsl2"],
        &[CUDA_12_1_REQUIRE],
        &["cuda>=12.1", "module=nvidia_uvm,module!=nouveau"],
        &["cuda>=12.1 driver>=470,driver<471", "arch>=8.0"],
    ];
    let nodes: Vec<(Preset, Node)> = Preset::ALL.iter().map(|p| (*p, node(*p, hosts.path()))).collect();
    let mut table = String::new();
    for requires in matrix {
        let set = requirement_set(requires);
        let json = stackbuild_k8s::node_affinity(&set, &Options { require_ready: false }).unwrap().to_json();
        let full = stackbuild_k8s::node_affinity(&set, &Options::default()).unwrap().to_json();
        let mut name = requires.join(" & ");
        if name.len() > 56 {
            name = format!("{}...", &name[..53]);
        }
        let mut row = format!("{name:<60}");
        for (preset, node) in &nodes {
            let selected = selects(&json, &node.labels);
            let accepted = hook_accepts_requirements(node, &set);
            assert!(!selected || accepted, "{}: selected but the hook refuses {requires:?}", preset.name());
            if node.real_device_nodes && selects(&full, &node.labels) {
                assert!(
                    hook_allows(node, &set),
                    "{}: selected but the hook blocks {requires:?}",
                    preset.name()
                );
            }
            // `.` both refuse, `+` both accept, `-` the selector leaves out a host the hook accepts.
            row.push(match (selected, accepted) {
                (true, _) => '+',
                (false, true) => '-',
                (false, false) => '.',
            });
        }
        table.push_str(row.trim_end());
        table.push('\n');
    }
    let header: String = nodes.iter().map(|(p, _)| p.name().chars().next().unwrap_or('?')).collect();
    let legend: Vec<String> = nodes.iter().map(|(p, _)| p.name().to_owned()).collect();
    insta::assert_snapshot!(
        "matrix",
        format!("# columns: {}\n{:<60}{header}\n{table}", legend.join(", "), "")
    );
}
