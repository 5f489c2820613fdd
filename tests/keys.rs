//! Every requirement key, handled by every program that handles keys, as its row of
//! `stackcontract::require::KEYS` says: the parser reads it with a value of its type, the
//! evaluator decides it on a fixture host, the recipe's `[host]` rules state it (or the row says
//! why none does) and `stackbuild` derives the variable the row names, `stackbuild affinity`
//! selects on the labels the row names and `stackhook labels` publishes them, `stackbuild claim`
//! compares the row's device attribute (or leaves a fact of the node to the hook), and the
//! doctor reports a failed requirement on it with its evidence.
//!
//! A key added to the contract without one of these fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use stackbuild_k8s::{AffinityOptions, ClaimOptions};
use stackbuild_recipe::Recipe;
use stackhook::contract::image::{ContainerRequest, DeviceSelection};
use stackhook::contract::labels;
use stackhook::contract::require::{
    DeviceAttribute, Evidence, Expr, HostFacts, Key, KeySpec, NodeLabels, Op, RecipeRule, RequirementSet,
    Truth, Value, ValueType, KEYS,
};
use stackhook::contract::version::PackageVersion;
use stackhook::diagnose::{self, Request, Severity};
use stackhook::fixture::Preset;
use stackhook::probe::HostProbe;

/// The operators a key of this type takes.
fn ops(spec: &KeySpec) -> Vec<Op> {
    if spec.value.ordered() {
        vec![Op::Ge, Op::Gt, Op::Le, Op::Lt, Op::Eq, Op::Ne]
    } else {
        vec![Op::Eq, Op::Ne]
    }
}

/// `key op example`, as written.
fn factor(spec: &KeySpec, op: Op) -> String {
    format!("{}{}{}", spec.name, op.as_str(), spec.example)
}

fn requirement(source: &str, value: &str) -> RequirementSet {
    let mut set = RequirementSet::default();
    set.push(source, value).unwrap();
    set
}

/// The healthy fixture host: its probe, the facts the hook checks against, and its node labels
/// (with the kubelet's `kubernetes.io/arch`, as a node has it).
struct Host {
    probe: HostProbe,
    facts: HostFacts,
    labels: BTreeMap<String, String>,
}

fn healthy(dir: &Path) -> Host {
    let host = Preset::Healthy.build(&dir.join("healthy")).unwrap();
    let probe = stackhook::probe::probe(host.root());
    let facts = probe.facts(&DeviceSelection::All).unwrap();
    let mut labels = stackhook::labels::node_labels(&probe);
    if let Some(arch) = labels::kubernetes_arch(&probe.machine.value) {
        labels.insert(labels::KUBERNETES_ARCH.to_owned(), arch.to_owned());
    }
    Host { probe, facts, labels }
}

/// Whether the requirement holds on the host, fails, or cannot be told.
fn truth(set: &RequirementSet, facts: &HostFacts) -> Truth {
    let a = set.assess(facts);
    if !a.failures.is_empty() {
        Truth::Fails
    } else if !a.unverifiable.is_empty() {
        Truth::Unknown
    } else {
        Truth::Holds
    }
}

#[test]
fn the_table_is_the_keys() {
    assert_eq!(KEYS.len(), Key::ALL.len());
    let mut names = BTreeSet::new();
    for (spec, key) in KEYS.iter().zip(Key::ALL) {
        assert_eq!(spec.key, key);
        assert_eq!(key.spec(), spec);
        assert_eq!(key.as_str(), spec.name);
        assert_eq!((key.nvidia(), key.per_gpu()), (spec.nvidia, spec.per_gpu), "{}", spec.name);
        assert_eq!(Key::from_name(&spec.name.to_ascii_uppercase()), Some(key));
        assert!(names.insert(spec.name), "{} twice", spec.name);
        // Serialized (in the doctor's JSON) as written.
        assert_eq!(serde_json::to_value(key).unwrap(), spec.name);
    }
}

