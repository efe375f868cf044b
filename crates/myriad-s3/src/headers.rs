//! An object's stored headers and metadata between S3's requests and answers and its record:
//! taken from a PUT, CreateMultipartUpload or CopyObject (`REPLACE`), given back by GET and
//! HEAD (with a GET's `response-*` overrides), and the time checks of conditional requests.

use std::collections::BTreeMap;

use s3s::dto::{Metadata, Timestamp, TimestampFormat};
use s3s::{S3Result, s3_error};

use crate::record::{Headers, META_BYTES_MAX, ObjectRecord, RECORD_BYTES_MAX};

/// What S3 calls an object's content type when none was given.
pub const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

/// The headers a request (PutObjectInput, CreateMultipartUploadInput, CopyObjectInput:
/// the same field names) asks to store.
macro_rules! headers_of {
    ($input:expr) => {
        $crate::record::Headers {
            content_type: $input.content_type.clone(),
            content_encoding: $input.content_encoding.clone(),
            content_language: $input.content_language.clone(),
            content_disposition: $input.content_disposition.clone(),
            cache_control: $input.cache_control.clone(),
            expires: $input.expires.as_ref().and_then($crate::headers::http_date),
        }
    };
}
pub(crate) use headers_of;

/// Fills the header fields of a GET or HEAD answer from `shown` (`Shown`).
macro_rules! answer_with {
    ($output:expr, $shown:expr) => {{
        let s = $shown;
        $output.content_type = Some(
            s.headers
                .content_type
                .unwrap_or_else(|| $crate::headers::DEFAULT_CONTENT_TYPE.to_string()),
        );
        $output.content_encoding = s.headers.content_encoding;
        $output.content_language = s.headers.content_language;
        $output.content_disposition = s.headers.content_disposition;
        $output.cache_control = s.headers.cache_control;
        $output.expires = s.expires;
        $output.metadata = s.metadata;
    }};
}
pub(crate) use answer_with;

/// A record for a new object: `headers`, and `metadata` checked against S3's limit.
pub fn new_record(headers: Headers, metadata: Option<&Metadata>) -> S3Result<ObjectRecord> {
    let meta: BTreeMap<String, String> = metadata
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    let record = ObjectRecord {
        headers,
        meta,
        ..ObjectRecord::default()
    };
    if record.meta_bytes() > META_BYTES_MAX {
        return Err(s3_error!(
            MetadataTooLarge,
            "your metadata headers exceed the maximum allowed metadata size ({META_BYTES_MAX} bytes)"
        ));
    }
    if record.encode().len() > RECORD_BYTES_MAX {
        return Err(s3_error!(
            MetadataTooLarge,
            "the object's headers and metadata exceed {RECORD_BYTES_MAX} bytes"
        ));
    }
    Ok(record)
}

/// What a GET or HEAD answers with from a record.
pub struct Shown {
    pub headers: Headers,
    pub expires: Option<Timestamp>,
    pub metadata: Option<Metadata>,
}

/// GET's and HEAD's `response-*` query parameters, which override the stored headers.
#[derive(Default)]
pub struct Overrides {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    pub content_disposition: Option<String>,
    pub cache_control: Option<String>,
    pub expires: Option<Timestamp>,
}

macro_rules! overrides_of {
    ($input:expr) => {
        $crate::headers::Overrides {
            content_type: $input.response_content_type.clone(),
            content_encoding: $input.response_content_encoding.clone(),
            content_language: $input.response_content_language.clone(),
            content_disposition: $input.response_content_disposition.clone(),
            cache_control: $input.response_cache_control.clone(),
            expires: $input.response_expires.clone(),
        }
    };
}
pub(crate) use overrides_of;

pub fn shown(record: ObjectRecord, o: Overrides) -> Shown {
    let h = record.headers;
    let expires = o
        .expires
        .or_else(|| h.expires.as_deref().and_then(parse_http_date));
    let headers = Headers {
        content_type: o.content_type.or(h.content_type),
        content_encoding: o.content_encoding.or(h.content_encoding),
        content_language: o.content_language.or(h.content_language),
        content_disposition: o.content_disposition.or(h.content_disposition),
        cache_control: o.cache_control.or(h.cache_control),
        expires: None,
    };
    let metadata = (!record.meta.is_empty()).then(|| record.meta.into_iter().collect());
    Shown {
        headers,
        expires,
        metadata,
    }
}

pub fn http_date(t: &Timestamp) -> Option<String> {
    let mut out = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

fn parse_http_date(s: &str) -> Option<Timestamp> {
    Timestamp::parse(TimestampFormat::HttpDate, s).ok()
}

/// Seconds since the Unix epoch of `t` (HTTP dates have no finer unit).
pub fn unix_seconds(t: &Timestamp) -> i64 {
    time::OffsetDateTime::from(t.clone()).unix_timestamp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_headers_are_shown_unless_overridden() {
        let mut r = new_record(
            Headers {
                content_type: Some("text/csv".into()),
                cache_control: Some("no-cache".into()),
                expires: Some("Wed, 21 Oct 2026 07:28:00 GMT".into()),
                ..Headers::default()
            },
            Some(
                &[("Color".to_string(), "blue".to_string())]
                    .into_iter()
                    .collect(),
            ),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        r.upload = None;
        let s = shown(
            r.clone(),
            Overrides {
                cache_control: Some("max-age=5".into()),
                ..Overrides::default()
            },
        );
        assert_eq!(s.headers.content_type.as_deref(), Some("text/csv"));
        assert_eq!(s.headers.cache_control.as_deref(), Some("max-age=5"));
        let expires = s.expires.unwrap_or_else(|| panic!("no expiry"));
        assert_eq!(unix_seconds(&expires), 1_792_567_680);
        assert_eq!(
            http_date(&expires).as_deref(),
            Some("Wed, 21 Oct 2026 07:28:00 GMT")
        );
        let meta = s.metadata.unwrap_or_default();
        assert_eq!(meta.get("color").map(String::as_str), Some("blue"));
    }

    #[test]
    fn headers_too_long_to_keep_are_refused_before_anything_is_written() {
        let long = Headers {
            content_disposition: Some("x".repeat(RECORD_BYTES_MAX)),
            ..Headers::default()
        };
        let e = new_record(long, None).err();
        assert_eq!(
            e.map(|e| e.code().as_str().to_string()).as_deref(),
            Some("MetadataTooLarge")
        );
    }

    #[test]
    fn metadata_over_s3s_limit_is_refused() {
        let big: Metadata = [("k".to_string(), "v".repeat(META_BYTES_MAX))]
            .into_iter()
            .collect();
        let e = new_record(Headers::default(), Some(&big)).err();
        assert_eq!(
            e.map(|e| e.code().as_str().to_string()).as_deref(),
            Some("MetadataTooLarge")
        );
    }
}
