use super::*;

/// `NVIDIA_REQUIRE_CUDA` of the official `nvidia/cuda:12.1.1-*` images (gitlab.com/nvidia/
/// container-images/cuda, `dist/12.1.1/ubuntu2204/base/Dockerfile`).
const CUDA_12_1_1: &str = "cuda>=12.1 brand=tesla,driver>=450,driver<451 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 brand=geforcertx,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=titan,driver>=470,driver<471 brand=titanrtx,driver>=470,driver<471 brand=tesla,driver>=510,driver<511 brand=unknown,driver>=510,driver<511 brand=nvidia,driver>=510,driver<511 brand=nvidiartx,driver>=510,driver<511 brand=geforce,driver>=510,driver<511 brand=geforcertx,driver>=510,driver<511 brand=quadro,driver>=510,driver<511 brand=quadrortx,driver>=510,driver<511 brand=titan,driver>=510,driver<511 brand=titanrtx,driver>=510,driver<511 brand=tesla,driver>=515,driver<516 brand=unknown,driver>=515,driver<516 brand=nvidia,driver>=515,driver<516 brand=nvidiartx,driver>=515,driver<516 brand=geforce,driver>=515,driver<516 brand=geforcertx,driver>=515,driver<516 brand=quadro,driver>=515,driver<516 brand=quadrortx,driver>=515,driver<516 brand=titan,driver>=515,driver<516 brand=titanrtx,driver>=515,driver<516 brand=tesla,driver>=525,driver<526 brand=unknown,driver>=525,driver<526 brand=nvidia,driver>=525,driver<526 brand=nvidiartx,driver>=525,driver<526 brand=geforce,driver>=525,driver<526 brand=geforcertx,driver>=525,driver<526 brand=quadro,driver>=525,driver<526 brand=quadrortx,driver>=525,driver<526 brand=titan,driver>=525,driver<526 brand=titanrtx,driver>=525,driver<526";

/// What the builder writes with the constructors reads back as the same factors.
#[test]
fn built_expressions_render_and_parse_back() {
    let driver = Term(vec![
        Factor::new(Key::Driver, Op::Ge, "525.60.13".parse::<DriverVersion>().unwrap()),
        Factor::new(Key::Driver, Op::Lt, "560".parse::<DriverVersion>().unwrap()),
    ]);
    let cuda: CudaVersion = "12.1.105".parse().unwrap();
    let driver_expr = Expr(vec![driver.clone()]);
    let expr = Expr(vec![Term(vec![Factor::new(Key::Cuda, Op::Ge, cuda.release())]), driver]);
    assert_eq!(expr.to_string(), "cuda>=12.1 driver>=525.60.13,driver<560");
    assert_eq!(Expr::parse(&expr.to_string()).unwrap(), expr);
    let modules = Expr(vec![Term(vec![
        Factor::name(Key::Module, Op::Eq, "Nvidia_UVM"),
        Factor::new(Key::Gpus, Op::Ge, 2u32),
        Factor::new(Key::Arch, Op::Ne, ComputeCapability::new(8, 7)),
    ])]);
    assert_eq!(modules.to_string(), "module=Nvidia_UVM,gpus>=2,arch!=8.7");
    assert_eq!(Expr::parse(&modules.to_string()).unwrap(), modules);
    // AND distributes over the alternatives; an empty expression changes nothing.
    let both = expr.and(&modules);
    assert_eq!(
        both.to_string(),
        "cuda>=12.1,module=Nvidia_UVM,gpus>=2,arch!=8.7 driver>=525.60.13,driver<560,module=Nvidia_UVM,gpus>=2,arch!=8.7"
    );
    assert_eq!(Expr(Vec::new()).and(&modules), modules);
    assert_eq!(
        driver_expr.or(&modules).to_string(),
        "driver>=525.60.13,driver<560 module=Nvidia_UVM,gpus>=2,arch!=8.7"
    );
    assert_eq!(modules.and(&Expr(Vec::new())), modules);
}

