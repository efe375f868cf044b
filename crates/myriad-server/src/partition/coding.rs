//! Erasure coding of settled chunks, run by the chunk's own partition (docs/redundancy.md):
//! the primary codes chunks nobody wrote for a while into fragments on other servers and
//! switches the chunk to its coded record in one checked mutation; a write or a cut into
//! a coded chunk first puts its bytes back in blocks (`uncode`); fragments of a server
//! gone past its grace, or missing or damaged anywhere, are rebuilt from the others.

use std::sync::Arc;
use std::time::Duration;

use myriad_placement::{NodeId, NodeState, fragment_servers};
use myriad_proto::ask;
use myriad_proto::ec_layout::CodedChunk;
use myriad_proto::erasure::{EcParams, Erasure};
use myriad_proto::{Endpoints, InodeId, PeerRequest, Request, WireError};
use myriad_storage::BLOCK_BYTES;
use tokio::time::Instant;

use crate::commit::Context;
use crate::partition::core::Partition;

use crate::state::mutation::{Mutation, Outcome, storage_err};

/// Tries of a cut that meets a coded chunk (each uncodes it first).
const CUT_TRIES: usize = 3;
/// Chunks coded per round at most (each is a chunk read, k+m fragment writes and a batch).
const CODED_PER_ROUND: usize = 8;
/// Chunks the walk over blocks looks at per round (after the partition opens).
const WALKED_PER_ROUND: usize = 256;
/// Coded records checked per page when rebuilding fragments of a lost server.
const RECORDS_PER_PAGE: usize = 256;
/// How long a capability a server makes for its own fragment reads is good for.
const OWN_READ_CAP: Duration = Duration::from_secs(60);

/// A generation for a new coding of a chunk: never 0, and different for each coding
/// with overwhelming likelihood (a fragment of another coding is then never taken).
fn new_generation(ino: InodeId, chunk: u64, server: NodeId, now_ns: i64) -> u32 {
    let mut key = [0u8; 28];
    key[..8].copy_from_slice(&ino.0.to_be_bytes());
    key[8..16].copy_from_slice(&chunk.to_be_bytes());
    key[16..20].copy_from_slice(&server.0.to_be_bytes());
    key[20..].copy_from_slice(&now_ns.to_be_bytes());
    (xxhash_rust::xxh3::xxh3_64(&key) as u32) | 1
}

impl Partition {
    /// A write landed on chunk `chunk` of `ino`: it is not settled before the settle time.
    pub(crate) fn note_chunk_written(&self, ino: InodeId, chunk: u64) {
        if !self.env.config().coding.enabled {
            return;
        }
        if let Ok(mut w) = self.coding.written.lock() {
            w.insert((ino, chunk), Instant::now());
        }
    }

    /// The code this cluster uses now, over the servers up: `None` if it is too small.
    fn cluster_code(&self) -> Option<(EcParams, Vec<NodeId>)> {
        let st = self.state();
        // A partition pinned to a zone (docs/zones.md) keeps its fragments there too.
        let part = st.map.partition(self.me);
        let zone = part.and_then(|p| st.map.pinned_zone(p));
        let up: Vec<NodeId> = st
            .map
            .nodes
            .iter()
            .filter(|n| n.state == NodeState::Up && zone.is_none_or(|z| n.zone == z))
            .map(|n| n.id)
            .collect();
        let replication = part.map_or(st.map.replication, |p| st.map.group_replication(p.group));
        let copies = usize::try_from(replication).unwrap_or(1);
        EcParams::for_cluster(up.len(), copies).map(|p| (p, up))
    }

