//! NRI's transport: one Unix stream socket carrying two ttrpc connections.
//!
//! The multiplexer (NRI `pkg/net/multiplex/mux.go`) frames each write as an 8-byte header, the
//! connection id and the payload's length (both big-endian u32), then the payload, at most one
//! ttrpc message's worth (10 + 4 MiB) per frame; a longer write is split. Connection 1 carries
//! the runtime's calls to the plugin (`PluginServiceConn`), connection 2 the plugin's calls to
//! the runtime (`RuntimeServiceConn`). Each connection is a byte stream of ttrpc messages
//! (ttrpc `channel.go`): a 10-byte header (length u32, stream id u32, type u8, flags u8, all
//! big-endian) and `length` bytes, at most 4 MiB.
//!
//! Decoding is pure (bytes in, messages out) so tests and the fuzzer feed it anything; every
//! length is checked against its cap before anything is buffered.

use std::collections::BTreeMap;

/// The runtime's calls to the plugin (the plugin serves).
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// The plugin's calls to the runtime (the plugin is the client).
pub const RUNTIME_SERVICE_CONN: u32 = 2;

const MUX_HEADER: usize = 8;
const TTRPC_HEADER: usize = 10;
/// ttrpc's `messageLengthMax`.
const TTRPC_MAX: usize = 4 << 20;
/// The multiplexer's `maxPayloadSize`.
const MUX_MAX_PAYLOAD: usize = TTRPC_HEADER + TTRPC_MAX;

/// Why the stream cannot be read on.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A length beyond its cap: the peer is not NRI, or is broken.
    #[error("{what} of {len} bytes is over the cap of {cap} bytes")]
    TooLarge {
        /// Which frame.
        what: &'static str,
        /// The length it announced.
        len: usize,
        /// The cap.
        cap: usize,
    },
    /// A frame on the reserved connection 0.
    #[error("a multiplexer frame names the reserved connection 0")]
    ReservedConn,
}

/// A ttrpc message type (ttrpc `channel.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// A call.
    Request,
    /// Its answer.
    Response,
    /// Stream data (NRI uses none).
    Data,
    /// A type ttrpc does not define.
    Other(u8),
}

impl MessageKind {
    fn byte(self) -> u8 {
        match self {
            Self::Request => 1,
            Self::Response => 2,
            Self::Data => 3,
            Self::Other(b) => b,
        }
    }

    fn of(b: u8) -> Self {
        match b {
            1 => Self::Request,
            2 => Self::Response,
            3 => Self::Data,
            b => Self::Other(b),
        }
    }
}

/// One whole ttrpc message, and the connection it came on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The multiplexer connection.
    pub conn: u32,
    /// ttrpc's stream id (odd: opened by the client).
    pub stream: u32,
    /// Request or response.
    pub kind: MessageKind,
    /// ttrpc's flags (none for unary calls).
    pub flags: u8,
    /// The protobuf bytes of a `ttrpc.Request` or `ttrpc.Response`.
    pub payload: Vec<u8>,
}

/// Bytes from the socket in, whole messages out.
#[derive(Debug, Default)]
pub struct Demux {
    /// Bytes of the trunk not yet a whole multiplexer frame.
    trunk: Vec<u8>,
    /// Per connection, bytes not yet a whole ttrpc message.
    conns: BTreeMap<u32, Vec<u8>>,
}

impl Demux {
    /// Takes the next bytes read from the socket; returns the messages they completed.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Message>, WireError> {
        self.trunk.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut at = 0;
        while self.trunk.len() - at >= MUX_HEADER {
            let head = &self.trunk[at..at + MUX_HEADER];
            let conn = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            let len = be_len(&head[4..8]);
            if len > MUX_MAX_PAYLOAD {
                return Err(WireError::TooLarge { what: "a multiplexer frame", len, cap: MUX_MAX_PAYLOAD });
            }
            if conn == 0 {
                return Err(WireError::ReservedConn);
            }
            if self.trunk.len() - at < MUX_HEADER + len {
                break;
            }
            let payload = &self.trunk[at + MUX_HEADER..at + MUX_HEADER + len];
            // NRI opens connections 1 and 2 only; the Go multiplexer drops data for a
            // connection nobody opened, and so does this.
            if conn == PLUGIN_SERVICE_CONN || conn == RUNTIME_SERVICE_CONN {
                let buf = self.conns.entry(conn).or_default();
                buf.extend_from_slice(payload);
                take_messages(conn, buf, &mut out)?;
            }
            at += MUX_HEADER + len;
        }
        self.trunk.drain(..at);
        Ok(out)
    }
}

