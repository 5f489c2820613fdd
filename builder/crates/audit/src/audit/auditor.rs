//! The audit of one root filesystem: every ELF object loaded as `ld.so` would, from each root
//! (executables, then `dlopen` roots), with its findings.

use super::elf::ElfInfo;
use super::fs::{join, split_parent, ElfState, FileInfo, Kind, RootFs};
use super::report::{AuditError, AuditReport, Finding, FindingKind};
use super::search::{
    expand_string, expand_tokens, family_name, file_version, glob_match, is_driver_library, is_libcuda,
    is_python_module, is_qt_plugin, lexical_clean, machine_name, parse_platform, Abi, Arch, ChainDir, Hit,
    Load, Loaded, Noted, SearchDir, Severity, Via, Visit, DEVICE_MACHINES, OPTIONAL_LIBRARIES, PLUGIN_EXCUSE,
    QT_PLUGIN_EXCUSE,
};
use goblin::elf::header::EM_386;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::time::Instant;

/// The audit of one root filesystem.
pub(super) struct Auditor<'a> {
    pub(super) fs: &'a RootFs,
    pub(super) arch: Arch,
    pub(super) platform: String,
    pub(super) ld_library_path: Vec<String>,
    pub(super) conf_dirs: Vec<String>,
    /// Search directory -> its resolved path (`None`: not a directory).
    pub(super) canonical: HashMap<String, Option<String>>,
    /// Findings recorded since the last [`Auditor::load`] (or the start) took them.
    pub(super) notes: Vec<Noted>,
    /// Findings about the image as a whole or single files, not about one root's closure.
    pub(super) global: Vec<Noted>,
    /// The roots loaded: executables, then `dlopen` roots, each in path order.
    pub(super) loads: Vec<Load>,
    pub(super) host_provided: BTreeMap<String, BTreeSet<String>>,
    /// (`DT_SONAME` or file name, machine, class64) -> the loadable objects of that name.
    pub(super) by_name: HashMap<(String, u16, bool), Vec<String>>,
}

impl<'a> Auditor<'a> {
    pub(super) fn new(fs: &'a RootFs, env: &[String], platform: &str) -> Result<Self, AuditError> {
        let arch = parse_platform(platform).ok_or_else(|| AuditError::Platform(platform.to_string()))?;
        let mut auditor = Self {
            fs,
            arch,
            platform: platform.to_string(),
            ld_library_path: Vec::new(),
            conf_dirs: Vec::new(),
            canonical: HashMap::new(),
            notes: Vec::new(),
            global: Vec::new(),
            loads: Vec::new(),
            host_provided: BTreeMap::new(),
            by_name: HashMap::new(),
        };
        // ld.so keeps the last definition (`process_envvars` in glibc's elf/rtld.c sees them all).
        if let Some(value) = env.iter().rev().find_map(|e| e.strip_prefix("LD_LIBRARY_PATH=")) {
            // glibc splits LD_LIBRARY_PATH at `:` and `;` (elf/dl-load.c, `_dl_init_paths`).
            for entry in value.split([':', ';']).filter(|e| !e.is_empty()) {
                if entry.starts_with('/') && !entry.contains('$') {
                    if !auditor.ld_library_path.iter().any(|d| d == entry) {
                        auditor.ld_library_path.push(entry.to_string());
                    }
                } else {
                    auditor.warn(
                        FindingKind::Unchecked,
                        "LD_LIBRARY_PATH",
                        None,
                        format!(
                            "entry {entry:?} depends on the working directory or executable; not searched"
                        ),
                    );
                }
            }
        }
        let mut seen_files = HashSet::new();
        auditor.read_conf("/etc/ld.so.conf", 0, &mut seen_files);
        Ok(auditor)
    }

    fn finding(kind: FindingKind, path: &str, soname: Option<&str>, message: String) -> Finding {
        Finding { kind, path: path.to_string(), soname: soname.map(str::to_string), message }
    }

    /// Records an error (which [`Auditor::report`] may turn into a warning, see
    /// [`Auditor::excuses`]).
    fn error(&mut self, kind: FindingKind, path: &str, soname: Option<&str>, message: String) {
        let finding = Self::finding(kind, path, soname, message);
        self.notes.push(Noted { severity: Severity::Error, finding });
    }

