//! The Debian packages `deploy/debian/build.sh` makes with cargo-deb, checked as an
//! administrator meets them:
//!
//! - lintian reports no error and no warning; what is left is overridden, each with its reason,
//!   in `deploy/debian/*.lintian-overrides`, and every override is used;
//! - `dpkg -i` installs both into a throwaway Debian bookworm root: mmdebstrap's `apt` variant
//!   plus the packages' own `Depends`, from the host's apt sources as the builder makes its
//!   bases (`stackbuild_image::host_apt_sources`), kept as a tar under `target/deb-test/` for a
//!   week. A real bookworm root, not the host: only there does `dpkg -i` show that the
//!   dependencies are bookworm's and enough (stackbuild is linked against them), that the
//!   maintainer scripts add nothing but the packages' files, and that removal leaves the tree as
//!   it was. dpkg and the programs run in it by chroot, in a private mount namespace
//!   (`unshare --mount --pid`) that gives it /proc (`stackhook install` finds itself through
//!   /proc/self/exe) and the host's /dev, unmounted when the command ends;
//! - the installed hook, run by the host's Podman from its default hooks directory holding a
//!   copy of the installed hooks.d file with only the binary's path (the root's) and a fixture
//!   host added, blocks a GPU container on a broken host, lets it start on a healthy one and on
//!   one whose GPU no table knows (the shipped policy, enforce: what is known to be wrong
//!   blocks, what is unknown warns), and lets a plain container start; a hook file that
//!   `stackhook install crio` writes into /etc/containers/oci/hooks.d from an edited
//!   config.toml takes the shipped one's place when Podman is given both directories;
//! - `dpkg -r` leaves the conffile, `dpkg -P` nothing (an administrator's own file under
//!   /etc/stackhook stays, and so does the directory).

use std::collections::BTreeSet;
use std::hash::{Hash as _, Hasher as _};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use e2e::{binary, busybox_rootfs_tar, have, is_root, text, workspace};
use stackhook::fixture::Preset;

/// The release the packages are for.
const SUITE: &str = "bookworm";
/// The environment of every command run in the root: nothing of the test's.
const ROOT_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// How long a cached root tar is used before mmdebstrap makes a new one.
const ROOT_CACHE_AGE: Duration = Duration::from_hours(7 * 24);
/// The package-owned hooks.d file (what `stackhook install podman` writes).
const HOOK_FILE: &str = "usr/share/containers/oci/hooks.d/stackhook.json";
/// The administrator's hooks.d file (what `stackhook install crio` writes).
const ETC_HOOK_FILE: &str = "etc/containers/oci/hooks.d/stackhook.json";
/// The conffile.
const CONFIG: &str = "etc/stackhook/config.toml";
/// The broken host: the blocking cases' verdict names its code.
const BROKEN: Preset = Preset::UvmMissing;

/// The two packages.
struct Debs {
    hook: PathBuf,
    builder: PathBuf,
}

/// Why the packages cannot be built here, if they cannot.
fn build_skip_reason() -> Option<String> {
    for tool in ["cargo-deb", "dpkg-deb", "python3", "gzip"] {
        if !have(tool) {
            return Some(format!("needs {tool} (.ci/install installs cargo-deb)"));
        }
    }
    None
}

