//! `stackhook hook`.

use std::io::Write;
use std::path::PathBuf;

use stackhook::invoke::{self, HookConfig, Policy};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Host root to probe; a fixture tree in tests.
    #[arg(long, env = "STACKHOOK_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// What to do when a check fails: block (enforce), print and allow (warn), or only report
    /// (audit). Set in the hook entry's own `env`, never taken from the container.
    #[arg(long, env = "STACKHOOK_POLICY", default_value = "enforce")]
    policy: Policy,
    /// Write a JSON report per container id into this directory.
    #[arg(long, env = "STACKHOOK_REPORT_DIR")]
    report_dir: Option<PathBuf>,
}

impl Args {
    pub(crate) fn run(self) -> i32 {
        let config =
            HookConfig { host_root: self.host_root, policy: self.policy, report_dir: self.report_dir };
        let outcome = invoke::run(std::io::stdin().lock(), &config);
        let _ = std::io::stderr().lock().write_all(outcome.stderr.as_bytes());
        outcome.code
    }
}
