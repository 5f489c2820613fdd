//! Verified downloads of the pinned wheels for a target.
//!
//! The pip path: pip does the downloading (`pip download --no-deps --only-binary=:all: --platform ...
//! --python-version ... --implementation cp --require-hashes`), which brings the machine's
//! index configuration, proxies and certificates for free; we then hash every file ourselves
//! and move it into place atomically, so a file in the artifact directory is always complete and
//! always matches its name. The layout is `DEST/<sha256>/<wheel file name>`: the directory is
//! named by the content, and the wheel keeps the file name installers read its tags from.
//!
//! [`crate::download`] does the downloading: parallel connections, each file hashed as it
//! streams and resumed where it broke, with the machine's index configuration read the way pip
//! and uv read it. pip (`pip download`, above) remains for the configurations that module leaves
//! to it (a `file://` index, `trusted-host`, `client-cert`, CA certificates as a directory, or
//! `STACKBUILD_DOWNLOADER=pip`); both place files the same way ([`crate::artifact::place`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::artifact::{io, place, verified_hash, Artifact, FetchError};
use crate::solve::{Pinned, Target};
use stackbuild_common::parse_wheel_name;
use stackbuild_common::sha256_file;

/// Look in `dest` for an already fetched file of `pin` that fits `target`, re-hashing it; a
/// corrupted entry is removed so that it is downloaded again.
fn find_present(pin: &Pinned, target: &Target, dest: &Path) -> Result<Option<Artifact>, FetchError> {
    let mut best: Option<(usize, Artifact)> = None;
    for hash in &pin.hashes {
        let dir = dest.join(hash);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let files: Vec<_> = entries.filter_map(Result::ok).collect();
        let [entry] = files.as_slice() else { continue };
        let filename = entry.file_name().to_string_lossy().into_owned();
        let rank = if let Some(wheel) = parse_wheel_name(&filename) {
            if wheel.name != pin.name || wheel.version != pin.version {
                continue;
            }
            let Some(rank) = wheel.rank(&target.python, &target.platform_tags()) else { continue };
            rank
        } else {
            // A source distribution of the pin: last, as the downloader ranks it.
            match stackbuild_common::parse_sdist_name(&filename) {
                Some((name, version)) if name == pin.name && version == pin.version => usize::MAX,
                _ => continue,
            }
        };
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(io("reading", &path))?;
        if !meta.is_file() {
            continue;
        }
        let actual = verified_hash(&path, hash).map_err(io("hashing", &path))?;
        if actual != *hash {
            tracing::warn!(path = %path.display(), "cached wheel does not match its hash; fetching it again");
            std::fs::remove_dir_all(&dir).map_err(io("removing corrupted", &dir))?;
            continue;
        }
        let artifact = Artifact {
            name: pin.name.clone(),
            version: pin.version.clone(),
            filename,
            sha256: actual,
            size: meta.len(),
            path,
        };
        if best.as_ref().is_none_or(|(r, _)| rank < *r) {
            best = Some((rank, artifact));
        }
    }
    Ok(best.map(|(_, a)| a))
}

/// Download the wheels of `pins` for `target` into `dest_dir`, verified by sha256, and return
/// them in the order of `pins`. Artifacts already present (and still matching their hash) are
/// not downloaded again. `index` is the recipe's index, if it names one; otherwise pip's own
/// configuration applies. `memo` is the directory where pip's settings are remembered between
/// builds (`download::pip`); none asks pip each time.
pub fn fetch_wheels(
    pins: &[Pinned],
    target: &Target,
    sources: stackbuild_recipe::IndexSources<'_>,
    dest_dir: &Path,
    memo: Option<&Path>,
) -> Result<Vec<Artifact>, FetchError> {
    std::fs::create_dir_all(dest_dir).map_err(io("creating", dest_dir))?;
    let mut found: BTreeMap<usize, Artifact> = BTreeMap::new();
    let mut missing: Vec<usize> = Vec::new();
    for (i, pin) in pins.iter().enumerate() {
        match find_present(pin, target, dest_dir)? {
            Some(a) => {
                found.insert(i, a);
            }
            None => missing.push(i),
        }
    }
    if !missing.is_empty() {
        let wanted: Vec<&Pinned> = missing.iter().map(|&i| &pins[i]).collect();
        for (i, artifact) in missing.iter().zip(download(&wanted, target, sources, dest_dir, memo)?) {
            found.insert(*i, artifact);
        }
    }
    Ok(found.into_values().collect())
}

