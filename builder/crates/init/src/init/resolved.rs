//! What a resolution of the plan's requirements tells it: the pins of the unpinned packages,
//! what was left out, the CUDA the wheels carry, an index that could not be reached; and what
//! the resolution needs of the plan.

use std::collections::BTreeMap;
use std::path::Path;

use super::{pin_requirement, Plan, Untranslated};

impl Plan {
    /// Pins the unpinned requirements to what `resolved` (`name -> version`, from a resolution
    /// of the recipe's requirements) says, and says so. Those it has no version for are listed
    /// as not translated: with their own reason where `failed` has one (the package the
    /// resolver named), else with `why_not`, the resolution's failure, said once.
    pub fn pin(
        &mut self,
        resolved: Option<&BTreeMap<String, String>>,
        failed: &BTreeMap<String, String>,
        why_not: &str,
    ) {
        use std::str::FromStr as _;
        let unpinned = std::mem::take(&mut self.unpinned);
        let mut said = false;
        for name in unpinned {
            let norm = stackbuild_python::normalize_name(&name);
            let Some(i) = self.packages.iter().position(|(r, _)| {
                pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r)
                    .is_ok_and(|req| req.name.to_string() == norm)
            }) else {
                continue;
            };
            // Without a resolution (`--offline`, or it failed) a range stays as written: the
            // lock pins it. Only a requirement with no version at all is listed.
            let ranged = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(&self.packages[i].0)
                .is_ok_and(|r| matches!(&r.version_or_url, Some(pep508_rs::VersionOrUrl::VersionSpecifier(s)) if !s.is_empty()));
            if ranged && resolved.is_none_or(|r| !r.contains_key(&norm)) && !failed.contains_key(&norm) {
                continue;
            }
            if let Some(version) = resolved.and_then(|r| r.get(&norm)) {
                let (req, at) = self.packages[i].clone();
                let pinned = pin_requirement(&req, version);
                let which = if req.split(';').next().is_some_and(|h| h.contains(['<', '>', '=', '~', '!'])) {
                    "no exact version"
                } else {
                    "no version"
                };
                self.decisions.push(format!(
                    "{at}: `{req}` has {which}; pinned to {version}, what uv resolves for the image today"
                ));
                self.packages[i] = (pinned, at);
            } else {
                let (req, at) = self.packages.remove(i);
                let why = if let Some(reason) = failed.get(&norm) {
                    format!("{reason}; add `{name}==VERSION` to [python] packages once it resolves")
                } else if said {
                    format!("no version, for the reason above; add `{name}==VERSION` to [python] packages")
                } else {
                    said = true;
                    format!(
                        "a recipe pins its top-level packages, and no version could be found: {why_not}; add \
                         `{name}==VERSION` to [python] packages"
                    )
                };
                self.untranslated.push(Untranslated { at, what: req, why });
            }
        }
        // A pinned package the resolver left out stays out: the recipe must resolve as written
        // (diffusion_policy's `pytorch3d=0.7.0` has no Linux wheel and no sdist on the index).
        for (name, reason) in failed {
            let norm = stackbuild_python::normalize_name(name);
            while let Some(i) = self.packages.iter().position(|(r, _)| {
                pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r)
                    .is_ok_and(|req| req.name.to_string() == norm)
            }) {
                let (req, at) = self.packages.remove(i);
                let why = format!("{reason}; add it back to [python] packages once it resolves");
                self.untranslated.push(Untranslated { at, what: req, why });
            }
        }
        // The installed project requires them again through its own metadata: an override
        // keeps them out of the lock too (DreamZero's `tensorrt`, whose wheels are only on
        // NVIDIA's index), said beside it.
        if self.project_wheel {
            for (name, reason) in failed {
                self.overrides.push((
                    format!("{name} ; sys_platform == 'never'"),
                    format!("left out although the project requires it ({reason}); remove this line once it resolves"),
                ));
            }
        }
    }

    /// Whether there is anything to resolve: packages, and no lock of the project's.
    pub fn resolvable(&self) -> bool {
        self.lock.is_none() && !self.packages.is_empty()
    }

    /// The base: (`debian` or `ubuntu`, suite).
    pub fn base(&self) -> (&str, &str) {
        (&self.distro.0, &self.distro.1)
    }

    /// Makes `[cuda]` say what the resolved wheels carry (`nvidia-cuda-runtime-cu12` 12.4.127:
    /// CUDA 12.4; `nvidia-cudnn-cu12`: its cuDNN) where the inputs said otherwise (a
    /// Dockerfile's `nvidia/cuda:12.1...` tag beside a torch that ships 12.4), and says why:
    /// `stackbuild check` holds `[cuda]` against the wheels, and the wheels are what runs.
    pub fn reconcile_cuda(&mut self, resolved: &BTreeMap<String, String>) {
        let runtime = ["nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime"]
            .into_iter()
            .find_map(|n| resolved.get(n).map(|v| (n, v)));
        let Some((package, version)) = runtime else { return };
        let minor: Vec<&str> = version.split('.').take(2).collect();
        if minor.len() < 2 {
            return;
        }
        let cuda = minor.join(".");
        let cudnn = resolved
            .iter()
            .find(|(n, _)| n.starts_with("nvidia-cudnn-cu") || n.as_str() == "nvidia-cudnn")
            .map(|(_, v)| v.clone());
        match &mut self.cuda {
            Some((have, _)) if *have == cuda => {}
            Some((have, have_cudnn)) => {
                self.decisions.push(format!(
                    "[cuda] {cuda}, not {have}: the resolved wheels carry CUDA {cuda} ({package} {version}); \
                     {have} came from the inputs. For CUDA {have}, pin the torch build made for it (its \
                     per-CUDA index) in the recipe"
                ));
                *have = cuda;
                if have_cudnn.is_some() {
                    *have_cudnn = cudnn;
                }
            }
            None => {
                self.decisions
                    .push(format!("[cuda] {cuda}: the resolved wheels carry it ({package} {version})"));
                self.cuda = Some((cuda, None));
            }
        }
    }

    /// The requirements, for resolving the unpinned ones.
    pub fn requirements(&self) -> Vec<String> {
        self.packages.iter().map(|(r, _)| r.clone()).collect()
    }

    /// The recipe's overrides and constraints, for resolving as the recipe will.
    pub fn overrides_and_constraints(&self) -> (Vec<String>, Vec<String>) {
        (
            self.overrides.iter().map(|(r, _)| r.clone()).collect(),
            self.constraints.iter().map(|(r, _)| r.clone()).collect(),
        )
    }

    /// Adds a decision to the report.
    pub fn decide(&mut self, text: String) {
        self.decisions.push(text);
    }

    /// Pins each git dependency that names no revision (`name @ git+URL`, as pip and uv clone
    /// the default branch) to the commit `head` says the repository's default branch points
    /// to; one whose commit cannot be read is taken out and listed with why. Runs before the
    /// resolution: a recipe's git dependency names its revision.
    pub fn pin_git_heads(&mut self, head: impl Fn(&str) -> Result<String, String>) {
        use std::str::FromStr as _;
        let mut kept = Vec::new();
        for (requirement, at) in std::mem::take(&mut self.packages) {
            let Some((given, url)) = git_without_revision(&requirement) else {
                kept.push((requirement, at));
                continue;
            };
            let name = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(&requirement)
                .map(|r| r.name.to_string())
                .unwrap_or_default();
            match head(&url) {
                Ok(commit) => {
                    // The revision goes before a `#subdirectory=` fragment.
                    let pinned = match given.split_once('#') {
                        Some((base, fragment)) => format!("{base}@{commit}#{fragment}"),
                        None => format!("{given}@{commit}"),
                    };
                    self.decide(format!(
                        "{at}: `{name}` from {url} names no revision: pinned to {commit}, the commit its default \
                         branch points to today (as pip and uv would clone it)"
                    ));
                    kept.push((requirement.replacen(&given, &pinned, 1), at));
                }
                Err(why) => self.untranslated.push(Untranslated {
                    at,
                    what: requirement,
                    why: format!(
                        "a git dependency without a revision, and its default branch could not be read ({why}): pin \
                         it as `{name} @ git+{url}@<commit or tag>`"
                    ),
                }),
            }
        }
        self.packages = kept;
    }

    /// Whether the requirement the recipe has for `name` admits `version` (a range's upper
    /// bound may not).
    pub fn admits(&self, name: &str, version: &pep508_rs::pep440_rs::Version) -> bool {
        use std::str::FromStr as _;
        self.packages
            .iter()
            .filter_map(|(r, _)| pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r).ok())
            .all(|req| {
                req.name.to_string() != name
                    || match &req.version_or_url {
                        Some(pep508_rs::VersionOrUrl::VersionSpecifier(specs)) => specs.contains(version),
                        _ => true,
                    }
            })
    }

    /// Adds a constraint to the recipe (before the resolution), with why as its comment and in
    /// the report.
    pub fn constrain(&mut self, requirement: &str, why: &str) {
        self.decide(format!("[python] constraints `{requirement}`: {why}"));
        self.constraints.push((requirement.to_owned(), why.to_owned()));
    }

    /// The project's lock the recipe installs, when it installs one.
    pub fn lock(&self) -> Option<&Path> {
        self.lock.as_deref()
    }

    /// The recipe's Python version.
    pub fn python(&self) -> &str {
        &self.python
    }

    /// The recipe's indexes, as a `[python]` section would hold them.
    pub fn indexes(&self) -> (Option<String>, Vec<String>, Vec<String>) {
        (self.index.clone(), self.extra_index.clone(), self.find_links.clone())
    }

    /// Takes the extra index `url` out of the recipe (it could not be reached when init ran),
    /// listing it with `why`, so that the recipe resolves where init ran.
    pub fn drop_extra_index(&mut self, url: &str, why: &str) {
        self.extra_index.retain(|u| u != url);
        self.untranslated.push(Untranslated {
            at: "[python] extra_index".into(),
            what: url.to_owned(),
            why: why.to_owned(),
        });
    }
}

/// `(the URL as written, the repository URL)` of a `name @ git+URL` requirement that names no
/// revision (`git+https://host/repo`, `git+ssh://git@host/repo#subdirectory=x`).
fn git_without_revision(requirement: &str) -> Option<(String, String)> {
    use std::str::FromStr as _;
    let req = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(requirement).ok()?;
    let Some(pep508_rs::VersionOrUrl::Url(url)) = &req.version_or_url else { return None };
    let given = url.given()?.to_owned();
    let repo = given.strip_prefix("git+")?.split(['#', '?']).next()?.to_owned();
    stackbuild_recipe::git_dependency(&req).is_none().then_some((given, repo))
}
