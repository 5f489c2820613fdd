//! The `DreamZero` image's host contract, end to end on fixture hosts: the requirements
//! `stackbuild check` derives for `recipes/dreamzero.toml` from its committed lock (what the
//! build writes into the image), judged by the hook's own diagnosis. It allows the image on the
//! seed's host (driver 535.104.05, an H100: CUDA 12.8 wheels run there under minor-version
//! compatibility), refuses it on a driver below its minimum (470: CUDA 11.4) and on a GPU its
//! kernels lack (a Pascal P100, compute capability 6.0: torch 2.8's cu128 build starts at 7.0),
//! each with a remedy. The image itself is built by the README's first command and checked under
//! runc by `bench/dreamzero-proof.sh`.

use std::collections::BTreeMap;

use stackhook::contract::image::{ContainerRequest, DeviceSelection};
use stackhook::diagnose::{self, Request, Severity};
use stackhook::fixture::FixtureSpec;
use stackhook::probe;

/// The image's requirement variables, as `check` derives them from the lock.
fn requirements() -> Vec<(String, String)> {
    let path = test_support::tools::workspace().join("recipes/dreamzero.toml");
    let recipe = stackbuild_recipe::Recipe::load(&path).unwrap();
    let report =
        stackbuild_check::check(&recipe, &stackbuild_check::CheckOptions { offline: true, cache_dir: None })
            .unwrap();
    assert!(report.compatible, "{}", report.to_text());
    report.stacks[0].requirements.iter().map(|r| (r.variable.clone(), r.expr.clone())).collect()
}

/// The hook's findings on `spec`'s GPU 0 for the image: (blocked, codes, remedies).
fn judge(
    dir: &std::path::Path,
    spec: &FixtureSpec,
    reqs: &[(String, String)],
) -> (bool, Vec<String>, Vec<String>) {
    let host = spec.build(dir).unwrap();
    let p = probe::probe(host.root());
    let env: Vec<String> = reqs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let request = ContainerRequest::from_env(env.iter().map(String::as_str), &BTreeMap::new()).unwrap();
    let d =
        diagnose::diagnose(&p, &Request::new(DeviceSelection::List(vec!["0".into()]), request.requirements));
    let errors: Vec<_> = d.of(Severity::Error).collect();
    (
        !errors.is_empty(),
        errors.iter().map(|f| f.code.to_owned()).collect(),
        errors.iter().filter_map(|f| f.remedy.clone()).collect(),
    )
}

#[test]
fn the_dreamzero_contract_on_fixture_hosts() {
    let reqs = requirements();
    let cuda = reqs.iter().find(|(k, _)| k == "NVIDIA_REQUIRE_CUDA").map(|(_, v)| v.as_str());
    assert_eq!(cuda, Some("cuda>=12.8 driver>=525.60.13"), "{reqs:?}");
    let tmp = tempfile::tempdir().unwrap();

    // The seed's host: driver 535.104.05 (CUDA 12.2), an H100 (9.0).
    let (blocked, codes, _) = judge(&tmp.path().join("seed"), &FixtureSpec::healthy_h100(), &reqs);
    assert!(!blocked, "the seed's host refuses it: {codes:?}");

    // A driver below the minimum: 470 (CUDA 11.4) cannot run CUDA 12 wheels at all.
    let old = FixtureSpec::healthy_h100().driver("470.256.02");
    let (blocked, codes, remedies) = judge(&tmp.path().join("r470"), &old, &reqs);
    assert!(blocked, "a 470 driver is allowed");
    assert!(codes.iter().any(|c| c.ends_with("-REQUIREMENT")), "{codes:?}");
    assert!(remedies.iter().any(|r| r.contains("525.60.13") || r.contains("driver")), "{remedies:?}");

    // A GPU its kernels lack: a Tesla P100 (6.0) under torch 2.8's cubins for 7.0 and up.
    let pascal = FixtureSpec::healthy_h100().gpus_of(1, 0x15f8, "Tesla P100-PCIE-16GB");
    let (blocked, codes, remedies) = judge(&tmp.path().join("p100"), &pascal, &reqs);
    assert!(blocked, "a compute capability 6.0 GPU is allowed");
    assert!(codes.iter().any(|c| c.contains("ARCH") || c.ends_with("-REQUIREMENT")), "{codes:?}");
    assert!(!remedies.is_empty(), "a refusal without a remedy: {codes:?}");
    eprintln!("P100 refused: {codes:?}: {remedies:?}");
}

/// `recipes/dreamzero-flash-attn.toml` is `recipes/dreamzero.toml` plus flash-attn, and nothing
/// else: the same base, Python packages but one, sources, host rules and audit exceptions; it
/// differs in the image's tag, the flash-attn pin and the `[python.build]` knobs its compile
/// needs. Both locks are fresh.
#[test]
fn the_flash_attn_recipe_is_dreamzero_plus_flash_attn() {
    let dir = test_support::tools::workspace().join("recipes");
    let read =
        |name: &str| -> toml::Table { std::fs::read_to_string(dir.join(name)).unwrap().parse().unwrap() };
    let plain = read("dreamzero.toml");
    let mut flash = read("dreamzero-flash-attn.toml");
    let python = flash["python"].as_table_mut().unwrap();
    let packages = python["packages"].as_array_mut().unwrap();
    let before = packages.len();
    packages.retain(|p| p.as_str() != Some("flash-attn==2.8.3"));
    assert_eq!(packages.len() + 1, before, "no flash-attn==2.8.3 in the packages");
    let build = python["build"].as_table_mut().unwrap();
    let isolation = build["no_isolation"].as_array_mut().unwrap();
    isolation.retain(|p| p.as_str() != Some("flash-attn"));
    // DeepSpeed builds in isolation in both (see the recipes' comment): flash-attn was the list.
    assert!(isolation.is_empty(), "no_isolation beside flash-attn: {isolation:?}");
    for knob in
        ["no_isolation", "cuda_arch_list", "memory_mib", "timeout_s", "extra_requires", "dependency_metadata"]
    {
        assert!(build.remove(knob).is_some(), "no [python.build] {knob}");
    }
    assert!(build.is_empty(), "[python.build] has more than flash-attn's knobs: {build:?}");
    python.remove("build");
    let tag = flash["image"]["tag"].as_str().unwrap().to_owned();
    assert_eq!(tag, format!("{}-flash-attn", plain["image"]["tag"].as_str().unwrap()));
    flash["image"].as_table_mut().unwrap().insert("tag".into(), plain["image"]["tag"].clone());
    assert_eq!(flash, plain, "the recipes differ beyond flash-attn");

    for name in ["dreamzero.toml", "dreamzero-flash-attn.toml"] {
        let recipe = stackbuild_recipe::Recipe::load(dir.join(name)).unwrap();
        let lock = stackbuild_python::Lock::load(stackbuild_python::Lock::path_for(&recipe.path)).unwrap();
        assert!(!lock.is_stale(&recipe), "{name}: the lock is stale: {:?}", lock.stale_reason(&recipe));
    }
}
