//! The stage key ([`StageKey`]) and the handshake that authenticates each connection of
//! the mesh both ways.
//!
//! The dialogue (every message is a kind byte and a body of the kind's fixed size):
//! 1. connector → acceptor: HELLO (magic, version, byte order, role, world, its rank, the
//!    rank it dials, the stage's key id, a fresh 32-byte nonce);
//! 2. acceptor → connector: ACCEPT (its own HELLO and `HMAC(key, "acceptor" ‖ hello_c ‖
//!    hello_a)`), or REFUSE (a reason code) when the HELLO names another stage, world or
//!    rank;
//! 3. connector → acceptor: PROOF (`HMAC(key, "connector" ‖ hello_c ‖ hello_a)`) once
//!    the acceptor's proof verifies, else REFUSE;
//! 4. acceptor → connector: OK once the connector's proof verifies, else REFUSE.
//!
//! Invariants: both proofs cover both nonces (fresh per connection, from the OS), both
//! ranks and the world size, and differ by role label, so no proof can be replayed or
//! reflected; proofs are compared in constant time (`Mac::verify_slice`); every message is
//! read into a fixed-size buffer (at most [`MAX_MESSAGE`] bytes), so nothing from an
//! unauthenticated peer sizes an allocation. The key id (a SHA-256 of the key under its
//! own label) lets a peer of another stage be refused with a clear reason before any proof.

use std::time::Instant;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use socket2::Socket;

use crate::abort::AbortHandle;
use crate::conn::{read_exact, write_all, WireError};
use crate::error::{CollectiveError, Result};

/// The secret a stage's tasks share (from the driver); 32 bytes.
#[derive(Clone)]
pub struct StageKey([u8; StageKey::LEN]);

impl StageKey {
    /// The key's length in bytes.
    pub const LEN: usize = 32;

    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; StageKey::LEN]) -> StageKey {
        StageKey(bytes)
    }

    /// A fresh key from the OS's random source (the driver makes one per stage attempt).
    pub fn random() -> Result<StageKey> {
        let mut bytes = [0u8; StageKey::LEN];
        getrandom::getrandom(&mut bytes).map_err(|e| {
            CollectiveError::io("reading random bytes", std::io::Error::other(e.to_string()))
        })?;
        Ok(StageKey(bytes))
    }

    /// The key's bytes (to hand to a task).
    pub fn as_bytes(&self) -> &[u8; StageKey::LEN] {
        &self.0
    }

    /// What a HELLO announces: which stage this is, without revealing the key.
    fn id(&self) -> [u8; 16] {
        let digest = Sha256::new()
            .chain_update(b"ember-collective key id v1")
            .chain_update(self.0)
            .finalize();
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest[..16]);
        id
    }
}

impl TryFrom<&[u8]> for StageKey {
    type Error = CollectiveError;

    fn try_from(bytes: &[u8]) -> Result<StageKey> {
        let bytes: [u8; StageKey::LEN] = bytes.try_into().map_err(|_| {
            CollectiveError::InvalidArgument(format!(
                "a stage key is {} bytes, not {}",
                StageKey::LEN,
                bytes.len()
            ))
        })?;
        Ok(StageKey(bytes))
    }
}

impl std::fmt::Debug for StageKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StageKey(<redacted>)")
    }
}

const MAGIC: [u8; 8] = *b"EMBRCOLL";
const VERSION: u16 = 1;
const HELLO_LEN: usize = 72;
const PROOF_LEN: usize = 32;
/// The largest handshake message body.
pub(crate) const MAX_MESSAGE: usize = HELLO_LEN + PROOF_LEN;
const ROLE_CONNECTOR: u8 = 0;
const ROLE_ACCEPTOR: u8 = 1;
/// Bit 0: this host is little-endian (slice collectives send native bytes).
const FLAGS: u8 = cfg!(target_endian = "little") as u8;

const KIND_HELLO: u8 = 1;
const KIND_ACCEPT: u8 = 2;
const KIND_PROOF: u8 = 3;
const KIND_OK: u8 = 4;
const KIND_REFUSE: u8 = 5;

