//! `stackhook cdi check`.

use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Check NVIDIA's CDI specs against this host: nodes whose numbers no longer match,
    /// libraries missing or of another driver version, GPUs and MIG devices the spec lacks.
    /// Exit 0 when no spec has an error, 1 when one has, 2 when a named file cannot be read.
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// Spec files to check (default: every *.json and *.yaml in /etc/cdi and /var/run/cdi
    /// under the host root).
    specs: Vec<PathBuf>,
    /// Host root to probe.
    #[arg(long, env = "STACKHOOK_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// Print the reports as JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Relative paths the user typed, against the directory they typed them in (`main`
    /// leaves it for `/` before running anything).
    pub(crate) fn anchor(&mut self, cwd: &std::path::Path) {
        let Command::Check(a) = &mut self.command;
        for spec in &mut a.specs {
            *spec = cwd.join(&*spec);
        }
        a.host_root = cwd.join(&a.host_root);
    }

    pub(crate) fn run(self) -> i32 {
        let Command::Check(a) = self.command;
        let specs = match stackhook::cdi::load(&a.host_root, &a.specs) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("stackhook cdi check: {e}");
                return 2;
            }
        };
        let reports = stackhook::cdi::check_all(&a.host_root, &specs);
        let text = if a.json {
            let mut s = serde_json::to_string_pretty(&reports).unwrap_or_default();
            s.push('\n');
            s
        } else {
            stackhook::cdi::render(&reports)
        };
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
        i32::from(reports.iter().any(stackhook::cdi::SpecReport::has_errors))
    }
}
