//! The authenticated handshake (myriad_proto::auth has the protocol and why it is safe).
//! Both sides run plain frames until it succeeds, then tag every frame.

use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use myriad_proto::auth::{Credential, Keyring, Nonce, proofs_equal};
use myriad_proto::codec::{decode, encode};
use myriad_proto::{
    Auth, AuthReply, Hello, HelloReply, MAGIC, PROTOCOL_MIN, PROTOCOL_VERSION, PeerKind, WireError,
    negotiate,
};
use rand::RngCore;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::frame::FrameCodec;

pub(crate) type Reader = FramedRead<OwnedReadHalf, FrameCodec>;
pub(crate) type Writer = FramedWrite<OwnedWriteHalf, FrameCodec>;

/// Who is at the other end of an accepted connection, as proven by the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub kind: PeerKind,
    pub credential: Credential,
    /// The zone it said it is in (docs/zones.md; `""` if it did not say), for counters.
    pub zone: std::sync::Arc<str>,
    /// The protocol this connection speaks (docs/upgrades.md).
    pub version: u16,
}

/// What a client's handshake learned of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handshaken {
    pub(crate) node_id: myriad_proto::NodeId,
    pub(crate) epoch: u64,
    /// The protocol the connection speaks, and the newest the server does.
    pub(crate) version: u16,
    pub(crate) newest: u16,
}

/// A client's handshake: done, or refused by an older server that speaks this version,
/// which this client also speaks (connect again offering it: a server of 29 refuses any
/// other version than its own).
pub(crate) enum Shook {
    Done(Handshaken),
    OfferOlder(u16),
}

fn nonce() -> Nonce {
    let mut n = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

async fn send<T: serde::Serialize>(w: &mut Writer, msg: &T) -> std::io::Result<()> {
    let bytes = encode(msg).map_err(std::io::Error::other)?;
    w.send(Bytes::from(bytes)).await
}

async fn recv(r: &mut Reader) -> std::io::Result<Bytes> {
    match r.next().await {
        Some(Ok(frame)) => Ok(frame.freeze()),
        Some(Err(e)) => Err(e),
        None => Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed during the handshake",
        )),
    }
}

/// Client side: offers protocol `offer` (and every one down to `PROTOCOL_MIN`), proves
/// `keys`' connect key, checks the server's proof, and seals both halves.
pub(crate) async fn client(
    addr: &str,
    r: &mut Reader,
    w: &mut Writer,
    (me, zone): (PeerKind, &str),
    keys: &Keyring,
    offer: u16,
) -> Result<Shook, WireError> {
    let io = |e: std::io::Error| WireError::Unavailable(format!("{addr}: {e}"));
    let key = keys.connect_key();
    let hello = Hello {
        magic: MAGIC,
        version: offer,
        peer: me,
        key_id: key.map(|k| k.id()),
        nonce: nonce(),
        zone: zone.to_string(),
        min_version: PROTOCOL_MIN,
    };
    let hello_bytes = encode(&hello).map_err(|e| WireError::Protocol(e.to_string()))?;
    w.send(Bytes::from(hello_bytes.clone())).await.map_err(io)?;
    let reply_bytes = recv(r).await.map_err(io)?;
    let reply = HelloReply::decode_any(&reply_bytes)
        .map_err(|e| WireError::Protocol(format!("{addr}: {e}")))?;
    if reply.refused.is_some() && (PROTOCOL_MIN..offer).contains(&reply.version) {
        return Ok(Shook::OfferOlder(reply.version));
    }
    if let Some(why) = reply.refused {
        return Err(WireError::Protocol(format!(
            "{addr} refused the connection: {why}"
        )));
    }
    let Some(key) = key else {
        return Err(WireError::Protocol(format!(
            "{addr}: no key to connect with"
        )));
    };
    let expected = key.server_proof(&hello_bytes, &reply.nonce, reply.node_id, reply.epoch);
    if !proofs_equal(&expected, &reply.proof) {
        return Err(WireError::Protocol(format!(
            "{addr} did not prove the cluster key: not a server of this cluster (or a tampered connection)"
        )));
    }
    let auth = Auth {
        proof: key.client_proof(&hello_bytes, &reply_bytes),
    };
    send(w, &auth).await.map_err(io)?;
    let verdict: AuthReply = decode(&recv(r).await.map_err(io)?)
        .map_err(|e| WireError::Protocol(format!("{addr}: {e}")))?;
    if let Some(why) = verdict.refused {
        return Err(WireError::Protocol(format!(
            "{addr} refused the connection: {why}"
        )));
    }
    let (c2s, s2c) = key.session(&hello.nonce, &reply.nonce);
    w.encoder_mut().seal_with(c2s);
    r.decoder_mut().open_with(s2c);
    Ok(Shook::Done(Handshaken {
        node_id: reply.node_id,
        epoch: reply.epoch,
        version: reply.version.min(offer),
        newest: reply.newest,
    }))
}

/// Why a handshake failed, for the server's log (the peer was told the same, if it could be).
pub(crate) type Refusal = String;