/// Why one side refused the other (sent as one byte in REFUSE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    OtherStage = 1,
    WrongRank = 2,
    WrongWorld = 3,
    Version = 4,
    Duplicate = 5,
    ByteOrder = 6,
    BadProof = 7,
    Malformed = 8,
}

impl Refusal {
    fn from_code(code: u8) -> Option<Refusal> {
        use Refusal::*;
        [
            OtherStage, WrongRank, WrongWorld, Version, Duplicate, ByteOrder, BadProof, Malformed,
        ]
        .into_iter()
        .find(|r| *r as u8 == code)
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Refusal::OtherStage => "the peer belongs to another stage (its stage key differs)",
            Refusal::WrongRank => "the peer is not the rank expected at this address",
            Refusal::WrongWorld => "the peer has another world size",
            Refusal::Version => "the peer speaks another protocol version",
            Refusal::Duplicate => "a connection from that rank is already established",
            Refusal::ByteOrder => "the peer has another byte order",
            Refusal::BadProof => "the peer's key proof does not verify (another key)",
            Refusal::Malformed => "the peer's handshake is malformed",
        }
    }
}

/// How a handshake failed.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    Wire(WireError),
    /// The peer sent REFUSE.
    RefusedByPeer(String),
    /// This side refused the peer (and told it so); `claimed` is the rank it named.
    Refused {
        refusal: Refusal,
        claimed: Option<u32>,
    },
}

impl From<WireError> for HandshakeError {
    fn from(e: WireError) -> Self {
        HandshakeError::Wire(e)
    }
}

struct Hello {
    bytes: [u8; HELLO_LEN],
}

impl Hello {
    fn new(
        role: u8,
        world: u32,
        from: u32,
        to: u32,
        key: &StageKey,
    ) -> Result<Hello, HandshakeError> {
        let mut nonce = [0u8; 32];
        getrandom::getrandom(&mut nonce)
            .map_err(|e| WireError::Io(std::io::Error::other(e.to_string())))?;
        let mut b = [0u8; HELLO_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[10] = FLAGS;
        b[11] = role;
        b[12..16].copy_from_slice(&world.to_le_bytes());
        b[16..20].copy_from_slice(&from.to_le_bytes());
        b[20..24].copy_from_slice(&to.to_le_bytes());
        b[24..40].copy_from_slice(&key.id());
        b[40..72].copy_from_slice(&nonce);
        Ok(Hello { bytes: b })
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.bytes[at..at + 4].try_into().expect("4 bytes"))
    }
    fn from(&self) -> u32 {
        self.u32_at(16)
    }

    /// Checks a peer's HELLO against what this side expects; `from` is checked by the
    /// caller.
    fn check(&self, role: u8, world: u32, to: u32, key: &StageKey) -> Result<(), Refusal> {
        let b = &self.bytes;
        if b[0..8] != MAGIC || b[11] != role {
            return Err(Refusal::Malformed);
        }
        if u16::from_le_bytes([b[8], b[9]]) != VERSION {
            return Err(Refusal::Version);
        }
        if b[10] != FLAGS {
            return Err(Refusal::ByteOrder);
        }
        if b[24..40] != key.id() {
            return Err(Refusal::OtherStage);
        }
        if self.u32_at(12) != world {
            return Err(Refusal::WrongWorld);
        }
        if self.u32_at(20) != to {
            return Err(Refusal::WrongRank);
        }
        Ok(())
    }
}

fn proof_mac(key: &StageKey, label: &[u8], hello_c: &Hello, hello_a: &Hello) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key.0).expect("HMAC takes any key length");
    mac.update(b"ember-collective proof v1 ");
    mac.update(label);
    mac.update(&hello_c.bytes);
    mac.update(&hello_a.bytes);
    mac
}

const LABEL_ACCEPTOR: &[u8] = b"acceptor";
const LABEL_CONNECTOR: &[u8] = b"connector";

/// The deadline and abort handle one handshake runs under.
pub(crate) struct Wire<'a> {
    pub(crate) socket: &'a Socket,
    pub(crate) deadline: Instant,
    pub(crate) abort: &'a AbortHandle,
}

