//! Fault injection against both programs (issue 7, part 3).
//!
//! stackbuild: builds `SIGKILL`ed at random points and then rebuilt, corrupted cache entries, a
//! full disk, an index serving wrong bytes. Builds use a scratch base and hand-made wheels from
//! a local PEP 503 index served by the test itself, so they need uv and pip but no network.
//!
//! stackhook: 32 concurrent invocations on one fixture host, and images crafted to attack it
//! (`stack.json` as a symlink to host files, a FIFO, a huge file; `LD_PRELOAD` in the image).
//!
//! Fast by default (under a minute); the two long tests, 20 kills of builds with a Debian base
//! (about ten minutes), are ignored unless run with `cargo test --test faults -- --ignored`. Random kill points come from a seeded generator whose seed
//! every run prints; `STACKBUILD_FAULT_SEED=N` replays a run.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use e2e::{
    binary, have, is_root, kill_group, preload_library, verify_cache, verify_layout, write_simple_index,
    write_wheel, Bundle, FileServer, Tmpfs, XorShift,
};
use stackhook::fixture::Preset;

const SEED_VAR: &str = "STACKBUILD_FAULT_SEED";
/// The name of the hand-made package every recipe here installs.
const PACKAGE: &str = "faultpkg";

// ---------------------------------------------------------------------------------------------
// Builder harness
// ---------------------------------------------------------------------------------------------

fn builder_ready() -> bool {
    let pip =
        Command::new("python3").args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success());
    if !have("uv") || !pip {
        eprintln!("skipped: needs uv and `python3 -m pip` (run .ci/install)");
        return false;
    }
    true
}

/// One run of stackbuild.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
    report: serde_json::Value,
    seconds: f64,
}

impl Run {
    fn digest(&self) -> &str {
        self.stdout.trim()
    }

    /// Asserts success and returns the digest.
    fn expect_ok(&self, what: &str) -> String {
        assert!(self.ok, "{what}: the build failed:\n{}", self.stderr);
        assert!(self.digest().starts_with("sha256:"), "{what}: stdout is not a digest: {:?}", self.stdout);
        self.digest().to_owned()
    }

    /// The layer named `name` of the report: (digest, built).
    fn layer(&self, name: &str) -> (String, bool) {
        let layers = self.report["layers"].as_array().cloned().unwrap_or_default();
        let l = layers.iter().find(|l| l["name"] == name).unwrap_or_else(|| panic!("no layer {name}"));
        (l["digest"].as_str().unwrap().to_owned(), l["built"].as_bool().unwrap())
    }

    fn built(&self) -> Vec<(String, bool)> {
        let layers = self.report["layers"].as_array().cloned().unwrap_or_default();
        layers.iter().map(|l| (l["name"].as_str().unwrap_or("?").to_owned(), l["built"] == true)).collect()
    }
}

/// A scratch-based project: a local index serving hand-made wheels of [`PACKAGE`], recipes that
/// install one of them, and a local source tree (so that images have three layers).
struct Project {
    tmp: tempfile::TempDir,
    server: FileServer,
    runs: AtomicUsize,
}