fn host(driver: &str, cuda: &str, brands: &[&str]) -> HostFacts {
    HostFacts {
        driver: Some(driver.parse().unwrap()),
        cuda: Some(cuda.parse().unwrap()),
        gpus: brands.iter().map(|b| GpuFacts { arch: None, brand: Some((*b).to_owned()) }).collect(),
        ..HostFacts::default()
    }
}

fn set(source: &str, value: &str) -> RequirementSet {
    let mut s = RequirementSet::default();
    s.push(source, value).unwrap();
    s
}

#[test]
fn official_12_1_1_value() {
    let req = set("NVIDIA_REQUIRE_CUDA", CUDA_12_1_1);
    assert_eq!(req.entries[0].expr.0.len(), 42);
    // 535.104.05 reports CUDA 12.2: passes through the `cuda` term.
    assert_eq!(req.check(&host("535.104.05", "12.2", &["tesla"])), Outcome::Satisfied);
    assert!(req.forward_compat_terms(&host("535.104.05", "12.2", &["tesla"])).is_empty());
    // 470 reports 11.4: a Tesla passes only through its brand term (forward compatibility).
    let t470 = host("470.199.02", "11.4", &["tesla"]);
    assert_eq!(req.check(&t470), Outcome::Satisfied);
    assert_eq!(
        req.forward_compat_terms(&t470),
        vec![("NVIDIA_REQUIRE_CUDA".into(), Some(0), "brand=tesla,driver>=470,driver<471".into())]
    );
    // NVIDIA's value also lists geforce for 470, so the DSL alone admits it; the hook's
    // forward-compatibility rule (data-center GPUs only) is what refuses it (diagnose).
    let g470 = host("470.199.02", "11.4", &["geforce"]);
    assert_eq!(req.check(&g470), Outcome::Satisfied);
    assert_eq!(req.forward_compat_terms(&g470)[0].2, "brand=geforce,driver>=470,driver<471");
    // A GeForce on 450 matches no term at all.
    let Outcome::Unsatisfied(f) = req.check(&host("450.80.02", "11.0", &["geforce"])) else { panic!() };
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].to_string(),
        "GPU 0: needs cuda>=12.1; host has 11.0 (none of the 41 other alternatives of NVIDIA_REQUIRE_CUDA holds either)"
    );
    // A 525 GeForce: cuda 12.0 < 12.1 but minor-version compatibility term 525 holds.
    assert_eq!(req.check(&host("525.60.13", "12.0", &["geforce"])), Outcome::Satisfied);
    // No GPU selected: nothing applies.
    assert_eq!(req.check(&host("450.80.02", "11.0", &[])), Outcome::NotApplicable);
}

#[test]
fn failure_names_factor_and_host_value() {
    let req = set("STACKBUILD_REQUIRE_DRIVER", "driver>=535.104.05");
    let f = req.evaluate(&host("530.30.02", "12.1", &["tesla"]));
    assert_eq!(f[0].to_string(), "needs driver>=535.104.05; host has 530.30.02");
    assert_eq!(f[0].primary().unwrap().key, Key::Driver);
}

#[test]
fn per_gpu_keys_are_checked_for_each_gpu() {
    let req = set("STACKBUILD_REQUIRE_ARCH", "arch>=5.0,arch<=9.0");
    let mut h = host("570.26", "12.8", &["nvidia", "geforce"]);
    h.gpus[0].arch = Some(ComputeCapability::new(9, 0));
    h.gpus[1].arch = Some(ComputeCapability::new(12, 0));
    let f = req.evaluate(&h);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].to_string(), "GPU 1: needs arch<=9.0; host has 12.0");
}

