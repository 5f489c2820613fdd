use super::*;

fn set(reqs: &[(&str, &str)]) -> RequirementSet {
    let mut s = RequirementSet::default();
    for (k, v) in reqs {
        s.push(*k, v).unwrap();
    }
    s
}

fn claim_of(reqs: &[(&str, &str)], count: Option<u32>) -> Result<Claim, ClaimError> {
    let request = ContainerRequest {
        selection: stackcontract::image::DeviceSelection::All,
        requirements: set(reqs),
        disabled: false,
    };
    for_request(&request, &Options { name: "t-gpu".into(), count, mig: false })
}

#[test]
fn cuda_and_arch_become_guarded_semver_comparisons() {
    let c = claim_of(
        &[
            ("NVIDIA_REQUIRE_CUDA", "cuda>=12.1"),
            ("STACKBUILD_REQUIRE_ARCH", "arch>=8.0,arch<=9.0 arch=12.0"),
        ],
        None,
    )
    .unwrap();
    assert_eq!(c.count, 1);
    insta::assert_snapshot!(c
        .selectors
        .iter()
        .map(|s| s.expression.as_str())
        .collect::<Vec<_>>()
        .join("\n\n"));
}

#[test]
fn versions_are_written_as_strict_semver() {
    let c = claim_of(&[("STACKBUILD_REQUIRE_DRIVER", "driver>=535.104.05,driver<610")], None).unwrap();
    let e = &c.selectors[0].expression;
    assert!(e.contains("semver('535.104.5')") && e.contains("semver('610.0.0')"), "{e}");
    assert!(matches!(version_cmp(Attr::DriverVersion, Op::Eq, &[470, 57, 2, 1]), Fit::Const(false)));
    let Fit::Cel(ge) = version_cmp(Attr::DriverVersion, Op::Ge, &[470, 57, 2, 1]) else { panic!() };
    assert!(ge.ends_with("compareTo(semver('470.57.2')) > 0"), "{ge}");
}

#[test]
fn forward_compat_terms_hold_only_on_the_products_the_hook_allows() {
    let official = "cuda>=12.1 brand=tesla,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 \
                    brand=nvidia,driver>=470,driver<471 brand=tesla,driver>=525,driver<526";
    let c = claim_of(&[("NVIDIA_REQUIRE_CUDA", official)], None).unwrap();
    let e = &c.selectors[0].expression;
    assert!(e.contains("in ['tesla', 'geforce', 'nvidia']"), "{e}");
    assert!(e.contains("semver('12.0.0')) >= 0 ||"), "{e}");
    assert!(e.contains(".productName.lowerAscii().matches("), "{e}");
    for attr in ["cudaDriverVersion", "driverVersion", "brand", "productName"] {
        assert!(e.contains(&format!("'{attr}' in device.attributes['gpu.nvidia.com']")), "{attr}: {e}");
    }
}

#[test]
fn the_official_12_1_1_value_fits_in_one_selector() {
    let c = claim_of(&[("NVIDIA_REQUIRE_CUDA", stackcontract_cuda_12_1_1())], None).unwrap();
    assert!(c.selectors[0].expression.len() < MAX_EXPRESSION / 2, "{}", c.selectors[0].expression.len());
}

fn stackcontract_cuda_12_1_1() -> &'static str {
    "cuda>=12.1 brand=tesla,driver>=450,driver<451 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 brand=geforcertx,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=titan,driver>=470,driver<471 brand=titanrtx,driver>=470,driver<471 brand=tesla,driver>=510,driver<511 brand=unknown,driver>=510,driver<511 brand=nvidia,driver>=510,driver<511 brand=nvidiartx,driver>=510,driver<511 brand=geforce,driver>=510,driver<511 brand=geforcertx,driver>=510,driver<511 brand=quadro,driver>=510,driver<511 brand=quadrortx,driver>=510,driver<511 brand=titan,driver>=510,driver<511 brand=titanrtx,driver>=510,driver<511 brand=tesla,driver>=515,driver<516 brand=unknown,driver>=515,driver<516 brand=nvidia,driver>=515,driver<516 brand=nvidiartx,driver>=515,driver<516 brand=geforce,driver>=515,driver<516 brand=geforcertx,driver>=515,driver<516 brand=quadro,driver>=515,driver<516 brand=quadrortx,driver>=515,driver<516 brand=titan,driver>=515,driver<516 brand=titanrtx,driver>=515,driver<516 brand=tesla,driver>=525,driver<526 brand=unknown,driver>=525,driver<526 brand=nvidia,driver>=525,driver<526 brand=nvidiartx,driver>=525,driver<526 brand=geforce,driver>=525,driver<526 brand=geforcertx,driver>=525,driver<526 brand=quadro,driver>=525,driver<526 brand=quadrortx,driver>=525,driver<526 brand=titan,driver>=525,driver<526 brand=titanrtx,driver>=525,driver<526"
}

#[test]
fn gpus_decides_the_count() {
    let c = claim_of(&[("STACKBUILD_REQUIRE_GPUS", "gpus>=2")], None).unwrap();
    assert_eq!((c.count, c.selectors.len()), (2, 0));
    let err = claim_of(&[("STACKBUILD_REQUIRE_GPUS", "gpus>=2")], Some(1)).unwrap_err().to_string();
    assert!(
        err.contains("STACKBUILD_REQUIRE_GPUS: `gpus>=2` cannot hold for 1 GPU(s); give --count"),
        "{err}"
    );
    let c =
        claim_of(&[("STACKBUILD_REQUIRE_GPUS", "gpus>=2,cuda>=12.1 gpus=1,cuda>=12.4")], Some(1)).unwrap();
    assert!(c.selectors[0].expression.contains("semver('12.4.0')"));
    assert!(!c.selectors[0].expression.contains("semver('12.1.0')"));
}

#[test]
fn node_facts_are_left_to_the_hook_with_a_note() {
    let c = claim_of(
        &[
            ("STACKBUILD_REQUIRE_MODULES", "module=nvidia_uvm,module!=nouveau"),
            ("STACKBUILD_REQUIRE_KERNEL", "kernel!=5.15.0-107-generic"),
        ],
        None,
    )
    .unwrap();
    assert!(c.selectors.is_empty());
    assert!(c.notes[0].starts_with("`kernel`, `module` describe the node, not a device"), "{:?}", c.notes);
}

#[test]
fn names_and_counts_are_checked() {
    let request = ContainerRequest {
        selection: stackcontract::image::DeviceSelection::All,
        requirements: RequirementSet::default(),
        disabled: false,
    };
    let bad = for_request(&request, &Options { name: "Bad_Name".into(), count: None, mig: false });
    assert!(matches!(bad, Err(ClaimError::Name { .. })));
    let bad = for_request(&request, &Options { name: "ok".into(), count: Some(0), mig: false });
    assert!(matches!(bad, Err(ClaimError::Count { count: 0 })));
    assert_eq!(default_name("images/DreamZero_v2"), "dreamzero-v2-gpu");
    assert_eq!(default_name("images/dreamzero.tar:latest"), "dreamzero-gpu");
    assert_eq!(default_name("/"), "stackbuild-gpu");
}

#[test]
fn first_holding_term_decides_forward_compat() {
    // A cuda term after a brand term: the brand term, when it holds, is what the hook judges.
    let c = claim_of(
        &[("NVIDIA_REQUIRE_CUDA", "cuda>=13.0 brand=geforce,driver>=470,driver<471 cuda>=11.0")],
        None,
    )
    .unwrap();
    let e = &c.selectors[0].expression;
    assert!(e.contains(") ?\n"), "{e}");
}
