//! `stackbuild init [DIR] [--from FILE]...`: a recipe from what the project already has.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr as _;

use stackbuild_check::{check, CheckOptions, FindingKind};
use stackbuild_init::InitOptions;
use stackbuild_recipe::{PythonSection, Recipe};

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The project directory.
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Read these files instead of looking in DIR (requirements*.txt, pyproject.toml, uv.lock,
    /// pylock.toml, .python-version, Dockerfile, a conda environment .yml); repeat for several.
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
        let mut opts = InitOptions {
            dir: self.dir.clone(),
            from: self.from.clone(),
            extras: self.extras.clone(),
            groups: self.groups.clone(),
            name: self.name.clone(),
            skip_lock: None,
            python: None,
        };
        let mut plan = self.prepare(&mut opts, None)?;
        let (mut text, recipe) = render(&plan, &recipe_path)?;
        let check_opts = CheckOptions { offline: self.offline, cache_dir: None };
        // A check that cannot run (uv missing) is said after the recipe is written, as before.
        let mut report = check(&recipe, &check_opts);
        // A stack the check refuses for a reason one constraint mends: torch wheels built
        // against NumPy 1 beside the NumPy 2 an unpinned requirement resolves to (dinov2's torch
        // 2.0.0), as pip would install it and as it would fail at run time. Resolved again with
        // `numpy<2`, kept when the check then finds fewer errors.
        let numpy_abi =
            |r: &stackbuild_check::Report| r.findings.iter().any(|f| f.kind == FindingKind::NumpyAbi);
        if !self.offline && report.as_ref().is_ok_and(numpy_abi) {
            let mend = (NUMPY_1, "the torch wheels were built against NumPy 1 and work only with numpy<2 (check's numpy-abi: pytorch/pytorch issue 107302)");
            let again = self.prepare(&mut opts, Some(mend))?;
            if let Ok((t, r)) = render(&again, &recipe_path) {
                if let (Ok(rep), Ok(was)) = (check(&r, &check_opts), &report) {
                    if errors(&rep) < errors(was) {
                        (plan, text, report) = (again, t, Ok(rep));
                    }
                }
            }
        }
        stackbuild_init::write_new(&recipe_path, &text)?;
        print!("{}", plan.report());
        println!("Wrote {}.", recipe_path.display());
        let report = report?;
        if report.compatible {
            println!("`stackbuild check {}` finds no conflict.", recipe_path.display());
            Ok(std::process::ExitCode::SUCCESS)
        } else {
            println!("`stackbuild check {}` reports, with the fixes:", recipe_path.display());
            print!("{}", report.to_text());
            Ok(std::process::ExitCode::FAILURE)
        }
    }

    /// The plan for `opts`, its project lock checked for reachability, its git dependencies
    /// pinned and its requirements resolved, with `constraint` (`requirement`, why) added.
    fn prepare(
        &self,
        opts: &mut InitOptions,
        constraint: Option<(&str, &str)>,
    ) -> anyhow::Result<stackbuild_init::Plan> {
        let mut plan = stackbuild_init::plan(opts)?;
        // A project's lock whose wheels this machine cannot fetch (lerobot's uv.lock takes torch
        // from download.pytorch.org) would give a recipe whose lock and build fail: its manifests
        // are resolved instead, against the indexes that can be reached.
        if !self.offline && opts.skip_lock.is_none() {
            if let Some(why) = plan.lock().and_then(|lock| lock_unreachable(lock, plan.python())) {
                opts.skip_lock = Some(why);
                plan = stackbuild_init::plan(opts)?;
            }
        }
        // Git dependencies without a revision: the commit their default branch points to
        // today, read into a scratch mirror (as the lock's own resolution of a branch does),
        // once per repository however often the plan is made again.
        let scratch_git = tempfile::Builder::new().prefix("stackbuild-init-git-").tempdir()?;
        let heads: std::cell::RefCell<BTreeMap<String, Result<String, String>>> =
            std::cell::RefCell::default();
        let head = |url: &str| -> Result<String, String> {
            if self.offline {
                return Err("--offline".to_owned());
            }
            if let Some(known) = heads.borrow().get(url) {
                return known.clone();
            }
            let got = stackbuild_source::resolve_git_rev(url, "HEAD", scratch_git.path())
                .map_err(|e| e.to_string());
            heads.borrow_mut().insert(url.to_owned(), got.clone());
            got
        };
        // The plan's git dependencies pinned and the constraint added: what is resolved.
        let finish = |mut plan: stackbuild_init::Plan| {
            plan.pin_git_heads(head);
            if let Some((requirement, why)) = constraint {
                plan.constrain(requirement, why);
            }
            plan
        };
        plan = finish(plan);
        if plan.resolvable() {
            let mut outcome = if self.offline { Outcome::offline() } else { resolve(&plan) };
            // Where the inputs leave the Python version open and the default one leaves
            // packages out or takes them from source (LIBERO's `numpy==1.22.4`,
            // `transformers==4.21.1`, from before Python 3.11, have no cp311 wheels), the other
            // versions are tried, older first, while each needs fewer, and the best is taken.
            if outcome.cost() > 0 && !self.offline && opts.python.is_none() {
                let first = plan.python().to_owned();
                let was = outcome.cost();
                let mut best: Option<(stackbuild_init::Plan, Outcome)> = None;
                for v in python_order(&plan.python_alternatives, &first) {
                    let alt_opts = InitOptions { python: Some((v.clone(), String::new())), ..opts.clone() };
                    let Ok(alt) = stackbuild_init::plan(&alt_opts).map(finish) else { continue };
                    let o = resolve(&alt);
                    // Stopped at the first that does no better: what has no wheel at one
                    // version (an sdist-only package, antlr4) has none at the next either, and
                    // each try is a resolution.
                    if o.cost() >= best.as_ref().map_or(outcome.cost(), |(_, b)| b.cost()) {
                        break;
                    }
                    let done = o.cost() == 0;
                    best = Some((alt, o));
                    if done {
                        break;
                    }
                }
                if let Some((alt, o)) = best {
                    let v = alt.python().to_owned();
                    let left = |o: &Outcome| {
                        let mut names: Vec<&str> = o.failed.keys().map(String::as_str).collect();
                        names.extend(o.from_source.iter().map(String::as_str));
                        names.join(", ")
                    };
                    let why = format!(
                        "with Python {first} (init's first choice), {was} package(s) have no wheel or were left out \
                         ({}); with {v}, {}",
                        left(&outcome),
                        if o.cost() == 0 { "none".to_owned() } else { format!("{} ({})", o.cost(), left(&o)) }
                    );
                    // Made again for the report's reason of the version.
                    opts.python = Some((v, why));
                    plan = finish(stackbuild_init::plan(opts)?);
                    outcome = o;
                }
            }
            for note in &outcome.notes {
                plan.decide(note.clone());
            }
            for (url, why) in &outcome.unreachable {
                plan.drop_extra_index(
                    url,
                    &format!(
                        "not reachable from here ({why}), so the packages were resolved without it; add it back \
                         to [python] extra_index where it is reachable"
                    ),
                );
            }
            plan.pin(outcome.resolved.as_ref(), &outcome.failed, &outcome.why_not);
            if let Some(resolved) = &outcome.resolved {
                plan.reconcile_cuda(resolved);
                plan.system_packages(resolved);
            }
            for pkg in outcome.torch_builds {
                plan.build_against_torch(pkg);
            }
        }
        Ok(plan)
    }
}

