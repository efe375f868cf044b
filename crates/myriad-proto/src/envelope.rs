//! How a client sends a request (issue 50): on its own, or in an envelope that tells the
//! server what else to do with it — apply it once (`Once`, `Resend`), ask after it
//! (`Recorded`), lease the directory it reads (`Leased`), read it as a given client
//! (`ReadAs`), or apply several in order (`Batch`).
//!
//! The envelope is not a request: `ClientRequest` has no variant that carries another, so
//! an envelope inside an envelope cannot be built, and a frame that says one fails to
//! decode. A batch holds changes sent once, by type.
//!
//! On the wire nothing changed (protocol 33's bytes, checked by `codec.rs` against bytes
//! the build before this one encoded): an envelope is written as the `ClientRequest`
//! variant it was, at the same index, with its request inside. `ClientRequest` keeps those
//! indices as slots (`ClientRequest::OnceSlot` ...) that hold no value, so that its own
//! variants keep their numbers.

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, SeqAccess, VariantAccess,
    Visitor,
};
use serde::ser::{SerializeStructVariant, Serializer};
use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

use crate::request::{ClientRequest, OnceId};

/// A client's request as it is sent: alone, or in an envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Envelope {
    /// A request on its own: a read, or a request that is not a change (a change is sent
    /// `Once`).
    Alone(ClientRequest),
    /// A change (`ClientRequest::is_change`) with the id that makes it happen once
    /// (docs/write-path.md, "Exactly once"). A retry of it, after a timeout or a failover,
    /// answers the first outcome instead of applying it again.
    Once(SentOnce),
    /// A read (`Fetch`, `Stat`, `StatMany` or `ReadDir`) and a lease on the part of the
    /// directory it reads that the partition holds, for client `holder` (docs/fuse.md
    /// "Directory leases"). The answer is `Response::Leased`. `exclusive` asks for an
    /// exclusive lease (docs/fuse.md "Write-behind"): granted only if no other client
    /// holds one on the part and `holder` may create names there.
    Leased {
        holder: u64,
        request: ClientRequest,
        exclusive: bool,
    },
    /// A read (`Stat`, `Fetch`, `StatMany`, `ReadDir`, `Read`, `Readlink`, `Grant`) made
    /// by client `holder`, so that it does not recall `holder`'s own exclusive lease on
    /// the directory (every other reader's read does: docs/fuse.md "Write-behind").
    /// Answered as the read alone.
    ReadAs { holder: u64, request: ClientRequest },
    /// Changes sent once, applied in order by their partition, each as if sent alone (one
    /// failing does not stop the next); answered by `Response::Bundle`, one answer per
    /// change. One answered `Busy` or with a routing error stops the batch: the changes
    /// after it are answered `Busy`, untried, and the client sends them again in order. A
    /// mount's write-behind journal is sent this way (at most `limits::BATCH_MAX`
    /// changes). `times`: per change, when the client answered it (ns since the epoch);
    /// the partition applies it as made then (its new times, its directory's), so that
    /// what the client answered and what the servers keep agree (a time further than a
    /// minute from the server's clock is not taken).
    Batch { ops: Vec<SentOnce>, times: Vec<i64> },
    /// A change this client sent once as `id` and was answered `Response::Applied` by an
    /// earlier primary of the partition, now gone: sent again by a client that kept it
    /// (docs/fuse.md "Keeping answered changes until they are durable"). Answered as
    /// `Once` is, durable: by its recorded outcome if it survived the failover; else
    /// applied, unless another client changed any name it touches since this primary
    /// opened: then `WireError::Io`, and the change is lost (its client reports it at the
    /// next fsync). Protocol 31.
    Resend { id: OnceId, request: ClientRequest },
    /// The outcome the partition recorded of change `request`, sent once as `id` by a
    /// client that never had its answer, asked before the client sends the change to
    /// another partition: a tree move, a directory split or a directory export moved its
    /// name there meanwhile, and outcomes stay with the partition that recorded them
    /// (docs/write-path.md "Exactly once"). Waits for a try of it running there; answered
    /// `Response::Recorded(Some(answer))` once what it reports is durable there and on the
    /// copies, or `Recorded(None)`: none was recorded (no try of it went through there,
    /// and none will: its name is no longer served there). Protocol 32.
    Recorded { id: OnceId, request: ClientRequest },
}

