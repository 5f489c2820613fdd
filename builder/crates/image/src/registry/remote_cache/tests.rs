//! The layer cache against an in-process registry that keeps blobs and manifests in memory and
//! can be made to lie: a wrong blob behind a digest, a wrong `diff_id`, a missing blob.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::super::fake::{Reply, Request, Server};
use super::*;
use crate::layer::LayerWriter;

#[derive(Default)]
struct Store {
    blobs: HashMap<String, Vec<u8>>,
    manifests: HashMap<String, Vec<u8>>,
    uploads: u64,
    log: Vec<String>,
    /// Pushes are refused with 403 (read-only credentials).
    read_only: bool,
}

struct Fake {
    server: Server,
    store: Arc<Mutex<Store>>,
}

impl Fake {
    fn start() -> Self {
        let store = Arc::new(Mutex::new(Store::default()));
        let server = {
            let store = Arc::clone(&store);
            Server::start(move |req| handle(&mut store.lock().unwrap(), req))
        };
        Self { server, store }
    }

    fn cache(&self, dir: &Path) -> Cache {
        let client = Client::new(Vec::<String>::new()).anonymous().with_retries(1, Duration::ZERO);
        let remote = RemoteCache::new(&format!("{}/team/cache", self.server.addr), client).unwrap();
        Cache::open(dir).unwrap().with_remote(remote)
    }

    fn manifest(&self, key: &LayerKey) -> serde_json::Value {
        serde_json::from_slice(&self.store.lock().unwrap().manifests[&cache_tag(key)]).unwrap()
    }

    fn set_manifest(&self, key: &LayerKey, manifest: &serde_json::Value) {
        let bytes = serde_json::to_vec(manifest).unwrap();
        self.store.lock().unwrap().manifests.insert(cache_tag(key), bytes);
    }
}

fn handle(store: &mut Store, req: &Request) -> Reply {
    store.log.push(format!("{} {}", req.method, req.path));
    let path = req.path.as_str();
    if let Some((_, digest)) = path.rsplit_once("/blobs/").filter(|(_, d)| d.starts_with("sha256:")) {
        return match (req.method.as_str(), store.blobs.get(digest)) {
            ("HEAD" | "GET", Some(bytes)) => Reply::status(200).body(bytes.clone()),
            _ => Reply::status(404),
        };
    }
    if store.read_only && matches!(req.method.as_str(), "POST" | "PUT" | "PATCH") {
        return Reply::status(403).body(r#"{"errors":[{"code":"DENIED","message":"read only"}]}"#);
    }
    if path.ends_with("/blobs/uploads/") && req.method == "POST" {
        store.uploads += 1;
        return Reply::status(202).header("Location", &format!("{path}{}", store.uploads));
    }
    if path.contains("/blobs/uploads/") && req.method == "PUT" {
        // Stored under the digest the client names, unchecked: a test may break it afterwards.
        store.blobs.insert(req.param("digest").unwrap_or_default().to_string(), req.body.clone());
        return Reply::status(201);
    }
    if let Some((_, tag)) = path.rsplit_once("/manifests/") {
        return match req.method.as_str() {
            "PUT" => {
                store.manifests.insert(tag.to_string(), req.body.clone());
                Reply::status(201)
            }
            "GET" => match store.manifests.get(tag) {
                Some(bytes) => {
                    Reply::status(200).header("Content-Type", MEDIA_TYPE_MANIFEST).body(bytes.clone())
                }
                None => Reply::status(404).body(r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"x"}]}"#),
            },
            _ => Reply::status(405),
        };
    }
    Reply::status(404)
}

/// A layer built into `cache` (and so pushed), with a facts record beside it.
fn build_layer(cache: &Cache, key: &LayerKey, content: &[u8]) -> LayerBlob {
    let facts = cache.root().join("facts");
    fs::create_dir_all(&facts).unwrap();
    fs::write(facts.join(format!("{}.json", key.as_hex())), br#"{"python":"3.11","packages":[]}"#).unwrap();
    let mut writer = LayerWriter::new(cache, 0);
    writer.add_file("etc/data", content.to_vec(), 0o644).unwrap();
    let blob = writer.finish(Compression::Gzip).unwrap();
    cache.put_layer(key, &blob).unwrap();
    blob
}

fn key(name: &str) -> LayerKey {
    LayerKey::of("test", name)
}

#[test]
fn tags_are_valid_and_hide_the_key() {
    let secret = "https://user:hunter2@git.example/repo";
    let k = LayerKey::of("sources", secret);
    let tag = cache_tag(&k);
    assert_eq!(tag, cache_tag(&k.clone()), "stable");
    assert_ne!(tag, cache_tag(&key("other")));
    assert!(tag.len() <= 128 && tag.starts_with("cache-v1-"), "{tag}");
    assert!(tag.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)), "{tag}");
    assert!(!tag.contains(k.as_hex()) && !tag.contains(&k.as_hex()[..16]), "the key itself is not the tag");
    assert!(!tag.contains("hunter2"));
    // The documented derivation, so another tool can find an entry.
    let mut h = Sha256::new();
    h.update(b"stackbuild-cache/v1\0");
    h.update(k.as_hex().as_bytes());
    assert_eq!(tag, format!("cache-v1-{}", hex::encode(h.finalize())));
}

