//! What a build shows while it runs: progress bars on a terminal, and how long each stage took.
//!
//! [`Progress`] is the one progress interface (layer writing, downloads): drawn on stderr only
//! when stderr is a terminal, hidden otherwise, so a build piped to a file or CI writes no
//! cursor movement or escape codes there. [`Stage`] logs `<stage> took <N> s` through `tracing`
//! when it is dropped, so that a slow build says where the time went (download, layers, audit,
//! write), in every log.

use std::io::{IsTerminal as _, Read};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar or spinner on stderr; cleared when finished or dropped.
#[derive(Debug)]
pub struct Progress(ProgressBar);

impl Progress {
    /// A bar of `total` bytes labelled `message`.
    pub fn bytes(total: u64, message: &'static str) -> Self {
        Self::bytes_on(std::io::stderr().is_terminal(), total, message)
    }

    fn bytes_on(visible: bool, total: u64, message: &'static str) -> Self {
        if !visible {
            return Self(ProgressBar::hidden());
        }
        let style = ProgressStyle::with_template("{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        Self(ProgressBar::new(total).with_style(style).with_message(message))
    }

    /// A spinner with the time elapsed, for work whose size is not known up front (pip's
    /// download, whose own bar is off because its output is captured).
    pub fn spinner(message: String) -> Self {
        Self::spinner_on(std::io::stderr().is_terminal(), message)
    }

    fn spinner_on(visible: bool, message: String) -> Self {
        if !visible {
            return Self(ProgressBar::hidden());
        }
        let style = ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let bar = ProgressBar::new_spinner().with_style(style).with_message(message);
        bar.enable_steady_tick(Duration::from_millis(120));
        Self(bar)
    }

    /// Replaces the message (a long build's latest line beside its name).
    pub fn set_message(&self, message: String) {
        self.0.set_message(message);
    }

    /// `reader`, advancing the bar by what is read through it.
    pub fn wrap_read<R: Read>(&self, reader: R) -> impl Read {
        self.0.wrap_read(reader)
    }

    /// Advances the bar by `n` bytes written some other way.
    pub fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    /// Whether nothing is drawn.
    pub fn is_hidden(&self) -> bool {
        self.0.is_hidden()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// A stage of a build, timed from [`Stage::start`] until it is dropped, when it logs how long it
/// took.
#[derive(Debug)]
pub struct Stage {
    name: String,
    started: Instant,
}

impl Stage {
    /// Starts timing `name` (`download`, `layers of linux/amd64`, `audit`, `write`).
    pub fn start(name: impl Into<String>) -> Self {
        Self { name: name.into(), started: Instant::now() }
    }

    /// The line logged for a stage that took `elapsed`.
    fn message(&self, elapsed: Duration) -> String {
        format!("{} took {:.1} s", self.name, elapsed.as_secs_f64())
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let elapsed = self.started.elapsed();
        tracing::info!(stage = %self.name, seconds = elapsed.as_secs_f64(), "{}", self.message(elapsed));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Progress, Stage};

    #[test]
    fn hidden_off_a_terminal() {
        assert!(Progress::bytes_on(false, 10, "writing layer").is_hidden());
        assert!(Progress::spinner_on(false, "downloading".into()).is_hidden());
        let mut read = Vec::new();
        std::io::copy(&mut Progress::bytes_on(false, 3, "x").wrap_read(&b"abc"[..]), &mut read).unwrap();
        assert_eq!(read, b"abc");
    }

    #[test]
    fn a_stage_says_how_long_it_took() {
        let stage = Stage::start("download");
        assert_eq!(stage.message(Duration::from_millis(12_345)), "download took 12.3 s");
    }
}
