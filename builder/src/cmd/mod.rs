//! The command line: one module per subcommand. `stackbuild RECIPE` builds.

use clap::{CommandFactory as _, Parser, Subcommand};

mod affinity;
mod audit;
mod build;
mod check;
mod claim;
mod init;
mod lock;
mod tables;

/// Builds reproducible, layered OCI images of GPU software stacks from a recipe, and refuses
/// stacks that cannot work.
#[derive(Debug, Parser)]
#[command(name = "stackbuild", version, about, args_conflicts_with_subcommands = true, after_help = EXAMPLES)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    build: build::Args,
    /// Print warnings and errors only.
    #[arg(long, short, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build the image of a recipe (the default: `stackbuild RECIPE`).
    Build(build::Args),
    /// Write a recipe from what a project has: requirements*.txt, pyproject.toml, uv.lock,
    /// pylock.toml, .python-version, a Dockerfile; say what was decided and why, then check it.
    Init(init::Args),
    /// Resolve the recipe and write `<recipe>.lock` with every artifact's version and sha256.
    Lock(lock::Args),
    /// Resolve without building: print the stack, the host requirements and every conflict.
    Check(check::Args),
    /// Static `ldd` over an image: unresolved libraries, shadowed pins, reachable `libcuda`
    /// stubs, foreign ELF machines. Exit 1 on errors.
    Audit(audit::Args),
    /// Print the Kubernetes node affinity that places an image's pods only on nodes whose
    /// `stackhook` accepts its requirements (over `stackhook labels`).
    Affinity(affinity::Args),
    /// Print a Kubernetes DRA `ResourceClaimTemplate` (`resource.k8s.io/v1`) whose CEL selectors
    /// pick only the GPUs (NVIDIA's DRA driver, `gpu.nvidia.com`) that satisfy an image's
    /// requirements, and a Pod that uses it.
    Claim(claim::Args),
    /// For maintainers: regenerate a knowledge-base table from an index's metadata.
    Tables(tables::Args),
    /// Write the man pages and shell completions (bash, zsh, fish) into DIR, generated from
    /// these definitions (for packages).
    #[command(hide = true)]
    GenerateDocs(DocsArgs),
}

/// One example per subcommand, under `--help`.
const EXAMPLES: &str = "Examples:
  stackbuild init                              a recipe (./stackbuild.toml) from the project in .
  stackbuild recipes/dreamzero.toml            build the image into images/dreamzero/
  stackbuild lock recipes/dreamzero.toml       pin every artifact by sha256 in recipes/dreamzero.toml.lock
  stackbuild check recipes/dreamzero.toml      the stack, what the host must provide, every conflict
  stackbuild audit images/dreamzero            static ldd over the image's libraries
  stackbuild affinity images/dreamzero         a nodeAffinity over `stackhook labels` node labels
  stackbuild claim images/dreamzero            a DRA ResourceClaimTemplate and a Pod that uses it
  stackbuild tables torch --check              (maintainers) the torch table against the index";

#[derive(Debug, clap::Args)]
struct DocsArgs {
    /// The directory (`man/` and `completions/` are written under it).
    dir: std::path::PathBuf,
}

impl Cli {
    /// Runs the chosen subcommand.
    pub(crate) fn run(self) -> anyhow::Result<std::process::ExitCode> {
        match self.command {
            Some(Command::Build(args)) => args.run(),
            Some(Command::Init(args)) => args.run(),
            Some(Command::Lock(args)) => args.run(),
            Some(Command::Check(args)) => args.run(),
            Some(Command::Affinity(args)) => args.run(),
            Some(Command::Claim(args)) => args.run(),
            Some(Command::Audit(args)) => args.run(),
            Some(Command::Tables(args)) => args.run(),
            Some(Command::GenerateDocs(args)) => {
                for path in cli_docs::write(Cli::command(), &args.dir)? {
                    println!("{}", path.display());
                }
                Ok(std::process::ExitCode::SUCCESS)
            }
            None => self.build.run(),
        }
    }
}
