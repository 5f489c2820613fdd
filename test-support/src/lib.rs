//! One copy of each helper the test suites share: the builder's integration tests
//! (`builder/tests/`), the end-to-end tests (`tests/`), the hook's bench and the crates' unit
//! tests. It depends on neither program, so both can dev-depend on it; helpers that need
//! `stackbuild` or `stackhook` types stay with their suite (`tests/support.rs`,
//! `builder/tests/common/mod.rs`).

/// Probes of the machine and the workspace: `have(program)`, `is_root()`, `go_arch()`, the
/// workspace root and our release binaries, git with a fixed identity.
pub mod tools;

/// Running and stopping processes: output as text, a command that must succeed, stopping a
/// daemon (SIGTERM, then SIGKILL), killing a whole process group.
pub mod process;

/// SHA-256 as lowercase hex, as an OCI digest, of a file; the URL-safe base64 of wheel RECORDs.
pub mod digest;

/// A seeded xorshift generator: replayable random choices and incompressible bytes.
pub mod rng;

/// Hand-made pure-Python wheels with a correct RECORD, and a PEP 503 index of them.
pub mod wheel;

/// A static HTTP file server on 127.0.0.1 (enough for pip and uv to read an index).
pub mod server;

/// Debian's `docker-registry` on a free loopback port, its storage in a temporary directory.
pub mod registry;

/// A dockerd of the test's own: own data root, exec root, socket and daemon.json.
pub mod dockerd;
