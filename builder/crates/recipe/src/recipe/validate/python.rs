//! `[python]` and `[python.build]`: requirements (from the index, or git dependencies pinned to a
//! revision), wheels the recipe supplies, the project's own lock, and how sources are built.
//! Split from `validate` along the recipe's sections: this one is the largest.

#[allow(clippy::wildcard_imports)] // the parent's context and helpers, as one section of it
use super::*;

pub(in crate::recipe) fn validate_python(
    ctx: &mut Ctx,
    dir: &Path,
    raw: Spanned<RawPython>,
) -> Option<PythonSection> {
    let raw = raw.into_inner();
    let before = ctx.diags.len();
    let version: Option<PythonVersion> = ctx.parse(&raw.version, "Python version");
    if let Some(v) = &version {
        if v.part(0) != 3 {
            ctx.error(raw.version.span(), format!("unsupported Python version {v}: expected 3.x"));
        }
    }
    let mut packages = Vec::new();
    let mut seen: BTreeMap<PackageName, usize> = BTreeMap::new();
    for p in &raw.packages {
        let Some(req) = parse_package(ctx, p) else { continue };
        let unpinned = match &req.version_or_url {
            None => true,
            Some(VersionOrUrl::VersionSpecifier(specs)) => specs.is_empty(),
            Some(VersionOrUrl::Url(_)) => false,
        };
        if unpinned {
            ctx.error_help(
                p.span(),
                format!(
                    "`{}` is not pinned: top-level packages need `==VERSION` or an explicit range",
                    req.name
                ),
                format!("write e.g. \"{}==1.2.3\" or \"{}>=1.2, <2\"", req.name, req.name),
            );
        }
        let line = ctx.line_of(p.span().start);
        if let Some(first) = seen.insert(req.name.clone(), line) {
            ctx.error(p.span(), format!("package `{}` is listed twice (first on line {first})", req.name));
        }
        packages.push(req);
    }
    let constraints: Vec<Requirement> =
        raw.constraints.iter().filter_map(|c| parse_requirement(ctx, c)).collect();
    let overrides: Vec<Requirement> =
        raw.overrides.iter().filter_map(|o| parse_requirement(ctx, o)).collect();
    if let Some(i) = &raw.index {
        if !is_url(i.get_ref()) {
            ctx.error(
                i.span(),
                format!("invalid index {:?}: expected an http://, https:// or file:// URL", i.get_ref()),
            );
        }
    }
    for i in &raw.extra_index {
        if !is_url(i.get_ref()) {
            ctx.error(
                i.span(),
                format!(
                    "invalid extra_index {:?}: expected an http://, https:// or file:// URL",
                    i.get_ref()
                ),
            );
        }
    }
    let mut find_links = Vec::new();
    for l in &raw.find_links {
        let written = l.get_ref();
        if written.chars().any(char::is_control) || written.is_empty() {
            ctx.error(l.span(), "expected a directory or a URL, without control characters");
        } else if is_url(written) {
            find_links.push(written.clone());
        } else {
            find_links.push(dir.join(written).to_string_lossy().into_owned());
        }
    }
    let mut wheels: Vec<LocalWheel> = Vec::new();
    for w in &raw.wheel {
        let Some(wheel) = validate_wheel(ctx, dir, w.get_ref()) else { continue };
        if let Some(line) = seen.get(&wheel.name) {
            ctx.error_help(
                w.get_ref().path.span(),
                format!("`{}` is also listed in packages (line {line})", wheel.name),
                "a package comes either from the index or from a [[python.wheel]]: remove one",
            );
        } else if wheels.iter().any(|o| o.name == wheel.name && o.platform_tags == wheel.platform_tags) {
            ctx.error(
                w.get_ref().path.span(),
                format!("a second wheel of `{}` for the same platform", wheel.name),
            );
        }
        wheels.push(wheel);
    }
    let lock = validate_given_lock(ctx, dir, &raw);
    let build = raw.build.map(|b| validate_build(ctx, b)).unwrap_or_default();
    (ctx.diags.len() == before).then_some(PythonSection {
        version: version?,
        packages,
        constraints,
        overrides,
        index: raw.index.map(Spanned::into_inner),
        extra_index: raw.extra_index.into_iter().map(Spanned::into_inner).collect(),
        find_links,
        wheels,
        bytecode: raw.bytecode.unwrap_or(true),
        lock,
        build,
    })
}