/// A change sent once: its id, the change, and whether to answer it once applied on the
/// primary (visible to all) rather than once durable on every copy: the answer is then
/// `Response::Applied`, and `SyncPartition` later makes it durable (a mount's changes,
/// docs/fuse.md "Durability"). Changes spanning partitions are durable whatever this says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentOnce {
    pub id: OnceId,
    pub request: ClientRequest,
    pub visible: bool,
}

impl From<ClientRequest> for Envelope {
    fn from(r: ClientRequest) -> Self {
        Envelope::Alone(r)
    }
}

impl Envelope {
    /// The request inside, if there is exactly one (not a batch).
    #[must_use]
    pub fn request(&self) -> Option<&ClientRequest> {
        match self {
            Envelope::Alone(r)
            | Envelope::Once(SentOnce { request: r, .. })
            | Envelope::Leased { request: r, .. }
            | Envelope::ReadAs { request: r, .. }
            | Envelope::Resend { request: r, .. }
            | Envelope::Recorded { request: r, .. } => Some(r),
            Envelope::Batch { .. } => None,
        }
    }

    /// Short stable name, for counters and logs: the request's, but a batch's ("batch")
    /// and a question after a change's outcome ("recorded").
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            Envelope::Batch { .. } => "batch",
            Envelope::Recorded { .. } => "recorded",
            Envelope::Alone(r)
            | Envelope::Once(SentOnce { request: r, .. })
            | Envelope::Leased { request: r, .. }
            | Envelope::ReadAs { request: r, .. }
            | Envelope::Resend { request: r, .. } => r.op_name(),
        }
    }
}

/// The name serde knows the wire enum by.
const WIRE_NAME: &str = "ClientRequest";
/// The fields of a change sent once, in their wire order.
const ONCE_FIELDS: &[&str] = &["id", "request", "visible"];

/// The `ClientRequest` variant index each envelope is written at (protocol 33's).
mod slot {
    pub(super) const ONCE: u32 = 27;
    pub(super) const LEASED: u32 = 29;
    pub(super) const READ_AS: u32 = 30;
    pub(super) const BATCH: u32 = 31;
    pub(super) const RESEND: u32 = 37;
    pub(super) const RECORDED: u32 = 38;
}

impl Serialize for SentOnce {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut v = s.serialize_struct_variant(WIRE_NAME, slot::ONCE, "Once", 3)?;
        v.serialize_field("id", &self.id)?;
        v.serialize_field("request", &self.request)?;
        v.serialize_field("visible", &self.visible)?;
        v.end()
    }
}

impl Serialize for Envelope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Envelope::Alone(r) => r.serialize(s),
            Envelope::Once(once) => once.serialize(s),
            Envelope::Leased {
                holder,
                request,
                exclusive,
            } => {
                let mut v = s.serialize_struct_variant(WIRE_NAME, slot::LEASED, "Leased", 3)?;
                v.serialize_field("holder", holder)?;
                v.serialize_field("request", request)?;
                v.serialize_field("exclusive", exclusive)?;
                v.end()
            }
            Envelope::ReadAs { holder, request } => two(
                s,
                (slot::READ_AS, "ReadAs"),
                ("holder", holder),
                ("request", request),
            ),
            Envelope::Batch { ops, times } => {
                two(s, (slot::BATCH, "Batch"), ("ops", ops), ("times", times))
            }
            Envelope::Resend { id, request } => two(
                s,
                (slot::RESEND, "Resend"),
                ("id", id),
                ("request", request),
            ),
            Envelope::Recorded { id, request } => two(
                s,
                (slot::RECORDED, "Recorded"),
                ("id", id),
                ("request", request),
            ),
        }
    }
}

