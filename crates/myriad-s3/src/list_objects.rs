//! ListObjectsV2, ListObjects (v1) and ListObjectVersions (versioning is never enabled:
//! each current object once, as version `null`): the directory listings `listing` orders,
//! asked of the cluster and written out as S3 answers.

use myriad_client::proto::validate_path;
use myriad_client::{Client, DirEntry, FileKind, FsError};
use s3s::dto::{
    CommonPrefix, EncodingType, ListObjectVersionsInput, ListObjectVersionsOutput,
    ListObjectsInput, ListObjectsOutput, ListObjectsV2Input, ListObjectsV2Output, Object,
    ObjectStorageClass, ObjectVersion, ObjectVersionStorageClass,
};
use s3s::{S3Result, s3_error};

use crate::buckets;
use crate::errors::object_error;
use crate::etag::etag_value;
use crate::keys::bucket_path;
use crate::listing::{
    Entry, EntryKind, Item, Lister, Marker, ObjectMeta, Page, one_level, split_prefix, url_encode,
    walk_page,
};
use crate::lookup::timestamp;

/// S3's default and largest page.
const MAX_KEYS: i32 = 1000;

/// Lists directories of one bucket.
struct DirLister<'a> {
    client: &'a Client,
    bucket_path: &'a str,
}

impl Lister for DirLister<'_> {
    async fn list(&self, key_dir: &str) -> S3Result<Option<Vec<Entry>>> {
        let path = match key_dir.strip_suffix('/') {
            None => self.bucket_path.to_string(),
            Some(dir) => format!("{}/{dir}", self.bucket_path),
        };
        // A prefix no key can have ("a//", "../") names no directory.
        if validate_path(&path).is_err() {
            return Ok(None);
        }
        match self.client.readdir(&path).await {
            Ok(entries) => Ok(Some(entries.into_iter().map(entry_of).collect())),
            Err(FsError::NotFound | FsError::NotADirectory) => Ok(None),
            Err(e) => Err(object_error(e)),
        }
    }
}

fn entry_of(e: DirEntry) -> Entry {
    let kind = match e.inode.kind {
        FileKind::File => EntryKind::Object(ObjectMeta {
            size: e.inode.size,
            mtime_ns: e.inode.mtime_ns,
            etag: etag_value(&e.inode),
        }),
        FileKind::Directory => EntryKind::Dir,
        _ => EntryKind::Other,
    };
    Entry { name: e.name, kind }
}

/// One page of the keys of `bucket` starting with `prefix`, after `marker`.
async fn page(
    client: &Client,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    marker: Option<Marker>,
    max_keys: Option<i32>,
) -> S3Result<Page> {
    let max_keys = match max_keys {
        None => MAX_KEYS,
        Some(n) if n < 0 => {
            return Err(s3_error!(InvalidArgument, "max-keys must not be negative"));
        }
        Some(n) => n.min(MAX_KEYS),
    };
    let max_keys = usize::try_from(max_keys).unwrap_or(0);
    let bucket_dir = bucket_path(bucket)?;
    let lister = DirLister {
        client,
        bucket_path: &bucket_dir,
    };
    let page = if delimiter == Some("/") {
        // One listing of the prefix's directory is the whole answer.
        let entries = lister
            .list(split_prefix(prefix).0)
            .await?
            .unwrap_or_default();
        Page::of(one_level(prefix, entries, marker.as_ref()), max_keys)
    } else {
        walk_page(&lister, prefix, delimiter, marker, max_keys).await?
    };
    if page.items.is_empty() {
        // Nothing found: say so only if the bucket is there.
        buckets::check(client, bucket).await?;
    }
    Ok(page)
}

/// Contents and common prefixes of a page, keys percent-encoded if `url`.
fn write_items(items: Vec<Item>, url: bool) -> (Vec<Object>, Vec<CommonPrefix>) {
    let enc = |s: String| if url { url_encode(&s) } else { s };
    let mut objects = Vec::new();
    let mut prefixes = Vec::new();
    for item in items {
        match item {
            Item::Object { key, meta } => objects.push(Object {
                e_tag: Some(s3s::dto::ETag::Strong(meta.etag)),
                key: Some(enc(key)),
                last_modified: Some(timestamp(meta.mtime_ns)),
                size: Some(i64::try_from(meta.size).unwrap_or(i64::MAX)),
                storage_class: Some(ObjectStorageClass::from_static(
                    ObjectStorageClass::STANDARD,
                )),
                ..Default::default()
            }),
            Item::Prefix(p) => prefixes.push(CommonPrefix {
                prefix: Some(enc(p)),
            }),
        }
    }
    (objects, prefixes)
}

fn wants_url(encoding: Option<&EncodingType>) -> S3Result<bool> {
    match encoding.map(EncodingType::as_str) {
        None => Ok(false),
        Some(EncodingType::URL) => Ok(true),
        Some(_) => Err(s3_error!(InvalidArgument, "encoding-type must be \"url\"")),
    }
}

fn nonempty(s: Option<&String>) -> Option<&str> {
    s.map(String::as_str).filter(|s| !s.is_empty())
}