    /// One round: walk, code settled chunks, rebuild fragments of servers lost.
    pub(crate) async fn coding_round(self: &Arc<Self>) {
        let cfg = self.env.config().coding.clone();
        if !cfg.enabled || !self.env.serves(self.me) {
            return;
        }
        let _round = self.coding.round.lock().await;
        let Some((params, up)) = self.cluster_code() else {
            // Too few servers up for a code: nothing is kept to code later (a cluster that
            // grows walks its blocks again).
            if let Ok(mut w) = self.coding.written.lock() {
                w.clear();
            }
            if let Ok(mut f) = self.coding.failed.lock() {
                f.clear();
            }
            if let Ok(mut walk) = self.coding.walk.lock() {
                *walk = Some(None);
            }
            if let Err(e) = self.rebuild_lost().await {
                tracing::debug!(partition = %self.me, "fragment rebuild: {e}");
            }
            return;
        };
        if let Err(e) = self.walk_blocks() {
            tracing::debug!(partition = %self.me, "coding walk: {e}");
        }
        {
            let settled: Vec<((InodeId, u64), Instant)> = match self.coding.written.lock() {
                Ok(w) => w
                    .iter()
                    .filter(|(_, t)| t.elapsed() >= cfg.settle)
                    .map(|(k, t)| (*k, *t))
                    .take(CODED_PER_ROUND)
                    .collect(),
                Err(_) => Vec::new(),
            };
            for ((ino, chunk), noted) in settled {
                let done = match self
                    .code_chunk(ino, chunk, params, &up, cfg.min_bytes)
                    .await
                {
                    Ok(()) => true,
                    Err(e) => {
                        // Often a passing state (a write, a server starting); said once,
                        // then every 20th try in a row, so a chunk that is never coded
                        // shows why.
                        let tries = self.coding.failed.lock().map_or(0, |mut f| {
                            let n = f.entry((ino, chunk)).or_default();
                            *n += 1;
                            *n
                        });
                        if tries % 20 == 1 {
                            tracing::info!(partition = %self.me, %ino, chunk, tries, "chunk not coded yet: {e}");
                        }
                        false
                    }
                };
                if done && let Ok(mut f) = self.coding.failed.lock() {
                    f.remove(&(ino, chunk));
                }
                if let Ok(mut w) = self.coding.written.lock() {
                    if w.get(&(ino, chunk)) != Some(&noted) {
                        // Written again while it was being coded (the coding then found
                        // the chunk changed and kept its blocks): it settles again and is
                        // coded later. Dropping it here left a chunk never coded
                        // (`erasure::a_large_file...`: 62 of 63 chunks coded, under load).
                    } else if done {
                        w.remove(&(ino, chunk));
                    } else {
                        // Tried again after another settle time.
                        w.insert((ino, chunk), Instant::now());
                    }
                }
            }
        }
        if let Err(e) = self.rebuild_lost().await {
            tracing::debug!(partition = %self.me, "fragment rebuild: {e}");
        }
    }

    /// Adds the chunks kept in blocks here (a partition opened with data written before)
    /// to those to code, a page per round.
    fn walk_blocks(&self) -> Result<(), WireError> {
        let Ok(mut walk) = self.coding.walk.lock() else {
            return Ok(());
        };
        let Some(mut at) = *walk else {
            return Ok(());
        };
        let chunk_blocks = self.state().map.chunk_size_bytes / BLOCK_BYTES;
        let now = Instant::now();
        for _ in 0..WALKED_PER_ROUND {
            match self
                .store
                .next_chunk_with_blocks(at, chunk_blocks)
                .map_err(storage_err)?
            {
                Some(next) => {
                    if let Ok(mut w) = self.coding.written.lock() {
                        w.entry(next).or_insert(now);
                    }
                    at = Some(next);
                }
                None => {
                    *walk = None;
                    return Ok(());
                }
            }
        }
        *walk = Some(at);
        Ok(())
    }

