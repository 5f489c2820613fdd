//! Which Debian package ships a library: the suite's `Contents-<arch>` index, as `apt-file`
//! reads it, for the fix line of a failed audit ("libGL.so.1 not found": Debian's `libgl1`).
//!
//! The index is fetched by apt with a private configuration in the cache and apt-file's index
//! target (`Acquire::IndexTargets::deb::Contents-deb`, apt-file's `50apt-file.conf`), so apt
//! checks the archive's signature (`InRelease`) and the index's hash, as for any index. Each
//! line of the index is a path and the packages that ship it (`usr/lib/x86_64-linux-gnu/libGL.so.1
//! libs/libgl1`; Debian's "Repository Format", Contents indices:
//! <https://wiki.debian.org/DebianRepository/Format#A.22Contents.22_indices>). Only the suite's
//! `main` is read: `non-free` holds the NVIDIA driver's libraries, which the host provides.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::path::Path;

use stackbuild_cache::Cache;

use crate::toolkit::apt_update;

/// The largest index read, uncompressed (bookworm's `main/Contents-amd64` is 148 MB).
const MAX_INDEX: u64 = 1 << 30;

/// For each library name in `sonames`, the Debian packages of `suite` (`main`, architecture
/// `arch`: `amd64`, `arm64`) that ship it in a directory the loader searches by default
/// (`/lib/<triplet>`, `/usr/lib/<triplet>`, `/lib`, `/usr/lib`), from the mirror `mirror`. A name
/// no package ships is absent from the map.
pub fn debian_providers(
    cache: &Cache,
    mirror: &str,
    suite: &str,
    arch: &str,
    sonames: &BTreeSet<String>,
) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let safe = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !safe(suite) || !safe(arch) {
        return Err(format!("not a suite and architecture: {suite:?} {arch:?}"));
    }
    let apt = cache.root().join("apt").join(format!("contents-{suite}-{arch}"));
    // The one index: the architecture literal (`$(ARCHITECTURE)` would add `Contents-all`,
    // 57 MB more), kept as the archive serves it (gzip; a host's `Acquire::GzipIndexes` would
    // store lz4), and none of the Packages, translations or AppStream indices.
    let target = "Acquire::IndexTargets::deb::Contents-deb";
    let options = [
        "Acquire::Languages=none".into(),
        format!("{target}::MetaKey=$(COMPONENT)/Contents-{arch}"),
        format!("{target}::ShortDescription=Contents-{arch}"),
        format!("{target}::Description=$(RELEASE)/$(COMPONENT) Contents-{arch}"),
        format!("{target}::KeepCompressed=true"),
        format!("{target}::KeepCompressedAs=gz"),
        format!("{target}::PDiffs=false"),
        "Acquire::IndexTargets::deb::Packages::DefaultEnabled=false".into(),
        "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
        "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".into(),
        "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false".into(),
    ];
    apt_update(&apt, mirror, suite, "main", arch, &options)
        .map_err(|e| format!("the Contents index of Debian {suite}: {e}"))?;
    let lists = apt.join("lists");
    let suffix = format!("_dists_{suite}_main_Contents-{arch}");
    let index = std::fs::read_dir(&lists)
        .map_err(|e| format!("reading {}: {e}", lists.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.strip_suffix(".gz").unwrap_or(n).ends_with(&suffix))
        })
        .ok_or_else(|| format!("apt fetched no Contents index of {suite} main for {arch}"))?;
    read_index(&index, arch, sonames)
}

/// Reads a `Contents` index (gzip or plain) for the packages shipping each of `sonames`.
fn read_index(
    index: &Path,
    arch: &str,
    sonames: &BTreeSet<String>,
) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let file = stackbuild_common::open_regular(index, "Contents index").map_err(|e| e.to_string())?;
    let raw: Box<dyn std::io::Read> = if index.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let triplet = match arch {
        "amd64" => "x86_64-linux-gnu",
        "arm64" => "aarch64-linux-gnu",
        other => other,
    };
    let dirs = [format!("usr/lib/{triplet}"), format!("lib/{triplet}"), "usr/lib".into(), "lib".into()];
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let reader = BufReader::new(std::io::Read::take(raw, MAX_INDEX));
    for line in reader.split(b'\n') {
        let line = line.map_err(|e| format!("{}: {e}", index.display()))?;
        let Ok(line) = std::str::from_utf8(&line) else { continue };
        // `path<spaces>section/package[,section/package...]`; the path may hold spaces.
        let Some((path, locations)) = line.trim_end().rsplit_once([' ', '\t']) else { continue };
        let path = path.trim_end();
        let Some((dir, name)) = path.rsplit_once('/') else { continue };
        if !sonames.contains(name) || !dirs.iter().any(|d| d == dir) {
            continue;
        }
        for location in locations.split(',') {
            let package = location.rsplit('/').next().unwrap_or(location);
            found.entry(name.to_owned()).or_default().insert(package.to_owned());
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::read_index;

    #[test]
    fn packages_that_ship_a_library_in_the_loaders_directories() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("x_dists_bookworm_main_Contents-amd64");
        std::fs::write(
            &index,
            "usr/lib/x86_64-linux-gnu/libGL.so.1                         libs/libgl1\n\
             usr/lib/x86_64-linux-gnu/libEGL.so.1                        libs/libegl1\n\
             usr/lib/x86_64-linux-gnu/nvidia/current/libGL.so.1          non-free/libs/libgl1-nvidia-glvnd-glx\n\
             usr/lib/x86_64-linux-gnu/libxkbcommon-x11.so.0              libs/libxkbcommon-x11-0,oldlibs/libxkbcommon-x11-0-compat\n\
             usr/share/doc/libGL.so.1                                    doc/oddity\n",
        )
        .unwrap();
        let want = ["libGL.so.1", "libxkbcommon-x11.so.0", "libmissing.so.3"].map(String::from).into();
        let found = read_index(&index, "amd64", &want).unwrap();
        assert_eq!(found["libGL.so.1"].iter().collect::<Vec<_>>(), ["libgl1"]);
        assert_eq!(
            found["libxkbcommon-x11.so.0"].iter().collect::<Vec<_>>(),
            ["libxkbcommon-x11-0", "libxkbcommon-x11-0-compat"]
        );
        assert!(!found.contains_key("libmissing.so.3") && !found.contains_key("libEGL.so.1"));
    }
}