impl Project {
    /// An index holding `faultpkg` at each `(version, payload bytes)`.
    fn new(wheels: &[(&str, usize)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let built: Vec<PathBuf> = wheels
            .iter()
            .enumerate()
            .map(|(i, (version, payload))| {
                write_wheel(&tmp.path().join("wheels"), PACKAGE, version, *payload, i as u64 + 7)
            })
            .collect();
        write_simple_index(&tmp.path().join("index"), &built);
        let data = tmp.path().join("data");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::write(data.join("README"), "fault-injection source tree\n").unwrap();
        std::fs::write(data.join("sub/weights.bin"), XorShift::new(3).bytes(64 << 10)).unwrap();
        std::fs::create_dir_all(tmp.path().join("tmpdir")).unwrap();
        let server = FileServer::start(&tmp.path().join("index"));
        Self { tmp, server, runs: AtomicUsize::new(0) }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// The served copy of the wheel of `version`.
    fn served_wheel(&self, version: &str) -> PathBuf {
        self.path(&format!("index/simple/{PACKAGE}/{PACKAGE}-{version}-py3-none-any.whl"))
    }

    /// Writes `<file>` (a recipe installing `faultpkg==version` on `base`) and locks it with a
    /// cache of its own. Returns the recipe's path.
    fn recipe(&self, file: &str, version: &str, base: &str) -> PathBuf {
        let path = self.path(file);
        let index = self.server.url("simple");
        std::fs::write(
            &path,
            format!(
                r#"[image]
name = "faults"
tag = "test"
cmd = ["/bin/true"]

[base]
{base}

[python]
version = "3.11"
packages = ["{PACKAGE}=={version}"]
index = "{index}"

[[source]]
name = "data"
path = "data"
dest = "/data"

[host]
modules = ["nvidia_uvm"]
"#
            ),
        )
        .unwrap();
        let out =
            self.command("lock").arg(&path).arg("--cache-dir").arg(self.path("cache-lock")).output().unwrap();
        assert!(out.status.success(), "stackbuild lock: {}", String::from_utf8_lossy(&out.stderr));
        path
    }

    fn command(&self, sub: &str) -> Command {
        let mut cmd = Command::new(binary("stackbuild"));
        cmd.arg(sub)
            .env("SOURCE_DATE_EPOCH", "0")
            .env("NO_COLOR", "1")
            .env_remove("STACKBUILD_CACHE")
            // mmdebstrap and pip put their scratch space under TMPDIR: keep it in the test's
            // directory, so what a killed build leaves there goes with it.
            .env("TMPDIR", self.path("tmpdir"))
            .stdin(Stdio::null());
        cmd
    }

    /// `stackbuild build RECIPE --cache-dir CACHE --out OUT --report ... EXTRA`.
    fn build_command(&self, recipe: &Path, cache: &Path, out: &Path, extra: &[&str]) -> (Command, PathBuf) {
        let report = self.path(&format!("report-{}.json", self.runs.fetch_add(1, Ordering::Relaxed)));
        let mut cmd = self.command("build");
        cmd.arg(recipe).arg("--cache-dir").arg(cache).arg("--out").arg(out).arg("--report").arg(&report);
        cmd.args(extra);
        (cmd, report)
    }

    fn build(&self, recipe: &Path, cache: &Path, out: &Path, extra: &[&str]) -> Run {
        let (mut cmd, report) = self.build_command(recipe, cache, out, extra);
        let started = Instant::now();
        let output = cmd.output().unwrap();
        let seconds = started.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "stackbuild panicked:\n{stderr}");
        Run {
            ok: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            report: std::fs::read(&report)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default(),
            stderr,
            seconds,
        }
    }
}

/// Copies the fetched wheels (`artifacts/<sha256>/<file>`) of one cache into another.
fn copy_artifacts(from: &Path, to: &Path) {
    for dir in std::fs::read_dir(from.join("artifacts")).unwrap().flatten() {
        if dir.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let dest = to.join("artifacts").join(dir.file_name());
        std::fs::create_dir_all(&dest).unwrap();
        for file in std::fs::read_dir(dir.path()).unwrap().flatten() {
            std::fs::copy(file.path(), dest.join(file.file_name())).unwrap();
        }
    }
}

/// Flips every bit of the byte in the middle of `path`, in place (its size is kept).
fn flip_middle_byte(path: &Path) {
    use std::os::unix::fs::FileExt as _;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let at = file.metadata().unwrap().len() / 2;
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, at).unwrap();
    file.write_all_at(&[!b[0]], at).unwrap();
}

/// Sets the modification time of `path` (a file or a directory) an hour and a half back.
fn age(path: &Path) {
    let old = std::time::SystemTime::now() - Duration::from_mins(90);
    let _ = std::fs::File::open(path).and_then(|f| f.set_modified(old));
}