/// Writes a two-field envelope as the struct variant `name` at wire index `index`.
fn two<S: Serializer, F: Serialize, G: Serialize>(
    s: S,
    (index, name): (u32, &'static str),
    (a, first): (&'static str, &F),
    (b, second): (&'static str, &G),
) -> Result<S::Ok, S::Error> {
    let mut v = s.serialize_struct_variant(WIRE_NAME, index, name, 2)?;
    v.serialize_field(a, first)?;
    v.serialize_field(b, second)?;
    v.end()
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum(WIRE_NAME, &[], EnvelopeVisitor)
    }
}

/// A batch's change: refused by its variant index alone unless it is sent once, before
/// anything inside it is read. So no envelope holds another envelope at any depth, and a
/// hostile frame cannot make decoding recurse (batches nested a million deep would
/// otherwise exhaust the stack and end the server's process).
impl<'de> Deserialize<'de> for SentOnce {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum(WIRE_NAME, &[], SentOnceVisitor)
    }
}

struct SentOnceVisitor;

impl<'de> Visitor<'de> for SentOnceVisitor {
    type Value = SentOnce;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a change sent once")
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<SentOnce, A::Error> {
        let (index, variant): (u32, A::Variant) = data.variant()?;
        if index != slot::ONCE {
            return Err(de::Error::custom("a batch holds changes sent once"));
        }
        variant
            .struct_variant(ONCE_FIELDS, Three(PhantomData))
            .map(|(id, request, visible)| SentOnce {
                id,
                request,
                visible,
            })
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a client request, alone or in an envelope")
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Envelope, A::Error> {
        let (index, variant): (u32, A::Variant) = data.variant()?;
        match index {
            slot::ONCE => SentOnceVisitor
                .visit_enum(ReadIndex { index, variant })
                .map(Envelope::Once),
            slot::LEASED => variant
                .struct_variant(&["holder", "request", "exclusive"], Three(PhantomData))
                .map(|(holder, request, exclusive)| Envelope::Leased {
                    holder,
                    request,
                    exclusive,
                }),
            slot::READ_AS => variant
                .struct_variant(&["holder", "request"], Two(PhantomData))
                .map(|(holder, request)| Envelope::ReadAs { holder, request }),
            slot::BATCH => variant
                .struct_variant(&["ops", "times"], Two(PhantomData))
                .map(|(ops, times)| Envelope::Batch { ops, times }),
            slot::RESEND => variant
                .struct_variant(&["id", "request"], Two(PhantomData))
                .map(|(id, request)| Envelope::Resend { id, request }),
            slot::RECORDED => variant
                .struct_variant(&["id", "request"], Two(PhantomData))
                .map(|(id, request)| Envelope::Recorded { id, request }),
            index => ClientRequest::deserialize(ReadIndex { index, variant }).map(Envelope::Alone),
        }
    }
}

/// An envelope's first two fields, read in order (postcard gives a struct as a sequence).
struct Two<F, G>(PhantomData<(F, G)>);

impl<'de, F: Deserialize<'de>, G: Deserialize<'de>> Visitor<'de> for Two<F, G> {
    type Value = (F, G);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an envelope's two fields")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let first = seq.next_element()?.ok_or_else(|| missing(0))?;
        let second = seq.next_element()?.ok_or_else(|| missing(1))?;
        Ok((first, second))
    }
}

/// An envelope's three fields: one, the request, a flag.
struct Three<F>(PhantomData<F>);

impl<'de, F: Deserialize<'de>> Visitor<'de> for Three<F> {
    type Value = (F, ClientRequest, bool);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an envelope's three fields")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let first = seq.next_element()?.ok_or_else(|| missing(0))?;
        let request = seq.next_element()?.ok_or_else(|| missing(1))?;
        let flag = seq.next_element()?.ok_or_else(|| missing(2))?;
        Ok((first, request, flag))
    }
}

fn missing<E: de::Error>(i: usize) -> E {
    E::invalid_length(i, &"all of an envelope's fields")
}

/// The rest of a plain request whose variant index the envelope's visitor has read
/// already: hands `ClientRequest`'s own deserializer that index and the variant's content.
struct ReadIndex<A> {
    index: u32,
    variant: A,
}

impl<'de, A: VariantAccess<'de>> Deserializer<'de> for ReadIndex<A> {
    type Error = A::Error;

    fn deserialize_any<W: Visitor<'de>>(self, visitor: W) -> Result<W::Value, A::Error> {
        visitor.visit_enum(self)
    }

    fn deserialize_enum<W: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: W,
    ) -> Result<W::Value, A::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

impl<'de, A: VariantAccess<'de>> EnumAccess<'de> for ReadIndex<A> {
    type Error = A::Error;
    type Variant = A;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, A), A::Error> {
        let index: de::value::U32Deserializer<A::Error> = self.index.into_deserializer();
        Ok((seed.deserialize(index)?, self.variant))
    }
}

#[cfg(test)]
mod tests;
