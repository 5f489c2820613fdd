//! The image's requirements (`NVIDIA_REQUIRE_*`, `STACKBUILD_REQUIRE_*`) against the host's facts:
//! each failed one a finding in the layer of its key (`kernel` L1, `module` L2, `gpus` L3, the
//! rest L4) with the host value it failed on and what to do; one the host cannot tell a warning;
//! one NVIDIA's evaluator refuses an error, as NVIDIA's hook refuses the container too.

use super::report::{Finding, Layer, Severity};
use super::Checks;
use crate::contract::image::DeviceSelection;
use crate::contract::kb;
use crate::contract::require::{Evidence, Key, Unsatisfied};
use crate::contract::version::CudaVersion;
use crate::probe::{GpuProbe, UnresolvedDevice};

impl Checks<'_> {
    /// Requirement findings, and the forward-compatibility rule.
    pub(super) fn requirements(&mut self, driver_up: bool, selected: Option<&[&GpuProbe]>) {
        let p = self.p;
        let reqs = &self.req.requirements;
        if reqs.is_empty() {
            return;
        }
        if self.req.requirements_disabled {
            self.push(Finding::new(
                "L4-REQUIREMENTS-DISABLED",
                Layer::L4Versions,
                Severity::Info,
                "NVIDIA_DISABLE_REQUIRE is set: the image's requirements were not checked",
            ));
            return;
        }
        let selection = if selected.is_some() { &self.req.selection } else { &DeviceSelection::None };
        let Ok(facts) = p.facts(selection) else { return };
        let gpus_known = selected.is_some();
        let unlisted = (p.is_wsl2() || p.is_jetson()) && p.gpus.is_empty();
        let unresolved = p.resolve(selection).map(|r| r.unresolved).unwrap_or_default();
        let resolved_count = selected.map_or(0, <[_]>::len);
        let assessment = reqs.assess(&facts);
        for u in &assessment.unverifiable {
            let Some(key) = u.key() else { continue };
            if key.per_gpu() && !gpus_known {
                continue;
            }
            let f = self.unverifiable_finding(u, key, selected);
            self.push(f);
        }
        for i in &assessment.invalid {
            if !driver_up {
                continue; // covered by L2-CHECKS-SKIPPED
            }
            let gpu = i.gpu.and_then(|n| selected.and_then(|s| s.get(n)));
            let subject = gpu.map_or_else(String::new, |g| {
                format!("GPU {} ({}): ", g.index, g.model.as_deref().unwrap_or("?"))
            });
            let message = format!(
                "{}: {subject}{}; NVIDIA's hook refuses this container too",
                i.source,
                strip_gpu_prefix_text(&i.to_string())
            );
            self.push(
                Finding::new("L4-REQUIREMENT-INVALID", Layer::L4Versions, Severity::Error, message)
                    .with(&i.source, shorten(&i.expr, 120))
                    .remedy(format!(
                        "fix {} in the image: NVIDIA_REQUIRE_* takes only cuda, driver, arch and brand (our keys go \
                         in STACKBUILD_REQUIRE_*); or start it with NVIDIA_DISABLE_REQUIRE=true",
                        i.source
                    )),
            );
        }
        for u in assessment.failures {
            let Some(primary) = u.primary() else { continue };
            let key = primary.key;
            let evidence = key.spec().evidence;
            if needs_driver(evidence) && !driver_up {
                continue; // covered by L2-CHECKS-SKIPPED
            }
            let per_gpu = needs_gpus(evidence);
            if per_gpu && !gpus_known && !unlisted {
                continue; // the selection itself failed (L3)
            }
            let device = u.gpu.and_then(|i| i.checked_sub(resolved_count)).and_then(|i| unresolved.get(i));
            // The version a WSL2 or Jetson host cannot read from files; a Jetson's CUDA known from
            // its L4T release is checked.
            let unknown_version =
                evidence == Evidence::Driver || (evidence == Evidence::HostCuda && facts.cuda.is_none());
            let unverifiable = (unknown_version && facts.driver.is_none() && (p.is_wsl2() || p.is_jetson()))
                || (per_gpu && unlisted)
                || device.is_some_and(|d| d.common_model().is_none());
            let mut f = self.requirement_finding(&u, key, unverifiable, selected);
            if let Some(d) = device {
                f = unresolved_finding(f, &u, d);
            }
            self.push(f);
        }
        if let Some(gpus) = selected {
            self.forward_compat(&facts, gpus);
        }
    }

    /// A requirement whose truth the host and the knowledge base cannot tell: a warning that
    /// says what is unknown and how to confirm it; the container is not blocked.
    fn unverifiable_finding(
        &self,
        u: &crate::contract::require::Unverifiable,
        key: Key,
        selected: Option<&[&GpuProbe]>,
    ) -> Finding {
        let gpu = u.gpu.and_then(|i| selected.and_then(|s| s.get(i)));
        let subject = gpu.map_or_else(String::new, |g| {
            format!("GPU {} ({}): ", g.index, g.model.as_deref().unwrap_or("?"))
        });
        let factors: Vec<String> =
            u.unknown.iter().map(|f| format!("{} (host has {})", f.factor, f.host)).collect();
        let mut f = Finding::new(
            "L4-REQUIREMENT-UNVERIFIABLE",
            Layer::L4Versions,
            Severity::Warning,
            format!(
                "{}: {subject}cannot tell whether {} holds; not enforced{}",
                u.source,
                factors.join(", "),
                u.may_be_invalid.as_ref().map_or_else(String::new, |x| format!(
                    " (if it does not, NVIDIA's evaluator reaches {}, a key it has no rule for, and refuses the \
                     container)",
                    x.factor
                ))
            ),
        )
        .with(&u.source, shorten(&u.expr, 120));
        let remedy = match key.spec().evidence {
            Evidence::GpuModel => {
                if let Some(g) = gpu {
                    f = f.with_evidence(&g.evidence).with(
                        &format!("{}/device", g.pci.path),
                        format!(
                            "{} (not in the knowledge base)",
                            g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}"))
                        ),
                    );
                }
                "confirm with nvidia-smi --query-gpu=name,compute_cap --format=csv; sudo stackhook doctor --record \
                 saves the answer for the hook, or add a [[gpu]] row with its source in /etc/stackhook/kb.d/"
            }
            // Only a GPU's model and the CUDA a driver supports may be unknown.
            Evidence::HostCuda
            | Evidence::Driver
            | Evidence::KernelRelease
            | Evidence::Modules
            | Evidence::Selection
            | Evidence::Machine
            | Evidence::Platform => {
                if let Some(d) = &self.p.driver {
                    f = f.with_evidence(&d.evidence);
                }
                f = f.with_evidence(&self.p.host_cuda().how.into());
                "confirm with nvidia-smi (its header prints \"CUDA Version\", from R610 \"CUDA UMD Version\"); sudo \
                 stackhook doctor --record saves it for the hook, or add a [[branch]] row with its source in /etc/stackhook/kb.d/"
            }
        };
        f.remedy(remedy)
    }

    fn requirement_finding(
        &self,
        u: &Unsatisfied,
        key: Key,
        unverifiable: bool,
        selected: Option<&[&GpuProbe]>,
    ) -> Finding {
        let (layer, code) = match key {
            Key::Kernel => (Layer::L1Driver, "L1-KERNEL-REQUIREMENT"),
            Key::Module => (Layer::L2UserSpace, "L2-MODULE-REQUIREMENT"),
            Key::Gpus => (Layer::L3Gpus, "L3-GPU-COUNT-REQUIREMENT"),
            Key::Cuda => (Layer::L4Versions, "L4-CUDA-REQUIREMENT"),
            Key::Driver => (Layer::L4Versions, "L4-DRIVER-REQUIREMENT"),
            Key::Arch => (Layer::L4Versions, "L4-ARCH-REQUIREMENT"),
            Key::Brand => (Layer::L4Versions, "L4-BRAND-REQUIREMENT"),
            Key::Machine => (Layer::L4Versions, "L4-MACHINE-REQUIREMENT"),
            Key::Platform => (Layer::L4Versions, "L4-PLATFORM-REQUIREMENT"),
        };
        let primary = u.primary();
        let factor = primary.map_or("", |f| f.factor.as_str());
        let wanted = factor.trim_start_matches(key.as_str()).trim_start_matches(['<', '>', '=', '!']);
        let gpu = u.gpu.and_then(|i| selected.and_then(|s| s.get(i)));
        let message = match gpu {
            Some(g) => format!(
                "{}: GPU {} ({}){}",
                u.source,
                g.index,
                g.model.as_deref().unwrap_or("?"),
                strip_gpu_prefix(u)
            ),
            None => format!("{}: {u}", u.source),
        };
        let mut f = if unverifiable {
            Finding::new(
                "L4-REQUIREMENT-UNVERIFIABLE",
                layer.max(Layer::L4Versions),
                Severity::Warning,
                format!("{message}; not enforced: this host's {} cannot be read from files", key.as_str()),
            )
        } else {
            Finding::new(code, layer, Severity::Error, message)
        };
        f = f.with(&u.source, shorten(&u.expr, 120));
        f = self.requirement_evidence(f, key, wanted, gpu, selected);
        if unverifiable {
            return f;
        }
        match self.requirement_remedy(key, factor, wanted) {
            Some(r) => f.remedy(r),
            None => f,
        }
    }

    /// Evidence of the host value a requirement failed on.
    fn requirement_evidence(
        &self,
        mut f: Finding,
        key: Key,
        wanted: &str,
        gpu: Option<&&GpuProbe>,
        selected: Option<&[&GpuProbe]>,
    ) -> Finding {
        let p = self.p;
        let evidence = key.spec().evidence;
        match evidence {
            Evidence::HostCuda | Evidence::Driver => {
                if let Some(d) = &p.driver {
                    f = f.with_evidence(&d.evidence);
                } else if let Some(e) = p.platform.evidence().filter(|_| evidence == Evidence::HostCuda) {
                    f = f.with_evidence(e);
                }
                if evidence == Evidence::HostCuda {
                    f = f.with_evidence(&p.host_cuda().how.into());
                }
            }
            Evidence::KernelRelease => {
                if let Some(k) = &p.kernel {
                    f = f.with_evidence(&k.evidence);
                }
            }
            Evidence::Machine => f = f.with_evidence(&p.machine.evidence),
            Evidence::Platform => {
                f = match p.platform.evidence() {
                    Some(e) => f.with_evidence(e),
                    None => f.with(
                        "(platform)",
                        "linux: no /dev/dxg, /usr/lib/wsl/lib, /etc/nv_tegra_release or Tegra SoC in \
                         /sys/devices/soc0/family and /proc/device-tree/compatible",
                    ),
                };
            }
            Evidence::Modules => {
                let name = wanted.to_ascii_lowercase();
                f = match p.modules.get(&name) {
                    Some(m) => f.with_evidence(&m.evidence),
                    None if p.module_loaded(&name) => f.with("/proc/modules", format!("{name} listed")),
                    None => f.with("/proc/modules", format!("no line for {name}")),
                };
            }
            Evidence::GpuModel => {
                if let Some(g) = gpu {
                    if key == Key::Arch {
                        if let Some(a) = p.gpu_arch(g).filter(|a| !a.how.path.starts_with("(knowledge base)"))
                        {
                            // From the recorded nvidia-smi facts or an admin row: say so.
                            return f.with_evidence(&a.how.into());
                        }
                    }
                    let model = g.kb_model();
                    if let Some(soc) = &g.soc {
                        // An integrated GPU: the SoC string and what the knowledge base says of it.
                        f = f.with_evidence(&g.evidence).with(
                            "(knowledge base)",
                            format!(
                                "{soc} = {} ({})",
                                model.map_or("unknown SoC", |m| m.name.as_str()),
                                model.map_or("?".to_owned(), |m| if key == Key::Arch {
                                    format!("compute capability {}", m.compute_capability)
                                } else {
                                    format!("brand {}", m.brand)
                                })
                            ),
                        );
                        return f;
                    }
                    f = f.with(
                        &format!("{}/device", g.pci.path),
                        format!(
                            "{} = {} ({} {})",
                            g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}")),
                            model.map_or("unknown model", |m| m.name.as_str()),
                            if key == Key::Arch { "compute capability" } else { "brand" },
                            model.map_or("?".to_owned(), |m| if key == Key::Arch {
                                m.compute_capability.to_string()
                            } else {
                                m.brand.clone()
                            })
                        ),
                    );
                }
            }
            Evidence::Selection => {
                f = f.with(
                    "NVIDIA_VISIBLE_DEVICES",
                    format!("{} GPU(s) selected", selected.map_or(0, <[_]>::len)),
                );
            }
        }
        f
    }

    /// What to do about a failed requirement.
    fn requirement_remedy(&self, key: Key, factor: &str, wanted: &str) -> Option<String> {
        let p = self.p;
        match key {
            Key::Cuda => {
                let host = p.host_cuda().cuda;
                let need = wanted.parse::<CudaVersion>().ok();
                if p.driver.is_none() && p.is_jetson() {
                    let h = host.map_or_else(|| "its L4T release's".to_owned(), |h| h.to_string());
                    return Some(format!(
                        "use an image built for CUDA {h} or older: this board's Jetson Linux (L4T) release ships CUDA {h} \
                         and it has no CUDA upgrade package for CUDA {wanted} (or flash a JetPack that the board supports \
                         with a newer CUDA)"
                    ));
                }
                // An admin toolkit row first, then the built-in table.
                let min = need.as_ref().and_then(|n| {
                    p.kb_extension
                        .toolkit(n)
                        .map(|(t, _)| t.driver.clone())
                        .or_else(|| kb::cuda_min_driver(n).map(|row| row.toolkit_driver))
                });
                Some(match (min, host) {
                    (Some(driver), Some(h)) => format!(
                        "install driver {driver} or newer (CUDA {wanted}'s minimum), or use an image built for CUDA {h} or older"
                    ),
                    (Some(driver), None) => format!("install driver {driver} or newer (CUDA {wanted}'s minimum)"),
                    (None, _) => format!("install a driver that supports CUDA {wanted} (nvidia-smi shows the CUDA version)"),
                })
            }
            Key::Driver => Some(format!("install a driver that satisfies {factor}")),
            Key::Kernel => {
                Some(format!("boot a kernel that satisfies {factor} (the image's author excludes this one)"))
            }
            Key::Module if factor.contains("!=") => Some(format!("sudo modprobe -r {wanted}")),
            Key::Module => Some(if wanted == "nvidia_uvm" {
                "sudo nvidia-modprobe -u -c=0".to_owned()
            } else {
                format!("sudo modprobe {wanted}")
            }),
            Key::Gpus => {
                Some("select more GPUs (NVIDIA_VISIBLE_DEVICES) or run on a host that has them".to_owned())
            }
            Key::Arch => Some(
                "run on a GPU the image was built for, or rebuild the image with this GPU's architecture \
                 in its arch list"
                    .to_owned(),
            ),
            Key::Brand => None,
            Key::Machine => Some(format!("run on a host whose machine is {wanted}")),
            Key::Platform if factor.contains("!=") => {
                Some(format!("run on a host whose platform is not {}", wanted.to_ascii_lowercase()))
            }
            Key::Platform => Some(
                match wanted.to_ascii_lowercase().as_str() {
                    "wsl2" => "run under WSL2 on a Windows host with the NVIDIA driver",
                    "jetson" => "run on a Jetson board",
                    _ => "run on a Linux host with PCI GPUs and the nvidia driver (not WSL2 or Jetson)",
                }
                .to_owned(),
            ),
        }
    }
}

