//! NRI's stream as a runtime (or anything on its socket) sends it: multiplexer frames cut at
//! any point, ttrpc envelopes inside, NRI's messages inside those, and the decision on a
//! container built from whatever decoded. Nothing may panic, and no length may make the
//! decoder buffer past its caps.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use stackhook::invoke::{HookConfig, Policy};
use stackhook::nri::{api, ttrpc, Demux};

fuzz_target!(|data: &[u8]| {
    let cut = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let mut demux = Demux::default();
    let mut messages = demux.push(&data[..cut]).unwrap_or_default();
    messages.extend(demux.push(&data[cut..]).unwrap_or_default());
    let hook = HookConfig { host_root: "/nonexistent".into(), policy: Policy::Enforce, report_dir: None };
    for payload in std::iter::once(data).chain(messages.iter().map(|m| m.payload.as_slice())) {
        if let Ok(request) = ttrpc::Request::decode(payload) {
            if let Ok(create) = api::CreateContainerRequest::decode(request.payload.as_slice()) {
                let _ = stackhook::nri::decide(&create, &hook);
            }
        }
        if let Ok(create) = api::CreateContainerRequest::decode(payload) {
            let _ = stackhook::nri::decide(&create, &hook);
        }
    }
});
