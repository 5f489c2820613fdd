//! Push and pull against an in-process fake registry: authentication flows, chunk resumption
//! and error reporting that the real registry (tests/registry.rs) cannot be made to exercise.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::fake::{Reply, Request, Server};
use super::*;
use crate::oci::{self, Image, ImageConfig, Platform};
use stackbuild_common::sha256_bytes;
use stackbuild_common::LayerBlob;
use test_support::rng::noise;

#[derive(Default)]
enum Auth {
    #[default]
    None,
    /// The exact `Authorization` value wanted.
    Basic(String),
    /// Tokens from `/token`, which wants this `Authorization` value (if any).
    Bearer { basic: Option<String> },
}

#[derive(Default)]
struct State {
    addr: String,
    auth: Auth,
    blobs: HashMap<String, Vec<u8>>,
    repo_blobs: HashSet<(String, String)>,
    manifests: HashMap<(String, String), (String, Vec<u8>)>,
    uploads: HashMap<String, Vec<u8>>,
    next: u64,
    /// The PATCH (1-based) that stores half its body and answers 500.
    fail_patch: Option<usize>,
    /// The PATCH (1-based) after which the connection is dropped (all of it stored).
    hangup_patch: Option<usize>,
    patches: usize,
    valid_tokens: HashSet<String>,
    token_scopes: Vec<Vec<String>>,
    log: Vec<String>,
}

struct Fake {
    server: Server,
    state: Arc<Mutex<State>>,
}

