//! Wheel file names (PEP 427, "File name convention"):
//! `{distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl`, where each
//! tag may be a `.`-separated set (<https://packaging.python.org/en/latest/specifications/binary-distribution-format/#file-name-convention>).
//! A leaf module: the recipe validates `[[python.wheel]]` names with it, the solver reads wheel
//! URLs with it, and the fetcher ranks the files it finds by their tags.

use std::str::FromStr;

use pep508_rs::PackageName;
use stackcontract::version::PackageVersion;

/// The parts of a wheel file name (PEP 427): `{name}-{version}(-{build})?-{py}-{abi}-{plat}.whl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WheelName {
    pub name: PackageName,
    pub version: PackageVersion,
    pub python: Vec<String>,
    pub abi: Vec<String>,
    pub platform: Vec<String>,
}

pub(crate) fn parse_wheel_name(filename: &str) -> Option<WheelName> {
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
