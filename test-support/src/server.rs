//! A static file server on loopback, for a package index the test writes.

use std::path::Path;

/// A static HTTP/1.1 file server on 127.0.0.1 (an ephemeral port) for one directory: enough
/// for pip and uv to read a PEP 503 index. Every response closes its connection and says
/// `Cache-Control: no-store`, so no client keeps a copy of a file a test swaps. Stopped on drop.
pub struct FileServer {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FileServer {
    /// Serves `root`.
    pub fn start(root: &Path) -> Self {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (root, flag) = (root.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let root = root.clone();
                std::thread::spawn(move || serve_one(stream, &root));
            }
        });
        Self { addr, stop, thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT/<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.addr, path.trim_start_matches('/'))
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(stream: std::net::TcpStream, root: &Path) {
    use std::io::{BufRead as _, Write as _};
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = std::io::BufReader::new(stream);
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.trim().is_empty() => break,
            Ok(_) => {}
        }
    }
    let mut parts = request.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
    let path = target.split(['?', '#']).next().unwrap_or("/");
    let mut file = root.join(path.trim_start_matches('/'));
    if path.split('/').any(|c| c == "..") {
        file = root.join("\0refused");
    }
    if file.is_dir() {
        file = file.join("index.html");
    }
    let (status, body, kind) = match std::fs::read(&file) {
        Ok(body) => {
            let html = file.extension().is_some_and(|e| e == "html");
            ("200 OK", body, if html { "text/html" } else { "application/octet-stream" })
        }
        Err(_) => ("404 Not Found", b"not found\n".to_vec(), "text/plain"),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    let _ = writer.write_all(head.as_bytes());
    if method != "HEAD" {
        let _ = writer.write_all(&body);
    }
    let _ = writer.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    fn get(server: &FileServer, path: &str) -> String {
        let url = server.url(path);
        let addr = url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        write!(stream, "GET /{path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        reply
    }

    #[test]
    fn serves_files_and_index_pages_and_refuses_dot_dot() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("root/simple")).unwrap();
        std::fs::write(dir.path().join("root/simple/index.html"), "<a>pkg</a>").unwrap();
        std::fs::write(dir.path().join("secret"), "no").unwrap();
        let server = FileServer::start(&dir.path().join("root"));
        let page = get(&server, "simple/");
        assert!(page.starts_with("HTTP/1.1 200 OK") && page.ends_with("<a>pkg</a>"), "{page}");
        assert!(page.contains("Cache-Control: no-store"), "{page}");
        assert!(get(&server, "missing").starts_with("HTTP/1.1 404"));
        assert!(get(&server, "../secret").starts_with("HTTP/1.1 404"));
    }
}
