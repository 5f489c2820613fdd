//! `stackbuild lock RECIPE`.

use std::path::PathBuf;

use stackbuild_cache::Cache;
use stackbuild_recipe::Recipe;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The recipe (TOML).
    recipe: PathBuf,
    /// Cache directory [default: `$STACKBUILD_CACHE`, else `~/.cache/stackbuild`, for root
    /// `/var/cache/stackbuild`].
    #[arg(long, env = "STACKBUILD_CACHE")]
    cache_dir: Option<PathBuf>,
    /// Exit 1 if the lock is missing or stale, without writing it.
    #[arg(long)]
    check: bool,
    /// Also write the image's Python stack as a PEP 751 lock (`pylock.toml`), which
    /// `uv pip sync`, `uv pip install -r` and `pip install -r` (pip 26) install: every wheel
    /// with its URL on the index, size and sha256.
    #[arg(long, value_name = "FILE", conflicts_with = "check")]
    pylock: Option<PathBuf>,
    /// With --pylock: write it from the current lock, resolving nothing (exit 2 when the lock
    /// is missing or stale).
    #[arg(long, requires = "pylock")]
    locked: bool,
    /// Resolve a recipe source's project from a local directory (a checkout of it at its
    /// commit) instead of fetching it: `--source dreamzero=../dreamzero`.
    #[arg(long = "source", value_name = "NAME=PATH")]
    sources: Vec<String>,
    /// Resolve every package afresh, ignoring the pins of the lock there is (without it, the
    /// lock's pins are kept wherever the recipe allows them, as `uv lock` keeps a `uv.lock`).
    #[arg(long, short = 'U', conflicts_with_all = ["check", "locked"])]
    upgrade: bool,
    /// Resolve this package afresh and keep the lock's other pins (repeatable).
    #[arg(long = "upgrade-package", short = 'P', value_name = "NAME", conflicts_with_all = ["check", "locked", "upgrade"])]
    upgrade_package: Vec<pep508_rs::PackageName>,
}

impl Args {
    pub(super) fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let recipe = Recipe::load(&self.recipe)?;
        if self.check {
            let lock =
                stackbuild_python::Lock::load_optional(stackbuild_python::Lock::path_for(&recipe.path))?;
            let fresh = lock.is_some_and(|l| l.stale_reason(&recipe).is_none());
            if !fresh {
                eprintln!("{}: missing or stale", stackbuild_python::Lock::path_for(&recipe.path).display());
            }
            return Ok(if fresh { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE });
        }
        if let Some(out) = &self.pylock {
            // Before resolving: a file of the user's in the way stops it at once.
            stackbuild_python::may_write(out)?;
        }
        let cache = match self.cache_dir {
            Some(d) => Cache::open(d)?,
            None => Cache::open_default()?,
        };
        let _guard = cache.lock()?;
        // Always resolve again, keeping the lock's pins unless --upgrade; --locked asks for the
        // pins as they are.
        let relock = if self.locked {
            stackbuild::build::Relock::Never
        } else if self.upgrade {
            stackbuild::build::Relock::Fresh
        } else {
            stackbuild::build::Relock::Keeping { upgrade: self.upgrade_package }
        };
        let lock = stackbuild::build::lock_recipe(
            &recipe,
            &relock,
            &cache,
            &super::build::source_overrides(&recipe, &self.sources)?,
        )?;
        println!("{}", stackbuild_python::Lock::path_for(&recipe.path).display());
        tracing::info!("{} package(s) locked", lock.packages.len());
        if let Some(out) = &self.pylock {
            stackbuild_python::write_from_index(&recipe, &lock, out)?;
            println!("{}", out.display());
        }
        Ok(std::process::ExitCode::SUCCESS)
    }
}
