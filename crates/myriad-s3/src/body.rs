//! Object bodies in pieces, so that no big object is held whole in memory: a request body
//! is cut into pieces of `PIECE_BYTES` as it arrives, and a big GET is answered by a task
//! reading one piece ahead of the client.

use bytes::Bytes;
use futures::StreamExt;
use myriad_client::proto::limits::IO_BYTES_MAX;
use myriad_client::{Client, FileHandle, Inode};
use s3s::checksum::ChecksumHasher;
use s3s::dto::{Checksum, StreamingBlob};
use s3s::{S3Error, S3Result};

use crate::errors::{body_error, object_error};
use crate::etag::Md5Sum;

/// The most bytes one read or write request moves (the client's own limit, 4 MiB): objects
/// up to this size are one request each way, bigger ones go in pieces of this size.
pub const PIECE_BYTES: usize = IO_BYTES_MAX as usize;

/// Pieces of GET answers buffered ahead of a slow client, per request.
const PIECES_AHEAD: usize = 1;

/// A request body, cut into pieces of `PIECE_BYTES` (the last one shorter), hashed as they
/// are handed out.
pub struct Pieces {
    body: Option<StreamingBlob>,
    /// Bytes received past the last piece handed out.
    spare: Bytes,
    md5: Md5Sum,
    /// The additional checksums asked for, until the body is all read; then their values.
    checksums: Option<ChecksumHasher>,
    computed: Option<Checksum>,
}

impl Pieces {
    pub fn new(body: Option<StreamingBlob>) -> Pieces {
        Pieces {
            body,
            spare: Bytes::new(),
            md5: Md5Sum::default(),
            checksums: None,
            computed: None,
        }
    }

    /// Pieces also hashed with `hasher` (S3's additional checksums).
    pub fn with_checksums(mut self, hasher: ChecksumHasher) -> Pieces {
        self.checksums = Some(hasher);
        self
    }

    /// The additional checksums of the whole body (call once `next` has answered `None`).
    pub fn checksums(&mut self) -> Checksum {
        if let Some(h) = self.checksums.take() {
            self.computed = Some(h.finalize());
        }
        self.computed.clone().unwrap_or_default()
    }

    /// The next piece, `None` once the body is all read.
    pub async fn next(&mut self) -> S3Result<Option<Vec<u8>>> {
        let piece = self.next_unhashed().await?;
        if let Some(p) = &piece {
            self.md5.update(p);
            if let Some(h) = &mut self.checksums {
                h.update(p);
            }
        }
        Ok(piece)
    }

    /// The MD5 of the pieces handed out so far (all the body, once `next` has answered
    /// `None`).
    pub fn md5(&self) -> [u8; 16] {
        self.md5.clone().finish()
    }

    async fn next_unhashed(&mut self) -> S3Result<Option<Vec<u8>>> {
        let mut piece = Vec::new();
        loop {
            if !self.spare.is_empty() {
                let take = self.spare.len().min(PIECE_BYTES - piece.len());
                piece.extend_from_slice(&self.spare.split_to(take));
                if piece.len() == PIECE_BYTES {
                    return Ok(Some(piece));
                }
            }
            let Some(body) = self.body.as_mut() else {
                return Ok((!piece.is_empty()).then_some(piece));
            };
            match body.next().await {
                Some(Ok(bytes)) => self.spare = bytes,
                Some(Err(e)) => return Err(body_error(e.as_ref())),
                None => self.body = None,
            }
        }
    }
}

/// The bytes `range` of the file at `path` (whose inode is `inode`), as a body streamed by
/// a task that reads them a piece at a time through `client` (a handle acting for the
/// request's caller); `first` holds those already read from `range.start`.
pub fn stream_file(
    client: Client,
    path: String,
    inode: Inode,
    range: std::ops::Range<u64>,
    first: Vec<u8>,
) -> StreamingBlob {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, S3Error>>(PIECES_AHEAD);
    let reader = async move {
        let handle = FileHandle {
            path,
            inode,
            opened: false,
        };
        let mut at = range.start + first.len() as u64;
        if !first.is_empty() && tx.send(Ok(Bytes::from(first))).await.is_err() {
            return;
        }
        while at < range.end {
            let len = (range.end - at).min(PIECE_BYTES as u64);
            let piece = match client.read(&handle, at, len).await {
                Ok(p) if p.is_empty() => Err(S3Error::with_message(
                    s3s::S3ErrorCode::InternalError,
                    "the object became shorter while it was read",
                )),
                Ok(p) => Ok(p),
                Err(e) => Err(object_error(e)),
            };
            let failed = piece.is_err();
            if let Ok(p) = &piece {
                at += p.len() as u64;
            }
            // A client that went away closes the channel: stop reading.
            if tx.send(piece.map(Bytes::from)).await.is_err() || failed {
                return;
            }
        }
    };
    tokio::spawn(reader);
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    StreamingBlob::wrap(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(chunks: Vec<Vec<u8>>) -> StreamingBlob {
        let s = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
        );
        StreamingBlob::wrap(s)
    }

    async fn all_pieces(chunks: Vec<Vec<u8>>) -> Vec<usize> {
        let mut p = Pieces::new(Some(blob(chunks)));
        let mut sizes = Vec::new();
        while let Some(piece) = p.next().await.unwrap_or_else(|e| panic!("{e:?}")) {
            sizes.push(piece.len());
        }
        sizes
    }

    #[tokio::test]
    async fn bodies_come_in_whole_pieces() {
        let mb = 1024 * 1024;
        assert_eq!(all_pieces(vec![]).await, Vec::<usize>::new());
        assert_eq!(all_pieces(vec![vec![1; 10], vec![2; 5]]).await, vec![15]);
        assert_eq!(
            all_pieces(vec![vec![0; 3 * mb], vec![0; 3 * mb], vec![0; 3 * mb]]).await,
            vec![PIECE_BYTES, PIECE_BYTES, 9 * mb - 2 * PIECE_BYTES]
        );
        assert_eq!(
            all_pieces(vec![vec![0; PIECE_BYTES]]).await,
            vec![PIECE_BYTES]
        );
        assert_eq!(all_pieces(vec![vec![0; 10 * mb]]).await.len(), 3);
    }

    #[tokio::test]
    async fn piece_contents_keep_their_order() {
        let mut p = Pieces::new(Some(blob(vec![b"ab".to_vec(), b"cd".to_vec()])));
        assert_eq!(
            p.next()
                .await
                .unwrap_or_else(|e| panic!("{e:?}"))
                .unwrap_or_else(|| panic!("expected some")),
            b"abcd"
        );
        assert!(p.next().await.unwrap_or_else(|e| panic!("{e:?}")).is_none());
    }
}