/// The Python versions to try after `first`: the older ones, newest first (old pins have
/// wheels for the Pythons of their time), then the newer ones, oldest first.
fn python_order(alternatives: &[String], first: &str) -> Vec<String> {
    let minor = |v: &str| v.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()).unwrap_or(0);
    let at = minor(first);
    let mut older: Vec<&String> = alternatives.iter().filter(|v| minor(v) < at).collect();
    older.sort_by_key(|v| std::cmp::Reverse(minor(v)));
    let mut newer: Vec<&String> = alternatives.iter().filter(|v| minor(v) > at).collect();
    newer.sort_by_key(|v| minor(v));
    older.into_iter().chain(newer).cloned().collect()
}

/// The constraint that keeps `NumPy` 1 (1.26.4 is its last release).
const NUMPY_1: &str = "numpy<2";

/// The plan's recipe text and the recipe it parses to: validated before it is placed, as what
/// init writes must load as a recipe.
fn render(plan: &stackbuild_init::Plan, path: &std::path::Path) -> anyhow::Result<(String, Recipe)> {
    let text = plan.to_toml(path);
    let recipe = Recipe::parse(path, &text).map_err(|e| {
        anyhow::anyhow!(
            "stackbuild init made a recipe that does not validate, so nothing was written (please report this \
             with the project's files):\n{e}"
        )
    })?;
    Ok((text, recipe))
}