/// `[python.build]`.
fn validate_build(ctx: &mut Ctx, raw: RawBuild) -> BuildSection {
    let mut packages = Vec::new();
    for p in &raw.packages {
        // A Debian package name (Debian Policy 5.6.1), optionally `=version`: it becomes one
        // item of mmdebstrap's `--include`, so nothing else may be in it.
        let ok = p.get_ref().split_once('=').map_or(p.get_ref().as_str(), |(n, _)| n);
        let valid = ok.len() >= 2
            && ok.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
            && ok.as_bytes()[0].is_ascii_alphanumeric()
            && !p.get_ref().contains([',', ' ']);
        if valid {
            packages.push(p.get_ref().clone());
        } else {
            ctx.error(
                p.span(),
                format!("invalid Debian package {:?}: expected a name like `libevdev-dev`", p.get_ref()),
            );
        }
    }
    let mut names = |list: &[S]| -> Vec<PackageName> {
        list.iter()
            .filter_map(|n| match PackageName::from_str(n.get_ref()) {
                Ok(name) => Some(name),
                Err(e) => {
                    ctx.error(n.span(), format!("invalid package name {:?}: {e}", n.get_ref()));
                    None
                }
            })
            .collect()
    };
    let no_build = names(&raw.no_build);
    let no_isolation = names(&raw.no_isolation);
    let mut by_package = |table: &BTreeMap<String, Vec<Spanned<String>>>, what: &str| {
        let mut out = BTreeMap::new();
        for (name, reqs) in table {
            let Ok(name) = PackageName::from_str(name) else {
                let span = reqs.first().map_or(0..0, Spanned::span);
                ctx.error(span, format!("invalid package name {name:?} in {what}"));
                continue;
            };
            let parsed: Vec<Requirement> = reqs.iter().filter_map(|r| parse_requirement(ctx, r)).collect();
            out.insert(name, parsed);
        }
        out
    };
    let extra_requires = by_package(&raw.extra_requires, "extra_requires");
    let dependency_metadata = by_package(&raw.dependency_metadata, "dependency_metadata");
    let env = build_env(ctx, &raw.env);
    let cuda_arch_list = raw.cuda_arch_list.and_then(|a| {
        // `8.0;9.0+PTX` or `8.0 9.0`: what torch.utils.cpp_extension reads.
        let ok = !a.get_ref().is_empty()
            && a.get_ref().split([';', ' ']).filter(|s| !s.is_empty()).all(|arch| {
                let arch = arch.strip_suffix("+PTX").unwrap_or(arch);
                let arch = arch.strip_suffix('a').unwrap_or(arch);
                arch.split_once('.').is_some_and(|(a, b)| {
                    !a.is_empty() && !b.is_empty() && (a.to_owned() + b).bytes().all(|c| c.is_ascii_digit())
                })
            });
        if ok {
            Some(a.into_inner())
        } else {
            ctx.error(
                a.span(),
                format!("invalid cuda_arch_list {:?}: expected e.g. \"8.0;9.0+PTX\"", a.get_ref()),
            );
            None
        }
    });
    BuildSection {
        packages,
        no_build,
        no_isolation,
        extra_requires,
        dependency_metadata,
        env,
        cuda_arch_list,
        memory_mib: raw.memory_mib,
        timeout_s: raw.timeout_s,
        jobs: raw.jobs,
    }
}

