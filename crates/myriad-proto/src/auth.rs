//! Authentication of peers and integrity of frames (SECURITY.md has the threat model).
//!
//! Keys. A cluster has a *secret* S (32 random bytes, `myriad cluster init`). From it:
//! * the cluster key `K_cluster = HMAC(S, "myriad v1 cluster key")`, proven by servers and
//!   administrators: only its holders may act as a server or send cluster-changing requests;
//! * the client key `K_client = HMAC(S, "myriad v1 client key")`, handed to client machines
//!   (`myriad cluster client-key`): it cannot be turned back into S or `K_cluster`, so a
//!   client machine can never pose as a server.
//!
//! Handshake (one key K, chosen by the client, named by its public id `HMAC(K, "key id")[..8]`):
//! ```text
//! C -> S  Hello      { magic, version, peer, key_id, nonce_c }
//! S -> C  HelloReply { node_id, epoch, nonce_s, proof_s = HMAC(K, "server" | hello | nonce_s | node | epoch) }
//! C -> S  Auth       { proof_c = HMAC(K, "client" | hello | reply) }
//! S -> C  AuthReply  { refused: None }
//! ```
//! Both proofs bind the whole transcript, so neither side's messages can be swapped or
//! replayed into another connection (the other side's nonce is fresh). Then every frame in
//! each direction is sealed with AES-256-GCM under `K_dir = HMAC(K, "c2s"|"s2c" | nonce_c |
//! nonce_s)` (a fresh key per connection and direction), the 96-bit GCM nonce being the
//! frame's number `seq`, counted by both ends and never sent: contents are encrypted, and a
//! changed, dropped, replayed or reordered frame fails its 16-byte tag and closes the
//! connection. A nonce never repeats under one key (one counter per direction, 2^64 frames).
//!
//! Sans-IO: randomness (nonces, new secrets) comes from the caller.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub const KEY_BYTES: usize = 32;
pub const KEY_ID_BYTES: usize = 8;
pub const NONCE_BYTES: usize = 32;
pub const PROOF_BYTES: usize = 32;
/// Tag length of a sealed frame: AES-GCM's full 128-bit tag.
pub const TAG_BYTES: usize = 16;

pub type Key = [u8; KEY_BYTES];
pub type KeyId = [u8; KEY_ID_BYTES];
pub type Nonce = [u8; NONCE_BYTES];
pub type Proof = [u8; PROOF_BYTES];

/// What a key lets its holder be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Credential {
    /// Holds the cluster secret: a server, or an administrator on a trusted machine.
    Cluster,
    /// Holds only the client key: a client, whose uid may be squashed (`root_squash`).
    Client,
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyFileError {
    #[error("line {line}: expected `cluster:<64 hex digits>` or `client:<64 hex digits>`")]
    BadLine { line: usize },
    #[error("the key file holds no key")]
    Empty,
}

/// One key a peer can prove, with the level it grants.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey {
    pub credential: Credential,
    key: Key,
}

impl std::fmt::Debug for ClusterKey {
    // Never print key material (logs, panics in tests).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ClusterKey({:?}, id {})",
            self.credential,
            hex(&self.id())
        )
    }
}

impl ClusterKey {
    #[must_use]
    pub fn id(&self) -> KeyId {
        let full = mac(&self.key, &[b"myriad v1 key id"]);
        let mut id = [0u8; KEY_ID_BYTES];
        id.copy_from_slice(&full[..KEY_ID_BYTES]);
        id
    }

    /// The server's proof (it speaks second, so it also binds its own nonce and identity).
    #[must_use]
    pub fn server_proof(
        &self,
        hello: &[u8],
        nonce_s: &Nonce,
        node_id: myriad_placement::NodeId,
        epoch: u64,
    ) -> Proof {
        mac(
            &self.key,
            &[
                b"myriad v1 server proof",
                &len_prefixed(hello),
                nonce_s,
                &node_id.0.to_be_bytes(),
                &epoch.to_be_bytes(),
            ],
        )
    }

    #[must_use]
    pub fn client_proof(&self, hello: &[u8], reply: &[u8]) -> Proof {
        mac(
            &self.key,
            &[
                b"myriad v1 client proof",
                &len_prefixed(hello),
                &len_prefixed(reply),
            ],
        )
    }

    /// Frame keys for one connection: (client to server, server to client).
    #[must_use]
    pub fn session(&self, nonce_c: &Nonce, nonce_s: &Nonce) -> (FrameSeal, FrameSeal) {
        let c2s = mac(&self.key, &[b"myriad v2 c2s", nonce_c, nonce_s]);
        let s2c = mac(&self.key, &[b"myriad v2 s2c", nonce_c, nonce_s]);
        (FrameSeal::new(&c2s), FrameSeal::new(&s2c))
    }
}

