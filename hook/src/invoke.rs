//! One hook invocation: state on stdin -> bundle config -> request -> probe -> verdict.
//!
//! Works the same at `prestart`, `createRuntime` and `createContainer`: all three run before
//! the container's process and receive the same state. A non-zero exit blocks the start; the
//! first stderr line is the verdict, which runc prints inside its own error message.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::contract::image::{ContainerRequest, StackManifest, STACK_JSON_PATH};
use crate::diagnose::{self, Diagnosis, Request, Verdict};
use crate::given::Given;
use crate::oci::{Config, State};
use crate::{probe, rootfs};

/// Largest `/etc/stackbuild/stack.json` the hook reads from an image.
pub const MAX_STACK_JSON: u64 = 1 << 20;

/// What the hook does with a failed check. Comes from the hook entry's own environment
/// (`STACKHOOK_POLICY`), never from the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Block the container when a check fails.
    #[default]
    Enforce,
    /// Print the diagnosis, let the container start.
    Warn,
    /// Only write the report (when a report directory is set).
    Audit,
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        <Self as clap::ValueEnum>::from_str(s.trim(), true)
            .map_err(|_| format!("invalid STACKHOOK_POLICY {s:?}: expected enforce, warn or audit"))
    }
}

/// The hook's own configuration.
#[derive(Debug, Clone)]
pub struct HookConfig {
    /// The host root to probe (`/` in production).
    pub host_root: PathBuf,
    /// What to do when a check fails.
    pub policy: Policy,
    /// Where to write a JSON report per container, when set.
    pub report_dir: Option<PathBuf>,
}

/// What the hook decided.
#[derive(Debug)]
pub struct HookOutcome {
    /// The process exit code: 0 allows, 1 blocks.
    pub code: i32,
    /// What to print on stderr (first line: the verdict).
    pub stderr: String,
}

/// The JSON report written per container.
#[derive(Debug, serde::Serialize)]
pub struct Report<'a> {
    /// Container id.
    pub id: &'a str,
    /// `allowed`, `blocked`, `skipped`.
    pub decision: &'static str,
    /// Why, in one line.
    pub reason: String,
    /// The policy in force.
    pub policy: Policy,
    /// The image's stack, when it carries a readable `stack.json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<StackManifest>,
    /// Why the image's `stack.json` was not read (a symlink, a FIFO, too large, not JSON), so
    /// that a crafted image shows in the report under every policy, `audit` included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The full diagnosis, when the host was probed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<&'a Diagnosis>,
    /// Microseconds spent.
    pub micros: u128,
}

/// Runs one hook invocation. Never panics on bad input: any error blocks (fail closed) under
/// `enforce`, with a message saying what was wrong.
pub fn run(stdin: impl Read, config: &HookConfig) -> HookOutcome {
    let started = Instant::now();
    let state = match State::read(stdin) {
        Ok(s) => s,
        Err(e) => return fail_closed(config, "?", &e.to_string()),
    };
    let id = if state.id.is_empty() { "?" } else { state.id.as_str() };
    let bundle = match state.bundle() {
        Ok(b) => b.to_owned(),
        Err(e) => return fail_closed(config, id, &e.to_string()),
    };
    let bundle_config = match Config::load(&bundle) {
        Ok(c) => c,
        Err(e) => return fail_closed(config, id, &e.to_string()),
    };
    // Annotations from the state (the runtime's view) and from config.json (the bundle's).
    let mut annotations = bundle_config.annotations.clone();
    annotations.extend(state.annotations.clone());
    let rootfs = bundle_config.rootfs(&bundle);
    judge(id, &bundle_config, &annotations, rootfs.as_deref(), config, started)
}

