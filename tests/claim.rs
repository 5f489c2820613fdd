//! `stackbuild claim` against the hook: for every GPU and MIG device of the fixture hosts,
//! written as NVIDIA's DRA driver publishes it in a `ResourceSlice`, the claim's CEL selectors
//! (compiled and evaluated by `kube-cel`, an implementation of Kubernetes' CEL libraries, not by
//! our code) select the device if and only if the hook allows that device for the same image.
//!
//! The hook's verdict per device: blocked when a requirement fails (`*-REQUIREMENT`,
//! `L4-FORWARD-COMPAT-UNSUPPORTED`), allowed when every requirement holds, and "cannot tell" when
//! the hook only warns (a model its tables lack): those devices are counted, not compared, since
//! the DRA driver publishes facts the hook's tables did not have. Node facts (`kernel`,
//! `module`, `machine`, `platform`) are left to the hook by the claim and taken out of both
//! sides here.
//!
//! Where kube-cel differs from Kubernetes: an attribute domain a device lacks is an empty map in
//! Kubernetes and an error in kube-cel, so devices are given the domain (empty for another
//! driver's device, which must not be selected) as Kubernetes presents it.
//!
//! The printed documents are validated with `kubernetes-validate --strict` for every bundled
//! Kubernetes version from 1.34 (`$STACKBUILD_K8S_VENV`, default `target/k8s-validators`, made by
//! `.ci/install`); without it that part is reported as skipped.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use kube_cel::cel::objects::{Key as CelKey, Value as Cel};
use kube_cel::cel::{Context, Program};
use kube_cel::KubeCelExt;
use stackbuild_image::{Image, ImageConfig, RuntimeConfig};
use stackbuild_k8s::ClaimOptions as Options;
use stackhook::contract::image::{ContainerRequest, DeviceSelection};
use stackhook::contract::kb;
use stackhook::contract::require::{CudaBound, Expr, Key, Requirement, RequirementSet, Term};
use stackhook::diagnose::{self, Request, Severity};
use stackhook::fixture::{FixtureSpec, Preset, CUDA_12_1_REQUIRE};
use stackhook::probe::{self, HostProbe};

/// NVML's brand names as the DRA driver publishes them (go-nvlib `GetBrandAsString`), by the
/// word NVIDIA's `brand=` compares.
const DRA_BRANDS: [(&str, &str); 17] = [
    ("unknown", "Unknown"),
    ("quadro", "Quadro"),
    ("tesla", "Tesla"),
    ("nvs", "NVS"),
    ("grid", "Grid"),
    ("geforce", "GeForce"),
    ("titan", "Titan"),
    ("nvidiavapps", "NvidiaVApps"),
    ("nvidiavpc", "NvidiaVPC"),
    ("nvidiavcs", "NvidiaVCS"),
    ("nvidiavws", "NvidiaVWS"),
    ("nvidiacloudgaming", "NvidiaCloudGaming"),
    ("quadrortx", "QuadroRTX"),
    ("nvidiartx", "NvidiaRTX"),
    ("nvidia", "Nvidia"),
    ("geforcertx", "GeForceRTX"),
    ("titanrtx", "TitanRTX"),
];

/// One device as a `ResourceSlice` lists it.
#[derive(Debug, Clone)]
struct Device {
    name: String,
    strings: BTreeMap<&'static str, String>,
    versions: BTreeMap<&'static str, String>,
}

impl Device {
    fn slice_entry(&self) -> serde_json::Value {
        let mut attrs = serde_json::Map::new();
        for (k, v) in &self.strings {
            attrs.insert((*k).into(), serde_json::json!({"string": v}));
        }
        for (k, v) in &self.versions {
            attrs.insert((*k).into(), serde_json::json!({"version": v}));
        }
        serde_json::json!({"name": self.name, "attributes": attrs, "capacity": {"memory": {"value": "80Gi"}}})
    }

