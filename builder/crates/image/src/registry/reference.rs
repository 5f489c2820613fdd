//! Image references: `HOST[:PORT]/NAME[:TAG][@sha256:HEX]`.
//!
//! The grammar follows distribution's `reference` package
//! (<https://github.com/distribution/reference/blob/main/reference.go>), with one deliberate
//! difference: there is no default registry. A reference whose first component is not a host
//! (`name:tag`, `library/name`) is refused with a message asking for one, so that an image is never
//! sent to, or taken from, a registry the user did not name.

use std::fmt;
use std::str::FromStr;

use super::RegistryError;
use stackbuild_cache::sha256_hex;

/// Longest repository name distribution accepts.
const MAX_REPOSITORY: usize = 255;
/// Longest tag distribution accepts.
const MAX_TAG: usize = 128;

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference {
    /// The registry: `host`, `host:port` or `[v6addr]:port`.
    pub registry: String,
    /// The repository inside the registry (`ns/name`).
    pub repository: String,
    /// The tag, if given.
    pub tag: Option<String>,
    /// The manifest digest (`sha256:<hex>`), if given.
    pub digest: Option<String>,
}

impl Reference {
    /// Parses `HOST[:PORT]/NAME[:TAG][@sha256:HEX]`.
    pub fn parse(input: &str) -> Result<Self, RegistryError> {
        let bad = |reason: &str| RegistryError::BadReference {
            reference: input.to_string(),
            reason: reason.to_string(),
        };
        if input.contains("://") {
            return Err(bad("give HOST[:PORT]/NAME[:TAG] without a URL scheme"));
        }
        let (rest, digest) = match input.split_once('@') {
            Some((rest, digest)) => {
                if !digest.starts_with("sha256:") {
                    return Err(bad("only sha256 digests are supported"));
                }
                sha256_hex(digest)
                    .map_err(|_| bad("malformed digest: expected sha256: and 64 lowercase hex digits"))?;
                (rest, Some(digest.to_string()))
            }
            None => (input, None),
        };
        let slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[slash..].rfind(':') {
            Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..])),
            None => (rest, None),
        };
        let Some((registry, repository)) = name.split_once('/').filter(|(host, _)| looks_like_host(host))
        else {
            return Err(RegistryError::NoRegistryHost { reference: input.to_string() });
        };
        check_host(registry).map_err(|reason| bad(&reason))?;
        check_repository(repository).map_err(|reason| bad(&reason))?;
        if let Some(tag) = tag {
            check_tag(tag).map_err(|reason| bad(&reason))?;
        }
        Ok(Self {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// The host of the registry, without the port (and without brackets for IPv6).
    pub fn host(&self) -> &str {
        host_of(&self.registry)
    }

    /// What to ask the registry for: the digest if there is one, else the tag, else `latest`.
    pub fn manifest_reference(&self) -> &str {
        self.digest.as_deref().or(self.tag.as_deref()).unwrap_or("latest")
    }

    /// The same repository with another tag and no digest.
    #[must_use]
    pub fn with_tag(&self, tag: &str) -> Self {
        Self { tag: Some(tag.to_string()), digest: None, ..self.clone() }
    }
}

impl FromStr for Reference {
    type Err = RegistryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// The host of `host[:port]` or `[v6]:port`.
pub(super) fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(host, _)| host);
    }
    registry.split_once(':').map_or(registry, |(host, _)| host)
}

/// Docker's rule for telling a registry host from a first path component: it has a `.` or a
/// `:`, is `localhost`, or is a bracketed IPv6 address.
fn looks_like_host(component: &str) -> bool {
    component.contains(['.', ':']) || component == "localhost" || component.starts_with('[')
}