/// `[python.build.env]`: by package, names as POSIX spells them (`[A-Z_][A-Z0-9_]*`, any case),
/// not one the build sets itself, values without NUL or newlines.
fn build_env(
    ctx: &mut Ctx,
    raw: &BTreeMap<String, Spanned<BTreeMap<String, String>>>,
) -> BTreeMap<PackageName, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (package, vars) in raw {
        let span = vars.span();
        let Ok(name) = PackageName::from_str(package) else {
            ctx.error(span, format!("invalid package name {package:?} in [python.build.env]"));
            continue;
        };
        let mut list = BTreeMap::new();
        for (var, value) in vars.get_ref() {
            let valid_name = var.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid_name {
                ctx.error(
                    span.clone(),
                    format!("invalid variable name {var:?}: expected letters, digits and `_`"),
                );
            } else if stackbuild_common::BUILD_OWN_ENV.contains(&var.to_ascii_uppercase().as_str()) {
                ctx.error(
                    span.clone(),
                    format!("{var} is set by the build itself; [python.build.env] cannot replace it"),
                );
            } else if value.contains(['\0', '\n', '\r']) {
                ctx.error(span.clone(), format!("{var}: a value on one line, without NUL"));
            } else {
                list.insert(var.clone(), value.clone());
            }
        }
        out.insert(name, list);
    }
    out
}

/// `[python] lock`: a `uv.lock` or `pylock.toml`, which then is the whole list of what is
/// installed (no `packages`, `constraints` or `[[python.wheel]]` beside it).
fn validate_given_lock(ctx: &mut Ctx, dir: &Path, raw: &RawPython) -> Option<PathBuf> {
    raw.lock.as_ref().and_then(|l| {
        let written = l.get_ref();
        if super::super::lock_format_of_name(Path::new(written)).is_none() {
            ctx.error_help(
                l.span(),
                format!("lock {written:?} is neither a uv.lock nor a pylock.toml"),
                "name the project's `uv.lock`, or a PEP 751 `pylock.toml` / `pylock.NAME.toml`",
            );
            return None;
        }
        // The lock says what is installed; a second list beside it would be resolved by nobody.
        if let Some(first) = raw.packages.first() {
            ctx.error_help(
                first.span(),
                "packages are given by the lock (`lock = ...`): the image installs exactly its wheels",
                "add the package to the project and lock again (`uv add NAME`), or drop `lock`",
            );
        }
        if let Some(first) = raw.constraints.first().or_else(|| raw.overrides.first()) {
            ctx.error_help(
                first.span(),
                "constraints and overrides have no effect with `lock = ...`: nothing is resolved",
                "remove them, or constrain the project's own lock (`uv lock --constraint`)",
            );
        }
        if let Some(first) = raw.wheel.first() {
            ctx.error_help(
                first.get_ref().path.span(),
                "[[python.wheel]] cannot be combined with `lock = ...`",
                "add the wheel to the project's lock (uv: `[tool.uv.sources]` with a path)",
            );
        }
        Some(dir.join(written))
    })
}

fn validate_wheel(ctx: &mut Ctx, dir: &Path, raw: &RawWheel) -> Option<LocalWheel> {
    let written = raw.path.get_ref();
    // A path is handed to the resolver; a newline in it must never become a line of its own.
    if let Some(c) = written.chars().find(|c| c.is_control()) {
        ctx.error_help(
            raw.path.span(),
            format!("the wheel path holds the control character {c:?}"),
            "a file name has no control characters; spaces and `#` are fine",
        );
        return None;
    }
    let filename = Path::new(written).file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let Some(parsed) = stackbuild_common::parse_wheel_name(filename) else {
        ctx.error_help(
            raw.path.span(),
            format!("{written:?} is not a wheel file name"),
            "expected NAME-VERSION-PYTHON-ABI-PLATFORM.whl (PEP 427), as the wheel was published",
        );
        return None;
    };
    let sha256 = match &raw.sha256 {
        Some(h) if h.get_ref().len() != 64 || !h.get_ref().bytes().all(|b| b.is_ascii_hexdigit()) => {
            ctx.error(h.span(), "expected 64 hex digits (the file's sha256)");
            return None;
        }
        Some(h) => Some(h.get_ref().to_ascii_lowercase()),
        None => None,
    };
    Some(LocalWheel {
        path: dir.join(written),
        written: written.clone(),
        filename: filename.to_owned(),
        name: parsed.name,
        version: parsed.version,
        platform_tags: parsed.platform,
        sha256,
    })
}

