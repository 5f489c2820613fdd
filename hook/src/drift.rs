//! Drift after start: what goes wrong in containers that were fine when the hook let them start.
//!
//! - **A driver upgrade under running containers.** A process keeps the driver's user-space
//!   libraries it mapped at start (`libcuda.so.535.54.03`, `libnvidia-ml.so.535.54.03`; shown
//!   ` (deleted)` once the package replaced them) while the kernel module is now another version.
//!   Every NVML call then fails with `Failed to initialize NVML: Driver/library version mismatch`
//!   (NVIDIA container toolkit issues 171 and 394, nvidia-docker issue 737) until the container
//!   restarts. [`scan`] lists those processes from `/proc/<pid>/maps`, with the container and pod
//!   their cgroup names.
//! - **`systemctl daemon-reload` under the systemd cgroup driver.** systemd rewrites a
//!   container's device allow list from what the unit declares; GPU nodes a runtime hook added
//!   behind its back (not in the OCI spec's `linux.devices`) are dropped, and the GPUs vanish
//!   from running containers (NVIDIA container toolkit issue 48). systemd can keep a node only
//!   when it can resolve it through `/dev/char/MAJOR:MINOR`, which the driver does not create for
//!   its nodes; `nvidia-ctk system create-dev-char-symlinks` (and its udev rule) does.
//!   [`exposure`] says whether this host is exposed.
//!
//! Everything is read under the host root with capped reads ([`HostFs`]); nothing is executed.

use std::collections::BTreeMap;

use crate::probe::{HostFs, HostProbe, NodeState};

/// Most processes looked at.
const MAX_PIDS: usize = 16_384;
/// Largest `maps` file read (a process with torch and CUDA loaded maps a few thousand regions).
const MAX_MAPS: usize = 8 << 20;
/// The driver libraries whose version must be the module's.
const DRIVER_LIBRARIES: [&str; 2] = ["libcuda.so.", "libnvidia-ml.so."];

/// A process that maps driver libraries of another version than the loaded module.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StaleProcess {
    /// Its pid (in the host's pid namespace).
    pub pid: u32,
    /// `/proc/<pid>/comm`, as read (reports quote it through `Evidence`, which escapes control
    /// characters).
    pub comm: String,
    /// The library as mapped (`/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03 (deleted)`).
    pub library: String,
    /// Its driver version (`535.54.03`).
    pub version: String,
    /// The container id its cgroup names (64 hex digits), when it runs in one.
    pub container: Option<String>,
    /// The Kubernetes pod UID its cgroup names, when it runs in a pod.
    pub pod: Option<String>,
}

/// What [`scan`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DriftScan {
    /// The loaded module's version the libraries were held against.
    pub module: String,
    /// The processes whose driver libraries are of another version.
    pub stale: Vec<StaleProcess>,
    /// How many processes were looked at.
    pub scanned: usize,
    /// Whether some were left out (more than [`MAX_PIDS`]).
    pub capped: bool,
}

impl DriftScan {
    /// The distinct containers (or, outside any container, processes) affected.
    pub fn containers(&self) -> BTreeMap<String, Vec<&StaleProcess>> {
        let mut out: BTreeMap<String, Vec<&StaleProcess>> = BTreeMap::new();
        for p in &self.stale {
            let key = match (&p.pod, &p.container) {
                (Some(pod), Some(c)) => format!("pod {pod}, container {}", short(c)),
                (None, Some(c)) => format!("container {}", short(c)),
                (Some(pod), None) => format!("pod {pod}"),
                (None, None) => format!("process {} ({}), outside containers", p.pid, p.comm),
            };
            out.entry(key).or_default().push(p);
        }
        out
    }
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// The processes of the host whose driver libraries differ from the loaded module `module`
/// (`535.104.05`).
pub fn scan(probe: &HostProbe, module: &str) -> DriftScan {
    let mut out = DriftScan { module: module.to_owned(), ..DriftScan::default() };
    let Ok(fs) = HostFs::open(&probe.root) else { return out };
    let Ok((names, more)) = fs.list("proc", MAX_PIDS * 2) else { return out };
    out.capped = more;
    for name in names {
        let Ok(pid) = name.parse::<u32>() else { continue };
        if out.scanned == MAX_PIDS {
            out.capped = true;
            break;
        }
        out.scanned += 1;
        // A process may end between the listing and the read: nothing to report then.
        let Ok(maps) = fs.read_all_text(&format!("proc/{pid}/maps"), MAX_MAPS) else { continue };
        let Some((library, version)) = stale_library(&maps, module) else { continue };
        let comm =
            fs.read_text(&format!("proc/{pid}/comm"), 64).map(|c| c.trim().to_owned()).unwrap_or_default();
        let cgroup = fs.read_text(&format!("proc/{pid}/cgroup"), 16 << 10).unwrap_or_default();
        out.stale.push(StaleProcess {
            pid,
            comm,
            library,
            version,
            container: container_id(&cgroup),
            pod: pod_uid(&cgroup),
        });
    }
    out
}

/// The first driver library `maps` shows of another version than `module`.
fn stale_library(maps: &str, module: &str) -> Option<(String, String)> {
    for line in maps.lines() {
        // `start-end perms offset dev inode   path`: the path is what follows the fifth field
        // and may hold spaces (` (deleted)`).
        let Some(path) = path_of(line) else { continue };
        let file = path.trim_end_matches(" (deleted)");
        let name = file.rsplit('/').next().unwrap_or(file);
        for lib in DRIVER_LIBRARIES {
            let Some(version) = name.strip_prefix(lib) else { continue };
            // `libcuda.so.1` is the soname link, never mapped by that name; a version has dots.
            if !version.contains('.') || !version.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                continue;
            }
            if version != module {
                return Some((path.to_owned(), version.to_owned()));
            }
        }
    }
    None
}

