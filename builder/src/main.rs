//! `stackbuild`: builds a reproducible, layered OCI image from a recipe.

use clap::Parser;

mod cmd;

fn main() -> std::process::ExitCode {
    let cli = cmd::Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STACKBUILD_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(if cli.quiet { "warn" } else { "info" })
            }),
        )
        .init();
    match cli.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
