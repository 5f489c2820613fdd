//! prost's code for NRI's API (`proto/nri.proto`, upstream `pkg/api/api.proto`) and ttrpc's
//! envelope (`proto/ttrpc.proto`). Generated, never edited: the test below generates it again
//! with protox (the .proto compiler) and prost-build and compares; `STACKHOOK_UPDATE_PROTO=1`
//! writes the fresh files instead.

#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod api {
    include!("generated/nri.pkg.api.v1alpha1.rs");
}

#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod ttrpc {
    include!("generated/ttrpc.rs");
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn the_checked_in_code_is_what_the_protos_generate() {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let protos = crate_dir.join("proto");
        let fds = protox::compile([protos.join("nri.proto"), protos.join("ttrpc.proto")], [&protos])
            .expect("the .proto files compile");
        let out = tempfile::tempdir().unwrap();
        prost_build::Config::new().out_dir(out.path()).compile_fds(fds).expect("prost-build generates");
        let checked_in = crate_dir.join("src/nri/generated");
        for name in ["nri.pkg.api.v1alpha1.rs", "ttrpc.rs"] {
            let fresh = std::fs::read_to_string(out.path().join(name)).unwrap();
            if std::env::var_os("STACKHOOK_UPDATE_PROTO").is_some() {
                std::fs::write(checked_in.join(name), &fresh).unwrap();
                continue;
            }
            let old = std::fs::read_to_string(checked_in.join(name)).unwrap_or_default();
            assert!(
                old == fresh,
                "src/nri/generated/{name} is not what proto/ generates: run \
                 STACKHOOK_UPDATE_PROTO=1 cargo test -p stackhook --lib the_checked_in_code"
            );
        }
    }
}
