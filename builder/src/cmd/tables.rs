//! `stackbuild tables torch`: for maintainers, the torch table from an index's metadata.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use stackbuild_check::torch::{self, Options};
use stackbuild_python::Index;
use stackcontract::version::PackageVersion;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    table: Table,
}

#[derive(Debug, clap::Subcommand)]
enum Table {
    /// `contract/kb/torch.toml`: CUDA builds, exact `nvidia-*` pins (cuDNN included), Python
    /// range and the torchvision/torchaudio that pin each torch, read from the index's PEP 691
    /// pages and the wheels' `METADATA` (PEP 658 files, else range requests: no wheel is
    /// downloaded). `arch`, `ptx`, `numpy` bounds, notes and other indexes' builds stay as written.
    ///
    /// Example: `stackbuild tables torch --check` (the checked-in table against the machine's
    /// index), `stackbuild tables torch --index builder/tests/fixtures/index/torch --check` (against a
    /// recording).
    Torch(TorchArgs),
}

#[derive(Debug, clap::Args)]
struct TorchArgs {
    /// The index: a simple-API URL, or a recorded index directory (default: the one pip and uv
    /// are configured with: `UV_DEFAULT_INDEX`, `UV_INDEX_URL`, `PIP_INDEX_URL`, pip's
    /// `global.index-url`, else pip's default).
    #[arg(long, value_name = "URL|DIR")]
    index: Option<String>,
    /// The index's name in the rows' citations (a name, never a host).
    #[arg(long, default_value = "PyPI")]
    index_name: String,
    /// The table to update.
    #[arg(long, default_value = "contract/kb/torch.toml")]
    table: PathBuf,
    /// The oldest torch release with a row.
    #[arg(long, default_value = "2.0.0")]
    since: PackageVersion,
    /// Write nothing: exit 1 when the table differs from what the index says.
    #[arg(long)]
    check: bool,
    /// Only the releases the table has: report the others, add nothing.
    #[arg(long)]
    known_only: bool,
    /// Also download each build's wheels (one at a time, into a temporary directory, removed
    /// after) and write `arch`, `ptx` and `aarch64_arch` from their fat binaries: about 1 GiB a
    /// build, so use with `--since`.
    #[arg(long)]
    read_arch: bool,
    /// Also record what was read into DIR (a recorded index for the tests).
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
}

impl Args {
    pub(super) fn run(self) -> anyhow::Result<ExitCode> {
        match self.table {
            Table::Torch(args) => args.run(),
        }
    }
}

impl TorchArgs {
    fn run(self) -> anyhow::Result<ExitCode> {
        let where_ = match self.index {
            Some(i) => i,
            None => stackbuild_python::configured_index()?,
        };
        let mut index = if std::path::Path::new(&where_).is_dir() {
            Index::recorded(std::path::Path::new(&where_))
        } else {
            Index::http(&where_)?
        };
        if let Some(dir) = &self.record {
            index.record_into(dir);
        }
        let scratch = if self.read_arch {
            Some(tempfile::tempdir().context("creating a scratch directory")?)
        } else {
            None
        };
        let options = Options {
            since: self.since,
            index_name: self.index_name,
            read_arch: scratch.as_ref().map(|d| d.path().to_owned()),
        };
        let generated = torch::generate(&mut index, &options)?;
        index.finish()?;
        for w in &generated.warnings {
            tracing::warn!("{w}");
        }
        let name = self.table.display().to_string();
        let text = stackbuild_common::read_text(&self.table, stackbuild_common::MAX_TEXT, "torch table")?;
        let (new, changes) = torch::apply(&name, &text, &generated, self.known_only)?;
        let mut out = std::io::stdout().lock();
        for line in &changes.lines {
            writeln!(out, "{line}")?;
        }
        let differs = new != text;
        writeln!(
            out,
            "{name}: {} releases read from the index, {}",
            generated.releases.len(),
            if differs { "the table differs" } else { "the table matches" }
        )?;
        if self.check {
            return Ok(if differs { ExitCode::FAILURE } else { ExitCode::SUCCESS });
        }
        if differs {
            torch::write_table(&self.table, &new)
                .with_context(|| format!("writing {}", self.table.display()))?;
        }
        Ok(ExitCode::SUCCESS)
    }
}