/// How many errors a check found.
fn errors(report: &stackbuild_check::Report) -> usize {
    report.findings.iter().filter(|f| f.severity == stackbuild_check::Severity::Error).count()
}

/// What resolving the plan's requirements gave.
struct Outcome {
    /// `name -> version` of everything resolved, when the resolution succeeded.
    resolved: Option<BTreeMap<String, String>>,
    /// Top-level packages left out of the resolution, each with the resolver's reason.
    failed: BTreeMap<String, String>,
    /// Why nothing was resolved, when nothing was.
    why_not: String,
    /// What the resolution decided that the report says.
    notes: Vec<String>,
    /// The packages it took from source whose build imports torch.
    torch_builds: Vec<stackbuild_python::TorchAtBuild>,
    /// Extra indexes this machine could not reach, resolved without, with uv's reason.
    unreachable: Vec<(String, String)>,
    /// The packages resolved to a source distribution (no wheel for the image's Python).
    from_source: Vec<String>,
}

impl Outcome {
    /// What the resolution could not give as wheels: packages left out, and packages to
    /// build from source (each a compiler and minutes, where it builds at all).
    fn cost(&self) -> usize {
        if self.resolved.is_none() {
            return usize::MAX;
        }
        self.failed.len() + self.from_source.len()
    }
}

impl Outcome {
    fn offline() -> Self {
        Self {
            resolved: None,
            failed: BTreeMap::new(),
            why_not: "--offline".into(),
            notes: Vec::new(),
            torch_builds: Vec::new(),
            unreachable: Vec::new(),
            from_source: Vec::new(),
        }
    }
}

/// Most rounds of "resolve, leave out the packages the resolver named, resolve again".
const MAX_ROUNDS: usize = 6;

