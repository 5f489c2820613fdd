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
    #[command(after_help = examples::BUILD)]
    Build(build::Args),
    /// Write a recipe from what a project has: requirements*.txt, pyproject.toml, uv.lock,
    /// pylock.toml, .python-version, a Dockerfile; say what was decided and why, then check it.
    #[command(after_help = examples::INIT)]
    Init(init::Args),
    /// Resolve the recipe and write `<recipe>.lock` with every artifact's version and sha256.
    #[command(after_help = examples::LOCK)]
    Lock(lock::Args),
    /// Resolve without building: print the stack, the host requirements and every conflict.
    #[command(after_help = examples::CHECK)]
    Check(check::Args),
    /// Static `ldd` over an image: unresolved libraries, shadowed pins, reachable `libcuda`
    /// stubs, foreign ELF machines. Exit 1 on errors.
    #[command(after_help = examples::AUDIT)]
    Audit(audit::Args),
    /// Print the Kubernetes node affinity that places an image's pods only on nodes whose
    /// `stackhook` accepts its requirements (over `stackhook labels`).
    #[command(after_help = examples::AFFINITY)]
    Affinity(affinity::Args),
    /// Print a Kubernetes DRA `ResourceClaimTemplate` (`resource.k8s.io/v1`) whose CEL selectors
    /// pick only the GPUs (NVIDIA's DRA driver, `gpu.nvidia.com`) that satisfy an image's
    /// requirements, and a Pod that uses it.
    #[command(after_help = examples::CLAIM)]
    Claim(claim::Args),
    /// For maintainers: regenerate a knowledge-base table from an index's metadata.
    #[command(after_help = examples::TABLES)]
    Tables(tables::Args),
    /// Write the man pages and shell completions (bash, zsh, fish) into DIR, generated from
    /// these definitions (for packages).
    #[command(hide = true)]
    GenerateDocs(DocsArgs),
}

/// Each subcommand's examples, at the end of its `--help`.
mod examples {
    pub(super) const BUILD: &str = "Examples:
  stackbuild build recipes/dreamzero.toml                      the image into images/dreamzero/ (same as `stackbuild RECIPE`)
  stackbuild build recipes/dreamzero.toml --locked             fail if the lock is missing or stale, resolve nothing
  stackbuild build recipes/dreamzero.toml --load               also load it into the local Docker daemon
  stackbuild build recipes/dreamzero.toml --push 127.0.0.1:5000/dreamzero:dev   push it to a registry";
    pub(super) const INIT: &str = "Examples:
  stackbuild init                                  a recipe (./stackbuild.toml) from the project in .
  stackbuild init ~/src/lerobot --out lerobot.toml a recipe from another checkout, written elsewhere
  stackbuild init --from requirements/cuda.txt --from Dockerfile   only these inputs
  stackbuild init --from conda_environment_real.yaml               a conda environment other than environment.yml
  stackbuild init --extra train --group dev        also pyproject's optional dependencies `train` and group `dev`
  stackbuild init --offline                        resolve nothing; unpinned packages are listed, not pinned";
    pub(super) const LOCK: &str = "Examples:
  stackbuild lock recipes/dreamzero.toml                         resolve again, keeping the locked versions the recipe allows
  stackbuild lock recipes/dreamzero.toml -P transformers         move transformers (and what it needs) only
  stackbuild lock recipes/dreamzero.toml --upgrade               resolve every package afresh
  stackbuild lock recipes/dreamzero.toml --check                 exit 1 if the lock is missing or stale (CI)
  stackbuild lock recipes/dreamzero.toml --pylock pylock.toml    also the stack as a PEP 751 lock for uv and pip";
    pub(super) const CHECK: &str = "Examples:
  stackbuild check recipes/dreamzero.toml            the stack, what the host must provide, every conflict
  stackbuild check recipes/dreamzero.toml --json     the same as JSON
  stackbuild check recipes/dreamzero.toml --offline  from the lock and the knowledge base alone";
    pub(super) const AUDIT: &str = "Examples:
  stackbuild audit images/dreamzero                  static ldd over the image's libraries
  stackbuild audit images/dreamzero --json           the findings as JSON";
    pub(super) const AFFINITY: &str = "Examples:
  stackbuild affinity images/dreamzero               a nodeAffinity over `stackhook labels` node labels
  stackbuild affinity images/dreamzero --json        the same as JSON, to merge into a pod spec";
    pub(super) const CLAIM: &str = "Examples:
  stackbuild claim images/dreamzero                  a DRA ResourceClaimTemplate and a Pod that uses it
  stackbuild claim images/dreamzero | kubectl apply -f -";
    pub(super) const TABLES: &str = "Examples:
  stackbuild tables torch --check                    (maintainers) the torch table against the index";
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
