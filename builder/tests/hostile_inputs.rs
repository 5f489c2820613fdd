//! Hostile and careless inputs given to `stackbuild` as a user would give them: FIFOs and devices
//! where files are expected, symlinked locks and sources, escaping symlink chains, private
//! modes, the cache inside a source tree, and base images whose layers are malformed or
//! tampered with. Every run has a timeout, so that a regression that blocks fails instead of
//! hanging the suite. (The wheel, patch and layer classes are unit-tested next to their code:
//! `wheel::tests`, `patch::tests`, `layer::tests`, `source::tests`, `input::tests`.)

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stackbuild_common::LayerBlob;
use stackbuild_image::{Image, ImageConfig};

mod common;
use common::have;
use test_support::digest::sha256_digest as sha256;

const STACKBUILD: &str = env!("CARGO_BIN_EXE_stackbuild");
/// Longest any of these runs may take; they all end in seconds.
const TIMEOUT: Duration = Duration::from_mins(1);

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `stackbuild ARGS` in `dir`, killing it (and failing the test) after [`TIMEOUT`].
fn run(dir: &Path, args: &[&str]) -> Run {
    let mut child = Command::new(STACKBUILD)
        .args(args)
        .current_dir(dir)
        .env("SOURCE_DATE_EPOCH", "0")
        .env_remove("STACKBUILD_CACHE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stackbuild {args:?} still running after {TIMEOUT:?}: it blocks on a hostile input");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    Run { ok: status.success(), stdout, stderr }
}

/// A project directory with a cache and an output inside it.
struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn recipe(&self, name: &str, body: &str) -> PathBuf {
        self.write(&format!("{name}.toml"), &format!("[image]\nname = \"{name}\"\ntag = \"test\"\n\n{body}"))
    }

    /// `stackbuild RECIPE --cache-dir cache --out images/NAME --no-audit`-like build.
    fn build(&self, recipe: &Path) -> Run {
        let name = recipe.file_stem().unwrap().to_string_lossy().into_owned();
        let cache = self.path("cache");
        let out = self.path(&format!("images/{name}"));
        run(
            self.dir.path(),
            &[
                recipe.to_str().unwrap(),
                "--cache-dir",
                cache.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
        )
    }
}

