//! The builder image, `recipes/stackbuild.toml`, as CI jobs and Kubernetes Jobs use it:
//!
//! - it builds here (`--locked` against its checked-in lock, our release binary staged alone as
//!   its `stackbuild` source, a private cache), into an OCI layout and an archive that the
//!   host's Podman (own storage, runc, as the other suites run it) loads; in the container
//!   `stackbuild --version` is the binary's, and uv (from the `uv` wheel's `.data/scripts`, on
//!   PATH in /usr/local/bin), pip, mmdebstrap, git, pigz, unshare, mount and newuidmap run;
//! - the container, with no added privilege, builds a recipe on a `scratch` base with two small
//!   pure-Python wheels (resolved by the image's uv, downloaded by its pip) from a mounted
//!   directory into a mounted output directory, pushing the image and its layers
//!   (`--push`, `--cache-registry`) to a test registry with htpasswd authentication whose
//!   credentials it reads from a Docker `config.json` under `$DOCKER_CONFIG`, as
//!   deploy/kubernetes/build-job.yaml mounts its Secret; the layout it writes is whole
//!   (`index.json`, the manifest, every blob hashing to its name), its digest the one printed;
//!   a second container with an empty cache and `--locked` takes every layer from the cache
//!   repository and gives the same digest;
//! - mmdebstrap inside the container: without privileges it cannot run. Rootful Podman gives a
//!   container no `CAP_SYS_ADMIN`, so mmdebstrap's `unshare` mode stops at "unshare failed:
//!   Operation not permitted / unable to unshare the mount namespace" (the test runs it and
//!   prints what it said). With `--cap-add SYS_ADMIN` alone (Podman's default seccomp profile
//!   allows unshare and mount to a holder of `CAP_SYS_ADMIN`; this machine has no `AppArmor`, which
//!   would deny mount under a runtime's default profile) it builds a Debian bookworm base with
//!   python3 and a wheel, including the bytecode the image's interpreter compiles in its
//!   user-namespace sandbox;
//! - deploy/ci/.gitlab-ci.yml, deploy/ci/github-actions.yml and
//!   deploy/kubernetes/build-job.yaml validate (check-jsonschema's vendored `vendor.gitlab-ci`
//!   and `vendor.github-workflows` schemas, offline, from `target/sbom-validators`;
//!   `kubernetes-validate --strict` for every bundled Kubernetes from 1.34, from
//!   `target/k8s-validators`, both made by `.ci/install`), a misspelt key in each does not, and
//!   every `--flag` their stackbuild command lines give is one `stackbuild --help` lists.
//!
//! The image build needs root (mmdebstrap, rootful Podman), Podman with runc, mmdebstrap, uv,
//! pip, the host's Debian mirror (its apt sources) and its Python package index: without one
//! of them the test says SKIPPED and why. The container gets the host's index and TLS settings
//! (`PIP_*`/`UV_*` index variables, proxies, the CA bundles `SSL_CERT_FILE`, `PIP_CERT` and
//! `REQUESTS_CA_BUNDLE` name, mounted read-only) and the host's network, for the loopback
//! registry.

use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use e2e::{binary, have, is_root, text, verify_layout, workspace};
use test_support::process::run as must;
use test_support::registry::Registry;

/// The builder image's tag (recipes/stackbuild.toml).
const TAG: &str = "0.1.0";
/// What `podman load` names it.
const IMAGE: &str = "localhost/stackbuild:0.1.0";
/// The uv the recipe pins.
const UV: &str = "uv 0.13.9";

