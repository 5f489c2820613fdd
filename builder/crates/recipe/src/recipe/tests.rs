use super::*;

const FIXTURES: &str = "tests/fixtures/recipes";

fn fixture(name: &str) -> (PathBuf, String) {
    let rel = Path::new(FIXTURES).join(name);
    let text =
        std::fs::read_to_string(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(&rel)).unwrap();
    (rel, text)
}

/// The rendered errors of a bad fixture, with the path relative to the crate so the
/// snapshot does not depend on where the checkout is.
fn errors(name: &str) -> String {
    let (rel, text) = fixture(name);
    match Recipe::parse(&rel, &text) {
        Ok(_) => panic!("{name} parsed"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_wheel_path_with_a_control_character_is_refused_where_it_is_written() {
    let text = "[image]\nname = \"j\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
                [[python.wheel]]\npath = \"w/x\\n-r /etc/shadow/t-1.0-py3-none-any.whl\"\n";
    let err = Recipe::parse("r.toml", text).unwrap_err().to_string();
    assert!(err.contains("r.toml:8:8") && err.contains("control character '\\n'"), "{err}");
    assert!(!err.contains("root:"), "{err}");
    // Spaces and `#` are a path's business.
    let ok = text.replace("w/x\\n-r /etc/shadow/", "my wheels #2/");
    let r = Recipe::parse("r.toml", &ok).unwrap();
    assert_eq!(r.python.unwrap().wheels[0].path, Path::new("./my wheels #2/t-1.0-py3-none-any.whl"));
}

#[test]
fn recipe_wheels_and_host_platforms() {
    let r = Recipe::parse(
        "dir/r.toml",
        "[image]\nname = \"j\"\nplatforms = [\"linux/arm64\"]\n[base]\nscratch = true\n\
         [python]\nversion = \"3.10\"\n[[python.wheel]]\n\
         path = \"w/torch-2.3.0-cp310-cp310-linux_aarch64.whl\"\nsha256 = \"AB{}\"\n\
         [host]\nplatform = \"Jetson\"\n"
            .replace("{}", &"0".repeat(62))
            .as_str(),
    )
    .unwrap();
    let w = &r.python.as_ref().unwrap().wheels[0];
    assert_eq!((w.name.as_ref(), w.version.to_string().as_str()), ("torch", "2.3.0"));
    assert_eq!(w.path, Path::new("dir/w/torch-2.3.0-cp310-cp310-linux_aarch64.whl"));
    assert_eq!(w.sha256.as_deref(), Some(format!("ab{}", "0".repeat(62)).as_str()));
    assert!(w.fits(Platform::LinuxArm64) && !w.fits(Platform::LinuxAmd64));
    assert_eq!(r.host.platform, ["jetson"]);
    let text = |h: &HostRules| h.expressions().iter().map(|(k, e)| (*k, e.to_string())).collect::<Vec<_>>();
    assert_eq!(text(&r.host), [("platform", "platform=jetson".to_owned())]);
    let two = Recipe::parse(
        "r.toml",
        "[image]\nname = \"w\"\n[base]\nscratch = true\n[host]\nplatform = [\"linux\", \"wsl2\"]\n",
    )
    .unwrap();
    assert_eq!(text(&two.host), [("platform", "platform=linux platform=wsl2".to_owned())]);
}

#[test]
fn parses_the_full_schema() {
    let r = Recipe::load(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(FIXTURES).join("dreamzero.toml"),
    )
    .unwrap();
    assert_eq!(r.image.name, "dreamzero");
    assert_eq!(r.image.tag, "torch2.1.0-cu121");
    assert_eq!(r.image.platforms, [Platform::LinuxAmd64]);
    assert_eq!(r.image.entrypoint, Some(vec![]));
    assert_eq!(r.image.cmd, Some(vec!["python3".to_owned()]));
    assert_eq!(r.image.workdir.as_deref(), Some("/workspace"));
    assert_eq!(r.image.user.as_deref(), Some("0:0"));
    assert_eq!(r.image.env["HF_HOME"], "/workspace/.cache/huggingface");
    assert_eq!(r.image.labels.len(), 1);
    let Base::Bootstrap(b) = &r.base else { panic!("{:?}", r.base) };
    assert_eq!(
        (b.distro, b.suite.as_str(), b.variant.as_str(), b.mirror.as_deref()),
        (Distro::Debian, "bookworm", "apt", None)
    );
    assert_eq!(
        b.packages[1],
        AptPackage { name: "python3.11".into(), version: Some("3.11.2-6+deb12u6".into()) }
    );
    let py = r.python.as_ref().unwrap();
    assert_eq!(py.version.as_str(), "3.11");
    let pkgs: Vec<String> = py.packages.iter().map(ToString::to_string).collect();
    assert_eq!(pkgs[0], "torch==2.1.0");
    assert_eq!(pkgs[2], "numpy<2");
    assert_eq!(py.packages[4].name.as_ref(), "transformers");
    assert_eq!(py.constraints.len(), 1);
    assert_eq!(py.index, None);
    let cuda = r.cuda.as_ref().unwrap();
    assert_eq!(
        (cuda.version.as_str(), cuda.cudnn.as_ref().map(ToString::to_string)),
        ("12.1", Some("8.9.2.26".into()))
    );
    assert_eq!(r.sources.len(), 2);
    assert_eq!(
        r.sources[0].origin,
        SourceOrigin::Git {
            url: "https://example.invalid/dreamzero0/dreamzero.git".into(),
            commit: "0123456789abcdef0123456789abcdef01234567".into()
        }
    );
    assert_eq!(r.sources[1].origin, SourceOrigin::Path { path: r.dir.join("../tools") });
    assert_eq!(r.patches[0].target, PatchTarget::Package("transformers".parse().unwrap()));
    assert_eq!(
        r.patches[0].change,
        PatchChange::Replace {
            file: "transformers/modeling_utils.py".into(),
            find: "is_torch_sdpa_available()".into(),
            replace: "False".into(),
            count: 1
        }
    );
    assert_eq!(r.patches[1].change, PatchChange::Diff { path: r.dir.join("patches/dreamzero-config.diff") });
    assert!(r.dir.join("patches/dreamzero-config.diff").is_file());
    let h = &r.host;
    assert_eq!(h.driver.as_ref().unwrap().to_string(), ">=525.60.13, <560");
    assert!(h.driver.as_ref().unwrap().contains(&"535.104.05".parse().unwrap()));
    assert!(!h.driver.as_ref().unwrap().contains(&"560.28.03".parse().unwrap()));
    assert_eq!(h.kernel_deny[0].as_str(), "5.15.0-107-generic");
    assert_eq!(
        (h.modules.as_slice(), h.modules_deny.as_slice()),
        (&["nvidia_uvm".to_owned()][..], &["nouveau".to_owned()][..])
    );
    assert!(h.gpus.as_ref().unwrap().contains(&1) && !h.gpus.as_ref().unwrap().contains(&0));
    let arch = h.arch.as_ref().unwrap();
    assert!(arch.contains(&ComputeCapability::new(8, 9)) && !arch.contains(&ComputeCapability::new(10, 0)));
    let exprs = h.expressions();
    let text: Vec<String> = exprs.iter().map(|(k, e)| format!("{k}: {e}")).collect();
    assert_eq!(
        text,
        [
            "driver: driver>=525.60.13,driver<560",
            "kernel_deny: kernel!=5.15.0-107-generic",
            "modules: module=nvidia_uvm",
            "modules_deny: module!=nouveau",
            "gpus: gpus>=1",
            "arch: arch>=8.0,arch<=9.0",
        ]
    );
    // The hook's parser reads every one of them.
    for (_, e) in &exprs {
        assert_eq!(&Expr::parse(&e.to_string()).unwrap(), e);
    }
    assert_eq!(r.input_hash().len(), 64);
}

#[test]
fn defaults() {
    let (rel, text) = fixture("minimal.toml");
    let r = Recipe::parse(&rel, &text).unwrap();
    assert_eq!(r.image.tag, "latest");
    assert_eq!(r.image.platforms, [Platform::LinuxAmd64]);
    assert_eq!((r.image.cmd.as_ref(), r.image.entrypoint.as_ref()), (None, None));
    assert_eq!(r.base, Base::Scratch);
    assert!(r.python.is_none() && r.cuda.is_none() && r.sources.is_empty() && r.patches.is_empty());
    assert!(r.host.is_empty());
    assert_eq!(r.dir, Path::new(FIXTURES));
    assert_eq!(Recipe::parse("x.toml", &text).unwrap().dir, Path::new("."));
}

#[test]
fn bases() {
    let base = |b: &str| {
        let text = format!("[image]\nname = \"x\"\n[base]\n{b}\n");
        Recipe::parse("r/x.toml", &text).map(|r| r.base)
    };
    assert_eq!(
        base("oci = \"layouts/debian:12\"").unwrap(),
        Base::Oci { path: "r/layouts/debian".into(), tag: Some("12".into()) }
    );
    assert_eq!(base("oci = \"/srv/layout\"").unwrap(), Base::Oci { path: "/srv/layout".into(), tag: None });
    assert_eq!(base("archive = \"base.tar\"").unwrap(), Base::Archive { path: "r/base.tar".into() });
    assert_eq!(
        base("docker = \"debian:bookworm\"").unwrap(),
        Base::Docker { reference: "debian:bookworm".into() }
    );
    assert_eq!(
        base("registry = \"localhost:5000/base:1\"").unwrap(),
        Base::Registry { reference: "localhost:5000/base:1".into() }
    );
    let Base::Bootstrap(b) = base("ubuntu = \"jammy\"\nmirror = \"http://mirror.invalid/ubuntu\"").unwrap()
    else {
        panic!()
    };
    assert_eq!((b.distro, b.mirror.as_deref()), (Distro::Ubuntu, Some("http://mirror.invalid/ubuntu")));
    assert!(base("scratch = false").is_err());
    assert!(base("docker = \"x:1\"\npackages = [\"git\"]").is_err());
    assert!(base("").is_err());
}

#[test]
fn ranges() {
    let r: VersionRange<DriverVersion> = ">= 525.60.13,<560".parse().unwrap();
    assert_eq!(r.to_string(), ">=525.60.13, <560");
    let r: VersionRange<u32> = "=2".parse().unwrap();
    assert_eq!(r.comparisons[0].op, Op::Eq);
    assert!(r.contains(&2) && !r.contains(&1));
    for bad in ["", "525", ">=525,", ">=525 <560", ">=x"] {
        assert!(bad.parse::<VersionRange<DriverVersion>>().is_err(), "{bad}");
    }
    let sat = |s: &str| s.parse::<VersionRange<ComputeCapability>>().unwrap().is_satisfiable();
    assert!(sat(">=8.0, <=9.0") && sat(">=8.0, <=8.0") && sat("!=8.0") && sat("==8.6, >=8.0"));
    assert!(
        !sat(">=9.0, <8.0") && !sat(">8.0, <=8.0") && !sat("==7.5, >=8.0") && !sat(">=8.0, <=8.0, !=8.0")
    );
}

#[test]
fn input_hash_tracks_resolution_inputs() {
    let (rel, text) = fixture("dreamzero.toml");
    let h = Recipe::parse(&rel, &text).unwrap().input_hash();
    let with = |from: &str, to: &str| {
        assert!(text.contains(from), "{from}");
        Recipe::parse(&rel, &text.replace(from, to)).unwrap().input_hash()
    };
    assert_eq!(with("cmd = [\"python3\"]", "cmd = [\"bash\"]"), h);
    assert_eq!(with("count = 1", "count = 2"), h);
    assert_eq!(with("driver = \">=525.60.13, <560\"", "driver = \">=530\""), h);
    assert_ne!(with("torch==2.1.0", "torch==2.1.1"), h);
    assert_ne!(with("numpy<2", "numpy<1.27"), h);
    assert_ne!(with("triton==2.1.0", "triton==2.1.1"), h);
    assert_ne!(with("version = \"3.11\"", "version = \"3.10\""), h);
    assert_ne!(with("\"ffmpeg\"", "\"ffmpeg\", \"git\""), h);
    assert_ne!(with("[\"linux/amd64\"]", "[\"linux/amd64\", \"linux/arm64\"]"), h);
    // Overrides are resolution inputs; none at all hashes as before they existed.
    let overridden =
        text.replace("[python]\n", "[python]\noverrides = [\"tensorrt ; sys_platform == 'never'\"]\n");
    let r = Recipe::parse(&rel, &overridden).unwrap();
    assert_eq!(r.python.as_ref().unwrap().overrides[0].name.as_ref(), "tensorrt");
    assert_ne!(r.input_hash(), h);
}

#[test]
fn diagnostics_point_at_the_character() {
    let text = "[image]\nname = \"x\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
                packages = [\"numpy<<2\"]\n";
    let Err(RecipeError::Invalid { diagnostics, .. }) = Recipe::parse("r.toml", text) else { panic!() };
    let d = &diagnostics[0];
    assert_eq!((d.line, d.column), (7, 19), "{d}");
    // With escapes in the literal, the whole string is underlined instead.
    let text = text.replace("\"numpy<<2\"", "\"num\\u0070y<<2\"");
    let Err(RecipeError::Invalid { diagnostics, .. }) = Recipe::parse("r.toml", &text) else { panic!() };
    assert_eq!((diagnostics[0].column, diagnostics[0].width), (13, 15));
    // Tabs are kept in the caret line, so it lines up.
    let text = "[image]\n\tname = 3\n[base]\nscratch = true\n";
    let e = Recipe::parse("r.toml", text).unwrap_err().to_string();
    assert!(e.ends_with("2 | \tname = 3\n  | \t       ^"), "{e}");
}

#[test]
fn bytecode_is_on_unless_the_recipe_turns_it_off() {
    let text = "[image]\nname = \"b\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n";
    assert!(Recipe::parse("r.toml", text).unwrap().python.unwrap().bytecode);
    let off = format!("{text}bytecode = false\n");
    assert!(!Recipe::parse("r.toml", &off).unwrap().python.unwrap().bytecode);
    let on = format!("{text}bytecode = true\n");
    assert!(Recipe::parse("r.toml", &on).unwrap().python.unwrap().bytecode);
    // Not a boolean: refused where it is written.
    let bad = format!("{text}bytecode = \"no\"\n");
    let e = Recipe::parse("r.toml", &bad).unwrap_err().to_string();
    assert!(e.contains("r.toml:7:12") && e.contains("expected `true` or `false`"), "{e}");
}

#[test]
fn missing_file() {
    let e = Recipe::load("/nonexistent/recipe.toml").unwrap_err();
    assert!(matches!(e, RecipeError::Read { .. }));
    assert!(e.to_string().starts_with("recipe: opening /nonexistent/recipe.toml: "), "{e}");
}

macro_rules! error_snapshots {
    ($($test:ident => $file:literal,)*) => {$(
        #[test]
        fn $test() {
            insta::assert_snapshot!(errors($file));
        }
    )*};
}

error_snapshots! {
    error_syntax => "bad-syntax.toml",
    error_unknown_field => "bad-unknown-field.toml",
    error_wrong_type => "bad-type.toml",
    error_missing_section => "bad-missing-section.toml",
    error_invalid_requirement => "bad-requirement.toml",
    error_packages => "bad-packages.toml",
    error_platform => "bad-platform.toml",
    error_patch_without_count => "bad-patch-count.toml",
    error_source_git_and_path => "bad-source-both.toml",
    error_two_bases => "bad-base.toml",
    error_host_rules => "bad-host.toml",
    error_recipe_wheels => "bad-wheel.toml",
    error_many => "bad-many.toml",
}

/// `recipes/recipe.schema.json` is the schema of the recipe types, regenerated, not edited:
/// `STACKBUILD_UPDATE_SCHEMA=1 cargo test -p stackbuild --lib recipe::tests::the_checked_in_schema`
/// writes it.
#[test]
fn the_checked_in_schema_is_the_generated_one() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("../recipes/recipe.schema.json");
    let generated = json_schema();
    if std::env::var_os("STACKBUILD_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "recipes/recipe.schema.json is not the generated schema; regenerate it with \
         STACKBUILD_UPDATE_SCHEMA=1 cargo test -p stackbuild --lib recipe::tests::the_checked_in_schema"
    );
    let schema: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(schema["additionalProperties"], serde_json::Value::Bool(false), "unknown fields are refused");
    let properties = schema["properties"].as_object().unwrap();
    for key in ["image", "base", "python", "cuda", "source", "patch", "host", "audit"] {
        assert!(properties.contains_key(key), "{key}");
    }
}

#[test]
fn url_dependencies_need_their_digest_and_their_own_file() {
    let sha = "ab".repeat(32);
    let recipe = |pkg: &str| {
        format!("[image]\nname = \"u\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\npackages = [\"{pkg}\"]\n")
    };
    let ok = Recipe::parse(
        "r.toml",
        &recipe(&format!("tiny @ https://h.example/w/tiny-1.0-py3-none-any.whl#sha256={sha}")),
    )
    .unwrap();
    let dep = url_dependency(&ok.python.unwrap().packages[0]).unwrap();
    assert_eq!(
        (dep.filename.as_str(), dep.wheel, dep.sha256 == sha),
        ("tiny-1.0-py3-none-any.whl", true, true)
    );
    let sdist =
        Recipe::parse("r.toml", &recipe(&format!("tiny @ https://h.example/tiny-1.0.tar.gz#sha256={sha}")))
            .unwrap();
    assert!(!url_dependency(&sdist.python.unwrap().packages[0]).unwrap().wheel);
    for (bad, said) in [
        ("tiny @ https://h.example/tiny-1.0-py3-none-any.whl".to_owned(), "needs the file's digest"),
        (
            format!("tiny @ https://h.example/other-1.0-py3-none-any.whl#sha256={sha}"),
            "must end in a wheel or sdist file of `tiny`",
        ),
        (format!("tiny @ file:///tmp/tiny-1.0.tar.gz#sha256={sha}"), "a URL stackbuild cannot fetch"),
    ] {
        let e = Recipe::parse("r.toml", &recipe(&bad)).unwrap_err().to_string();
        assert!(e.contains(said), "{bad}: {e}");
    }
}

#[test]
fn a_patch_on_a_source_installed_editable_is_taken_and_on_a_wheel_install_refused() {
    let text = |install: &str| {
        format!(
            "[image]\nname = \"p\"\n[base]\ndebian = \"bookworm\"\n[python]\nversion = \"3.11\"\n\
             [[source]]\nname = \"app\"\npath = \"app\"\ndest = \"/workspace/app\"\ninstall = \"{install}\"\n\
             [[patch]]\nname = \"fix\"\nsource = \"app\"\nfile = \"app/x.py\"\nfind = \"a\"\nreplace = \"b\"\ncount = 1\n"
        )
    };
    let r = Recipe::parse("r.toml", &text("editable")).unwrap();
    assert!(r.sources[0].editable && r.sources[0].install_wheel);
    let err = Recipe::parse("r.toml", &text("wheel")).unwrap_err().to_string();
    assert!(err.contains("installed as a wheel, whose build does not see patches yet"), "{err}");
    assert!(err.contains("install = \"editable\""), "{err}");
}

#[test]
fn a_sources_extras_are_normalized_and_need_an_install() {
    let text = |install: &str, extras: &str| {
        format!(
            "[image]\nname = \"p\"\n[base]\ndebian = \"bookworm\"\n[python]\nversion = \"3.11\"\n\
             [[source]]\nname = \"app\"\npath = \"app\"\ndest = \"/workspace/app\"\n{install}extras = {extras}\n"
        )
    };
    let r = Recipe::parse("r.toml", &text("install = \"wheel\"\n", "[\"Train_Extra\", \"eval\", \"eval\"]"))
        .unwrap();
    assert_eq!(r.sources[0].extras, ["eval", "train-extra"]);
    let err = Recipe::parse("r.toml", &text("", "[\"train\"]")).unwrap_err().to_string();
    assert!(err.contains("`extras` needs `install = \"wheel\"`"), "{err}");
    let err = Recipe::parse("r.toml", &text("install = \"wheel\"\n", "[\"a b\"]")).unwrap_err().to_string();
    assert!(err.contains("invalid extra \"a b\""), "{err}");
}

#[test]
fn a_git_dependencys_subdirectory_stays_inside_the_repository() {
    let text = |sub: &str| {
        format!(
            "[image]\nname = \"p\"\n[base]\ndebian = \"bookworm\"\n[python]\nversion = \"3.11\"\n\
             packages = [\"client @ git+https://example.invalid/repo@v1#subdirectory={sub}\"]\n"
        )
    };
    let r = Recipe::parse("r.toml", &text("packages/client")).unwrap();
    let req = &r.python.as_ref().unwrap().packages[0];
    assert_eq!(crate::git_subdirectory(req).as_deref(), Some("packages/client"));
    for bad in ["../outside", "/abs", "a//b"] {
        let err = Recipe::parse("r.toml", &text(bad)).unwrap_err().to_string();
        assert!(err.contains("invalid subdirectory"), "{bad}: {err}");
    }
}

#[test]
fn a_builds_environment_takes_a_packages_switches_and_never_the_builds_own() {
    let text = |vars: &str| {
        format!(
            "[image]\nname = \"p\"\n[base]\ndebian = \"bookworm\"\n[python]\nversion = \"3.11\"\n\
             packages = [\"causal-conv1d==1.5.2\"]\n[python.build.env]\n\"causal-conv1d\" = {{ {vars} }}\n"
        )
    };
    let r = Recipe::parse("r.toml", &text("CAUSAL_CONV1D_FORCE_BUILD = \"TRUE\"")).unwrap();
    let build = &r.python.as_ref().unwrap().build;
    assert_eq!(build.env.values().next().unwrap()["CAUSAL_CONV1D_FORCE_BUILD"], "TRUE");
    for (bad, said) in [
        ("PATH = \"/evil\"", "PATH is set by the build itself"),
        ("ld_preload = \"x.so\"", "ld_preload is set by the build itself"),
        ("\"A-B\" = \"1\"", "invalid variable name \"A-B\""),
        ("X = \"a\\nb\"", "a value on one line"),
    ] {
        let err = Recipe::parse("r.toml", &text(bad)).unwrap_err().to_string();
        assert!(err.contains(said), "{bad}: {err}");
    }
}

/// `[python.build.extra_requires]` with no `[python.build]` header before it: the table made
/// implicitly is read like any other.
#[test]
fn a_build_table_made_by_a_header_below_it() {
    let t = "[image]\nname = \"p\"\n[base]\ndebian = \"bookworm\"\n[python]\nversion = \"3.11\"\n\
             packages = [\"causal-conv1d==1.5.2\"]\n[python.build.extra_requires]\n\"causal-conv1d\" = [\"ninja\"]\n";
    let r = Recipe::parse("r.toml", t).unwrap();
    assert_eq!(r.python.unwrap().build.extra_requires.len(), 1);
}
