//! The engines' files, as install writes them: Docker's `daemon.json` with our runtime added or
//! removed (every other key kept), the Podman and CRI-O hooks.d file (schema 1.0.0,
//! `oci-hooks(5)`), and containerd's runtime handler with a Kubernetes `RuntimeClass`, which is
//! printed rather than written.

use std::path::Path;

use super::{InstallError, RUNTIME_NAME};
use crate::runtime::{self, HookEntry, RuntimeError, HOOK_ARGS};

/// daemon.json with `runtimes.stackhook.path` set to `wrapper`, every other key kept; `None`
/// when it is already so. `existing` is the current file, `None` when there is none.
pub fn docker_add_runtime(
    existing: Option<&[u8]>,
    wrapper: &Path,
    path: &Path,
) -> Result<Option<serde_json::Value>, InstallError> {
    let shape = |what| InstallError::Shape { path: path.to_owned(), what };
    let mut doc = parse_daemon_json(existing, path)?;
    let wrapper =
        wrapper.to_str().ok_or(RuntimeError::NotUtf8 { what: "the wrapper", path: wrapper.to_owned() })?;
    let runtimes = doc
        .as_object_mut()
        .ok_or_else(|| shape("the document is not a JSON object"))?
        .entry("runtimes")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or_else(|| shape("\"runtimes\" is not an object"))?;
    let ours = runtimes.entry(RUNTIME_NAME).or_insert_with(|| serde_json::json!({}));
    let ours = ours.as_object_mut().ok_or_else(|| shape("\"runtimes.stackhook\" is not an object"))?;
    if ours.get("path").and_then(serde_json::Value::as_str) == Some(wrapper) {
        return Ok(None);
    }
    // Any other key of our entry (say `runtimeArgs` added by hand) stays.
    ours.insert("path".into(), wrapper.into());
    Ok(Some(doc))
}

/// daemon.json without `runtimes.stackhook` (and without `runtimes` when that leaves it
/// empty); `None` when there was nothing to remove.
pub fn docker_remove_runtime(
    existing: &[u8],
    path: &Path,
) -> Result<Option<serde_json::Value>, InstallError> {
    let mut doc = parse_daemon_json(Some(existing), path)?;
    let root = doc
        .as_object_mut()
        .ok_or(InstallError::Shape { path: path.to_owned(), what: "the document is not a JSON object" })?;
    if root.get("default-runtime").and_then(serde_json::Value::as_str) == Some(RUNTIME_NAME) {
        return Err(InstallError::DefaultRuntime { path: path.to_owned() });
    }
    let Some(runtimes) = root.get_mut("runtimes").and_then(serde_json::Value::as_object_mut) else {
        return Ok(None);
    };
    if runtimes.remove(RUNTIME_NAME).is_none() {
        return Ok(None);
    }
    if runtimes.is_empty() {
        root.remove("runtimes");
    }
    Ok(Some(doc))
}

fn parse_daemon_json(existing: Option<&[u8]>, path: &Path) -> Result<serde_json::Value, InstallError> {
    match existing {
        // dockerd accepts an empty file as `{}`.
        Some(bytes) if !bytes.iter().all(u8::is_ascii_whitespace) => serde_json::from_slice(bytes)
            .map_err(|source| InstallError::Json { path: path.to_owned(), source }),
        _ => Ok(serde_json::json!({})),
    }
}

/// A hooks.d file (schema 1.0.0) that runs `entry` at `createRuntime` for every container.
///
/// `when` is `always: true`: the conditions podman and CRI-O offer (`annotations`, `commands`,
/// `hasBindMounts`) see the OCI config's annotations and command, not the image's environment,
/// and an image says it wants a GPU through `NVIDIA_VISIBLE_DEVICES` in its env. The hook's
/// fast path makes a container that asks for no GPU cost one read of `config.json`.
pub fn hooks_d_file(entry: &HookEntry) -> serde_json::Value {
    serde_json::json!({
        "version": "1.0.0",
        "hook": entry.to_value(),
        "when": { "always": true },
        "stages": [runtime::HOOK_STAGE],
    })
}

/// Whether a hooks.d file is one of ours (its hook runs `stackhook hook`).
pub(super) fn is_our_hook_file(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(bytes).is_ok_and(|doc| {
        doc.pointer("/hook/args").and_then(serde_json::Value::as_array).is_some_and(|args| {
            args.len() >= 2 && args.iter().zip(HOOK_ARGS).all(|(a, b)| a.as_str() == Some(b))
        })
    })
}

/// The containerd runtime handler (config version 2) and the Kubernetes `RuntimeClass`.
pub fn containerd_snippet(wrapper: &Path) -> String {
    let table = format!("plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.{RUNTIME_NAME}");
    format!(
        "# add to /etc/containerd/config.toml (version = 2), then restart containerd:\n\
         # (containerd 1.x replaces its built-in runtimes with the ones a config declares: keep the\n\
         # `runc` runtime table there, as `containerd config default` writes it, or CRI will not load)\n\
         [{table}]\n  runtime_type = \"io.containerd.runc.v2\"\n\
         [{table}.options]\n  BinaryName = \"{}\"\n\
         \n# and for Kubernetes (kubectl apply -f -); pods opt in with `runtimeClassName: {RUNTIME_NAME}`:\n\
         apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {RUNTIME_NAME}\nhandler: {RUNTIME_NAME}\n",
        wrapper.display()
    )
}