/// Whether the probe reads a value from this source only with the driver loaded.
fn needs_driver(evidence: Evidence) -> bool {
    match evidence {
        Evidence::HostCuda | Evidence::Driver | Evidence::GpuModel | Evidence::Selection => true,
        Evidence::KernelRelease | Evidence::Modules | Evidence::Machine | Evidence::Platform => false,
    }
}

/// Whether a value from this source depends on the GPUs the container gets.
fn needs_gpus(evidence: Evidence) -> bool {
    match evidence {
        Evidence::GpuModel | Evidence::Selection => true,
        Evidence::HostCuda
        | Evidence::Driver
        | Evidence::KernelRelease
        | Evidence::Modules
        | Evidence::Machine
        | Evidence::Platform => false,
    }
}

/// A requirement finding about a device whose GPU is not known, reworded to name the device.
fn unresolved_finding(mut f: Finding, u: &Unsatisfied, d: &UnresolvedDevice<'_>) -> Finding {
    let head = match d.common_model() {
        Some(m) => format!("{}: {} (on a GPU with MIG instances, every one an {})", u.source, d.id, m.name),
        None => format!("{}: {}", u.source, d.id),
    };
    f.message = format!("{head}{}", strip_gpu_prefix(u));
    if f.severity == Severity::Warning {
        f.message.push_str(
            "; not enforced: which GPU this device is on is not recorded and the host's GPUs differ",
        );
    }
    f
}

/// The `Unsatisfied` message without its `GPU n: ` prefix (the finding names the GPU itself).
fn strip_gpu_prefix(u: &Unsatisfied) -> String {
    let s = u.to_string();
    match s.split_once(": ") {
        Some((head, rest)) if head.starts_with("GPU ") => format!(": {rest}"),
        _ => format!(": {s}"),
    }
}

/// A per-GPU message without its leading `GPU <n>: `.
fn strip_gpu_prefix_text(s: &str) -> &str {
    match s.split_once(": ") {
        Some((head, rest)) if head.starts_with("GPU ") => rest,
        _ => s,
    }
}

/// `s` cut to `max` characters with an ellipsis.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}
