//! `stackhook install` and `stackhook uninstall`.

use std::io::Write;
use std::path::PathBuf;

use stackhook::install::{Engine, Installer};
use stackhook::runtime::WrapperConfig;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The engine: docker (a runtime in daemon.json), podman or crio (a hooks.d file),
    /// containerd (prints the runtime handler and a `RuntimeClass`).
    #[arg(value_enum)]
    engine: Engine,
    /// Print what would change; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Root under which the engine's files are read and written (tests, image builds); the
    /// `stackhook-runtime` link still goes next to this binary.
    #[arg(long, value_name = "DIR", default_value = "/")]
    prefix: PathBuf,
    /// The hook's settings for hooks.d files (`policy`, `host_root`, `report_dir`,
    /// `hook_timeout`) [default: <prefix>/etc/stackhook/config.toml when it exists].
    #[arg(long, value_name = "FILE", env = "STACKHOOK_CONFIG")]
    config: Option<PathBuf>,
}

impl Args {
    /// Relative paths the user typed, against the directory they typed them in (`main`
    /// leaves it for `/` before running anything).
    pub(crate) fn anchor(&mut self, cwd: &std::path::Path) {
        self.prefix = cwd.join(&self.prefix);
        if let Some(c) = &mut self.config {
            *c = cwd.join(&*c);
        }
    }

    /// Installs (`install`) or removes (`!install`).
    pub(crate) fn run(self, install: bool) -> i32 {
        let verb = if install { "install" } else { "uninstall" };
        let result = self.installer().and_then(|i| {
            if install {
                // The engine will run this binary as root: never one a dynamic loader starts.
                stackhook::install::check_static(&i.binary)?;
                i.install(self.engine)
            } else {
                i.uninstall(self.engine)
            }
        });
        match result {
            Ok(report) => {
                let _ = std::io::stdout().lock().write_all(report.to_string().as_bytes());
                0
            }
            Err(e) => {
                let _ = writeln!(std::io::stderr().lock(), "stackhook {verb}: {e}");
                1
            }
        }
    }

    fn installer(&self) -> Result<Installer, stackhook::install::InstallError> {
        let binary = std::env::current_exe().and_then(std::fs::canonicalize).map_err(|source| {
            stackhook::install::InstallError::Io { path: "/proc/self/exe".into(), source }
        })?;
        let config = WrapperConfig::load(self.config.as_deref(), &self.prefix)?;
        Ok(Installer { prefix: self.prefix.clone(), binary, config, dry_run: self.dry_run })
    }
}