/// The versions uv resolves for the plan's requirements today, for the base init chose (its
/// glibc). Packages with no wheel resolve to their newest source release, their dependencies
/// as their `PKG-INFO` says (the lock prepares them in the build sandbox). A package the
/// resolver names as the cause of a failure is left out and said once, with uv's reason, so
/// that the others are still pinned.
fn resolve(plan: &stackbuild_init::Plan) -> Outcome {
    let Ok(version) = plan.python().parse() else {
        return Outcome {
            why_not: format!("Python {:?} is not a version", plan.python()),
            ..Outcome::offline()
        };
    };
    let mut packages: Vec<pep508_rs::Requirement> = plan
        .requirements()
        .iter()
        .filter_map(|r| pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r).ok())
        // Git dependencies are pinned by their revision; the lock resolves their tree.
        .filter(|r| stackbuild_recipe::git_dependency(r).is_none())
        .collect();
    let (index, extra_index, find_links) = plan.indexes();
    let extra_index = std::cell::RefCell::new(extra_index);
    let mut unreachable: Vec<(String, String)> = Vec::new();
    let parse = |list: Vec<String>| -> Vec<pep508_rs::Requirement> {
        list.iter()
            .filter_map(|r| pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r).ok())
            .collect()
    };
    let (overrides, constraints) = plan.overrides_and_constraints();
    let (overrides, constraints) = (parse(overrides), parse(constraints));
    let (distro, suite) = plan.base();
    let glibc =
        stackbuild_common::Glibc::of_suite(distro, suite).unwrap_or(stackbuild_common::Glibc::DEFAULT);
    let target =
        stackbuild_python::Target::new(version, stackbuild_common::Platform::LinuxAmd64).with_glibc(glibc);
    let Ok(scratch) = tempfile::Builder::new().prefix("stackbuild-init-").tempdir() else {
        return Outcome { why_not: "no temporary directory".into(), ..Outcome::offline() };
    };
    let fetch =
        stackbuild_python::SourceFetch { artifacts: scratch.path(), memo: None, cache: scratch.path() };
    let mut failed = BTreeMap::new();
    let section_of = |packages: &[pep508_rs::Requirement], more: &[pep508_rs::Requirement]| PythonSection {
        index: index.clone(),
        extra_index: extra_index.borrow().clone(),
        find_links: find_links.clone(),
        bytecode: true,
        overrides: overrides.clone(),
        constraints: constraints.iter().chain(more).cloned().collect(),
        ..PythonSection::of(target.python.clone(), packages.to_vec(), None)
    };
    let metadata = stackbuild_python::PkgInfoMetadata;
    let solve = |section: &PythonSection| {
        stackbuild_python::resolve_with_sources(section, &target, &[], &[], &[], &metadata, fetch).map(|r| {
            r.pins.iter().map(|p| (p.name.to_string(), p.version.to_string())).collect::<BTreeMap<_, _>>()
        })
    };
    for _ in 0..MAX_ROUNDS {
        let err = match solve(&section_of(&packages, &[])) {
            Ok(mut resolved) => {
                let notes = newest_releases(plan, index.as_deref(), &target, &mut resolved, |more| {
                    solve(&section_of(&packages, more)).ok()
                });
                let sdists = sdists_resolved(scratch.path(), &resolved);
                let torch_builds =
                    sdists.iter().filter_map(|(_, path)| stackbuild_python::torch_at_build(path)).collect();
                return Outcome {
                    resolved: Some(resolved),
                    failed,
                    why_not: String::new(),
                    notes,
                    torch_builds,
                    unreachable,
                    from_source: sdists.into_iter().map(|(name, _)| name).collect(),
                };
            }
            Err(e) => e,
        };
        let reason = match &err {
            // Our own account, when the resolution stopped at a package's source (a wheel
            // stub, an sdist that cannot be fetched), says more than uv's first clause.
            stackbuild_python::SolveError::SourceUnusable { target, package, why, .. } => {
                let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
                format!("{package} has no wheel for {target}, and its source cannot be used: {why}")
            }
            e => resolver_reason(&e.to_string()),
        };
        let err = err.to_string();
        tracing::debug!(error = %err, "the resolution failed");
        // An extra index this machine cannot reach fails every package it is asked about:
        // resolved without it, not blamed on the packages (Isaac-GR00T's NVIDIA index).
        let unreached = unreachable_index(&err, &extra_index.borrow());
        if let Some(url) = unreached {
            extra_index.borrow_mut().retain(|u| *u != url);
            // uv's last cause is the network's answer ("Connection refused (os error 111)").
            let cause =
                err.rsplit("cause: ").next().unwrap_or(&err).split_whitespace().collect::<Vec<_>>().join(" ");
            unreachable.push((url, cause));
            continue;
        }
        if !leave_out(&err, &reason, &mut packages, &mut failed) {
            return Outcome { why_not: reason, failed, unreachable, ..Outcome::offline() };
        }
    }
    Outcome { why_not: "the resolution did not converge".into(), failed, unreachable, ..Outcome::offline() }
}

