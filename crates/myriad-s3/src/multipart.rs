//! Multipart uploads. Each upload is a directory `UPLOADS_DIR/<id>` (mode 0700, owned by
//! the uploader) holding one file per part, named by its number; the upload's directory
//! carries the record (headers, metadata) the object will get. Completing copies the parts
//! in the order given into a temporary file beside the key, on the servers (the bytes do
//! not pass through the gateway), writes its record (the multipart ETag, the upload id)
//! and renames it over the key; then the upload's directory goes.
//!
//! An upload id is 32 random hex digits followed by 16 hex digits of a hash of the bucket
//! and key, so a request naming another object's upload is refused without a lookup.

use myriad_client::proto::XattrMode;
use myriad_client::{Client, DirEntry, FileHandle, FileKind, FsError, Inode};
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
    CompleteMultipartUploadOutput, CreateMultipartUploadInput, CreateMultipartUploadOutput,
    ListPartsInput, ListPartsOutput, Part, UploadPartInput, UploadPartOutput,
};
use s3s::{S3Error, S3Result, TrailingHeaders, s3_error};
use xxhash_rust::xxh3::xxh3_64;

use crate::body::Pieces;
use crate::buckets;
use crate::checksums::{answer_checksums, wanted_of};
use crate::errors::object_error;
use crate::etag::{etag, etag_value, matches, multipart};
use crate::headers::{headers_of, new_record};
use crate::keys::{UPLOADS_DIR, bucket_path, object_path, temp_beside};
use crate::lookup::{no_such_bucket, timestamp};
use crate::record::{ObjectRecord, RECORD_XATTR};
use crate::store::{Base, Put, copy_into, create_temp, finish_beside, keep_record, write_object};

/// S3's range of part numbers.
const PART_NUMBER_MAX: i32 = 10_000;
/// S3's smallest part but the last.
const PART_BYTES_MIN: u64 = 5 * 1024 * 1024;

/// Mode of the uploads directory: anyone may make an upload in it, only its owner remove it.
pub const UPLOADS_DIR_MODE: u32 = 0o1777;
const UPLOAD_MODE: u32 = 0o700;

pub fn no_such_upload() -> S3Error {
    s3_error!(
        NoSuchUpload,
        "the upload does not exist (completed, aborted, or for another key)"
    )
}

fn object_hash(bucket: &str, key: &str) -> u64 {
    xxh3_64(format!("{bucket}\0{key}").as_bytes())
}

/// The directory of upload `id` of `key` in `bucket`, or NoSuchUpload if the id is not one
/// this gateway gives for that object.
pub fn upload_dir(bucket: &str, key: &str, id: &str) -> S3Result<String> {
    let well_formed = id.len() == 48 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !well_formed || id[32..] != format!("{:016x}", object_hash(bucket, key)) {
        return Err(no_such_upload());
    }
    Ok(format!("{UPLOADS_DIR}/{id}"))
}

pub fn part_name(number: i32) -> String {
    format!("{number:05}")
}

fn part_number(name: &str) -> Option<i32> {
    let n: i32 = name.parse().ok()?;
    (part_name(n) == name).then_some(n)
}

pub fn check_part_number(n: i32) -> S3Result<()> {
    if (1..=PART_NUMBER_MAX).contains(&n) {
        Ok(())
    } else {
        Err(s3_error!(
            InvalidArgument,
            "part numbers are 1 to {PART_NUMBER_MAX}"
        ))
    }
}

/// The parts of an upload, by number.
async fn parts(client: &Client, dir: &str) -> S3Result<Vec<(i32, Inode)>> {
    let entries: Vec<DirEntry> = match client.readdir(dir).await {
        Ok(e) => e,
        Err(FsError::NotFound | FsError::NotADirectory) => return Err(no_such_upload()),
        Err(e) => return Err(object_error(e)),
    };
    let mut parts: Vec<(i32, Inode)> = entries
        .into_iter()
        .filter(|e| e.inode.kind == FileKind::File)
        .filter_map(|e| Some((part_number(&e.name)?, e.inode)))
        .collect();
    parts.sort_by_key(|(n, _)| *n);
    Ok(parts)
}

/// Removes an upload's directory and everything in it.
async fn remove_upload(client: &Client, dir: &str) -> S3Result<()> {
    let entries = match client.readdir(dir).await {
        Ok(e) => e,
        Err(FsError::NotFound | FsError::NotADirectory) => return Err(no_such_upload()),
        Err(e) => return Err(object_error(e)),
    };
    for e in entries {
        match client.unlink(&format!("{dir}/{}", e.name)).await {
            Ok(()) | Err(FsError::NotFound) => {}
            Err(err) => return Err(object_error(err)),
        }
    }
    match client.rmdir(dir).await {
        Ok(()) | Err(FsError::NotFound) => Ok(()),
        Err(e) => Err(object_error(e)),
    }
}