impl Fake {
    fn start(auth: Auth) -> Self {
        let state = Arc::new(Mutex::new(State { auth, ..State::default() }));
        let server = {
            let state = Arc::clone(&state);
            Server::start(move |req| handle(&state, req))
        };
        state.lock().unwrap().addr.clone_from(&server.addr);
        Self { server, state }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    fn reference(&self, rest: &str) -> Reference {
        Reference::parse(&format!("{}/{rest}", self.server.addr)).unwrap()
    }

    fn count(&self, prefix: &str) -> usize {
        self.state().log.iter().filter(|l| l.starts_with(prefix)).count()
    }
}

fn error(status: u16, code: &str, message: &str) -> Reply {
    Reply::status(status)
        .header("Content-Type", "application/json")
        .body(format!(r#"{{"errors":[{{"code":"{code}","message":"{message}","detail":null}}]}}"#))
}

fn range(len: usize) -> String {
    format!("0-{}", len.saturating_sub(1))
}

fn handle(state: &Mutex<State>, req: &Request) -> Reply {
    let mut s = state.lock().unwrap();
    s.log.push(format!("{} {}", req.method, req.path));
    if req.path == "/token" {
        if let Auth::Bearer { basic: Some(expected) } = &s.auth {
            if req.header("authorization") != Some(expected.as_str()) {
                return error(401, "UNAUTHORIZED", "bad credentials");
            }
        }
        s.next += 1;
        let token = format!("tok{}", s.next);
        s.valid_tokens.insert(token.clone());
        let scopes = req.query.get("scope").cloned().unwrap_or_default();
        s.token_scopes.push(scopes);
        return Reply::status(200).body(format!(r#"{{"token":"{token}","expires_in":60}}"#));
    }
    let Some(rest) = req.path.strip_prefix("/v2/") else { return Reply::status(404) };
    let authorization = req.header("authorization");
    let authorized = match &s.auth {
        Auth::None => true,
        Auth::Basic(wanted) => authorization == Some(wanted.as_str()),
        Auth::Bearer { .. } => {
            authorization.and_then(|a| a.strip_prefix("Bearer ")).is_some_and(|t| s.valid_tokens.contains(t))
        }
    };
    if !authorized {
        let challenge = match &s.auth {
            Auth::Basic(_) => r#"Basic realm="fake""#.to_string(),
            _ => {
                format!(r#"Bearer realm="http://{}/token",service="fake",scope="repository:x:pull""#, s.addr)
            }
        };
        return error(401, "UNAUTHORIZED", "authentication required").header("WWW-Authenticate", &challenge);
    }
    if rest.is_empty() {
        return Reply::status(200);
    }
    if let Some((name, id)) = rest.split_once("/blobs/uploads/") {
        return upload(&mut s, req, name, id);
    }
    if let Some((name, digest)) = rest.rsplit_once("/blobs/") {
        let Some(data) = s.blobs.get(digest).filter(|_| s.repo_blobs.contains(&(name.into(), digest.into())))
        else {
            return error(404, "BLOB_UNKNOWN", "blob unknown to registry");
        };
        if let Some(from) =
            req.header("range").and_then(|r| r.strip_prefix("bytes=")).and_then(|r| r.strip_suffix('-'))
        {
            let from: usize = from.parse().unwrap();
            return Reply::status(206).body(data[from..].to_vec());
        }
        return Reply::status(200).header("Docker-Content-Digest", digest).body(data.clone());
    }
    if let Some((name, reference)) = rest.rsplit_once("/manifests/") {
        let key = (name.to_string(), reference.to_string());
        match req.method.as_str() {
            "PUT" => {
                let doc: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
                let mut wanted: Vec<String> = Vec::new();
                if let Some(config) = doc["config"]["digest"].as_str() {
                    wanted.push(config.into());
                }
                for layer in doc["layers"].as_array().into_iter().flatten() {
                    wanted.push(layer["digest"].as_str().unwrap().into());
                }
                if wanted.iter().any(|d| !s.repo_blobs.contains(&(name.into(), d.clone()))) {
                    return error(400, "MANIFEST_BLOB_UNKNOWN", "blob unknown to registry");
                }
                let digest = sha256_bytes(&req.body);
                let entry = (req.header("content-type").unwrap_or_default().to_string(), req.body.clone());
                s.manifests.insert((name.to_string(), digest.clone()), entry.clone());
                s.manifests.insert(key, entry);
                Reply::status(201).header("Docker-Content-Digest", &digest)
            }
            _ => match s.manifests.get(&key) {
                Some((media_type, bytes)) => Reply::status(200)
                    .header("Content-Type", media_type)
                    .header("Docker-Content-Digest", &sha256_bytes(bytes))
                    .body(bytes.clone()),
                None => error(404, "MANIFEST_UNKNOWN", "manifest unknown"),
            },
        }
    } else {
        Reply::status(404)
    }
}

fn upload(s: &mut State, req: &Request, name: &str, id: &str) -> Reply {
    let id = id.to_string();
    let location = |id: &str| format!("/v2/{name}/blobs/uploads/{id}?_state=opaque");
    match (req.method.as_str(), id.is_empty()) {
        ("POST", true) => {
            if let (Some(digest), Some(from)) = (req.param("mount"), req.param("from")) {
                if s.repo_blobs.contains(&(from.to_string(), digest.to_string())) {
                    s.repo_blobs.insert((name.to_string(), digest.to_string()));
                    return Reply::status(201).header("Location", &format!("/v2/{name}/blobs/{digest}"));
                }
            }
            s.next += 1;
            let id = format!("u{}", s.next);
            s.uploads.insert(id.clone(), Vec::new());
            Reply::status(202).header("Location", &location(&id)).header("Range", "0-0")
        }
        (_, true) => Reply::status(405),
        (method, false) => {
            assert_eq!(req.param("_state"), Some("opaque"), "the Location's query is kept");
            let Some(data) = s.uploads.get(&id).cloned() else {
                return error(404, "BLOB_UPLOAD_UNKNOWN", "blob upload unknown");
            };
            match method {
                "GET" => {
                    Reply::status(204).header("Location", &location(&id)).header("Range", &range(data.len()))
                }
                "PATCH" => {
                    let content_range = req.header("content-range").unwrap();
                    let start: usize = content_range.split_once('-').unwrap().0.parse().unwrap();
                    assert_eq!(req.header("content-type"), Some("application/octet-stream"));
                    if start != data.len() {
                        return error(416, "BLOB_UPLOAD_INVALID", "wrong start");
                    }
                    s.patches += 1;
                    let mut data = data;
                    if s.fail_patch == Some(s.patches) {
                        data.extend_from_slice(&req.body[..req.body.len() / 2]);
                        s.uploads.insert(id, data);
                        return error(500, "UNKNOWN", "storage hiccup");
                    }
                    data.extend_from_slice(&req.body);
                    let len = data.len();
                    s.uploads.insert(id.clone(), data);
                    if s.hangup_patch == Some(s.patches) {
                        return Reply::Hangup;
                    }
                    Reply::status(202).header("Location", &location(&id)).header("Range", &range(len))
                }
                "PUT" => {
                    let mut data = data;
                    data.extend_from_slice(&req.body);
                    let digest = req.param("digest").unwrap().to_string();
                    if sha256_bytes(&data) != digest {
                        return error(
                            400,
                            "DIGEST_INVALID",
                            "provided digest did not match uploaded content",
                        );
                    }
                    s.uploads.remove(&id);
                    s.blobs.insert(digest.clone(), data);
                    s.repo_blobs.insert((name.to_string(), digest.clone()));
                    Reply::status(201).header("Docker-Content-Digest", &digest)
                }
                _ => Reply::status(405),
            }
        }
    }
}

/// A layout at `dir/layout-<seed>` with one layer of `size` noise bytes, tagged `t`.
fn make_layout(dir: &Path, arch: &str, size: usize, seed: u64) -> (PathBuf, String) {
    let data = noise(size, seed);
    let path = dir.join(format!("layer-{seed}"));
    std::fs::write(&path, &data).unwrap();
    let digest = sha256_bytes(&data);
    let layer = LayerBlob {
        digest: digest.clone(),
        diff_id: digest,
        size: size as u64,
        media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into(),
        annotations: std::collections::BTreeMap::new(),
        path,
    };
    let config = ImageConfig { architecture: arch.into(), os: "linux".into(), ..ImageConfig::default() };
    let image = Image::new(config, vec![layer], BTreeMap::new()).unwrap();
    let layout = dir.join(format!("layout-{seed}"));
    let digest = oci::write_layout(&layout, &image, "t").unwrap();
    (layout, digest)
}

fn client() -> Client {
    Client::new(Vec::<String>::new()).anonymous().with_retries(3, Duration::from_millis(1))
}

const MIB: usize = 1024 * 1024;

#[test]
fn bearer_push_chunked_then_pull_back() {
    let user = Credentials { username: "u".into(), password: "p".into() };
    let fake = Fake::start(Auth::Bearer { basic: Some(user.basic_header()) });
    let work = tempfile::tempdir().unwrap();
    let (layout, digest) = make_layout(work.path(), "amd64", 3 * MIB + 17, 1);
    let client = client().with_credentials(&fake.server.addr, user).with_chunk_size(MIB as u64);
    let dest = fake.reference("ns/app:v1");

    let report = push_layout(&client, &layout, Some("t"), &dest).unwrap();
    assert_eq!(report.manifest_digest, digest);
    assert_eq!((report.blobs_uploaded, report.blobs_skipped, report.blobs_mounted), (2, 0, 0));
    assert_eq!(report.reference, format!("{}/ns/app:v1@{digest}", fake.server.addr));
    assert_eq!(fake.count("PATCH"), 4, "3 MiB + 17 bytes in 1 MiB chunks");
    {
        let s = fake.state();
        // One token, for the push scope; the layout's manifest bytes, unchanged.
        assert_eq!(s.token_scopes, vec![vec!["repository:ns/app:pull,push".to_string()]]);
        let raw = std::fs::read(layout.join("blobs/sha256").join(&digest[7..])).unwrap();
        assert_eq!(s.manifests[&("ns/app".to_string(), "v1".to_string())].1, raw);
        assert_eq!(s.manifests[&("ns/app".to_string(), "v1".to_string())].0, oci::MEDIA_TYPE_MANIFEST);
    }

    // Again: nothing to upload, one HEAD per blob and the manifest PUT, the token reused.
    let again = push_layout(&client, &layout, Some("t"), &dest).unwrap();
    assert_eq!((again.blobs_uploaded, again.blobs_skipped, again.bytes_uploaded), (0, 2, 0));
    assert_eq!(again.requests, 3);

    // Pull it back into a new layout.
    let out = work.path().join("pulled");
    let pulled = pull(&client, &dest, &out).unwrap();
    assert_eq!(pulled.image.manifest_digest, digest);
    assert_eq!(pulled.layout_tag, "v1");
    assert_eq!(pulled.index_digest, None);
    assert_eq!((pulled.blobs_downloaded, pulled.blobs_present), (2, 0));
    assert_eq!(pulled.pinned, format!("{}/ns/app@{digest}", fake.server.addr));
    let original = oci::read_layout(&layout, Some("t")).unwrap();
    assert_eq!(
        std::fs::read(&pulled.image.layers[0].path).unwrap(),
        std::fs::read(&original.layers[0].path).unwrap()
    );
    assert_eq!(fake.state().token_scopes.len(), 2, "one more token, for the pull scope");
    // The index entry carries the platform from the config.
    let index: oci::Index = serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    assert_eq!(index.manifests[0].platform.as_ref().unwrap().architecture, "amd64");

    // Again into the same layout: nothing downloaded; by digest too.
    let by_digest = Reference { tag: None, digest: Some(digest.clone()), ..dest.clone() };
    let again = pull_with(
        &client,
        &by_digest,
        &out,
        &PullOptions { layout_tag: Some("v1"), ..PullOptions::default() },
    )
    .unwrap();
    assert_eq!((again.blobs_downloaded, again.blobs_present), (0, 2));
}

#[test]
fn expired_token_is_fetched_again() {
    let fake = Fake::start(Auth::Bearer { basic: None });
    let work = tempfile::tempdir().unwrap();
    let (layout, _) = make_layout(work.path(), "amd64", 1000, 2);
    let client = client();
    let dest = fake.reference("app:1");
    push_layout(&client, &layout, None, &dest).unwrap();
    fake.state().valid_tokens.clear();
    let report = push_layout(&client, &layout, None, &dest).unwrap();
    assert_eq!(report.blobs_skipped, 2);
    assert_eq!(fake.state().token_scopes.len(), 2);
    // HEAD (401), token, HEAD, HEAD, PUT.
    assert_eq!(report.requests, 5);
}

#[test]
fn token_endpoint_refusal_is_reported() {
    let fake = Fake::start(Auth::Bearer { basic: Some("Basic nope".into()) });
    let work = tempfile::tempdir().unwrap();
    let (layout, _) = make_layout(work.path(), "amd64", 1000, 3);
    let err = push_layout(&client(), &layout, None, &fake.reference("app:1")).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, RegistryError::Token { .. }), "{text}");
    assert!(text.contains("HTTP 401") && text.contains("UNAUTHORIZED: bad credentials"), "{text}");
    assert!(text.contains("STACKBUILD_REGISTRY_USER"), "{text}");
}

#[test]
fn basic_auth() {
    let user = Credentials { username: "alice".into(), password: "s3cret".into() };
    let fake = Fake::start(Auth::Basic(user.basic_header()));
    let work = tempfile::tempdir().unwrap();
    let (layout, digest) = make_layout(work.path(), "amd64", 1000, 4);
    let dest = fake.reference("app:1");

    let err = push_layout(&client(), &layout, None, &dest).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{text}");
    assert!(text.contains("no credentials") && text.contains("HTTP 401"), "{text}");

    let wrong = Credentials { username: "alice".into(), password: "wrong".into() };
    let err =
        push_layout(&client().with_credentials(&fake.server.addr, wrong), &layout, None, &dest).unwrap_err();
    assert!(err.to_string().contains("check the credentials"), "{err}");

    let client = client().with_credentials(&fake.server.addr, user);
    let report = push_layout(&client, &layout, None, &dest).unwrap();
    assert_eq!(report.manifest_digest, digest);
    // After the first challenge every request carries the credentials: HEAD (401) + 2 x
    // (HEAD, POST, PUT) + manifest PUT.
    assert_eq!(report.requests, 8);
}

#[test]
fn docker_config_credentials() {
    let user = Credentials { username: "bob".into(), password: "pw".into() };
    let fake = Fake::start(Auth::Basic(user.basic_header()));
    let work = tempfile::tempdir().unwrap();
    let (layout, _) = make_layout(work.path(), "amd64", 10, 5);
    let config = work.path().join("config.json");
    std::fs::write(&config, format!(r#"{{"auths":{{"{}":{{"auth":"Ym9iOnB3"}}}}}}"#, fake.server.addr))
        .unwrap();
    let client = Client::new(Vec::<String>::new()).with_docker_config(&config);
    // The environment variables would win; the test environment does not set them.
    if std::env::var_os(super::auth::ENV_USER).is_none() {
        push_layout(&client, &layout, None, &fake.reference("app:1")).unwrap();
    }
}

#[test]
fn failed_chunk_resumes_from_the_registry_range() {
    let fake = Fake::start(Auth::None);
    fake.state().fail_patch = Some(2);
    let work = tempfile::tempdir().unwrap();
    let size = 3 * MIB;
    let (layout, _) = make_layout(work.path(), "amd64", size, 6);
    let client = client().with_chunk_size(MIB as u64);
    let report = push_layout(&client, &layout, None, &fake.reference("app:1")).unwrap();
    assert_eq!(report.blobs_uploaded, 2);
    // The failed chunk stored half: the upload resumed at 1.5 MiB after one status GET.
    assert_eq!(fake.count("GET /v2/app/blobs/uploads/"), 1);
    let layer_bytes = size as u64;
    // The layer once, plus the half of the failed chunk that was sent again, plus the config.
    let config_bytes = report.bytes_uploaded - layer_bytes - MIB as u64 / 2;
    assert!(config_bytes < 1024, "{report:?}");
    let layer = oci::read_layout(&layout, None).unwrap().layers[0].clone();
    assert_eq!(fake.state().blobs[&layer.digest], std::fs::read(&layer.path).unwrap());
}

#[test]
fn dropped_connection_after_a_chunk_resumes() {
    let fake = Fake::start(Auth::None);
    fake.state().hangup_patch = Some(1);
    let work = tempfile::tempdir().unwrap();
    let (layout, _) = make_layout(work.path(), "amd64", 2 * MIB + 5, 7);
    let client = client().with_chunk_size(MIB as u64);
    let report = push_layout(&client, &layout, None, &fake.reference("app:1")).unwrap();
    assert_eq!(report.blobs_uploaded, 2);
    // The first chunk arrived though its answer did not: it is not sent twice.
    assert_eq!(fake.count("PATCH"), 3);
}

#[test]
fn chunk_failures_are_bounded() {
    let fake = Fake::start(Auth::None);
    let work = tempfile::tempdir().unwrap();
    let (layout, _) = make_layout(work.path(), "amd64", 2 * MIB, 8);
    fake.state().fail_patch = Some(1);
    let client = client().with_chunk_size(MIB as u64).with_retries(1, Duration::ZERO);
    let err = push_layout(&client, &layout, None, &fake.reference("app:1")).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, RegistryError::Transfer { attempts: 1, .. }), "{text}");
    assert!(text.contains("storage hiccup") && text.contains("blob sha256:"), "{text}");
}

#[test]
fn cross_repository_mount() {
    let fake = Fake::start(Auth::Bearer { basic: None });
    let work = tempfile::tempdir().unwrap();
    let (layout, digest) = make_layout(work.path(), "amd64", 5000, 9);
    let client = client();
    push_layout(&client, &layout, None, &fake.reference("a:1")).unwrap();
    let options = PushOptions { mount_from: Some("a") };
    let report = push_layout_with(&client, &layout, None, &fake.reference("b:1"), &options).unwrap();
    assert_eq!((report.blobs_mounted, report.blobs_uploaded, report.bytes_uploaded), (2, 0, 0));
    assert_eq!(report.manifest_digest, digest);
    // The token covers both repositories.
    let scopes = fake.state().token_scopes.last().cloned().unwrap();
    assert_eq!(scopes, vec!["repository:b:pull,push".to_string(), "repository:a:pull".to_string()]);
    // A mount source without the blob falls back to an upload.
    let report = push_layout_with(
        &client,
        &layout,
        None,
        &fake.reference("c:1"),
        &PushOptions { mount_from: Some("z") },
    )
    .unwrap();
    assert_eq!((report.blobs_mounted, report.blobs_uploaded), (0, 2));
}

#[test]
fn pull_picks_the_platform_from_an_index() {
    let fake = Fake::start(Auth::None);
    let work = tempfile::tempdir().unwrap();
    let client = client();
    let mut descriptors = Vec::new();
    for (seed, arch) in [(10, "arm64"), (11, "amd64")] {
        let (layout, digest) = make_layout(work.path(), arch, 100, seed);
        let dest = fake.reference(&format!("multi@{digest}"));
        let report = push_layout(&client, &layout, None, &dest).unwrap();
        assert_eq!(report.reference, format!("{}/multi@{digest}", fake.server.addr));
        let size = std::fs::metadata(layout.join("blobs/sha256").join(&digest[7..])).unwrap().len();
        descriptors.push(serde_json::json!({
            "mediaType": oci::MEDIA_TYPE_MANIFEST, "digest": digest, "size": size,
            "platform": {"architecture": arch, "os": "linux"}
        }));
    }
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": oci::MEDIA_TYPE_INDEX, "manifests": descriptors
    }))
    .unwrap();
    let index_digest = sha256_bytes(&index);
    fake.state().manifests.insert(("multi".into(), "latest".into()), (oci::MEDIA_TYPE_INDEX.into(), index));

    let out = work.path().join("out");
    let pulled = pull(&client, &fake.reference("multi"), &out).unwrap();
    assert_eq!(pulled.index_digest.as_deref(), Some(index_digest.as_str()));
    assert_eq!(pulled.image.config.architecture, "amd64");
    assert_eq!(pulled.layout_tag, "latest");
    let arm = PullOptions {
        platform: Platform { architecture: "arm64".into(), os: "linux".into(), variant: Some("v8".into()) },
        layout_tag: Some("arm"),
    };
    let pulled = pull_with(&client, &fake.reference("multi"), &out, &arm).unwrap();
    assert_eq!(pulled.image.config.architecture, "arm64");
    // Both images are in the layout.
    assert_eq!(oci::read_layout(&out, Some("latest")).unwrap().config.architecture, "amd64");

    let riscv = PullOptions {
        platform: Platform { architecture: "riscv64".into(), os: "linux".into(), variant: None },
        layout_tag: None,
    };
    let err = pull_with(&client, &fake.reference("multi"), &out, &riscv).unwrap_err();
    assert!(
        err.to_string().contains("linux/riscv64") && err.to_string().contains("linux/arm64, linux/amd64"),
        "{err}"
    );
}

#[test]
fn pull_verifies_manifest_and_blob_digests() {
    let fake = Fake::start(Auth::None);
    let work = tempfile::tempdir().unwrap();
    let client = client();
    let (layout, digest) = make_layout(work.path(), "amd64", 1000, 12);
    push_layout(&client, &layout, None, &fake.reference("app:1")).unwrap();

    // A blob whose bytes changed in storage.
    let layer = oci::read_layout(&layout, None).unwrap().layers[0].digest.clone();
    fake.state().blobs.get_mut(&layer).unwrap()[0] ^= 1;
    let out = work.path().join("out");
    let err = pull(&client, &fake.reference("app:1"), &out).unwrap_err();
    assert!(matches!(&err, RegistryError::DigestMismatch { what, .. } if what.contains(&layer)), "{err}");
    // Nothing half-written is left under the digest's name.
    assert!(!out.join("blobs/sha256").join(&layer[7..]).exists());
    assert!(!out.join("index.json").exists());

    // A manifest that is not the one asked for by digest.
    let other = sha256_bytes(b"other");
    let bytes = fake.state().manifests[&("app".to_string(), digest.clone())].clone();
    fake.state().manifests.insert(("app".into(), other.clone()), bytes);
    let err = pull(&client, &fake.reference(&format!("app@{other}")), &out).unwrap_err();
    assert!(matches!(err, RegistryError::DigestMismatch { .. }), "{err}");
}

#[test]
fn registry_errors_name_the_object_and_status() {
    let fake = Fake::start(Auth::None);
    let work = tempfile::tempdir().unwrap();
    let client = client();
    let err = pull(&client, &fake.reference("missing:1"), &work.path().join("out")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("manifest") && text.contains("missing:1"), "{text}");
    assert!(text.contains("HTTP 404") && text.contains("MANIFEST_UNKNOWN: manifest unknown"), "{text}");

    // A connection refused is a transport error naming the URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dest = Reference::parse(&format!("127.0.0.1:{port}/app:1")).unwrap();
    let (layout, _) = make_layout(work.path(), "amd64", 10, 13);
    let err = push_layout(&client, &layout, None, &dest).unwrap_err();
    assert!(matches!(err, RegistryError::Transport { .. }), "{err}");
    assert!(err.to_string().contains(&format!("http://127.0.0.1:{port}/v2/app/blobs/sha256:")), "{err}");

    // A push by digest must carry the layout's digest.
    let wrong = fake.reference(&format!("app@{}", sha256_bytes(b"x")));
    assert!(matches!(push_layout(&client, &layout, None, &wrong), Err(RegistryError::DigestMismatch { .. })));
}
