//! `stackhook doctor`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Host root to probe.
    #[arg(long, env = "STACKHOOK_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// A requirement to check, in `NVIDIA_REQUIRE_*` syntax (`cuda>=12.1`, `driver>=535`,
    /// `module=nvidia_uvm`); repeat for several (all must hold).
    #[arg(long = "require", value_name = "EXPR")]
    requires: Vec<String>,
    /// Which GPUs to check, as `NVIDIA_VISIBLE_DEVICES` would select them.
    #[arg(long, default_value = "all")]
    gpus: String,
    /// Print the diagnosis as JSON.
    #[arg(long)]
    json: bool,
    /// First run the host's nvidia-smi and save what it reports (the driver's CUDA version, each
    /// GPU's compute capability) to /var/lib/stackhook/host-facts.json under the host root, where
    /// the hook reads it while the driver version and boot id still match.
    #[arg(long)]
    record: bool,
    /// The nvidia-smi to run with --record (looked up in PATH).
    #[arg(long, value_name = "PATH", default_value = "nvidia-smi", requires = "record")]
    nvidia_smi: PathBuf,
}

impl Args {
    /// Relative paths the user typed, against the directory they typed them in (`main`
    /// leaves it for `/` before running anything).
    pub(crate) fn anchor(&mut self, cwd: &std::path::Path) {
        self.host_root = cwd.join(&self.host_root);
    }

    pub(crate) fn run(self) -> i32 {
        if self.record {
            if let Err(e) = stackhook::record::record(&self.host_root, &self.nvidia_smi) {
                eprintln!("stackhook doctor: --record: {e}");
                return 2;
            }
        }
        // Color for a person at a terminal only; `NO_COLOR` (<https://no-color.org>) turns it off.
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let color = !self.json && !no_color && std::io::stdout().is_terminal();
        let (text, code) =
            stackhook::diagnose::doctor(&self.host_root, &self.requires, &self.gpus, self.json, color);
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
        code
    }
}
