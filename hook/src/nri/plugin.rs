//! The plugin's side of NRI: register, answer `Configure` and `Synchronize`, and judge every
//! container at `CreateContainer` with the hook's own code (`invoke::judge`).
//!
//! Sequence (NRI `pkg/adaptation/plugin.go`, `pkg/stub/stub.go`): the plugin dials the socket
//! and calls `Runtime.RegisterPlugin` on connection 2; the runtime calls `Plugin.Configure`
//! (the events the plugin wants come back as a bit mask), then `Plugin.Synchronize` with the
//! containers that exist, then one call per subscribed event. An error returned from
//! `CreateContainer` fails the container's creation, and the runtime hands its text to the
//! kubelet, which shows it in the pod's events. NRI drops a plugin that does not answer within
//! its request timeout (2 s by default) and lets the container start, so the answer must be
//! quick: the probe and the verdict are the hook's, which take milliseconds.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Instant;

use prost::Message as _;

use super::generated::{api, ttrpc};
use super::wire::{encode, Demux, MessageKind, WireError, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::invoke::{self, HookConfig};
use crate::oci;

/// The service names of NRI's API (`package nri.pkg.api.v1alpha1`).
const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// gRPC status codes (google.golang.org/grpc/codes), which ttrpc's `Status` carries.
const FAILED_PRECONDITION: i32 = 9;
const UNIMPLEMENTED: i32 = 12;
const INVALID_ARGUMENT: i32 = 3;
/// The longest refusal text sent back: the kubelet puts it in the pod's events and its status,
/// where only the first kilobyte or so is read.
const MAX_ERROR_TEXT: usize = 16 << 10;

/// The plugin's settings.
#[derive(Debug, Clone)]
pub struct NriConfig {
    /// The runtime's NRI socket (`/var/run/nri/nri.sock`).
    pub socket: PathBuf,
    /// The plugin's name, as the runtime lists it.
    pub name: String,
    /// Its index: two digits, the order among plugins (NRI sorts by it).
    pub index: String,
    /// The checks' settings, as the hook's.
    pub hook: HookConfig,
}

/// Why the plugin stopped.
#[derive(Debug, thiserror::Error)]
pub enum NriError {
    /// The socket cannot be reached.
    #[error("cannot connect to the NRI socket {socket}: {source} (is NRI enabled in the runtime? containerd 1.7: [plugins.\"io.containerd.nri.v1.nri\"] disable = false; containerd 2.x enables it by default; CRI-O: [crio.nri] enable_nri = true)")]
    Connect {
        /// The socket.
        socket: String,
        /// The error.
        source: std::io::Error,
    },
    /// Reading or writing the socket failed.
    #[error("the NRI connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The runtime sent what NRI does not.
    #[error("the runtime sent a malformed NRI stream: {0}")]
    Wire(#[from] WireError),
    /// A message that does not decode.
    #[error("the runtime sent a {what} that does not decode: {source}")]
    Decode {
        /// Which message.
        what: &'static str,
        /// prost's error.
        source: prost::DecodeError,
    },
    /// The runtime refused the registration.
    #[error("the runtime refused to register the plugin {name}: {message}")]
    Refused {
        /// The plugin name.
        name: String,
        /// The runtime's reason.
        message: String,
    },
}

/// How a session ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The runtime closed the connection (it stopped, or dropped the plugin).
    Closed,
    /// The runtime called `Shutdown`.
    Shutdown,
}

/// The decision on one container.
#[derive(Debug, Clone)]
pub struct Decision {
    /// `namespace/pod/container`, as a person finds the pod.
    pub container: String,
    /// Whether the container may be created.
    pub allowed: bool,
    /// The hook's text: the verdict, the diagnosis and remedies (empty when nothing to say).
    pub text: String,
    /// Microseconds the decision took.
    pub micros: u128,
}

/// Dials the socket, registers, and serves until the runtime closes or shuts the plugin down.
/// `log` gets one line per event worth a line (registration, each decision on a GPU container).
pub fn serve(config: &NriConfig, log: &mut dyn FnMut(&str)) -> Result<Served, NriError> {
    let stream = UnixStream::connect(&config.socket)
        .map_err(|source| NriError::Connect { socket: config.socket.display().to_string(), source })?;
    serve_stream(stream, config, log)
}

fn serve_stream(
    stream: UnixStream,
    config: &NriConfig,
    log: &mut dyn FnMut(&str),
) -> Result<Served, NriError> {
    match session(stream, config, log) {
        // The runtime went away while the plugin was writing: the same end as a read of 0.
        Err(NriError::Io(e))
            if matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) =>
        {
            Ok(Served::Closed)
        }
        other => other,
    }
}

