//! `stackhook`: the OCI hook, and `stackhook doctor` for a host by hand.

use clap::Parser;

mod cmd;

fn main() {
    // The runc wrapper keeps runc's arguments and the engine's environment for runc: it runs
    // before clap and before the clearing below.
    if let Some(code) = cmd::runtime::dispatch() {
        std::process::exit(code);
    }
    let mut cli = cmd::Cli::parse();
    if let Ok(cwd) = std::env::current_dir() {
        cli.anchor(&cwd);
    }
    // The hook runs as root with whatever environment the runtime hands it; having read our own
    // settings (clap's `env`), drop all of it and leave the container's directory (CVE-2025-23266).
    for (key, _) in std::env::vars_os() {
        // No other thread exists yet that could read the environment concurrently.
        std::env::remove_var(key);
    }
    let _ = std::env::set_current_dir("/");
    std::process::exit(cli.run());
}
