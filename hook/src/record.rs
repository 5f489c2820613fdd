//! `stackhook doctor --record` and `stackhook labels --record`: ask the driver, through the
//! host's own `nvidia-smi`, what files cannot tell (the CUDA version it supports, each GPU's
//! compute capability) and save it where the hook reads it ([`recorded::FACTS_PATH`]).
//!
//! This is the only code in stackhook that runs another program, and only when an administrator
//! asks for it on the command line: the hook itself never executes anything. The facts carry the
//! driver version and the boot id they were recorded under, so the hook ignores them after a
//! driver change or a reboot (see [`recorded`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::probe::recorded::{self, RecordedFacts, RecordedGpu};

/// Largest output read from `nvidia-smi` (64 GPUs of CSV fit many times over).
const OUTPUT_CAP: usize = 1 << 20;

/// Recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// `nvidia-smi` could not be run.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `nvidia-smi` failed or printed something else than expected.
    #[error("{program} {args}: {why}")]
    Output {
        /// The program.
        program: PathBuf,
        /// Its arguments.
        args: String,
        /// What went wrong (its stderr, or what was missing).
        why: String,
    },
    /// The facts file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Runs `nvidia_smi` (a path, or a name looked up in `PATH`), and writes what it reports to
/// `<host_root>/var/lib/stackhook/host-facts.json`, with the boot id of `host_root`.
pub fn record(host_root: &Path, nvidia_smi: &Path) -> Result<RecordedFacts, RecordError> {
    let facts = query(host_root, nvidia_smi)?;
    let path = host_root.join(recorded::FACTS_PATH);
    let write = |source| RecordError::Write { path: path.clone(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(write)?;
    }
    let mut json = serde_json::to_vec_pretty(&facts).unwrap_or_default();
    json.push(b'\n');
    crate::atomic::write_atomic(&path, &json).map_err(write)?;
    Ok(facts)
}

/// What `nvidia-smi` reports, without writing it.
pub fn query(host_root: &Path, nvidia_smi: &Path) -> Result<RecordedFacts, RecordError> {
    let driver_text = run(nvidia_smi, &["--query-gpu=driver_version", "--format=csv,noheader"])?;
    let driver = driver_text.lines().next().unwrap_or("").trim();
    let driver_version = driver.parse().map_err(|e| RecordError::Output {
        program: nvidia_smi.to_path_buf(),
        args: "--query-gpu=driver_version".to_owned(),
        why: format!("{driver:?}: {e}"),
    })?;
    // `compute_cap` exists from driver 510 on; older drivers refuse the field, so ask again
    // without it.
    let full = ["--query-gpu=index,uuid,pci.bus_id,name,compute_cap", "--format=csv,noheader"];
    let gpus: Vec<RecordedGpu> = match run(nvidia_smi, &full) {
        Ok(csv) => recorded::parse_query_gpu(&csv),
        Err(_) => recorded::parse_query_gpu(&run(
            nvidia_smi,
            &["--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"],
        )?),
    };
    let header = run(nvidia_smi, &[])?;
    let boot_id = std::fs::read_to_string(host_root.join(recorded::BOOT_ID_PATH)).unwrap_or_default();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Ok(RecordedFacts {
        schema: recorded::SCHEMA,
        recorded_at: crate::time::rfc3339(now),
        boot_id: boot_id.trim().to_owned(),
        driver_version,
        cuda_version: recorded::parse_cuda_version(&header),
        gpus,
    })
}

fn run(program: &Path, args: &[&str]) -> Result<String, RecordError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| RecordError::Spawn { program: program.to_path_buf(), source })?;
    let text = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(OUTPUT_CAP)]).into_owned();
    if !out.status.success() {
        return Err(RecordError::Output {
            program: program.to_path_buf(),
            args: args.join(" "),
            why: format!("{}: {}", out.status, text(&out.stderr).trim()),
        });
    }
    Ok(text(&out.stdout))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::fixture::{FixtureSpec, FIXTURE_BOOT_ID};

    /// A stand-in `nvidia-smi` that answers as driver 610.43.02 on one RTX A6000 does (its header
    /// says `CUDA UMD Version`, as R610 and later print it), and
    /// refuses `compute_cap` when `old` (drivers before 510).
    fn fake_nvidia_smi(dir: &Path, old: bool) -> PathBuf {
        let path = dir.join("nvidia-smi");
        let refuse = if old {
            "*compute_cap*) echo 'Field \"compute_cap\" is not a valid field to query.' >&2; exit 2 ;;"
        } else {
            ""
        };
        // Before R610 the header says `CUDA Version`.
        let cuda_label = if old { "CUDA Version" } else { "CUDA UMD Version" };
        let script = format!(
            "#!/bin/sh\ncase \"$1\" in\n{refuse}\n\
             --query-gpu=driver_version) echo 610.43.02 ;;\n\
             --query-gpu=index,uuid,pci.bus_id,name,compute_cap) echo '0, GPU-5eed0000-0000-4000-8000-000000000000, 00000000:18:00.0, NVIDIA RTX A6000, 8.6' ;;\n\
             --query-gpu=index,uuid,pci.bus_id,name) echo '0, GPU-5eed0000-0000-4000-8000-000000000000, 00000000:18:00.0, NVIDIA RTX A6000' ;;\n\
             '') echo '| NVIDIA-SMI 610.43.02              Driver Version: 610.43.02      {cuda_label}: 13.3     |' ;;\n\
             *) exit 9 ;;\nesac\n"
        );
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn records_what_nvidia_smi_says_and_the_hook_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        FixtureSpec::healthy_h100().driver("610.43.02").build(&root).unwrap();
        let smi = fake_nvidia_smi(dir.path(), false);
        let facts = record(&root, &smi).unwrap();
        assert_eq!(facts.driver_version.as_str(), "610.43.02");
        assert_eq!(facts.cuda_version.as_ref().map(ToString::to_string).as_deref(), Some("13.3"));
        assert_eq!(facts.boot_id, FIXTURE_BOOT_ID);
        assert_eq!(facts.gpus[0].compute_cap.map(|c| c.to_string()).as_deref(), Some("8.6"));
        let probe = crate::probe::probe(&root);
        assert_eq!(probe.recorded.as_ref(), Some(&facts), "{:?}", probe.recorded_ignored);

        // An older driver without compute_cap: the GPUs are still recorded, without it.
        let old_dir = dir.path().join("old");
        std::fs::create_dir_all(&old_dir).unwrap();
        let old = fake_nvidia_smi(&old_dir, true);
        let facts = query(&root, &old).unwrap();
        assert_eq!((facts.gpus.len(), facts.gpus[0].compute_cap), (1, None));
        // Its header's `CUDA Version` is read as R610's `CUDA UMD Version` is.
        assert_eq!(facts.cuda_version.as_ref().map(ToString::to_string).as_deref(), Some("13.3"));

        let missing = record(&root, Path::new("/nonexistent/nvidia-smi")).unwrap_err();
        assert!(missing.to_string().starts_with("cannot run /nonexistent/nvidia-smi"), "{missing}");
    }
}