fn session(stream: UnixStream, config: &NriConfig, log: &mut dyn FnMut(&str)) -> Result<Served, NriError> {
    let mut writer = stream.try_clone()?;
    let mut reader = stream;
    let register = api::RegisterPluginRequest {
        plugin_name: config.name.clone(),
        plugin_idx: config.index.clone(),
        ..Default::default()
    };
    let request = ttrpc::Request {
        service: RUNTIME_SERVICE.into(),
        method: "RegisterPlugin".into(),
        payload: register.encode_to_vec(),
        ..Default::default()
    };
    writer.write_all(&encode(RUNTIME_SERVICE_CONN, 1, MessageKind::Request, &request.encode_to_vec())?)?;
    let mut demux = Demux::default();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(Served::Closed);
        }
        for message in demux.push(&buf[..n])? {
            match (message.conn, message.kind) {
                (PLUGIN_SERVICE_CONN, MessageKind::Request) => {
                    let request = ttrpc::Request::decode(message.payload.as_slice())
                        .map_err(|source| NriError::Decode { what: "ttrpc request", source })?;
                    let (response, shutdown) = handle(&request, config, log);
                    writer.write_all(&encode(
                        PLUGIN_SERVICE_CONN,
                        message.stream,
                        MessageKind::Response,
                        &response.encode_to_vec(),
                    )?)?;
                    if shutdown {
                        return Ok(Served::Shutdown);
                    }
                }
                (RUNTIME_SERVICE_CONN, MessageKind::Response) => {
                    let response = ttrpc::Response::decode(message.payload.as_slice())
                        .map_err(|source| NriError::Decode { what: "ttrpc response", source })?;
                    if let Some(status) = response.status.filter(|s| s.code != 0) {
                        return Err(NriError::Refused { name: config.name.clone(), message: status.message });
                    }
                    log(&format!(
                        "registered as {}-{} on {}",
                        config.index,
                        config.name,
                        config.socket.display()
                    ));
                }
                // Nothing else is asked of a plugin; anything else is ignored, as ttrpc does.
                _ => {}
            }
        }
    }
}

/// The answer to one call of the runtime, and whether it was `Shutdown`.
fn handle(
    request: &ttrpc::Request,
    config: &NriConfig,
    log: &mut dyn FnMut(&str),
) -> (ttrpc::Response, bool) {
    if request.service != PLUGIN_SERVICE {
        return (status(UNIMPLEMENTED, format!("service {} is not served", request.service)), false);
    }
    let ok = |payload: Vec<u8>| ttrpc::Response { status: None, payload };
    match request.method.as_str() {
        "Configure" => {
            let configure = api::ConfigureRequest::decode(request.payload.as_slice()).unwrap_or_default();
            log(&format!(
                "configured by {} {}: judging every container at CreateContainer; the image's \
                 root filesystem is not shown by NRI at that point, so the hook keeps the checks \
                 that read it (the image's own remedies in /etc/stackbuild/stack.json)",
                configure.runtime_name, configure.runtime_version
            ));
            let events = 1 << (api::Event::CreateContainer as i32 - 1);
            (ok(api::ConfigureResponse { events }.encode_to_vec()), false)
        }
        // The containers that exist already started: drift among them is `doctor`'s.
        "Synchronize" => (ok(api::SynchronizeResponse::default().encode_to_vec()), false),
        "Shutdown" => (ok(api::Empty::default().encode_to_vec()), true),
        "CreateContainer" => {
            let Ok(create) = api::CreateContainerRequest::decode(request.payload.as_slice()) else {
                return (status(INVALID_ARGUMENT, "CreateContainerRequest does not decode".into()), false);
            };
            let decision = decide(&create, &config.hook);
            let who = &decision.container;
            if decision.allowed {
                if !decision.text.is_empty() {
                    log(&format!("{who}: {}", decision.text.trim_end()));
                }
                (ok(api::CreateContainerResponse::default().encode_to_vec()), false)
            } else {
                log(&format!("{who}: refused in {} µs:\n{}", decision.micros, decision.text.trim_end()));
                let mut text = brief(&decision.text);
                if text.len() > MAX_ERROR_TEXT {
                    let mut end = MAX_ERROR_TEXT;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                }
                (status(FAILED_PRECONDITION, text), false)
            }
        }
        // Events not subscribed to are not sent; answer them as ttrpc answers an unknown method.
        other => (status(UNIMPLEMENTED, format!("method {other} is not served")), false),
    }
}