/// Put the recipe's own wheels (`[[python.wheel]]`) among `pins` into `dest_dir`, checked
/// against the pins' hashes, so that [`fetch_wheels`] finds them there and asks the index for
/// none of them. A wheel already in place is left alone (`fetch_wheels` re-hashes it).
pub fn import_local_wheels(
    wheels: &[stackbuild_recipe::LocalWheel],
    pins: &[Pinned],
    target: &Target,
    dest_dir: &Path,
) -> Result<(), FetchError> {
    for pin in pins {
        let Some(wheel) = wheels.iter().find(|w| w.name == pin.name && w.fits(target.platform)) else {
            continue;
        };
        if pin.hashes.iter().any(|h| dest_dir.join(h).join(&wheel.filename).is_file()) {
            continue;
        }
        std::fs::create_dir_all(dest_dir).map_err(io("creating", dest_dir))?;
        let tmp = tempfile::Builder::new()
            .prefix(".import-")
            .tempdir_in(dest_dir)
            .map_err(io("creating a temporary directory in", dest_dir))?;
        let copy = tmp.path().join(&wheel.filename);
        // A regular file only: a FIFO or a device would block the copy or never end it.
        let mut from = stackbuild_common::open_regular(&wheel.path, "wheel")?;
        let mut to = std::fs::File::create_new(&copy).map_err(io("creating", &copy))?;
        std::io::copy(&mut from, &mut to).map_err(io("copying", &wheel.path))?;
        let sha256 = sha256_file(&copy).map_err(io("hashing", &copy))?;
        if !pin.hashes.contains(&sha256) {
            return Err(FetchError::LocalChanged {
                path: wheel.path.clone(),
                sha256,
                pin: pin.to_string(),
                expected: pin.hashes.clone(),
            });
        }
        place(&copy, &wheel.filename, &sha256, tmp.path(), dest_dir)?;
    }
    Ok(())
}

/// Download `pins` with [`crate::download`], or with pip where the machine's configuration asks
/// for what only pip does (see that module). Returns one artifact per pin.
fn download(
    pins: &[&Pinned],
    target: &Target,
    sources: stackbuild_recipe::IndexSources<'_>,
    dest: &Path,
    memo: Option<&Path>,
) -> Result<Vec<Artifact>, FetchError> {
    match crate::download::Config::from_environment(sources, memo) {
        Ok(config) => crate::download::fetch(pins, target, &config, dest),
        Err(crate::download::Fallback(why)) => {
            tracing::info!("downloading with pip: {why}");
            pip_download(pins, target, sources, dest)
        }
    }
}

/// Run pip for `pins` into a temporary directory inside `dest` (same file system, so the final
/// rename is atomic), verify, and move each file into place. Returns one artifact per pin.
fn pip_download(
    pins: &[&Pinned],
    target: &Target,
    sources: stackbuild_recipe::IndexSources<'_>,
    dest: &Path,
) -> Result<Vec<Artifact>, FetchError> {
    let tmp = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(dest)
        .map_err(io("creating a temporary directory in", dest))?;
    let download_dir = tmp.path().join("download");
    let requirements = tmp.path().join("requirements.txt");
    let mut reqs = String::new();
    for pin in pins {
        reqs.push_str(&pin.to_string());
        for h in &pin.hashes {
            reqs.push_str(" --hash=sha256:");
            reqs.push_str(h);
        }
        reqs.push('\n');
    }
    std::fs::write(&requirements, reqs).map_err(io("writing", &requirements))?;

    let mut cmd = Command::new("python3");
    // `--no-cache-dir`: the cache keeps every wheel verified by its hash (`find_present`), so
    // pip's HTTP cache would only be a second copy of each download, written as it arrives:
    // torch 2.1.0's 670 MB wheel took 7.5 s of CPU with it and 4.2 s without (`time`, pip 23.2).
    cmd.args(["-m", "pip", "download", "--no-cache-dir", "--no-deps", "--only-binary=:all:"])
        .args(["--require-hashes", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"])
        .args(["--implementation", "cp", "--python-version", &target.python_minor()])
        .args(["--abi", &target.python_tag(), "--abi", "abi3", "--abi", "none"]);
    for tag in target.platform_tags() {
        cmd.args(["--platform", &tag]);
    }
    // `--opt=value`: one argument, so a value that starts with `-` stays a value.
    if let Some(index) = sources.index {
        cmd.arg(format!("--index-url={index}"));
    }
    for extra in sources.extra {
        cmd.arg(format!("--extra-index-url={extra}"));
    }
    for links in sources.find_links {
        cmd.arg(format!("--find-links={links}"));
    }
    cmd.arg("-d").arg(&download_dir).arg("-r").arg(&requirements);
    let spinner = stackbuild_common::Progress::spinner(format!("downloading {} wheel(s)", pins.len()));
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| FetchError::PipMissing { reason: format!("running python3: {e}") })?;
    drop(spinner);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("No module named pip") {
            return Err(FetchError::PipMissing { reason: stderr.trim().to_owned() });
        }
        return Err(download_error(pins, target, &stderr));
    }

    // Hash what pip wrote and match each file to its pin by name, version and hash.
    let mut by_pin: Vec<Option<Artifact>> = vec![None; pins.len()];
    let entries = std::fs::read_dir(&download_dir).map_err(io("reading", &download_dir))?;
    for entry in entries {
        let entry = entry.map_err(io("reading", &download_dir))?;
        let path = entry.path();
        let filename = entry.file_name().to_string_lossy().into_owned();
        let Some(wheel) = parse_wheel_name(&filename) else {
            return Err(FetchError::Download {
                artifacts: pins.iter().map(ToString::to_string).collect(),
                target: target.to_string(),
                reason: format!("pip wrote {filename:?}, which is not a wheel"),
            });
        };
        let Some(i) = pins.iter().position(|p| p.name == wheel.name && p.version == wheel.version) else {
            continue;
        };
        let sha256 = sha256_file(&path).map_err(io("hashing", &path))?;
        if !pins[i].hashes.contains(&sha256) {
            return Err(FetchError::HashMismatch {
                filename,
                sha256,
                pin: pins[i].to_string(),
                expected: pins[i].hashes.clone(),
            });
        }
        let size = std::fs::metadata(&path).map_err(io("reading", &path))?.len();
        let final_path = place(&path, &filename, &sha256, tmp.path(), dest)?;
        by_pin[i] = Some(Artifact {
            name: pins[i].name.clone(),
            version: pins[i].version.clone(),
            filename,
            sha256,
            size,
            path: final_path,
        });
    }
    pins.iter()
        .zip(by_pin)
        .map(|(pin, a)| {
            a.ok_or_else(|| FetchError::Missing { pin: pin.to_string(), target: target.to_string() })
        })
        .collect()
}