pub async fn create(
    client: &Client,
    input: CreateMultipartUploadInput,
) -> S3Result<CreateMultipartUploadOutput> {
    // Refuse a key that cannot be a path now, not at completion.
    object_path(&input.bucket, &input.key)?;
    let record = new_record(headers_of!(input), input.metadata.as_ref())?;
    crate::objects::check_storage_class(input.storage_class.as_ref())?;
    buckets::check(client, &input.bucket).await?;
    let id = format!(
        "{:032x}{:016x}",
        rand::random::<u128>(),
        object_hash(&input.bucket, &input.key)
    );
    let dir = format!("{UPLOADS_DIR}/{id}");
    let made = match client.mkdir(&dir, UPLOAD_MODE).await {
        Err(FsError::NotFound) => {
            // The uploads directory is made at start; by this user if it went since.
            match client.mkdir(UPLOADS_DIR, UPLOADS_DIR_MODE).await {
                Ok(_) | Err(FsError::AlreadyExists) => {}
                Err(e) => return Err(object_error(e)),
            }
            client.mkdir(&dir, UPLOAD_MODE).await
        }
        other => other,
    };
    made.map_err(object_error)?;
    if record != ObjectRecord::default() {
        client
            .set_xattr(
                &dir,
                RECORD_XATTR,
                Some(&record.encode()),
                XattrMode::default(),
            )
            .await
            .map_err(object_error)?;
    }
    Ok(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(id),
        ..Default::default()
    })
}

pub async fn upload_part(
    client: &Client,
    input: UploadPartInput,
    trailer: Option<TrailingHeaders>,
) -> S3Result<UploadPartOutput> {
    check_part_number(input.part_number)?;
    let dir = upload_dir(&input.bucket, &input.key, &input.upload_id)?;
    let base = Base {
        path: &dir,
        missing: no_such_upload,
    };
    let path = format!("{dir}/{}", part_name(input.part_number));
    let put = Put {
        content_md5: input.content_md5.clone(),
        checksums: wanted_of!(input),
        trailer,
        ..Put::default()
    };
    let mut pieces = Pieces::new(input.body).with_checksums(put.checksums.hasher());
    let inode = write_object(client, &base, &path, &mut pieces, &put).await?;
    let mut output = UploadPartOutput {
        e_tag: Some(etag(&inode)),
        ..Default::default()
    };
    answer_checksums!(output, &ObjectRecord::of(&inode).checksums);
    Ok(output)
}

pub async fn list_parts(client: &Client, input: ListPartsInput) -> S3Result<ListPartsOutput> {
    let dir = upload_dir(&input.bucket, &input.key, &input.upload_id)?;
    let after = input.part_number_marker.unwrap_or(0);
    let max = input.max_parts.unwrap_or(1000).clamp(0, 1000);
    let all = parts(client, &dir).await?;
    let mut listed: Vec<Part> = Vec::new();
    let mut truncated = false;
    for (n, inode) in all.into_iter().filter(|(n, _)| *n > after) {
        if listed.len() == usize::try_from(max).unwrap_or(0) {
            truncated = true;
            break;
        }
        listed.push(Part {
            e_tag: Some(etag(&inode)),
            last_modified: Some(timestamp(inode.mtime_ns)),
            part_number: Some(n),
            size: Some(i64::try_from(inode.size).unwrap_or(i64::MAX)),
            ..Default::default()
        });
    }
    Ok(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        max_parts: Some(max),
        part_number_marker: input.part_number_marker,
        next_part_number_marker: if truncated {
            listed.last().and_then(|p| p.part_number)
        } else {
            None
        },
        is_truncated: Some(truncated),
        parts: Some(listed),
        ..Default::default()
    })
}

pub async fn abort(
    client: &Client,
    input: AbortMultipartUploadInput,
) -> S3Result<AbortMultipartUploadOutput> {
    let dir = upload_dir(&input.bucket, &input.key, &input.upload_id)?;
    remove_upload(client, &dir).await?;
    Ok(AbortMultipartUploadOutput::default())
}