/// The decision on one container from its spec: what the hook does once it has read the
/// bundle, and what the NRI plugin does with the container NRI hands it (`rootfs` absent: NRI
/// shows no root filesystem at creation, so the image's own `stack.json` is not read there).
#[allow(clippy::too_many_lines)] // the hook's one pass: fast path, probe, verdict, report
pub fn judge(
    id: &str,
    bundle_config: &Config,
    annotations: &BTreeMap<String, String>,
    rootfs: Option<&Path>,
    config: &HookConfig,
    started: Instant,
) -> HookOutcome {
    let mount_devices = bundle_config.volume_mount_devices();
    let privileged = bundle_config.privileged();

    // What the container was given, beyond its environment: device nodes (CDI, DRA, `--device`),
    // CDI annotations. `proc/devices` tells GPU nodes from others; it is read only when the
    // container has devices at all. A privileged container's nodes are every host device and ask
    // for nothing (docs/contract.md, "Privileged containers").
    let majors = if bundle_config.devices().is_empty() {
        BTreeMap::new()
    } else {
        probe::char_majors(&config.host_root)
    };
    let mut given = Given::read(bundle_config, annotations, &majors);
    let nodes_count = !given.by_privilege(privileged);
    let mut host = None;
    let mut given_selection = given.annotated_selection();
    if nodes_count && (given.has_gpu_nodes() || given.has_driver_nodes() || given.may_be_integrated()) {
        let probed = probe::probe(&config.host_root);
        given_selection = given_selection.union(given.node_selection(&probed));
        host = Some(probed);
    }
    let request = match ContainerRequest::for_start(
        bundle_config.env(),
        annotations,
        &mount_devices,
        given_selection,
        privileged,
    ) {
        Ok(r) => r,
        Err(e) => return fail_closed(config, id, &e.to_string()),
    };

    // Fast path: not a GPU container means nothing to check (as NVIDIA's hook does), and the
    // host is not even probed (nor the requirements parsed: `for_start`).
    if !request.selection.any() {
        let reason = if nodes_count {
            "no GPU requested"
        } else {
            "no GPU requested (a privileged container: its device nodes are every host device, not a GPU request)"
        };
        write_report(config, id, "skipped", reason, None, None, None, started);
        return HookOutcome { code: 0, stderr: String::new() };
    }

    let stack = rootfs.map(read_stack);
    let host = host.unwrap_or_else(|| probe::probe(&config.host_root));
    let env_value = environment_value(bundle_config, &mount_devices);
    let sources = given.sources(env_value.as_ref().map(|(v, m)| (v.as_str(), *m)), Some(&host), nodes_count);
    if !nodes_count {
        given.nodes.clear();
        given.misnumbered.clear();
    }
    let mut checked = Request::from_container(&request);
    checked.given = given;
    checked.sources = sources;
    // A privileged container may use every device: nothing for systemd to take away.
    let gpu_nodes_in_spec = checked.given.has_gpu_nodes() || !nodes_count;
    let systemd_cgroup = bundle_config.linux.as_ref().is_some_and(crate::oci::Linux::systemd_cgroup);
    let diagnosis = diagnose::diagnose(&host, &checked).with(diagnose::daemon_reload_at_start(
        &host,
        systemd_cgroup,
        gpu_nodes_in_spec,
    ));
    let mut text = String::new();
    let (stack, stack_note) = match stack {
        Some(Ok(s)) => (s, None),
        Some(Err(note)) => (None, Some(note)),
        None => (None, None),
    };
    let blocked = diagnosis.verdict() == Verdict::Block;
    let reason = diagnosis.summary();
    let decision = match (blocked, config.policy) {
        (true, Policy::Enforce) => "blocked",
        (true, _) => "allowed-despite-failure",
        (false, _) => "allowed",
    };
    if blocked || config.policy == Policy::Warn {
        if blocked && config.policy == Policy::Enforce {
            let _ = writeln!(text, "stackhook: blocked {id}: {reason}");
        } else if blocked {
            let _ = writeln!(text, "stackhook: would block {id} (policy {:?}): {reason}", config.policy);
        } else {
            let _ = writeln!(text, "stackhook: allowed {id}: {reason}");
        }
        if config.policy != Policy::Audit {
            text.push_str(&diagnosis.render_human(false));
            if blocked {
                for line in image_remedies(stack.as_ref(), &reason) {
                    let _ = writeln!(text, "{line}");
                }
            }
        }
    }
    if let Some(note) = &stack_note {
        if config.policy != Policy::Audit && !text.is_empty() {
            let _ = writeln!(text, "note: {note}");
        }
    }
    write_report(config, id, decision, &reason, stack, stack_note.as_deref(), Some(&diagnosis), started);
    let code = i32::from(blocked && config.policy == Policy::Enforce);
    if config.policy == Policy::Audit {
        text.clear();
    }
    HookOutcome { code, stderr: text }
}

