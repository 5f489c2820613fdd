use super::inputs::input_kind;
use super::requirements::{logical_lines, split_words};
use super::*;

#[test]
fn requirement_lines_join_continuations_and_drop_comments() {
    let text = "# top\ntorch==2.1.0 \\\n  --hash=sha256:ab  # pinned\n\nurl#frag==1 # c\n";
    assert_eq!(
        logical_lines(text),
        [(2, "torch==2.1.0    --hash=sha256:ab".to_owned()), (5, "url#frag==1".to_owned())]
    );
}

#[test]
fn shell_words_keep_quoted_markers_whole() {
    assert_eq!(
        split_words(r#"install "numpy<2; python_version<'3.12'" 'a b' c\ d"#),
        ["install", "numpy<2; python_version<'3.12'", "a b", "c d"]
    );
}

#[test]
fn a_pytorch_index_or_a_local_version_names_the_cuda_build() {
    let mut found = Found::default();
    found.index_cuda("https://download.pytorch.org/whl/cu118/", "index");
    assert_eq!(found.cuda, Some(("11.8".into(), "index".into())));
    let mut found = Found::default();
    found.index_cuda("https://download.pytorch.org/whl/cpu", "index");
    assert_eq!(found.cuda, None);
    found.index_cuda("cu130", "local version");
    assert_eq!(found.cuda, Some(("13.0".into(), "local version".into())));
    // A second, different one is said, not taken.
    found.set_cuda("12.1", "elsewhere");
    assert_eq!(found.cuda.as_ref().unwrap().0, "13.0");
    assert!(found.decisions[0].contains("disagrees"), "{:?}", found.decisions);
}

#[test]
fn image_names_are_oci_names() {
    assert_eq!(image_name("Vision_Model"), "vision-model");
    assert_eq!(image_name("--x--"), "x");
    assert_eq!(image_name("日本"), "app");
}

#[test]
fn input_kinds_by_name() {
    for (name, kind) in [
        ("uv.lock", InputKind::UvLock),
        ("pylock.toml", InputKind::Pylock),
        ("pylock.gpu.toml", InputKind::Pylock),
        ("requirements-gpu.txt", InputKind::Requirements),
        ("requirements.in", InputKind::Requirements),
        ("pyproject.toml", InputKind::Pyproject),
        (".python-version", InputKind::PythonVersion),
        ("Dockerfile", InputKind::Dockerfile),
        ("gpu.Dockerfile", InputKind::Dockerfile),
        ("Containerfile", InputKind::Dockerfile),
    ] {
        assert_eq!(input_kind(Path::new(name)), Some(kind), "{name}");
    }
    assert_eq!(input_kind(Path::new("setup.py")), Some(InputKind::Setup));
    assert_eq!(input_kind(Path::new("main.py")), None);
}

#[test]
fn write_new_never_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stackbuild.toml");
    write_new(&path, "a").unwrap();
    assert!(matches!(write_new(&path, "b"), Err(InitError::Exists { .. })));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "a");
    let link = dir.path().join("link.toml");
    std::os::unix::fs::symlink("/nonexistent", &link).unwrap();
    assert!(matches!(write_new(&link, "b"), Err(InitError::Exists { .. })));
}

#[test]
fn comments_stay_on_their_line() {
    assert_eq!(comment("a\n[image]\r\nname = \"x\"\u{7}"), "a [image] name = \"x\"");
    let mut plan_text = String::from("x = 1\n# ");
    plan_text.push_str(&comment("Because a\n  ╰─▶ b\n[python]"));
    plan_text.push('\n');
    let doc: toml::Table = toml::from_str(&plan_text).unwrap();
    assert_eq!(doc.len(), 1);
}

#[test]
fn unpinned_means_no_exact_version() {
    assert!(is_unpinned("markdown2[all]"));
    assert!(is_unpinned("numpy ; python_version < \"3.12\""));
    assert!(!is_unpinned("httpx==0.24.0"));
    assert!(!is_unpinned("a===1.0"));
    // A range and a prefix are pinned to what the resolution takes within them.
    assert!(is_unpinned("torch>=2.1"));
    assert!(is_unpinned("torch==1.11.0.*"));
    assert_eq!(pin_requirement("markdown2[all]", "2.5.4"), "markdown2[all]==2.5.4");
    assert_eq!(pin_requirement("x ; sys_platform == 'linux'", "1"), "x==1 ; sys_platform == 'linux'");
    assert_eq!(pin_requirement("Streamlit>=0.73.1,<2", "1.2"), "Streamlit==1.2");
    assert_eq!(
        pin_requirement("imageio[ffmpeg] ~= 2.9 ; python_version > '3'", "2.9.0"),
        "imageio[ffmpeg]==2.9.0 ; python_version > '3'"
    );
    assert_eq!(pin_requirement("torch==1.11.0.*", "1.11.0"), "torch==1.11.0");
}

#[test]
fn an_explicit_index_counts_only_where_a_source_for_this_platform_sends_a_package() {
    // Isaac-GR00T's: torch from the cu128 index on aarch64 only; a second index no source uses.
    let uv: toml::Table = toml::from_str(
        "[sources]\ntorch = [{ index = \"pytorch-cu128\", marker = \"sys_platform == 'linux' and platform_machine == 'aarch64'\" }]\n\
         flash = { index = \"own\" }\nlib = [{ index = \"amd\", marker = \"platform_machine == 'x86_64'\" }]\n",
    )
    .unwrap();
    assert_eq!(super::pyproject::indexes_sources_use(&uv), ["own", "amd"]);
}

#[test]
fn of_several_dockerfiles_the_nvidia_one_is_read() {
    let paths = |names: &[&str]| names.iter().map(PathBuf::from).collect::<Vec<_>>();
    let chosen = |names: &[&str]| layout::choose_dockerfile(&paths(names)).0;
    // text-generation-inference's top level.
    let tgi = [
        "Dockerfile",
        "Dockerfile.neuron",
        "Dockerfile.nix",
        "Dockerfile_amd",
        "Dockerfile_gaudi",
        "Dockerfile_intel",
        "Dockerfile_llamacpp",
        "Dockerfile_trtllm",
    ];
    assert_eq!(chosen(&tgi), Some(PathBuf::from("Dockerfile")));
    let (_, why) = layout::choose_dockerfile(&paths(&tgi));
    assert!(why.unwrap().contains("not read: dockerfile.neuron, dockerfile.nix, dockerfile_amd"));
    assert_eq!(chosen(&["Dockerfile.rocm", "Dockerfile.cuda"]), Some(PathBuf::from("Dockerfile.cuda")));
    assert_eq!(chosen(&["cpu.Dockerfile", "serve.Dockerfile"]), Some(PathBuf::from("serve.Dockerfile")));
    assert_eq!(chosen(&["Dockerfile.rocm", "Dockerfile.cpu"]), None);
    assert_eq!(chosen(&["Dockerfile.rocm"]), Some(PathBuf::from("Dockerfile.rocm")));
}