#[test]
fn the_parser_reads_every_key_with_a_value_of_its_type() {
    for spec in &KEYS {
        for op in ops(spec) {
            let text = factor(spec, op);
            let expr = Expr::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let [term] = expr.0.as_slice() else { panic!("{text}: {expr:?}") };
            let [f] = term.0.as_slice() else { panic!("{text}: {expr:?}") };
            assert_eq!((f.key, f.op, f.raw.as_str()), (spec.key, op, spec.example), "{text}");
            let fits = match (spec.value, &f.value) {
                (ValueType::CudaVersion, Value::Cuda(_))
                | (ValueType::DriverVersion, Value::Driver(_))
                | (ValueType::ComputeCapability, Value::Arch(_))
                | (ValueType::KernelRelease, Value::Kernel(_))
                | (ValueType::Count, Value::Count(_))
                | (ValueType::Word { .. }, Value::Name(_)) => true,
                (
                    ValueType::CudaVersion
                    | ValueType::DriverVersion
                    | ValueType::ComputeCapability
                    | ValueType::KernelRelease
                    | ValueType::Count
                    | ValueType::Word { .. },
                    _,
                ) => false,
            };
            assert!(fits, "{text}: {:?} is not a {:?}", f.value, spec.value);
            assert_eq!(f.to_string(), text, "renders as written");
        }
        if let ValueType::Word { one_of } = spec.value {
            let err = Expr::parse(&factor(spec, Op::Ge)).unwrap_err();
            assert!(err.message.contains("takes only = or !="), "{}: {err}", spec.name);
            for word in one_of {
                Expr::parse(&format!("{}={word}", spec.name)).unwrap();
            }
            if !one_of.is_empty() {
                assert!(Expr::parse(&format!("{}=nosuchword", spec.name)).is_err(), "{}", spec.name);
            }
        }
        // NVIDIA's variables: its keys are factors, ours a factor NVIDIA's evaluator refuses.
        let set = requirement("NVIDIA_REQUIRE_X", &factor(spec, Op::Eq));
        let [req] = set.entries.as_slice() else { panic!("{}", spec.name) };
        assert_eq!(req.unsupported_keys().is_empty(), spec.nvidia, "{}", spec.name);
        assert_eq!(req.expr.0.is_empty(), !spec.nvidia, "{}", spec.name);
    }
}

#[test]
fn the_evaluator_decides_every_key_on_a_host() {
    let dir = tempfile::tempdir().unwrap();
    let host = healthy(dir.path());
    for spec in &KEYS {
        let holds = |op| truth(&requirement("STACKBUILD_REQUIRE_X", &factor(spec, op)), &host.facts);
        let (eq, ne) = (holds(Op::Eq), holds(Op::Ne));
        assert!(
            matches!((eq, ne), (Truth::Holds, Truth::Fails) | (Truth::Fails, Truth::Holds)),
            "{}: = {eq:?}, != {ne:?}",
            spec.name
        );
        if spec.value.ordered() {
            let (ge, lt) = (holds(Op::Ge), holds(Op::Lt));
            assert_ne!(ge, lt, "{}", spec.name);
        }
        // A failure names the key and the host's value.
        let op = if eq == Truth::Fails { Op::Eq } else { Op::Ne };
        let failures = requirement("STACKBUILD_REQUIRE_X", &factor(spec, op)).evaluate(&host.facts);
        let primary = failures[0].primary().unwrap();
        assert_eq!((primary.key, primary.factor.as_str()), (spec.key, factor(spec, op).as_str()));
        assert!(!primary.host.is_empty(), "{}", spec.name);
        assert_eq!(failures.len(), if spec.per_gpu { host.facts.gpus.len() } else { 1 }, "{}", spec.name);
    }
}

/// A recipe with `[host]` holding `rule = value`.
fn recipe_with(rule: &str, value: &str) -> Option<Recipe> {
    let text = format!("[image]\nname = \"k\"\n[base]\nscratch = true\n[host]\n{rule} = {value}\n");
    Recipe::parse("k.toml", &text).ok()
}

/// A `[host]` rule stating `spec`'s key with its example, in whichever form the rule takes (a
/// range, a list, a word).
fn host_rule(spec: &KeySpec, rule: &str) -> Recipe {
    let ex = spec.example;
    [format!("\">={ex}\""), format!("[\"{ex}\"]"), format!("\"{ex}\"")]
        .iter()
        .find_map(|value| recipe_with(rule, value))
        .unwrap_or_else(|| panic!("[host] {rule} states no {} value", spec.name))
}