#[test]
fn our_keys() {
    let mut h = host("535.104.05", "12.2", &["tesla", "tesla"]);
    h.kernel = Some("5.15.0-107-generic".parse().unwrap());
    h.modules = ["nvidia".to_owned(), "nouveau".to_owned()].into();
    h.machine = Some("x86_64".into());
    let check = |v: &str| set("X", v).evaluate(&h).into_iter().map(|u| u.to_string()).collect::<Vec<_>>();
    assert_eq!(
        check("kernel!=5.15.0-107-generic"),
        ["needs kernel!=5.15.0-107-generic; host has 5.15.0-107-generic"]
    );
    assert!(check("kernel>=5.15.0-105-generic").is_empty());
    assert_eq!(check("module=nvidia_uvm"), ["needs module=nvidia_uvm; host has nvidia_uvm not loaded"]);
    assert_eq!(check("module!=nouveau"), ["needs module!=nouveau; host has nouveau loaded"]);
    assert!(check("module=nvidia gpus>=8").is_empty());
    assert_eq!(check("gpus>=4"), ["needs gpus>=4; host has 2 GPU(s) selected"]);
    assert!(check("machine=X86_64").is_empty());
    assert_eq!(check("machine=aarch64"), ["needs machine=aarch64; host has x86_64"]);
}

#[test]
fn platform_key() {
    let e = Expr::parse("platform=WSL2 platform=jetson,machine=aarch64 platform!=linux").unwrap();
    let f = &e.0[0].0[0];
    assert_eq!((f.key, f.op, &f.value), (Key::Platform, Op::Eq, &Value::Name("wsl2".into())));
    assert_eq!(e.0[1].0[0].op, Op::Eq);
    assert_eq!(e.0[2].0[0].op, Op::Ne);
    assert!(!e.per_gpu());
    assert_eq!(e.to_string(), "platform=WSL2 platform=jetson,machine=aarch64 platform!=linux");
    assert_eq!(Expr::parse(&e.to_string()).unwrap(), e);
    assert_eq!(serde_json::to_string(&Key::Platform).unwrap(), "\"platform\"");

    let on = |platform: Option<&str>, v: &str| {
        let h = HostFacts {
            platform: platform.map(str::to_owned),
            gpus: vec![GpuFacts::default()],
            ..HostFacts::default()
        };
        set("STACKBUILD_REQUIRE_PLATFORM", v)
            .evaluate(&h)
            .into_iter()
            .map(|u| u.to_string())
            .collect::<Vec<_>>()
    };
    assert!(on(Some("wsl2"), "platform=wsl2").is_empty());
    assert!(on(Some("jetson"), "platform=JETSON").is_empty());
    assert_eq!(on(Some("linux"), "platform=jetson"), ["needs platform=jetson; host has linux"]);
    assert_eq!(on(Some("wsl2"), "platform!=wsl2"), ["needs platform!=wsl2; host has wsl2"]);
    assert!(on(Some("linux"), "platform!=wsl2").is_empty());
    assert!(on(Some("linux"), "platform=wsl2 platform=linux").is_empty());
    // A host whose platform is unknown satisfies neither = nor !=.
    assert_eq!(on(None, "platform=linux"), ["needs platform=linux; host has no known platform"]);
    assert_eq!(on(None, "platform!=linux"), ["needs platform!=linux; host has no known platform"]);
}

#[test]
fn unknown_host_values_fail_with_a_reason() {
    let req = set("NVIDIA_REQUIRE_CUDA", "cuda>=12.1");
    let h = HostFacts { gpus: vec![GpuFacts::default()], ..HostFacts::default() };
    assert_eq!(
        req.evaluate(&h)[0].to_string(),
        "needs cuda>=12.1; host has no CUDA (driver not loaded or unknown)"
    );
}

