//! Parsers for the text the kernel and the NVIDIA driver publish under `/proc` and `/sys`.
//!
//! Each takes the file's text and returns what it found, or nothing; none of them fail loudly,
//! since a host file that does not parse is a finding, not a crash.

use serde::Serialize;

/// The `NVRM version:` line of `proc/driver/nvidia/version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvrmLine {
    /// The line as printed.
    pub line: String,
    /// The number printed between double spaces (a driver version, or on Jetson the L4T
    /// release).
    pub number: Option<String>,
    /// Whether it names the open kernel module ("Open Kernel Module").
    pub open: bool,
}

/// Parses `proc/driver/nvidia/version`.
///
/// The version is the field between double spaces (kernel-open/nvidia/nv-procfs.c prints
/// `"NVRM version: NVIDIA UNIX %s Kernel Module  %s  %s"`), so the words before it may change
/// without breaking the parse: `... Kernel Module  580.173.02  Tue Jun ...`,
/// `... Open Kernel Module for x86_64  565.57.01  Release Build ...`.
pub fn nvrm_version(text: &str) -> Option<NvrmLine> {
    let line = text.lines().find(|l| l.trim_start().starts_with("NVRM version:"))?.trim();
    let mut fields = line.split("  ").map(str::trim).filter(|f| !f.is_empty());
    let head = fields.next().unwrap_or("");
    let number = fields.find(|f| is_dotted_number(f)).map(str::to_owned);
    Some(NvrmLine { line: line.to_owned(), number, open: head.contains("Open Kernel Module") })
}

/// `535.104.05`-like: digits separated by single dots.
pub fn is_dotted_number(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// One line of `proc/modules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleLine {
    /// Module name (`nvidia_uvm`).
    pub name: String,
    /// `Live`, `Loading` or `Unloading`.
    pub state: String,
    /// The taint letters in parentheses at the end (`POE`), empty when none.
    pub taint: String,
    /// The line as printed.
    pub line: String,
}

/// Parses `proc/modules`: `name size refcount users state address [(taint)]`
/// (kernel/module/procfs.c `m_show`).
pub fn modules(text: &str) -> Vec<ModuleLine> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            let name = *fields.first()?;
            let state = fields.get(4).copied().unwrap_or("");
            let taint = fields
                .last()
                .and_then(|f| f.strip_prefix('('))
                .and_then(|f| f.strip_suffix(')'))
                .filter(|_| fields.len() > 6)
                .unwrap_or("");
            Some(ModuleLine {
                name: name.to_owned(),
                state: state.to_owned(),
                taint: taint.to_owned(),
                line: line.trim_end().to_owned(),
            })
        })
        .collect()
}

/// The `Character devices:` section of `proc/devices`: `(major, name)` pairs.
pub fn char_devices(text: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut in_char = false;
    for line in text.lines() {
        let t = line.trim();
        if t.ends_with(':') {
            in_char = t == "Character devices:";
            continue;
        }
        if !in_char {
            continue;
        }
        if let Some((major, name)) = t.split_once(char::is_whitespace) {
            if let Ok(major) = major.parse() {
                out.push((major, name.trim().to_owned()));
            }
        }
    }
    out
}

/// `Key: value` lines, as in `proc/driver/nvidia/gpus/*/information` (the value may itself hold
/// colons, as `Bus Location: 0000:17:00.0` does).
pub fn key_values(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// A sysfs hex number (`0x10de`, `0x030200`).
pub fn hex_u32(text: &str) -> Option<u32> {
    let t = text.trim();
    let digits = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
    u32::from_str_radix(digits, 16).ok()
}

/// A PCI bus id in the canonical lowercase form `dddd:bb:dd.f`; a missing domain means 0.
///
/// `proc/driver/nvidia/gpus` and sysfs print `0000:17:00.0`; `nvidia-smi` prints
/// `00000000:17:00.0`, which this also accepts.
pub fn bus_id(text: &str) -> Option<String> {
    let t = text.trim().to_ascii_lowercase();
    let (rest, func) = t.rsplit_once('.')?;
    let mut parts: Vec<&str> = rest.split(':').collect();
    if parts.len() == 2 {
        parts.insert(0, "0");
    }
    if parts.len() != 3 {
        return None;
    }
    let domain = u32::from_str_radix(parts[0], 16).ok()?;
    let bus = u8::from_str_radix(parts[1], 16).ok()?;
    let dev = u8::from_str_radix(parts[2], 16).ok()?;
    let func = u8::from_str_radix(func, 16).ok()?;
    if domain > 0xffff || dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// A MIG index `<gpu>:<mig>` (`0:1`), as libnvidia-container selects MIG devices by position:
/// the `mig`-th MIG device of GPU `gpu`.
pub fn mig_index(text: &str) -> Option<(usize, usize)> {
    let (gpu, mig) = text.split_once(':')?;
    let number =
        |s: &str| if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) { s.parse().ok() } else { None };
    Some((number(gpu)?, number(mig)?))
}

/// One MIG device of the recorded `nvidia-smi -L`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigRecord {
    /// `MIG-…`.
    pub uuid: String,
    /// The parent GPU's UUID (`GPU-…`).
    pub parent_uuid: String,
    /// `Device N` under its parent: the `N` of a `<gpu>:<N>` MIG index.
    pub index: usize,
}