/// A download error naming the artifacts pip complains about (all of them when it names none),
/// with pip's `ERROR:` text as the reason.
fn download_error(pins: &[&Pinned], target: &Target, stderr: &str) -> FetchError {
    let reason = stderr.find("ERROR:").map_or(stderr, |i| &stderr[i..]).trim();
    let lower = reason.to_ascii_lowercase();
    let named: Vec<String> = pins
        .iter()
        .filter(|p| {
            let spec = p.to_string();
            lower.contains(&spec) || lower.contains(&spec.replace('-', "_"))
        })
        .map(ToString::to_string)
        .collect();
    let artifacts = if named.is_empty() { pins.iter().map(ToString::to_string).collect() } else { named };
    FetchError::Download { artifacts, target: target.to_string(), reason: reason.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackbuild_common::Platform;
    use stackbuild_recipe::IndexSources;

    fn target() -> Target {
        Target::new("3.11".parse().unwrap(), Platform::LinuxAmd64)
    }

    fn pin(spec: &str, hashes: &[&str]) -> Pinned {
        let (name, version) = spec.split_once("==").unwrap();
        Pinned {
            name: name.parse().unwrap(),
            version: version.parse().unwrap(),
            hashes: hashes.iter().map(|h| (*h).to_owned()).collect(),
        }
    }

    /// An index that refuses connections: any attempt to download fails.
    const NO_INDEX: &str = "http://127.0.0.1:9/simple";

    fn no_index() -> IndexSources<'static> {
        IndexSources { index: Some(NO_INDEX), ..IndexSources::default() }
    }

    #[test]
    fn hashes_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(sha256_file(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn wheel_names_and_tags() {
        let t = target();
        let rank = |f: &str| parse_wheel_name(f).unwrap().rank(&t.python, &t.platform_tags());
        assert_eq!(rank("six-1.16.0-py2.py3-none-any.whl"), Some(t.platform_tags().len()));
        assert!(rank("numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl").is_some());
        assert!(
            rank("torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl").unwrap()
                > rank("x-1-cp311-cp311-manylinux_2_28_x86_64.whl").unwrap()
        );
        assert!(rank("x-1-cp39-abi3-manylinux2014_x86_64.whl").is_some());
        assert_eq!(rank("x-1-cp312-cp312-manylinux2014_x86_64.whl"), None);
        assert_eq!(rank("x-1-cp311-cp311-manylinux2014_aarch64.whl"), None);
        assert_eq!(rank("x-1-cp311-cp311-manylinux_2_31_x86_64.whl"), None);
        assert_eq!(rank("x-1-cp311-cp311-win_amd64.whl"), None);
    }

    /// A present, intact artifact is used without running pip (the index here refuses
    /// connections); a corrupted one is removed and fetched again, which then fails and names it.
    #[test]
    fn reuses_present_artifacts() {
        let dest = tempfile::tempdir().unwrap();
        let content = b"not really a wheel";
        let hash = stackbuild_common::sha256_bytes(content).trim_start_matches("sha256:").to_owned();
        let dir = dest.path().join(&hash);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("six-1.16.0-py2.py3-none-any.whl"), content).unwrap();
        let pins = [pin("six==1.16.0", &[&hash])];
        let got = fetch_wheels(&pins, &target(), no_index(), dest.path(), None).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].sha256, hash);
        assert_eq!(got[0].size, content.len() as u64);
        assert_eq!(got[0].path, dir.join("six-1.16.0-py2.py3-none-any.whl"));

        // A wheel for another platform is not taken for this one.
        let arm = Target::new("3.11".parse().unwrap(), Platform::LinuxArm64);
        let other = tempfile::tempdir().unwrap();
        let d = other.path().join(&hash);
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("six-1.16.0-cp311-cp311-manylinux2014_x86_64.whl"), content).unwrap();
        assert!(find_present(&pins[0], &arm, other.path()).unwrap().is_none());
        assert!(find_present(&pins[0], &target(), other.path()).unwrap().is_some());

        // Corrupt it: the entry is dropped and a download is attempted.
        std::fs::write(dir.join("six-1.16.0-py2.py3-none-any.whl"), b"tampered").unwrap();
        assert!(find_present(&pins[0], &target(), dest.path()).unwrap().is_none());
        assert!(!dir.exists());
    }

    #[test]
    fn download_errors_name_the_artifact() {
        let pins = [pin("six==1.16.0", &["a"]), pin("numpy==1.26.4", &["b"])];
        let refs: Vec<&Pinned> = pins.iter().collect();
        let stderr = "Collecting numpy==1.26.4\nERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE \
                      REQUIREMENTS FILE.\n    numpy==1.26.4 from ...\n";
        let e = download_error(&refs, &target(), stderr).to_string();
        assert!(
            e.starts_with("downloading numpy==1.26.4 for cp311/x86_64-manylinux_2_28 failed: ERROR: THESE"),
            "{e}"
        );
        let e = download_error(&refs, &target(), "ERROR: network down").to_string();
        assert!(e.starts_with("downloading six==1.16.0, numpy==1.26.4 for"), "{e}");
    }

    /// Resolves and fetches two tiny wheels from the machine's configured index.
    #[test]
    fn resolves_and_fetches_from_the_index() {
        let text = "[image]\nname = \"t\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
                    packages = [\"six==1.16.0\", \"packaging==23.2\"]\n";
        let recipe = stackbuild_recipe::Recipe::parse("t.toml", text).unwrap();
        let python = recipe.python.as_ref().unwrap();
        let pins = crate::solve::resolve(python, &target(), &[]).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let got = fetch_wheels(&pins, &target(), IndexSources::default(), dest.path(), None).unwrap();
        let summary: Vec<(String, String, String)> =
            got.iter().map(|a| (a.name.to_string(), a.filename.clone(), a.sha256.clone())).collect();
        assert_eq!(
            summary,
            [
                (
                    "packaging".to_owned(),
                    "packaging-23.2-py3-none-any.whl".to_owned(),
                    "8c491190033a9af7e1d931d0b5dacc2ef47509b34dd0de67ed209b5203fc88c7".to_owned()
                ),
                (
                    "six".to_owned(),
                    "six-1.16.0-py2.py3-none-any.whl".to_owned(),
                    "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254".to_owned()
                ),
            ]
        );
        for a in &got {
            assert_eq!(sha256_file(&a.path).unwrap(), a.sha256);
            assert_eq!(a.path, dest.path().join(&a.sha256).join(&a.filename));
            assert_eq!(std::fs::metadata(&a.path).unwrap().len(), a.size);
        }
        // Only the artifact directories remain, no temporary ones.
        assert_eq!(std::fs::read_dir(dest.path()).unwrap().count(), 2);
        // Fetching again touches no index.
        let again = fetch_wheels(&pins, &target(), no_index(), dest.path(), None).unwrap();
        assert_eq!(again, got);

        // A version that does not exist fails and names the artifact.
        let bogus =
            [pin("six==0.0.0.1", &["0000000000000000000000000000000000000000000000000000000000000000"])];
        let e = fetch_wheels(&bogus, &target(), IndexSources::default(), dest.path(), None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("downloading six==0.0.0.1 from "), "{e}");
        assert!(e.contains(" failed: no file of six 0.0.0.1"), "{e}");
    }
}