impl Wire<'_> {
    fn send(&self, kind: u8, parts: &[&[u8]]) -> Result<(), WireError> {
        let mut msg = Vec::with_capacity(1 + MAX_MESSAGE);
        msg.push(kind);
        for part in parts {
            msg.extend_from_slice(part);
        }
        write_all(self.socket, &msg, self.deadline, self.abort)
    }

    /// Refuses the peer (best effort: it may be gone) and returns the matching error.
    fn refuse(&self, refusal: Refusal, claimed: Option<u32>) -> HandshakeError {
        let _ = self.send(KIND_REFUSE, &[&[refusal as u8]]);
        HandshakeError::Refused { refusal, claimed }
    }

    /// Reads one message, which must be of kind `want` (or REFUSE), into `body`.
    fn expect(&self, want: u8, body: &mut [u8]) -> Result<(), HandshakeError> {
        let mut kind = [0u8; 1];
        read_exact(self.socket, &mut kind, self.deadline, self.abort)?;
        if kind[0] == KIND_REFUSE {
            let mut code = [0u8; 1];
            read_exact(self.socket, &mut code, self.deadline, self.abort)?;
            let reason = match Refusal::from_code(code[0]) {
                Some(r) => r.describe().to_string(),
                None => format!("refusal code {}", code[0]),
            };
            return Err(HandshakeError::RefusedByPeer(reason));
        }
        if kind[0] != want {
            return Err(self.refuse(Refusal::Malformed, None));
        }
        read_exact(self.socket, body, self.deadline, self.abort)?;
        Ok(())
    }
}

/// The connector's side: rank `me` dialed rank `peer`.
pub(crate) fn as_connector(
    wire: &Wire<'_>,
    key: &StageKey,
    me: u32,
    peer: u32,
    world: u32,
) -> Result<(), HandshakeError> {
    let hello_c = Hello::new(ROLE_CONNECTOR, world, me, peer, key)?;
    wire.send(KIND_HELLO, &[&hello_c.bytes])?;
    let mut body = [0u8; HELLO_LEN + PROOF_LEN];
    wire.expect(KIND_ACCEPT, &mut body)?;
    let hello_a = Hello {
        bytes: body[..HELLO_LEN].try_into().expect("HELLO_LEN bytes"),
    };
    hello_a
        .check(ROLE_ACCEPTOR, world, me, key)
        .map_err(|r| wire.refuse(r, Some(hello_a.from())))?;
    if hello_a.from() != peer {
        return Err(wire.refuse(Refusal::WrongRank, Some(hello_a.from())));
    }
    if proof_mac(key, LABEL_ACCEPTOR, &hello_c, &hello_a)
        .verify_slice(&body[HELLO_LEN..])
        .is_err()
    {
        return Err(wire.refuse(Refusal::BadProof, Some(peer)));
    }
    let proof = proof_mac(key, LABEL_CONNECTOR, &hello_c, &hello_a)
        .finalize()
        .into_bytes();
    wire.send(KIND_PROOF, &[proof.as_slice()])?;
    wire.expect(KIND_OK, &mut [])?;
    Ok(())
}