/// Constant-time comparison of two proofs.
#[must_use]
pub fn proofs_equal(a: &Proof, b: &Proof) -> bool {
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// The keys one process holds, read from its key file. The first line's key is the one it
/// connects with; every key it holds is accepted from peers (that is how a secret is
/// rotated: SECURITY.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyring {
    keys: Vec<ClusterKey>,
}

impl Keyring {
    /// A keyring from a cluster secret: grants both levels.
    #[must_use]
    pub fn from_secret(secret: &Key) -> Keyring {
        Keyring {
            keys: derived(secret).to_vec(),
        }
    }

    /// Parses a key file: one key a line, `cluster:<hex>` (a cluster secret) or
    /// `client:<hex>` (a client key); `#` starts a comment.
    pub fn parse(text: &str) -> Result<Keyring, KeyFileError> {
        let mut keys = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = KeyFileError::BadLine { line: i + 1 };
            let (kind, digits) = line.split_once(':').ok_or(bad.clone())?;
            let key = unhex(digits.trim()).ok_or(bad.clone())?;
            match kind.trim() {
                "cluster" => keys.extend(derived(&key)),
                "client" => keys.push(ClusterKey {
                    credential: Credential::Client,
                    key,
                }),
                _ => return Err(bad),
            }
        }
        if keys.is_empty() {
            return Err(KeyFileError::Empty);
        }
        Ok(Keyring { keys })
    }

    /// The key this process connects with (the strongest of its first line).
    #[must_use]
    pub fn connect_key(&self) -> Option<&ClusterKey> {
        self.keys.first()
    }

    /// The key a peer named in its hello, if this keyring accepts it.
    #[must_use]
    pub fn find(&self, id: &KeyId) -> Option<&ClusterKey> {
        self.keys.iter().find(|k| &k.id() == id)
    }

    /// Whether this keyring holds a cluster secret (a server needs one).
    #[must_use]
    pub fn has_cluster_secret(&self) -> bool {
        self.keys
            .iter()
            .any(|k| k.credential == Credential::Cluster)
    }

    /// The key servers seal chunk capabilities with (`Capability`): derived from the
    /// cluster key, so a holder of only the client key can neither make nor change one.
    #[must_use]
    pub fn capability_key(&self) -> Option<CapabilityKey> {
        self.keys
            .iter()
            .find(|k| k.credential == Credential::Cluster)
            .map(|k| CapabilityKey(mac(&k.key, &[b"myriad v1 capability key"])))
    }
}

/// The servers' key for chunk capabilities.
#[derive(Clone)]
pub struct CapabilityKey(Key);

impl std::fmt::Debug for CapabilityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapabilityKey(..)")
    }
}

/// A short-lived grant, made by the server of a file's entry after it checked the
/// caller's access, to read (or also write) the chunks past the first of inode `ino`
/// until `expires_ns` (servers' clocks). Chunk servers refuse a client's chunk request
/// without a good one (docs/write-path.md, part 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capability {
    pub ino: crate::InodeId,
    pub write: bool,
    pub expires_ns: i64,
    pub tag: [u8; TAG_BYTES],
}

impl CapabilityKey {
    fn tag(&self, ino: crate::InodeId, write: bool, expires_ns: i64) -> [u8; TAG_BYTES] {
        let full = mac(
            &self.0,
            &[
                b"myriad v1 capability",
                &ino.0.to_be_bytes(),
                &[u8::from(write)],
                &expires_ns.to_be_bytes(),
            ],
        );
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&full[..TAG_BYTES]);
        tag
    }

    #[must_use]
    pub fn grant(&self, ino: crate::InodeId, write: bool, expires_ns: i64) -> Capability {
        Capability {
            ino,
            write,
            expires_ns,
            tag: self.tag(ino, write, expires_ns),
        }
    }

    /// Whether `cap` is one of ours, for `ino`, granting `write` if asked, and not expired
    /// at `now_ns`.
    #[must_use]
    pub fn admits(&self, cap: &Capability, ino: crate::InodeId, write: bool, now_ns: i64) -> bool {
        let expected = self.tag(cap.ino, cap.write, cap.expires_ns);
        let mut diff = 0u8;
        for (a, b) in expected.iter().zip(cap.tag.iter()) {
            diff |= a ^ b;
        }
        diff == 0 && cap.ino == ino && (cap.write || !write) && now_ns < cap.expires_ns
    }
}

