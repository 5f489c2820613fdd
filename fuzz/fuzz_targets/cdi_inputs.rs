//! What a container was given (config.json's `linux.devices` and `mounts`) and CDI spec files:
//! both come from whoever writes the bundle or the spec directories.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // A host with nothing readable: selection and coverage logic on empty facts.
    let root = Path::new("/nonexistent-stackhook-fuzz-root");
    let host = stackhook::probe::probe(root);
    if let Ok(config) = serde_json::from_slice::<stackhook::oci::Config>(data) {
        let majors: BTreeMap<String, u32> =
            [("nvidia", 195), ("nvidia-uvm", 510), ("nvidia-caps", 237)].into_iter().map(|(n, m)| (n.to_owned(), m)).collect();
        let mut annotations = BTreeMap::new();
        annotations.insert("cdi.k8s.io/fuzz".to_owned(), text.chars().take(256).collect());
        let given = stackhook::given::Given::read(&config, &annotations, &majors);
        let _ = given.node_selection(&host);
        let _ = given.unmatched(&host);
        let _ = given.sources(Some(("void", false)), Some(&host), given.by_privilege(config.privileged()));
        let _ = given.annotated_selection();
    }
    if let Ok(spec) = stackhook::cdi::parse(&text) {
        let _ = stackhook::cdi::is_nvidia_kind(&spec.kind);
        let reports = stackhook::cdi::check_all(root, &[("fuzz.yaml".to_owned(), Ok(text.into_owned()))]);
        let _ = stackhook::cdi::render(&reports);
    }
});
