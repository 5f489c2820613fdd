//! What the machine has and where our files are.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether `program` is on PATH (a constant name, never input: it goes through `sh -c`).
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether this process runs as root (runc, mknod, mmdebstrap and dockerd need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The host's Docker CLI (Debian's `docker.io`).
pub const DOCKER: &str = "/usr/bin/docker";

/// Whether the host's dockerd answers its CLI (`.ci/services` starts one).
pub fn dockerd_answers() -> bool {
    Path::new(DOCKER).exists()
        && Command::new(DOCKER).arg("version").output().is_ok_and(|o| o.status.success())
}

/// The machine's architecture in Go's spelling, as OCI platforms write it.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The workspace root (this crate sits one level below it).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("test-support/ has a parent").to_owned()
}

/// A release binary of ours: `$<NAME>_BIN` when set, else `target/release/<name>`, as
/// `cargo build --release` (and `.ci/test`) leaves it; the hook is static only there.
pub fn binary(name: &str) -> PathBuf {
    let var = format!("{}_BIN", name.to_ascii_uppercase());
    let path =
        std::env::var_os(&var).map_or_else(|| workspace().join("target/release").join(name), PathBuf::from);
    assert!(path.is_file(), "{} is missing: run .ci/test (or set {var})", path.display());
    path
}

/// Runs git in `dir` with a fixed identity and neither the system's nor the user's
/// configuration; panics unless it succeeds; returns its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}"));
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Bytes free to an unprivileged writer on the filesystem that holds `path` (`statvfs`'s
/// `f_bavail`), or `None` when it cannot be read.
pub fn free_bytes(path: &Path) -> Option<u64> {
    rustix::fs::statvfs(path).ok().map(|s| s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sh_is_there_and_a_made_up_program_is_not() {
        assert!(have("sh"));
        assert!(!have("no-such-program-stackbuild-test"));
    }

    #[test]
    fn the_workspace_holds_this_crate() {
        assert!(workspace().join("test-support/Cargo.toml").is_file());
    }

    #[test]
    fn git_commits_with_its_own_identity() {
        if !have("git") {
            eprintln!("skipped: no git");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        git(dir.path(), &["init", "-q"]);
        git(dir.path(), &["add", "f"]);
        git(dir.path(), &["commit", "-qm", "one"]);
        assert_eq!(git(dir.path(), &["log", "-1", "--format=%an <%ae>"]), "t <t@example.invalid>");
        assert_eq!(git(dir.path(), &["rev-parse", "--abbrev-ref", "HEAD"]), "main");
    }
}
