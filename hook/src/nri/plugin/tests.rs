//! The plugin against a runtime played by the test over a socket pair: the same frames, in the
//! same order, as NRI's adaptation sends them.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use prost::Message as _;

use super::*;
use crate::fixture::Preset;
use crate::invoke::Policy;

/// The runtime's end: sends calls on connection 1, reads the plugin's frames.
struct Runtime {
    stream: UnixStream,
    demux: Demux,
    pending: Vec<super::super::wire::Message>,
    next_stream: u32,
}

impl Runtime {
    fn next(&mut self) -> super::super::wire::Message {
        let mut buf = [0u8; 4096];
        while self.pending.is_empty() {
            let n = self.stream.read(&mut buf).unwrap();
            assert!(n > 0, "the plugin closed the connection");
            self.pending = self.demux.push(&buf[..n]).unwrap();
            self.pending.reverse();
        }
        self.pending.pop().unwrap()
    }

    fn call(&mut self, method: &str, payload: Vec<u8>) -> ttrpc::Response {
        let request = ttrpc::Request {
            service: PLUGIN_SERVICE.into(),
            method: method.into(),
            payload,
            ..Default::default()
        };
        let stream = self.next_stream;
        self.next_stream += 2;
        self.stream
            .write_all(
                &encode(PLUGIN_SERVICE_CONN, stream, MessageKind::Request, &request.encode_to_vec()).unwrap(),
            )
            .unwrap();
        let reply = self.next();
        assert_eq!(
            (reply.conn, reply.stream, reply.kind),
            (PLUGIN_SERVICE_CONN, stream, MessageKind::Response)
        );
        ttrpc::Response::decode(reply.payload.as_slice()).unwrap()
    }
}

