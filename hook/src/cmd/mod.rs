//! The command line: one module per subcommand.

use clap::{CommandFactory as _, Parser, Subcommand};

mod cdi;
mod doctor;
mod hook;
mod install;
mod labels;
mod nri;
pub(crate) mod runtime;

/// Checks, at container start, that a GPU host satisfies what the image needs.
#[derive(Debug, Parser)]
#[command(name = "stackhook", version, about, after_help = EXAMPLES)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run as an OCI hook (prestart, createRuntime or createContainer): reads the container
    /// state on stdin; exit 0 allows the start, 1 blocks it.
    #[command(after_help = examples::HOOK)]
    Hook(hook::Args),
    /// Run the same checks on this host by hand; exit 0 when they pass, 1 when not.
    #[command(after_help = examples::DOCTOR)]
    Doctor(doctor::Args),
    /// Print Kubernetes node labels for this host (`stackbuild.io/...`), for node affinity on
    /// image requirements (`stackbuild affinity`); `--format nfd` for Node Feature Discovery.
    #[command(after_help = examples::LABELS)]
    Labels(labels::Args),
    /// The runc wrapper Docker and containerd run (also as `stackhook-runtime`): on `create` it
    /// adds the hook to the bundle's config.json, then execs runc with the same arguments.
    #[command(after_help = examples::RUNTIME)]
    Runtime(runtime::Args),
    /// Run as an NRI plugin: the same checks at `CreateContainer`, on containerd 1.7+ and CRI-O
    /// 1.26+, with no runtime handler, `RuntimeClass` or change to the runtime's configuration.
    #[command(after_help = examples::NRI)]
    Nri(nri::Args),
    /// Wire the hook into an engine: docker, podman, crio or containerd.
    #[command(after_help = examples::INSTALL)]
    Install(install::Args),
    /// Remove what `install` added.
    #[command(after_help = examples::UNINSTALL)]
    Uninstall(install::Args),
    /// CDI specs: `stackhook cdi check [SPEC...]`.
    #[command(after_help = examples::CDI)]
    Cdi(cdi::Args),
    /// Write the man pages and shell completions (bash, zsh, fish) into DIR, generated from
    /// these definitions (for packages).
    #[command(hide = true)]
    GenerateDocs(DocsArgs),
}

/// Each subcommand's examples, at the end of its `--help`.
mod examples {
    pub(super) const HOOK: &str = "Examples:
  stackhook hook < state.json      (the runtime runs this) check one container's start; exit 1 blocks it";
    pub(super) const DOCTOR: &str = "Examples:
  sudo stackhook doctor                          check this host as the hook would, with remedies
  sudo stackhook doctor --require 'cuda>=12.4'   and against a requirement of your own";
    pub(super) const LABELS: &str = "Examples:
  stackhook labels                 node labels (stackbuild.io/...) for this host
  stackhook labels --format nfd    the same as a Node Feature Discovery features file";
    pub(super) const RUNTIME: &str = "Examples:
  stackhook runtime create --bundle DIR ID   (Docker and containerd run this) runc with the hook added";
    pub(super) const NRI: &str = "Examples:
  stackhook nri                                   register on /var/run/nri/nri.sock as 10-stackhook
  stackhook nri --host-root /host --policy warn   in a DaemonSet, logging what it would refuse";
    pub(super) const INSTALL: &str = "Examples:
  sudo stackhook install podman       a hooks.d file for Podman and CRI-O
  sudo stackhook install docker       the stackhook runtime in Docker's daemon.json
  sudo stackhook install containerd   a runtime handler in containerd's config";
    pub(super) const UNINSTALL: &str = "Examples:
  sudo stackhook uninstall podman     remove what `install podman` added";
    pub(super) const CDI: &str = "Examples:
  stackhook cdi check                          the CDI specs in /etc/cdi and /var/run/cdi against this host
  stackhook cdi check /etc/cdi/nvidia.yaml     one spec";
}

/// One example per subcommand, under `--help`.
const EXAMPLES: &str = "Examples:
  sudo stackhook doctor                         check this host as the hook would, with remedies
  sudo stackhook doctor --require 'cuda>=12.4'  and against a requirement of your own
  stackhook labels --format nfd                 node labels for Node Feature Discovery
  sudo stackhook install podman                 a hooks.d file for Podman and CRI-O (also docker, crio, containerd)
  sudo stackhook uninstall podman               remove what install added
  stackhook cdi check                           the CDI specs in /etc/cdi and /var/run/cdi against this host
  stackhook nri                                 refuse GPU containers at CreateContainer through NRI
  stackhook hook < state.json                   (the runtime runs this) check one container's start
  stackhook runtime create ...                  (Docker and containerd run this) runc with the hook added";

#[derive(Debug, clap::Args)]
struct DocsArgs {
    /// The directory (`man/` and `completions/` are written under it).
    dir: std::path::PathBuf,
}

impl Cli {
    /// Runs the chosen subcommand and returns the exit code.
    /// Anchors the relative paths of a command a person typed at `cwd`. The hook itself
    /// (`stackhook hook`, run by the runtime in the container's bundle) is left as it is: its
    /// paths are the runtime's, and its working directory is never trusted (CVE-2025-23266).
    pub(crate) fn anchor(&mut self, cwd: &std::path::Path) {
        match &mut self.command {
            Command::Doctor(args) => args.anchor(cwd),
            Command::Install(args) | Command::Uninstall(args) => args.anchor(cwd),
            Command::Labels(args) => args.anchor(cwd),
            Command::Cdi(args) => args.anchor(cwd),
            Command::Nri(args) => args.anchor(cwd),
            Command::GenerateDocs(args) => args.dir = cwd.join(&args.dir),
            Command::Hook(_) | Command::Runtime(_) => {}
        }
    }

    pub(crate) fn run(self) -> i32 {
        match self.command {
            Command::Hook(args) => args.run(),
            Command::Doctor(args) => args.run(),
            Command::Runtime(args) => args.run(),
            Command::Install(args) => args.run(true),
            Command::Uninstall(args) => args.run(false),
            Command::Labels(args) => args.run(),
            Command::Cdi(args) => args.run(),
            Command::Nri(args) => args.run(),
            Command::GenerateDocs(args) => match cli_docs::write(Cli::command(), &args.dir) {
                Ok(paths) => {
                    for path in paths {
                        println!("{}", path.display());
                    }
                    0
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    2
                }
            },
        }
    }
}