    /// Codes chunk `chunk` of `ino` if it is still kept in blocks here and large enough:
    /// fragments durable on their servers first, then the switch, which takes effect only
    /// if the chunk still holds the bytes coded.
    async fn code_chunk(
        self: &Arc<Self>,
        ino: InodeId,
        chunk: u64,
        params: EcParams,
        up: &[NodeId],
        min_bytes: u64,
    ) -> Result<(), WireError> {
        let cs = self.state().map.chunk_size_bytes;
        let c0 = cs / BLOCK_BYTES;
        let start = chunk.saturating_mul(cs);
        let first = chunk.saturating_mul(c0);
        if self.store.coded(ino, chunk).map_err(storage_err)?.is_some() {
            return Ok(());
        }
        let blocks = match self.store.blocks(ino, first, first.saturating_add(c0)) {
            Ok(b) => b,
            // A damaged block: repaired from a copy by a read, coded in a later round.
            Err(myriad_storage::StorageError::Checksum { ino, block }) => {
                self.repair_block(ino, block).await?;
                return Err(WireError::Busy);
            }
            Err(e) => return Err(storage_err(e)),
        };
        let Some((last, tail)) = blocks.last() else {
            return Ok(()); // nothing kept here any more
        };
        let extent = last * BLOCK_BYTES + tail.len() as u64 - start;
        if start + extent <= min_bytes {
            return Ok(());
        }
        let data = self
            .store
            .read_range(ino, start, extent, start + extent)
            .map_err(storage_err)?;
        drop(blocks);
        let set = fragment_servers(ino, params.total(), up)
            .ok_or_else(|| WireError::Unavailable("too few servers up to code".into()))?;
        let coded = CodedChunk {
            generation: new_generation(ino, chunk, self.env.server_id(), self.env.now_ns()),
            params,
            data_bytes: extent,
            servers: CodedChunk::rotated(chunk, &set),
        };
        let crc = crc32c::crc32c(&data);
        let fragments = coded
            .codec()
            .and_then(|c| c.encode(&data))
            .map_err(|e| WireError::Io(format!("coding chunk {chunk} of {ino}: {e}")))?;
        drop(data);
        self.put_all(ino, chunk, &coded, fragments).await?;
        let switched = self
            .applier
            .run(Mutation::CodeChunk {
                ino,
                chunk,
                coded: coded.clone(),
                crc,
            })
            .await?;
        if matches!(switched, Outcome::Switched(true)) {
            self.env.count("chunks_coded");
            tracing::debug!(partition = %self.me, %ino, chunk, k = params.k, m = params.m, "chunk coded");
            Ok(())
        } else {
            // Written meanwhile (it is settled again later) or coded already.
            self.drop_fragments_later(ino, chunk, coded);
            Ok(())
        }
    }

    /// Puts every fragment of a new coding on its server, in parallel, each durable there;
    /// if one fails, the others are dropped again.
    async fn put_all(
        self: &Arc<Self>,
        ino: InodeId,
        chunk: u64,
        coded: &CodedChunk,
        fragments: Vec<Vec<u8>>,
    ) -> Result<(), WireError> {
        let puts = fragments
            .into_iter()
            .enumerate()
            .map(|(i, f)| self.put_fragment(coded.servers[i], ino, chunk, coded.generation, i, f));
        if let Some(Err(e)) = futures::future::join_all(puts)
            .await
            .into_iter()
            .find(Result::is_err)
        {
            self.drop_fragments_later(ino, chunk, coded.clone());
            return Err(e);
        }
        Ok(())
    }

    async fn put_fragment(
        &self,
        to: NodeId,
        ino: InodeId,
        chunk: u64,
        generation: u32,
        index: usize,
        bytes: Vec<u8>,
    ) -> Result<(), WireError> {
        let req = Request::Peer(PeerRequest::PutFragments {
            ino,
            chunk,
            generation,
            fragments: vec![(
                u8::try_from(index).unwrap_or(u8::MAX),
                serde_bytes::ByteBuf::from(bytes),
            )],
        });
        let epoch = self.env.map().map.epoch;
        self.env.send(to, epoch, Endpoints::SERVER, &req).await?;
        Ok(())
    }

    /// Drops the fragments of `coded` on their servers, in the background and best
    /// effort (a server down keeps its fragment; fsck lists what no record names).
    pub(crate) fn drop_fragments_later(
        self: &Arc<Self>,
        ino: InodeId,
        chunk: u64,
        coded: CodedChunk,
    ) {
        let me = self.clone();
        tokio::spawn(async move {
            let epoch = me.env.map().map.epoch;
            let req = Request::Peer(PeerRequest::DropFragments {
                ino,
                chunk,
                generation: coded.generation,
            });
            let mut servers = coded.servers.clone();
            servers.sort_unstable();
            servers.dedup();
            for to in servers {
                if let Err(e) = me.env.send(to, epoch, Endpoints::SERVER, &req).await {
                    tracing::debug!(%ino, chunk, server = %to, "fragments not dropped: {e}");
                }
            }
        });
    }

