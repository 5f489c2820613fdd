//! The runtime's state on stdin and the image-controlled env in config.json.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = stackhook::oci::State::read(data) {
        let _ = state.bundle();
    }
    let text = String::from_utf8_lossy(data);
    let env: Vec<&str> = text.split('\n').collect();
    let _ = stackhook::contract::image::ContainerRequest::from_env(env.iter().copied(), &BTreeMap::new());
});
