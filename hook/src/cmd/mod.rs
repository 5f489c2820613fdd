//! The command line: one module per subcommand.

use clap::{Parser, Subcommand};

mod doctor;
mod hook;

/// Checks, at container start, that a GPU host satisfies what the image needs.
#[derive(Debug, Parser)]
#[command(name = "stackhook", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run as an OCI hook (prestart, createRuntime or createContainer): reads the container
    /// state on stdin; exit 0 allows the start, 1 blocks it.
    Hook(hook::Args),
    /// Run the same checks on this host by hand; exit 0 when they pass, 1 when not.
    Doctor(doctor::Args),
}

impl Cli {
    /// Runs the chosen subcommand and returns the exit code.
    pub fn run(self) -> i32 {
        match self.command {
            Command::Hook(args) => args.run(),
            Command::Doctor(args) => args.run(),
        }
    }
}