/// Both packages, built once per test process by `deploy/debian/build.sh --no-build` from the
/// release binaries (which, as for every end-to-end test, `cargo build --release` makes).
fn debs() -> &'static Debs {
    static DEBS: OnceLock<Result<Debs, String>> = OnceLock::new();
    let built = DEBS.get_or_init(|| {
        binary("stackhook");
        binary("stackbuild");
        let started = Instant::now();
        let out = Command::new("bash")
            .arg(workspace().join("deploy/debian/build.sh"))
            .arg("--no-build")
            .output()
            .map_err(|e| format!("running build.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!("deploy/debian/build.sh failed ({}):\n{}", out.status, text(&out.stderr)));
        }
        eprintln!("build.sh: {:.1} s", started.elapsed().as_secs_f64());
        let listed = text(&out.stdout);
        let find = |name: &str| {
            listed
                .lines()
                .map(PathBuf::from)
                .find(|p| p.file_name().is_some_and(|f| f.to_string_lossy().starts_with(&format!("{name}_"))))
                .filter(|p| p.is_file())
                .ok_or_else(|| format!("build.sh did not make {name}'s package: {listed}"))
        };
        Ok(Debs { hook: find("stackhook")?, builder: find("stackbuild")? })
    });
    built.as_ref().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn lintian_reports_only_overridden_tags() {
    if let Some(why) = build_skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    if !have("lintian") {
        eprintln!("skipped: needs lintian (.ci/install)");
        return;
    }
    let debs = debs();
    let lintian = |args: &[&str]| {
        Command::new("lintian")
            .args(["-I", "--tag-display-limit", "0"])
            .args(args)
            .arg(&debs.hook)
            .arg(&debs.builder)
            .output()
            .unwrap()
    };
    // The verdict: no error, no warning (lintian's exit status 2 says there was one), no
    // override that matched nothing.
    let out = lintian(&["--fail-on", "error,warning"]);
    let report = text(&out.stdout);
    eprintln!("lintian -I:\n{report}");
    let bad: Vec<&str> = report
        .lines()
        .filter(|l| {
            l.starts_with("E: ")
                || l.starts_with("W: ")
                || l.contains("unused-override")
                || l.contains("mismatched-override")
        })
        .collect();
    assert!(bad.is_empty(), "lintian: {bad:#?}");
    assert!(out.status.success(), "lintian exited with {}: {}", out.status, text(&out.stderr));
    // The overridden tags with their reasons (a run that counts them, so its status is not
    // the verdict).
    let report = text(&lintian(&["--show-overrides"]).stdout);
    let overridden: Vec<&str> =
        report.lines().filter(|l| l.starts_with("N: ") || l.starts_with("O: ")).collect();
    eprintln!("lintian -I --show-overrides, the overridden tags:\n{}", overridden.join("\n"));
    // Every override is used, and each has its reason above it.
    let mut overrides = 0;
    for file in ["stackhook", "stackbuild"] {
        let path = workspace().join(format!("deploy/debian/{file}.lintian-overrides"));
        let text = std::fs::read_to_string(&path).unwrap();
        let mut reason = false;
        for line in text.lines() {
            if line.starts_with('#') {
                reason = true;
            } else if !line.trim().is_empty() {
                assert!(reason, "{}: no reason above {line:?}", path.display());
                overrides += 1;
                reason = false;
            }
        }
    }
    assert_eq!(report.lines().filter(|l| l.starts_with("O: ")).count(), overrides, "{report}");
}

#[test]
#[allow(clippy::too_many_lines)]
fn dpkg_installs_runs_and_purges_the_packages_in_a_bookworm_root() {
    if let Some(why) = build_skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let missing: Vec<&str> =
        ["mmdebstrap", "unshare", "chroot", "apt-cache"].into_iter().filter(|t| !have(t)).collect();
    if !is_root() || !missing.is_empty() {
        eprintln!("skipped: needs root, mmdebstrap, unshare, chroot and apt-cache (missing {missing:?})");
        return;
    }
    let debs = debs();
    let started = Instant::now();

    // What the packages relate to exists in bookworm (the host's lists); uv, which stackbuild
    // runs, is not there, so it is named in the description and in no field.
    for deb in [&debs.hook, &debs.builder] {
        for field in ["Depends", "Recommends", "Suggests", "Enhances"] {
            for group in relation(deb, field) {
                assert!(
                    group.iter().any(|name| in_bookworm(name)),
                    "{}: {field} names {group:?}, which the host's apt lists lack",
                    deb.display()
                );
            }
        }
    }
    let control = text(
        &Command::new("dpkg-deb").arg("-f").arg(&debs.builder).arg("Description").output().unwrap().stdout,
    );
    assert!(control.contains("uv, which is not packaged in Debian"), "{control}");

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut include: Vec<String> = Vec::new();
    for deb in [&debs.hook, &debs.builder] {
        include.extend(relation(deb, "Depends").into_iter().filter_map(|group| group.into_iter().next()));
    }
    let root = match bookworm_root(d, &include) {
        Ok(root) => root,
        Err(e) => {
            eprintln!("skipped: mmdebstrap could not make a {SUITE} root from the host's apt sources: {e}");
            return;
        }
    };
    eprintln!("{SUITE} root: {:.1} s", started.elapsed().as_secs_f64());
    let tmp = root.join("tmp");
    for deb in [&debs.hook, &debs.builder] {
        std::fs::copy(deb, tmp.join(deb.file_name().unwrap())).unwrap();
    }
    let in_tmp = |deb: &Path| format!("/tmp/{}", deb.file_name().unwrap().to_string_lossy());
    let before = tree(&root);

    // Install.
    in_root_ok(&root, &["dpkg", "-i", &in_tmp(&debs.hook), &in_tmp(&debs.builder)]);
    for pkg in ["stackhook", "stackbuild"] {
        assert_eq!(status(&root, pkg), "ii ", "{pkg}");
    }
    let mut files = package_files(&root, "stackhook");
    let builder_files = package_files(&root, "stackbuild");
    for f in files.iter().chain(&builder_files) {
        assert!(root.join(f).symlink_metadata().is_ok(), "{f} of the package is not in the root");
    }
    let expected = [
        "usr/bin/stackhook",
        "usr/bin/stackhook-runtime",
        HOOK_FILE,
        CONFIG,
        "usr/share/man/man1/stackhook.1.gz",
        "usr/share/man/man1/stackhook-runtime.1.gz",
        "usr/share/bash-completion/completions/stackhook",
        "usr/share/zsh/vendor-completions/_stackhook",
        "usr/share/fish/vendor_completions.d/stackhook.fish",
        "usr/share/doc/stackhook/copyright",
        "usr/share/doc/stackhook/changelog.Debian.gz",
    ];
    for f in expected {
        assert!(files.contains(f), "stackhook lacks {f}: {files:?}");
    }
    for f in [
        "usr/bin/stackbuild",
        "usr/share/man/man1/stackbuild.1.gz",
        "usr/share/man/man1/stackbuild-build.1.gz",
        "usr/share/bash-completion/completions/stackbuild",
        "usr/share/zsh/vendor-completions/_stackbuild",
        "usr/share/fish/vendor_completions.d/stackbuild.fish",
    ] {
        assert!(builder_files.contains(f), "stackbuild lacks {f}: {builder_files:?}");
    }
    // The maintainer scripts added nothing but the packages' files.
    let installed = tree(&root);
    let added: Vec<&String> = installed
        .difference(&before)
        .filter(|p| !files.contains(*p) && !builder_files.contains(*p))
        .collect();
    assert!(added.is_empty(), "installing added files of no package: {added:?}");
    files.extend(builder_files);
    let conffiles = std::fs::read_to_string(root.join("var/lib/dpkg/info/stackhook.conffiles")).unwrap();
    assert_eq!(conffiles.trim(), format!("/{CONFIG}"));

    // The programs run in the root: stackbuild on the libraries its Depends brought, the hook
    // static; the wrapper link names the hook.
    assert_eq!(
        in_root_ok(&root, &["stackbuild", "--version"]).trim(),
        format!("stackbuild {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        in_root_ok(&root, &["stackhook", "--version"]).trim(),
        format!("stackhook {}", env!("CARGO_PKG_VERSION"))
    );
    stackhook::install::check_static(&root.join("usr/bin/stackhook")).unwrap();
    assert_eq!(std::fs::read_link(root.join("usr/bin/stackhook-runtime")).unwrap(), Path::new("stackhook"));
    for page in ["stackhook.1.gz", "stackbuild.1.gz"] {
        let bytes = std::fs::read(root.join("usr/share/man/man1").join(page)).unwrap();
        assert_eq!(bytes[..2], [0x1f, 0x8b], "{page} is not gzipped");
    }

    // The hooks.d file: valid, the hook with an explicit environment, policy enforce, and what
    // `stackhook install podman` writes for the installed binary and config.
    let shipped = std::fs::read(root.join(HOOK_FILE)).unwrap();
    let hook: serde_json::Value = serde_json::from_slice(&shipped).unwrap();
    assert_eq!(hook["version"], "1.0.0");
    assert_eq!(hook["stages"], serde_json::json!(["createRuntime"]));
    assert_eq!(hook["when"], serde_json::json!({"always": true}));
    assert_eq!(hook["hook"]["path"], "/usr/bin/stackhook");
    assert_eq!(hook["hook"]["args"], serde_json::json!(["stackhook", "hook"]));
    let env: Vec<&str> = hook["hook"]["env"]
        .as_array()
        .expect("an explicit env")
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(env, ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "STACKHOOK_POLICY=enforce"]);
    let config = std::fs::read_to_string(root.join(CONFIG)).unwrap();
    let parsed = stackhook::runtime::WrapperConfig::parse(&config, Path::new(CONFIG)).unwrap();
    assert_eq!(parsed.policy, stackhook::invoke::Policy::Enforce);
    let said = in_root_ok(&root, &["stackhook", "install", "podman", "--dry-run"]);
    assert_eq!(said.trim(), format!("unchanged /{HOOK_FILE}: already installed"));
    // Docker stays `stackhook install docker`: nothing of it was touched.
    assert!(!root.join("etc/docker").exists());

    // The installed hook under the host's Podman.
    if let Some(why) = podman_skip_reason() {
        eprintln!("skipped (the Podman part): {why}");
    } else {
        let podman_started = Instant::now();
        podman_runs_the_installed_hook(&root, d);
        eprintln!("the installed hook under Podman: {:.1} s", podman_started.elapsed().as_secs_f64());
    }

    // Remove: the conffile (edited above, when Podman ran) and its directory stay.
    in_root_ok(&root, &["dpkg", "-r", "stackhook", "stackbuild"]);
    assert_eq!(status(&root, "stackhook"), "rc ");
    assert_ne!(status(&root, "stackbuild"), "ii ");
    let left: Vec<&String> =
        files.iter().filter(|f| !before.contains(*f) && root.join(f).symlink_metadata().is_ok()).collect();
    assert_eq!(left, ["etc/stackhook", CONFIG], "after dpkg -r");

    // Purge: what `stackhook doctor --record` saved goes too, and the tree is as it was.
    std::fs::create_dir_all(root.join("var/lib/stackhook")).unwrap();
    std::fs::write(root.join("var/lib/stackhook/host-facts.json"), "{}\n").unwrap();
    in_root_ok(&root, &["dpkg", "-P", "stackhook", "stackbuild"]);
    for pkg in ["stackhook", "stackbuild"] {
        assert!(["", "un ", "pn "].contains(&status(&root, pkg).as_str()), "{pkg}: {}", status(&root, pkg));
    }
    let after = tree(&root);
    let gone: Vec<&String> = before.symmetric_difference(&after).collect();
    assert!(gone.is_empty(), "after dpkg -P the root differs from before the install: {gone:?}");

    // An administrator's file in /etc/stackhook survives a purge, and so does the directory.
    in_root_ok(&root, &["dpkg", "-i", &in_tmp(&debs.hook)]);
    std::fs::create_dir_all(root.join("etc/stackhook/kb.d")).unwrap();
    std::fs::write(root.join("etc/stackhook/kb.d/site.toml"), "").unwrap();
    in_root_ok(&root, &["dpkg", "-P", "stackhook"]);
    assert!(root.join("etc/stackhook/kb.d/site.toml").is_file() && !root.join(CONFIG).exists());
    eprintln!("install, checks, removal: {:.1} s", started.elapsed().as_secs_f64());
}

fn podman_skip_reason() -> Option<String> {
    let missing: Vec<&str> = ["podman", "runc"].into_iter().filter(|t| !have(t)).collect();
    if !missing.is_empty() || !Path::new("/bin/busybox").exists() {
        return Some(format!("needs podman, runc and busybox-static (missing {missing:?})"));
    }
    None
}

/// The root's hook under the host's Podman (own storage), on fixture hosts. Podman 4.3 reads
/// only /usr/share/containers/oci/hooks.d unless `hooks_dir` (or `--hooks-dir`) says otherwise,
/// so the first runs find the installed file there, at its real path: in a private mount
/// namespace, a copy of the host's /usr/share/containers (containers.conf, seccomp.json) with
/// the file in `oci/hooks.d` is bind-mounted over it. The last ones give both directories, as a
/// `hooks_dir` listing /usr/share's, then /etc's, does.
#[allow(clippy::too_many_lines)]
fn podman_runs_the_installed_hook(root: &Path, d: &Path) {
    let hosts = d.join("hosts");
    let healthy = Preset::Healthy.build(&hosts.join("healthy")).unwrap();
    let broken = BROKEN.build(&hosts.join("broken")).unwrap();
    let unknown = Preset::UnknownGpu.build(&hosts.join("unknown")).unwrap();
    let reports = d.join("reports");
    let usr_share_containers = d.join("usr-share-containers");
    let share = usr_share_containers.join("oci/hooks.d");
    let etc = d.join("etc-containers-oci-hooks.d");
    std::fs::create_dir_all(&share).unwrap();
    for entry in std::fs::read_dir("/usr/share/containers").unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), usr_share_containers.join(entry.file_name())).unwrap();
        }
    }
    // The installed file as the host's Podman must see it: the binary at its path in the root,
    // the fixture host, reports; nothing else changed.
    let point = |installed: &Path, dir: &Path, host: &Path| {
        let mut hook: serde_json::Value = serde_json::from_slice(&std::fs::read(installed).unwrap()).unwrap();
        hook["hook"]["path"] = root.join("usr/bin/stackhook").to_str().unwrap().into();
        let env = hook["hook"]["env"].as_array_mut().unwrap();
        env.push(format!("STACKHOOK_HOST_ROOT={}", host.display()).into());
        env.push(format!("STACKHOOK_REPORT_DIR={}", reports.display()).into());
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("stackhook.json"), serde_json::to_vec_pretty(&hook).unwrap()).unwrap();
    };

    // Podman 4.3 as the other tests run it: runc, cgroupfs, no journald for events.
    let conf = d.join("containers.conf");
    std::fs::write(
        &conf,
        "[containers]\ndefault_ulimits = []\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\n\
         events_logger = \"file\"\n",
    )
    .unwrap();
    // Podman with `--hooks-dir` for each of `dirs`; with none, with its default directory.
    let podman = |dirs: &[&Path]| {
        let mut cmd = if dirs.is_empty() {
            let mut cmd = Command::new("unshare");
            cmd.args(["--mount", "sh", "-c", "mount --bind \"$0\" /usr/share/containers && exec \"$@\""])
                .arg(&usr_share_containers)
                .arg("podman");
            cmd
        } else {
            Command::new("podman")
        };
        cmd.env("CONTAINERS_CONF", &conf)
            .arg("--root")
            .arg(d.join("storage"))
            .arg("--runroot")
            .arg(d.join("run"))
            .arg("--tmpdir")
            .arg(d.join("tmp"));
        for dir in dirs {
            cmd.arg("--hooks-dir").arg(dir);
        }
        cmd
    };
    let image = "stackhook-deb-e2e:test";
    point(&root.join(HOOK_FILE), &share, broken.root());
    let tar = busybox_rootfs_tar(d);
    let out = podman(&[]).arg("import").arg(&tar).arg(image).output().unwrap();
    assert!(out.status.success(), "podman import: {}", text(&out.stderr));
    let mut n = 0;
    // `podman run` with the hooks directories `dirs` and `env` (`NAME=VALUE`, the container's
    // environment); its output and the hook's report.
    let mut run = |dirs: &[&Path], env: &[String]| -> (Output, serde_json::Value) {
        n += 1;
        let cid = d.join(format!("cid-{n}"));
        let mut cmd = podman(dirs);
        cmd.args(["run", "--rm", "--network", "none", "--cidfile"]).arg(&cid);
        for e in env {
            cmd.arg("--env").arg(e);
        }
        let out = cmd.args([image, "echo", "hi"]).output().unwrap();
        let id = std::fs::read_to_string(&cid).unwrap_or_default().trim().to_owned();
        let report = std::fs::read(reports.join(format!("{id}.json")))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null);
        (out, report)
    };
    let gpu = |preset: Preset| -> Vec<String> {
        std::iter::once("NVIDIA_VISIBLE_DEVICES=all".to_owned())
            .chain(
                preset.requires().iter().enumerate().map(|(i, r)| format!("STACKBUILD_REQUIRE_E2E{i}={r}")),
            )
            .collect()
    };
    let ran = |out: &Output| text(&out.stdout).trim() == "hi";

    // The broken host: a GPU container is blocked with the diagnosis; a plain one starts.
    let (out, report) = run(&[], &gpu(Preset::Healthy));
    let stderr = text(&out.stderr);
    assert!(!out.status.success() && !ran(&out), "started on a broken host: {stderr}");
    assert!(
        stderr.contains("stackhook: blocked") && stderr.contains(BROKEN.expected_code().unwrap()),
        "{stderr}"
    );
    assert_eq!(report["decision"], "blocked", "{report}");
    let (out, _) = run(&[], &[]);
    assert!(ran(&out), "a plain container: {}", text(&out.stderr));

    // A healthy host: it starts.
    point(&root.join(HOOK_FILE), &share, healthy.root());
    let (out, report) = run(&[], &gpu(Preset::Healthy));
    assert!(ran(&out), "on a healthy host: {}", text(&out.stderr));
    assert_eq!(report["decision"], "allowed", "{report}");

    // A GPU no table knows: unverifiable, so it starts under enforce, with the warning.
    point(&root.join(HOOK_FILE), &share, unknown.root());
    let (out, report) = run(&[], &gpu(Preset::UnknownGpu));
    assert!(ran(&out), "on a host with an unknown GPU: {}", text(&out.stderr));
    assert_eq!(report["decision"], "allowed", "{report}");
    let code = Preset::UnknownGpu.expected_code().unwrap();
    assert!(report.to_string().contains(code), "no {code} in {report}");

    // The administrator's policy: config.toml edited, `stackhook install crio` writes the hook
    // to /etc/containers/oci/hooks.d; with `hooks_dir` listing /usr/share's directory, then that
    // one (here `--hooks-dir` twice), its file masks the package's file of the same name.
    let config = std::fs::read_to_string(root.join(CONFIG)).unwrap();
    assert_eq!(config.matches("\npolicy = \"enforce\"\n").count(), 1, "{config}");
    std::fs::write(root.join(CONFIG), config.replace("\npolicy = \"enforce\"\n", "\npolicy = \"warn\"\n"))
        .unwrap();
    let said = in_root_ok(root, &["stackhook", "install", "crio"]);
    assert!(said.starts_with(&format!("created /{ETC_HOOK_FILE}")), "{said}");
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join(ETC_HOOK_FILE)).unwrap()).unwrap();
    assert_eq!(written["hook"]["env"][1], "STACKHOOK_POLICY=warn", "{written}");
    point(&root.join(HOOK_FILE), &share, broken.root());
    point(&root.join(ETC_HOOK_FILE), &etc, broken.root());
    let (out, report) = run(&[&share, &etc], &gpu(Preset::Healthy));
    assert!(ran(&out), "policy warn from /etc: {}", text(&out.stderr));
    assert_eq!(report["decision"], "allowed-despite-failure", "{report}");
    // `uninstall crio` takes the administrator's file away and leaves the package's.
    let said = in_root_ok(root, &["stackhook", "uninstall", "crio"]);
    assert!(said.starts_with(&format!("removed /{ETC_HOOK_FILE}")), "{said}");
    assert!(root.join(HOOK_FILE).is_file());
    for dir in ["etc/containers/oci/hooks.d", "etc/containers/oci", "etc/containers"] {
        std::fs::remove_dir(root.join(dir)).unwrap();
    }
    let _ = podman(&[&share]).args(["rmi", "--all", "--force"]).output();
}