/// The path field of a `maps` line, when it has one.
fn path_of(line: &str) -> Option<&str> {
    let mut rest = line;
    for _ in 0..5 {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace)?;
        rest = &rest[end..];
    }
    let path = rest.trim();
    (!path.is_empty()).then_some(path)
}

/// The container id a cgroup path names: 64 hex digits after `docker-`, `cri-containerd-`,
/// `crio-`, `libpod-` (systemd driver, `.scope`) or as the last path segment (cgroupfs driver).
fn container_id(cgroup: &str) -> Option<String> {
    for line in cgroup.lines() {
        let path = line.rsplit(':').next().unwrap_or(line);
        for segment in path.split('/').rev() {
            let segment = segment.trim_end_matches(".scope");
            let id = segment.rsplit(['-', ':']).next().unwrap_or(segment);
            if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Some(id.to_ascii_lowercase());
            }
        }
    }
    None
}

/// The pod UID a kubepods cgroup names (`kubepods-burstable-pod1a2b..._....slice` under the
/// systemd driver, `/kubepods/burstable/pod1a2b-...` under cgroupfs).
fn pod_uid(cgroup: &str) -> Option<String> {
    for segment in cgroup.split(['/', ':', '\n']) {
        let segment = segment.trim_end_matches(".slice");
        let Some(at) = segment.rfind("pod") else { continue };
        let uid = segment[at + 3..].replace('_', "-");
        if uid.len() == 36 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return Some(uid);
        }
    }
    None
}

