//! Generates the CRI client from kubernetes/cri-api's `api.proto` with protox (a protobuf
//! compiler in Rust: no protoc on the machine) and tonic-prost-build.

fn main() {
    println!("cargo:rerun-if-changed=proto/api.proto");
    let fds = protox::compile(["proto/api.proto"], ["proto"]).expect("proto/api.proto compiles");
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(true)
        .compile_fds(fds)
        .expect("tonic-prost-build generates the CRI client");
}
