//! Conditional requests (RFC 9110 section 13, as S3 applies them): `If-Match`,
//! `If-None-Match`, `If-Modified-Since` and `If-Unmodified-Since` on GET and HEAD, and
//! the `x-amz-copy-source-if-*` four on CopyObject.

use s3s::dto::{ETagCondition, Timestamp};
use s3s::{S3Result, s3_error};

use crate::headers::unix_seconds;
use crate::store::precondition_failed;

/// The conditions one request gives.
#[derive(Default)]
pub struct Conditions<'a> {
    pub if_match: Option<&'a ETagCondition>,
    pub if_none_match: Option<&'a ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
}

/// The four conditions of a request with S3's field names (GET, HEAD).
macro_rules! conditions_of {
    ($input:expr) => {
        $crate::conditions::Conditions {
            if_match: $input.if_match.as_ref(),
            if_none_match: $input.if_none_match.as_ref(),
            if_modified_since: $input.if_modified_since.as_ref(),
            if_unmodified_since: $input.if_unmodified_since.as_ref(),
        }
    };
}
pub(crate) use conditions_of;

/// Whether `c` names the object whose ETag is `etag` (`*` names any object).
pub fn names(c: &ETagCondition, etag: &str) -> bool {
    match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => crate::etag::matches(e, etag),
    }
}

/// What the conditions say of an object with this ETag and modification time.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Proceed,
    /// 412 Precondition Failed.
    Failed,
    /// 304 Not Modified (GET and HEAD).
    NotModified,
}

pub fn verdict(c: &Conditions<'_>, etag: &str, mtime_ns: i64) -> Verdict {
    let mtime_s = mtime_ns.div_euclid(1_000_000_000);
    if let Some(m) = c.if_match {
        if !names(m, etag) {
            return Verdict::Failed;
        }
    } else if let Some(t) = c.if_unmodified_since
        && mtime_s > unix_seconds(t)
    {
        return Verdict::Failed;
    }
    if let Some(m) = c.if_none_match {
        if names(m, etag) {
            return Verdict::NotModified;
        }
    } else if let Some(t) = c.if_modified_since
        && mtime_s <= unix_seconds(t)
    {
        return Verdict::NotModified;
    }
    Verdict::Proceed
}

/// The answer a GET or HEAD gives when the conditions do not let it proceed.
pub fn check_read(c: &Conditions<'_>, etag: &str, mtime_ns: i64) -> S3Result<()> {
    match verdict(c, etag, mtime_ns) {
        Verdict::Proceed => Ok(()),
        Verdict::Failed => Err(precondition_failed()),
        Verdict::NotModified => Err(s3_error!(NotModified, "not modified")),
    }
}

/// As `check_read`, for a copy's source: every failure is 412.
pub fn check_copy_source(c: &Conditions<'_>, etag: &str, mtime_ns: i64) -> S3Result<()> {
    match verdict(c, etag, mtime_ns) {
        Verdict::Proceed => Ok(()),
        Verdict::Failed | Verdict::NotModified => Err(precondition_failed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::dto::ETag;
    use std::time::{Duration, SystemTime};

    fn at(secs: u64) -> Timestamp {
        Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
    }

    fn tag(s: &str) -> ETagCondition {
        ETagCondition::ETag(ETag::Strong(s.into()))
    }

    const MTIME: i64 = 1_000 * 1_000_000_000 + 500_000_000; // 1000.5 s

    #[test]
    fn an_etag_match_decides_before_a_date() {
        let (yes, no, any) = (tag("abc"), tag("xyz"), ETagCondition::Any);
        let v = |c: Conditions<'_>| verdict(&c, "abc", MTIME);
        assert_eq!(v(Conditions::default()), Verdict::Proceed);
        assert_eq!(
            v(Conditions {
                if_match: Some(&no),
                ..Default::default()
            }),
            Verdict::Failed
        );
        assert_eq!(
            v(Conditions {
                if_match: Some(&any),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        // If-Match true wins over a failing If-Unmodified-Since (S3's documented case).
        let early = at(10);
        assert_eq!(
            v(Conditions {
                if_match: Some(&yes),
                if_unmodified_since: Some(&early),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            v(Conditions {
                if_unmodified_since: Some(&early),
                ..Default::default()
            }),
            Verdict::Failed
        );
        assert_eq!(
            v(Conditions {
                if_none_match: Some(&yes),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            v(Conditions {
                if_none_match: Some(&no),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        // If-None-Match not naming it wins over If-Modified-Since saying "not modified".
        let late = at(5_000);
        assert_eq!(
            v(Conditions {
                if_none_match: Some(&no),
                if_modified_since: Some(&late),
                ..Default::default()
            }),
            Verdict::Proceed
        );
    }

    #[test]
    fn dates_compare_in_whole_seconds() {
        let v = |c: Conditions<'_>| verdict(&c, "abc", MTIME);
        let (same, before) = (at(1_000), at(999));
        // Last-Modified shows 1000 s: "modified since 1000" is false, "since 999" true.
        assert_eq!(
            v(Conditions {
                if_modified_since: Some(&same),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            v(Conditions {
                if_modified_since: Some(&before),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            v(Conditions {
                if_unmodified_since: Some(&same),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            v(Conditions {
                if_unmodified_since: Some(&before),
                ..Default::default()
            }),
            Verdict::Failed
        );
        assert!(
            check_copy_source(
                &Conditions {
                    if_modified_since: Some(&same),
                    ..Default::default()
                },
                "abc",
                MTIME
            )
            .is_err()
        );
    }
}
