//! The driver's user-space libraries: `libcuda.so.1` and `libnvidia-ml.so.1` in each of
//! [`LIBRARY_DIRS`], each symlink chain followed inside the host root to the file that carries the
//! driver version in its name, and toolkit stubs installed as `libcuda.so`.

use std::os::fd::OwnedFd;

use rustix::fs::FileType;
use serde::Serialize;

use super::hostfs::{self, HostFs, ReadError};
use super::{abs, parse, HostProbe, Reader};

/// The directories searched for the driver's user-space libraries.
pub const LIBRARY_DIRS: [&str; 5] = [
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib/wsl/lib",
    "usr/local/nvidia/lib64",
];

/// The libraries whose symlink chains are followed.
pub const LIBRARIES: [&str; 2] = ["libcuda.so.1", "libnvidia-ml.so.1"];

/// How a library's symlink chain ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChainEnd {
    /// At a regular file.
    File,
    /// At a link whose target does not exist.
    Dangling,
    /// After more than 8 links.
    TooManyLinks,
    /// At something that is not a regular file, or a read error.
    Unusable {
        /// Why.
        why: String,
    },
}

/// A driver library found in one of [`LIBRARY_DIRS`], with its symlink chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibraryProbe {
    /// The name looked for (`libcuda.so.1`).
    pub name: String,
    /// Where it was found (`/usr/lib/x86_64-linux-gnu/libcuda.so.1`).
    pub path: String,
    /// Each link target in turn, re-rooted (`/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05`).
    pub chain: Vec<String>,
    /// How the chain ended.
    pub end: ChainEnd,
    /// The version in the final file's name (`535.104.05`); none for a bare `.so.1` file.
    pub version: Option<String>,
}

impl LibraryProbe {
    /// The last path of the chain.
    pub fn final_path(&self) -> &str {
        self.chain.last().unwrap_or(&self.path)
    }

    /// The final file's name.
    pub fn final_name(&self) -> &str {
        self.final_path().rsplit('/').next().unwrap_or("")
    }
}

impl Reader {
    /// Follows `dir/name`'s symlink chain inside the host root, at most 8 links. `dir_fd` is
    /// `dir` opened; a link within the same directory reuses it.
    fn chain(&mut self, dir: &str, dir_fd: &OwnedFd, name: &str, stem: &str) -> Option<LibraryProbe> {
        const MAX_HOPS: usize = 8;
        let start = format!("{dir}/{name}");
        let mut path = start.clone();
        let mut chain = Vec::new();
        let mut end = ChainEnd::TooManyLinks;
        let mut other_dir: Option<(String, OwnedFd)> = None;
        for hop in 0..=MAX_HOPS {
            let (d, n) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            let fd = if d == dir {
                Ok(dir_fd)
            } else {
                if other_dir.as_ref().is_none_or(|(od, _)| od != d) {
                    other_dir = self.fs.open_dir(d).ok().map(|fd| (d.to_owned(), fd));
                }
                other_dir.as_ref().map(|(_, fd)| fd).ok_or(ReadError::NotFound)
            };
            match fd.and_then(|fd| HostFs::lstat_in(fd, n).map(|st| (fd, st))) {
                Err(ReadError::NotFound) if hop == 0 => return None,
                Err(ReadError::NotFound) => {
                    end = ChainEnd::Dangling;
                    break;
                }
                Err(e) => {
                    end = ChainEnd::Unusable { why: e.to_string() };
                    break;
                }
                Ok((fd, st)) => match FileType::from_raw_mode(st.st_mode) {
                    FileType::Symlink if hop < MAX_HOPS => match HostFs::readlink_in(fd, n) {
                        Ok(target) => {
                            path = rejoin(&path, &target);
                            chain.push(abs(&path));
                        }
                        Err(e) => {
                            end = ChainEnd::Unusable { why: e.to_string() };
                            break;
                        }
                    },
                    FileType::Symlink => break,
                    FileType::RegularFile => {
                        end = ChainEnd::File;
                        break;
                    }
                    other => {
                        end = ChainEnd::Unusable { why: format!("ends at a {}", hostfs::type_name(other)) };
                        break;
                    }
                },
            }
        }
        let final_name = path.rsplit('/').next().unwrap_or("");
        let version = match end {
            ChainEnd::File => {
                parse::so_version(final_name, stem).filter(|v| v.contains('.')).map(str::to_owned)
            }
            _ => None,
        };
        Some(LibraryProbe { name: name.to_owned(), path: abs(&start), chain, end, version })
    }

    pub(super) fn libraries(&mut self, p: &mut HostProbe) {
        for dir in LIBRARY_DIRS {
            let fd = match self.fs.open_dir(dir) {
                Ok(fd) => fd,
                Err(e) => {
                    self.note(dir, &e);
                    continue;
                }
            };
            for name in LIBRARIES {
                let stem = name.trim_end_matches(".1");
                if let Some(lib) = self.chain(dir, &fd, name, stem) {
                    p.libraries.push(lib);
                }
            }
            // A toolkit stub named libcuda.so: a regular file, or a link into a stubs directory.
            // WSL2's directory holds regular files by design (Windows mounts cannot hold links).
            if dir == "usr/lib/wsl/lib" {
                continue;
            }
            if let Some(lib) = self.chain(dir, &fd, "libcuda.so", "libcuda.so") {
                let stub = lib.end == ChainEnd::File
                    && (lib.final_name() == "libcuda.so" || lib.final_path().contains("/stubs/"));
                if stub {
                    p.libcuda_stubs.push(lib.final_path().to_owned());
                }
            }
        }
    }
}

/// The path a link at `link` (relative to the root) with `target` points to, relative to the
/// root: absolute targets are re-rooted, `..` never climbs above the root.
fn rejoin(link: &str, target: &str) -> String {
    let mut parts: Vec<&str> = if target.starts_with('/') {
        Vec::new()
    } else {
        let mut v: Vec<&str> = link.split('/').filter(|c| !c.is_empty()).collect();
        v.pop();
        v
    };
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join("/")
}