/// The acceptor's side: rank `me` accepted a connection; `admit` says whether the rank it
/// names may connect now (lower than `me`, not yet connected). Returns that rank.
pub(crate) fn as_acceptor(
    wire: &Wire<'_>,
    key: &StageKey,
    me: u32,
    world: u32,
    admit: impl Fn(u32) -> Result<(), Refusal>,
) -> Result<u32, HandshakeError> {
    let mut body = [0u8; HELLO_LEN];
    wire.expect(KIND_HELLO, &mut body)?;
    let hello_c = Hello { bytes: body };
    let from = hello_c.from();
    hello_c
        .check(ROLE_CONNECTOR, world, me, key)
        .and_then(|()| admit(from))
        .map_err(|r| wire.refuse(r, Some(from)))?;
    let hello_a = Hello::new(ROLE_ACCEPTOR, world, me, from, key)?;
    let proof = proof_mac(key, LABEL_ACCEPTOR, &hello_c, &hello_a)
        .finalize()
        .into_bytes();
    wire.send(KIND_ACCEPT, &[&hello_a.bytes, proof.as_slice()])?;
    let mut proof_c = [0u8; PROOF_LEN];
    wire.expect(KIND_PROOF, &mut proof_c)?;
    if proof_mac(key, LABEL_CONNECTOR, &hello_c, &hello_a)
        .verify_slice(&proof_c)
        .is_err()
    {
        return Err(wire.refuse(Refusal::BadProof, Some(from)));
    }
    wire.send(KIND_OK, &[])?;
    Ok(from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    fn pair() -> (Socket, Socket) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (Socket::from(a), Socket::from(b))
    }

    fn wire<'a>(socket: &'a Socket, abort: &'a AbortHandle) -> Wire<'a> {
        Wire {
            socket,
            deadline: Instant::now() + Duration::from_secs(20),
            abort,
        }
    }

    #[test]
    fn same_key_completes_both_ways() {
        let (c, a) = pair();
        let key = StageKey::from_bytes([7; 32]);
        let abort = AbortHandle::new().unwrap();
        let key2 = key.clone();
        let abort2 = abort.clone();
        let t = std::thread::spawn(move || {
            as_acceptor(&wire(&a, &abort2), &key2, 3, 5, |_| Ok(())).unwrap()
        });
        as_connector(&wire(&c, &abort), &key, 1, 3, 5).unwrap();
        assert_eq!(t.join().unwrap(), 1);
    }

    /// A peer that knows the stage's key id (it is visible on the wire) but not the key
    /// fails at the proof, on both sides.
    #[test]
    fn known_key_id_without_the_key_fails_the_proof() {
        let (c, a) = pair();
        let key = StageKey::from_bytes([7; 32]);
        let abort = AbortHandle::new().unwrap();
        let abort2 = abort.clone();
        let key2 = key.clone();
        let t =
            std::thread::spawn(move || as_acceptor(&wire(&a, &abort2), &key2, 1, 2, |_| Ok(())));
        // The forger: a correct HELLO (with the real key id), then a proof under a guess.
        let w = wire(&c, &abort);
        let hello_c = Hello::new(ROLE_CONNECTOR, 2, 0, 1, &key).unwrap();
        w.send(KIND_HELLO, &[&hello_c.bytes]).unwrap();
        let mut body = [0u8; HELLO_LEN + PROOF_LEN];
        w.expect(KIND_ACCEPT, &mut body).unwrap();
        let hello_a = Hello {
            bytes: body[..HELLO_LEN].try_into().unwrap(),
        };
        let guess = StageKey::from_bytes([8; 32]);
        let forged = proof_mac(&guess, LABEL_CONNECTOR, &hello_c, &hello_a)
            .finalize()
            .into_bytes();
        w.send(KIND_PROOF, &[forged.as_slice()]).unwrap();
        match w.expect(KIND_OK, &mut []) {
            Err(HandshakeError::RefusedByPeer(reason)) => {
                assert!(reason.contains("proof"), "{reason}")
            }
            other => panic!("forged proof accepted: {other:?}"),
        }
        match t.join().unwrap() {
            Err(HandshakeError::Refused { refusal, claimed }) => {
                assert_eq!(refusal, Refusal::BadProof);
                assert_eq!(claimed, Some(0));
            }
            other => panic!("acceptor did not refuse: {other:?}"),
        }
    }

    #[test]
    fn another_key_is_refused_as_another_stage() {
        let (c, a) = pair();
        let abort = AbortHandle::new().unwrap();
        let abort2 = abort.clone();
        let t = std::thread::spawn(move || {
            as_acceptor(
                &wire(&a, &abort2),
                &StageKey::from_bytes([1; 32]),
                1,
                2,
                |_| Ok(()),
            )
        });
        let err =
            as_connector(&wire(&c, &abort), &StageKey::from_bytes([2; 32]), 0, 1, 2).unwrap_err();
        assert!(
            matches!(&err, HandshakeError::RefusedByPeer(r) if r.contains("another stage")),
            "{err:?}"
        );
        assert!(matches!(
            t.join().unwrap(),
            Err(HandshakeError::Refused {
                refusal: Refusal::OtherStage,
                ..
            })
        ));
    }
}