/// The whole ttrpc messages at the front of `buf`, removed from it.
fn take_messages(conn: u32, buf: &mut Vec<u8>, out: &mut Vec<Message>) -> Result<(), WireError> {
    let mut at = 0;
    while buf.len() - at >= TTRPC_HEADER {
        let head = &buf[at..at + TTRPC_HEADER];
        let len = be_len(&head[0..4]);
        if len > TTRPC_MAX {
            return Err(WireError::TooLarge { what: "a ttrpc message", len, cap: TTRPC_MAX });
        }
        if buf.len() - at < TTRPC_HEADER + len {
            break;
        }
        out.push(Message {
            conn,
            stream: u32::from_be_bytes([head[4], head[5], head[6], head[7]]),
            kind: MessageKind::of(head[8]),
            flags: head[9],
            payload: buf[at + TTRPC_HEADER..at + TTRPC_HEADER + len].to_vec(),
        });
        at += TTRPC_HEADER + len;
    }
    buf.drain(..at);
    Ok(())
}

fn be_len(b: &[u8]) -> usize {
    usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(usize::MAX)
}

/// The bytes that carry one ttrpc message on connection `conn`: its frames of the multiplexer.
pub fn encode(conn: u32, stream: u32, kind: MessageKind, payload: &[u8]) -> Result<Vec<u8>, WireError> {
    if payload.len() > TTRPC_MAX {
        return Err(WireError::TooLarge { what: "a ttrpc message", len: payload.len(), cap: TTRPC_MAX });
    }
    let mut message = Vec::with_capacity(TTRPC_HEADER + payload.len());
    message.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(u32::MAX).to_be_bytes());
    message.extend_from_slice(&stream.to_be_bytes());
    message.push(kind.byte());
    message.push(0);
    message.extend_from_slice(payload);
    let mut out = Vec::with_capacity(message.len() + MUX_HEADER);
    for chunk in message.chunks(MUX_MAX_PAYLOAD) {
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&u32::try_from(chunk.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_split_anywhere_comes_out_whole() {
        let bytes = encode(PLUGIN_SERVICE_CONN, 3, MessageKind::Request, b"hello").unwrap();
        for cut in 0..=bytes.len() {
            let mut d = Demux::default();
            let mut got = d.push(&bytes[..cut]).unwrap();
            got.extend(d.push(&bytes[cut..]).unwrap());
            assert_eq!(got.len(), 1, "cut at {cut}");
            assert_eq!(got[0].payload, b"hello");
            assert_eq!((got[0].conn, got[0].stream, got[0].kind), (1, 3, MessageKind::Request));
        }
    }

    #[test]
    fn a_ttrpc_message_across_frames_and_frames_of_two_connections_interleave() {
        // One ttrpc message of connection 2 sent in two multiplexer frames, a whole message of
        // connection 1 between them (the Go multiplexer splits only at its cap, but nothing
        // forbids smaller frames).
        let two = encode(RUNTIME_SERVICE_CONN, 1, MessageKind::Response, b"abcdef").unwrap();
        let (head, body) = two[MUX_HEADER..].split_at(7);
        let frame = |conn: u32, b: &[u8]| {
            let mut v = conn.to_be_bytes().to_vec();
            v.extend_from_slice(&u32::try_from(b.len()).unwrap().to_be_bytes());
            v.extend_from_slice(b);
            v
        };
        let mut stream = frame(2, head);
        stream.extend(encode(PLUGIN_SERVICE_CONN, 5, MessageKind::Request, b"x").unwrap());
        stream.extend(frame(2, body));
        let got = Demux::default().push(&stream).unwrap();
        assert_eq!(
            got.iter().map(|m| (m.conn, m.payload.clone())).collect::<Vec<_>>(),
            vec![(1, b"x".to_vec()), (2, b"abcdef".to_vec())]
        );
    }

    #[test]
    fn lengths_over_their_caps_are_refused_before_anything_is_buffered() {
        let mut frame = 1u32.to_be_bytes().to_vec();
        frame.extend_from_slice(&u32::MAX.to_be_bytes());
        let e = Demux::default().push(&frame).unwrap_err();
        assert!(e.to_string().contains("multiplexer frame"), "{e}");
        let mut message = 1u32.to_be_bytes().to_vec();
        message.extend_from_slice(&10u32.to_be_bytes());
        message.extend_from_slice(&(5u32 << 20).to_be_bytes());
        message.extend_from_slice(&[0; 6]);
        let e = Demux::default().push(&message).unwrap_err();
        assert!(e.to_string().contains("ttrpc message"), "{e}");
        let mut reserved = 0u32.to_be_bytes().to_vec();
        reserved.extend_from_slice(&0u32.to_be_bytes());
        assert!(matches!(Demux::default().push(&reserved), Err(WireError::ReservedConn)));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap, deterministic stand-in for the fuzzer (fuzz/ runs the real one): random
        // streams, cut at random points.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let len = usize::try_from(next() % 64).unwrap();
            let mut bytes: Vec<u8> = (0..len).map(|_| u8::try_from(next() & 0xff).unwrap()).collect();
            if next() % 2 == 0 && bytes.len() >= 8 {
                bytes[0..4].copy_from_slice(&1u32.to_be_bytes());
                bytes[4..8].copy_from_slice(&u32::try_from(len - 8).unwrap().to_be_bytes());
            }
            let mut d = Demux::default();
            let cut = usize::try_from(next()).unwrap() % (bytes.len() + 1);
            let _ = d.push(&bytes[..cut]).and_then(|_| d.push(&bytes[cut..]));
        }
    }
}