pub async fn v2(client: &Client, input: ListObjectsV2Input) -> S3Result<ListObjectsV2Output> {
    let url = wants_url(input.encoding_type.as_ref())?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let delimiter = nonempty(input.delimiter.as_ref());
    let marker = match (
        &input.continuation_token,
        nonempty(input.start_after.as_ref()),
    ) {
        (Some(token), _) => Some(Marker::from_token(token)?),
        (None, Some(after)) => Some(Marker {
            key: after.to_string(),
            past_prefix: false,
        }),
        (None, None) => None,
    };
    let page = page(
        client,
        &input.bucket,
        &prefix,
        delimiter,
        marker,
        input.max_keys,
    )
    .await?;
    let next = page.next_token();
    let key_count = i32::try_from(page.items.len()).unwrap_or(i32::MAX);
    let (contents, common_prefixes) = write_items(page.items, url);
    let enc = |s: String| if url { url_encode(&s) } else { s };
    Ok(ListObjectsV2Output {
        name: Some(input.bucket),
        prefix: Some(enc(prefix)),
        delimiter: input.delimiter.map(enc),
        start_after: input.start_after.map(enc),
        max_keys: Some(input.max_keys.unwrap_or(MAX_KEYS).clamp(0, MAX_KEYS)),
        key_count: Some(key_count),
        continuation_token: input.continuation_token,
        is_truncated: Some(page.truncated),
        next_continuation_token: next,
        contents: Some(contents),
        common_prefixes: Some(common_prefixes),
        encoding_type: input.encoding_type,
        ..Default::default()
    })
}

/// A v1-style marker (ListObjects' `marker`, ListObjectVersions' `key-marker`). One ending
/// in the delimiter is a common prefix this gateway gave as the next marker (no key ends in
/// "/"): the listing continues past every key under it.
fn key_marker(given: Option<&String>, delimiter: Option<&str>) -> Option<Marker> {
    nonempty(given).map(|m| Marker {
        key: m.to_string(),
        past_prefix: delimiter.is_some_and(|d| m.ends_with(d)),
    })
}

/// Where the next v1-style page starts: the last key or prefix of a truncated page.
fn next_key_marker(page: &Page) -> Option<String> {
    match (page.truncated, page.items.last()) {
        (true, Some(Item::Object { key, .. })) => Some(key.clone()),
        (true, Some(Item::Prefix(p))) => Some(p.clone()),
        _ => None,
    }
}

pub async fn v1(client: &Client, input: ListObjectsInput) -> S3Result<ListObjectsOutput> {
    let url = wants_url(input.encoding_type.as_ref())?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let delimiter = nonempty(input.delimiter.as_ref());
    let marker = key_marker(input.marker.as_ref(), delimiter);
    let page = page(
        client,
        &input.bucket,
        &prefix,
        delimiter,
        marker,
        input.max_keys,
    )
    .await?;
    let next_marker = next_key_marker(&page);
    let (contents, common_prefixes) = write_items(page.items, url);
    let enc = |s: String| if url { url_encode(&s) } else { s };
    Ok(ListObjectsOutput {
        name: Some(input.bucket),
        prefix: Some(enc(prefix)),
        delimiter: input.delimiter.map(enc),
        marker: input.marker.map(enc),
        next_marker: next_marker.map(enc),
        max_keys: Some(input.max_keys.unwrap_or(MAX_KEYS).clamp(0, MAX_KEYS)),
        is_truncated: Some(page.truncated),
        contents: Some(contents),
        common_prefixes: Some(common_prefixes),
        encoding_type: input.encoding_type,
        ..Default::default()
    })
}

/// The one version of every object: `null`, the latest.
const NULL_VERSION: &str = "null";

pub async fn versions(
    client: &Client,
    input: ListObjectVersionsInput,
) -> S3Result<ListObjectVersionsOutput> {
    let url = wants_url(input.encoding_type.as_ref())?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let delimiter = nonempty(input.delimiter.as_ref());
    // Every key has one version, so a key marker alone says where the last page ended.
    let marker = key_marker(input.key_marker.as_ref(), delimiter);
    let page = page(
        client,
        &input.bucket,
        &prefix,
        delimiter,
        marker,
        input.max_keys,
    )
    .await?;
    let next_key_marker = next_key_marker(&page);
    let (objects, common_prefixes) = write_items(page.items, url);
    let versions = objects
        .into_iter()
        .map(|o| ObjectVersion {
            e_tag: o.e_tag,
            is_latest: Some(true),
            key: o.key,
            last_modified: o.last_modified,
            size: o.size,
            storage_class: Some(ObjectVersionStorageClass::from_static(
                ObjectVersionStorageClass::STANDARD,
            )),
            version_id: Some(NULL_VERSION.into()),
            ..Default::default()
        })
        .collect();
    let enc = |s: String| if url { url_encode(&s) } else { s };
    Ok(ListObjectVersionsOutput {
        name: Some(input.bucket),
        prefix: Some(enc(prefix)),
        delimiter: input.delimiter.map(enc),
        key_marker: input.key_marker.map(enc),
        version_id_marker: input.version_id_marker,
        next_version_id_marker: next_key_marker.as_ref().map(|_| NULL_VERSION.into()),
        next_key_marker: next_key_marker.map(enc),
        max_keys: Some(input.max_keys.unwrap_or(MAX_KEYS).clamp(0, MAX_KEYS)),
        is_truncated: Some(page.truncated),
        versions: Some(versions),
        common_prefixes: Some(common_prefixes),
        encoding_type: input.encoding_type,
        ..Default::default()
    })
}
