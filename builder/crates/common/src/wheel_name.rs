//! Wheel file names (PEP 427, "File name convention"):
//! `{distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl`, where each
//! tag may be a `.`-separated set (<https://packaging.python.org/en/latest/specifications/binary-distribution-format/#file-name-convention>).
//! A leaf module: the recipe validates `[[python.wheel]]` names with it, the solver reads wheel
//! URLs with it, and the fetcher ranks the files it finds by their tags.

use std::str::FromStr;

use pep508_rs::PackageName;
use stackcontract::version::{PackageVersion, PythonVersion};

/// The parts of a wheel file name (PEP 427): `{name}-{version}(-{build})?-{py}-{abi}-{plat}.whl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    pub name: PackageName,
    pub version: PackageVersion,
    pub python: Vec<String>,
    pub abi: Vec<String>,
    pub platform: Vec<String>,
}

pub fn parse_wheel_name(filename: &str) -> Option<WheelName> {
    let stem = filename.strip_suffix(".whl")?;
    let parts: Vec<&str> = stem.split('-').collect();
    if parts.len() != 5 && parts.len() != 6 {
        return None;
    }
    let n = parts.len();
    let split = |s: &str| s.split('.').map(str::to_owned).collect::<Vec<_>>();
    Some(WheelName {
        name: PackageName::from_str(parts[0]).ok()?,
        version: PackageVersion::from_str(parts[1]).ok()?,
        python: split(parts[n - 3]),
        abi: split(parts[n - 2]),
        platform: split(parts[n - 1]),
    })
}

impl WheelName {
    /// How well the wheel fits an interpreter `python` on a platform accepting `platform_tags`
    /// (most preferred first, as `solve::Target::platform_tags` lists them): `Some(rank)` when
    /// installable, lower is better (the index of its best platform tag, `any` last), `None`
    /// when not.
    ///
    /// Python/ABI pairs accepted, as pip's tag order for `CPython` allows (`packaging.tags`):
    /// `cpXY-cpXY`, `cp3Y-abi3` for Y <= the target's minor, and `none` with `cpXY`, `pyX` or `pyXY`
    /// (same major, minor at most the target's).
    pub fn rank(&self, python: &PythonVersion, platform_tags: &[String]) -> Option<usize> {
        let major = python.part(0);
        let minor = python.part(1);
        let cp = format!("cp{major}{minor}");
        let py_ok = |py: &str, abi: &str| -> bool {
            let version_at_most = |digits: &str| {
                let mut chars = digits.chars();
                let maj = chars.next().and_then(|c| c.to_digit(10)).map(u64::from);
                let rest = chars.as_str();
                maj == Some(major) && (rest.is_empty() || rest.parse::<u64>().is_ok_and(|m| m <= minor))
            };
            match abi {
                a if a == cp => py == cp,
                "abi3" => py.strip_prefix("cp").is_some_and(|d| d.len() >= 2 && version_at_most(d)),
                "none" => py == cp || py.strip_prefix("py").is_some_and(version_at_most),
                _ => false,
            }
        };
        let interpreter_ok = self.python.iter().any(|py| self.abi.iter().any(|abi| py_ok(py, abi)));
        if !interpreter_ok {
            return None;
        }
        let tags = platform_tags;
        self.platform
            .iter()
            .filter_map(|p| if p == "any" { Some(tags.len()) } else { tags.iter().position(|t| t == p) })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::parse_wheel_name;

    #[test]
    fn parses_names_with_and_without_build_tag() {
        let w = parse_wheel_name("Typing_Extensions-4.9.0-1build-py3-none-any.whl").unwrap();
        assert_eq!(w.name.as_ref(), "typing-extensions");
        let w = parse_wheel_name("torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl").unwrap();
        assert_eq!(
            (w.python, w.abi, w.platform),
            (vec!["cp311".into()], vec!["cp311".into()], vec!["manylinux1_x86_64".into()])
        );
        assert!(parse_wheel_name("six-1.16.0.tar.gz").is_none());
        assert!(parse_wheel_name("six-py3-none-any.whl").is_none());
    }
}

/// The name and version of a source distribution's file: `{name}-{version}.tar.gz` (PEP 625),
/// or a legacy `.zip`, `.tar.bz2`, `.tar.xz`, `.tgz`, `.tar`, whose name may hold dashes
/// (`antlr4-python3-runtime-4.9.3.tar.gz`): the version is what follows the last dash that
/// leaves a valid version.
pub fn parse_sdist_name(filename: &str) -> Option<(PackageName, PackageVersion)> {
    let lower = filename.to_ascii_lowercase();
    let stem_len = [".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz", ".tar"]
        .iter()
        .find(|ext| lower.ends_with(*ext))
        .map(|ext| filename.len() - ext.len())?;
    let stem = &filename[..stem_len];
    let mut at = stem.len();
    while let Some(dash) = stem[..at].rfind('-') {
        if let (Ok(name), Ok(version)) =
            (PackageName::from_str(&stem[..dash]), PackageVersion::from_str(&stem[dash + 1..]))
        {
            return Some((name, version));
        }
        at = dash;
    }
    None
}

/// Whether `filename` is a source distribution ([`parse_sdist_name`]).
pub fn is_sdist(filename: &str) -> bool {
    parse_sdist_name(filename).is_some()
}

#[cfg(test)]
mod sdist_tests {
    use super::parse_sdist_name;

    #[test]
    fn sdist_names() {
        let (n, v) = parse_sdist_name("antlr4-python3-runtime-4.9.3.tar.gz").unwrap();
        assert_eq!((n.to_string().as_str(), v.to_string().as_str()), ("antlr4-python3-runtime", "4.9.3"));
        let (n, v) = parse_sdist_name("docopt-0.6.2.tar.gz").unwrap();
        assert_eq!((n.to_string().as_str(), v.to_string().as_str()), ("docopt", "0.6.2"));
        assert!(parse_sdist_name("Flask_Foo-1.0.zip").is_some());
        assert!(parse_sdist_name("six-1.16.0-py2.py3-none-any.whl").is_none());
        assert!(parse_sdist_name("nothing.tar.gz").is_none());
    }
}
