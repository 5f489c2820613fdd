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
            eprintln!("error: {}", error_chain(&e));
            std::process::ExitCode::from(2)
        }
    }
}

/// The error and its causes, each cause only when the message before it does not already say it
/// (our error types put their source into their text, and also return it as the cause).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}
