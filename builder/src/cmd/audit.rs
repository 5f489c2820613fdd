//! `stackbuild audit IMAGE`.

use stackbuild_audit::audit_layout;
use stackbuild_common::ImageArg;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The image: an OCI layout directory (`DIR` or `DIR:TAG`) or an archive written by
    /// `--archive` / `docker save` of an OCI-layout image.
    image: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub(super) fn run(self) -> anyhow::Result<std::process::ExitCode> {
        let ImageArg { path, tag } = ImageArg::parse(&self.image);
        let tmp;
        let layout = if path.is_file() {
            tmp = tempfile::tempdir()?;
            // The same whitelisted extraction a base image archive gets: names only, regular files.
            stackbuild_image::extract_image_archive(&path, tmp.path())?;
            tmp.path().to_owned()
        } else {
            path
        };
        let report = audit_layout(&layout, tag.as_deref())?;
        if self.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", report.render_human());
        }
        Ok(if report.has_errors() {
            std::process::ExitCode::FAILURE
        } else {
            std::process::ExitCode::SUCCESS
        })
    }
}
