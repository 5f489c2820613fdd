//! `stackhook runtime`, also run as `stackhook-runtime`: the runc wrapper for Docker and
//! containerd. Its arguments are runc's and its environment is the engine's; both go to the
//! real runtime untouched, so this command is dispatched before clap parses anything and before
//! `main` clears the environment.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use stackhook::runtime::{self, WrapperEnv, WRAPPER_NAME};

/// For `stackhook --help`; the arguments never reach clap (see [`dispatch`]).
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub(crate) struct Args {
    /// runc's (or crun's) arguments, global options first, passed on untouched.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

impl Args {
    pub(crate) fn run(self) -> i32 {
        run(&self.args)
    }
}

/// Runs the wrapper when this process is one: named `stackhook-runtime`, or `stackhook runtime
/// ...`. Returns `None` otherwise; on success it does not return (the runtime replaces us).
pub(crate) fn dispatch() -> Option<i32> {
    let mut argv = std::env::args_os();
    let argv0 = argv.next()?;
    if Path::new(&argv0).file_name().is_some_and(|n| n == WRAPPER_NAME) {
        return Some(run(&argv.collect::<Vec<_>>()));
    }
    if argv.next().is_some_and(|a| a == "runtime") {
        return Some(run(&argv.collect::<Vec<_>>()));
    }
    None
}

/// Prepares the call ([`runtime::prepare`]) and execs the real runtime with `args`. Returns
/// only on failure: 1, with the reason on stderr (which containerd's shim puts in the error
/// Docker shows when the runtime left no log).
fn run(args: &[OsString]) -> i32 {
    let fail = |what: &dyn std::fmt::Display| {
        let message = format!("{WRAPPER_NAME}: {what}");
        let _ = writeln!(std::io::stderr().lock(), "{message}");
        runtime::write_runtime_log(args, message.trim_end());
        1
    };
    let exe = match std::env::current_exe().and_then(std::fs::canonicalize) {
        Ok(p) => p,
        Err(e) => return fail(&format!("cannot resolve /proc/self/exe: {e}")),
    };
    let env = WrapperEnv {
        runtime: std::env::var_os("STACKHOOK_RUNTIME"),
        config: std::env::var_os("STACKHOOK_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from),
        // runc takes a missing --bundle as the working directory; so do we.
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        exe,
    };
    let plan = match runtime::prepare(args, &env) {
        Ok(plan) => plan,
        Err(e) => return fail(&e),
    };
    if let Some(warning) = &plan.warning {
        let _ = write!(std::io::stderr().lock(), "{WRAPPER_NAME}: would block (policy warn): {warning}");
    }
    let err = std::process::Command::new(&plan.runtime).args(args).exec();
    fail(&format!("cannot run {}: {err}", plan.runtime.display()))
}