/// A top-level package: a requirement from the index, or a git dependency pinned to a revision
/// (`name @ git+https://host/repo@REV`, REV a commit, tag or branch; the lock pins the commit),
/// built from source in the sandbox.
fn parse_package(ctx: &mut Ctx, s: &S) -> Option<Requirement> {
    let text = s.get_ref();
    let Ok(req) = Requirement::<pep508_rs::VerbatimUrl>::from_str(text) else {
        return parse_requirement(ctx, s);
    };
    let Some(VersionOrUrl::Url(url)) = &req.version_or_url else { return parse_requirement(ctx, s) };
    let written = url.given().unwrap_or_default().to_owned();
    let Some(git) = ["git+https://", "git+http://", "git+ssh://", "git+file://"]
        .iter()
        .find_map(|scheme| written.strip_prefix(*scheme).map(|rest| (*scheme, rest)))
    else {
        return check_url_dependency(ctx, s, req);
    };
    let path = git.1.split(['#', '?']).next().unwrap_or_default();
    let rev = path.rsplit_once('@').map(|(_, r)| r).filter(|r| !r.is_empty() && !r.contains('/'));
    if rev.is_none() || written.chars().any(|c| c.is_control() || c.is_whitespace()) {
        ctx.error_help(
            s.span(),
            format!("`{}`: a git dependency needs a revision", req.name),
            format!("pin it: `{} @ {}{}@<commit or tag>`", req.name, git.0, path),
        );
        return None;
    }
    let fragment = written.split_once('#').map_or("", |(_, f)| f);
    let subdirectory = fragment.split('&').find_map(|kv| kv.strip_prefix("subdirectory="));
    if let Some(sub) = subdirectory {
        if !is_relative_inside(sub) {
            ctx.error_help(
                s.span(),
                format!("`{}`: invalid subdirectory {sub:?}", req.name),
                "a path inside the repository, relative, without `..` (`#subdirectory=packages/client`)",
            );
            return None;
        }
    }
    Some(req)
}

/// A subdirectory as [`super::is_contained_relative`] takes it, spelled as git's tree has it: no
/// empty or `.` component (the builder walks it part by part), no control character.
fn is_relative_inside(path: &str) -> bool {
    super::is_contained_relative(path)
        && !path.split('/').any(|c| c.is_empty() || c == ".")
        && !path.chars().any(|c| c.is_control() || c == '\\')
}

/// The subdirectory of a git dependency's repository its project is in
/// (`name @ git+URL@REV#subdirectory=packages/client`, pip's and uv's fragment), when it names
/// one that stays inside the repository.
pub fn git_subdirectory(req: &Requirement) -> Option<String> {
    let Some(VersionOrUrl::Url(url)) = &req.version_or_url else { return None };
    let written = url.given()?;
    let fragment = written.strip_prefix("git+")?.split_once('#')?.1;
    let sub = fragment.split('&').find_map(|kv| kv.strip_prefix("subdirectory="))?;
    is_relative_inside(sub).then(|| sub.to_owned())
}

/// A direct URL dependency (`name @ https://host/path/file.whl#sha256=HEX`, a wheel or an sdist):
/// the file must be named as its project, and the digest is required, since the lock and every
/// build verify the file by it.
fn check_url_dependency(ctx: &mut Ctx, s: &S, req: Requirement) -> Option<Requirement> {
    let written = match &req.version_or_url {
        Some(VersionOrUrl::Url(url)) => url.given().unwrap_or_default().to_owned(),
        _ => return None,
    };
    let fail = |ctx: &mut Ctx, what: String, help: &str| {
        ctx.error_help(s.span(), what, help);
        None
    };
    if !(written.starts_with("https://") || written.starts_with("http://"))
        || written.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return fail(
            ctx,
            format!("`{}` names a URL stackbuild cannot fetch: expected https:// (or http://), or git+", req.name),
            "give a version (`name==1.2.3`), a git dependency (`name @ git+https://host/repo@REV`), a file URL \
             with its digest (`name @ https://host/name-1.0-py3-none-any.whl#sha256=...`) or use a [[source]]",
        );
    }
    if url_dependency(&req).is_none() {
        let has_digest = written.contains("#sha256=");
        return fail(
            ctx,
            if has_digest {
                format!(
                    "`{}`: the URL must end in a wheel or sdist file of `{}` and `#sha256=` 64 hex digits",
                    req.name, req.name
                )
            } else {
                format!("`{}`: a URL dependency needs the file's digest", req.name)
            },
            "append `#sha256=<the file's sha256>`: the lock and every build verify the file by it",
        );
    }
    Some(req)
}

