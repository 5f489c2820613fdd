//! Facts about this machine that decide whether a test can run here at all, as `cfg`s, so that a
//! test that cannot run is reported by the test runner as ignored, never as passed.
//!
//! - `hybrid_cgroups`: the cgroup v1 hierarchy with the v2 `unified` mount beside it (systemd's
//!   "hybrid" mode). crun refuses it before it runs any hook ("cgroups in hybrid mode not
//!   supported", crun 1.8 `libcrun/cgroup.c`), so the crun tests cannot run.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(hybrid_cgroups)");
    println!("cargo::rerun-if-changed=/sys/fs/cgroup/unified");
    if std::path::Path::new("/sys/fs/cgroup/unified/cgroup.controllers").exists() {
        println!("cargo::rustc-cfg=hybrid_cgroups");
    }
}
