//! `stackhook labels`.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stackhook::labels::{self, Format};

/// How to print the labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OutputFormat {
    /// `key=value` lines, sorted.
    Labels,
    /// A Node Feature Discovery feature file (local source, `features.d/`).
    Nfd,
    /// A JSON object.
    Json,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Host root to probe.
    #[arg(long, env = "STACKHOOK_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "labels")]
    format: OutputFormat,
    /// Write to this file (through a dot file and a rename, as NFD asks) instead of stdout.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// With `--format nfd`: add `# +expiry-time=` this many seconds from now, so NFD drops the
    /// labels if they are not refreshed.
    #[arg(long, value_name = "SECONDS")]
    expires_in: Option<u64>,
    /// Probe again and rewrite the output every this many seconds, until killed.
    #[arg(long, value_name = "SECONDS", requires = "output", value_parser = clap::value_parser!(u64).range(1..))]
    interval: Option<u64>,
    /// Before each probe, run the host's nvidia-smi and save what it reports to
    /// /var/lib/stackhook/host-facts.json under the host root (as `doctor --record`), so the
    /// labels and the hook use the driver's own CUDA version and compute capabilities.
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
        if let Some(o) = &mut self.output {
            *o = cwd.join(&*o);
        }
    }

    pub(crate) fn run(self) -> i32 {
        loop {
            let code = self.once();
            match self.interval {
                Some(secs) => std::thread::sleep(Duration::from_secs(secs)),
                None => return code,
            }
        }
    }

    fn once(&self) -> i32 {
        if self.record {
            // A failure leaves the last facts in place (the hook checks they are current).
            if let Err(e) = stackhook::record::record(&self.host_root, &self.nvidia_smi) {
                eprintln!("stackhook labels: --record: {e}");
            }
        }
        let probe = stackhook::probe::probe(&self.host_root);
        let node = labels::node_labels(&probe);
        let format = match self.format {
            OutputFormat::Labels => Format::Labels,
            OutputFormat::Nfd => Format::Nfd,
            OutputFormat::Json => Format::Json,
        };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let expires_at = self.expires_in.map(|s| now.saturating_add(s));
        let text = labels::render(&node, format, expires_at);
        match &self.output {
            Some(path) => match labels::write_atomic(path, &text) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("stackhook labels: {e}");
                    1
                }
            },
            None => match std::io::stdout().lock().write_all(text.as_bytes()) {
                Ok(()) => 0,
                Err(_) => 1,
            },
        }
    }
}