#[test]
fn unknown_is_not_failure() {
    let cuda = |v: &str| Some(v.parse::<CudaVersion>().unwrap());
    let range = |low: Option<CudaVersion>, below: Option<CudaVersion>| HostFacts {
        cuda: low,
        cuda_bound: CudaBound::Range { below },
        driver: Some("630.10.01".parse().unwrap()),
        gpus: vec![GpuFacts::default()],
        ..HostFacts::default()
    };
    let truth = |h: &HostFacts, v: &str| Expr::parse(v).unwrap().truth(h, h.gpus.first());
    // At least 13.3, upper bound unknown (a branch newer than the tables).
    let newer = range(cuda("13.3"), None);
    assert_eq!(truth(&newer, "cuda>=13.3"), Truth::Holds);
    assert_eq!(truth(&newer, "cuda>13.2"), Truth::Holds);
    assert_eq!(truth(&newer, "cuda>=13.5"), Truth::Unknown);
    assert_eq!(truth(&newer, "cuda<13.3"), Truth::Fails);
    assert_eq!(truth(&newer, "cuda<=13.2"), Truth::Fails);
    assert_eq!(truth(&newer, "cuda=13.2"), Truth::Fails);
    assert_eq!(truth(&newer, "cuda!=13.2"), Truth::Holds);
    assert_eq!(truth(&newer, "cuda=13.4"), Truth::Unknown);
    // Between 12.2 and 12.3 (exclusive): a branch between two rows.
    let between = range(cuda("12.2"), cuda("12.3"));
    assert_eq!(truth(&between, "cuda>=12.3"), Truth::Fails);
    assert_eq!(truth(&between, "cuda<12.3"), Truth::Holds);
    assert_eq!(truth(&between, "cuda>=12.2"), Truth::Holds);
    // Below 9.0, no lower bound: a driver older than the tables.
    let old = range(None, cuda("9.0"));
    assert_eq!(truth(&old, "cuda>=12.1"), Truth::Fails);
    assert_eq!(truth(&old, "cuda>=8.0"), Truth::Unknown);
    // An unknown GPU model: arch and brand are unknown; with no GPU at all they fail.
    assert_eq!(truth(&newer, "arch>=5.0,arch<10.0"), Truth::Unknown);
    assert_eq!(truth(&newer, "brand=tesla"), Truth::Unknown);
    assert_eq!(Expr::parse("arch>=5.0").unwrap().truth(&newer, None), Truth::Fails);
    // AND: a known failure wins over an unknown; OR: a known hold wins over an unknown.
    assert_eq!(truth(&newer, "arch>=5.0,driver<600"), Truth::Fails);
    assert_eq!(truth(&newer, "arch>=5.0 cuda>=13.0"), Truth::Holds);
    assert_eq!(truth(&newer, "arch>=5.0 cuda>=14.0"), Truth::Unknown);

    let set = set("STACKBUILD_REQUIRE_ARCH", "arch>=5.0,arch<10.0");
    let assessed = set.assess(&newer);
    assert!(assessed.failures.is_empty() && set.evaluate(&newer).is_empty());
    assert_eq!(
        assessed.unverifiable[0].to_string(),
        "GPU 0: cannot tell whether arch>=5.0 (host has no known compute capability), arch<10.0 (host has no \
         known compute capability) holds"
    );
    assert_eq!(set.check(&newer), Outcome::Satisfied);
}

#[test]
fn parse_errors_point_at_the_column() {
    let err = |s: &str| Expr::parse(s).unwrap_err().to_string();
    insta::assert_snapshot!(
        [
            err(""),
            err("   "),
            err("cuda"),
            err("cuda>="),
            err("cuda>=12.x"),
            err("flavour=vanilla"),
            err(" , ,"),
            err("cuda==12.1"),
            err("cuda!12"),
            err("cuda>=12.1\tdriver>=535"),
            err("=12"),
            err("arch>=8.1.1"),
            err("brand>=tesla"),
            err("gpus>=many"),
            err("module=nvidia$uvm"),
            err("platform=wls2"),
            err("platform>=wsl2"),
        ]
        .join("\n"),
        @r#"
    invalid requirement "" at column 1: empty requirement
    invalid requirement "   " at column 1: empty requirement
    invalid requirement "cuda" at column 5: expected an operator (= != < <= > >=) after "cuda"
    invalid requirement "cuda>=" at column 7: expected a value after "cuda>="
    invalid requirement "cuda>=12.x" at column 7: invalid CUDA version "12.x": expected numbers separated by dots
    invalid requirement "flavour=vanilla" at column 1: unknown key "flavour"; expected cuda, driver, arch, brand, kernel, module, gpus, machine or platform
    invalid requirement " , ," at column 1: empty requirement
    invalid requirement "cuda==12.1" at column 5: invalid operator "==" after "cuda": expected one of = != < <= > >=
    invalid requirement "cuda!12" at column 5: invalid operator "!" after "cuda": expected one of = != < <= > >=
    invalid requirement "cuda>=12.1\tdriver>=535" at column 11: only a space separates alternatives and only a comma separates factors (tabs and line breaks are not allowed)
    invalid requirement "=12" at column 1: expected a key (cuda, driver, arch, brand, kernel, module, gpus, machine or platform)
    invalid requirement "arch>=8.1.1" at column 7: invalid compute capability "8.1.1": expected major.minor
    invalid requirement "brand>=tesla" at column 6: brand takes only = or !=
    invalid requirement "gpus>=many" at column 7: expected a GPU count, found "many"
    invalid requirement "module=nvidia$uvm" at column 8: invalid name "nvidia$uvm"
    invalid requirement "platform=wls2" at column 10: unknown platform "wls2"; expected linux, wsl2 or jetson
    invalid requirement "platform>=wsl2" at column 9: platform takes only = or !=
    "#
    );
}