/// `NVIDIA_VISIBLE_DEVICES` as the container has it (the last one set), or the device volume
/// mounts' list when it points at them; with whether it was the mounts.
fn environment_value(config: &Config, mount_devices: &[String]) -> Option<(String, bool)> {
    let value = config.env().filter_map(|e| e.strip_prefix("NVIDIA_VISIBLE_DEVICES=")).last()?;
    if value.split(',').any(|e| e.trim().starts_with(crate::contract::image::VOLUME_MOUNT_DEVICES_ROOT))
        && !mount_devices.is_empty()
    {
        return Some((mount_devices.join(","), true));
    }
    Some((value.to_owned(), false))
}

/// What the image's own `stack.json` says about a requirement that blocked it: the lines of
/// its reasons that name a package built from source and how to rebuild it (a CUDA extension
/// built for fewer GPUs than torch), so the refusal names the extension and the fix. The text
/// is the image's: control characters are dropped and each line and their number are capped.
fn image_remedies(stack: Option<&StackManifest>, reason: &str) -> Vec<String> {
    const MAX_LINES: usize = 8;
    const MAX_CHARS: usize = 400;
    let Some(stack) = stack else { return Vec::new() };
    stack
        .requirements
        .iter()
        .take(64)
        .filter(|r| !r.variable.is_empty() && reason.contains(&r.variable))
        .flat_map(|r| r.reasons.iter().take(64))
        .filter(|r| r.contains("(built from source)") || r.starts_with("rebuild "))
        .take(MAX_LINES)
        .map(|r| {
            let clean: String = r.chars().filter(|c| !c.is_control()).take(MAX_CHARS).collect();
            format!("  image (stack.json): {clean}")
        })
        .collect()
}

/// Reads the image's `stack.json` through in-root resolution; a bad one is a note, never a
/// reason to follow it or to fail.
fn read_stack(root: &Path) -> Result<Option<StackManifest>, String> {
    match rootfs::read_in_root(root, STACK_JSON_PATH, MAX_STACK_JSON) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("/{STACK_JSON_PATH} is not a stack description ({e}); ignored")),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(format!("{e}; ignored")),
    }
}

fn fail_closed(config: &HookConfig, id: &str, why: &str) -> HookOutcome {
    let blocked = config.policy == Policy::Enforce;
    write_report(
        config,
        id,
        if blocked { "blocked" } else { "error" },
        why,
        None,
        None,
        None,
        Instant::now(),
    );
    let verdict = if blocked { "blocked" } else { "cannot check" };
    HookOutcome { code: i32::from(blocked), stderr: format!("stackhook: {verdict} {id}: {why}\n") }
}

// The report's fields, one argument each: a struct built at three call sites would only move them.
#[allow(clippy::too_many_arguments)]
fn write_report(
    config: &HookConfig,
    id: &str,
    decision: &'static str,
    reason: &str,
    stack: Option<StackManifest>,
    note: Option<&str>,
    diagnosis: Option<&Diagnosis>,
    started: Instant,
) {
    let Some(dir) = &config.report_dir else { return };
    // The id names a file: keep it to a safe alphabet so a crafted id cannot leave the dir.
    let safe: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    let report = Report {
        id,
        decision,
        reason: reason.to_owned(),
        policy: config.policy,
        stack,
        note: note.map(str::to_owned),
        diagnosis,
        micros: started.elapsed().as_micros(),
    };
    let Ok(json) = serde_json::to_vec_pretty(&report) else { return };
    if std::fs::create_dir_all(dir).is_ok() {
        let _ = crate::atomic::write_atomic(&dir.join(format!("{safe}.json")), &json);
    }
}