fn status(code: i32, message: String) -> ttrpc::Response {
    ttrpc::Response {
        status: Some(ttrpc::Status { code, message, details: Vec::new() }),
        payload: Vec::new(),
    }
}

/// The refusal as the pod's events show it: the verdict line and each remedy, not the whole
/// diagnosis (the plugin's own log has that, and `stackhook doctor` on the node prints it).
fn brief(text: &str) -> String {
    let mut lines = text.lines();
    let mut out = lines.next().unwrap_or_default().to_owned();
    for line in lines.map(str::trim_start) {
        if line.starts_with("fix:") || line.starts_with("image (stack.json):") {
            out.push('\n');
            out.push_str(line);
        }
    }
    out.push_str("\n(`stackhook doctor` on the node shows the whole diagnosis)");
    out
}

/// `namespace/pod/container`, as a person finds the pod.
fn who(create: &api::CreateContainerRequest) -> String {
    let pod = create.pod.as_ref();
    let container = create.container.as_ref();
    let part = |s: Option<&String>| s.filter(|s| !s.is_empty()).map_or("?", String::as_str).to_owned();
    format!(
        "{}/{}/{}",
        part(pod.map(|p| &p.namespace)),
        part(pod.map(|p| &p.name)),
        part(container.map(|c| &c.name))
    )
}

/// The hook's verdict on the container NRI is about to create.
pub fn decide(create: &api::CreateContainerRequest, hook: &HookConfig) -> Decision {
    let started = Instant::now();
    let container = create.container.clone().unwrap_or_default();
    let (spec, annotations) = container_spec(&container);
    let container = who(create);
    let outcome = invoke::judge(&container, &spec, &annotations, None, hook, started);
    Decision {
        container,
        allowed: outcome.code == 0,
        text: outcome.stderr,
        micros: started.elapsed().as_micros(),
    }
}

/// The parts of the runtime spec the hook reads, from NRI's view of a container: its
/// environment, annotations, mounts, `linux.devices` (CDI's edits and the device plugin's are
/// applied before NRI sees the container) and cgroups path.
///
/// NRI shows no capabilities. A privileged container is recognised by the one device only
/// privileged containers get: containerd's and CRI-O's CRI give a privileged container every
/// host device (`WithHostDevices`), `/dev/mem` (1:1) among them, and nothing else does.
pub fn container_spec(container: &api::Container) -> (oci::Config, BTreeMap<String, String>) {
    let linux = container.linux.as_ref();
    let devices: Vec<oci::Device> = linux
        .map(|l| l.devices.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|d| oci::Device {
            path: d.path.clone(),
            kind: d.r#type.clone(),
            major: u32::try_from(d.major).ok(),
            minor: u32::try_from(d.minor).ok(),
        })
        .collect();
    let privileged = devices.iter().any(|d| d.char_numbers() == Some((1, 1)));
    let annotations: BTreeMap<String, String> =
        container.annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let spec = oci::Config {
        process: Some(oci::Process {
            env: container.env.clone(),
            capabilities: privileged.then(|| serde_json::json!({ "bounding": ["CAP_SYS_ADMIN"] })),
        }),
        root: None,
        annotations: annotations.clone(),
        mounts: container
            .mounts
            .iter()
            .map(|m| oci::Mount { destination: m.destination.clone(), source: m.source.clone() })
            .collect(),
        linux: Some(oci::Linux {
            devices,
            cgroups_path: linux.map(|l| l.cgroups_path.clone()).filter(|p| !p.is_empty()),
        }),
    };
    (spec, annotations)
}

#[cfg(test)]
mod tests;