#[test]
fn display_round_trips() {
    for s in [CUDA_12_1_1, "driver>=525.60.13,driver<560 kernel!=5.15.0-107-generic", "gpus>=1"] {
        let e = Expr::parse(s).unwrap();
        assert_eq!(Expr::parse(&e.to_string()).unwrap(), e);
    }
    assert_eq!(Expr::parse("  cuda>=12.1   driver=535, ").unwrap().to_string(), "cuda>=12.1 driver=535");
}

/// libnvidia-container `src/cli/dsl.c`: `evaluate_rule` returns -1 for a key without a rule
/// (keys compared with `str_case_equal`), and `dsl_evaluate` fails with "invalid expression"
/// when it gets there; the first alternative that holds, or a factor that fails, stops it first.
#[test]
fn nvidia_unknown_keys_are_invalid_where_evaluation_reaches_them() {
    let h = host("535.104.05", "12.2", &["nvidia"]);
    let outcome = |value: &str| set("NVIDIA_REQUIRE_X", value).check(&h);
    let invalid = |value: &str| match outcome(value) {
        Outcome::Invalid(v) => v[0].unsupported.factor.clone(),
        other => panic!("{value}: {other:?}"),
    };
    // Reached: the only factor, after factors that hold, after a failing alternative.
    assert_eq!(invalid("req0=true"), "req0=true");
    assert_eq!(invalid("cuda>=12.0,foo=bar"), "foo=bar");
    assert_eq!(invalid("cuda>=99.0 foo=bar"), "foo=bar");
    assert_eq!(invalid("cuda>=99.0 Foo>1,cuda>=1"), "Foo>1");
    // Our keys are not NVIDIA's: its evaluator refuses them too.
    assert_eq!(invalid("kernel!=5.15.0-105-generic"), "kernel!=5.15.0-105-generic");
    assert_eq!(invalid("gpus>=1"), "gpus>=1");
    // Not reached: an earlier alternative holds, or an earlier factor of its alternative fails.
    assert_eq!(outcome("cuda>=11.6 foo=bar"), Outcome::Satisfied);
    assert_eq!(outcome("cuda>=99.0,foo=bar cuda>=12.0"), Outcome::Satisfied);
    assert!(matches!(outcome("cuda>=99.0,foo=bar"), Outcome::Unsatisfied(_)));
    // NVIDIA's keys in any case are rules, not unknown keys.
    assert_eq!(outcome("CUDA>=12.0 foo=bar"), Outcome::Satisfied);
    let req = set("NVIDIA_REQUIRE_X", "cuda>=99.0 req0=true");
    let a = req.assess(&h);
    assert!(a.failures.is_empty() && a.unverifiable.is_empty());
    assert_eq!(
        a.invalid[0].to_string(),
        "invalid expression: evaluation reaches req0=true, and NVIDIA's evaluator has no rule for the key \
         \"req0\" (its keys are cuda, driver, arch and brand)"
    );
    assert_eq!(a.invalid[0].expr, "cuda>=99.0 req0=true");
    // Our variables keep our keys, and refuse unknown ones where the image is built.
    assert_eq!(set("STACKBUILD_REQUIRE_X", "gpus>=1").check(&h), Outcome::Satisfied);
    assert!(RequirementSet::default().push("STACKBUILD_REQUIRE_X", "req0=true").is_err());
}

