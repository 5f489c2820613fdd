//! Chaining with NVIDIA's runtime: `nvidia-container-runtime` in front, the stackhook wrapper
//! as its lower runtime, runc last.
//!
//! GPU nodes run NVIDIA's runtime already: Docker's `"default-runtime": "nvidia"`, containerd's
//! `nvidia` handler, the GPU Operator's `nvidia` and `nvidia-cdi` `RuntimeClasses`. In jit-CDI
//! mode (the default since toolkit 1.18.0) and in `cdi` mode it is that runtime that writes the
//! CDI edits (device nodes, library mounts, `NVIDIA_VISIBLE_DEVICES=void`) into `config.json`,
//! and then execs the first runtime of `nvidia-container-runtime.runtimes` in
//! `/etc/nvidia-container-runtime/config.toml` it finds (default `["docker-runc", "runc",
//! "crun"]`; toolkit `internal/config/runtime.go`).
//!
//! The order is NVIDIA's runtime first, ours after it: putting the wrapper first in that list
//! makes every handler that runs NVIDIA's runtime run ours on the final `config.json`, so both
//! the wrapper's pre-check (a stale static spec's missing libraries, which runc would fail on
//! before any hook runs) and the hook see what runc will get; the engines' own configuration
//! stays as it is. The reverse (ours in front, NVIDIA's as our lower runtime) would let the
//! hook judge the final file too, but the pre-check would only see the file before NVIDIA's
//! edits, and every engine's runtime configuration would have to change. The file is edited in
//! place with its comments kept (`toml_edit`), after a backup, and `uninstall` takes the entry
//! out again.

use std::path::Path;

use toml_edit::{Array, DocumentMut, Item, Value};

use super::InstallError;

/// NVIDIA's runtime configuration.
pub const NVIDIA_RUNTIME_CONFIG: &str = "/etc/nvidia-container-runtime/config.toml";
/// The table and key naming the lower runtimes.
const TABLE: &str = "nvidia-container-runtime";
const KEY: &str = "runtimes";
/// The toolkit's default for `runtimes`.
const DEFAULT_RUNTIMES: [&str; 3] = ["docker-runc", "runc", "crun"];

fn parse(text: &str, path: &Path) -> Result<DocumentMut, InstallError> {
    text.parse::<DocumentMut>()
        .map_err(|e| InstallError::Toml { path: path.to_owned(), message: e.to_string() })
}

/// The list, created with the toolkit's default when absent.
fn runtimes<'a>(doc: &'a mut DocumentMut, path: &Path) -> Result<&'a mut Array, InstallError> {
    let shape = |what| InstallError::Shape { path: path.to_owned(), what };
    let table = doc
        .entry(TABLE)
        .or_insert_with(toml_edit::table)
        .as_table_like_mut()
        .ok_or_else(|| shape("[nvidia-container-runtime] is not a table"))?;
    if table.get(KEY).is_none() {
        table.insert(KEY, Item::Value(Value::Array(DEFAULT_RUNTIMES.iter().copied().collect())));
    }
    table
        .get_mut(KEY)
        .and_then(Item::as_array_mut)
        .ok_or_else(|| shape("nvidia-container-runtime.runtimes is not an array"))
}

/// NVIDIA's config with `wrapper` first among its lower runtimes; `None` when it is already.
pub fn chain(text: &str, wrapper: &str, path: &Path) -> Result<Option<String>, InstallError> {
    let mut doc = parse(text, path)?;
    let list = runtimes(&mut doc, path)?;
    if list.get(0).and_then(Value::as_str) == Some(wrapper) {
        return Ok(None);
    }
    list.retain(|v| v.as_str() != Some(wrapper));
    list.insert(0, wrapper);
    list.fmt();
    Ok(Some(doc.to_string()))
}

/// NVIDIA's config without `wrapper` among its lower runtimes; `None` when it was not there.
pub fn unchain(text: &str, wrapper: &str, path: &Path) -> Result<Option<String>, InstallError> {
    let mut doc = parse(text, path)?;
    let Some(list) = doc.get_mut(TABLE).and_then(|t| t.get_mut(KEY)).and_then(Item::as_array_mut) else {
        return Ok(None);
    };
    let before = list.len();
    list.retain(|v| v.as_str() != Some(wrapper));
    list.fmt();
    Ok((list.len() != before).then(|| doc.to_string()))
}

/// Whether a wrapper configuration's own lower runtime is NVIDIA's, which with the chain
/// would exec the wrapper again.
pub fn loops(runtime: Option<&str>) -> bool {
    runtime.is_some_and(|r| r.rsplit('/').next().is_some_and(|n| n.starts_with("nvidia-container-runtime")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of the file the toolkit's packages install (1.17+), comments and all.
    const SHIPPED: &str = "#accept-nvidia-visible-devices-as-volume-mounts = false\n\
        disable-require = false\n\n[nvidia-container-cli]\nldconfig = \"@/sbin/ldconfig.real\"\n\n\
        [nvidia-container-runtime]\n#debug = \"/var/log/nvidia-container-runtime.log\"\nlog-level = \"info\"\n\
        mode = \"auto\"\nruntimes = [\"docker-runc\", \"runc\", \"crun\"]\n\n\
        [nvidia-container-runtime.modes.cdi]\ndefault-kind = \"nvidia.com/gpu\"\n";

    #[test]
    fn the_wrapper_goes_first_and_comes_out_again_with_comments_kept() {
        let p = Path::new("/etc/nvidia-container-runtime/config.toml");
        let w = "/usr/local/bin/stackhook-runtime";
        let chained = chain(SHIPPED, w, p).unwrap().unwrap();
        assert!(
            chained.contains(
                "runtimes = [\"/usr/local/bin/stackhook-runtime\", \"docker-runc\", \"runc\", \"crun\"]"
            ),
            "{chained}"
        );
        assert!(chained.contains("#debug = \"/var/log/nvidia-container-runtime.log\""));
        assert_eq!(chain(&chained, w, p).unwrap(), None, "idempotent");
        assert_eq!(unchain(&chained, w, p).unwrap().unwrap(), SHIPPED);
        assert_eq!(unchain(SHIPPED, w, p).unwrap(), None);
        // Without the key, the toolkit's default list follows ours.
        let bare = chain("[nvidia-container-runtime]\nmode = \"cdi\"\n", w, p).unwrap().unwrap();
        assert!(
            bare.contains(
                "runtimes = [\"/usr/local/bin/stackhook-runtime\", \"docker-runc\", \"runc\", \"crun\"]"
            ),
            "{bare}"
        );
        assert!(matches!(chain("runtimes = [", w, p), Err(InstallError::Toml { .. })));
        assert!(matches!(
            chain("[nvidia-container-runtime]\nruntimes = 5\n", w, p),
            Err(InstallError::Shape { .. })
        ));
        assert!(loops(Some("/usr/bin/nvidia-container-runtime")) && !loops(Some("runc")) && !loops(None));
    }
}
