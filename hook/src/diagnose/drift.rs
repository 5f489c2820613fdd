//! L2, for `stackhook doctor` only (the hook judges one container at its start; these are about
//! the ones already running): containers that map driver libraries of another version than the
//! loaded module, and a host whose GPUs vanish from running containers at
//! `systemctl daemon-reload` ([`crate::drift`]).

use super::report::{Finding, Layer, Severity};
use crate::probe::HostProbe;

/// Restarting is the only cure: the mapped libraries cannot be swapped under a process.
const RESTART: &str = "restart those containers; for pods: kubectl cordon NODE && kubectl drain NODE \
--ignore-daemonsets --delete-emptydir-data, then kubectl uncordon NODE (or reboot the node)";

/// The fix NVIDIA documents for the daemon-reload loss (container toolkit issue 48).
const DEV_CHAR: &str = "sudo nvidia-ctk system create-dev-char-symlinks --create-all, and its udev rule so \
new nodes get one (/lib/udev/rules.d/71-nvidia-dev-char.rules); or give GPUs through CDI, whose \
specs put the nodes in the container's device list";

/// At a container's start: its GPUs are handed out outside its device list (a runtime hook, not
/// CDI: no GPU node in `linux.devices`) while systemd manages its cgroup, on a host whose nodes
/// have no `/dev/char` link. A warning: the start is fine, a later `systemctl daemon-reload` is
/// not.
pub fn daemon_reload_at_start(p: &HostProbe, systemd_cgroup: bool, gpu_nodes_in_spec: bool) -> Vec<Finding> {
    if !systemd_cgroup || gpu_nodes_in_spec {
        return Vec::new();
    }
    let exposed = crate::drift::exposure(p);
    if exposed.is_empty() {
        return Vec::new();
    }
    let mut f = Finding::new(
        "L2-DAEMON-RELOAD-EXPOSED",
        Layer::L2UserSpace,
        Severity::Warning,
        "this container's GPUs are not in its device list (a runtime hook adds them) and systemd manages its \
         cgroup: a `systemctl daemon-reload` on this host takes them away while it runs",
    );
    for node in exposed.iter().take(6) {
        f = f.with(node, "no /dev/char/MAJOR:MINOR link");
    }
    vec![f.remedy(DEV_CHAR)]
}

/// The drift findings of a host.
pub(super) fn findings(p: &HostProbe) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(module) = &p.driver {
        let module = module.value.to_string();
        let scan = crate::drift::scan(p, &module);
        let containers = scan.containers();
        if !scan.stale.is_empty() {
            let versions: std::collections::BTreeSet<&str> =
                scan.stale.iter().map(|s| s.version.as_str()).collect();
            let mut f = Finding::new(
                "L2-LIBRARY-DRIFT",
                Layer::L2UserSpace,
                Severity::Warning,
                format!(
                    "{} process(es) in {} container(s) map driver libraries {} while the loaded module is {module}: \
                     NVML fails there with \"Driver/library version mismatch\" until they restart (a driver \
                     upgrade under running containers)",
                    scan.stale.len(),
                    containers.len(),
                    versions.into_iter().collect::<Vec<_>>().join(", ")
                ),
            );
            for (who, procs) in &containers {
                for s in procs.iter().take(4) {
                    f = f.with(
                        &format!("/proc/{}/maps", s.pid),
                        format!("{who}: {} maps {}", s.comm, s.library),
                    );
                }
            }
            out.push(f.remedy(RESTART));
        }
    }
    let exposed = crate::drift::exposure(p);
    if !exposed.is_empty() {
        let mut f = Finding::new(
            "L2-DAEMON-RELOAD-EXPOSED",
            Layer::L2UserSpace,
            Severity::Warning,
            format!(
                "{} NVIDIA device node(s) have no /dev/char link while systemd manages the cgroups: a \
                 `systemctl daemon-reload` takes the GPUs away from running containers that got them \
                 outside their device list (a runtime hook, not CDI)",
                exposed.len()
            ),
        );
        for node in exposed.iter().take(6) {
            f = f.with(node, "no /dev/char/MAJOR:MINOR link");
        }
        out.push(f.remedy(DEV_CHAR));
    }
    out
}