/// Why the wheels the lock at `path` installs on linux/amd64 for Python `python` cannot be
/// fetched from here, when some cannot: the first wheel of each server is asked for once.
fn lock_unreachable(path: &std::path::Path, python: &str) -> Option<String> {
    let lock = stackbuild_python::GivenLock::load(path).ok()?;
    let target =
        stackbuild_python::Target::new(python.parse().ok()?, stackbuild_common::Platform::LinuxAmd64);
    let (chosen, _) = lock.select_all(&target).ok()?;
    // Server -> (a wheel's URL, the packages it serves).
    let mut servers: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for c in &chosen {
        let Some(url) = c.wheel.url.as_deref() else { continue };
        // `scheme://host[:port]`, the part before the path.
        let server = url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
        let entry = servers.entry(server).or_insert_with(|| (url.to_owned(), Vec::new()));
        entry.1.push(c.name.to_string());
    }
    let config = stackbuild_python::Config::for_lock_urls(stackbuild_recipe::IndexSources::default(), None);
    let unreachable: Vec<String> = servers
        .iter()
        .filter_map(|(server, (url, names))| {
            let why = config.unreachable(url)?;
            let mut names = names.clone();
            let more = names.len().saturating_sub(4);
            names.truncate(4);
            let and = if more > 0 { format!(" and {more} more") } else { String::new() };
            Some(format!(
                "its wheels of {}{and} are served from {server}, which this machine cannot reach ({why})",
                names.join(", ")
            ))
        })
        .collect();
    (!unreachable.is_empty()).then(|| {
        format!(
            "{}; where they can be fetched, [python] lock can name it in place of the packages",
            unreachable.join("; ")
        )
    })
}

/// The extra index of `extra` that uv's message says it could not fetch from ("Failed to
/// fetch: <https://nvidia.example/av/> ... dns error"), when the failure is the network's.
fn unreachable_index(message: &str, extra: &[String]) -> Option<String> {
    let network =
        ["dns error", "client error (Connect)", "error sending request", "Connection refused", "timed out"]
            .iter()
            .any(|m| message.contains(m));
    if !network {
        return None;
    }
    let fetched = message.split("Failed to fetch: ").nth(1)?.split_whitespace().next()?;
    extra.iter().find(|u| fetched.starts_with(u.trim_end_matches('/'))).cloned()
}

/// The sdists the resolution fetched into `artifacts` (`<sha256>/<file>`) at the version it
/// resolved: (normalized name, file), by name.
fn sdists_resolved(
    artifacts: &std::path::Path,
    resolved: &BTreeMap<String, String>,
) -> Vec<(String, std::path::PathBuf)> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir(artifacts).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(dir.path()).into_iter().flatten().flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            if !stackbuild_common::is_sdist(&name) || !file.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let Some(stackbuild_python::SdistInfo { name: pkg, version, .. }) =
                stackbuild_python::sdist_info(&file.path())
            else {
                continue;
            };
            let norm = stackbuild_python::normalize_name(&pkg);
            let same = |v: &String| {
                let parse = |t: &str| pep508_rs::pep440_rs::Version::from_str(t).ok();
                parse(v).is_some_and(|a| Some(a) == parse(&version))
            };
            if resolved.get(&norm).is_some_and(same) {
                found.push((norm, file.path()));
            }
        }
    }
    found.sort();
    found.dedup_by(|a, b| a.0 == b.0);
    found
}