pub async fn complete(
    client: &Client,
    input: CompleteMultipartUploadInput,
) -> S3Result<CompleteMultipartUploadOutput> {
    let dir = upload_dir(&input.bucket, &input.key, &input.upload_id)?;
    let path = object_path(&input.bucket, &input.key)?;
    let given = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default();
    if given.is_empty() {
        return Err(s3_error!(
            MalformedXML,
            "a completion names at least one part"
        ));
    }
    let stored = match parts(client, &dir).await {
        Ok(p) => p,
        Err(e) => return completed_before(client, &input.upload_id, path, e).await,
    };
    let mut chosen: Vec<(i32, Inode)> = Vec::with_capacity(given.len());
    for part in &given {
        let n = part
            .part_number
            .ok_or_else(|| s3_error!(InvalidPart, "a part has no part number"))?;
        if chosen.last().is_some_and(|(prev, _)| *prev >= n) {
            return Err(s3_error!(
                InvalidPartOrder,
                "parts must be listed in ascending order of part number"
            ));
        }
        let Some((_, inode)) = stored.iter().find(|(m, _)| *m == n) else {
            return Err(s3_error!(InvalidPart, "part {n} was not uploaded"));
        };
        if let Some(tag) = &part.e_tag
            && !matches(tag, &etag_value(inode))
        {
            return Err(s3_error!(InvalidPart, "part {n}'s ETag does not match"));
        }
        chosen.push((n, inode.clone()));
    }
    if let Some((n, _)) = chosen[..chosen.len() - 1]
        .iter()
        .find(|(_, i)| i.size < PART_BYTES_MIN)
    {
        return Err(s3_error!(
            EntityTooSmall,
            "part {n} is smaller than 5 MiB, the least for any part but the last"
        ));
    }
    let mut record = match client.stat(&dir).await {
        Ok(i) => ObjectRecord::of(&i),
        Err(e) => return Err(object_error(e)),
    };
    record.upload = Some(input.upload_id.clone());
    let upload = Upload {
        dir: &dir,
        record: &record,
    };
    let inode = assemble(client, &input.bucket, &upload, &path, &chosen).await?;
    remove_upload(client, &dir).await?;
    Ok(CompleteMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        e_tag: Some(etag(&inode)),
        location: Some(path),
        ..Default::default()
    })
}

/// The answer to a completion of an upload that is gone (`gone`): as the first answer if
/// it was completed into the object now at `path` (a client's retry), else `gone`.
async fn completed_before(
    client: &Client,
    id: &str,
    path: String,
    gone: S3Error,
) -> S3Result<CompleteMultipartUploadOutput> {
    let Ok(inode) = client.stat(&path).await else {
        return Err(gone);
    };
    if inode.kind != FileKind::File || ObjectRecord::of(&inode).upload.as_deref() != Some(id) {
        return Err(gone);
    }
    Ok(CompleteMultipartUploadOutput {
        e_tag: Some(etag(&inode)),
        location: Some(path),
        ..Default::default()
    })
}

/// An upload being completed: its directory and the record its object gets.
struct Upload<'a> {
    dir: &'a str,
    record: &'a ObjectRecord,
}

/// Concatenates `parts` of `upload` into a new file renamed over `path`.
async fn assemble(
    client: &Client,
    bucket: &str,
    upload: &Upload<'_>,
    path: &str,
    parts: &[(i32, Inode)],
) -> S3Result<Inode> {
    let bucket_dir = bucket_path(bucket)?;
    let base = Base {
        path: &bucket_dir,
        missing: no_such_bucket,
    };
    let temp = temp_beside(path);
    let target = create_temp(client, &base, &temp, &[]).await?;
    let filled = async {
        let mut at = 0u64;
        let mut last = target.inode.clone();
        for (n, inode) in parts {
            let source = FileHandle {
                path: format!("{}/{}", upload.dir, part_name(*n)),
                inode: inode.clone(),
                opened: false,
            };
            // An empty part copies nothing and says nothing of the target: `last` stays.
            if inode.size > 0 {
                last = copy_into(client, (&source, 0, inode.size), (&target, at)).await?;
            }
            at += inode.size;
        }
        let tags: Vec<String> = parts.iter().map(|(_, i)| etag_value(i)).collect();
        keep_record(client, &temp, upload.record, Some(multipart(&tags)), &last).await
    }
    .await;
    finish_beside(client, &temp, path, filled, false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_ids_belong_to_one_object() {
        let id = format!("{:032x}{:016x}", 7u128, object_hash("b", "k/x"));
        assert_eq!(
            upload_dir("b", "k/x", &id).unwrap_or_else(|e| panic!("{e:?}")),
            format!("{UPLOADS_DIR}/{id}")
        );
        assert!(upload_dir("b", "k/y", &id).is_err());
        assert!(upload_dir("c", "k/x", &id).is_err());
        for bad in [
            "",
            "../../etc",
            &id[..47],
            &format!("{}/", &id[..47]),
            &id.to_uppercase(),
        ] {
            assert!(upload_dir("b", "k/x", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn part_names_are_their_numbers() {
        assert_eq!(part_name(7), "00007");
        assert_eq!(part_number("00007"), Some(7));
        assert_eq!(part_number("10000"), Some(10_000));
        assert_eq!(part_number("7"), None);
        assert_eq!(part_number(".myriad-s3-tmp.00"), None);
    }
}
