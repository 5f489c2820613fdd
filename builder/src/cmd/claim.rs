//! `stackbuild claim IMAGE`.

use std::io::Write;

use stackbuild_k8s::ClaimOptions as Options;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// The `ResourceClaimTemplate` and a Pod, as two YAML documents.
    Yaml,
    /// Both in a `v1` `List`.
    Json,
}

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The image: an OCI layout directory (`DIR` or `DIR:TAG`) or an archive (`FILE` or
    /// `FILE:TAG`, an OCI layout in a tar or `docker save` output, optionally gzipped).
    image: String,
    /// The template's name (default: the image's file name and `-gpu`).
    #[arg(long)]
    name: Option<String>,
    /// Devices per pod (default: the fewest the image's `gpus` requirement allows, else 1).
    #[arg(long)]
    count: Option<u32>,
    /// Accept a MIG device (class `mig.nvidia.com`) when no whole GPU is available.
    #[arg(long)]
    mig: bool,
    /// A further requirement, as a pod's `io.stackbuild.require.*` annotation would add it;
    /// repeat for several (all must hold).
    #[arg(long = "require", value_name = "EXPR")]
    requires: Vec<String>,
    /// The image reference the Pod pulls (default: `<name>:latest`).
    #[arg(long, value_name = "REF")]
    pod_image: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "yaml")]
    format: Format,
}

impl Args {
    pub(super) fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let name = self.name.unwrap_or_else(|| stackbuild_k8s::default_name(&self.image));
        let options = Options { name, count: self.count, mig: self.mig };
        let c = stackbuild_k8s::claim_for_image(&self.image, &self.requires, &options)?;
        let pod_image = self
            .pod_image
            .unwrap_or_else(|| format!("{}:latest", c.name.strip_suffix("-gpu").unwrap_or(&c.name)));
        let text = match self.format {
            Format::Yaml => c.to_yaml(&self.image, &pod_image),
            Format::Json => {
                for note in &c.notes {
                    tracing::warn!("{note}");
                }
                c.to_json(&pod_image)
            }
        };
        std::io::stdout().lock().write_all(text.as_bytes())?;
        Ok(std::process::ExitCode::SUCCESS)
    }
}