/// Entries of `dir` whose names start with `prefix`.
fn entries_starting(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// What the SIGKILL rounds observed.
struct KillStats {
    /// Where the random kill points come from.
    rng: XorShift,
    kills: usize,
    finished_first: usize,
    rounds: usize,
    leftovers: usize,
    leftover_bytes: u64,
}

impl KillStats {
    fn new(seed: u64) -> Self {
        Self {
            rng: XorShift::new(seed),
            kills: 0,
            finished_first: 0,
            rounds: 0,
            leftovers: 0,
            leftover_bytes: 0,
        }
    }

    /// Starts a build of `recipe` into round `round`'s cache and output, and `SIGKILL`s its whole
    /// process group (pip, uv, mmdebstrap included) after `delay` ms; prints where it was.
    fn kill_once(&mut self, p: &Project, recipe: &Path, round: usize, delay: u64) {
        let cache = p.path(&format!("cache-kill-{round}"));
        let out = p.path(&format!("images/out-{round}"));
        let log = p.path(&format!("kill-{round}-{}.log", self.kills));
        let (mut cmd, _) = p.build_command(recipe, &cache, &out, &["--locked"]);
        let mut child: Child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let finished = child.try_wait().unwrap().is_some();
        assert!(kill_group(&mut child), "round {round}: processes of the killed build are still running");
        self.kills += 1;
        self.finished_first += usize::from(finished);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(nothing logged yet)");
        let state = if finished { "it had finished" } else { "last log line" };
        eprintln!("  round {round}: SIGKILL after {delay} ms ({state}: {})", last.trim());
    }
}

/// One round: `kills` builds of `recipe` into a fresh cache, each `SIGKILL`ed (with its whole
/// process group) after a random delay in `delay_ms`, then an uninterrupted rebuild with the
/// same cache that must give `expected`, a valid layout and an intact cache.
fn kill_round(
    p: &Project,
    recipe: &Path,
    round: usize,
    kills: usize,
    delay_ms: (u64, u64),
    expected: &str,
    stats: &mut KillStats,
) {
    let cache = p.path(&format!("cache-kill-{round}"));
    let out = p.path(&format!("images/out-{round}"));
    for _ in 0..kills {
        let delay = stats.rng.range(delay_ms.0, delay_ms.1);
        stats.kill_once(p, recipe, round, delay);
        // A killed build leaves no image or a whole one, never a part.
        if out.exists() {
            assert_eq!(verify_layout(&out, "test").unwrap(), expected, "round {round}: image after a kill");
        }
    }
    let rebuilt = p.build(recipe, &cache, &out, &["--locked"]);
    assert_eq!(rebuilt.expect_ok("rebuild after SIGKILL"), expected, "round {round}: digest after the kills");
    assert_eq!(verify_layout(&out, "test").unwrap(), expected, "round {round}: layout after the rebuild");
    let check = verify_cache(&cache).unwrap_or_else(|e| panic!("round {round}: cache damaged: {e}"));
    stats.rounds += 1;
    stats.leftovers += check.leftovers.len();
    stats.leftover_bytes += check.leftover_bytes;

    // What the killed builds left (young, so kept for now) goes once it is stale.
    let images = p.path("images");
    let stale: Vec<PathBuf> =
        check.leftovers.iter().cloned().chain(entries_starting(&images, &format!(".out-{round}."))).collect();
    for path in &stale {
        age(path);
    }
    let again = p.build(recipe, &cache, &out, &["--locked"]);
    assert_eq!(again.expect_ok("no-change rebuild"), expected);
    assert!(again.built().iter().all(|(_, built)| !built), "round {round}: {:?}", again.built());
    let check = verify_cache(&cache).unwrap();
    assert!(check.leftovers.is_empty(), "round {round}: stale leftovers not removed: {:?}", check.leftovers);
    let partial = entries_starting(&images, &format!(".out-{round}."));
    assert!(partial.is_empty(), "round {round}: partial layouts left next to the image: {partial:?}");
}

// ---------------------------------------------------------------------------------------------
// 1. SIGKILL at random points
// ---------------------------------------------------------------------------------------------

#[test]
fn sigkill_at_random_points_then_rebuild() {
    if !builder_ready() {
        return;
    }
    let seed = XorShift::seed_from_env(SEED_VAR);
    eprintln!("sigkill: seed {seed} (replay with {SEED_VAR}={seed})");
    let started = Instant::now();
    let p = Project::new(&[("1.0.0", 8 << 20)]);
    let recipe = p.recipe("small.toml", "1.0.0", "scratch = true");
    let reference = p.build(&recipe, &p.path("cache-ref"), &p.path("images/ref"), &["--locked"]);
    let expected = reference.expect_ok("reference build");
    // pip takes most of a cold build; with the wheel already in the cache, the build is all
    // installing, compressing and writing the layout.
    copy_artifacts(&p.path("cache-ref"), &p.path("cache-warm"));
    let warm = p.build(&recipe, &p.path("cache-warm"), &p.path("images/warm"), &["--locked"]);
    assert_eq!(warm.expect_ok("build with the wheel cached"), expected);
    eprintln!(
        "  reference build: {expected} in {:.2} s cold, {:.2} s with the wheel cached",
        reference.seconds, warm.seconds
    );
    // Kill points within 50..1500 ms, cut to how long a build takes here, so that most land.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ms = |s: f64| (s * 1000.0) as u64;
    let (cold_ms, warm_ms) = (ms(reference.seconds).clamp(300, 1500), ms(warm.seconds).clamp(100, 1500));

    let mut stats = KillStats::new(seed);
    for round in 0..6 {
        let kills = 1 + usize::from(stats.rng.next_u64().is_multiple_of(2));
        let delays = if round % 2 == 0 {
            (50, cold_ms)
        } else {
            copy_artifacts(&p.path("cache-ref"), &p.path(&format!("cache-kill-{round}")));
            (20, warm_ms)
        };
        kill_round(&p, &recipe, round, kills, delays, &expected, &mut stats);
    }
    eprintln!(
        "sigkill: {} kills ({} after the build had finished) in {} rounds, {} leftover(s) of {} bytes \
         before cleanup, {:.1} s",
        stats.kills,
        stats.finished_first,
        stats.rounds,
        stats.leftovers,
        stats.leftover_bytes,
        started.elapsed().as_secs_f64()
    );
}

/// 20 kills of a build with a Debian base (mmdebstrap); ignored unless asked for (`-- --ignored`).
///
/// mmdebstrap cannot resume, so a killed base starts over and random points of a cold build
/// mostly land in it: two rounds kill cold builds, two kill builds whose base is already cached
/// (pip, installing, the audit of the base's ELF files, compressing, writing the layout).
#[test]
#[ignore = "long: 20 kills of Debian-base builds, about ten minutes; run with -- --ignored"]
fn sigkill_with_a_debian_base_long() {
    if !builder_ready() || !is_root() || !have("mmdebstrap") {
        eprintln!("skipped: needs root and mmdebstrap");
        return;
    }
    let seed = XorShift::seed_from_env(SEED_VAR);
    eprintln!("sigkill (Debian base): seed {seed} (replay with {SEED_VAR}={seed})");
    let started = Instant::now();
    let p = Project::new(&[("1.0.0", 4 << 20)]);
    let recipe = p.recipe("debian.toml", "1.0.0", "debian = \"bookworm\"\npackages = [\"python3\"]");
    let reference = p.build(&recipe, &p.path("cache-ref"), &p.path("images/ref"), &["--locked"]);
    let expected = reference.expect_ok("reference build");
    let (base, _) = reference.layer("base");
    seed_base(&p.path("cache-ref"), &p.path("cache-warm"), &base);
    let warm = p.build(&recipe, &p.path("cache-warm"), &p.path("images/warm"), &["--locked"]);
    assert_eq!(warm.expect_ok("build on a cached base"), expected);
    assert!(!warm.layer("base").1, "the seeded base was built again");
    eprintln!(
        "  reference build: {expected} in {:.1} s cold, {:.1} s on a cached base",
        reference.seconds, warm.seconds
    );
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ms = |s: f64| (s * 1000.0) as u64;
    let (cold_ms, warm_ms) = (ms(reference.seconds).max(300), ms(warm.seconds).max(100));
    let mut stats = KillStats::new(seed);
    for round in 0..4 {
        let delays = if round < 2 {
            (50, cold_ms)
        } else {
            seed_base(&p.path("cache-ref"), &p.path(&format!("cache-kill-{round}")), &base);
            (20, warm_ms)
        };
        kill_round(&p, &recipe, round, 5, delays, &expected, &mut stats);
        let _ = std::fs::remove_dir_all(p.path(&format!("cache-kill-{round}")));
    }
    eprintln!(
        "sigkill (Debian base): {} kills ({} after the build had finished) in {} rounds, \
         {} leftover(s) of {} bytes before cleanup, {:.0} s",
        stats.kills,
        stats.finished_first,
        stats.rounds,
        stats.leftovers,
        stats.leftover_bytes,
        started.elapsed().as_secs_f64()
    );
}

/// A flipped byte in a cached Debian base: built again, not shipped (behind
/// `-- --ignored`: two runs of mmdebstrap).
#[test]
#[ignore = "long: two runs of mmdebstrap; run with -- --ignored"]
fn corrupted_debian_base_is_rebuilt_long() {
    if !builder_ready() || !is_root() || !have("mmdebstrap") {
        eprintln!("skipped: needs root and mmdebstrap");
        return;
    }
    let p = Project::new(&[("1.0.0", 64 << 10)]);
    let recipe = p.recipe("debian.toml", "1.0.0", "debian = \"bookworm\"\npackages = [\"python3\"]");
    let cache = p.path("cache");
    let first = p.build(&recipe, &cache, &p.path("images/first"), &["--locked"]);
    let expected = first.expect_ok("first build");
    let (base, _) = first.layer("base");
    flip_middle_byte(&cache.join("blobs/sha256").join(base.trim_start_matches("sha256:")));
    let run = p.build(&recipe, &cache, &p.path("images/after-flip"), &["--locked"]);
    assert_eq!(run.expect_ok("after a flipped byte in the base"), expected);
    assert!(run.layer("base").1, "the corrupted base was reused: {:?}", run.built());
    assert_eq!(verify_layout(&p.path("images/after-flip"), "test").unwrap(), expected);
    verify_cache(&cache).unwrap();
}

/// Copies into `to` only the base layer of the cache `from` (its blob, its key record and the
/// facts learned from its rootfs): a cache where the base is built and nothing else.
fn seed_base(from: &Path, to: &Path, digest: &str) {
    let hex = digest.trim_start_matches("sha256:");
    for dir in ["blobs/sha256", "keys", "facts"] {
        std::fs::create_dir_all(to.join(dir)).unwrap();
    }
    std::fs::copy(from.join("blobs/sha256").join(hex), to.join("blobs/sha256").join(hex)).unwrap();
    for entry in std::fs::read_dir(from.join("keys")).unwrap().flatten() {
        if std::fs::read_to_string(entry.path()).is_ok_and(|t| t.contains(hex)) {
            std::fs::copy(entry.path(), to.join("keys").join(entry.file_name())).unwrap();
        }
    }
    for entry in std::fs::read_dir(from.join("facts")).unwrap().flatten() {
        std::fs::copy(entry.path(), to.join("facts").join(entry.file_name())).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Corrupted cache entries
// ---------------------------------------------------------------------------------------------

#[test]
fn corrupted_cache_entries_are_detected_and_replaced() {
    if !builder_ready() {
        return;
    }
    let p = Project::new(&[("1.0.0", 2 << 20)]);
    let recipe = p.recipe("small.toml", "1.0.0", "scratch = true");
    let cache = p.path("cache");
    let first = p.build(&recipe, &cache, &p.path("images/o1"), &["--locked"]);
    let expected = first.expect_ok("first build");
    // A 2 MiB wheel gets a layer of its own (wheels of 1 MiB or more do).
    let own_layer = format!("python-{PACKAGE}");
    let (python, _) = first.layer(&own_layer);
    let (sources, _) = first.layer("sources");
    let blob = |d: &str| cache.join("blobs/sha256").join(d.trim_start_matches("sha256:"));

    // (a) A layer blob with one byte flipped, same size: only hashing notices. The next build
    // into a new layout must not ship it.
    flip_middle_byte(&blob(&python));
    let run = p.build(&recipe, &cache, &p.path("images/o2"), &["--locked"]);
    assert_eq!(run.expect_ok("after a flipped byte in a layer blob"), expected);
    assert_eq!(
        verify_layout(&p.path("images/o2"), "test").unwrap(),
        expected,
        "the corrupted blob was shipped"
    );
    assert!(run.layer(&own_layer).1, "the corrupted layer was not rebuilt: {:?}", run.built());
    verify_cache(&cache).unwrap();

    // (a') A truncated layer blob: a size mismatch, a miss.
    let file = std::fs::OpenOptions::new().write(true).open(blob(&sources)).unwrap();
    file.set_len(file.metadata().unwrap().len() / 2).unwrap();
    let run = p.build(&recipe, &cache, &p.path("images/o3"), &["--locked"]);
    assert_eq!(run.expect_ok("after a truncated layer blob"), expected);
    assert_eq!(verify_layout(&p.path("images/o3"), "test").unwrap(), expected);
    verify_cache(&cache).unwrap();

    // (b) A wheel with one byte flipped; the layer records are gone too, so the layers must be
    // made from the wheel again: it is fetched again, not installed as it is.
    let artifacts: Vec<PathBuf> = std::fs::read_dir(cache.join("artifacts"))
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .flat_map(|e| std::fs::read_dir(e.path()).unwrap().flatten().map(|f| f.path()))
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    flip_middle_byte(&artifacts[0]);
    std::fs::remove_dir_all(cache.join("keys")).unwrap();
    let run = p.build(&recipe, &cache, &p.path("images/o4"), &["--locked"]);
    assert_eq!(run.expect_ok("after a flipped byte in a cached wheel"), expected);
    assert!(run.stderr.contains("does not match its hash"), "{}", run.stderr);
    assert_eq!(verify_layout(&p.path("images/o4"), "test").unwrap(), expected);
    let check = verify_cache(&cache).unwrap();
    assert_eq!(check.artifacts, 1, "the wheel was not fetched again");

    // No change, same layout: nothing rebuilt, nothing re-hashed.
    let run = p.build(&recipe, &cache, &p.path("images/o4"), &["--locked"]);
    assert_eq!(run.expect_ok("no-change rebuild"), expected);
    assert!(run.built().iter().all(|(_, b)| !b), "{:?}", run.built());
    eprintln!("corrupted cache: no-change rebuild in {:.3} s (process included)", run.seconds);
}

// ---------------------------------------------------------------------------------------------
// 3. A full disk
// ---------------------------------------------------------------------------------------------

#[test]
fn a_full_disk_gives_a_clean_error_and_no_partial_image() {
    if !builder_ready() {
        return;
    }
    if !is_root() {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let p = Project::new(&[("1.0.0", 1 << 20), ("2.0.0", 8 << 20), ("3.0.0", 24 << 20)]);
    let small = p.recipe("small.toml", "1.0.0", "scratch = true");
    let mid = p.recipe("mid.toml", "2.0.0", "scratch = true");
    let big = p.recipe("big.toml", "3.0.0", "scratch = true");
    let disk = match Tmpfs::mount(&p.path("disk"), "20m") {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let images = disk.path().join("images");
    let out = images.join("faults");
    let check_clean_failure = |run: &Run, what: &str| {
        assert!(!run.ok, "{what}: the build succeeded on a full disk");
        assert!(run.stderr.contains("No space left on device"), "{what}: {}", run.stderr);
        assert!(
            run.stderr.contains(&disk.path().display().to_string()),
            "{what}: no path named: {}",
            run.stderr
        );
        assert!(run.stdout.trim().is_empty(), "{what}: printed a digest: {}", run.stdout);
    };

    // The output on the small disk, the cache elsewhere: the previous image stays whole.
    let previous = p.build(&small, &p.path("cache"), &out, &["--locked"]).expect_ok("small image");
    let run = p.build(&big, &p.path("cache"), &out, &["--locked"]);
    check_clean_failure(&run, "output on a full disk");
    eprintln!("full disk, output: {}", first_error_line(&run.stderr));
    assert_eq!(verify_layout(&out, "test").unwrap(), previous, "the previous image was damaged");
    let names: Vec<String> = std::fs::read_dir(&images)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["faults"], "a partial image was left next to the previous one");

    // The cache on the small disk too: the wheel fits, its layer does not.
    let cache = disk.path().join("cache");
    let run = p.build(&mid, &cache, &out, &["--locked"]);
    check_clean_failure(&run, "cache on a full disk");
    assert_eq!(verify_layout(&out, "test").unwrap(), previous, "the previous image was damaged");
    let check = verify_cache(&cache).unwrap();
    assert!(check.leftovers.is_empty(), "the failed build left {:?}", check.leftovers);
    eprintln!("full disk, cache: {}", first_error_line(&run.stderr));
}

fn first_error_line(stderr: &str) -> &str {
    stderr.lines().find(|l| l.contains("No space left")).unwrap_or("").trim()
}

// ---------------------------------------------------------------------------------------------
// 4. An index serving wrong bytes
// ---------------------------------------------------------------------------------------------

#[test]
fn an_index_serving_wrong_bytes_fails_on_the_sha256() {
    if !builder_ready() {
        return;
    }
    let p = Project::new(&[("1.0.0", 256 << 10)]);
    let recipe = p.recipe("small.toml", "1.0.0", "scratch = true");
    let served = p.served_wheel("1.0.0");
    let good = e2e::sha256_file(&served).unwrap();
    let lock = std::fs::read_to_string(recipe.with_extension("toml.lock")).unwrap();
    assert!(lock.contains(&good), "the lock does not pin the served file:\n{lock}");

    // Same size, one byte changed, after the lock was made.
    flip_middle_byte(&served);
    let bad = e2e::sha256_file(&served).unwrap();
    let cache = p.path("cache");
    let out = p.path("images/faults");
    let run = p.build(&recipe, &cache, &out, &["--locked"]);
    assert!(!run.ok, "a wheel with the wrong sha256 was accepted");
    let err = run.stderr.to_ascii_lowercase();
    assert!(
        err.contains(&format!("{PACKAGE}==1.0.0")) || err.contains(&format!("{PACKAGE}-1.0.0")),
        "{}",
        run.stderr
    );
    assert!(err.contains("sha256") && err.contains(&good) && err.contains(&bad), "{}", run.stderr);
    assert!(!out.exists(), "an image was written");
    let check = verify_cache(&cache).unwrap();
    assert_eq!(check.artifacts, 0, "the wrong bytes were kept in the cache");
    eprintln!(
        "wrong bytes: {}",
        run.stderr
            .lines()
            .filter(|l| l.contains("sha256") || l.contains("ERROR"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
}

// ---------------------------------------------------------------------------------------------
// Hook harness
// ---------------------------------------------------------------------------------------------

/// A bundle the hook reads directly: `config.json` with `env` and `root.path = "rootfs"`.
fn hook_bundle(dir: &Path, env: &[String]) -> PathBuf {
    std::fs::create_dir_all(dir.join("rootfs/etc/stackbuild")).unwrap();
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": { "env": env },
        "root": { "path": "rootfs" },
    });
    std::fs::write(dir.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    dir.to_owned()
}

fn state(id: &str, bundle: &Path) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "ociVersion": "1.0.2", "id": id, "status": "creating", "pid": 1, "bundle": bundle,
    }))
    .unwrap()
}

/// Spawns the static hook with its own environment only: the fixture host, `policy`, a
/// report directory, and whatever `extra` adds.
fn spawn_hook(host: &Path, policy: &str, reports: &Path, extra: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(binary("stackhook"));
    cmd.arg("hook")
        .env_clear()
        .env("STACKHOOK_HOST_ROOT", host)
        .env("STACKHOOK_POLICY", policy)
        .env("STACKHOOK_REPORT_DIR", reports)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Waits for a hook with a generous wall-clock guard: a hang detector, not a speed check.
fn wait_hook(mut child: Child) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the hook hung for 20 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn requirement_env(preset: Preset) -> Vec<String> {
    let mut env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_owned()];
    env.extend(preset.requires().iter().enumerate().map(|(i, r)| format!("STACKBUILD_REQUIRE_T{i}={r}")));
    env
}

// ---------------------------------------------------------------------------------------------
// 5. 32 concurrent hook invocations
// ---------------------------------------------------------------------------------------------

#[test]
fn thirty_two_concurrent_hooks_all_answer_correctly() {
    let dir = tempfile::tempdir().unwrap();
    for preset in [Preset::EightGpus, Preset::UvmMissing] {
        let host = preset.build(&dir.path().join(preset.name()).join("host")).unwrap();
        let bundle = hook_bundle(&dir.path().join(preset.name()).join("bundle"), &requirement_env(preset));
        let reports = dir.path().join(preset.name()).join("reports");
        let started = Instant::now();
        // All 32 are started first; each blocks on its stdin until every one exists.
        let mut children: Vec<Child> =
            (0..32).map(|_| spawn_hook(host.root(), "enforce", &reports, &[])).collect();
        for (i, child) in children.iter_mut().enumerate() {
            // Half share one id (and so one report file), half have their own.
            let id = if i % 2 == 0 { "shared".to_owned() } else { format!("c{i}") };
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(&state(&id, &bundle)).unwrap();
        }
        let results: Vec<(i32, String)> = children.into_iter().map(wait_hook).collect();
        let elapsed = started.elapsed();
        for (i, (code, stderr)) in results.iter().enumerate() {
            match preset.expected_code() {
                None => assert_eq!(*code, 0, "{} #{i}: {stderr}", preset.name()),
                Some(finding) => {
                    assert_eq!(*code, 1, "{} #{i}: {stderr}", preset.name());
                    assert!(stderr.starts_with("stackhook: blocked"), "{} #{i}: {stderr}", preset.name());
                    assert!(stderr.contains(finding), "{} #{i}: {stderr}", preset.name());
                }
            }
        }
        let mut files = 0;
        for entry in std::fs::read_dir(&reports).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            assert!(!name.starts_with('.'), "a temporary report was left: {name}");
            let report: serde_json::Value = serde_json::from_slice(&std::fs::read(entry.path()).unwrap())
                .unwrap_or_else(|e| panic!("report {name} is not whole JSON: {e}"));
            let decision = if preset.allowed() { "allowed" } else { "blocked" };
            assert_eq!(report["decision"], decision, "{name}");
            files += 1;
        }
        assert_eq!(files, 17, "one report per id (16 own, 1 shared)");
        eprintln!(
            "32 concurrent hooks on {}: {:.0} ms in all",
            preset.name(),
            elapsed.as_secs_f64() * 1000.0
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Malicious images
// ---------------------------------------------------------------------------------------------

/// A marker that only the host's decoy files contain.
const SECRET: &str = "HOST-SECRET-d7c1";

/// How a crafted image plants `/etc/stackbuild/stack.json`, and the note the hook must give
/// (`None`: the file is simply absent from the hook's in-root view).
struct Attack {
    name: &'static str,
    plant: fn(rootfs: &Path, decoy: &Path),
    note: Option<&'static str>,
}

fn stack_json(rootfs: &Path) -> PathBuf {
    rootfs.join("etc/stackbuild/stack.json")
}

const ATTACKS: &[Attack] = &[
    Attack {
        name: "symlink to /etc/shadow",
        plant: |r, _| std::os::unix::fs::symlink("/etc/shadow", stack_json(r)).unwrap(),
        note: Some("is a symlink; not followed"),
    },
    Attack {
        name: "symlink to an absolute host path",
        plant: |r, decoy| std::os::unix::fs::symlink(decoy.join("stack.json"), stack_json(r)).unwrap(),
        note: Some("is a symlink; not followed"),
    },
    Attack {
        name: "relative symlink climbing out",
        plant: |r, decoy| {
            let up = "../".repeat(r.components().count() + 2);
            let target =
                format!("{up}{}", decoy.join("stack.json").display().to_string().trim_start_matches('/'));
            std::os::unix::fs::symlink(target, stack_json(r)).unwrap();
        },
        note: Some("is a symlink; not followed"),
    },
    Attack {
        name: "directory symlink to the host",
        plant: |r, decoy| {
            std::fs::remove_dir(r.join("etc/stackbuild")).unwrap();
            std::os::unix::fs::symlink(decoy, r.join("etc/stackbuild")).unwrap();
        },
        // Resolved inside the root, the directory does not exist: nothing is read.
        note: None,
    },
    Attack {
        name: "FIFO",
        plant: |r, _| {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                stack_json(r),
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o644),
                0,
            )
            .unwrap();
        },
        note: Some("not a regular file"),
    },
    Attack {
        name: "64 MiB sparse file",
        plant: |r, _| {
            let f = std::fs::File::create(stack_json(r)).unwrap();
            f.set_len(64 << 20).unwrap();
        },
        note: Some("larger than"),
    },
    Attack {
        name: "directory",
        plant: |r, _| std::fs::create_dir(stack_json(r)).unwrap(),
        note: Some("not a regular file"),
    },
];

/// The image environment of every attack: a loader hijack and our own settings, which must
/// neither reach the hook's execution nor change its policy or host root.
fn hostile_env(preset: Preset, image_reports: &Path) -> Vec<String> {
    let mut env = requirement_env(preset);
    env.extend(
        ["LD_PRELOAD=/x.so", "LD_LIBRARY_PATH=/evil:/tmp", "STACKHOOK_POLICY=audit", "STACKHOOK_HOST_ROOT=/"]
            .map(str::to_owned),
    );
    env.push(format!("STACKHOOK_REPORT_DIR={}", image_reports.display()));
    env
}

/// Whether the hook binary under test is statically linked (`file` says so).
fn hook_is_static() -> bool {
    Command::new("file").arg(binary("stackhook")).output().is_ok_and(|o| {
        let text = String::from_utf8_lossy(&o.stdout);
        text.contains("statically linked") || text.contains("static-pie")
    })
}

#[test]
fn malicious_images_do_not_steer_the_hook() {
    let dir = tempfile::tempdir().unwrap();
    // Decoys on the host: a valid-looking stack description carrying the secret, and a shadow.
    let decoy = dir.path().join("host-secrets");
    std::fs::create_dir_all(&decoy).unwrap();
    let decoy_stack = serde_json::json!({
        "schema": 1, "image": SECRET, "platform": "linux/amd64", "components": [], "requirements": [],
    });
    std::fs::write(decoy.join("stack.json"), serde_json::to_vec(&decoy_stack).unwrap()).unwrap();
    // The hook's own environment carries a real preloadable library: a static hook never loads it.
    let marker = dir.path().join("preload-ran");
    // Only a static hook is immune to its own LD_PRELOAD (every build of it is, see hook/build.rs);
    // a dynamic one, from a toolchain without static archives, is `the_hook_binary_is_static`'s
    // failure, not this test's.
    let static_hook = hook_is_static();
    let preload = if static_hook { preload_library(dir.path(), &marker) } else { None };
    if !static_hook {
        eprintln!(
            "note: {} is not static; LD_PRELOAD in the hook's own environment not tried",
            binary("stackhook").display()
        );
    } else if preload.is_none() {
        eprintln!("note: no C compiler; LD_PRELOAD in the hook's own environment is a missing file");
    }
    let preload_value = preload.as_ref().map_or_else(|| "/x.so".to_owned(), |p| p.display().to_string());

    for preset in [Preset::Healthy, Preset::UvmMissing] {
        let host = preset.build(&dir.path().join(preset.name())).unwrap();
        for (i, attack) in ATTACKS.iter().enumerate() {
            for policy in ["warn", "enforce"] {
                let case = format!("{} / {} / {policy}", preset.name(), attack.name);
                let base = dir.path().join(format!("{}-{i}-{policy}", preset.name()));
                let image_reports = base.join("image-chosen-reports");
                let bundle = hook_bundle(&base.join("bundle"), &hostile_env(preset, &image_reports));
                (attack.plant)(&bundle.join("rootfs"), &decoy);
                let reports = base.join("reports");
                let started = Instant::now();
                let own_env: &[(&str, &str)] = if static_hook {
                    &[("LD_PRELOAD", &preload_value), ("LD_LIBRARY_PATH", "/evil")]
                } else {
                    &[]
                };
                let mut child = spawn_hook(host.root(), policy, &reports, own_env);
                child.stdin.take().unwrap().write_all(&state("evil", &bundle)).unwrap();
                let (code, stderr) = wait_hook(child);
                let elapsed = started.elapsed();

                // The verdict is the host's, under the hook's own policy.
                let blocked = !preset.allowed();
                let want = i32::from(blocked && policy == "enforce");
                assert_eq!(code, want, "{case}: {stderr}");
                if let Some(finding) = preset.expected_code() {
                    assert!(stderr.contains(finding), "{case}: {stderr}");
                }
                assert!(!stderr.contains(SECRET), "{case}: the host file was read: {stderr}");
                assert!(!stderr.contains("ld.so") && !stderr.contains("ERROR: ld"), "{case}: {stderr}");
                // The note is printed whenever the hook prints (warn, or a block).
                if let (Some(note), true) = (attack.note, policy == "warn" || blocked) {
                    assert!(stderr.contains(note), "{case}: the note {note:?} is missing: {stderr}");
                }
                let report_path = reports.join("evil.json");
                let report_text = std::fs::read_to_string(&report_path)
                    .unwrap_or_else(|e| panic!("{case}: no report at {}: {e}", report_path.display()));
                let report: serde_json::Value = serde_json::from_str(&report_text).unwrap();
                assert!(report.get("stack").is_none(), "{case}: the report carries a stack: {report_text}");
                assert!(!report_text.contains(SECRET), "{case}: the host file was read: {report_text}");
                assert_eq!(report["policy"], policy, "{case}: the image changed the policy");
                if let Some(note) = attack.note {
                    assert!(
                        report["note"].as_str().is_some_and(|n| n.contains(note)),
                        "{case}: the report lacks the note {note:?}: {report_text}"
                    );
                }
                assert!(!image_reports.exists(), "{case}: the image chose the report directory");
                assert!(!marker.exists(), "{case}: LD_PRELOAD ran code in the hook");
                if elapsed > Duration::from_secs(5) {
                    eprintln!("note: {case} took {elapsed:?} (loaded machine?)");
                }
            }
        }
    }
}

/// The symlink attack through a real runtime: runc runs the hook at `createRuntime` on a
/// busybox bundle whose `stack.json` points at a host file.
#[test]
fn malicious_image_through_runc() {
    if !is_root() || !have("runc") {
        eprintln!("skipped: needs root and runc");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let decoy = dir.path().join("host-secrets");
    std::fs::create_dir_all(&decoy).unwrap();
    std::fs::write(decoy.join("stack.json"), format!("{{\"schema\":1,\"image\":\"{SECRET}\"}}")).unwrap();
    let host = Preset::Healthy.build(&dir.path().join("host")).unwrap();
    let reports = dir.path().join("reports");
    let hook = binary("stackhook");
    let mut bundle = Bundle::busybox(&dir.path().join("bundle"), &["echo", "container-ran"]).hook(
        "createRuntime",
        &hook,
        &["stackhook", "hook"],
        &[
            &format!("STACKHOOK_HOST_ROOT={}", host.root().display()),
            "STACKHOOK_POLICY=warn",
            &format!("STACKHOOK_REPORT_DIR={}", reports.display()),
        ],
    );
    let image_reports = dir.path().join("image-chosen-reports");
    for e in hostile_env(Preset::Healthy, &image_reports) {
        bundle = bundle.env(&e);
    }
    let bundle = bundle.write();
    let etc = bundle.dir.join("rootfs/etc/stackbuild");
    std::fs::create_dir_all(&etc).unwrap();
    std::os::unix::fs::symlink(decoy.join("stack.json"), etc.join("stack.json")).unwrap();
    let id = format!("faults-evil-{}", std::process::id());
    let out = bundle.run("runc", &id);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "container-ran");
    let text = std::fs::read_to_string(reports.join(format!("{id}.json"))).unwrap();
    assert!(!text.contains(SECRET), "the host file was read: {text}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(report.get("stack").is_none(), "{text}");
    assert!(report["note"].as_str().is_some_and(|n| n.contains("is a symlink; not followed")), "{text}");
    assert!(!image_reports.exists(), "the image chose the report directory");
}
