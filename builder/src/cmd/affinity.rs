//! `stackbuild affinity IMAGE`.

use std::io::Write;

use stackbuild_k8s::AffinityOptions as Options;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The image: an OCI layout directory (`DIR` or `DIR:TAG`) or an archive (`FILE` or
    /// `FILE:TAG`, an OCI layout in a tar or `docker save` output, optionally gzipped).
    image: String,
    /// A further requirement, as a pod's `io.stackbuild.require.*` annotation would add it
    /// (`gpus>=2`); repeat for several (all must hold).
    #[arg(long = "require", value_name = "EXPR")]
    requires: Vec<String>,
    /// Print JSON instead of YAML.
    #[arg(long)]
    json: bool,
    /// Do not require `stackbuild.io/host.ready=true` (the node's doctor finding no error).
    #[arg(long)]
    no_ready: bool,
}

impl Args {
    pub(super) fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let options = Options { require_ready: !self.no_ready };
        let a = stackbuild_k8s::affinity_for_image(&self.image, &self.requires, &options)?;
        let text = if self.json {
            for note in &a.notes {
                tracing::warn!("{note}");
            }
            a.to_json()
        } else {
            a.to_yaml(&self.image)
        };
        std::io::stdout().lock().write_all(text.as_bytes())?;
        Ok(std::process::ExitCode::SUCCESS)
    }
}