/// Lifts the unpinned top-level packages that the resolution took older than their newest
/// release: uv, asked for wheels only, quietly backtracks past releases that need a source
/// build somewhere below them (hydra-core to 0.11 to avoid the sdist of antlr4, deepspeed to a
/// 2020 wheel), where `pip install NAME` would take the newest and build. Each lagging package is
/// asked again with `NAME>=NEWEST` (all together, else one by one); what resolves replaces
/// `resolved`, and the report says so. Returns the notes.
fn newest_releases(
    plan: &stackbuild_init::Plan,
    index: Option<&str>,
    target: &stackbuild_python::Target,
    resolved: &mut BTreeMap<String, String>,
    again: impl Fn(&[pep508_rs::Requirement]) -> Option<BTreeMap<String, String>>,
) -> Vec<String> {
    type Lag = (String, pep508_rs::pep440_rs::Version, String);
    let Ok(base) = index.map_or_else(stackbuild_python::configured_index, |i| Ok(i.to_owned())) else {
        return Vec::new();
    };
    let Ok(mut idx) = stackbuild_python::Index::http(&base) else { return Vec::new() };
    let python = pep508_rs::pep440_rs::Version::from_str(&format!("{}.0", target.python_minor())).ok();
    let mut lagging: Vec<Lag> = Vec::new();
    for name in &plan.unpinned {
        let norm = stackbuild_python::normalize_name(name);
        let Some(have) = resolved.get(&norm).and_then(|v| pep508_rs::pep440_rs::Version::from_str(v).ok())
        else {
            continue;
        };
        let Some(newest) = newest_release(&mut idx, &norm, python.as_ref()) else { continue };
        // A pre-release above the newest final release is lagging too: uv, asked for wheels
        // only, takes one when the final release needs an sdist below it (hydra-core 1.4.0rc3
        // in place of 1.3.8, whose antlr4 has no wheel), which `pip install NAME` never does
        // (pip takes a pre-release only when asked for one: pip's "Pre-release Versions").
        // Within what the requirement admits: `transformers<5` is not lifted to 5.
        if !plan.admits(&norm, &newest) {
            continue;
        }
        if newest > have || (have.any_prerelease() && !newest.any_prerelease()) {
            lagging.push((norm, newest, have.to_string()));
        }
    }
    if lagging.is_empty() {
        return Vec::new();
    }
    // `==`, not `>=`: above the newest final release there are only pre-releases.
    let floor = |(name, newest, _): &Lag| {
        pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(&format!("{name}=={newest}")).ok()
    };
    let mut notes = Vec::new();
    let all: Vec<pep508_rs::Requirement> = lagging.iter().filter_map(floor).collect();
    let lifted: Vec<&Lag> = if let Some(r) = again(&all) {
        *resolved = r;
        lagging.iter().collect()
    } else {
        let mut kept = Vec::new();
        let mut floors: Vec<pep508_rs::Requirement> = Vec::new();
        // One by one, each kept only if it resolves with those kept before it.
        for l in lagging.iter().take(12) {
            let mut with = floors.clone();
            with.extend(floor(l));
            if let Some(r) = again(&with) {
                *resolved = r;
                floors = with;
                kept.push(l);
            } else {
                notes.push(format!(
                    "{} {}: not its newest release {}, which does not resolve with the rest for this image",
                    l.0, l.2, l.1
                ));
            }
        }
        kept
    };
    for (name, newest, had) in lifted {
        let had = if pep508_rs::pep440_rs::Version::from_str(had).is_ok_and(|v| v.any_prerelease()) {
            format!("the pre-release {had}")
        } else {
            had.clone()
        };
        notes.push(format!(
            "{name}: its newest release {newest}, not {had}, which a wheels-only resolution fell back to (a \
             package below it has no wheel; the build makes one from source)"
        ));
    }
    notes
}

/// The newest final release of `name` on the index whose files admit `python`.
fn newest_release(
    index: &mut stackbuild_python::Index,
    name: &str,
    python: Option<&pep508_rs::pep440_rs::Version>,
) -> Option<pep508_rs::pep440_rs::Version> {
    let files = index.files(name).ok()?;
    files
        .iter()
        .filter(|f| !f.is_yanked())
        .filter(|f| {
            f.requires_python.as_deref().is_none_or(|spec| {
                match (pep508_rs::pep440_rs::VersionSpecifiers::from_str(spec), python) {
                    (Ok(specs), Some(py)) => specs.contains(py),
                    _ => true,
                }
            })
        })
        .filter_map(|f| {
            let version = stackbuild_common::parse_wheel_name(&f.filename)
                .map(|w| w.version)
                .or_else(|| stackbuild_common::parse_sdist_name(&f.filename).map(|(_, v)| v))?;
            pep508_rs::pep440_rs::Version::from_str(&version.to_string()).ok()
        })
        .filter(|v| !v.any_prerelease() && v.local().is_empty())
        .max()
}

/// Whether uv's message names the package `name` (as `name`, `name==1.0`, `name[extra]`),
/// not only as part of a longer name.
fn names(message: &str, name: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    let variants = [name.to_owned(), name.replace('-', "_")];
    variants.iter().any(|n| {
        lower.match_indices(n.as_str()).any(|(i, _)| {
            let before = lower[..i].chars().next_back();
            let after = lower[i + n.len()..].chars().next();
            let edge = |c: Option<char>| {
                c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
            };
            edge(before)
                && (edge(after) || after.is_some_and(|c| matches!(c, '=' | '<' | '>' | '[' | '!' | '~')))
        })
    })
}