fn container(name: &str, env: &[&str], devices: &[(&str, i64, i64)]) -> Vec<u8> {
    api::CreateContainerRequest {
        pod: Some(api::PodSandbox { name: "trainer-0".into(), namespace: "ml".into(), ..Default::default() }),
        container: Some(api::Container {
            id: format!("{name}-id"),
            name: name.into(),
            env: env.iter().map(|e| (*e).to_owned()).collect(),
            linux: Some(api::LinuxContainer {
                devices: devices
                    .iter()
                    .map(|(path, major, minor)| api::LinuxDevice {
                        path: (*path).into(),
                        r#type: "c".into(),
                        major: *major,
                        minor: *minor,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
    .encode_to_vec()
}

#[test]
fn registers_subscribes_to_creation_and_refuses_what_the_host_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let host = Preset::Healthy.build(&dir.path().join("host")).unwrap();
    let config = NriConfig {
        socket: "/nonexistent".into(),
        name: "stackhook".into(),
        index: "10".into(),
        hook: HookConfig { host_root: host.root().to_path_buf(), policy: Policy::Enforce, report_dir: None },
    };
    let (plugin_end, runtime_end) = UnixStream::pair().unwrap();
    let plugin = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let served = serve_stream(plugin_end, &config, &mut |l| lines.push(l.to_owned()));
        (served.map_err(|e| e.to_string()), lines)
    });
    let mut rt =
        Runtime { stream: runtime_end, demux: Demux::default(), pending: Vec::new(), next_stream: 1 };

    // RegisterPlugin first, on the runtime's connection.
    let register = rt.next();
    assert_eq!((register.conn, register.kind), (RUNTIME_SERVICE_CONN, MessageKind::Request));
    let request = ttrpc::Request::decode(register.payload.as_slice()).unwrap();
    assert_eq!((request.service.as_str(), request.method.as_str()), (RUNTIME_SERVICE, "RegisterPlugin"));
    let reg = api::RegisterPluginRequest::decode(request.payload.as_slice()).unwrap();
    assert_eq!((reg.plugin_name.as_str(), reg.plugin_idx.as_str()), ("stackhook", "10"));
    let ok = ttrpc::Response { status: None, payload: api::Empty::default().encode_to_vec() };
    rt.stream
        .write_all(
            &encode(RUNTIME_SERVICE_CONN, register.stream, MessageKind::Response, &ok.encode_to_vec())
                .unwrap(),
        )
        .unwrap();

    // Configure: CreateContainer only (bit 1 << (4 - 1)).
    let configure = api::ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "v1.7.24".into(),
        ..Default::default()
    };
    let reply = rt.call("Configure", configure.encode_to_vec());
    assert!(reply.status.is_none());
    assert_eq!(api::ConfigureResponse::decode(reply.payload.as_slice()).unwrap().events, 8);
    assert!(rt.call("Synchronize", api::SynchronizeRequest::default().encode_to_vec()).status.is_none());

    // A CUDA 13 image on the R535 host: refused, with the code and the remedy.
    let cuda13 = rt.call(
        "CreateContainer",
        container("cuda13", &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"], &[]),
    );
    let status = cuda13.status.expect("refused");
    assert_eq!(status.code, 9);
    insta::assert_snapshot!("nri_refusal", status.message);

    // A fitting one, a container with no GPU, and one whose GPU is a device node (CDI's edit):
    let fits = rt.call(
        "CreateContainer",
        container("fits", &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12.2"], &[]),
    );
    assert!(fits.status.is_none(), "{:?}", fits.status);
    let plain = rt.call("CreateContainer", container("plain", &["PATH=/bin"], &[]));
    assert!(plain.status.is_none());
    let by_node = rt.call(
        "CreateContainer",
        container(
            "by-node",
            &["NVIDIA_REQUIRE_CUDA=cuda>=13.0"],
            &[("/dev/nvidia0", 195, 0), ("/dev/nvidiactl", 195, 255)],
        ),
    );
    let status = by_node.status.expect("a GPU given as a device node is judged");
    assert!(status.message.contains("cuda>=13.0"), "{}", status.message);

    // Unknown calls are unimplemented, not fatal; Shutdown ends the session.
    assert_eq!(rt.call("StopContainer", Vec::new()).status.map(|s| s.code), Some(12));
    assert!(rt.call("Shutdown", Vec::new()).status.is_none());
    let (served, lines) = plugin.join().unwrap();
    assert_eq!(served, Ok(Served::Shutdown));
    assert!(lines.iter().any(|l| l.starts_with("registered as 10-stackhook")), "{lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("ml/trainer-0/cuda13: refused in")), "{lines:?}");
}

#[test]
fn a_refused_registration_and_a_closed_socket_end_the_session_with_their_reason() {
    let config = NriConfig {
        socket: "/nonexistent".into(),
        name: "stackhook".into(),
        index: "10".into(),
        hook: HookConfig { host_root: "/nonexistent".into(), policy: Policy::Enforce, report_dir: None },
    };
    let (plugin_end, mut runtime_end) = UnixStream::pair().unwrap();
    let cfg = config.clone();
    let plugin =
        std::thread::spawn(move || serve_stream(plugin_end, &cfg, &mut |_| {}).map_err(|e| e.to_string()));
    let mut demux = Demux::default();
    let mut buf = [0u8; 4096];
    let n = runtime_end.read(&mut buf).unwrap();
    let register = demux.push(&buf[..n]).unwrap().remove(0);
    let refused = ttrpc::Response {
        status: Some(ttrpc::Status {
            code: 6,
            message: "plugin with name stackhook already registered".into(),
            details: Vec::new(),
        }),
        payload: Vec::new(),
    };
    runtime_end
        .write_all(
            &encode(RUNTIME_SERVICE_CONN, register.stream, MessageKind::Response, &refused.encode_to_vec())
                .unwrap(),
        )
        .unwrap();
    let err = plugin.join().unwrap().unwrap_err();
    assert!(
        err.contains(
            "refused to register the plugin stackhook: plugin with name stackhook already registered"
        ),
        "{err}"
    );

    let (plugin_end, runtime_end) = UnixStream::pair().unwrap();
    drop(runtime_end);
    assert_eq!(serve_stream(plugin_end, &config, &mut |_| {}).map_err(|e| e.to_string()), Ok(Served::Closed));
    let e = serve(&config, &mut |_| {}).unwrap_err().to_string();
    assert!(
        e.contains("cannot connect to the NRI socket /nonexistent") && e.contains("disable = false"),
        "{e}"
    );
}

#[test]
fn a_privileged_container_is_told_by_its_dev_mem() {
    let c = api::Container {
        linux: Some(api::LinuxContainer {
            devices: vec![api::LinuxDevice {
                path: "/dev/mem".into(),
                r#type: "c".into(),
                major: 1,
                minor: 1,
                ..Default::default()
            }],
            cgroups_path: "kubepods-pod1.slice:cri-containerd:abc".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let (spec, _) = container_spec(&c);
    assert!(spec.privileged());
    assert!(spec.linux.as_ref().unwrap().systemd_cgroup());
    let (spec, _) = container_spec(&api::Container::default());
    assert!(!spec.privileged());
}
