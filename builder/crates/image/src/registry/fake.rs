//! A tiny HTTP/1.1 server for unit tests: one request per connection, answered by a closure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A request as the server saw it.
#[derive(Debug)]
pub(super) struct Request {
    pub method: String,
    pub path: String,
    /// Query parameters, percent-decoded; repeated keys keep every value.
    pub query: BTreeMap<String, Vec<String>>,
    /// Headers, names lowercase.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Request {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub(super) fn param(&self, key: &str) -> Option<&str> {
        self.query.get(key).and_then(|v| v.first()).map(String::as_str)
    }
}

/// What to answer.
pub(super) enum Reply {
    /// A response.
    Response { status: u16, headers: Vec<(String, String)>, body: Vec<u8> },
    /// Close the connection without answering.
    Hangup,
}

impl Reply {
    pub(super) fn status(status: u16) -> Self {
        Self::Response { status, headers: Vec::new(), body: Vec::new() }
    }

    #[must_use]
    pub(super) fn header(mut self, name: &str, value: &str) -> Self {
        if let Self::Response { headers, .. } = &mut self {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }

    #[must_use]
    pub(super) fn body(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        if let Self::Response { body, .. } = &mut self {
            *body = bytes.into();
        }
        self
    }
}

type Handler = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// A running server; stops when dropped.
pub(super) struct Server {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    pub(super) fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a test port");
        let addr = listener.local_addr().expect("local address").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Handler = Arc::new(handler);
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        let _ = serve(stream, &handler);
                    }
                }
            })
        };
        Self { addr, stop, thread: Some(thread) }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn serve(stream: TcpStream, handler: &Handler) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let (path, query_text) = target.split_once('?').unwrap_or((&target, ""));
    let mut query: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pair in query_text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        query.entry(percent_decode(k)).or_default().push(percent_decode(v));
    }
    let request = Request { method, path: path.to_string(), query, headers, body };
    let (status, reply_headers, reply_body) = match handler(&request) {
        Reply::Hangup => return Ok(()),
        Reply::Response { status, headers, body } => (status, headers, body),
    };
    let mut out = stream;
    let mut head =
        format!("HTTP/1.1 {status} X\r\nConnection: close\r\nContent-Length: {}\r\n", reply_body.len());
    for (k, v) in reply_headers {
        let _ = write!(head, "{k}: {v}\r\n");
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    if request.method != "HEAD" {
        out.write_all(&reply_body)?;
    }
    out.flush()
}