#[test]
fn the_recipe_states_every_key_it_can_and_the_builder_derives_its_variable() {
    let mut all_rules = Vec::new();
    for spec in &KEYS {
        match spec.recipe {
            RecipeRule::Stated(rules) => {
                assert!(!rules.is_empty(), "{}", spec.name);
                for rule in rules {
                    let recipe = host_rule(spec, rule);
                    let exprs = recipe.host.expressions();
                    let [(name, expr)] = exprs.as_slice() else { panic!("[host] {rule}: {exprs:?}") };
                    assert_eq!(name, rule);
                    assert!(
                        expr.0.iter().flat_map(|t| &t.0).all(|f| f.key == spec.key),
                        "[host] {rule}: {expr}"
                    );
                    // `stackbuild` writes it in the variable the row names.
                    let derived = stackbuild_check::requirements(&[], &recipe.host);
                    let variable = spec.variable.expect("a stated key has a variable");
                    let req = derived
                        .iter()
                        .find(|r| r.variable == variable)
                        .unwrap_or_else(|| panic!("[host] {rule}: no {variable} in {derived:?}"));
                    let expr = Expr::parse_for(&req.variable, &req.expr).unwrap().unwrap();
                    assert!(expr.0.iter().all(|t| t.has(spec.key)), "{variable}={}", req.expr);
                    all_rules.push(*rule);
                }
            }
            RecipeRule::Unstated(why) => {
                assert!(!why.is_empty(), "{}", spec.name);
                assert!(recipe_with(spec.name, &format!("\"{}\"", spec.example)).is_none(), "{}", spec.name);
            }
        }
    }
    // With every rule and a CUDA runtime, the builder writes each variable the rows name, and
    // each key only in its own variable.
    let version: PackageVersion = "12.1.105".parse().unwrap();
    // The image platform a recipe names by default (`linux/amd64`).
    let platform = recipe_with("gpus", "\">=1\"").unwrap().image.platforms[0];
    let cuda_runtime =
        stackbuild_check::Package { name: "nvidia-cuda-runtime-cu12", version: &version, platform };
    let mut host = stackbuild_recipe::HostRules::default();
    for spec in &KEYS {
        for rule in spec.recipe.rules() {
            let h = host_rule(spec, rule).host;
            host.driver = host.driver.or(h.driver);
            host.kernel_deny.extend(h.kernel_deny);
            host.modules.extend(h.modules);
            host.modules_deny.extend(h.modules_deny);
            host.gpus = host.gpus.or(h.gpus);
            host.arch = host.arch.or(h.arch);
            host.platform.extend(h.platform);
        }
    }
    assert_eq!(host.expressions().len(), all_rules.len(), "one expression per [host] rule");
    let derived = stackbuild_check::requirements(&[cuda_runtime], &host);
    let variables: BTreeSet<&str> = derived.iter().map(|r| r.variable.as_str()).collect();
    let named: BTreeSet<&str> = KEYS.iter().filter_map(|s| s.variable).collect();
    assert_eq!(variables, named);
    for req in &derived {
        let expr = Expr::parse_for(&req.variable, &req.expr).unwrap().unwrap();
        for f in expr.0.iter().flat_map(|t| &t.0) {
            let own = f.key.spec().variable == Some(req.variable.as_str());
            // NVIDIA's variable carries the minor-version compatibility terms (`driver>=`) and
            // the arch terms of the cubins too.
            assert!(own || req.variable == "NVIDIA_REQUIRE_CUDA", "{f} in {}", req.variable);
        }
    }
}

/// The label keys of an affinity, and whether it selects a node with `labels`.
fn affinity(set: &RequirementSet, node: &BTreeMap<String, String>) -> (BTreeSet<String>, bool) {
    let a = stackbuild_k8s::node_affinity(set, &AffinityOptions { require_ready: false }).unwrap();
    let keys = a.terms.iter().flat_map(|t| &t.match_expressions).map(|e| e.key.clone()).collect();
    (keys, a.matches(node))
}