/// The key-file line of a new cluster secret.
#[must_use]
pub fn secret_line(secret: &Key) -> String {
    format!("cluster:{}", hex(secret))
}

/// The key-file line of the client key of a cluster secret.
#[must_use]
pub fn client_key_line(secret: &Key) -> String {
    format!("client:{}", hex(&derived(secret)[1].key))
}

fn derived(secret: &Key) -> [ClusterKey; 2] {
    [
        ClusterKey {
            credential: Credential::Cluster,
            key: mac(secret, &[b"myriad v1 cluster key"]),
        },
        ClusterKey {
            credential: Credential::Client,
            key: mac(secret, &[b"myriad v1 client key"]),
        },
    ]
}

/// Seals (encrypts and tags) or opens the frames of one direction of a connection,
/// counting them: frame `seq` uses GCM nonce `seq`.
#[derive(Clone)]
pub struct FrameSeal {
    key: ring::aead::LessSafeKey,
    seq: u64,
}

impl std::fmt::Debug for FrameSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FrameSeal(seq {})", self.seq)
    }
}

impl FrameSeal {
    fn new(key: &Key) -> FrameSeal {
        // A 32-byte key is what AES-256 takes, so this never fails.
        let unbound = ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, key)
            .unwrap_or_else(|_| unreachable_key());
        FrameSeal {
            key: ring::aead::LessSafeKey::new(unbound),
            seq: 0,
        }
    }

    /// The nonce of the next frame, and the count moved on.
    fn next_nonce(&mut self) -> ring::aead::Nonce {
        let mut n = [0u8; ring::aead::NONCE_LEN];
        n[4..].copy_from_slice(&self.seq.to_be_bytes());
        self.seq += 1;
        ring::aead::Nonce::assume_unique_for_key(n)
    }

    /// Encrypts the next frame's `body` in place and returns its tag.
    pub fn seal_in_place(&mut self, body: &mut [u8]) -> [u8; TAG_BYTES] {
        let nonce = self.next_nonce();
        let mut out = [0u8; TAG_BYTES];
        // Sealing fails only past GCM's per-message limit (64 GiB), far above a frame.
        if let Ok(tag) = self
            .key
            .seal_in_place_separate_tag(nonce, ring::aead::Aad::empty(), body)
        {
            out.copy_from_slice(tag.as_ref());
        }
        out
    }

    /// The next frame on the wire: `body` encrypted, then its tag.
    #[must_use]
    pub fn seal(&mut self, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(body.len() + TAG_BYTES);
        out.extend_from_slice(body);
        let tag = self.seal_in_place(&mut out);
        out.extend_from_slice(&tag);
        out
    }

    /// Opens the next frame (`sealed`: ciphertext then tag) in place: the length of its
    /// body, decrypted at the start of `sealed`, or `None` if it fails its tag.
    pub fn open_in_place(&mut self, sealed: &mut [u8]) -> Option<usize> {
        let nonce = self.next_nonce();
        self.key
            .open_in_place(nonce, ring::aead::Aad::empty(), sealed)
            .ok()
            .map(|body| body.len())
    }
}

#[cold]
fn unreachable_key() -> ring::aead::UnboundKey {
    // `ring` refuses only keys of the wrong length; ours are 32 bytes by type.
    panic!("AES-256-GCM refused a 32-byte key")
}

fn new_mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length, so this never fails; the fallback keeps the code free of
    // panics all the same.
    HmacSha256::new_from_slice(key).unwrap_or_else(|_| {
        <HmacSha256 as hmac::digest::KeyInit>::new(&hmac::digest::Key::<HmacSha256>::default())
    })
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = new_mac(key);
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// A field of variable length in a MAC input: prefixed by its length, so that two different
/// splits of the same bytes never give the same input.
fn len_prefixed(b: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(b.len() + 8);
    v.extend_from_slice(&(b.len() as u64).to_be_bytes());
    v.extend_from_slice(b);
    v
}