#[cfg(test)]
mod cdi_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Preset;

    /// Runs the hook on `preset`'s host for a container whose image carries `env`.
    fn hook(preset: Preset, env: &[&str]) -> HookOutcome {
        let dir = tempfile::tempdir().unwrap();
        let host = preset.build(&dir.path().join("host")).unwrap();
        let bundle = dir.path().join("bundle");
        std::fs::create_dir_all(&bundle).unwrap();
        let config = serde_json::json!({ "process": { "env": env } });
        std::fs::write(bundle.join("config.json"), config.to_string()).unwrap();
        let state =
            serde_json::json!({ "ociVersion": "1.0.2", "id": "c1", "status": "creating", "bundle": bundle });
        let config =
            HookConfig { host_root: host.root().to_path_buf(), policy: Policy::Enforce, report_dir: None };
        run(state.to_string().as_bytes(), &config)
    }

    #[test]
    fn platform_requirement_from_the_image() {
        let env = ["NVIDIA_VISIBLE_DEVICES=all", "STACKBUILD_REQUIRE_PLATFORM=platform=wsl2"];
        let linux = hook(Preset::Healthy, &env);
        assert_eq!(linux.code, 1, "{}", linux.stderr);
        assert!(
            linux.stderr.contains(
                "L4-PLATFORM-REQUIREMENT: STACKBUILD_REQUIRE_PLATFORM: needs platform=wsl2; host has linux"
            ),
            "{}",
            linux.stderr
        );
        let wsl2 = hook(Preset::Wsl2, &env);
        assert_eq!(wsl2.code, 0, "{}", wsl2.stderr);
        assert!(!wsl2.stderr.contains("PLATFORM"), "{}", wsl2.stderr);
        // A misspelt platform is the image's error, and fails closed.
        let typo =
            hook(Preset::Wsl2, &["NVIDIA_VISIBLE_DEVICES=all", "STACKBUILD_REQUIRE_PLATFORM=platform=wls2"]);
        assert_eq!(typo.code, 1);
        assert!(typo.stderr.contains("unknown platform \"wls2\""), "{}", typo.stderr);
    }

    /// The preset's image requirements as the container's environment.
    fn preset_env(preset: Preset) -> Vec<String> {
        let mut env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_owned()];
        env.extend(preset.requires().iter().enumerate().map(|(i, r)| format!("STACKBUILD_REQUIRE_T{i}={r}")));
        env
    }

    #[test]
    fn todays_hosts_start_and_unknown_facts_do_not_block() {
        for preset in
            [Preset::R610Cuda133, Preset::RtxA6000Torch21, Preset::Rtx6000AdaTorch21, Preset::UnknownGpu]
        {
            let env = preset_env(preset);
            let out = hook(preset, &env.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(out.code, 0, "{}: {}", preset.name(), out.stderr);
        }
    }

    #[test]
    fn a_jetson_tx2_on_jetpack_4_blocks_a_cuda_11_4_image() {
        let env = preset_env(Preset::JetsonTx2);
        let out = hook(Preset::JetsonTx2, &env.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(out.code, 1, "{}", out.stderr);
        let first = out.stderr.lines().next().unwrap_or("");
        assert!(first.contains("needs cuda>=11.4; host has 10.2 [L4-CUDA-REQUIREMENT]"), "{first}");
        assert!(out.stderr.contains("L4T R32.7.1 = JetPack 4 = CUDA 10.2"), "{}", out.stderr);
    }

    #[test]
    fn the_report_says_how_each_fact_was_obtained() {
        let dir = tempfile::tempdir().unwrap();
        let host = Preset::UnknownGpu.build(&dir.path().join("host")).unwrap();
        let bundle = dir.path().join("bundle");
        std::fs::create_dir_all(&bundle).unwrap();
        let env = preset_env(Preset::UnknownGpu);
        std::fs::write(
            bundle.join("config.json"),
            serde_json::json!({ "process": { "env": env } }).to_string(),
        )
        .unwrap();
        let state =
            serde_json::json!({ "ociVersion": "1.0.2", "id": "c1", "status": "creating", "bundle": bundle });
        let reports = dir.path().join("reports");
        let config = HookConfig {
            host_root: host.root().to_path_buf(),
            policy: Policy::Enforce,
            report_dir: Some(reports.clone()),
        };
        let out = run(state.to_string().as_bytes(), &config);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(reports.join("c1.json")).unwrap()).unwrap();
        assert_eq!(report["decision"], "allowed");
        let host = &report["diagnosis"]["host"];
        assert_eq!(host["cuda_source"]["path"], "(knowledge base) driver_branches.toml");
        assert_eq!(host["knowledge_base"]["date"], crate::contract::kb::KB_DATE);
        let codes: Vec<&str> = report["diagnosis"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["code"].as_str())
            .collect();
        assert!(codes.contains(&"L4-REQUIREMENT-UNVERIFIABLE"), "{codes:?}");
    }

    #[test]
    fn a_refusal_names_the_extension_the_image_says_lacks_code() {
        let dir = tempfile::tempdir().unwrap();
        let host = Preset::JetsonOrin.build(&dir.path().join("host")).unwrap();
        let bundle = dir.path().join("bundle");
        let etc = bundle.join("rootfs/etc/stackbuild");
        std::fs::create_dir_all(&etc).unwrap();
        let stack = serde_json::json!({
            "schema": 1, "image": "x:y", "platform": "linux/arm64", "components": [],
            "requirements": [{
                "variable": "STACKBUILD_REQUIRE_ARCH",
                "expr": "arch>=9.0,arch<10.0",
                "reasons": [
                    "torch 2.8.0 carries cubins for 8.7 9.0 (test)",
                    "flash-attn 2.8.3 (built from source) carries cubins for 9.0 (test); it runs on 9.0 <= cc < 10.0",
                    "rebuild flash-attn for other GPUs: [python.build] cuda_arch_list (TORCH_CUDA_ARCH_LIST) with their compute capability\u{1b}[2J",
                ]
            }]
        });
        std::fs::write(etc.join("stack.json"), stack.to_string()).unwrap();
        let env = ["NVIDIA_VISIBLE_DEVICES=0", "STACKBUILD_REQUIRE_ARCH=arch>=9.0,arch<10.0"];
        let config = serde_json::json!({ "root": { "path": "rootfs" }, "process": { "env": env } });
        std::fs::write(bundle.join("config.json"), config.to_string()).unwrap();
        let state =
            serde_json::json!({ "ociVersion": "1.0.2", "id": "c1", "status": "creating", "bundle": bundle });
        let config =
            HookConfig { host_root: host.root().to_path_buf(), policy: Policy::Enforce, report_dir: None };
        let out = run(state.to_string().as_bytes(), &config);
        assert_eq!(out.code, 1, "{}", out.stderr);
        assert!(
            out.stderr
                .contains("image (stack.json): flash-attn 2.8.3 (built from source) carries cubins for 9.0"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("image (stack.json): rebuild flash-attn for other GPUs"),
            "{}",
            out.stderr
        );
        assert!(!out.stderr.contains('\u{1b}'), "no escape sequence of the image reaches the terminal");
        assert!(!out.stderr.contains("torch 2.8.0 carries"), "only the extension's lines");
    }

    #[test]
    fn arch_requirement_on_a_jetson_orin() {
        let ok =
            hook(Preset::JetsonOrin, &["NVIDIA_VISIBLE_DEVICES=all", "STACKBUILD_REQUIRE_ARCH=arch>=8.7"]);
        assert_eq!((ok.code, ok.stderr.as_str()), (0, ""));
        let blocked =
            hook(Preset::JetsonOrin, &["NVIDIA_VISIBLE_DEVICES=0", "STACKBUILD_REQUIRE_ARCH=arch>=9.0"]);
        assert_eq!(blocked.code, 1);
        let first = blocked.stderr.lines().next().unwrap_or("");
        assert_eq!(
            first,
            "stackhook: blocked c1: STACKBUILD_REQUIRE_ARCH: GPU 0 (Jetson Orin (tegra234)): needs arch>=9.0; \
             host has 8.7 [L4-ARCH-REQUIREMENT]"
        );
    }
}
