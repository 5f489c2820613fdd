//! Running commands and stopping what a test started.

use std::process::{Child, Command, Output};
use std::time::Duration;

/// A process's output as text (lossy: a test only prints or searches it).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `cmd`; panics, with its status, stdout and stderr, unless it succeeds.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// Stops a daemon the way an init system does: SIGTERM, up to `grace` for it to exit (a
/// daemon stops its containers and shims first), then SIGKILL. Always reaps it.
pub fn stop(child: &mut Child, grace: Duration) {
    let pid = rustix::process::Pid::from_child(child);
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let step = Duration::from_millis(250);
    let mut waited = Duration::ZERO;
    while waited < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(step);
        waited += step;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `SIGKILL` to the process group `child` leads (a child spawned with
/// `process_group(0)`), reaps the child, and waits up to 10 s until no member of the group is
/// left. Returns whether the group is gone.
pub fn kill_group(child: &mut Child) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(child.id().cast_signed()) else { return false };
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    let _ = child.wait();
    for _ in 0..200 {
        // Signal 0 probes for members without touching them; ESRCH means the group is empty.
        if rustix::process::test_kill_process_group(pid).is_err() {
            return true;
        }
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Run `f` on a thread of its own and return what it returns, failing the test when it has not
/// returned within `secs` seconds: for code that must not block (a FIFO or a device opened as a
/// file must be refused, not read forever).
pub fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("still blocked after {secs} s (or panicked)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;

    #[test]
    fn run_returns_the_output_of_a_success() {
        assert_eq!(text(&run(Command::new("sh").args(["-c", "echo hi"])).stdout), "hi\n");
    }

    #[test]
    #[should_panic(expected = "failed with")]
    fn run_panics_on_a_failure() {
        run(Command::new("sh").args(["-c", "exit 3"]));
    }

    #[test]
    fn stop_ends_a_process_that_honours_sigterm() {
        let mut child = Command::new("sleep").arg("60").spawn().unwrap();
        stop(&mut child, Duration::from_secs(5));
        assert!(child.try_wait().unwrap().is_some());
    }

    #[test]
    fn kill_group_ends_the_leader_and_its_children() {
        let mut child =
            Command::new("sh").args(["-c", "sleep 60 & sleep 60; wait"]).process_group(0).spawn().unwrap();
        assert!(kill_group(&mut child));
    }
}
