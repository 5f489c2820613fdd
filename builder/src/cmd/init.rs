//! `stackbuild init [DIR] [--from FILE]...`: a recipe from what the project already has.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr as _;

use stackbuild_check::{check, CheckOptions};
use stackbuild_init::InitOptions;
use stackbuild_recipe::{PythonSection, Recipe};

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The project directory [default: .].
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Read these files instead of looking in DIR (requirements*.txt, pyproject.toml, uv.lock,
    /// pylock.toml, .python-version, Dockerfile); repeat for several.
    #[arg(long = "from", value_name = "FILE")]
    from: Vec<PathBuf>,
    /// Where to write the recipe [default: DIR/stackbuild.toml]; an existing file is never
    /// overwritten.
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// The image name [default: pyproject's [project] name, else the directory's].
    #[arg(long)]
    name: Option<String>,
    /// Also install this optional-dependencies group of pyproject.toml (repeatable).
    #[arg(long = "extra", value_name = "NAME")]
    extras: Vec<String>,
    /// Also install this dependency group of pyproject.toml (PEP 735; repeatable).
    #[arg(long = "group", value_name = "NAME")]
    groups: Vec<String>,
    /// Resolve nothing: unpinned requirements are listed instead of pinned, and the recipe is
    /// checked against the knowledge base alone.
    #[arg(long)]
    offline: bool,
}

impl Args {
    /// Exit 0 when the recipe it wrote checks clean, 1 when `check` reports conflicts (the
    /// recipe is written either way, and the conflicts are shown with their fixes).
    pub(super) fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let recipe_path = self.out.clone().unwrap_or_else(|| self.dir.join("stackbuild.toml"));
        // Before any work: never over what is there.
        if std::fs::symlink_metadata(&recipe_path).is_ok() {
            return Err(stackbuild_init::InitError::Exists { path: recipe_path }.into());
        }
        let opts = InitOptions {
            dir: self.dir.clone(),
            from: self.from.clone(),
            extras: self.extras.clone(),
            groups: self.groups.clone(),
            name: self.name.clone(),
        };
        let mut plan = stackbuild_init::plan(&opts)?;
        if !plan.unpinned.is_empty() {
            let (resolved, why_not) =
                if self.offline { (None, "--offline".to_owned()) } else { resolve(&plan) };
            plan.pin(resolved.as_ref(), &why_not);
        }
        let text = plan.to_toml(&recipe_path);
        stackbuild_init::write_new(&recipe_path, &text)?;
        print!("{}", plan.report());
        println!("Wrote {}.", recipe_path.display());
        let recipe = Recipe::load(&recipe_path)?;
        let report = check(&recipe, &CheckOptions { offline: self.offline, cache_dir: None })?;
        if report.compatible {
            println!("`stackbuild check {}` finds no conflict.", recipe_path.display());
            Ok(std::process::ExitCode::SUCCESS)
        } else {
            println!("`stackbuild check {}` reports, with the fixes:", recipe_path.display());
            print!("{}", report.to_text());
            Ok(std::process::ExitCode::FAILURE)
        }
    }
}

/// The versions uv resolves for the plan's requirements today (`name -> version`), or why not.
fn resolve(plan: &stackbuild_init::Plan) -> (Option<BTreeMap<String, String>>, String) {
    let Ok(version) = plan.python().parse() else { return (None, "no Python version".into()) };
    let packages = plan
        .requirements()
        .iter()
        .filter_map(|r| pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r).ok())
        .collect();
    let (index, extra_index, find_links) = plan.indexes();
    let section = PythonSection {
        index,
        extra_index,
        find_links,
        bytecode: true,
        ..PythonSection::of(version, packages, None)
    };
    let target =
        stackbuild_python::Target::new(section.version.clone(), stackbuild_common::Platform::LinuxAmd64);
    match stackbuild_python::resolve(&section, &target, &[]) {
        Ok(pins) => {
            (Some(pins.iter().map(|p| (p.name.to_string(), p.version.to_string())).collect()), String::new())
        }
        Err(e) => (None, e.to_string()),
    }
}
