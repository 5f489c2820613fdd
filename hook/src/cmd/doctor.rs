//! `stackhook doctor`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Host root to probe.
    #[arg(long, env = "STACKHOOK_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// A requirement to check, in NVIDIA_REQUIRE_* syntax (`cuda>=12.1`, `driver>=535`,
    /// `module=nvidia_uvm`); repeat for several (ANDed).
    #[arg(long = "require", value_name = "EXPR")]
    requires: Vec<String>,
    /// Which GPUs to check, as NVIDIA_VISIBLE_DEVICES would select them.
    #[arg(long, default_value = "all")]
    gpus: String,
    /// Print the diagnosis as JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub fn run(self) -> i32 {
        // Color for a person at a terminal only; `NO_COLOR` (<https://no-color.org>) turns it off.
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let color = !self.json && !no_color && std::io::stdout().is_terminal();
        let (text, code) =
            stackhook::diagnose::doctor(&self.host_root, &self.requires, &self.gpus, self.json, color);
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
        code
    }
}