/// The newest protocol this process speaks: `PROTOCOL_VERSION`, or lower if the
/// environment's `MYRIAD_PROTOCOL_NEWEST` says so (a test stands a server of an older
/// release in with it: it offers and accepts nothing newer).
#[must_use]
pub fn newest() -> u16 {
    static NEWEST: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *NEWEST.get_or_init(|| {
        std::env::var("MYRIAD_PROTOCOL_NEWEST")
            .ok()
            .and_then(|v| v.parse::<u16>().ok())
            .map_or(PROTOCOL_VERSION, |v| {
                v.clamp(PROTOCOL_MIN, PROTOCOL_VERSION)
            })
    })
}

/// Server side, within `limit`: checks the hello and the client's proof, proves the key
/// itself, and seals both halves. `busy` refuses the connection outright (too many
/// connections from its address) after reading the hello, so the client learns why.
pub(crate) async fn server(
    r: &mut Reader,
    w: &mut Writer,
    keys: &Keyring,
    identity: (myriad_proto::NodeId, u64),
    (busy, floor): (Option<String>, u16),
    limit: Duration,
) -> Result<Peer, Refusal> {
    match tokio::time::timeout(limit, server_inner(r, w, keys, identity, (busy, floor))).await {
        Ok(r) => r,
        Err(_) => Err(format!("handshake not done within {limit:?}")),
    }
}

async fn server_inner(
    r: &mut Reader,
    w: &mut Writer,
    keys: &Keyring,
    (node_id, epoch): (myriad_proto::NodeId, u64),
    (busy, floor): (Option<String>, u16),
) -> Result<Peer, Refusal> {
    let hello_bytes = recv(r).await.map_err(|e| format!("bad first frame: {e}"))?;
    let hello = Hello::decode_any(&hello_bytes);
    let version = hello
        .as_ref()
        .ok()
        .and_then(|h| negotiate((h.min_version, h.version.min(newest()))));
    let key = match &hello {
        Ok(h) => h.key_id.and_then(|id| keys.find(&id)),
        Err(_) => None,
    };
    let refused = match (&hello, key, busy) {
        (Err(e), _, _) => Some(format!("malformed hello: {e}")),
        (Ok(h), _, _) if h.magic != MAGIC => Some("not a Myriad peer (bad magic)".to_string()),
        (Ok(h), _, _) if version.is_none() => Some(format!(
            "protocol versions {}-{} not supported (this server speaks \
             {PROTOCOL_MIN}-{})",
            h.min_version,
            h.version,
            newest()
        )),
        // A server below the cluster's floor would not read what the others write now
        // (docs/upgrades.md "The cluster's protocol floor").
        (Ok(h), _, _) if matches!(h.peer, PeerKind::Server { .. }) && h.version < floor => {
            Some(format!(
                "this cluster runs protocol {floor} or later, and this server speaks at most \
                 {}: upgrade it to a release that speaks {floor}",
                h.version
            ))
        }
        (_, _, Some(why)) => Some(why),
        (Ok(h), _, _) if !myriad_proto::zone_name_ok(&h.zone) => {
            Some("bad zone name in the hello".to_string())
        }
        (Ok(h), None, _) if h.key_id.is_none() => Some(
            "authentication required: this cluster needs its secret or client key (SECURITY.md)"
                .to_string(),
        ),
        (Ok(_), None, _) => Some(
            "authentication failed: the client's key is not this cluster's (wrong secret)"
                .to_string(),
        ),
        (Ok(h), Some(k), _)
            if matches!(h.peer, PeerKind::Server { .. }) && k.credential != Credential::Cluster =>
        {
            Some("authentication failed: a client key cannot act as a server".to_string())
        }
        _ => None,
    };
    let nonce_s = nonce();
    let proof = match (key, refused.is_none()) {
        (Some(k), true) => k.server_proof(&hello_bytes, &nonce_s, node_id, epoch),
        _ => [0u8; 32],
    };
    let reply = HelloReply {
        version: version.unwrap_or(newest()),
        node_id,
        epoch,
        refused: refused.clone(),
        nonce: nonce_s,
        proof,
        newest: newest(),
    };
    let reply_bytes = encode(&reply).map_err(|e| e.to_string())?;
    let sent = w.send(Bytes::from(reply_bytes.clone())).await;
    let (Ok(hello), Some(key), None) = (hello, key, refused) else {
        return Err(reply.refused.unwrap_or_default());
    };
    sent.map_err(|e| format!("cannot answer the hello: {e}"))?;
    let auth_bytes = recv(r).await.map_err(|e| format!("no proof: {e}"))?;
    let auth = decode::<Auth>(&auth_bytes).map_err(|e| format!("malformed proof: {e}"))?;
    let good = proofs_equal(&auth.proof, &key.client_proof(&hello_bytes, &reply_bytes));
    let verdict = AuthReply {
        refused: (!good).then(|| {
            "authentication failed: bad proof of the cluster key (wrong secret or a tampered handshake)"
                .to_string()
        }),
    };
    let _ = send(w, &verdict).await;
    if let Some(why) = verdict.refused {
        return Err(why);
    }
    let (c2s, s2c) = key.session(&hello.nonce, &nonce_s);
    r.decoder_mut().open_with(c2s);
    w.encoder_mut().seal_with(s2c);
    Ok(Peer {
        kind: hello.peer,
        credential: key.credential,
        zone: hello.zone.into(),
        version: version.unwrap_or(PROTOCOL_MIN),
    })
}

#[cfg(test)]
mod tests;
