//! `stackbuild audit IMAGE`.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use stackbuild::audit::audit_layout;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The image: an OCI layout directory (`DIR` or `DIR:TAG`) or an archive written by
    /// `--archive` / `docker save` of an OCI-layout image.
    image: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let (path, tag) = split_tag(&self.image);
        let tmp;
        let layout = if path.is_file() {
            tmp = tempfile::tempdir()?;
            extract_layout(&path, tmp.path())
                .with_context(|| format!("reading the archive {}", path.display()))?;
            tmp.path().to_owned()
        } else {
            path
        };
        let report = audit_layout(&layout, tag.as_deref())?;
        if self.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", report.render_human());
        }
        Ok(if report.has_errors() {
            std::process::ExitCode::FAILURE
        } else {
            std::process::ExitCode::SUCCESS
        })
    }
}

/// `DIR:TAG` -> (DIR, TAG), unless `DIR:TAG` itself exists.
fn split_tag(image: &str) -> (PathBuf, Option<String>) {
    if Path::new(image).exists() {
        return (PathBuf::from(image), None);
    }
    match image.rsplit_once(':') {
        Some((dir, tag)) if !tag.contains('/') && Path::new(dir).exists() => {
            (PathBuf::from(dir), Some(tag.to_owned()))
        }
        _ => (PathBuf::from(image), None),
    }
}

/// Copies an image archive's layout files into `dir`. Only the names a layout has are
/// accepted (`oci-layout`, `index.json`, `manifest.json`, `blobs/sha256/<64 hex>`), as regular
/// files: nothing in the archive can name a path outside `dir` or plant a link.
fn extract_layout(archive: &Path, dir: &Path) -> anyhow::Result<()> {
    let mut tar = tar::Archive::new(std::io::BufReader::new(std::fs::File::open(archive)?));
    std::fs::create_dir_all(dir.join("blobs/sha256"))?;
    for entry in tar.entries()? {
        let mut entry = entry?;
        let name = entry.path()?.to_string_lossy().trim_start_matches("./").to_owned();
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        let allowed = matches!(name.as_str(), "oci-layout" | "index.json" | "manifest.json")
            || name
                .strip_prefix("blobs/sha256/")
                .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        if !allowed {
            continue;
        }
        if !kind.is_file() {
            bail!("{name} in the archive is not a regular file");
        }
        let mut out =
            std::fs::File::create_new(dir.join(&name)).with_context(|| format!("writing {name}"))?;
        std::io::copy(&mut (&mut entry).take(u64::MAX), &mut out)?;
    }
    Ok(())
}
