//! The glibc of an image, read from its layers: which `manylinux_2_NN` wheels it runs.
//!
//! glibc installs `libc.so.6` in the multiarch directory on Debian and Ubuntu
//! (`/usr/lib/x86_64-linux-gnu`, reached through `/lib` on merged-/usr systems) and in
//! `/usr/lib64` on RHEL and its rebuilds (the CUDA images on UBI and Rocky). Up to glibc 2.33
//! `libc.so.6` was a symlink to `libc-2.NN.so`, whose name gives the version; from 2.34 it is the
//! file itself, whose banner gives it ([`Glibc::of_banner`]). Nothing is executed: the file is
//! read as bytes, with a cap.

use std::fs::File;
use std::io::{BufReader, Read};

use stackbuild_common::{io_err, Compression, Glibc, IoError, LayerBlob};

/// The largest `libc.so.6` read (glibc 2.41's is 2 MB on `x86_64`).
const MAX_LIBC: u64 = 32 << 20;

/// Directories glibc's `libc.so.6` lives in, below `/` or `/usr`.
const LIB_DIRS: [&str; 4] = ["lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib"];

/// A layer entry where glibc's C library lives.
enum LibcEntry {
    /// `libc.so.6`: its banner (or its link's target) tells the version.
    Soname,
    /// `libc-2.NN.so`: its name does.
    Versioned(Glibc),
}

/// Whether `path` (a layer entry, without leading `./` or `/`) is where a glibc `libc.so.6`
/// (or its versioned file) lives.
fn libc_entry(path: &str) -> Option<LibcEntry> {
    let path = path.strip_prefix("usr/").unwrap_or(path);
    let (dir, name) = path.rsplit_once('/')?;
    if !LIB_DIRS.contains(&dir) {
        return None;
    }
    if name == "libc.so.6" {
        return Some(LibcEntry::Soname);
    }
    Glibc::of_file_name(name).map(LibcEntry::Versioned)
}

/// The glibc the layers (lowest first) leave in the image; `None` when none of them has a glibc
/// `libc.so.6` (a musl or scratch image). The topmost layer that has one decides.
pub fn glibc_of_layers(layers: &[LayerBlob]) -> Result<Option<Glibc>, IoError> {
    for blob in layers.iter().rev() {
        if let Some(found) = glibc_of_layer(blob)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The glibc one layer carries, if it carries one.
fn glibc_of_layer(blob: &LayerBlob) -> Result<Option<Glibc>, IoError> {
    let path = &blob.path;
    let err = |e| io_err("reading the layer", path)(e);
    let mut reader = BufReader::new(File::open(path).map_err(err)?);
    let compression = if let Some(c) = Compression::from_media_type(&blob.media_type) {
        c
    } else {
        let mut head = [0u8; 4];
        let n = reader.get_mut().read(&mut head).map_err(err)?;
        reader = BufReader::new(File::open(path).map_err(err)?);
        if head[..n].starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head[..n].starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    };
    let mut archive = tar::Archive::new(compression.decoder(reader).map_err(err)?);
    let mut found = None;
    for entry in archive.entries().map_err(err)? {
        let mut entry = entry.map_err(err)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let name = name.trim_start_matches("./").trim_start_matches('/');
        let Some(entry_kind) = libc_entry(name) else { continue };
        let by_name = match entry_kind {
            LibcEntry::Soname => None,
            LibcEntry::Versioned(g) => Some(g),
        };
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let by_banner = if entry.size() <= MAX_LIBC {
                    let mut bytes = Vec::new();
                    (&mut entry).take(MAX_LIBC).read_to_end(&mut bytes).map_err(err)?;
                    Glibc::of_banner(&bytes)
                } else {
                    None
                };
                found = by_banner.or(by_name).or(found);
            }
            tar::EntryType::Symlink => {
                // `libc.so.6 -> libc-2.31.so`: the target's name is the version.
                let target = entry.link_name_bytes().map(|t| String::from_utf8_lossy(&t).into_owned());
                let from_target =
                    target.as_deref().and_then(|t| Glibc::of_file_name(t.rsplit('/').next().unwrap_or(t)));
                found = from_target.or(by_name).or(found);
            }
            _ => {}
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (path, content of a file, target of a symlink).
    type Entry<'a> = (&'a str, Option<&'a [u8]>, Option<&'a str>);

    fn layer(dir: &std::path::Path, entries: &[Entry<'_>]) -> LayerBlob {
        let path = dir.join("layer.tar");
        let mut b = tar::Builder::new(File::create(&path).unwrap());
        for (name, data, link) in entries {
            let mut h = tar::Header::new_gnu();
            if let Some(target) = link {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, name, target).unwrap();
            } else {
                let data = data.unwrap_or_default();
                h.set_size(data.len() as u64);
                h.set_mode(0o644);
                b.append_data(&mut h, name, data).unwrap();
            }
        }
        b.finish().unwrap();
        LayerBlob {
            digest: String::new(),
            diff_id: String::new(),
            size: 0,
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            annotations: std::collections::BTreeMap::new(),
            path,
        }
    }

    #[test]
    fn reads_the_banner_the_versioned_name_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let banner: &[u8] =
            b"\x7fELF...GNU C Library (Ubuntu GLIBC 2.35-0ubuntu3.8) stable release version 2.35.\n";
        let jammy = layer(dir.path(), &[("usr/lib/x86_64-linux-gnu/libc.so.6", Some(banner), None)]);
        assert_eq!(glibc_of_layers(&[jammy]).unwrap(), Some(Glibc { minor: 35 }));
        let dir = tempfile::tempdir().unwrap();
        let focal = layer(
            dir.path(),
            &[
                ("lib/x86_64-linux-gnu/libc-2.31.so", Some(b"no banner here"), None),
                ("lib/x86_64-linux-gnu/libc.so.6", None, Some("libc-2.31.so")),
            ],
        );
        assert_eq!(glibc_of_layers(&[focal]).unwrap(), Some(Glibc { minor: 31 }));
        let dir = tempfile::tempdir().unwrap();
        let ubi =
            layer(dir.path(), &[("./usr/lib64/libc.so.6", Some(b"stable release version 2.34."), None)]);
        assert_eq!(glibc_of_layers(&[ubi]).unwrap(), Some(Glibc { minor: 34 }));
        // A file of that name elsewhere (a wheel's vendored copy) is not the image's glibc.
        let dir = tempfile::tempdir().unwrap();
        let other = layer(dir.path(), &[("opt/x/lib/libc.so.6", Some(b"release version 2.40."), None)]);
        assert_eq!(glibc_of_layers(&[other]).unwrap(), None);
    }
}