#[test]
fn a_repository_with_a_tag_or_no_host_is_refused() {
    for spec in ["127.0.0.1:5000/cache:latest", "cache", "127.0.0.1:5000/cache@sha256:".to_owned().as_str()] {
        assert!(RemoteCache::new(spec, Client::default()).is_err(), "{spec}");
    }
    let ok = RemoteCache::new("127.0.0.1:5000/team/cache", Client::default()).unwrap();
    assert_eq!(ok.to_string(), "127.0.0.1:5000/team/cache");
}

#[test]
fn a_layer_built_on_one_machine_is_pulled_on_another() {
    let fake = Fake::start();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = fake.cache(a.path());
    let k = key("layer");
    let built = build_layer(&first, &k, b"content");
    let manifest = fake.manifest(&k);
    assert_eq!(manifest["artifactType"], ARTIFACT_TYPE);
    assert_eq!(manifest["config"]["mediaType"], MEDIA_TYPE_EMPTY);
    assert_eq!(manifest["layers"][0]["digest"], built.digest.as_str());
    assert_eq!(manifest["layers"][0]["annotations"][ANNOTATION_DIFF_ID], built.diff_id.as_str());
    assert_eq!(manifest["layers"][1]["annotations"][ANNOTATION_RECORD], "facts");
    assert!(!String::from_utf8_lossy(&serde_json::to_vec(&manifest).unwrap()).contains(k.as_hex()));

    let second = fake.cache(b.path());
    assert!(second.get_local_layer(&k).is_none());
    let pulled = second.get_layer(&k).expect("a hit in the registry");
    assert_eq!((&pulled.digest, &pulled.diff_id, pulled.size), (&built.digest, &built.diff_id, built.size));
    assert_eq!(pulled.media_type, built.media_type);
    assert!(second.remote().unwrap().pulled(&built.digest));
    second.verify_blob(&pulled.digest).unwrap();
    assert_eq!(fs::read(&pulled.path).unwrap(), fs::read(&built.path).unwrap());
    let facts = b.path().join("facts").join(format!("{}.json", k.as_hex()));
    assert_eq!(fs::read(facts).unwrap(), br#"{"python":"3.11","packages":[]}"#);
    // Now a local hit: the registry is not asked again.
    let asked = fake.store.lock().unwrap().log.len();
    assert!(second.get_layer(&k).is_some());
    assert_eq!(fake.store.lock().unwrap().log.len(), asked);
    // A pulled layer is not pushed back.
    let puts = fake
        .store
        .lock()
        .unwrap()
        .log
        .iter()
        .filter(|l| l.starts_with("PUT") && l.contains("/manifests/"))
        .count();
    assert_eq!(puts, 1, "only the first machine's push");
}

#[test]
fn a_miss_is_none_and_a_broken_entry_is_never_trusted() {
    let fake = Fake::start();
    let a = tempfile::tempdir().unwrap();
    let first = fake.cache(a.path());
    let k = key("layer");
    let built = build_layer(&first, &k, b"the real content");
    let other = build_layer(&first, &key("other"), b"another layer");
    let fresh = |fake: &Fake| {
        let dir = tempfile::tempdir().unwrap();
        let cache = fake.cache(dir.path());
        (dir, cache)
    };

    // Not there at all.
    let (_d, cache) = fresh(&fake);
    assert!(cache.get_layer(&key("never built")).is_none());

    // The manifest claims another diff_id: the blob is right, the key's mapping is not.
    let good = fake.manifest(&k);
    let mut lying = good.clone();
    lying["layers"][0]["annotations"][ANNOTATION_DIFF_ID] = other.diff_id.clone().into();
    fake.set_manifest(&k, &lying);
    let (_d, cache) = fresh(&fake);
    assert!(cache.get_layer(&k).is_none());
    assert!(cache.get_local_layer(&k).is_none(), "no key recorded");
    assert!(!cache.has_blob(&built.digest), "the blob it fetched for nothing is removed");

    // The key points at another layer's blob under this layer's digest (a corrupt blob).
    fake.set_manifest(&k, &good);
    let wrong = fake.store.lock().unwrap().blobs[&other.digest].clone();
    fake.store.lock().unwrap().blobs.insert(built.digest.clone(), wrong);
    let (_d, cache) = fresh(&fake);
    assert!(cache.get_layer(&k).is_none());
    assert!(cache.get_local_layer(&k).is_none() && !cache.has_blob(&built.digest));

    // The blob is gone.
    fake.store.lock().unwrap().blobs.remove(&built.digest);
    let (_d, cache) = fresh(&fake);
    assert!(cache.get_layer(&k).is_none());

    // Not a cache entry at all.
    let mut foreign = good.clone();
    foreign["artifactType"] = "application/spdx+json".into();
    fake.set_manifest(&k, &foreign);
    let (_d, cache) = fresh(&fake);
    assert!(cache.get_layer(&k).is_none());

    // Building the layer again pushes a good entry, which the next machine takes.
    let (_d, cache) = fresh(&fake);
    let rebuilt = build_layer(&cache, &k, b"the real content");
    assert_eq!(rebuilt.digest, built.digest);
    let (_d, cache) = fresh(&fake);
    assert_eq!(cache.get_layer(&k).map(|b| b.digest), Some(built.digest));
}

#[test]
fn a_lazy_layer_keeps_its_toc_annotations_through_the_registry() {
    for compression in [Compression::Estargz, Compression::ZstdChunked] {
        let fake = Fake::start();
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = fake.cache(a.path());
        let k = key(compression.name());
        let mut writer = LayerWriter::new(&first, 0);
        writer.add_file("etc/data", b"lazy".to_vec(), 0o644).unwrap();
        let built = writer.finish(compression).unwrap();
        assert!(built.annotations.contains_key("containerd.io/snapshot/stargz/toc.digest"));
        first.put_layer(&k, &built).unwrap();
        let pulled = fake.cache(b.path()).get_layer(&k).expect("a hit in the registry");
        // The layer's own annotations come back; the cache's diff_id annotation does not.
        assert_eq!(pulled.annotations, built.annotations, "{compression:?}");
    }
}

#[test]
fn records_outside_the_list_are_ignored() {
    let blob = LayerBlob {
        digest: format!("sha256:{}", "a".repeat(64)),
        diff_id: format!("sha256:{}", "b".repeat(64)),
        size: 3,
        media_type: Compression::Gzip.media_type().to_owned(),
        annotations: std::collections::BTreeMap::new(),
        path: std::path::PathBuf::new(),
    };
    let digest = format!("sha256:{}", "c".repeat(64));
    let bytes = cache_manifest(&blob, &[("facts", digest.clone(), 5), ("../../etc/passwd", digest, 5)]);
    let (layer, records) = parse_manifest("test", &bytes).unwrap();
    assert_eq!(layer.diff_id, blob.diff_id);
    assert_eq!(records.keys().copied().collect::<Vec<_>>(), ["facts"]);

    let mut bad: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    bad["layers"][0]["mediaType"] = "text/plain".into();
    assert!(parse_manifest("test", &serde_json::to_vec(&bad).unwrap()).is_err());
    bad["layers"][0]["mediaType"] = blob.media_type.clone().into();
    bad["layers"][0]["annotations"] = serde_json::json!({});
    assert!(parse_manifest("test", &serde_json::to_vec(&bad).unwrap()).is_err());
}

#[test]
fn a_registry_that_refuses_pushes_is_still_read_and_not_pushed_to_again() {
    let fake = Fake::start();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = fake.cache(a.path());
    let k = key("shared");
    let built = build_layer(&first, &k, b"shared");
    fake.store.lock().unwrap().read_only = true;
    fake.store.lock().unwrap().log.clear();

    let reader = fake.cache(b.path());
    build_layer(&reader, &key("one"), b"one");
    build_layer(&reader, &key("two"), b"two");
    let refused = fake.store.lock().unwrap().log.iter().filter(|l| l.starts_with("POST")).count();
    assert_eq!(refused, 1, "after the first 403 no other push is tried");
    assert_eq!(reader.get_layer(&k).map(|b| b.digest), Some(built.digest), "pulls go on");
}