#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Key> {
    if s.len() != KEY_BYTES * 2 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; KEY_BYTES];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_placement::NodeId;

    const S: Key = [7u8; 32];
    const OTHER: Key = [8u8; 32];

    fn ring(text: &str) -> Keyring {
        Keyring::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_secret_file_grants_both_levels_and_a_client_file_only_one() {
        let server = ring(&secret_line(&S));
        let client = ring(&client_key_line(&S));
        assert!(server.has_cluster_secret());
        assert!(!client.has_cluster_secret());
        let ck = client.connect_key().unwrap_or_else(|| panic!("no key"));
        assert_eq!(ck.credential, Credential::Client);
        // The server recognises the client key as a client key.
        assert_eq!(
            server.find(&ck.id()).map(|k| k.credential),
            Some(Credential::Client)
        );
        let sk = server.connect_key().unwrap_or_else(|| panic!("no key"));
        assert_eq!(sk.credential, Credential::Cluster);
        // A client keyring does not accept the cluster key, and another cluster knows neither.
        assert!(client.find(&sk.id()).is_none());
        let other = ring(&secret_line(&OTHER));
        assert!(other.find(&sk.id()).is_none() && other.find(&ck.id()).is_none());
    }

    #[test]
    fn key_files_parse_strictly() {
        let two = format!(
            "# rotated\n{}\n\n{}  # old\n",
            secret_line(&OTHER),
            secret_line(&S)
        );
        let r = ring(&two);
        assert_eq!(r.keys.len(), 4);
        assert!(r.find(&Keyring::from_secret(&S).keys[0].id()).is_some());
        assert_eq!(Keyring::parse(""), Err(KeyFileError::Empty));
        assert_eq!(Keyring::parse("# nothing\n"), Err(KeyFileError::Empty));
        for bad in [
            "cluster:12",
            "secret:00",
            "nocolon",
            &format!("cluster:{}zz", "0".repeat(62)),
        ] {
            assert_eq!(
                Keyring::parse(bad),
                Err(KeyFileError::BadLine { line: 1 }),
                "{bad}"
            );
        }
    }

    #[test]
    fn proofs_bind_key_and_transcript() {
        let k = Keyring::from_secret(&S).keys[0].clone();
        let wrong = Keyring::from_secret(&OTHER).keys[0].clone();
        let p = k.client_proof(b"hello", b"reply");
        assert!(proofs_equal(&p, &k.client_proof(b"hello", b"reply")));
        assert!(!proofs_equal(&p, &wrong.client_proof(b"hello", b"reply")));
        assert!(!proofs_equal(&p, &k.client_proof(b"hellor", b"eply")));
        let n = [1u8; 32];
        assert!(!proofs_equal(
            &k.server_proof(b"h", &n, NodeId(1), 2),
            &k.server_proof(b"h", &n, NodeId(1), 3)
        ));
        // A server proof is never a valid client proof (no reflection).
        assert!(!proofs_equal(
            &k.server_proof(b"h", &n, NodeId(0), 0),
            &k.client_proof(b"h", &n)
        ));
    }

    /// Opens `sealed` (ciphertext then tag) as the next frame of `r`: its body, if good.
    fn open(r: &mut FrameSeal, sealed: &[u8]) -> Option<Vec<u8>> {
        let mut buf = sealed.to_vec();
        let n = r.open_in_place(&mut buf)?;
        buf.truncate(n);
        Some(buf)
    }

    #[test]
    fn sealed_frames_catch_changes_replays_and_reordering() {
        let k = Keyring::from_secret(&S).keys[1].clone();
        let (mut c2s_send, _) = k.session(&[1; 32], &[2; 32]);
        let (c2s_recv, _) = k.session(&[1; 32], &[2; 32]);
        let f0 = c2s_send.seal(b"first");
        let f1 = c2s_send.seal(b"second");
        assert_eq!(f0.len(), 5 + TAG_BYTES);
        assert!(
            !f0.windows(5).any(|w| w == b"first"),
            "sealed, not encrypted"
        );
        // In order: accepted.
        let mut r = c2s_recv.clone();
        assert_eq!(open(&mut r, &f0).as_deref(), Some(&b"first"[..]));
        assert_eq!(open(&mut r, &f1).as_deref(), Some(&b"second"[..]));
        // Reordered, replayed, changed, truncated: refused.
        assert_eq!(open(&mut c2s_recv.clone(), &f1), None);
        let mut r = c2s_recv.clone();
        assert!(open(&mut r, &f0).is_some() && open(&mut r, &f0).is_none());
        let mut changed = f0.clone();
        changed[2] ^= 0x20;
        assert_eq!(open(&mut c2s_recv.clone(), &changed), None);
        assert_eq!(open(&mut c2s_recv.clone(), &f0[..8]), None);
        // The other direction's key does not open it.
        let (_, mut s2c) = k.session(&[1; 32], &[2; 32]);
        assert_eq!(open(&mut s2c, &f0), None);
        // Another connection's nonces give other keys.
        let (mut other, _) = k.session(&[1; 32], &[3; 32]);
        assert_eq!(open(&mut other, &f0), None);
    }
}
