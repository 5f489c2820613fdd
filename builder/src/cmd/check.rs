//! `stackbuild check RECIPE [--json] [--offline]`.

use std::path::PathBuf;

use stackbuild_cache::Cache;
use stackbuild_check::{check, CheckOptions};
use stackbuild_recipe::Recipe;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The recipe (TOML).
    recipe: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Do not run the resolver: without a current lock, check the recipe's pins against the
    /// knowledge base alone.
    #[arg(long)]
    offline: bool,
    /// Cache directory whose fetched wheels are read for their metadata [default:
    /// `$STACKBUILD_CACHE`, else `~/.cache/stackbuild`, for root `/var/cache/stackbuild`].
    #[arg(long, env = "STACKBUILD_CACHE")]
    cache_dir: Option<PathBuf>,
}

impl Args {
    /// Exit 0 when the recipe is compatible, 1 when it has conflicts (the report on stdout
    /// either way); errors (unreadable recipe, resolver missing) exit 2 from `main`.
    pub(super) fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let recipe = Recipe::load(&self.recipe)?;
        // Read only: a missing cache just means no wheel metadata at hand.
        // A directory that is not a cache is not read as one (nor created or marked).
        let cache_dir = self.cache_dir.or_else(|| Cache::default_dir().ok()).filter(|dir| {
            let usable = !dir.exists() || Cache::is_cache(dir);
            if !usable {
                tracing::warn!("{} is not a stackbuild cache; not reading wheels from it", dir.display());
            }
            usable
        });
        let report = check(&recipe, &CheckOptions { offline: self.offline, cache_dir })?;
        if self.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", report.to_text());
        }
        Ok(if report.compatible { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE })
    }
}