#[test]
fn affinity_selects_every_key_on_the_labels_the_hook_publishes() {
    let dir = tempfile::tempdir().unwrap();
    let host = healthy(dir.path());
    for spec in &KEYS {
        let word = matches!(spec.value, ValueType::Word { .. }).then_some(spec.example);
        let mut allowed: BTreeSet<String> = spec.labels.names(word).into_iter().collect();
        allowed.insert(labels::SCHEMA.to_owned());
        let mut selected_any = false;
        for op in ops(spec) {
            let text = factor(spec, op);
            let set = requirement("STACKBUILD_REQUIRE_X", &text);
            let (keys, selected) = affinity(&set, &host.labels);
            assert!(keys.is_subset(&allowed), "{text}: reads {keys:?}, the row names {allowed:?}");
            // Never wider than the hook (a count is the pod's: only its lower bound is the node's).
            let bounded = !matches!(spec.labels, NodeLabels::Count(_)) || matches!(op, Op::Ge | Op::Gt);
            if selected && bounded {
                assert_eq!(
                    truth(&set, &host.facts),
                    Truth::Holds,
                    "{text}: selected, but the hook refuses it"
                );
            }
            selected_any |= selected;
        }
        // The one of `=`/`!=` that holds selects the node by the labels the hook published.
        assert!(selected_any, "{}: no selector matches the labels {:?}", spec.name, host.labels);
        let published: BTreeSet<&String> = host.labels.keys().collect();
        let names = spec.labels.names(word);
        assert!(names.iter().any(|n| published.contains(n)), "{}: none of {names:?} is published", spec.name);
    }
}

#[test]
fn the_claim_compares_every_device_attribute_and_leaves_the_node_to_the_hook() {
    let options = ClaimOptions { name: "keys".into(), count: None, mig: false };
    for spec in &KEYS {
        let op = if spec.value.ordered() { Op::Ge } else { Op::Eq };
        let text = factor(spec, op);
        let env = [format!("STACKBUILD_REQUIRE_X={text}")];
        let request = ContainerRequest::from_env(env.iter().map(String::as_str), &BTreeMap::new()).unwrap();
        let claim = stackbuild_k8s::for_request(&request, &options).unwrap();
        let cel: Vec<&str> = claim.selectors.iter().map(|s| s.expression.as_str()).collect();
        match spec.device {
            DeviceAttribute::Version(name) | DeviceAttribute::Word(name) => {
                let guard = format!("'{name}' in device.attributes['{}']", stackbuild_k8s::DOMAIN);
                assert!(cel.len() == 1 && cel[0].contains(&guard), "{text}: {cel:?}");
                assert!(cel[0].contains(&format!(".{name}.")), "{text}: {cel:?}");
                assert_eq!(spec.device.name(), Some(name));
            }
            DeviceAttribute::Count => {
                assert!(cel.is_empty(), "{text}: {cel:?}");
                assert_eq!(claim.count.to_string(), spec.example, "{text}: the count decides it");
            }
            DeviceAttribute::Node => {
                assert!(cel.is_empty(), "{text}: {cel:?}");
                let named = format!("`{}`", spec.name);
                assert!(claim.notes.iter().any(|n| n.contains(&named)), "{text}: {:?}", claim.notes);
            }
        }
    }
}

/// What the evidence of a value from `source` names, on the healthy host.
fn evidence_path(source: Evidence) -> &'static str {
    match source {
        Evidence::HostCuda => "(knowledge base)",
        Evidence::Driver => "nvidia/version",
        Evidence::GpuModel => "/device",
        Evidence::KernelRelease => "kernel/osrelease",
        Evidence::Modules => "modules",
        Evidence::Selection => "NVIDIA_VISIBLE_DEVICES",
        Evidence::Machine => "kernel/arch",
        Evidence::Platform => "(platform)",
    }
}

#[test]
fn the_doctor_reports_every_key_with_its_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let host = healthy(dir.path());
    let mut codes = BTreeSet::new();
    for spec in &KEYS {
        let fails =
            |op| truth(&requirement("STACKBUILD_REQUIRE_X", &factor(spec, op)), &host.facts) == Truth::Fails;
        let op = ops(spec).into_iter().find(|op| fails(*op)).unwrap();
        let text = factor(spec, op);
        let set = requirement("STACKBUILD_REQUIRE_X", &text);
        let d = diagnose::diagnose(&host.probe, &Request::new(DeviceSelection::All, set));
        let found: Vec<_> = d.of(Severity::Error).filter(|f| f.message.contains(&text)).collect();
        let [finding] = found.as_slice() else { panic!("{text}: {:#?}", d.findings) };
        assert!(finding.code.ends_with("-REQUIREMENT"), "{text}: {}", finding.code);
        // The variable, and where the row says the host's value comes from.
        let from = evidence_path(spec.evidence);
        assert!(
            finding.evidence.iter().any(|e| e.path.contains(from)),
            "{text}: {:?} has no {from} ({:?})",
            finding.evidence,
            spec.evidence
        );
        assert!(codes.insert(finding.code), "{text}: {} is another key's", finding.code);
    }
}
