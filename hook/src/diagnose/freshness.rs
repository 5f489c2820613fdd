//! L4, freshness of what the facts were looked up in: a recorded `nvidia-smi` facts file that was
//! not used, and a driver branch newer than every row of the knowledge base.

use super::report::{Finding, Layer, Severity};
use super::Checks;
use crate::contract::kb;
use crate::probe;

impl Checks<'_> {
    /// L4: a recorded facts file exists but was not used (stale after a driver change or reboot,
    /// unreadable, or malformed): the facts it held are looked up in the tables instead.
    pub(super) fn stale_facts(&mut self) {
        let Some(why) = &self.p.recorded_ignored else { return };
        self.push(
            Finding::new(
                "L4-RECORDED-FACTS-IGNORED",
                Layer::L4Versions,
                Severity::Info,
                format!("the recorded nvidia-smi facts were not used: {why}"),
            )
            .with(&format!("/{}", probe::recorded::FACTS_PATH), why)
            .remedy("sudo stackhook doctor --record"),
        );
    }

    /// L4: the loaded driver is of a branch newer than every row of the knowledge base (built-in
    /// and `kb.d`): its CUDA version is then only known as a lower bound, unless `nvidia-smi`'s
    /// answer was recorded.
    pub(super) fn kb_age(&mut self) {
        let p = self.p;
        let Some(d) = &p.driver else { return };
        let newest =
            kb::newest_branch().map_or(0, |b| b.branch).max(p.kb_extension.newest_branch().unwrap_or(0));
        if d.value.branch() <= newest {
            return;
        }
        let recorded = p.recorded.as_ref().is_some_and(|r| r.cuda_version.is_some());
        let (severity, tail) = if recorded {
            (Severity::Info, "the CUDA version comes from the recorded nvidia-smi facts")
        } else {
            (
                Severity::Warning,
                "its CUDA version is known only as a lower bound, and requirements above it are reported, not enforced",
            )
        };
        let f = Finding::new(
            "L4-KB-OLDER-THAN-DRIVER",
            Layer::L4Versions,
            severity,
            format!(
                "driver branch {} is newer than the knowledge base of {} (newest branch {newest}): {tail}",
                d.value.branch(),
                kb::KB_DATE
            ),
        )
        .with_evidence(&d.evidence);
        self.push(if recorded {
            f
        } else {
            f.remedy(
                "sudo stackhook doctor --record (saves nvidia-smi's CUDA version for the hook), or add a [[branch]] row \
                 with its source in /etc/stackhook/kb.d/, or update stackhook",
            )
        });
    }
}