    fn warn(&mut self, kind: FindingKind, path: &str, soname: Option<&str>, message: String) {
        let finding = Self::finding(kind, path, soname, message);
        self.notes.push(Noted { severity: Severity::Warning, finding });
    }

    /// Reads an `ld.so.conf` file: one directory per line, `#` comments, `include <glob>...`
    /// (relative patterns are relative to the including file's directory) and `hwcap` lines
    /// (ignored), as ldconfig's `parse_conf` does.
    fn read_conf(&mut self, path: &str, depth: usize, seen: &mut HashSet<String>) {
        let Some((real, Kind::File(info))) = self.fs.resolve(path) else { return };
        if depth > 16 || !seen.insert(real) {
            return;
        }
        let Some(text) = info.text.clone() else { return };
        let (conf_dir, _) = split_parent(path);
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            match words.next() {
                Some("include") => {
                    for pattern in words {
                        let pattern = if pattern.starts_with('/') {
                            pattern.to_string()
                        } else {
                            join(conf_dir, pattern)
                        };
                        for file in self.glob(&pattern) {
                            self.read_conf(&file, depth + 1, seen);
                        }
                    }
                }
                Some("hwcap") => {}
                _ => {
                    // Old syntax `dir=libc6` names the library type after `=`.
                    let dir = match line.rsplit_once('=') {
                        Some((d, "libc4" | "libc5" | "libc6" | "glibc2")) => d.trim_end(),
                        _ => line,
                    };
                    let dir = dir.trim_end_matches('/');
                    if dir.starts_with('/') && !self.conf_dirs.iter().any(|d| d == dir) {
                        self.conf_dirs.push(dir.to_string());
                    }
                }
            }
        }
    }

    /// The existing paths matching an absolute glob, sorted.
    fn glob(&self, pattern: &str) -> Vec<String> {
        let mut current = vec![String::new()];
        for comp in pattern.split('/').filter(|c| !c.is_empty()) {
            let mut next = Vec::new();
            for base in &current {
                if comp.contains(['*', '?', '[']) {
                    let dir = if base.is_empty() { "/" } else { base.as_str() };
                    let Some((real, Kind::Dir)) = self.fs.resolve(dir) else { continue };
                    for name in self.fs.children(&real) {
                        // As in glob(3), a leading dot must be matched explicitly.
                        if (!name.starts_with('.') || comp.starts_with('.'))
                            && glob_match(comp.as_bytes(), name.as_bytes())
                        {
                            next.push(format!("{base}/{name}"));
                        }
                    }
                } else {
                    next.push(format!("{base}/{comp}"));
                }
            }
            current = next;
        }
        current.retain(|p| self.fs.resolve(p).is_some());
        current.sort();
        current
    }

    /// The default directories for objects of `abi`.
    fn default_dirs(abi: Abi) -> Vec<String> {
        let mut dirs = vec![format!("/lib/{}", abi.triplet), format!("/usr/lib/{}", abi.triplet)];
        if abi.class64 {
            dirs.extend(["/lib64".to_string(), "/usr/lib64".to_string()]);
        } else if abi.machine == EM_386 {
            dirs.extend(["/lib32".to_string(), "/usr/lib32".to_string()]);
        }
        dirs.extend(["/lib".to_string(), "/usr/lib".to_string()]);
        dirs
    }

    /// The resolved form of a search directory, cached.
    fn canonical_dir(&mut self, dir: &str) -> Option<String> {
        if let Some(c) = self.canonical.get(dir) {
            return c.clone();
        }
        let c = match self.fs.resolve(dir) {
            Some((real, Kind::Dir)) => Some(real),
            _ => None,
        };
        self.canonical.insert(dir.to_string(), c.clone());
        c
    }

    /// Looks `name` up in one directory for an object of `abi`.
    fn lookup(&mut self, search: &SearchDir, name: &str, abi: Abi) -> Option<Hit> {
        let dir = self.canonical_dir(&search.dir)?;
        let (real, kind) = self.fs.resolve_in(&dir, name)?;
        let Kind::File(info) = kind else { return None };
        let elf = match &info.elf {
            ElfState::Elf(e) if e.machine == abi.machine && e.class64 == abi.class64 => true,
            // Another class or machine: skipped, the search goes on (`open_verify`).
            ElfState::Elf(_) => return None,
            ElfState::Invalid(_) => true,
            ElfState::NotElf => false,
        };
        Some(Hit { found_at: join(&search.dir, name), real, from: search.clone(), elf })
    }

    /// The search list of an object for its dependencies.
    fn search_list(&self, info: &ElfInfo, origin: &str, abi: Abi, chain: &[ChainDir]) -> Vec<SearchDir> {
        let mut list = Vec::new();
        let split = |s: &str| s.split(':').map(str::to_string).collect::<Vec<_>>();
        if info.runpath.is_none() {
            for raw in info.rpath.as_deref().map(split).unwrap_or_default() {
                if let Some(dir) = expand_tokens(&raw, origin, abi) {
                    list.push(SearchDir { dir, via: Via::Rpath, raw: Some(raw) });
                }
            }
            for c in chain {
                let via = Via::LoaderRpath(c.owner.clone());
                list.push(SearchDir { dir: c.dir.clone(), via, raw: Some(c.raw.clone()) });
            }
        }
        for dir in &self.ld_library_path {
            list.push(SearchDir { dir: dir.clone(), via: Via::LdLibraryPath, raw: None });
        }
        for raw in info.runpath.as_deref().map(split).unwrap_or_default() {
            if let Some(dir) = expand_tokens(&raw, origin, abi) {
                list.push(SearchDir { dir, via: Via::Runpath, raw: Some(raw) });
            }
        }
        if !info.nodeflib {
            for dir in &self.conf_dirs {
                list.push(SearchDir { dir: dir.clone(), via: Via::LdSoConf, raw: None });
            }
            for dir in Self::default_dirs(abi) {
                list.push(SearchDir { dir, via: Via::Default, raw: None });
            }
        }
        list
    }

    /// A short description of a search list for "not found" messages.
    fn describe_search(list: &[SearchDir]) -> String {
        let mut parts: Vec<String> = Vec::new();
        for s in list {
            let part = match s.via {
                Via::LdSoConf => "ld.so.conf".to_string(),
                Via::Default => "the default directories".to_string(),
                _ => format!("{} ({})", s.dir, s.describe()),
            };
            if !parts.contains(&part) {
                parts.push(part);
            }
        }
        parts.join(", ")
    }

    /// The ELF info of the regular file at the real path `path`.
    fn elf_at(&self, path: &str) -> Option<&'a ElfInfo> {
        match self.fs.resolve(path) {
            Some((_, Kind::File(info))) => match &info.elf {
                ElfState::Elf(e) => Some(e),
                _ => None,
            },
            _ => None,
        }
    }

    /// Loads `root` the way `ld.so` would, breadth first: each `DT_NEEDED` is first matched
    /// against the names (requested names and `DT_SONAME`s) of what is already loaded, and only
    /// searched for when nothing matches (glibc `elf/dl-deps.c` and `_dl_map_object`). An object
    /// found by a search gets its loader's `RPATH` chain. Returns what was loaded and the
    /// findings recorded meanwhile.
    fn load(&mut self, root: &str, dlopened: bool) -> Load {
        let (origin, _) = split_parent(root);
        let mut queue = VecDeque::from([Visit {
            object: root.to_string(),
            origin: origin.to_string(),
            chain: Vec::new(),
            dlopened,
        }]);
        let mut names: HashMap<String, Loaded> = HashMap::new();
        let mut loaded: HashSet<String> = HashSet::from([root.to_string()]);
        let remember =
            |names: &mut HashMap<String, Loaded>, info: Option<&ElfInfo>, name: &str, l: &Loaded| {
                for n in info.and_then(|i| i.soname.as_deref()).into_iter().chain([name]) {
                    names.entry(n.to_string()).or_insert_with(|| l.clone());
                }
            };
        if let Some(info) = self.elf_at(root) {
            let me = Loaded { real: root.to_string(), found_at: root.to_string(), by: root.to_string() };
            remember(&mut names, Some(info), root, &me);
            // The dynamic loader itself is loaded, under its path and soname.
            if let Some(interp) = &info.interp {
                if let Some((real, _)) = self.fs.resolve(interp) {
                    let l = Loaded { real: real.clone(), found_at: interp.clone(), by: root.to_string() };
                    remember(&mut names, self.elf_at(&real), interp, &l);
                    loaded.insert(real);
                }
            }
        }
        let mut objects = HashSet::new();
        while let Some(visit) = queue.pop_front() {
            objects.insert(visit.object.clone());
            let Some(info) = self.elf_at(&visit.object) else { continue };
            let Some(abi) = self.arch.abi_of(info) else { continue };
            // The RPATH chain this object passes on: its own (ignored next to a RUNPATH) in
            // front of its loaders'.
            let mut chain = Vec::new();
            if info.runpath.is_none() {
                for raw in info.rpath.as_deref().unwrap_or_default().split(':') {
                    if let Some(dir) = expand_tokens(raw, &visit.origin, abi) {
                        chain.push(ChainDir { dir, raw: raw.to_string(), owner: visit.object.clone() });
                    }
                }
            }
            for inherited in &visit.chain {
                if !chain.iter().any(|c| c.dir == inherited.dir) {
                    chain.push(inherited.clone());
                }
            }
            let list = self.search_list(info, &visit.origin, abi, &visit.chain);
            for needed in &info.needed {
                // glibc expands dynamic string tokens in DT_NEEDED too
                // (`$ORIGIN/../lib/libpython3.12.so.1.0`).
                let name = if needed.contains('$') {
                    expand_string(needed, &visit.origin, abi)
                } else {
                    needed.clone()
                };
                if let Some(earlier) = names.get(&name) {
                    if info.runpath.is_some() && !is_driver_library(&name) {
                        let earlier = earlier.clone();
                        self.check_pinned(&visit.object, &name, abi, &list, &earlier);
                    }
                    continue;
                }
                let Some(hit) = self.resolve_needed(&visit, info, abi, &name, &list) else { continue };
                let l = Loaded {
                    real: hit.real.clone(),
                    found_at: hit.found_at.clone(),
                    by: visit.object.clone(),
                };
                remember(&mut names, self.elf_at(&hit.real), &name, &l);
                if loaded.insert(hit.real.clone()) {
                    let (origin, _) = split_parent(&hit.found_at);
                    queue.push_back(Visit {
                        object: hit.real,
                        origin: origin.to_string(),
                        chain: chain.clone(),
                        dlopened: visit.dlopened,
                    });
                }
            }
        }
        Load { root: root.to_string(), dlopened, objects, notes: std::mem::take(&mut self.notes) }
    }

    /// An object with a RUNPATH gets `name` from what an earlier object loaded: reports it when
    /// its RUNPATH pins another file.
    fn check_pinned(&mut self, object: &str, name: &str, abi: Abi, list: &[SearchDir], earlier: &Loaded) {
        if earlier.real == object {
            return;
        }
        let runpath: Vec<SearchDir> = list.iter().filter(|s| s.via == Via::Runpath).cloned().collect();
        let Some(pinned) = runpath.iter().find_map(|s| self.lookup(s, name, abi)) else { return };
        if !pinned.elf || pinned.real == earlier.real {
            return;
        }
        let (dir, _) = split_parent(&earlier.found_at);
        let from = SearchDir { dir: dir.to_string(), via: Via::Loaded(earlier.by.clone()), raw: None };
        let first = Hit { found_at: earlier.found_at.clone(), real: earlier.real.clone(), from, elf: true };
        self.shadowed(object, name, &first, &pinned);
    }

    /// Resolves one `DT_NEEDED` of `object`; returns the ELF file to descend into.
    fn resolve_needed(
        &mut self,
        visit: &Visit,
        info: &ElfInfo,
        abi: Abi,
        name: &str,
        list: &[SearchDir],
    ) -> Option<Hit> {
        let object = visit.object.as_str();
        let compat = abi.class64 != self.arch.native.class64;
        if name.contains('/') {
            // A path: used as is, relative to the working directory if relative.
            if !name.starts_with('/') {
                self.warn(
                    FindingKind::Unchecked,
                    object,
                    Some(name),
                    "needs a library by relative path (relative to the working directory)".into(),
                );
                return None;
            }
            let (dir, base) = split_parent(name);
            let search = SearchDir { dir: dir.to_string(), via: Via::Path, raw: None };
            return match self.lookup(&search, base, abi) {
                None => {
                    self.unresolved(object, name, compat, format!("{name} not found"));
                    None
                }
                Some(hit) if !hit.elf => {
                    let message =
                        format!("{name} is not an ELF object (ld.so stops with \"invalid ELF header\")");
                    self.unresolved(object, name, compat, message);
                    None
                }
                hit => hit,
            };
        }
        let mut hits: Vec<Hit> = Vec::new();
        for search in list {
            if let Some(hit) = self.lookup(search, name, abi) {
                if !hits.iter().any(|h| h.real == hit.real) {
                    hits.push(hit);
                }
                // Only an object with a RUNPATH can have its pinned copy shadowed, and only by
                // LD_LIBRARY_PATH, which comes before the RUNPATH: look further only then.
                if info.runpath.is_none() || search.via != Via::LdLibraryPath {
                    break;
                }
            }
        }
        let first = hits.first().cloned();
        if is_driver_library(name) {
            self.host_provided.entry(name.to_string()).or_default().insert(object.to_string());
            if let Some(hit) = &first {
                self.driver_copy(hit, Some(object));
            }
            return None;
        }
        let Some(first) = first else {
            let searched = Self::describe_search(list);
            let elsewhere = self.by_name.get(&(name.to_string(), abi.machine, abi.class64));
            match elsewhere.and_then(|paths| paths.first()).filter(|_| visit.dlopened) {
                // Loaded by dlopen into a process that may have loaded that copy already: the
                // loader then matches it by name without searching (`_dl_map_object`).
                Some(path) => {
                    let message = format!(
                        "{name} is not on the search path (searched {searched}) but the image has \
                         {path}; nothing in the image links to this object, so it loads only if \
                         that copy is already loaded when it is dlopen'ed"
                    );
                    self.warn(FindingKind::Unresolved, object, Some(name), message);
                }
                None => {
                    self.unresolved(object, name, compat, format!("{name} not found (searched {searched})"));
                }
            }
            return None;
        };
        if !first.elf {
            self.unresolved(
                object,
                name,
                compat,
                format!(
                    "{name} is {}, which is not an ELF object (ld.so stops with \"invalid ELF header\")",
                    Self::describe_file(&first)
                ),
            );
            return None;
        }
        if first.from.via == Via::LdLibraryPath {
            if let Some(pinned) = hits.iter().find(|h| h.from.via == Via::Runpath) {
                self.shadowed(object, name, &first, pinned);
            }
        }
        Some(first)
    }

    fn unresolved(&mut self, object: &str, name: &str, compat: bool, message: String) {
        if compat {
            self.warn(FindingKind::Unresolved, object, Some(name), format!("{message} (32-bit object)"));
        } else {
            self.error(FindingKind::Unresolved, object, Some(name), message);
        }
    }

    /// `path -> real (version V, via X)` for messages.
    fn describe_file(hit: &Hit) -> String {
        let shown = lexical_clean(&hit.found_at);
        let mut s = shown.clone();
        if hit.real != shown {
            let _ = write!(s, " -> {}", hit.real);
        }
        let version = file_version(&hit.real).or_else(|| file_version(&hit.found_at));
        match version {
            Some(v) => {
                let _ = write!(s, " (version {v}, via {})", hit.from.describe());
            }
            None => {
                let _ = write!(s, " (unversioned, via {})", hit.from.describe());
            }
        }
        s
    }

    fn shadowed(&mut self, object: &str, name: &str, first: &Hit, pinned: &Hit) {
        let file = |h: &Hit| match self.fs.resolve(&h.real) {
            Some((_, Kind::File(f))) => Some(std::ptr::from_ref::<FileInfo>(f)),
            _ => None,
        };
        // Two hardlinks of one file (as a layer stores them) are the same library.
        if file(first).is_some() && file(first) == file(pinned) {
            return;
        }
        let version =
            |h: &Hit| file_version(&h.real).or_else(|| file_version(&h.found_at)).map(str::to_string);
        let message = format!(
            "{name} resolves to {} instead of {} that its RUNPATH pins",
            Self::describe_file(first),
            Self::describe_file(pinned)
        );
        // Equal full versions (`8.9.2` in both names, not just the soname's `8`): most likely
        // two copies of one release.
        let same_release =
            version(first).is_some_and(|v| v.contains('.')) && version(first) == version(pinned);
        if same_release {
            self.warn(FindingKind::Shadowed, object, Some(name), format!("{message} (same version)"));
        } else {
            self.error(FindingKind::Shadowed, object, Some(name), message);
        }
    }

    /// Reports an in-image copy of a driver library that the loader can reach.
    fn driver_copy(&mut self, hit: &Hit, needed_by: Option<&str>) {
        let (_, base) = split_parent(&hit.found_at);
        let by = needed_by.map(|o| format!(", needed by {o},")).unwrap_or_default();
        if is_libcuda(base) {
            // Each root that reaches it records it; the report keeps the first message.
            let what = if hit.found_at.split('/').any(|c| c == "stubs")
                || hit.real.split('/').any(|c| c == "stubs")
            {
                "a libcuda stub"
            } else {
                "a copy of libcuda"
            };
            let message = format!(
                "{what}{by} is reachable via {} ({}): the host's driver provides libcuda, and a \
                 copy loaded instead makes CUDA report \"CUDA driver version is insufficient\"",
                hit.from.describe(),
                hit.found_at
            );
            self.error(FindingKind::Stub, &hit.real, Some(base), message);
        } else {
            let message = format!(
                "host driver library{by} inside the image, reachable via {} ({}): a copy that does \
                 not match the host's driver fails (NVML: \"Driver/library version mismatch\")",
                hit.from.describe(),
                hit.found_at
            );
            self.warn(FindingKind::DriverLibrary, &hit.real, Some(base), message);
        }
    }

    /// Reports driver libraries (and libcuda stubs) in the directories every object searches.
    fn scan_global_dirs(&mut self) {
        let mut searches: Vec<SearchDir> = Vec::new();
        for dir in &self.ld_library_path {
            searches.push(SearchDir { dir: dir.clone(), via: Via::LdLibraryPath, raw: None });
        }
        for dir in &self.conf_dirs {
            searches.push(SearchDir { dir: dir.clone(), via: Via::LdSoConf, raw: None });
        }
        for dir in Self::default_dirs(self.arch.native) {
            searches.push(SearchDir { dir, via: Via::Default, raw: None });
        }
        let mut done = HashSet::new();
        for search in searches {
            let Some(real_dir) = self.canonical_dir(&search.dir) else { continue };
            if !done.insert(real_dir.clone()) {
                continue;
            }
            let names: Vec<String> = self
                .fs
                .children(&real_dir)
                .into_iter()
                .filter(|n| is_driver_library(n))
                .map(str::to_string)
                .collect();
            for name in names {
                if let Some((real, Kind::File(_))) = self.fs.resolve(&join(&real_dir, &name)) {
                    let hit =
                        Hit { found_at: join(&search.dir, &name), real, from: search.clone(), elf: true };
                    self.driver_copy(&hit, None);
                }
            }
        }
    }

    /// Checks the program interpreter of an executable.
    fn check_interp(&mut self, object: &str, interp: &str, abi: Abi) {
        let ok = match self.fs.resolve(interp) {
            Some((_, Kind::File(f))) => match &f.elf {
                ElfState::Elf(e) => e.machine == abi.machine && e.class64 == abi.class64,
                ElfState::Invalid(_) => true,
                ElfState::NotElf => false,
            },
            _ => false,
        };
        if !ok {
            let compat = abi.class64 != self.arch.native.class64;
            self.unresolved(
                object,
                interp,
                compat,
                format!("program interpreter {interp} not found (or not an ELF file of this machine)"),
            );
        }
    }

    /// Runs the audit over every ELF file; returns how many were read.
    pub(super) fn audit(&mut self) -> usize {
        self.scan_global_dirs();
        let mut scanned = 0;
        let mut executables = Vec::new();
        let mut libraries = Vec::new();
        let fs = self.fs;
        for (path, file) in fs.files() {
            if is_ignored(path) {
                scanned += usize::from(!matches!(file.elf, ElfState::NotElf));
                continue;
            }
            let info = match &file.elf {
                ElfState::NotElf => continue,
                ElfState::Invalid(why) => {
                    scanned += 1;
                    self.warn(FindingKind::BadElf, path, None, format!("unparsable ELF file: {why}"));
                    continue;
                }
                ElfState::Elf(info) => info,
            };
            scanned += 1;
            if !info.is_loadable() || DEVICE_MACHINES.contains(&info.machine) {
                continue;
            }
            let Some(abi) = self.arch.abi_of(info) else {
                let bits = if info.class64 { 64 } else { 32 };
                self.error(
                    FindingKind::Machine,
                    path,
                    None,
                    format!(
                        "{bits}-bit {} object in a {} image (which runs {})",
                        machine_name(info.machine),
                        self.platform,
                        self.arch.describe()
                    ),
                );
                continue;
            };
            if abi.class64 != self.arch.native.class64 {
                self.warn(
                    FindingKind::Elf32,
                    path,
                    None,
                    format!(
                        "32-bit {} object in a 64-bit image: it needs the 32-bit loader and libraries",
                        machine_name(info.machine)
                    ),
                );
            }
            let (_, base) = split_parent(path);
            for name in info.soname.iter().map(String::as_str).chain([base]) {
                let paths = self.by_name.entry((name.to_string(), abi.machine, abi.class64)).or_default();
                if !paths.iter().any(|p| p == path) {
                    paths.push(path.to_string());
                }
            }
            if let Some(interp) = &info.interp {
                self.check_interp(path, interp, abi);
                executables.push(path.to_string());
            } else {
                libraries.push(path.to_string());
            }
        }
        self.global.append(&mut self.notes);
        // Every executable, as the process it starts.
        let mut by_executables = HashSet::new();
        for path in executables {
            let load = self.load(&path, false);
            by_executables.extend(load.objects.iter().cloned());
            self.loads.push(load);
        }
        // Then every library that none of them loads, as if dlopen'ed on its own; the roots are
        // those that no other of them loads either (plugins, Python extension modules).
        let candidates: Vec<Load> =
            libraries.iter().filter(|p| !by_executables.contains(*p)).map(|p| self.load(p, true)).collect();
        let is_root = Self::dlopen_roots(&candidates);
        self.loads
            .extend(candidates.into_iter().zip(is_root).filter_map(|(load, root)| root.then_some(load)));
        scanned
    }

    /// Which of `candidates` (each loaded on its own) are roots: those no other one loads, then,
    /// in order, the first of each group that only loads each other (a dependency cycle).
    fn dlopen_roots(candidates: &[Load]) -> Vec<bool> {
        let loaded: HashSet<&str> = candidates
            .iter()
            .flat_map(|l| l.objects.iter().filter(move |o| **o != l.root).map(String::as_str))
            .collect();
        let mut is_root: Vec<bool> = candidates.iter().map(|l| !loaded.contains(l.root.as_str())).collect();
        let mut covered: HashSet<&str> = HashSet::new();
        for (load, _) in candidates.iter().zip(&is_root).filter(|(_, root)| **root) {
            covered.extend(load.objects.iter().map(String::as_str));
        }
        for (load, root) in candidates.iter().zip(&mut is_root) {
            if !covered.contains(load.root.as_str()) {
                *root = true;
                covered.extend(load.objects.iter().map(String::as_str));
            }
        }
        is_root
    }

    /// The directories every object searches (`LD_LIBRARY_PATH`, `ld.so.conf`, the default
    /// directories), resolved.
    fn search_path_dirs(&mut self) -> HashSet<String> {
        let mut dirs: Vec<String> = self.ld_library_path.clone();
        dirs.extend(self.conf_dirs.iter().cloned());
        for abi in [Some(self.arch.native), self.arch.compat].into_iter().flatten() {
            dirs.extend(Self::default_dirs(abi));
        }
        dirs.iter().filter_map(|d| self.canonical_dir(d)).collect()
    }

    /// For each of [`Auditor::loads`], why the unresolved libraries in its closure are only
    /// warnings, if they are: the root is an alternative build of a library another build of
    /// which resolves, or a plugin (see the module documentation).
    fn excuses(&mut self) -> Vec<Option<String>> {
        let search_path = self.search_path_dirs();
        let loads = &self.loads;
        let resolves = |l: &Load| {
            !l.notes
                .iter()
                .any(|n| n.severity == Severity::Error && n.finding.kind == FindingKind::Unresolved)
        };
        let mut excuses: Vec<Option<String>> = vec![None; loads.len()];

        // Alternative builds: dlopen roots by directory and name without digits.
        let mut families: BTreeMap<(&str, String), Vec<usize>> = BTreeMap::new();
        for (i, load) in loads.iter().enumerate().filter(|(_, l)| l.dlopened) {
            let (dir, name) = split_parent(&load.root);
            families.entry((dir, family_name(name))).or_default().push(i);
        }
        for members in families.values().filter(|m| m.len() >= 2) {
            let Some(&good) = members.iter().find(|&&i| resolves(&loads[i])) else { continue };
            let (_, good_name) = split_parent(&loads[good].root);
            for &i in members.iter().filter(|&&i| !resolves(&loads[i])) {
                excuses[i] = Some(format!("an alternative build; {good_name} in the same directory does"));
            }
        }

        // Plugins: directories of dlopen roots that nothing links into, except from inside.
        let mut linked_into: HashSet<&str> = HashSet::new();
        for load in loads {
            let (root_dir, _) = split_parent(&load.root);
            for object in load.objects.iter().filter(|o| **o != load.root) {
                let (dir, _) = split_parent(object);
                if !load.dlopened || dir != root_dir {
                    linked_into.insert(dir);
                }
            }
        }
        for (load, excuse) in loads.iter().zip(&mut excuses) {
            let (dir, _) = split_parent(&load.root);
            if excuse.is_none()
                && load.dlopened
                && !is_python_module(&load.root)
                && !search_path.contains(dir)
                && !linked_into.contains(dir)
            {
                *excuse = Some(PLUGIN_EXCUSE.to_string());
            }
        }
        for (load, excuse) in loads.iter().zip(&mut excuses).filter(|(l, e)| e.is_none() && l.dlopened) {
            if let Some((_, why)) = OPTIONAL_LIBRARIES.iter().find(|(suffix, _)| load.root.ends_with(suffix))
            {
                *excuse = Some((*why).to_string());
            } else if is_qt_plugin(&load.root) {
                *excuse = Some(QT_PLUGIN_EXCUSE.to_string());
            }
        }
        excuses
    }

    /// The report: the findings of every root, where an unresolved library is an error unless
    /// every root that reaches it excuses it ([`Auditor::excuses`]), and each finding is kept
    /// once, with the message of its first recording at its final severity.
    pub(super) fn report(mut self, objects_scanned: usize, started: Instant) -> AuditReport {
        let excuses = self.excuses();
        let recorded = std::mem::take(&mut self.loads).into_iter().zip(excuses).flat_map(|(load, excuse)| {
            load.notes.into_iter().map(move |mut note| {
                if let Some(excuse) = &excuse {
                    if note.severity == Severity::Error && note.finding.kind == FindingKind::Unresolved {
                        note.severity = Severity::Warning;
                        let _ = write!(note.finding.message, " ({excuse})");
                    }
                }
                note
            })
        });
        let mut merged: BTreeMap<(FindingKind, String, Option<String>), Noted> = BTreeMap::new();
        for note in std::mem::take(&mut self.global).into_iter().chain(recorded) {
            let f = &note.finding;
            // A stub is reported once, under the name that reached it first.
            let soname = if f.kind == FindingKind::Stub { None } else { f.soname.clone() };
            let key = (f.kind, f.path.clone(), soname);
            match merged.entry(key) {
                Entry::Vacant(e) => {
                    e.insert(note);
                }
                Entry::Occupied(mut e) => {
                    if note.severity > e.get().severity {
                        e.insert(note);
                    }
                }
            }
        }
        let (errors, warnings): (Vec<Noted>, Vec<Noted>) =
            merged.into_values().partition(|n| n.severity == Severity::Error);
        AuditReport {
            objects_scanned,
            elapsed: started.elapsed(),
            errors: errors.into_iter().map(|n| n.finding).collect(),
            warnings: warnings.into_iter().map(|n| n.finding).collect(),
            host_provided: self
                .host_provided
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().collect()))
                .collect(),
        }
    }
}

/// Whether `path` is an ELF file that `ld.so` never loads: firmware for other processors
/// (`/lib/firmware`) and separate debug info (`/usr/lib/debug`, whose program headers point at
/// sections stripped from the file).
pub(super) fn is_ignored(path: &str) -> bool {
    ["/lib/firmware/", "/usr/lib/firmware/", "/usr/lib/debug/"].iter().any(|p| path.starts_with(p))
}