/// The package names of a relationship field of `deb`, one list of alternatives per entry.
fn relation(deb: &Path, field: &str) -> Vec<Vec<String>> {
    let out = Command::new("dpkg-deb").arg("-f").arg(deb).arg(field).output().unwrap();
    assert!(out.status.success(), "dpkg-deb -f {field}: {}", text(&out.stderr));
    text(&out.stdout)
        .split(',')
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            entry
                .split('|')
                .map(|alt| alt.trim().split([' ', '(', ':']).next().unwrap_or_default().to_owned())
                .collect()
        })
        .collect()
}

/// Whether the host's apt lists (bookworm's) have a package `name`.
fn in_bookworm(name: &str) -> bool {
    Command::new("apt-cache")
        .args(["show", "--no-all-versions", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A fresh bookworm root under `dir`: mmdebstrap's `apt` variant with `include`, from the host's
/// apt sources; the tar is kept in `target/deb-test/` (one per package list and sources) and
/// reused for [`ROOT_CACHE_AGE`].
fn bookworm_root(dir: &Path, include: &[String]) -> Result<PathBuf, String> {
    let sources = stackbuild_image::host_apt_sources().map_err(|e| e.to_string())?;
    let mut key = std::hash::DefaultHasher::new();
    (SUITE, include, &sources).hash(&mut key);
    let cache = workspace().join("target/deb-test");
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let tar = cache.join(format!("{SUITE}-apt-{:016x}.tar", key.finish()));
    let fresh = tar
        .metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|a| a < ROOT_CACHE_AGE));
    if !fresh {
        let part = cache.join(format!(".{SUITE}-{}.tar", std::process::id()));
        let mut child = Command::new("mmdebstrap")
            .args(["--quiet", "--variant=apt", "--format=tar", "--skip=output/dev"])
            .arg(format!("--include={}", include.join(",")))
            .arg(SUITE)
            .arg(&part)
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("mmdebstrap: {e}"))?;
        let _ = child.stdin.take().unwrap().write_all(sources.as_bytes());
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&part);
            let err = text(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(8).collect();
            return Err(tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        std::fs::rename(&part, &tar).map_err(|e| e.to_string())?;
    }
    let root = dir.join("root");
    std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
    let out = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .args(["--numeric-owner", "-xpf"])
        .arg(&tar)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("tar -x {}: {}", tar.display(), text(&out.stderr)));
    }
    std::fs::create_dir_all(root.join("dev")).map_err(|e| e.to_string())?;
    Ok(root)
}