    /// The CEL `device` variable, as Kubernetes builds it from the slice.
    fn cel(&self, driver: &str) -> Cel {
        let mut attrs: HashMap<CelKey, Cel> = HashMap::new();
        for (k, v) in &self.strings {
            attrs.insert(CelKey::String(Arc::new((*k).to_owned())), Cel::String(Arc::new(v.clone())));
        }
        for (k, v) in &self.versions {
            attrs.insert(CelKey::String(Arc::new((*k).to_owned())), semver(v));
        }
        let mut domains: HashMap<CelKey, Cel> = HashMap::new();
        let ours = if driver == stackbuild_k8s::DOMAIN { attrs } else { HashMap::new() };
        domains.insert(CelKey::String(Arc::new(stackbuild_k8s::DOMAIN.to_owned())), Cel::Map(ours.into()));
        let mut device: HashMap<CelKey, Cel> = HashMap::new();
        device.insert(CelKey::String(Arc::new("driver".into())), Cel::String(Arc::new(driver.to_owned())));
        device.insert(CelKey::String(Arc::new("attributes".into())), Cel::Map(domains.into()));
        Cel::Map(device.into())
    }
}

/// A version attribute's value: `semver(s)` evaluated by kube-cel (strict: three components).
fn semver(s: &str) -> Cel {
    let ctx = Context::default().with_all();
    Program::compile(&format!("semver('{s}')")).unwrap().execute(&ctx).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// `X.Y.Z` as the DRA driver writes versions (Masterminds semver: leading zeros dropped,
/// missing components zero).
fn published(parts: &[u64]) -> String {
    let p = |i: usize| parts.get(i).copied().unwrap_or(0);
    format!("{}.{}.{}", p(0), p(1), p(2))
}

/// Whether `expressions` (all must hold) select `device`.
fn selects(programs: &[Program], device: &Cel) -> bool {
    programs.iter().all(|p| {
        let mut ctx = Context::default().with_all();
        ctx.add_variable_from_value("device", device.clone());
        match p.execute(&ctx) {
            Ok(Cel::Bool(b)) => b,
            other => panic!("selector did not return a bool: {other:?}"),
        }
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hook {
    Allows,
    Blocks,
    CannotTell,
}

/// The hook's verdict on the requirements for one device.
fn hook_on(probe: &HostProbe, id: &str, set: &RequirementSet) -> Hook {
    let d = diagnose::diagnose(probe, &Request::new(DeviceSelection::List(vec![id.to_owned()]), set.clone()));
    let blocked = d.of(Severity::Error).any(|f| {
        f.code.ends_with("-REQUIREMENT")
            || f.code == "L4-FORWARD-COMPAT-UNSUPPORTED"
            || f.code == "L4-REQUIREMENT-INVALID"
    });
    let unsure = d
        .of(Severity::Warning)
        .any(|f| f.code == "L4-REQUIREMENT-UNVERIFIABLE" || f.code == "L4-FORWARD-COMPAT-UNKNOWN-GPU");
    match (blocked, unsure) {
        (true, _) => Hook::Blocks,
        (false, true) => Hook::CannotTell,
        _ => Hook::Allows,
    }
}

/// The device `id` of a probed host as the DRA driver would publish it, from the facts the hook
/// has; `None` where those are not exact (no driver, a CUDA version known only as a range), and
/// for a board that answers `Model: Unknown`: the DRA driver names each device through NVML and
/// publishes none when NVML cannot (deviceinfo.go), so no claim ever meets that board.
fn device_of(probe: &HostProbe, id: &str, mig: bool) -> Option<Device> {
    let facts = probe.facts(&DeviceSelection::List(vec![id.to_owned()])).ok()?;
    if facts.cuda_bound != CudaBound::Exact {
        return None;
    }
    let cuda = facts.cuda.as_ref()?;
    let driver = facts.driver.as_ref()?;
    let gpu = facts.gpus.first()?;
    let index: usize = id.split(':').next()?.parse().ok()?;
    let g = probe.gpus.get(index).filter(|g| !g.model_unknown())?;
    let mut strings = BTreeMap::new();
    strings.insert("type", if mig { "mig" } else { "gpu" }.to_owned());
    strings.insert("uuid", g.uuid.clone().unwrap_or_default());
    strings.insert("productName", g.model.clone().unwrap_or_default());
    let model = probe.gpu_model(g).map(|(m, _)| m);
    strings.insert("architecture", model.map_or("Unknown".into(), |m| m.architecture.clone()));
    let word = gpu.brand.clone().unwrap_or_else(|| "unknown".into());
    let brand = DRA_BRANDS.iter().find(|(w, _)| *w == word).map_or("Unknown", |(_, n)| n);
    strings.insert("brand", brand.to_owned());
    if mig {
        strings.insert("profile", "1g.10gb".into());
    }
    let mut versions = BTreeMap::new();
    versions.insert("driverVersion", published(driver.parts()));
    versions.insert("cudaDriverVersion", published(&[cuda.part(0), cuda.part(1)]));
    if let Some(cc) = gpu.arch {
        versions.insert("cudaComputeCapability", published(&[u64::from(cc.major), u64::from(cc.minor)]));
    }
    let name =
        if mig { format!("gpu-{}-mig-{}", index, id.replace(':', "-")) } else { format!("gpu-{index}") };
    Some(Device { name, strings, versions })
}

/// A fixture host: its name, its probe, and its device ids (`true` for a MIG device).
type Host = (String, HostProbe, Vec<(String, bool)>);

/// Every fixture host: the presets, and per driver branch one host with a GPU of each model
/// the knowledge base has a PCI id and a driver name for.
fn hosts(dir: &Path) -> Vec<Host> {
    let mut specs: Vec<(String, FixtureSpec)> =
        Preset::ALL.iter().map(|p| (p.name().to_owned(), p.spec())).collect();
    for driver in ["470.256.02", "535.104.05", "550.54.15", "570.124.06", "580.65.06", "610.43.02"] {
        let mut spec = FixtureSpec::healthy_h100().driver(driver).gpus_of(0, 0x2330, "none");
        let mut i = 0u32;
        for m in kb::all_gpus() {
            let (Some(&pci), Some(name)) = (m.pci_ids.first(), m.model_names.first()) else { continue };
            spec = spec.gpu(
                &format!("0000:{:02x}:00.0", i + 1),
                pci,
                name,
                i,
                &stackhook::fixture::fixture_uuid(i),
            );
            i += 1;
        }
        specs.push((format!("all-models-{driver}"), spec));
    }
    specs
        .into_iter()
        .map(|(name, spec)| {
            let host = spec.build(&dir.join(&name)).unwrap();
            let p = probe::probe(host.root());
            let mut ids: Vec<(String, bool)> = (0..p.gpus.len()).map(|i| (i.to_string(), false)).collect();
            for (gpu, count) in mig_counts(&spec) {
                ids.extend((0..count).map(|j| (format!("{gpu}:{j}"), true)));
            }
            (name, p, ids)
        })
        .collect()
}

/// MIG devices per GPU index of a fixture spec.
fn mig_counts(spec: &FixtureSpec) -> BTreeMap<usize, u32> {
    let mut out = BTreeMap::new();
    for (gpu, _, _) in spec.mig_list() {
        *out.entry(*gpu).or_insert(0) += 1;
    }
    out
}

/// The set with node facts taken out, as the claim leaves them to the hook.
fn device_part(set: &RequirementSet) -> RequirementSet {
    let entries = set
        .entries
        .iter()
        .map(|r| Requirement {
            source: r.source.clone(),
            expr: Expr(
                r.expr
                    .0
                    .iter()
                    .map(|t| {
                        Term(
                            t.0.iter()
                                .filter(|f| {
                                    !matches!(f.key, Key::Kernel | Key::Module | Key::Machine | Key::Platform)
                                })
                                .cloned()
                                .collect(),
                        )
                    })
                    .collect(),
            ),
            // NVIDIA's left-to-right order, where an unknown key makes the value invalid.
            nvidia_order: r.nvidia_order.clone(),
        })
        .collect();
    RequirementSet { entries }
}

fn recipe_requirements() -> Vec<(String, Vec<(String, String)>)> {
    let dir = test_support::tools::workspace().join("recipes");
    let mut out = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    names.sort();
    for path in names {
        let recipe = stackbuild_recipe::Recipe::load(&path).unwrap();
        let report = stackbuild_check::check(
            &recipe,
            &stackbuild_check::CheckOptions { offline: true, cache_dir: None },
        )
        .unwrap();
        for stack in &report.stacks {
            let reqs = stack.requirements.iter().map(|r| (r.variable.clone(), r.expr.clone())).collect();
            out.push((format!("{} {}", path.file_name().unwrap().to_string_lossy(), stack.platform), reqs));
        }
    }
    // The DreamZero image itself where the README's first command built it: its requirements
    // as the build derived them from the fat binaries, not as `check` predicts them.
    let built = test_support::tools::workspace().join("images/dreamzero");
    if built.join("index.json").is_file() {
        let request = stackbuild_k8s::image_request(built.to_str().unwrap(), &[]).unwrap();
        let reqs = request.requirements.entries.iter().map(|r| (r.source.clone(), r.written())).collect();
        out.push(("images/dreamzero (built)".to_owned(), reqs));
    } else {
        eprintln!("note: images/dreamzero is not built here; the agreement runs on its recipe's predicted requirements only");
    }
    out
}

/// NVIDIA's own requirement strings from the conformance table, and a matrix over the device keys.
fn requirement_strings() -> Vec<(String, Vec<(String, String)>)> {
    let one = |v: &str| vec![("NVIDIA_REQUIRE_CUDA".to_owned(), v.to_owned())];
    let mut out: Vec<(String, Vec<(String, String)>)> = [
        "arch=8.0",
        "arch>=10.0",
        "arch>=8.0",
        "arch>=9.0",
        "arch>=9.0 brand=nvidia",
        "brand=nvidia",
        "brand=tesla",
        "cuda>=11.0",
        "cuda>=11.6",
        "cuda>=12.0",
        "cuda>=9.0",
        "cuda>=99.0",
        "driver>=535",
        "driver>=550",
        "kernel!=5.15.0-105-generic",
        CUDA_12_1_REQUIRE,
        "cuda>=12.4",
        "cuda<12.2",
        "cuda=12.2",
        "driver<530",
        "driver=535.104.05",
        "driver!=535.104.05",
        "arch>=8.0,arch<=9.0",
        "arch<=9.0",
        "arch!=9.0",
        "arch=12.0",
        "brand!=geforce",
        "brand=geforce,driver>=470,driver<471",
        "cuda>=13.0 brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536",
        "cuda>=12.8 brand=geforce,driver>=550,driver<551 brand=nvidia,driver>=550,driver<551",
    ]
    .iter()
    .map(|v| ((*v).to_owned(), one(v)))
    .collect();
    out.extend(recipe_requirements());
    out
}

fn request_of(reqs: &[(String, String)]) -> ContainerRequest {
    let env: Vec<String> = reqs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    ContainerRequest::from_env(env.iter().map(String::as_str), &BTreeMap::new()).unwrap()
}

/// The hook's verdict on every published device of every host, for a requirement no claim can
/// carry (no device may be handed out, so the hook must allow none).
fn verdicts(hosts: &[Host], set: &RequirementSet) -> Vec<(String, Hook)> {
    let mut out = Vec::new();
    for (host, probe, ids) in hosts {
        for (id, mig) in ids {
            if device_of(probe, id, *mig).is_some() {
                out.push((format!("{host} device {id}"), hook_on(probe, id, set)));
            }
        }
    }
    out
}

#[test]
// One table-driven walk over every requirement string, host and device, with its checks side by
// side: splitting it would scatter the tallies it asserts on.
#[allow(clippy::too_many_lines)]
fn claim_selects_exactly_the_devices_the_hook_allows() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = hosts(dir.path());
    let mut compared = 0usize;
    let mut selected = 0usize;
    let mut cannot_tell = 0usize;
    let mut refused = 0usize;
    let mut guarded = 0usize;
    let mut dreamzero: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut slices = Vec::new();
    let mut disagreements = Vec::new();
    for (label, reqs) in requirement_strings() {
        let request = request_of(&reqs);
        let options = Options { name: "t-gpu".into(), count: Some(1), mig: false };
        let set = device_part(&request.requirements);
        let c = match stackbuild_k8s::for_request(&request, &options) {
            Ok(c) => c,
            // No claim: no device may be handed out, so the hook must allow none of them.
            Err(e @ stackbuild_k8s::ClaimError::Unsatisfiable { .. }) => {
                for (where_, verdict) in verdicts(&hosts, &set) {
                    match verdict {
                        Hook::CannotTell => cannot_tell += 1,
                        Hook::Allows => {
                            disagreements
                                .push(format!("{label} | {where_}: hook allows, claim refused: {e}"));
                        }
                        Hook::Blocks => {
                            compared += 1;
                            refused += 1;
                        }
                    }
                }
                continue;
            }
            Err(e) => panic!("{label}: {e}"),
        };
        let programs: Vec<Program> = c
            .selectors
            .iter()
            .map(|s| {
                Program::compile(&s.expression).unwrap_or_else(|e| panic!("{label}: {e}\n{}", s.expression))
            })
            .collect();
        for (host, probe, ids) in &hosts {
            for (id, mig) in ids {
                let Some(device) = device_of(probe, id, *mig) else { continue };
                if slices.len() < 400 && label == "cuda>=12.0" {
                    slices.push(device.slice_entry());
                }
                let verdict = hook_on(probe, id, &set);
                let picked = selects(&programs, &device.cel(stackbuild_k8s::DOMAIN));
                if label.starts_with("dreamzero-cu121.toml") || label.starts_with("images/dreamzero") {
                    let key =
                        format!("{label} | {host}: {}", if picked { "selected" } else { "not selected" });
                    dreamzero.entry(key).or_default().push(format!("{id} {}", device.strings["productName"]));
                }
                // A device that lacks an attribute a selector reads is not selected, and is never
                // a CEL error (`selects` panics on one): the guards at the front hold.
                if picked && ids.first().is_some_and(|(first, _)| first == id) {
                    for attr in device.strings.keys().chain(device.versions.keys()) {
                        let mut lacking = device.clone();
                        lacking.strings.remove(attr);
                        lacking.versions.remove(attr);
                        let reads = c.selectors.iter().any(|s| s.expression.contains(&format!("].{attr}.")));
                        if reads {
                            assert!(
                                !selects(&programs, &lacking.cel(stackbuild_k8s::DOMAIN)),
                                "{label}: selected without {attr}"
                            );
                        }
                        guarded += 1;
                    }
                }
                // Another driver's device with the same attributes is never selected.
                if !c.selectors.is_empty() {
                    assert!(
                        !selects(&programs, &device.cel("other.example.com")),
                        "{label}: foreign device selected"
                    );
                }
                match verdict {
                    Hook::CannotTell => cannot_tell += 1,
                    v => {
                        compared += 1;
                        selected += usize::from(picked);
                        if picked != (v == Hook::Allows) {
                            disagreements.push(format!(
                                "{label} | {host} device {id} ({}): hook {v:?}, claim {}",
                                device.strings["productName"],
                                if picked { "selects" } else { "does not select" }
                            ));
                        }
                    }
                }
            }
        }
    }
    eprintln!(
        "compared {compared} device verdicts ({selected} selected, {refused} under a requirement no claim can \
         carry), {cannot_tell} the hook cannot tell, {guarded} evaluations of a selected device with one attribute \
         taken away"
    );
    assert!(disagreements.is_empty(), "{} disagreements:\n{}", disagreements.len(), disagreements.join("\n"));
    assert!(compared > 10_000 && selected > 1_000 && guarded > 100, "{compared} {selected} {guarded}");
    // What the DreamZero claim picks, per fixture host (shown with --nocapture).
    for (key, devices) in &dreamzero {
        eprintln!("dreamzero {key} ({}): {}", devices.len(), devices.join(", "));
    }
    validate_slices(dir.path(), &slices);
}

/// The knowledge base's forward-compatibility rule as the claim writes it in CEL, for every
/// driver name the tables list.
#[test]
fn forward_compat_products_match_the_tables() {
    let program = Program::compile(&stackbuild_k8s::forward_compat_products()).unwrap();
    for m in kb::all_gpus() {
        for name in &m.model_names {
            let device = Device {
                name: "d".into(),
                strings: BTreeMap::from([("productName", name.clone())]),
                versions: BTreeMap::new(),
            };
            let mut ctx = Context::default().with_all();
            ctx.add_variable_from_value("device", device.cel(stackbuild_k8s::DOMAIN));
            let fc = matches!(program.execute(&ctx), Ok(Cel::Bool(true)));
            let model = kb::gpu_by_model_name(name).unwrap();
            assert_eq!(fc, model.forward_compat, "{name} ({})", model.name);
        }
    }
}

fn validator() -> Option<PathBuf> {
    let venv = std::env::var_os("STACKBUILD_K8S_VENV")
        .map_or_else(|| test_support::tools::workspace().join("target/k8s-validators"), PathBuf::from);
    let bin = venv.join("bin/kubernetes-validate");
    if bin.exists() {
        Some(bin)
    } else {
        eprintln!("SKIPPED: kubernetes-validate not installed in {} (.ci/install makes it)", venv.display());
        None
    }
}

fn kubernetes_validate(file: &Path) {
    let Some(bin) = validator() else { return };
    // The venv of the validator: `<venv>/bin/kubernetes-validate`.
    let versions = e2e::k8s_versions(bin.parent().unwrap().parent().unwrap());
    assert!(!versions.is_empty(), "no schema from 1.34 on in {}", bin.display());
    eprintln!("kubernetes-validate --strict {}: Kubernetes {}", file.display(), versions.join(", "));
    for v in versions {
        let out = Command::new(&bin).args(["--strict", "-k", &v]).arg(file).output().unwrap();
        assert!(
            out.status.success(),
            "kubernetes-validate --strict -k {v} {}:\n{}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn validate_slices(dir: &Path, devices: &[serde_json::Value]) {
    let slice = serde_json::json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1-gpu.nvidia.com"},
        "spec": {
            "driver": stackbuild_k8s::DOMAIN,
            "nodeName": "node-1",
            "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
            "devices": devices.iter().take(128).collect::<Vec<_>>(),
        },
    });
    let path = dir.join("slice.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&slice).unwrap()).unwrap();
    kubernetes_validate(&path);
}

/// Writes an OCI layout of an image whose config carries `env`.
fn write_image(dir: &Path, env: &[String]) -> String {
    let config = ImageConfig {
        created: Some(stackhook::contract::time::rfc3339(0)),
        architecture: "amd64".into(),
        os: "linux".into(),
        config: RuntimeConfig { env: env.to_vec(), ..RuntimeConfig::default() },
        ..ImageConfig::default()
    };
    let image = Image::new(config, Vec::new(), BTreeMap::new()).unwrap();
    stackbuild_image::write_layout(dir, &image, "latest").unwrap();
    dir.display().to_string()
}

/// `stackbuild claim` of the `DreamZero` stack's image (its requirements as the build writes them),
/// YAML and JSON, whole GPUs and `--mig`: kubernetes-validate accepts each strictly.
#[test]
fn printed_claims_validate_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let (_, reqs) =
        recipe_requirements().into_iter().find(|(l, _)| l.starts_with("dreamzero-cu121.toml")).unwrap();
    let env: Vec<String> = reqs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let image = write_image(&dir.path().join("dreamzero"), &env);
    let bin = test_support::tools::binary("stackbuild");
    for args in [
        &[][..],
        &["--mig"][..],
        &["--format", "json"][..],
        &["--mig", "--count", "2", "--format", "json"][..],
    ] {
        // Run from the layout's directory so the header names it as a user would.
        let out = Command::new(&bin)
            .current_dir(dir.path())
            .args(["claim", "dreamzero"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains("resourceClaimTemplateName: dreamzero-gpu")
                || text.contains("\"resourceClaimTemplateName\": \"dreamzero-gpu\""),
            "{text}"
        );
        if args.is_empty() {
            insta::assert_snapshot!("dreamzero_claim", text);
        }
        let ext = if args.contains(&"json") { "json" } else { "yaml" };
        let path = dir.path().join(format!("claim-{}.{ext}", args.join("")));
        std::fs::write(&path, &text).unwrap();
        kubernetes_validate(&path);
    }
    // Bad input: a clear error naming the option.
    let out = Command::new(&bin).args(["claim", &image, "--count", "0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--count 0: a request asks for 1 to 32 devices"));
}
