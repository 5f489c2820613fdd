//! `stackbuild`: builds a reproducible, layered OCI image from a recipe.

use std::io::IsTerminal;

use clap::Parser;

mod cmd;

/// Escape codes only for a person at a terminal: a log piped to a file or CI stays plain text,
/// and `NO_COLOR` (any non-empty value, <https://no-color.org>) turns them off everywhere.
fn stderr_wants_color() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

fn main() -> std::process::ExitCode {
    let cli = cmd::Cli::parse();
    let log =
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(stderr_wants_color())
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("STACKBUILD_LOG").unwrap_or_else(
                |_| tracing_subscriber::EnvFilter::new(if cli.quiet { "warn" } else { "info" }),
            ));
    // A log read later (CI, a file) says when each line came, as seconds since the start; a
    // person at a terminal sees it happen.
    if std::io::stderr().is_terminal() {
        log.without_time().init();
    } else {
        log.with_timer(tracing_subscriber::fmt::time::Uptime::default()).init();
    }
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
