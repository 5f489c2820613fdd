//! NRI request time: the real `stackhook nri` process registered on a socket this bench serves
//! as the runtime, answering `CreateContainer` for a GPU container on an 8-GPU fixture host
//! (probe, diagnosis, verdict), for a container without a GPU, and, as the baseline in the same
//! run and on the same connection, a call the plugin does not serve (`StopContainer`: decode,
//! answer, no decision), which is the transport's own round trip.
//!
//! `cargo bench -p stackhook --features fixture --bench nri` (uses target/release/stackhook;
//! `STACKHOOK_BIN` overrides). Prints medians, p90 and ratios to the baseline. What matters:
//! NRI drops a plugin that has not answered in 2 s (its default request timeout) and lets the
//! container start, so the GPU decision's p90 must stay milliseconds.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use prost::Message as _;
use stackhook::fixture::Preset;
use stackhook::nri::{
    api, encode, ttrpc, Demux, Message, MessageKind, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN,
};

const RUNS: usize = 500;

struct Runtime {
    stream: UnixStream,
    demux: Demux,
    pending: Vec<Message>,
    next: u32,
}

impl Runtime {
    fn read(&mut self) -> Message {
        let mut buf = [0u8; 8192];
        while self.pending.is_empty() {
            let n = self.stream.read(&mut buf).expect("read");
            assert!(n > 0, "the plugin closed the connection");
            self.pending = self.demux.push(&buf[..n]).expect("frames");
            self.pending.reverse();
        }
        self.pending.pop().expect("message")
    }

    fn call(&mut self, method: &str, payload: &[u8]) -> (Duration, ttrpc::Response) {
        let request = ttrpc::Request {
            service: "nri.pkg.api.v1alpha1.Plugin".into(),
            method: method.into(),
            payload: payload.to_vec(),
            ..Default::default()
        };
        let bytes = encode(PLUGIN_SERVICE_CONN, self.next, MessageKind::Request, &request.encode_to_vec())
            .expect("encode");
        self.next += 2;
        let start = Instant::now();
        self.stream.write_all(&bytes).expect("write");
        let reply = self.read();
        let took = start.elapsed();
        (took, ttrpc::Response::decode(reply.payload.as_slice()).expect("response"))
    }
}

fn create(env: &[String]) -> Vec<u8> {
    api::CreateContainerRequest {
        pod: Some(api::PodSandbox {
            name: "bench".into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        container: Some(api::Container { name: "c".into(), env: env.to_vec(), ..Default::default() }),
    }
    .encode_to_vec()
}

fn summary(name: &str, mut times: Vec<Duration>, baseline: Option<Duration>) -> Duration {
    times.sort();
    let median = times[times.len() / 2];
    let p90 = times[times.len() * 9 / 10];
    let ratio = baseline
        .map_or(String::new(), |b| format!("  {:.1}x the baseline", median.as_secs_f64() / b.as_secs_f64()));
    println!(
        "{name:<44} median {:>8.3} ms  p90 {:>8.3} ms{ratio}",
        median.as_secs_f64() * 1e3,
        p90.as_secs_f64() * 1e3
    );
    median
}

fn main() {
    let bin = test_support::tools::binary("stackhook");
    let dir = tempfile::tempdir().expect("tempdir");
    let host = Preset::EightGpus.build(&dir.path().join("host")).expect("fixture");
    let socket = dir.path().join("nri.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let mut plugin = std::process::Command::new(&bin)
        .args(["nri", "--once", "--socket"])
        .arg(&socket)
        .arg("--host-root")
        .arg(host.root())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("stackhook nri");
    let (stream, _) = listener.accept().expect("the plugin dials");
    let mut rt = Runtime { stream, demux: Demux::default(), pending: Vec::new(), next: 1 };
    let register = rt.read();
    assert_eq!(register.conn, RUNTIME_SERVICE_CONN);
    let ok = ttrpc::Response { status: None, payload: Vec::new() }.encode_to_vec();
    rt.stream
        .write_all(
            &encode(RUNTIME_SERVICE_CONN, register.stream, MessageKind::Response, &ok).expect("encode"),
        )
        .expect("write");
    rt.call("Configure", &api::ConfigureRequest::default().encode_to_vec());
    rt.call("Synchronize", &api::SynchronizeRequest::default().encode_to_vec());

    let mut gpu_env = vec!["NVIDIA_VISIBLE_DEVICES=all".to_owned()];
    gpu_env.extend(
        Preset::EightGpus.requires().iter().enumerate().map(|(i, r)| format!("STACKBUILD_REQUIRE_R{i}={r}")),
    );
    let gpu = create(&gpu_env);
    let plain = create(&["PATH=/bin".to_owned()]);
    let (mut base, mut with_gpu, mut without) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        base.push(rt.call("StopContainer", &[]).0);
        let (t, reply) = rt.call("CreateContainer", &gpu);
        assert!(reply.status.is_none(), "the 8-GPU host refused: {:?}", reply.status);
        with_gpu.push(t);
        without.push(rt.call("CreateContainer", &plain).0);
    }
    println!("stackhook nri, {RUNS} requests each, 8-GPU fixture host");
    let b = summary("baseline: unserved call (transport only)", base, None);
    summary("CreateContainer, no GPU (fast path)", without, Some(b));
    let g = summary("CreateContainer, NVIDIA_VISIBLE_DEVICES=all", with_gpu, Some(b));
    println!("GPU decision median is {:.4}% of NRI's 2 s request timeout", g.as_secs_f64() / 2.0 * 100.0);
    rt.call("Shutdown", &[]);
    let _ = plugin.wait();
}
