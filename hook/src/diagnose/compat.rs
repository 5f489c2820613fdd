//! L4, forward compatibility: a requirement met only through a term without `cuda` relies on the
//! driver running a newer CUDA than it supports, which across CUDA majors takes the `cuda-compat`
//! package, supported only on data-center GPUs and Jetson (NVIDIA's CUDA compatibility guide).

use super::report::{Finding, Layer, Severity};
use super::Checks;
use crate::contract::kb;
use crate::contract::require::Value;
use crate::contract::version::CudaVersion;
use crate::probe::{Evidence, GpuProbe};

impl Checks<'_> {
    /// A requirement met only through a term without `cuda` relies on the driver running a newer
    /// CUDA than it supports. Within one CUDA major that is minor-version compatibility (no
    /// package needed); across majors it is forward compatibility, the `cuda-compat` package,
    /// which NVIDIA supports only on data-center GPUs and Jetson (CUDA compatibility guide).
    pub(super) fn forward_compat(&mut self, facts: &crate::contract::require::HostFacts, gpus: &[&GpuProbe]) {
        let p = self.p;
        let Some(host_cuda) = facts.cuda.as_ref() else { return };
        let mut seen: Vec<(String, Option<usize>)> = Vec::new();
        for (source, gpu, term) in self.req.requirements.forward_compat_terms(facts) {
            if seen.contains(&(source.clone(), gpu)) {
                continue;
            }
            seen.push((source.clone(), gpu));
            let Some(need) = self.required_cuda(&source) else { continue };
            let Some(g) = gpu.and_then(|i| gpus.get(i)) else { continue };
            let gpu_name = format!("GPU {} ({})", g.index, g.model.as_deref().unwrap_or("?"));
            let evidence = Evidence { path: source.clone(), value: format!("met through {term}") };
            if need.part(0) <= host_cuda.part(0) {
                self.push(
                    Finding::new(
                        "L4-MINOR-VERSION-COMPAT",
                        Layer::L4Versions,
                        Severity::Info,
                        format!(
                            "{source}: {gpu_name} runs CUDA {need} on a driver that supports {host_cuda} through \
                             minor-version compatibility; PTX newer than {host_cuda} cannot be JIT-compiled"
                        ),
                    )
                    .with_evidence(&evidence),
                );
                continue;
            }
            let model = p.gpu_model(g).map(|(m, _)| m);
            // A Jetson SoC whose upgrade-package support is not known counts as an unknown model.
            let soc_unknown =
                g.soc.as_deref().and_then(kb::jetson_soc).is_some_and(|s| s.forward_compat.is_none());
            let model = model.filter(|_| !soc_unknown);
            let supported = model.is_some_and(|m| m.forward_compat);
            let mut f = match (model, supported) {
                (_, true) => Finding::new(
                    "L4-FORWARD-COMPAT",
                    Layer::L4Versions,
                    Severity::Info,
                    format!(
                        "{source}: CUDA {need} on a driver that supports {host_cuda} relies on the cuda-compat \
                         forward-compatibility package, which {gpu_name} supports"
                    ),
                ),
                (None, false) => Finding::new(
                    "L4-FORWARD-COMPAT-UNKNOWN-GPU",
                    Layer::L4Versions,
                    Severity::Warning,
                    format!(
                        "{source}: CUDA {need} on a driver that supports {host_cuda} relies on the cuda-compat \
                         forward-compatibility package; whether {gpu_name} supports it is unknown (data-center \
                         GPUs and Jetson only)"
                    ),
                ),
                (Some(m), false) => Finding::new(
                    "L4-FORWARD-COMPAT-UNSUPPORTED",
                    Layer::L4Versions,
                    Severity::Error,
                    format!(
                        "{source}: the image needs CUDA {need} and the driver supports {host_cuda}; the requirement \
                         passes only through `{term}`, i.e. the cuda-compat forward-compatibility package, which \
                         runs only on data-center GPUs and Jetson, not on {gpu_name}: {}, brand {}",
                        m.architecture, m.brand
                    ),
                ),
            };
            f = f.with_evidence(&evidence);
            if let Some(d) = &p.driver {
                f = f.with_evidence(&d.evidence);
            }
            if f.severity == Severity::Error {
                let min = kb::cuda_min_driver(&need).map_or_else(
                    || format!("a driver that supports CUDA {need}"),
                    |row| format!("driver {} or newer", row.toolkit_driver),
                );
                f = f.remedy(format!("install {min}, or use an image built for CUDA {host_cuda} or older"));
            }
            self.push(f);
        }
    }

    /// The highest `cuda>=`/`cuda>` version a requirement variable names.
    fn required_cuda(&self, source: &str) -> Option<CudaVersion> {
        self.req
            .requirements
            .entries
            .iter()
            .filter(|r| r.source == source)
            .flat_map(|r| r.expr.0.iter().flat_map(|t| t.0.iter()))
            .filter_map(|f| match (&f.value, f.op) {
                (Value::Cuda(v), crate::contract::require::Op::Ge | crate::contract::require::Op::Gt) => {
                    Some(v.clone())
                }
                _ => None,
            })
            .max()
    }
}
