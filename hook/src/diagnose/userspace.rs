//! L2, user space: the driver's libraries (`libcuda.so.1`, `libnvidia-ml.so.1`) present, their
//! symlink chains ending in the loaded module's version, no toolkit stub shadowing them; on WSL2,
//! `/dev/dxg` and the libraries Windows provides instead.

use super::devices::node_text;
use super::report::{Finding, Layer, Severity};
use super::Checks;
use crate::contract::version::DriverVersion;
use crate::probe::{ChainEnd, LibraryProbe, NodeState};

impl Checks<'_> {
    /// L2: the driver's user-space libraries.
    pub(super) fn l2_libraries(&mut self, driver_up: bool) {
        let p = self.p;
        if p.is_wsl2() {
            self.l2_wsl();
            return;
        }
        if p.is_jetson() {
            return;
        }
        let driver = p.driver.as_ref().map(|d| d.value.clone());
        let mut mismatches: Vec<(&LibraryProbe, String)> = Vec::new();
        for (name, code_missing, severity_missing) in [
            ("libcuda.so.1", "L2-LIBCUDA-MISSING", Severity::Error),
            ("libnvidia-ml.so.1", "L2-NVML-MISSING", Severity::Warning),
        ] {
            let found: Vec<&LibraryProbe> = p
                .libraries
                .iter()
                .filter(|l| l.name == name && !l.path.starts_with("/usr/lib/wsl/"))
                .collect();
            if found.is_empty() {
                let what = if name == "libcuda.so.1" {
                    "CUDA programs in the container cannot load the driver"
                } else {
                    "nvidia-smi and NVML-based tools fail"
                };
                self.push(
                    Finding::new(
                        code_missing,
                        Layer::L2UserSpace,
                        severity_missing,
                        format!("{name} is in none of the driver library directories: {what}"),
                    )
                    .with(
                        "/usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib/aarch64-linux-gnu, /usr/local/nvidia/lib64",
                        format!("no {name}"),
                    )
                    .remedy(install_userspace(driver.as_ref().map(ToString::to_string).as_deref())),
                );
                continue;
            }
            for lib in found {
                match &lib.end {
                    ChainEnd::File => {}
                    end => {
                        let why = match end {
                            ChainEnd::Dangling => "a link whose target does not exist".to_owned(),
                            ChainEnd::TooManyLinks => "more than 8 links (a loop?)".to_owned(),
                            ChainEnd::Unusable { why } => why.clone(),
                            ChainEnd::File => String::new(),
                        };
                        self.push(
                            Finding::new(
                                "L2-LIBRARY-BROKEN-LINK",
                                Layer::L2UserSpace,
                                Severity::Error,
                                format!("{} ends at {why}", lib.path),
                            )
                            .with(&lib.path, lib.chain.join(" -> "))
                            .remedy(install_userspace(driver.as_ref().map(ToString::to_string).as_deref())),
                        );
                        continue;
                    }
                }
                let (Some(module), true) = (driver.as_ref(), driver_up) else { continue };
                match lib.version.as_deref() {
                    Some(v) if v.parse::<DriverVersion>().ok().as_ref() != Some(module) => {
                        mismatches.push((lib, v.to_owned()));
                    }
                    Some(_) => {}
                    None => self.push(
                        Finding::new(
                            "L2-LIBRARY-UNVERSIONED",
                            Layer::L2UserSpace,
                            Severity::Warning,
                            format!(
                                "{} ends in {}, whose name carries no driver version: it cannot be checked against \
                                 the loaded module {module}",
                                lib.path,
                                lib.final_name()
                            ),
                        )
                        .with(&lib.path, lib.final_path()),
                    ),
                }
            }
        }
        if let Some(module) = &driver {
            self.library_mismatches(module, &mismatches);
        }
        self.l2_stubs();
    }

    /// L2: toolkit stubs that shadow the driver's libcuda.
    fn l2_stubs(&mut self) {
        let p = self.p;
        for stub in &p.libcuda_stubs {
            let dir = stub.rsplit_once('/').map_or("", |(d, _)| d);
            self.push(
                Finding::new(
                    "L2-LIBCUDA-STUB",
                    Layer::L2UserSpace,
                    Severity::Warning,
                    "a CUDA toolkit stub libcuda.so sits in a system library directory: a program that loads it \
                     reports \"CUDA driver version is insufficient\" even on a good host",
                )
                .with(stub, "regular file (toolkit stub), not a link to libcuda.so.1")
                .remedy(format!("move {stub} out of {dir} (stubs are for linking only, from the toolkit's lib64/stubs)")),
            );
        }
    }

    /// L2 on WSL2: `/dev/dxg` and the libraries Windows provides.
    fn l2_wsl(&mut self) {
        let p = self.p;
        let lib = p.libraries.iter().find(|l| l.path == "/usr/lib/wsl/lib/libcuda.so.1");
        let ok = lib.is_some_and(|l| l.end == ChainEnd::File && l.chain.is_empty());
        if !ok {
            self.push(
                Finding::new(
                    "L2-WSL-LIBCUDA-MISSING",
                    Layer::L2UserSpace,
                    Severity::Error,
                    "/usr/lib/wsl/lib/libcuda.so.1 is not a regular file: the Windows driver's CUDA library \
                     is not mounted into this WSL2 distribution",
                )
                .with(
                    "/usr/lib/wsl/lib/libcuda.so.1",
                    lib.map_or("missing", |l| {
                        if l.chain.is_empty() {
                            "not a regular file"
                        } else {
                            "a symlink"
                        }
                    }),
                )
                .remedy("update the NVIDIA driver on Windows and run `wsl --update`, then `wsl --shutdown`"),
            );
        }
        if !matches!(p.node("dxg"), NodeState::CharDevice { .. }) {
            self.push(
                Finding::new(
                    "L2-WSL-DXG-MISSING",
                    Layer::L2UserSpace,
                    Severity::Error,
                    "/dev/dxg is not a character device: this WSL2 kernel exposes no GPU",
                )
                .with("/dev/dxg", node_text(p.node("dxg")))
                .remedy("wsl --update (GPU support needs a WSL2 kernel 5.10.43 or newer)"),
            );
        }
    }

    /// One finding per library version that differs from the loaded module's.
    fn library_mismatches(&mut self, module: &DriverVersion, mismatches: &[(&LibraryProbe, String)]) {
        let mut versions: Vec<&str> = mismatches.iter().map(|(_, v)| v.as_str()).collect();
        versions.dedup();
        for v in versions {
            let libs: Vec<&LibraryProbe> =
                mismatches.iter().filter(|(_, lv)| lv == v).map(|(l, _)| *l).collect();
            let names: Vec<&str> = libs.iter().map(|l| l.name.as_str()).collect();
            let newer = v.parse::<DriverVersion>().is_ok_and(|lv| lv > *module);
            let mut f = Finding::new(
                "L2-DRIVER-LIBRARY-MISMATCH",
                Layer::L2UserSpace,
                Severity::Error,
                format!(
                    "{} {} version {v} but the loaded module is {module}: NVML fails with \"Driver/library version \
                     mismatch\" and CUDA cannot initialise",
                    names.join(" and "),
                    if names.len() == 1 { "is" } else { "are" }
                ),
            );
            for lib in &libs {
                f = f.with(&lib.path, format!("-> {}", lib.final_path()));
            }
            if let Some(d) = &self.p.driver {
                f = f.with_evidence(&d.evidence);
            }
            self.push(f.remedy(if newer {
                format!("user space {v} was installed without a reboot: sudo reboot, to load the {v} module")
            } else {
                format!("reinstall the user-space libraries of driver {module} (or reboot, if a newer module is installed)")
            }));
        }
    }
}

/// How to get the driver's user-space libraries back.
fn install_userspace(driver: Option<&str>) -> String {
    match driver {
        Some(v) => {
            let branch = v.split('.').next().unwrap_or(v);
            format!(
                "install the user-space libraries of driver {v}: sudo apt-get install --reinstall \
                 libnvidia-compute-{branch} (Ubuntu), or rerun the driver's installer"
            )
        }
        None => {
            "install the NVIDIA driver's user-space libraries (the driver package or installer)".to_owned()
        }
    }
}
