//! `stackhook nri`: the NRI plugin, a long-running process on the node (a `DaemonSet`'s
//! container, or a systemd unit).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use stackhook::nri::{self, NriConfig, NriError, Served};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The runtime's NRI socket.
    #[arg(long, env = "STACKHOOK_NRI_SOCKET", default_value = "/var/run/nri/nri.sock")]
    socket: PathBuf,
    /// The plugin's name, as the runtime lists and logs it.
    #[arg(long, default_value = "stackhook")]
    name: String,
    /// The plugin's index, two digits: NRI calls plugins in index order, so a low one refuses
    /// before other plugins adjust a container that will not start.
    #[arg(long, default_value = "10", value_parser = two_digits)]
    index: String,
    #[command(flatten)]
    checks: super::hook::Checks,
    /// Exit when the runtime closes the connection, instead of dialing again every second (a
    /// runtime restart closes it; the plugin must come back without a pod restart).
    #[arg(long)]
    once: bool,
}

fn two_digits(s: &str) -> Result<String, String> {
    if s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()) {
        Ok(s.to_owned())
    } else {
        Err(format!("{s:?} is not a plugin index: expected two digits, as 10"))
    }
}

impl Args {
    pub(crate) fn anchor(&mut self, cwd: &std::path::Path) {
        self.socket = cwd.join(&self.socket);
        self.checks.host_root = cwd.join(&self.checks.host_root);
        if let Some(dir) = &mut self.checks.report_dir {
            *dir = cwd.join(&*dir);
        }
    }

    pub(crate) fn run(self) -> i32 {
        let config =
            NriConfig { socket: self.socket, name: self.name, index: self.index, hook: self.checks.config() };
        let mut log = |line: &str| {
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let _ =
                writeln!(std::io::stderr().lock(), "{} stackhook nri: {line}", stackhook::time::rfc3339(now));
        };
        // Said once per outage, not once per second.
        let mut waiting = false;
        loop {
            match nri::serve(&config, &mut log) {
                Ok(Served::Shutdown) => {
                    log("the runtime shut the plugin down");
                    return 0;
                }
                Ok(Served::Closed) if self.once => {
                    log("the runtime closed the connection");
                    return 0;
                }
                Ok(Served::Closed) => {
                    log("the runtime closed the connection; dialing again");
                    waiting = false;
                }
                Err(e @ NriError::Connect { .. }) if !self.once => {
                    if !waiting {
                        log(&format!("{e}; dialing again every second"));
                        waiting = true;
                    }
                }
                Err(e) => {
                    log(&format!("error: {e}"));
                    if self.once {
                        return 1;
                    }
                }
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}
