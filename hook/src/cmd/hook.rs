//! `stackhook hook`.

use std::io::Write;
use std::path::PathBuf;

use stackhook::invoke::{self, HookConfig, Policy};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    checks: Checks,
}

/// The checks' settings, the hook's and the NRI plugin's alike.
#[derive(Debug, clap::Args)]
pub(crate) struct Checks {
    /// Host root to probe: `/`, the node's `/` mounted into the NRI plugin's container, or a
    /// fixture tree in tests.
    #[arg(long, env = "STACKHOOK_HOST_ROOT", default_value = "/")]
    pub(crate) host_root: PathBuf,
    /// What to do when a check fails: block (enforce), print and allow (warn), or only report
    /// (audit). Set in the hook entry's or the plugin's own environment, never taken from the
    /// container.
    #[arg(long, env = "STACKHOOK_POLICY", default_value = "enforce")]
    policy: Policy,
    /// Write a JSON report per container into this directory.
    #[arg(long, env = "STACKHOOK_REPORT_DIR")]
    pub(crate) report_dir: Option<PathBuf>,
}

impl Checks {
    pub(crate) fn config(self) -> HookConfig {
        HookConfig { host_root: self.host_root, policy: self.policy, report_dir: self.report_dir }
    }
}

impl Args {
    pub(crate) fn run(self) -> i32 {
        let config = self.checks.config();
        let outcome = invoke::run(std::io::stdin().lock(), &config);
        let _ = std::io::stderr().lock().write_all(outcome.stderr.as_bytes());
        outcome.code
    }
}