/// Whether GPUs can vanish from running containers at `systemctl daemon-reload`: the host's
/// cgroups are systemd-managed v2 (`sys/fs/cgroup/cgroup.controllers` and a running systemd)
/// and some NVIDIA device nodes have no `/dev/char/MAJOR:MINOR` link. Returns the nodes without
/// one; empty when the host is not exposed or cannot tell.
pub fn exposure(probe: &HostProbe) -> Vec<String> {
    let Ok(fs) = HostFs::open(&probe.root) else { return Vec::new() };
    let v2 = fs.lstat("sys/fs/cgroup/cgroup.controllers").is_ok();
    let systemd = fs.lstat("run/systemd/system").is_ok();
    if !(v2 && systemd) {
        return Vec::new();
    }
    let mut missing = Vec::new();
    for (path, state) in &probe.device_nodes {
        let NodeState::CharDevice { major, minor } = state else { continue };
        if fs.lstat(&format!("dev/char/{major}:{minor}")).is_err() {
            missing.push(path.clone());
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_of_another_version() {
        let maps = "\
7f00-7f10 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6
7f10-7f20 r-xp 00000000 08:01 124 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05
7f20-7f30 r--p 00000000 00:00 0
7f30-7f40 r-xp 00000000 08:01 125 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03 (deleted)
";
        assert_eq!(
            stale_library(maps, "535.104.05"),
            Some((
                "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03 (deleted)".into(),
                "535.54.03".into()
            ))
        );
        assert_eq!(stale_library(maps, "535.54.03").map(|(_, v)| v).as_deref(), Some("535.104.05"));
        assert_eq!(stale_library("7f-8f r-xp 0 0:0 1 /x/libcuda.so.1\n", "550.1"), None);
    }

    #[test]
    fn containers_and_pods_from_cgroups() {
        let id = "a".repeat(64);
        let systemd = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678_90ab_cdef_1234567890ab.slice/cri-containerd-{id}.scope\n"
        );
        assert_eq!(container_id(&systemd).as_deref(), Some(id.as_str()));
        assert_eq!(pod_uid(&systemd).as_deref(), Some("1234abcd-5678-90ab-cdef-1234567890ab"));
        assert_eq!(
            container_id(&format!("0::/system.slice/docker-{id}.scope\n")).as_deref(),
            Some(id.as_str())
        );
        assert_eq!(container_id(&format!("12:devices:/docker/{id}\n")).as_deref(), Some(id.as_str()));
        assert_eq!(container_id("0::/user.slice/user-1000.slice/session-1.scope\n"), None);
        assert_eq!(pod_uid("0::/system.slice/docker.service\n"), None);
    }
}

#[cfg(test)]
mod host_tests {
    use crate::fixture::Preset;

    /// Writes a fake process `pid` into the fixture host `root`: its comm, cgroup and maps.
    fn process(root: &std::path::Path, pid: u32, comm: &str, cgroup: &str, libs: &[&str]) {
        let dir = root.join(format!("proc/{pid}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(dir.join("cgroup"), cgroup).unwrap();
        let mut maps = String::new();
        for (i, l) in libs.iter().enumerate() {
            use std::fmt::Write as _;
            let _ = writeln!(maps, "7f{i:02x}0000-7f{i:02x}1000 r-xp 00000000 08:01 {i} {l}");
        }
        std::fs::write(dir.join("maps"), maps).unwrap();
    }

    /// A driver upgrade under running containers (the fixture's module is 535.104.05): the
    /// doctor names the containers and pods whose processes still map 535.54.03's libraries, with
    /// the remedy; the label counts them; processes of the current version are left alone.
    #[test]
    fn a_driver_upgrade_under_running_containers() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        Preset::Healthy.build(&root).unwrap();
        let lib = "/usr/lib/x86_64-linux-gnu";
        let id = "b".repeat(64);
        process(
            &root,
            4242,
            "python3",
            &format!("0::/kubepods.slice/kubepods-pod0a1b2c3d_0000_1111_2222_333344445555.slice/cri-containerd-{id}.scope\n"),
            &[&format!("{lib}/libc.so.6"), &format!("{lib}/libnvidia-ml.so.535.54.03 (deleted)")],
        );
        process(
            &root,
            4243,
            "python3",
            &format!("0::/system.slice/docker-{}.scope\n", "c".repeat(64)),
            &[&format!("{lib}/libcuda.so.535.54.03 (deleted)")],
        );
        process(
            &root,
            4244,
            "trainer",
            "0::/system.slice/docker-ok.scope\n",
            &[&format!("{lib}/libcuda.so.535.104.05")],
        );
        let p = crate::probe::probe(&root);
        let scan = super::scan(&p, "535.104.05");
        assert_eq!(scan.stale.len(), 2, "{scan:?}");
        assert_eq!(scan.stale[0].pod.as_deref(), Some("0a1b2c3d-0000-1111-2222-333344445555"));
        assert_eq!(scan.containers().len(), 2);
        let (text, code) = crate::diagnose::doctor(&root, &[], "all", false, false);
        assert!(text.contains("L2-LIBRARY-DRIFT"), "{text}");
        assert!(text.contains("2 process(es) in 2 container(s) map driver libraries 535.54.03 while the loaded module is 535.104.05"), "{text}");
        assert!(
            text.contains("pod 0a1b2c3d-0000-1111-2222-333344445555, container bbbbbbbbbbbb: python3 maps"),
            "{text}"
        );
        assert!(text.contains("kubectl cordon NODE"), "{text}");
        // A warning: the host itself is fine for new containers.
        assert_eq!(code, 0, "{text}");
        let labels = crate::labels::node_labels(&p);
        assert_eq!(labels.get(crate::labels::HOST_DRIFT).map(String::as_str), Some("2"));
    }

    /// The daemon-reload exposure: systemd-managed cgroup v2 and NVIDIA nodes without a
    /// `/dev/char` link; fixed by the links `nvidia-ctk system create-dev-char-symlinks` makes.
    #[test]
    fn daemon_reload_exposure() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        let host = Preset::Healthy.build(&root).unwrap();
        if !host.real_device_nodes() {
            eprintln!("skipped: mknod is not permitted here, so the fixture has no device nodes");
            return;
        }
        let p = crate::probe::probe(&root);
        assert!(super::exposure(&p).is_empty(), "cgroup v1 or no systemd: not exposed");
        host.systemd_cgroup2().unwrap();
        let p = crate::probe::probe(&root);
        let exposed = super::exposure(&p);
        assert!(exposed.iter().any(|n| n == "/dev/nvidia0"), "{exposed:?}");
        let (text, _) = crate::diagnose::doctor(&root, &[], "all", false, false);
        assert!(
            text.contains("L2-DAEMON-RELOAD-EXPOSED") && text.contains("create-dev-char-symlinks"),
            "{text}"
        );
        // The links: exposure gone.
        std::fs::create_dir_all(root.join("dev/char")).unwrap();
        for (path, state) in &p.device_nodes {
            if let crate::probe::NodeState::CharDevice { major, minor } = state {
                std::os::unix::fs::symlink(
                    format!("..{path}").replace("../dev/", "../"),
                    root.join(format!("dev/char/{major}:{minor}")),
                )
                .unwrap();
            }
        }
        assert!(super::exposure(&crate::probe::probe(&root)).is_empty());
    }
}