/// Leaves out of `packages` the ones the resolver's failure `err` is down to (`culprits`), each
/// in `failed` with the reason; false when that would leave none or all of them.
fn leave_out(
    err: &str,
    reason: &str,
    packages: &mut Vec<pep508_rs::Requirement>,
    failed: &mut BTreeMap<String, String>,
) -> bool {
    let top: Vec<String> = packages.iter().map(|r| r.name.to_string()).collect();
    let (culprits, with) = culprits(err, &top);
    if culprits.is_empty() || culprits.len() == packages.len() {
        return false;
    }
    let reason = reason.trim_end_matches('.');
    for name in &culprits {
        failed.insert(name.clone(), format!("the resolver left it out: {reason}"));
    }
    // The project's other pins of torch's CUDA libraries, for the build whose pin just gave way
    // (cosmos-predict2's cu126 extra pins all 13 beside torch==2.6.0).
    for name in top.iter().filter(|n| !culprits.contains(n)) {
        if let (Some(first), Some(_)) = (&with, stackbuild_check::library_component(name)) {
            failed.insert(
                name.clone(),
                format!(
                    "left out with {first} (see there): a pin of one of torch's CUDA libraries for another torch \
                     build than the one resolved, which brings its own"
                ),
            );
        }
    }
    packages.retain(|r| !failed.contains_key(r.name.as_ref()));
    true
}