/// Host environment the builds in the container need to reach the same index the same way.
const FORWARDED_ENV: [&str; 12] = [
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_INDEX",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];
/// Host variables naming a CA bundle: mounted into the container and pointed at there.
const CA_ENV: [&str; 3] = ["SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE"];

const SMALL: &str = r#"[image]
name = "small"
tag = "1.0"
cmd = ["python3"]

[base]
scratch = true

[python]
version = "3.11"
packages = ["six==1.16.0", "idna==3.6"]
"#;

const DEBIAN: &str = r#"[image]
name = "debian-small"
tag = "1.0"
cmd = ["python3"]

[base]
debian = "bookworm"
variant = "essential"
packages = ["python3"]

[python]
version = "3.11"
packages = ["six==1.16.0"]
"#;

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The deploy files.
// ---------------------------------------------------------------------------------------------

fn deploy_files() -> [PathBuf; 3] {
    let ws = workspace();
    [
        ws.join("deploy/ci/.gitlab-ci.yml"),
        ws.join("deploy/ci/github-actions.yml"),
        ws.join("deploy/kubernetes/build-job.yaml"),
    ]
}

/// The `--flags` of stackbuild command lines in a CI or Kubernetes file: every `--word` outside
/// comments and the container runtime's `options:` line.
fn flags_in(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with("options:") {
            continue;
        }
        for word in line.split(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == ',') {
            let word = word.trim_start_matches("- ");
            if let Some(name) = word.strip_prefix("--") {
                if name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                {
                    out.push(word.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn the_ci_and_kubernetes_files_use_real_flags_and_validate() {
    let help = text(&must(Command::new(binary("stackbuild")).arg("--help")).stdout);
    let known: Vec<&str> = help
        .split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[' || c == ']')
        .filter(|w| w.starts_with("--"))
        .collect();
    for file in deploy_files() {
        let flags = flags_in(&file);
        for wanted in ["--push", "--cache-registry", "--locked"] {
            assert!(flags.iter().any(|f| f == wanted), "{}: no {wanted} in {flags:?}", file.display());
        }
        for flag in &flags {
            assert!(
                known.contains(&flag.as_str()),
                "{}: {flag} is no flag of `stackbuild --help`",
                file.display()
            );
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let [gitlab, github, job] = deploy_files();
    // A copy of `file` with `from` misspelt as `to`, which a validator must refuse.
    let misspelt = |file: &Path, from: &str, to: &str| {
        let body = std::fs::read_to_string(file).unwrap();
        assert!(body.contains(from), "{}: no {from:?}", file.display());
        let path = dir.path().join(file.file_name().unwrap());
        std::fs::write(&path, body.replacen(from, to, 1)).unwrap();
        path
    };

    let check_jsonschema = workspace().join("target/sbom-validators/bin/check-jsonschema");
    if check_jsonschema.is_file() {
        for (file, schema, from, to) in [
            (&gitlab, "vendor.gitlab-ci", "  script:", "  scirpt:"),
            (&github, "vendor.github-workflows", "runs-on:", "runs_on:"),
        ] {
            let validate = |path: &Path| {
                output(Command::new(&check_jsonschema).args(["--builtin-schema", schema]).arg(path))
            };
            let out = validate(file);
            assert!(
                out.status.success(),
                "check-jsonschema --builtin-schema {schema} {}:\n{}{}",
                file.display(),
                text(&out.stdout),
                text(&out.stderr)
            );
            let out = validate(&misspelt(file, from, to));
            assert!(!out.status.success(), "{schema} took a misspelt {to}: {}", text(&out.stdout));
            eprintln!("check-jsonschema --builtin-schema {schema} {}: valid", file.display());
        }
    } else {
        eprintln!(
            "SKIPPED: check-jsonschema not installed in {} (.ci/install makes it); the CI files were not validated",
            check_jsonschema.display()
        );
    }

    let venv = std::env::var_os("STACKBUILD_K8S_VENV")
        .map_or_else(|| workspace().join("target/k8s-validators"), PathBuf::from);
    let kubernetes_validate = venv.join("bin/kubernetes-validate");
    if kubernetes_validate.is_file() {
        let versions = e2e::k8s_versions(&venv);
        assert!(!versions.is_empty(), "no schema from 1.34 on in {}", venv.display());
        let bad = misspelt(&job, "appArmorProfile:", "apparmorProfile:");
        for v in &versions {
            let out = output(Command::new(&kubernetes_validate).args(["--strict", "-k", v]).arg(&job));
            assert!(
                out.status.success(),
                "kubernetes-validate --strict -k {v} {}:\n{}{}",
                job.display(),
                text(&out.stdout),
                text(&out.stderr)
            );
            let out = output(Command::new(&kubernetes_validate).args(["--strict", "-k", v]).arg(&bad));
            assert!(!out.status.success(), "Kubernetes {v} took a misspelt apparmorProfile");
        }
        eprintln!("kubernetes-validate --strict {}: Kubernetes {}", job.display(), versions.join(", "));
    } else {
        eprintln!(
            "SKIPPED: kubernetes-validate not installed in {} (.ci/install makes it); the Job was not validated",
            venv.display()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The image.
// ---------------------------------------------------------------------------------------------

/// Why the image cannot be built and run here, if it cannot.
fn skip_reason(probe: &Path) -> Option<String> {
    if !is_root() {
        return Some("needs root (mmdebstrap for the image's Debian base, rootful Podman)".into());
    }
    let missing: Vec<&str> =
        ["podman", "runc", "mmdebstrap", "python3"].into_iter().filter(|t| !have(t)).collect();
    if !missing.is_empty() {
        return Some(format!("needs {missing:?} (.ci/install installs them)"));
    }
    let uv = have("uv")
        || Command::new("python3").args(["-m", "uv", "--version"]).output().is_ok_and(|o| o.status.success());
    if !uv {
        return Some("needs uv (.ci/install installs it)".into());
    }
    if let Err(why) = mirror_reachable() {
        return Some(why);
    }
    // The machine's configured index, as the builds use it (pip's configuration and variables).
    let out = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir"])
        .args(["--retries", "0", "--timeout", "20", "--disable-pip-version-check", "six==1.16.0", "-d"])
        .arg(probe)
        .output();
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("the Python package index is unreachable (pip download six==1.16.0: {})", {
            let e = text(&o.stderr);
            e.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_owned()
        })),
        Err(e) => Some(format!("python3 -m pip: {e}")),
    }
}

/// Whether the first mirror of the host's apt sources (what mmdebstrap is given) answers.
fn mirror_reachable() -> Result<(), String> {
    let sources = stackbuild_image::host_apt_sources().map_err(|e| format!("no apt sources: {e}"))?;
    // `URIs:` of deb822 stanzas, `deb URL ...` lines of the one-line format; not comments.
    let url = sources
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("URIs:") || l.starts_with("deb ") || l.starts_with("deb-src "))
        .flat_map(str::split_whitespace)
        .find(|w| w.starts_with("http://") || w.starts_with("https://"))
        .ok_or("the host's apt sources name no http(s) mirror")?;
    let (scheme, rest) = url.split_once("://").unwrap();
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let addr = if authority.contains(':') && !authority.ends_with(']') {
        authority.to_owned()
    } else {
        format!("{authority}:{}", if scheme == "https" { 443 } else { 80 })
    };
    let resolved: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| format!("the Debian mirror of the host's apt sources does not resolve: {e}"))?
        .collect();
    for a in &resolved {
        if TcpStream::connect_timeout(a, Duration::from_secs(10)).is_ok() {
            return Ok(());
        }
    }
    Err("the Debian mirror of the host's apt sources is unreachable".into())
}

/// Podman with the test's own storage and configuration (runc, cgroupfs, no default ulimits:
/// this machine's crun cannot set `RLIMIT_NOFILE`), as tests/cdi.rs and tests/deb.rs run it.
struct Podman {
    dir: PathBuf,
}

impl Podman {
    fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("containers.conf"),
            "[containers]\ndefault_ulimits = []\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\n\
             events_logger = \"file\"\n",
        )
        .unwrap();
        Self { dir: dir.to_owned() }
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new("podman");
        cmd.env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(self.dir.join("run"))
            .arg("--tmpdir")
            .arg(self.dir.join("tmp"));
        cmd
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.cmd().args(["rm", "--all", "--force"]).output();
        let _ = self.cmd().args(["rmi", "--all", "--force"]).output();
    }
}

/// `podman run --rm --network host` of the builder image with the host's index and TLS
/// settings; `args` go before the image (volumes, `--cap-add`), `cmd` after it (stackbuild's
/// arguments).
fn run_builder(podman: &Podman, ca_dir: &Path, args: &[String], cmd: &[&str]) -> Output {
    let mut c = podman.cmd();
    c.args(["run", "--rm", "--network", "host"]);
    for var in FORWARDED_ENV {
        if let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            c.arg("--env").arg(format!("{var}={}", value.to_string_lossy()));
        }
    }
    for var in CA_ENV {
        let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) else { continue };
        let host = PathBuf::from(value);
        if !host.is_file() {
            continue;
        }
        // A copy, so the container never holds a host file open for writing.
        let copy = ca_dir.join(format!("{var}.pem"));
        if !copy.exists() {
            std::fs::copy(&host, &copy).unwrap();
        }
        let inside = format!("/etc/stackbuild-test/{var}.pem");
        c.arg("--volume").arg(format!("{}:{inside}:ro", copy.display()));
        c.arg("--env").arg(format!("{var}={inside}"));
    }
    c.args(args).arg(IMAGE).args(cmd);
    output(&mut c)
}

fn volume(host: &Path, inside: &str) -> String {
    format!("{}:{inside}", host.display())
}

/// Standard base64, for the `auth` of a Docker config.json entry.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An htpasswd line (bcrypt, as docker-registry wants) for `user`/`password`, from `htpasswd`
/// or Python's crypt; `None` when neither can make one.
fn htpasswd(user: &str, password: &str) -> Option<String> {
    let bcrypt = |cmd: &mut Command| {
        cmd.output().ok().filter(|o| o.status.success()).map(|o| text(&o.stdout).trim().to_owned())
    };
    let script = format!(
        "import crypt; print('{user}:' + crypt.crypt('{password}', crypt.mksalt(crypt.METHOD_BLOWFISH)))"
    );
    bcrypt(Command::new("htpasswd").args(["-nbB", user, password]))
        .or_else(|| bcrypt(Command::new("python3").args(["-W", "ignore", "-c", &script])))
        .filter(|l| l.starts_with(&format!("{user}:$2")))
}

/// The layers of a build report: (name, source).
fn report_layers(report: &Path) -> Vec<(String, String)> {
    json(report)["layers"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no layers", report.display()))
        .iter()
        .map(|l| (l["name"].as_str().unwrap().to_owned(), l["source"].as_str().unwrap().to_owned()))
        .collect()
}

/// The digest a build printed on stdout (its only line).
fn printed_digest(out: &Output) -> String {
    let stdout = text(&out.stdout);
    let digest = stdout.trim().to_owned();
    assert!(digest.starts_with("sha256:") && !digest.contains('\n'), "stdout: {stdout}");
    digest
}

/// The sum of the layer sizes (compressed) of the manifest `digest` in the layout `dir`.
fn compressed_size(dir: &Path, digest: &str) -> u64 {
    let manifest = json(&dir.join("blobs/sha256").join(digest.trim_start_matches("sha256:")));
    manifest["layers"].as_array().unwrap().iter().map(|l| l["size"].as_u64().unwrap()).sum()
}

#[test]
#[allow(clippy::too_many_lines)]
fn the_builder_image_builds_a_recipe_inside_podman() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::create_dir_all(t.join("probe")).unwrap();
    if let Some(why) = skip_reason(&t.join("probe")) {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let stackbuild = binary("stackbuild");

    // The image, from the repository's recipe and lock, with the release binary staged alone.
    let stage = t.join("stage/bin");
    std::fs::create_dir_all(&stage).unwrap();
    std::fs::copy(&stackbuild, stage.join("stackbuild")).unwrap();
    let layout = t.join("image");
    let archive = t.join("stackbuild.tar");
    let report = t.join("report.json");
    let build_started = Instant::now();
    let out = must(
        Command::new(&stackbuild)
            .current_dir(workspace())
            .args(["recipes/stackbuild.toml", "--locked", "--source"])
            .arg(format!("stackbuild={}", stage.display()))
            .arg("--cache-dir")
            .arg(t.join("cache"))
            .arg("--out")
            .arg(&layout)
            .arg("--archive")
            .arg(&archive)
            .arg("--report")
            .arg(&report),
    );
    let digest = printed_digest(&out);
    assert_eq!(verify_layout(&layout, TAG).unwrap(), digest);
    let names: Vec<String> = report_layers(&report).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["base", "python-uv", "sources", "config"], "{}", report.display());
    let compressed = compressed_size(&layout, &digest);
    eprintln!(
        "built {IMAGE} ({digest}) in {:.0} s: {} layers, {:.1} MB compressed",
        build_started.elapsed().as_secs_f64(),
        names.len(),
        f64::from(u32::try_from(compressed / 1000).unwrap()) / 1e3
    );

    // Loaded into Podman; what it runs is there.
    let podman = Podman::new(&t.join("podman"));
    let out = must(podman.cmd().arg("load").arg("--input").arg(&archive));
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains(IMAGE), "podman load: {said}");
    let size = text(&must(podman.cmd().args(["image", "inspect", "--format", "{{.Size}}", IMAGE])).stdout);
    eprintln!("podman holds {IMAGE}: {:.1} MB uncompressed", size.trim().parse::<f64>().unwrap() / 1e6);
    let version = text(&must(Command::new(&stackbuild).arg("--version")).stdout);
    let out = must(podman.cmd().args(["run", "--rm", "--network", "none", IMAGE, "--version"]));
    assert_eq!(text(&out.stdout), version, "the image's stackbuild is not the staged binary");
    let tools =
        "for p in stackbuild uv unshare mount newuidmap; do command -v $p || exit 1; done && uv --version && python3 -m pip --version \
                 && mmdebstrap --version && git --version && pigz --version 2>&1";
    let out = must(podman.cmd().args([
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "sh",
        IMAGE,
        "-c",
        tools,
    ]));
    let listed = text(&out.stdout);
    for want in
        ["/usr/local/bin/stackbuild", "/usr/local/bin/uv", UV, "pip ", "mmdebstrap ", "git version", "pigz "]
    {
        assert!(listed.contains(want), "no {want:?} in the image:\n{listed}");
    }

    // A registry with authentication, its credentials in a Docker config.json the container
    // reads from $DOCKER_CONFIG (the Kubernetes Job's Secret).
    let line = htpasswd("builder", "s3cret");
    if line.is_none() {
        eprintln!("note: neither htpasswd nor Python's crypt makes bcrypt; the registry runs without authentication");
    }
    let Some(registry) = Registry::start(line.as_deref()) else {
        eprintln!(
            "SKIPPED: docker-registry is not installed; the image was built and loaded, no build ran in it"
        );
        return;
    };
    let docker = t.join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    let config = serde_json::json!({"auths": {registry.addr.clone(): {"auth": base64(b"builder:s3cret")}}});
    std::fs::write(docker.join("config.json"), serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    let ca_dir = t.join("ca");
    std::fs::create_dir_all(&ca_dir).unwrap();
    let work = t.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("small.toml"), SMALL).unwrap();
    let cache_repo = format!("{}/team/stackbuild-cache", registry.addr);
    let push = format!("{}/team/small:1.0", registry.addr);
    let common = |cache: &Path| {
        vec![
            "--volume".to_owned(),
            volume(&work, "/work"),
            "--volume".to_owned(),
            volume(cache, "/cache"),
            "--volume".to_owned(),
            format!("{}:/docker:ro", docker.display()),
            "--env".to_owned(),
            "DOCKER_CONFIG=/docker".to_owned(),
        ]
    };

    // Scratch base, two wheels, no added privilege: resolved (the image's uv writes the lock),
    // downloaded, built, written to the mounted directory, pushed with its layers.
    let scratch_started = Instant::now();
    let cache_a = t.join("cache-a");
    std::fs::create_dir_all(&cache_a).unwrap();
    let args = [
        "small.toml",
        "--out",
        "/work/out",
        "--report",
        "/work/report-a.json",
        "--cache-registry",
        &cache_repo,
        "--push",
        &push,
    ];
    let out = run_builder(&podman, &ca_dir, &common(&cache_a), &args);
    assert!(out.status.success(), "the scratch build in the container:\n{}", text(&out.stderr));
    let small = printed_digest(&out);
    assert!(work.join("small.toml.lock").is_file(), "the container's uv wrote no lock");
    assert_eq!(verify_layout(&work.join("out"), "1.0").unwrap(), small);
    let index = json(&work.join("out/index.json"));
    assert_eq!(index["schemaVersion"], 2, "{index}");
    let manifest = json(&work.join("out/blobs/sha256").join(small.trim_start_matches("sha256:")));
    assert_eq!(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json", "{manifest}");
    let layers = report_layers(&work.join("report-a.json"));
    assert_eq!(layers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["python", "config"]);
    assert!(layers.iter().all(|(_, s)| s == "built"), "{layers:?}");
    // The tag, and the referrers tag of the SBOM documents attached to the manifest (the
    // test registry has no referrers API).
    let referrers = format!("sha256-{}", small.trim_start_matches("sha256:"));
    assert_eq!(registry.tags("team/small"), ["1.0", referrers.as_str()]);
    let cached = registry.tags("team/stackbuild-cache");
    assert!(!cached.is_empty() && cached.iter().all(|t| t.starts_with("cache-v1-")), "{cached:?}");
    eprintln!(
        "scratch + six + idna built and pushed in the container in {:.1} s ({small})",
        scratch_started.elapsed().as_secs_f64()
    );

    // Another machine: an empty cache, the lock: every layer from the cache repository.
    let cache_b = t.join("cache-b");
    std::fs::create_dir_all(&cache_b).unwrap();
    let args = [
        "small.toml",
        "--locked",
        "--out",
        "/work/out-b",
        "--report",
        "/work/report-b.json",
        "--cache-registry",
        &cache_repo,
    ];
    let out = run_builder(&podman, &ca_dir, &common(&cache_b), &args);
    assert!(out.status.success(), "the second scratch build in the container:\n{}", text(&out.stderr));
    assert_eq!(printed_digest(&out), small, "another cache, another digest");
    let layers = report_layers(&work.join("report-b.json"));
    assert!(layers.iter().all(|(_, s)| s == "registry"), "{layers:?}");

    // A Debian base: mmdebstrap in the container. Without privileges first (what it says is
    // printed), then with CAP_SYS_ADMIN, which must build it.
    std::fs::write(work.join("debian.toml"), DEBIAN).unwrap();
    let cache_c = t.join("cache-c");
    std::fs::create_dir_all(&cache_c).unwrap();
    let args = ["debian.toml", "--out", "/work/debian-out", "--report", "/work/report-c.json"];
    let out = run_builder(&podman, &ca_dir, &common(&cache_c), &args);
    let stderr = text(&out.stderr);
    if out.status.success() {
        eprintln!("note: mmdebstrap ran in the container without added privileges");
    } else {
        let said = stderr.lines().filter(|l| l.contains("unshare")).collect::<Vec<_>>().join(" / ");
        assert!(!said.is_empty(), "the unprivileged Debian build failed, but not at unshare:\n{stderr}");
        eprintln!("without CAP_SYS_ADMIN, mmdebstrap in the container: {said}");
    }
    let debian_started = Instant::now();
    let mut privileged = common(&cache_c);
    privileged.extend(["--cap-add".to_owned(), "SYS_ADMIN".to_owned()]);
    let out = run_builder(&podman, &ca_dir, &privileged, &args);
    assert!(
        out.status.success(),
        "the Debian build in the container with CAP_SYS_ADMIN:\n{}",
        text(&out.stderr)
    );
    let debian = printed_digest(&out);
    assert_eq!(verify_layout(&work.join("debian-out"), "1.0").unwrap(), debian);
    let report_c = json(&work.join("report-c.json"));
    let python = report_c["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "python")
        .unwrap_or_else(|| panic!("no python layer: {report_c}"))
        .clone();
    let pyc = python["bytecode"]["files"].as_u64().unwrap_or(0);
    assert!(pyc > 0, "no bytecode compiled in the container's sandbox: {python}");
    eprintln!(
        "with --cap-add SYS_ADMIN: Debian bookworm + python3 + six built in the container in {:.0} s ({pyc} .pyc)",
        debian_started.elapsed().as_secs_f64()
    );

    let lock = std::fs::read_to_string(work.join("small.toml.lock")).unwrap();
    assert!(lock.contains("name = \"six\"") && lock.contains("name = \"idna\""), "{lock}");
    eprintln!("the builder image test took {:.0} s", started.elapsed().as_secs_f64());
}