    /// Whole fragment `index` of a coded chunk from its server.
    async fn fragment(
        &self,
        ino: InodeId,
        chunk: u64,
        coded: &CodedChunk,
        index: usize,
    ) -> Result<Vec<u8>, WireError> {
        let key = self
            .env
            .config()
            .keys
            .capability_key()
            .ok_or_else(|| WireError::Io("this server holds no cluster key".into()))?;
        let expires = self
            .env
            .now_ns()
            .saturating_add(i64::try_from(OWN_READ_CAP.as_nanos()).unwrap_or(i64::MAX));
        let read = ask::read_fragment(
            (ino, chunk, u8::try_from(index).unwrap_or(u8::MAX)),
            coded.generation,
            (0, u32::MAX),
            key.grant(ino, false, expires),
        );
        let to = *coded.servers.get(index).ok_or(WireError::NotFound)?;
        let epoch = self.env.map().map.epoch;
        let r = self
            .env
            .send(to, epoch, Endpoints::SERVER, &read.request)
            .await?;
        let data = read.answer.of::<WireError>(r)?.data;
        if data.len() != coded.fragment_bytes() {
            return Err(WireError::Io(format!(
                "fragment {index} of chunk {chunk} of {ino} on server {to}: {} bytes, not {}",
                data.len(),
                coded.fragment_bytes()
            )));
        }
        Ok(data)
    }

    /// Every fragment of a coded chunk that can be read intact, by index: the data ones
    /// first, the parity ones only if a data one failed, or all of them if `all`.
    async fn gather(
        &self,
        ino: InodeId,
        chunk: u64,
        coded: &CodedChunk,
        all: bool,
    ) -> Vec<Option<Vec<u8>>> {
        let k = usize::from(coded.params.k);
        let total = coded.params.total();
        let first = if all { 0..total } else { 0..k };
        let reads = first.map(|i| self.fragment(ino, chunk, coded, i));
        let mut got: Vec<Option<Vec<u8>>> = futures::future::join_all(reads)
            .await
            .into_iter()
            .map(Result::ok)
            .collect();
        got.resize(total, None);
        if !all && got.iter().take(k).any(Option::is_none) {
            let parity = (k..total).map(|i| self.fragment(ino, chunk, coded, i));
            for (j, r) in futures::future::join_all(parity)
                .await
                .into_iter()
                .enumerate()
            {
                got[k + j] = r.ok();
            }
        }
        got
    }

    /// The bytes of a coded chunk, from any k of its fragments.
    pub(crate) async fn decode_chunk(
        &self,
        ino: InodeId,
        chunk: u64,
        coded: &CodedChunk,
    ) -> Result<Vec<u8>, WireError> {
        let got = self.gather(ino, chunk, coded, false).await;
        coded
            .decode(&got)
            .map_err(|e| WireError::Unavailable(format!("chunk {chunk} of {ino}: {e}")))
    }

    /// Puts a coded chunk's bytes back in blocks (a write or a cut into it is next), then
    /// drops its fragments.
    pub(crate) async fn uncode(
        self: &Arc<Self>,
        ctx: &Context,
        ino: InodeId,
        chunk: u64,
        coded: &CodedChunk,
    ) -> Result<(), WireError> {
        let data = self.decode_chunk(ino, chunk, coded).await?;
        self.applier
            .run_in(
                ctx,
                Mutation::UncodeChunk {
                    ino,
                    chunk,
                    generation: coded.generation,
                    data,
                },
            )
            .await?;
        self.env.count("chunks_uncoded");
        self.note_chunk_written(ino, chunk);
        self.drop_fragments_later(ino, chunk, coded.clone());
        Ok(())
    }

    /// Runs a cut (`ChunkTrim`, `ChunkTrimFrom`, `DropBlocks`) of `ino` that falls inside
    /// chunk `inside`: that chunk, if coded, is uncoded first; the fragments of coded
    /// chunks the cut drops go after it.
    pub(crate) async fn cut(
        self: &Arc<Self>,
        ino: InodeId,
        inside: u64,
        m: impl Fn() -> Mutation,
    ) -> Result<(), WireError> {
        // Uncoding takes the record away, so the cut runs on the next try; a chunk coded
        // again in between (not within a settle time) or a record the uncode did not
        // match is answered `Busy` (the caller retries) rather than looped on here.
        for _ in 0..CUT_TRIES {
            match self.applier.run(m()).await? {
                Outcome::Coded(c) => {
                    self.uncode(&Context::background(), ino, inside, &c).await?;
                }
                Outcome::DroppedCoded(dropped) => {
                    for (chunk, c) in dropped {
                        self.drop_fragments_later(ino, chunk, c);
                    }
                    return Ok(());
                }
                _ => return Ok(()),
            }
        }
        Err(WireError::Busy)
    }