fn fifo(path: &Path) {
    rustix::fs::mkfifoat(rustix::fs::CWD, path, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
}

fn fails_with(run: &Run, wanted: &[&str]) {
    assert!(!run.ok, "accepted; stdout {}", run.stdout);
    for w in wanted {
        assert!(run.stderr.contains(w), "expected {w:?} in:\n{}", run.stderr);
    }
}

const SOURCE_ONLY: &str =
    "[base]\nscratch = true\n\n[[source]]\nname = \"src\"\npath = \"tree\"\ndest = \"/opt/src\"\n";

#[test]
fn a_recipe_that_is_a_fifo_or_a_device_is_refused_at_once() {
    let p = Project::new();
    let recipe = p.path("fifo.toml");
    fifo(&recipe);
    fails_with(&p.build(&recipe), &["is a FIFO", "must be a regular file"]);
    fails_with(&p.build(Path::new("/dev/zero")), &["/dev/zero", "is a character device"]);
    let dir = p.path("dir.toml");
    std::fs::create_dir(&dir).unwrap();
    fails_with(&p.build(&dir), &["is a directory"]);
    let real = p.recipe("real", SOURCE_ONLY);
    let link = p.path("link.toml");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    fails_with(&p.build(&link), &["is a symlink"]);
}

#[test]
fn a_symlinked_lock_is_refused_without_quoting_its_target() {
    let p = Project::new();
    p.write("tree/a.txt", "a\n");
    let recipe = p.recipe("locked", SOURCE_ONLY);
    let secret = p.write("secret", "root:$6$SECRETHASH:19000:0:99999:7:::\n");
    std::os::unix::fs::symlink(&secret, p.path("locked.toml.lock")).unwrap();
    let run = p.build(&recipe);
    fails_with(&run, &["locked.toml.lock", "is a symlink", "must be a regular file"]);
    assert!(!run.stderr.contains("SECRETHASH"), "{}", run.stderr);
    // A FIFO lock does not block.
    std::fs::remove_file(p.path("locked.toml.lock")).unwrap();
    fifo(&p.path("locked.toml.lock"));
    fails_with(&p.build(&recipe), &["is a FIFO"]);
}

#[test]
fn a_fifo_or_device_as_a_patch_is_refused_at_once() {
    let p = Project::new();
    p.write("tree/a.txt", "a\n");
    fifo(&p.path("fix.diff"));
    let body = format!("{SOURCE_ONLY}\n[[patch]]\nname = \"fix\"\nsource = \"src\"\ndiff = \"fix.diff\"\n");
    let recipe = p.recipe("patched", &body);
    fails_with(&p.build(&recipe), &["fix.diff", "is a FIFO"]);
    let body = format!("{SOURCE_ONLY}\n[[patch]]\nname = \"fix\"\nsource = \"src\"\ndiff = \"/dev/zero\"\n");
    let recipe = p.recipe("zero", &body);
    fails_with(&p.build(&recipe), &["/dev/zero", "is a character device"]);
}

#[test]
fn a_fifo_or_device_as_a_base_is_refused_at_once() {
    let p = Project::new();
    fifo(&p.path("base.tar"));
    let recipe = p.recipe("archive", "[base]\narchive = \"base.tar\"\n");
    fails_with(&p.build(&recipe), &["base.tar", "is a FIFO"]);
    let recipe = p.recipe("zero", "[base]\narchive = \"/dev/zero\"\n");
    fails_with(&p.build(&recipe), &["/dev/zero", "is a character device"]);
    // An OCI layout whose index.json is a FIFO, or /dev/zero by a symlink.
    std::fs::create_dir_all(p.path("layout")).unwrap();
    std::fs::write(p.path("layout/oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    fifo(&p.path("layout/index.json"));
    let recipe = p.recipe("oci", "[base]\noci = \"layout\"\n");
    fails_with(&p.build(&recipe), &["index.json", "is a FIFO"]);
    std::fs::remove_file(p.path("layout/index.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", p.path("layout/index.json")).unwrap();
    fails_with(&p.build(&recipe), &["index.json", "symlink"]);
}

#[test]
fn a_symlinked_source_directory_is_refused() {
    let p = Project::new();
    p.write("real/a.txt", "a\n");
    std::os::unix::fs::symlink(p.path("real"), p.path("tree")).unwrap();
    let recipe = p.recipe("linked", SOURCE_ONLY);
    fails_with(&p.build(&recipe), &["tree", "is a symlink"]);
}

#[test]
fn an_escaping_symlink_chain_in_a_source_is_refused() {
    let p = Project::new();
    p.write("tree/d/x", "x\n");
    std::os::unix::fs::symlink("..", p.path("tree/d/l")).unwrap();
    std::os::unix::fs::symlink("d/l/d/l/../../etc/shadow", p.path("tree/esc")).unwrap();
    let recipe = p.recipe("escape", SOURCE_ONLY);
    fails_with(&p.build(&recipe), &["\"esc\"", "outside the source tree"]);
}

/// The entries of the image's layers: `(path, mode, kind)`.
fn image_entries(layout: &Path) -> Vec<(String, u32, char)> {
    let image = stackbuild_image::read_layout(layout, Some("test")).unwrap();
    let mut out = Vec::new();
    for l in &image.layers {
        let compression = stackbuild_common::Compression::from_media_type(&l.media_type).unwrap();
        let reader = compression.decoder(std::fs::File::open(&l.path).unwrap()).unwrap();
        let mut archive = tar::Archive::new(reader);
        for e in archive.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            out.push((
                String::from_utf8_lossy(&e.path_bytes()).into_owned(),
                h.mode().unwrap(),
                h.entry_type().as_byte() as char,
            ));
        }
    }
    out
}

#[test]
fn private_modes_stay_private_in_the_image() {
    use std::os::unix::fs::PermissionsExt as _;
    let p = Project::new();
    p.write("tree/secret.key", "k\n");
    p.write("tree/public.txt", "p\n");
    p.write("tree/private/inner", "i\n");
    std::fs::set_permissions(p.path("tree/secret.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(p.path("tree/private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let recipe = p.recipe("modes", SOURCE_ONLY);
    let run = p.build(&recipe);
    assert!(run.ok, "{}", run.stderr);
    let entries = image_entries(&p.path("images/modes"));
    let mode =
        |name: &str| entries.iter().find(|e| e.0 == name).unwrap_or_else(|| panic!("{name}: {entries:?}")).1;
    assert_eq!(mode("opt/src/secret.key"), 0o600);
    assert_eq!(mode("opt/src/public.txt"), 0o644);
    assert_eq!(mode("opt/src/private"), 0o700);
}

#[test]
fn a_source_tree_holding_the_cache_and_output_does_not_copy_itself() {
    let p = Project::new();
    p.write("code/main.py", "print('hi')\n");
    let recipe = p.recipe(
        "self",
        "[base]\nscratch = true\n\n[[source]]\nname = \"src\"\npath = \".\"\ndest = \"/w\"\n",
    );
    for round in 0..2 {
        let run = p.build(&recipe);
        assert!(run.ok, "round {round}: {}", run.stderr);
        let entries = image_entries(&p.path("images/self"));
        assert!(entries.iter().any(|e| e.0 == "w/code/main.py"), "{entries:?}");
        let leaked: Vec<_> = entries
            .iter()
            .filter(|e| e.0.starts_with("w/cache") || e.0.starts_with("w/images/self"))
            .collect();
        assert!(leaked.is_empty(), "round {round}: the cache or output went into the image: {leaked:?}");
        assert!(entries.len() < 50, "round {round}: {} entries", entries.len());
    }
}

/// A tar entry written from raw header bytes, so that names no well-behaved writer produces
/// (`..`, absolute) can be given.
struct Raw<'a> {
    name: &'a str,
    ty: tar::EntryType,
    link: &'a str,
    data: &'a [u8],
}

fn raw(name: &str, ty: tar::EntryType) -> Raw<'_> {
    Raw { name, ty, link: "", data: b"" }
}

fn tar_of(entries: &[Raw<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let mut h = tar::Header::new_ustar();
        h.as_old_mut().name[..e.name.len()].copy_from_slice(e.name.as_bytes());
        h.as_old_mut().linkname[..e.link.len()].copy_from_slice(e.link.as_bytes());
        h.set_entry_type(e.ty);
        h.set_mode(if e.ty == tar::EntryType::Directory { 0o755 } else { 0o644 });
        h.set_size(e.data.len() as u64);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(e.data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// A tar whose only entry is named by a PAX `path` record overriding its header name.
fn pax_tar(path: &str) -> Vec<u8> {
    let body = format!(" path={path}\n");
    let mut n = body.len() + 1;
    while format!("{n}{body}").len() != n {
        n += 1;
    }
    let data = format!("{n}{body}");
    let mut out = Vec::new();
    let mut h = tar::Header::new_ustar();
    h.as_old_mut().name[..9].copy_from_slice(b"PaxHeader");
    h.set_entry_type(tar::EntryType::XHeader);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data.as_bytes());
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&tar_of(&[raw("innocent", tar::EntryType::Regular)]));
    out
}

/// Writes an OCI layout at `dir` whose layers are the uncompressed tars `layers`;
/// `lie` names a layer whose `diff_id` the config misstates.
fn layout(dir: &Path, layers: &[Vec<u8>], lie: Option<usize>) {
    let blobs = dir.with_extension("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let blobs: Vec<LayerBlob> = layers
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let path = blobs.join(format!("{i}.tar"));
            std::fs::write(&path, bytes).unwrap();
            let digest = sha256(bytes);
            let diff_id = if lie == Some(i) { sha256(b"something else") } else { digest.clone() };
            LayerBlob {
                digest,
                diff_id,
                size: bytes.len() as u64,
                media_type: "application/vnd.oci.image.layer.v1.tar".into(),
                annotations: std::collections::BTreeMap::new(),
                path,
            }
        })
        .collect();
    let config = ImageConfig { architecture: "amd64".into(), os: "linux".into(), ..ImageConfig::default() };
    let image = Image::new(config, blobs, BTreeMap::new()).unwrap();
    stackbuild_image::write_layout(dir, &image, "base").unwrap();
}

fn good_layer() -> Vec<u8> {
    use tar::EntryType::{Directory, Regular, Symlink};
    tar_of(&[
        raw("etc", Directory),
        Raw { data: b"hello\n", ..raw("etc/motd", Regular) },
        Raw { link: "motd", ..raw("etc/greeting", Symlink) },
    ])
}

#[test]
fn oci_base_layers_get_the_archive_checks() {
    use tar::EntryType::{Directory, Link, Regular, Symlink};
    let p = Project::new();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("dotdot", tar_of(&[raw("../../etc/cron.d/x", Regular)]), "`..` component"),
        ("inner-dotdot", tar_of(&[raw("usr/../../x", Regular)]), "`..` component"),
        ("absolute", tar_of(&[raw("/etc/shadow", Regular)]), "absolute name"),
        (
            "write-through",
            tar_of(&[
                Raw { link: "/etc", ..raw("e", Symlink) },
                raw("e/cron.d", Directory),
                raw("e/cron.d/x", Regular),
            ]),
            "through the symlink",
        ),
        (
            "write-through-late",
            tar_of(&[raw("e/passwd", Regular), Raw { link: "/etc", ..raw("e", Symlink) }]),
            "through the symlink",
        ),
        ("hardlink-abs", tar_of(&[Raw { link: "/etc/shadow", ..raw("h", Link) }]), "absolute name"),
        (
            "hardlink-rel",
            tar_of(&[Raw { link: "etc/shadow", ..raw("h", Link) }]),
            "does not lead to a regular file",
        ),
        ("hardlink-up", tar_of(&[Raw { link: "../etc/shadow", ..raw("h", Link) }]), "`..` component"),
        ("pax-dotdot", pax_tar("../../root/.ssh/authorized_keys"), "`..` component"),
        ("pax-absolute", pax_tar("/etc/passwd"), "absolute name"),
        ("whiteout-dotdot", tar_of(&[raw("usr/.wh..", Regular)]), "whiteout"),
        ("whiteout-empty", tar_of(&[raw(".wh.", Regular)]), "whiteout"),
        ("whiteout-aufs", tar_of(&[raw("usr/.wh..wh.plnk", Regular)]), "whiteout"),
        ("whiteout-dir", tar_of(&[raw("usr/.wh.lib", Directory)]), "whiteout"),
        ("whiteout-data", tar_of(&[Raw { data: b"x", ..raw("usr/.wh.lib", Regular) }]), "whiteout"),
        ("truncated", good_layer()[..700].to_vec(), "reading tar"),
    ];
    for (name, bad, expected) in cases {
        let dir = p.path(&format!("layouts/{name}"));
        // The hostile layer sits on top of a good one.
        layout(&dir, &[good_layer(), bad], None);
        let recipe = p.recipe(name, &format!("[base]\noci = \"{}:base\"\n", dir.display()));
        let run = p.build(&recipe);
        fails_with(&run, &[expected]);
        assert!(run.stderr.contains("layer 1"), "{name}: the error names the layer:\n{}", run.stderr);
        assert!(!p.path(&format!("images/{name}")).exists(), "{name}: an image was written");
    }
    // The good layout alone builds, its layers kept as they are.
    let dir = p.path("layouts/good");
    layout(&dir, &[good_layer()], None);
    let recipe = p.recipe("good", &format!("[base]\noci = \"{}:base\"\n", dir.display()));
    let run = p.build(&recipe);
    assert!(run.ok, "{}", run.stderr);
    let base = stackbuild_image::read_layout(&dir, Some("base")).unwrap();
    let built = stackbuild_image::read_layout(&p.path("images/good"), Some("test")).unwrap();
    assert_eq!(built.layers[0].digest, base.layers[0].digest);
}

/// Rewrites one byte of a blob of `dir` in place (same size), as a corrupted or tampered
/// download would.
fn tamper(dir: &Path, digest: &str) {
    let path = dir.join("blobs/sha256").join(digest.trim_start_matches("sha256:"));
    let mut bytes = std::fs::read(&path).unwrap();
    let i = bytes.iter().position(|&b| b == b'h').unwrap();
    bytes[i] = b'j';
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, bytes).unwrap();
}

#[test]
fn tampered_layers_of_either_base_kind_are_refused() {
    let p = Project::new();
    // OCI layout: a blob that no longer hashes to its digest.
    let dir = p.path("layouts/tampered");
    layout(&dir, &[good_layer()], None);
    let digest = stackbuild_image::read_layout(&dir, Some("base")).unwrap().layers[0].digest.clone();
    tamper(&dir, &digest);
    let recipe = p.recipe("tampered", &format!("[base]\noci = \"{}:base\"\n", dir.display()));
    fails_with(&p.build(&recipe), &["layer 0", "blob digest", &digest]);
    // OCI layout: a config whose diff_id is not the layer's.
    let dir = p.path("layouts/lying");
    layout(&dir, &[good_layer()], Some(0));
    let recipe = p.recipe("lying", &format!("[base]\noci = \"{}:base\"\n", dir.display()));
    fails_with(&p.build(&recipe), &["layer 0", "diff_id"]);

    // Archive base: the same tampered layout, in a tar.
    let dir = p.path("layouts/for-archive");
    layout(&dir, &[good_layer()], None);
    let digest = stackbuild_image::read_layout(&dir, Some("base")).unwrap().layers[0].digest.clone();
    let pack = |dir: &Path, file: &Path| {
        let mut b = tar::Builder::new(std::fs::File::create(file).unwrap());
        b.append_dir_all(".", dir).unwrap();
        b.finish().unwrap();
    };
    pack(&dir, &p.path("good.tar"));
    let recipe = p.recipe("archive-good", "[base]\narchive = \"good.tar\"\n");
    let run = p.build(&recipe);
    assert!(run.ok, "{}", run.stderr);
    tamper(&dir, &digest);
    pack(&dir, &p.path("tampered.tar"));
    let recipe = p.recipe("archive-tampered", "[base]\narchive = \"tampered.tar\"\n");
    fails_with(&p.build(&recipe), &["layer 0", "blob digest"]);
    let dir = p.path("layouts/for-archive-lying");
    layout(&dir, &[good_layer()], Some(0));
    pack(&dir, &p.path("lying.tar"));
    let recipe = p.recipe("archive-lying", "[base]\narchive = \"lying.tar\"\n");
    fails_with(&p.build(&recipe), &["layer 0", "diff_id"]);
}

#[test]
fn archive_base_layers_get_the_same_checks() {
    let p = Project::new();
    let dir = p.path("layouts/evil");
    layout(&dir, &[tar_of(&[Raw { link: "/etc/shadow", ..raw("h", tar::EntryType::Link) }])], None);
    let mut b = tar::Builder::new(std::fs::File::create(p.path("evil.tar")).unwrap());
    b.append_dir_all(".", &dir).unwrap();
    b.finish().unwrap();
    drop(b);
    let recipe = p.recipe("evil", "[base]\narchive = \"evil.tar\"\n");
    fails_with(&p.build(&recipe), &["absolute name"]);
}

/// A lock edited to install a package the recipe never asks for (here `idna`, which nothing in
/// `six` requires) is refused, though its recipe hash still matches the recipe.
#[test]
fn a_lock_that_installs_unrequested_packages_is_refused() {
    if !have("uv") || !have("pip") {
        eprintln!("skipped: needs uv and pip with a package index (run .ci/install)");
        return;
    }
    let p = Project::new();
    let recipe = p.recipe(
        "extra",
        "[base]\nscratch = true\n\n[python]\nversion = \"3.11\"\npackages = [\"six==1.16.0\"]\n",
    );
    let cache = p.path("cache");
    let locked =
        run(p.dir.path(), &["lock", recipe.to_str().unwrap(), "--cache-dir", cache.to_str().unwrap()]);
    assert!(locked.ok, "{}", locked.stderr);
    let run = p.build(&recipe);
    assert!(run.ok, "{}", run.stderr);
    let lock_path = p.path("extra.toml.lock");
    let mut lock = std::fs::read_to_string(&lock_path).unwrap();
    lock.push_str(
        "\n[[package]]\nname = \"idna\"\nversion = \"3.6\"\nplatform = \"linux/amd64\"\n\
         filename = \"idna-3.6-py3-none-any.whl\"\n\
         sha256 = \"c05567e9c24a6b9faaa835c4821bad0590fbb9d5779e7caa6e1cc4978e7eb24f\"\nsize = 61567\n",
    );
    std::fs::write(&lock_path, lock).unwrap();
    let refused = self::run(
        p.dir.path(),
        &[
            recipe.to_str().unwrap(),
            "--locked",
            "--cache-dir",
            cache.to_str().unwrap(),
            "--out",
            p.path("images/extra2").to_str().unwrap(),
        ],
    );
    fails_with(&refused, &["idna 3.6", "nothing in the recipe asks for"]);
}

/// A `[[python.wheel]]` that is a FIFO or a device is refused before uv is pointed at it.
#[test]
fn a_fifo_or_device_as_a_recipe_wheel_is_refused_at_once() {
    if !have("uv") {
        eprintln!("skipped: needs uv (run .ci/install)");
        return;
    }
    let p = Project::new();
    fifo(&p.path("demo-1.0-py3-none-any.whl"));
    let body = "[base]\nscratch = true\n\n[python]\nversion = \"3.11\"\npackages = [\"six==1.16.0\"]\n\n\
                [[python.wheel]]\npath = \"demo-1.0-py3-none-any.whl\"\n";
    let recipe = p.recipe("wheel", body);
    fails_with(&p.build(&recipe), &["demo-1.0-py3-none-any.whl", "is a FIFO"]);
    std::fs::remove_file(p.path("demo-1.0-py3-none-any.whl")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", p.path("demo-1.0-py3-none-any.whl")).unwrap();
    fails_with(&p.build(&recipe), &["demo-1.0-py3-none-any.whl", "is a symlink"]);
}

/// A tar with a `name` entry holding `data`.
fn tar_entry(tar: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
    let mut h = tar::Header::new_ustar();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, name, data).unwrap();
}

/// A `docker save` archive of one layer, built by hand: the layer holds `etc/motd` twice ("old",
/// then "new"), and the archive holds `manifest.json` twice (a broken one, then the real one).
/// Both are legal tars, in which the later entry wins (POSIX pax: "a later copy replaces an
/// earlier one"; tar(1), Docker and every runtime extract them so).
fn archive_with_duplicates() -> Vec<u8> {
    let mut layer = tar::Builder::new(Vec::new());
    tar_entry(&mut layer, "etc/motd", b"old\n");
    tar_entry(&mut layer, "etc/motd", b"new\n");
    let layer = layer.into_inner().unwrap();
    let layer_hex = sha256(&layer).trim_start_matches("sha256:").to_owned();
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{}},"rootfs":{{"type":"layers","diff_ids":["sha256:{layer_hex}"]}}}}"#
    );
    let config_hex = sha256(config.as_bytes()).trim_start_matches("sha256:").to_owned();
    let manifest = format!(
        r#"[{{"Config":"{config_hex}.json","RepoTags":["dup:1"],"Layers":["{layer_hex}/layer.tar"]}}]"#
    );
    let mut archive = tar::Builder::new(Vec::new());
    tar_entry(&mut archive, "manifest.json", b"not json, replaced below");
    tar_entry(&mut archive, &format!("{config_hex}.json"), config.as_bytes());
    tar_entry(&mut archive, &format!("{layer_hex}/layer.tar"), &layer);
    tar_entry(&mut archive, "manifest.json", manifest.as_bytes());
    archive.into_inner().unwrap()
}

#[test]
fn a_base_archive_with_duplicate_entries_is_applied_as_tar_applies_it() {
    let p = Project::new();
    std::fs::write(p.path("base.tar"), archive_with_duplicates()).unwrap();
    let recipe = p.recipe("dup", "[base]\narchive = \"base.tar\"\n");
    let run = p.build(&recipe);
    assert!(run.ok, "{}", run.stderr);
    let image = stackbuild_image::read_layout(&p.path("images/dup"), Some("test")).unwrap();
    let mut motd = Vec::new();
    for l in &image.layers {
        let compression = stackbuild_common::Compression::from_media_type(&l.media_type).unwrap();
        let mut archive =
            tar::Archive::new(compression.decoder(std::fs::File::open(&l.path).unwrap()).unwrap());
        for e in archive.entries().unwrap() {
            let mut e = e.unwrap();
            if e.path_bytes().as_ref() == b"etc/motd" {
                let mut text = String::new();
                e.read_to_string(&mut text).unwrap();
                motd.push(text);
            }
        }
    }
    // One entry, the later one: the image holds what `tar -x` of the base would have left.
    assert_eq!(motd, ["new\n"]);
}
