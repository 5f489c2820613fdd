//! The command line: one module per subcommand.

use clap::{Parser, Subcommand};

mod cdi;
mod doctor;
mod hook;
mod install;
mod labels;
pub(crate) mod runtime;

/// Checks, at container start, that a GPU host satisfies what the image needs.
#[derive(Debug, Parser)]
#[command(name = "stackhook", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run as an OCI hook (prestart, createRuntime or createContainer): reads the container
    /// state on stdin; exit 0 allows the start, 1 blocks it.
    Hook(hook::Args),
    /// Run the same checks on this host by hand; exit 0 when they pass, 1 when not.
    Doctor(doctor::Args),
    /// Print Kubernetes node labels for this host (`stackbuild.io/...`), for node affinity on
    /// image requirements (`stackbuild affinity`); `--format nfd` for Node Feature Discovery.
    Labels(labels::Args),
    /// The runc wrapper Docker and containerd run (also as `stackhook-runtime`): on `create` it
    /// adds the hook to the bundle's config.json, then execs runc with the same arguments.
    Runtime(runtime::Args),
    /// Wire the hook into an engine: docker, podman, crio or containerd.
    Install(install::Args),
    /// Remove what `install` added.
    Uninstall(install::Args),
    /// CDI specs: `stackhook cdi check [SPEC...]`.
    Cdi(cdi::Args),
}

impl Cli {
    /// Runs the chosen subcommand and returns the exit code.
    pub fn run(self) -> i32 {
        match self.command {
            Command::Hook(args) => args.run(),
            Command::Doctor(args) => args.run(),
            Command::Runtime(args) => args.run(),
            Command::Install(args) => args.run(true),
            Command::Uninstall(args) => args.run(false),
            Command::Labels(args) => args.run(),
            Command::Cdi(args) => args.run(),
        }
    }
}