/// The top-level packages (of `top`) to leave out for the resolver's failure `message`, and,
/// when they are pins of torch's CUDA libraries, the first of them (its other such pins go too).
///
/// uv's derivation names every package on the path to the conflict; leaving all of them out
/// lost the project's own torch (dinov2's `torch==2.0.0` for torchvision 0.15.0's broken
/// `torch==2.0.0+cu117`; cosmos-predict2's `torch==2.6.0` beside its extra's CUDA 12.6 pins).
/// In order: a top-level pin of what another top-level package depends on at another version
/// (the pin gives way to the package that needs it), else a top-level package that depends on
/// what does not exist, else a top-level package that does not exist itself, else every
/// top-level package the message names.
fn culprits(message: &str, top: &[String]) -> (Vec<String>, Option<String>) {
    let flat = message.to_ascii_lowercase().replace('_', "-");
    let words: Vec<&str> = flat.split_whitespace().collect();
    // `torch==2.6.0`, `torch{marker}==2.6.0`, `torch[extra]`, `torch.`: the word is the package.
    let is = |word: &str, name: &str| {
        word.strip_prefix(name)
            .is_some_and(|rest| rest.chars().next().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-')))
    };
    let named: Vec<&String> = top.iter().filter(|n| names(message, n)).collect();
    let missing = |name: &str| {
        words.windows(4).any(|w| w[..3] == ["no", "version", "of"] && is(w[3], name))
            || words
                .windows(3)
                .any(|w| is(w[0], name) && (w[1..] == ["was", "not"] || w[1..] == ["has", "no"]))
    };
    // (depender, dependency) pairs of `A depends on B`.
    let pairs: Vec<(&str, &str)> =
        words.windows(4).filter(|w| w[1] == "depends" && w[2] == "on").map(|w| (w[0], w[3])).collect();
    let depended_by_top = |name: &str| {
        pairs.iter().any(|(a, b)| is(b, name) && named.iter().any(|m| m.as_str() != name && is(a, m)))
    };
    let pins: Vec<String> =
        named.iter().filter(|n| depended_by_top(n) && !missing(n)).map(|n| (*n).clone()).collect();
    if !pins.is_empty() {
        let first = pins.iter().find(|n| stackbuild_check::library_component(n).is_some()).cloned();
        return (pins, first);
    }
    let dependers: Vec<String> = named
        .iter()
        .filter(|n| pairs.iter().any(|(a, b)| is(a, n) && top.iter().all(|t| !is(b, t) || missing(t))))
        .filter(|_| flat.contains("no version of") || flat.contains("has no"))
        .map(|n| (*n).clone())
        .collect();
    if !dependers.is_empty() {
        return (dependers, None);
    }
    let absent: Vec<String> = named.iter().filter(|n| missing(n)).map(|n| (*n).clone()).collect();
    if !absent.is_empty() {
        return (absent, None);
    }
    (named.into_iter().cloned().collect(), None)
}

/// The resolver's reason in one line: uv's `Because ...` sentence when there is one.
fn resolver_reason(message: &str) -> String {
    let flat: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    let reason = flat.find("Because ").map_or(flat.as_str(), |i| &flat[i..]);
    let reason = reason.split(" And because ").next().unwrap_or(reason);
    let mut out: String = reason.chars().take(400).collect();
    if reason.chars().count() > 400 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_package_uv_names() {
        let m =
            "No solution found: Because markdown2[all]==2.5.4 depends on wavedrom and torch==9 has no wheels";
        assert!(super::names(m, "markdown2"));
        assert!(super::names(m, "torch"));
        assert!(!super::names(m, "wave"));
        assert!(!super::names("Because torchvision==1 ...", "torch"));
        let r = super::resolver_reason("× No solution found:\n  ╰─▶ Because x was not found in the package registry and you require x, we can conclude...");
        assert!(r.starts_with("Because x was not found"), "{r}");
        let extra = ["https://nvidia.example".to_owned(), "https://download.example/whl/cu128".to_owned()];
        let m = "Request failed after 3 retries\n  cause: Failed to fetch: https://nvidia.example/av/\n  cause: dns error";
        assert_eq!(super::unreachable_index(m, &extra).as_deref(), Some("https://nvidia.example"));
        assert_eq!(super::unreachable_index("Because av==1 has no wheels", &extra), None);
    }

    #[test]
    fn the_pin_that_gives_way() {
        let top = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        // cosmos-predict2: its extra's CUDA 12.6 pins beside PyPI's torch 2.6.0 (CUDA 12.4).
        let m = "No solution found when resolving dependencies\n  cause: Because torch==2.6.0 depends on \
                 nvidia-cuda-nvrtc-cu12{platform_machine == 'x86_64' and sys_platform == 'linux'}==12.4.127 and you \
                 require torch==2.6.0, we can conclude that you require nvidia-cuda-nvrtc-cu12==12.4.127.\n And \
                 because you require nvidia-cuda-nvrtc-cu12==12.6.77, we can conclude that your requirements are \
                 unsatisfiable.";
        let (out, with) =
            super::culprits(m, &top(&["torch", "nvidia-cuda-nvrtc-cu12", "nvidia-cublas-cu12"]));
        assert_eq!(out, ["nvidia-cuda-nvrtc-cu12"]);
        assert_eq!(with.as_deref(), Some("nvidia-cuda-nvrtc-cu12"));
        // dinov2: torchvision 0.15.0's wheel asks for a torch build that is not on the index.
        let m = "Because there is no version of torch==2.0.0+cu117 and torchvision==0.15.0 depends on \
                 torch==2.0.0+cu117, we can conclude that torchvision==0.15.0 cannot be used. And because you require \
                 torchvision==0.15.0, we can conclude that your requirements are unsatisfiable.";
        assert_eq!(
            super::culprits(m, &top(&["torch", "torchvision", "xformers"])),
            (top(&["torchvision"]), None)
        );
        let m = "Because there is no version of apex==0.1.0 and you require apex==0.1.0, we can conclude ...";
        assert_eq!(super::culprits(m, &top(&["apex", "torch"])), (top(&["apex"]), None));
        // Two packages that want different versions of a third: both named, both left out.
        let m =
            "Because a==1 depends on numpy<2 and b==1 depends on numpy>=2, we can conclude that a==1 and \
                 b==1 are incompatible.";
        assert_eq!(super::culprits(m, &top(&["a", "b", "c"])), (top(&["a", "b"]), None));
    }
}