/// Runs `args` chrooted into `root`, in a mount namespace of its own with /proc and the host's
/// /dev mounted in the root; the environment is only `PATH` and `LC_ALL`.
fn in_root(root: &Path, args: &[&str]) -> Output {
    Command::new("unshare")
        .args(["--mount", "--pid", "--fork"])
        .arg(format!("--mount-proc={}", root.join("proc").display()))
        .args(["sh", "-c", "mount --rbind /dev \"$0/dev\" && exec chroot \"$0\" \"$@\""])
        .arg(root)
        .args(args)
        .env_clear()
        .env("PATH", ROOT_PATH)
        .env("LC_ALL", "C")
        .output()
        .unwrap()
}

/// [`in_root`], which must succeed; its stdout.
fn in_root_ok(root: &Path, args: &[&str]) -> String {
    let out = in_root(root, args);
    assert!(
        out.status.success(),
        "{args:?} in the root: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// dpkg's status of `pkg` in `root` (`ii `, `rc `, ...), empty when dpkg knows no such package.
fn status(root: &Path, pkg: &str) -> String {
    let out = in_root(root, &["dpkg-query", "-W", "-f=${db:Status-Abbrev}", pkg]);
    if out.status.success() {
        text(&out.stdout)
    } else {
        String::new()
    }
}

/// The paths dpkg lists for `pkg` in `root`, relative, without the root itself.
fn package_files(root: &Path, pkg: &str) -> BTreeSet<String> {
    let list = std::fs::read_to_string(root.join(format!("var/lib/dpkg/info/{pkg}.list"))).unwrap();
    list.lines().map(|l| l.trim_start_matches('/').to_owned()).filter(|l| !l.is_empty() && l != ".").collect()
}

/// Every path under `root`, relative, but for the mount points (`proc`, `dev`) and what dpkg
/// keeps of its own (`var/lib/dpkg`, its log in `var/log`): the packages' record there is read
/// through dpkg-query and the lists.
fn tree(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if ["proc", "dev", "var/lib/dpkg", "var/log"].contains(&rel.as_str()) {
                continue;
            }
            let is_dir = entry.file_type().unwrap().is_dir();
            out.insert(rel);
            if is_dir {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}