/// The MIG devices of an `nvidia-smi -L` listing, each under the GPU line before it:
///
/// ```text
/// GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
///   MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1e8-a5d4-5a1e-8c42-2d8c2e3b2b3f)
/// ```
///
/// Lines that are neither are ignored; at most [`crate::probe::MAX_GPUS`] × 8 devices are kept.
pub fn nvidia_smi_list(text: &str) -> Vec<MigRecord> {
    let uuid_of = |line: &str| {
        let start = line.find("(UUID: ")? + "(UUID: ".len();
        let end = line[start..].find(')')? + start;
        Some(line[start..end].trim().to_owned())
    };
    let mut parent: Option<String> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("GPU ") {
            parent = uuid_of(t);
        } else if t.starts_with("MIG ") {
            let index = t
                .find("Device")
                .and_then(|i| t[i + "Device".len()..].split(':').next())
                .and_then(|n| n.trim().parse().ok());
            if let (Some(parent), Some(uuid), Some(index)) = (&parent, uuid_of(t), index) {
                if out.len() < crate::probe::MAX_GPUS * 8 {
                    out.push(MigRecord { uuid, parent_uuid: parent.clone(), index });
                }
            }
        }
    }
    out
}

/// The version a library's file name carries: `libcuda.so.535.104.05` -> `535.104.05` when the
/// stem is `libcuda.so`. `libcuda.so.1` gives `1`; callers decide what a bare `1` means.
pub fn so_version<'a>(file_name: &'a str, stem: &str) -> Option<&'a str> {
    file_name.strip_prefix(stem)?.strip_prefix('.').filter(|v| is_dotted_number(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrm_proprietary_open_and_jetson() {
        let p = nvrm_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n\
             GCC version:  gcc version 14.2.0 (Ubuntu 14.2.0-4ubuntu2~24.04.1)\n",
        )
        .unwrap();
        assert_eq!(p.number.as_deref(), Some("580.173.02"));
        assert!(!p.open);
        let o = nvrm_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  \
             (dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\n",
        )
        .unwrap();
        assert_eq!(o.number.as_deref(), Some("565.57.01"));
        assert!(o.open);
        let j =
            nvrm_version("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  35.3.1  Release Build\n")
                .unwrap();
        assert_eq!(j.number.as_deref(), Some("35.3.1"));
        assert!(nvrm_version("garbage").is_none());
        assert_eq!(nvrm_version("NVRM version: no number here").unwrap().number, None);
    }

    #[test]
    fn proc_modules_lines() {
        let m = modules(
            "nvidia_uvm 1605632 0 - Live 0x0000000000000000 (POE)\n\
             nvidia 56623104 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n\
             nouveau 2306048 0 - Live 0xffffffffc0a00000\n\
             \n",
        );
        assert_eq!(m.len(), 3);
        assert_eq!(
            (m[0].name.as_str(), m[0].state.as_str(), m[0].taint.as_str()),
            ("nvidia_uvm", "Live", "POE")
        );
        assert_eq!(m[1].name, "nvidia");
        assert_eq!((m[2].name.as_str(), m[2].taint.as_str()), ("nouveau", ""));
    }

    #[test]
    fn proc_devices_char_section_whole_names() {
        let d = char_devices(
            "Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n236 nvidia-caps-imex-channels\n\
             237 nvidia-caps\n510 nvidia-uvm\n\nBlock devices:\n  7 loop\n259 nvidia\n",
        );
        assert!(d.contains(&(510, "nvidia-uvm".to_owned())));
        assert!(d.contains(&(237, "nvidia-caps".to_owned())));
        assert!(!d.contains(&(259, "nvidia".to_owned())), "block devices are not char majors");
        assert_eq!(d.iter().filter(|(_, n)| n == "nvidia").count(), 1);
    }

    #[test]
    fn information_and_numbers() {
        let kv = key_values(
            "Model: \t\t NVIDIA H100 80GB HBM3\nBus Location: \t 0000:18:00.0\nDevice Minor: \t 3\n",
        );
        assert_eq!(kv[0], ("Model".to_owned(), "NVIDIA H100 80GB HBM3".to_owned()));
        assert_eq!(kv[1].1, "0000:18:00.0");
        assert_eq!(hex_u32("0x10de\n"), Some(0x10de));
        assert_eq!(hex_u32("0x030200"), Some(0x0003_0200));
        assert_eq!(hex_u32("zz"), None);
        assert_eq!(bus_id("00000000:17:00.0").as_deref(), Some("0000:17:00.0"));
        assert_eq!(bus_id("17:00.0").as_deref(), Some("0000:17:00.0"));
        assert_eq!(bus_id("0000:3B:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(bus_id("0000:17:00"), None);
        assert_eq!(bus_id("0000:17:20.0"), None);
        assert_eq!(so_version("libcuda.so.535.104.05", "libcuda.so"), Some("535.104.05"));
        assert_eq!(so_version("libcuda.so.1", "libcuda.so"), Some("1"));
        assert_eq!(so_version("libcuda.so", "libcuda.so"), None);
        assert_eq!(so_version("libcudart.so.12", "libcuda.so"), None);
    }
}