/// Per GPU, and where a factor before the unknown key cannot be told, NVIDIA's evaluator may
/// or may not reach it: unverifiable, saying so.
#[test]
fn nvidia_unknown_key_behind_an_unknown_factor() {
    let mut h = host("535.104.05", "12.2", &["nvidia"]);
    h.gpus[0].arch = Some(ComputeCapability::new(9, 0));
    let req = set("NVIDIA_REQUIRE_X", "arch>=9.0 req0=true");
    assert_eq!(req.check(&h), Outcome::Satisfied);
    h.gpus[0].arch = Some(ComputeCapability::new(8, 0));
    let Outcome::Invalid(v) = req.check(&h) else { panic!() };
    assert_eq!(v[0].gpu, Some(0));
    h.gpus[0].arch = None;
    let a = req.assess(&h);
    assert!(a.invalid.is_empty() && a.failures.is_empty());
    assert_eq!(
        a.unverifiable[0].to_string(),
        "GPU 0: cannot tell whether arch>=9.0 (host has no known compute capability) holds (if not, NVIDIA's \
         evaluator reaches req0=true, a key it has no rule for)"
    );
}

/// `dsl_evaluate` stops at an alternative of nothing but commas with the last result: met
/// before any factor was evaluated, unmet after one failed.
#[test]
fn nvidia_comma_only_alternative_ends_the_evaluation() {
    let h = host("535.104.05", "12.2", &["nvidia"]);
    let outcome = |value: &str| set("NVIDIA_REQUIRE_X", value).check(&h);
    assert!(set("NVIDIA_REQUIRE_X", ", cuda>=99.0").is_empty());
    assert!(set("NVIDIA_REQUIRE_X", ",, req0=true").is_empty());
    assert!(matches!(outcome("cuda>=99.0 , cuda>=12.0"), Outcome::Unsatisfied(_)));
    assert!(matches!(outcome("cuda>=99.0 , req0=true"), Outcome::Unsatisfied(_)));
    assert_eq!(outcome("cuda>=12.0 , cuda>=99.0"), Outcome::Satisfied);
    assert_eq!(outcome("cuda>=99.0 cuda>=12.0 ,"), Outcome::Satisfied);
    // Our variables: no such stop (every alternative is read).
    assert_eq!(set("STACKBUILD_REQUIRE_X", "cuda>=99.0 , cuda>=12.0").check(&h), Outcome::Satisfied);
}

#[test]
fn multibyte_input_never_panics() {
    for s in ["é", "cuda>=é", "driver>=5\u{3000}35", "ärch=1", "cuda\u{0}>=1", "🦀=1", ",", ",,", "=1"] {
        let _ = Expr::parse(s);
    }
}

/// torch's architectures joined with an extension's cubins (causal-conv1d 1.5.2: 5.3 ... 9.0):
/// alternatives no GPU satisfies are dropped, what remains means the same; when none is
/// possible, they stay, and the requirement holds nowhere.
#[test]
fn joined_alternatives_that_nothing_satisfies_are_dropped() {
    let torch = Expr::parse("arch>=7.0,arch<11.0 arch>=12.0,arch<13.0").unwrap();
    let ext = Expr::parse("arch>=5.3,arch<6.0 arch>=6.2,arch<10.0").unwrap();
    assert_eq!(torch.and(&ext).to_string(), "arch>=7.0,arch<11.0,arch>=6.2,arch<10.0");
    assert!(Expr::parse("arch>=9.0,arch<9.0").unwrap().0[0].contradicts());
    assert!(!Expr::parse("arch>=9.0,arch<=9.0").unwrap().0[0].contradicts());
    let none = Expr::parse("arch>=12.0").unwrap().and(&Expr::parse("arch<9.0").unwrap());
    assert_eq!(none.to_string(), "arch>=12.0,arch<9.0");
}