fn check_host(registry: &str) -> Result<(), String> {
    let (host, port) = if let Some(rest) = registry.strip_prefix('[') {
        let (addr, after) = rest.split_once(']').ok_or("unclosed `[` in the registry host")?;
        if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return Err(format!("invalid IPv6 registry address {addr:?}"));
        }
        (None, if after.is_empty() { None } else { Some(after.strip_prefix(':').ok_or("junk after `]`")?) })
    } else {
        match registry.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(registry), None),
        }
    };
    if let Some(host) = host {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !host.split('.').all(label_ok) {
            return Err(format!("invalid registry host {host:?}"));
        }
    }
    if let Some(port) = port {
        if port.parse::<u16>().is_err() {
            return Err(format!("invalid registry port {port:?}"));
        }
    }
    Ok(())
}

/// Path components are lowercase alphanumerics separated by `.`, `_`, `__` or runs of `-`.
pub(super) fn check_repository(repository: &str) -> Result<(), String> {
    if repository.len() > MAX_REPOSITORY {
        return Err(format!("repository name longer than {MAX_REPOSITORY} characters"));
    }
    for component in repository.split('/') {
        let bytes = component.as_bytes();
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let mut ok = bytes.first().is_some_and(alnum) && bytes.last().is_some_and(alnum);
        let mut i = 0;
        while ok && i < bytes.len() {
            if alnum(&bytes[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && !alnum(&bytes[i]) {
                i += 1;
            }
            let sep = &component[start..i];
            ok = matches!(sep, "." | "_" | "__") || sep.bytes().all(|b| b == b'-');
        }
        if !ok {
            return Err(format!(
                "invalid repository component {component:?}: use lowercase letters, digits and \
                 single `.`, `_`, `__` or `-` between them"
            ));
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), String> {
    let ok = !tag.is_empty()
        && tag.len() <= MAX_TAG
        && tag.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        && !tag.starts_with(['.', '-']);
    if ok {
        Ok(())
    } else {
        Err(format!("invalid tag {tag:?}: up to {MAX_TAG} of [A-Za-z0-9_.-], not starting with `.` or `-`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_host_port_name_tag() {
        let r = Reference::parse("127.0.0.1:5000/name:tag").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "name");
        assert_eq!(r.tag.as_deref(), Some("tag"));
        assert_eq!(r.digest, None);
        assert_eq!(r.host(), "127.0.0.1");
        assert_eq!(r.to_string(), "127.0.0.1:5000/name:tag");
    }

    #[test]
    fn parses_nested_name_and_digest() {
        let r = Reference::parse(&format!("registry.example/ns/sub/name@{D}")).unwrap();
        assert_eq!(r.registry, "registry.example");
        assert_eq!(r.repository, "ns/sub/name");
        assert_eq!(r.tag, None);
        assert_eq!(r.digest.as_deref(), Some(D));
        assert_eq!(r.manifest_reference(), D);
        let r = Reference::parse(&format!("localhost/a__b.c-d--e:v1.0_x@{D}")).unwrap();
        assert_eq!(r.repository, "a__b.c-d--e");
        assert_eq!(r.tag.as_deref(), Some("v1.0_x"));
        assert_eq!(r.to_string(), format!("localhost/a__b.c-d--e:v1.0_x@{D}"));
        let r = Reference::parse("[::1]:5000/x").unwrap();
        assert_eq!(r.host(), "::1");
        assert_eq!(r.manifest_reference(), "latest");
    }

    #[test]
    fn a_registry_host_is_required() {
        for input in ["name:tag", "name", "library/name:tag", "ns/name"] {
            let err = Reference::parse(input).unwrap_err();
            assert!(matches!(err, RegistryError::NoRegistryHost { .. }), "{input}: {err}");
            assert!(err.to_string().contains("registry host"), "{err}");
        }
    }

    #[test]
    fn rejects_malformed_references() {
        for input in [
            "http://host:5000/name",
            "host:5000/Name",
            "host:5000/name:",
            "host:5000/name:-tag",
            "host:5000/na..me",
            "host:5000/name/",
            "host:5000//name",
            "host:99999/name",
            "host:port/name",
            "-host.x/name",
            "host:5000/name@sha256:abc",
            &format!("host:5000/name@sha512:{}", &D[7..]),
            "[::1/name",
        ] {
            assert!(
                matches!(Reference::parse(input), Err(RegistryError::BadReference { .. })),
                "{input} was accepted"
            );
        }
    }
}
