//! What an administrator put on the host for the probe: the facts file `stackhook doctor --record`
//! writes from `nvidia-smi` (see [`recorded`](super::recorded)), and knowledge-base rows in
//! `/etc/stackhook/kb.d`.

use std::path::Path;

use super::hostfs::ReadError;
use super::recorded::{self, RecordedFacts};
use super::{abs, HostProbe, ProbeNote, Reader, FILE_CAP};
use crate::contract::kb;

impl Reader {
    /// The facts file `stackhook doctor --record` writes, used only while its driver version and
    /// boot id match the running host's.
    pub(super) fn recorded(&mut self, p: &mut HostProbe) {
        let text = match self.fs.read_text(recorded::FACTS_PATH, recorded::FACTS_CAP) {
            Ok(t) => t,
            Err(ReadError::NotFound) => return,
            Err(e) => {
                p.recorded_ignored = Some(e.to_string());
                return;
            }
        };
        let boot_id = self.text(recorded::BOOT_ID_PATH, FILE_CAP);
        let facts = RecordedFacts::parse(&text)
            .and_then(|f| f.current(p.driver.as_ref().map(|d| &d.value), boot_id.as_deref()).map(|()| f));
        match facts {
            Ok(f) => p.recorded = Some(f),
            Err(why) => p.recorded_ignored = Some(why),
        }
    }

    /// `etc/stackhook/kb.d/*.toml`: read only when the directory exists, at most
    /// [`kb::extra::MAX_FILES`] regular files of at most [`kb::extra::MAX_FILE`] bytes, in name
    /// order. A file that does not read or check is left out with a note.
    pub(super) fn kb_d(&mut self, p: &mut HostProbe) {
        let dir = kb::extra::KB_D;
        if self.exists(dir).is_none() {
            return;
        }
        let mut names: Vec<String> = self
            .list(dir, kb::extra::MAX_FILES)
            .into_iter()
            .filter(|n| {
                !n.starts_with('.')
                    && Path::new(n).extension().is_some_and(|e| e.eq_ignore_ascii_case("toml"))
            })
            .collect();
        names.sort();
        for name in names {
            let rel = format!("{dir}/{name}");
            let Some(text) = self.text(&rel, kb::extra::MAX_FILE) else { continue };
            match p.kb_extension.add(&abs(&rel), &text) {
                Ok(()) => p.kb_files.push(abs(&rel)),
                Err(e) => self.notes.push(ProbeNote { path: abs(&rel), problem: format!("ignored: {e}") }),
            }
        }
    }
}