    /// Rebuilds chunk `chunk`'s fragments that are missing, of another generation or
    /// damaged, or on servers in `lost`, onto their server or a replacement; returns
    /// whether anything was rebuilt.
    pub(crate) async fn rebuild_fragments(
        self: &Arc<Self>,
        ino: InodeId,
        chunk: u64,
        lost: &[NodeId],
    ) -> Result<bool, WireError> {
        let Some(was) = self.store.coded(ino, chunk).map_err(storage_err)? else {
            return Ok(false);
        };
        let reads = (0..was.params.total()).map(|i| self.fragment(ino, chunk, &was, i));
        let answers = futures::future::join_all(reads).await;
        // A fragment its server says it lacks or holds damaged is rebuilt there; one whose
        // server does not answer now (down a while, cut off) is left for a later round.
        let bad: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                lost.contains(&was.servers[*i])
                    || matches!(
                        r,
                        Err(WireError::NotFound | WireError::Stale | WireError::Io(_))
                    )
            })
            .map(|(i, _)| i)
            .collect();
        let got: Vec<Option<Vec<u8>>> = answers.into_iter().map(Result::ok).collect();
        if bad.is_empty() {
            return Ok(false);
        }
        let data = was
            .decode(&got)
            .map_err(|e| WireError::Unavailable(format!("chunk {chunk} of {ino}: {e}")))?;
        let fragments = was
            .codec()
            .and_then(|c| c.encode(&data))
            .map_err(|e| WireError::Io(e.to_string()))?;
        let mut now = was.clone();
        let up: Vec<NodeId> = self.cluster_code().map(|(_, up)| up).unwrap_or_default();
        for &i in &bad {
            if lost.contains(&was.servers[i]) {
                // A replacement: a server up that holds none of this chunk's fragments.
                let taken: Vec<NodeId> = now.servers.clone();
                let free: Vec<NodeId> = up.iter().copied().filter(|n| !taken.contains(n)).collect();
                let Some(to) = fragment_servers(ino, 1, &free).and_then(|v| v.first().copied())
                else {
                    // Every server up holds one already (the code spans the cluster): the
                    // chunk is coded again, with the code of the servers up now.
                    return self.recode_whole(ino, chunk, &was, &data).await;
                };
                now.servers[i] = to;
            }
            self.put_fragment(
                now.servers[i],
                ino,
                chunk,
                was.generation,
                i,
                fragments[i].clone(),
            )
            .await?;
        }
        if now != was {
            let switched = self
                .applier
                .run(Mutation::RecodeChunk {
                    ino,
                    chunk,
                    was: was.clone(),
                    now,
                })
                .await?;
            if !matches!(switched, Outcome::Switched(true)) {
                return Err(WireError::Busy);
            }
        }
        self.env.count("fragments_rebuilt");
        tracing::warn!(partition = %self.me, %ino, chunk, fragments = ?bad, "fragments rebuilt");
        Ok(true)
    }

    /// Codes chunk `chunk` again from its bytes `data` with the code of the servers up now,
    /// under a new generation, and switches its record if it is still `was`; with too few
    /// servers up for a code, puts the chunk back in copies.
    async fn recode_whole(
        self: &Arc<Self>,
        ino: InodeId,
        chunk: u64,
        was: &CodedChunk,
        data: &[u8],
    ) -> Result<bool, WireError> {
        let Some((params, up)) = self.cluster_code() else {
            // Too few servers up for any code: the chunk goes back to full copies.
            self.applier
                .run(Mutation::UncodeChunk {
                    ino,
                    chunk,
                    generation: was.generation,
                    data: data.to_vec(),
                })
                .await?;
            self.env.count("chunks_uncoded");
            self.drop_fragments_later(ino, chunk, was.clone());
            tracing::warn!(partition = %self.me, %ino, chunk, "too few servers up for a code: chunk back in copies");
            return Ok(true);
        };
        let set = fragment_servers(ino, params.total(), &up)
            .ok_or_else(|| WireError::Unavailable("too few servers up to code".into()))?;
        let now = CodedChunk {
            generation: new_generation(ino, chunk, self.env.server_id(), self.env.now_ns()),
            params,
            data_bytes: was.data_bytes,
            servers: CodedChunk::rotated(chunk, &set),
        };
        let fragments = now
            .codec()
            .and_then(|c| c.encode(data))
            .map_err(|e| WireError::Io(e.to_string()))?;
        self.put_all(ino, chunk, &now, fragments).await?;
        let switched = self
            .applier
            .run(Mutation::RecodeChunk {
                ino,
                chunk,
                was: was.clone(),
                now: now.clone(),
            })
            .await?;
        if !matches!(switched, Outcome::Switched(true)) {
            self.drop_fragments_later(ino, chunk, now);
            return Err(WireError::Busy);
        }
        self.drop_fragments_later(ino, chunk, was.clone());
        self.env.count("chunks_recoded");
        tracing::warn!(partition = %self.me, %ino, chunk, k = params.k, m = params.m, "chunk coded again over the servers up");
        Ok(true)
    }

    /// Servers whose fragments are rebuilt elsewhere: down for longer than the down grace
    /// (as copies of partitions are then), leaving (at once, while they still serve the
    /// fragments to read), or no longer in the map.
    fn lost_servers(&self) -> Vec<NodeId> {
        let st = self.state();
        let grace = self.env.config().down_grace;
        let Ok(mut down) = self.coding.down_since.lock() else {
            return Vec::new();
        };
        let now = Instant::now();
        let up: Vec<NodeId> = st
            .map
            .nodes
            .iter()
            .filter(|n| n.state != NodeState::Down)
            .map(|n| n.id)
            .collect();
        down.retain(|n, _| !up.contains(n));
        for n in st.map.nodes.iter().filter(|n| n.state == NodeState::Down) {
            down.entry(n.id).or_insert(now);
        }
        let mut lost: Vec<NodeId> = down
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= grace)
            .map(|(n, _)| *n)
            .collect();
        lost.extend(
            st.map
                .nodes
                .iter()
                .filter(|n| n.state == NodeState::Leaving)
                .map(|n| n.id),
        );
        if let Ok(mut seen) = self.coding.seen.lock() {
            seen.extend(st.map.nodes.iter().map(|n| n.id));
            lost.extend(
                seen.iter()
                    .filter(|s| !st.map.nodes.iter().any(|n| n.id == **s)),
            );
        }
        lost
    }

    /// Rebuilds the fragments this partition's coded chunks had on lost servers (down past
    /// the grace, or no longer in the map).
    async fn rebuild_lost(self: &Arc<Self>) -> Result<(), WireError> {
        let lost = self.lost_servers();
        let st = self.state();
        let epoch = st.map.epoch;
        let members: Vec<NodeId> = st.map.nodes.iter().map(|n| n.id).collect();
        drop(st);
        let looked = self
            .coding
            .looked_at
            .load(std::sync::atomic::Ordering::Acquire);
        if lost.is_empty() && looked == epoch {
            return Ok(());
        }
        let named_lost = |s: &NodeId| lost.contains(s) || !members.contains(s);
        let mut gone: Vec<NodeId> = lost.clone();
        let mut after = None;
        let mut failed = 0;
        loop {
            let page = self
                .store
                .coded_chunks(after, RECORDS_PER_PAGE)
                .map_err(storage_err)?;
            let Some(last) = page.last() else {
                // Every record looked at under this map: not looked at again until the
                // next, unless a rebuild failed (then every round).
                if failed == 0 {
                    self.coding
                        .looked_at
                        .store(epoch, std::sync::atomic::Ordering::Release);
                }
                return Ok(());
            };
            after = Some((last.0, last.1));
            for (ino, chunk, c) in page {
                if c.servers.iter().any(named_lost) {
                    gone.extend(c.servers.iter().filter(|s| !members.contains(s)));
                    gone.sort_unstable();
                    gone.dedup();
                    // One chunk that cannot be rebuilt now does not hold up the others.
                    if let Err(e) = self.rebuild_fragments(ino, chunk, &gone).await {
                        failed += 1;
                        tracing::debug!(partition = %self.me, %ino, chunk, "fragments not rebuilt yet: {e}");
                    }
                }
            }
        }
    }
}
