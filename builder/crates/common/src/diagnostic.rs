//! A problem in a TOML file (a recipe or a lock), rendered the way rustc and uv print theirs:
//! `FILE:LINE:COL: message`, the offending line, and a caret under the span. The spans come from
//! the `toml` crate (`toml::Spanned`, `toml::de::Error::span`); only the rendering is ours.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One problem in a TOML file, located by line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as given.
    pub file: PathBuf,
    /// Line, 1-based.
    pub line: usize,
    /// Column in characters, 1-based.
    pub column: usize,
    /// What is wrong, and what was expected.
    pub message: String,
    /// The text of the offending line.
    pub source_line: String,
    /// How many characters the caret underlines (at least 1).
    pub width: usize,
    /// An optional hint on how to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic for the byte range `span` of `text`.
    pub fn new(file: &Path, text: &str, span: Range<usize>, message: impl Into<String>) -> Self {
        let start = floor_char_boundary(text, span.start.min(text.len()));
        let end = floor_char_boundary(text, span.end.clamp(start, text.len()));
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        let source_line = text[line_start..line_end].trim_end_matches('\r').to_owned();
        let column = text[line_start..start].chars().count() + 1;
        let width = text[start..end.min(line_end)].trim_end_matches('\r').chars().count().max(1);
        // toml joins the parts of some messages with a newline ("invalid table header\nduplicate
        // key ..."); one line reads better after `FILE:LINE:COL:`.
        let message = message.into().trim().replace('\n', ": ");
        Self {
            file: file.to_owned(),
            line: text[..start].matches('\n').count() + 1,
            column,
            message,
            source_line,
            width,
            help: None,
        }
    }

    /// The same diagnostic with a hint.
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// A diagnostic from a `toml` error (syntax, unknown field, wrong type, missing field).
    pub fn from_toml(file: &Path, text: &str, err: &toml::de::Error) -> Self {
        let message = friendlier_serde_message(err.message());
        Self::new(file, text, err.span().unwrap_or(0..0), message)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let number = self.line.to_string();
        let pad = " ".repeat(number.len());
        // Keep tabs in the padding so the caret lines up under tab-indented text.
        let lead: String = self
            .source_line
            .chars()
            .take(self.column - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        writeln!(f, "{}:{}:{}: {}", self.file.display(), self.line, self.column, self.message)?;
        writeln!(f, "{pad} |")?;
        writeln!(f, "{number} | {}", self.source_line)?;
        write!(f, "{pad} | {lead}{}", "^".repeat(self.width))?;
        if let Some(help) = &self.help {
            write!(f, "\n{pad} = help: {help}")?;
        }
        Ok(())
    }
}

/// Rewrite serde's type names into the words a recipe's author uses.
fn friendlier_serde_message(message: &str) -> String {
    let mut m = message.to_owned();
    for (from, to) in [
        ("expected i64", "expected an integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected a sequence", "expected an array"),
        ("expected a map", "expected a table"),
        ("expected struct", "expected a table for"),
        ("expected a boolean", "expected `true` or `false`"),
    ] {
        m = m.replace(from, to);
    }
    m
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Up to five names, quoted, and how many more.
pub fn list_names(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(5).map(|n| format!("{n:?}")).collect();
    match names.len().saturating_sub(shown.len()) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}
