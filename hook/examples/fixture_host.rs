//! Benchmark helper for `bench/run.sh`: builds the eight-GPU fixture host (`Preset::EightGpus`,
//! the one the hook's own benchmark uses) into DIR and prints the requirement expressions its
//! image carries, one per line, for the container's `STACKBUILD_REQUIRE_*` variables.
//!
//! ```sh
//! cargo build --release -p stackhook --features fixture --example fixture_host
//! target/release/examples/fixture_host DIR
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use stackhook::fixture::Preset;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: fixture_host DIR");
        return ExitCode::from(2);
    };
    let preset = Preset::EightGpus;
    let host = match preset.build(&dir) {
        Ok(host) => host,
        Err(e) => {
            eprintln!("fixture_host: building the fixture host in {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    if !host.real_device_nodes() {
        // The probe then reports the /dev/nvidia* stand-ins as "not a character device", and the
        // hook blocks: the timing would be of a refusal, not of a start.
        eprintln!("fixture_host: warning: mknod not permitted, fixture device nodes are plain files");
    }
    for expr in preset.requires() {
        println!("{expr}");
    }
    ExitCode::SUCCESS
}