/// A direct URL dependency of [`check_url_dependency`]'s form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlDependency {
    /// The URL, without its fragment.
    pub url: String,
    /// The file name (the URL's last segment, percent-decoded).
    pub filename: String,
    /// Lowercase hex sha256 from the `#sha256=` fragment.
    pub sha256: String,
    /// Whether the file is a wheel (else an sdist, built from source).
    pub wheel: bool,
}

/// The URL, file and digest of `name @ https://host/file#sha256=HEX`, when the file is a wheel
/// or an sdist of that project.
pub fn url_dependency(req: &Requirement) -> Option<UrlDependency> {
    let Some(VersionOrUrl::Url(url)) = &req.version_or_url else { return None };
    let written = url.given()?;
    if !(written.starts_with("https://") || written.starts_with("http://")) {
        return None;
    }
    let (url, fragment) = written.split_once('#')?;
    let sha256 = fragment.split('&').find_map(|kv| kv.strip_prefix("sha256="))?.to_ascii_lowercase();
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let last = url.split('?').next()?.rsplit('/').next()?;
    let filename = percent_decode(last)?;
    if filename.contains(['/', '\\']) || filename.starts_with('.') {
        return None;
    }
    let wheel = if let Some(w) = stackbuild_common::parse_wheel_name(&filename) {
        if w.name != req.name {
            return None;
        }
        true
    } else {
        let (name, _) = stackbuild_common::parse_sdist_name(&filename)?;
        if name != req.name {
            return None;
        }
        false
    };
    Some(UrlDependency { url: url.to_owned(), filename, sha256, wheel })
}

/// `%XX` decoded, when the result is UTF-8 without control characters.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let text = String::from_utf8(out).ok()?;
    (!text.chars().any(char::is_control)).then_some(text)
}

/// The git URL and revision of a git dependency (`name @ git+URL@REV`): (`URL`, `REV`).
pub fn git_dependency(req: &Requirement) -> Option<(String, String)> {
    let Some(VersionOrUrl::Url(url)) = &req.version_or_url else { return None };
    let written = url.given()?;
    let rest = written.strip_prefix("git+")?;
    let rest = rest.split(['#', '?']).next()?;
    let (url, rev) = rest.rsplit_once('@')?;
    // `git+ssh://git@host/repo` without a revision has its `@` before the path.
    (!rev.contains('/') && !rev.is_empty()).then(|| (url.to_owned(), rev.to_owned()))
}

/// A PEP 508 requirement from the index (no URL), with the parser's error pointed at the
/// exact character inside the string.
fn parse_requirement(ctx: &mut Ctx, s: &S) -> Option<Requirement> {
    match Requirement::<pep508_rs::VerbatimUrl>::from_str(s.get_ref()) {
        Ok(req) => {
            if let Some(VersionOrUrl::Url(_)) = req.version_or_url {
                ctx.error_help(
                    s.span(),
                    format!("`{}` names a URL: packages come from the index as wheels", req.name),
                    "give a version (`name==1.2.3`) or use a [[source]]",
                );
                return None;
            }
            Some(req)
        }
        Err(e) => {
            let span = ctx.inner_span(s, e.start, e.len);
            ctx.error(span, format!("invalid requirement {:?}: {}", s.get_ref(), e.message));
            None
        }
    }
}
