//! AWS Signature Version 4 for one kind of request: a path-style `GET` with no body and
//! no query, which is what `bench python` sends the S3 gateway many thousands of times.
//! (boto3 signs everything else in the tests; this exists so the benchmark measures the
//! gateway, not a Python client.)

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use myriad_client::proto::auth::hex;

/// SHA-256 of an empty payload, as SigV4 writes it.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const REGION: &str = "us-east-1";

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    // HMAC takes keys of any length.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    m.update(data.as_bytes());
    m.finalize().into_bytes().to_vec()
}

/// `YYYYMMDDTHHMMSSZ` of a Unix time (UTC).
#[must_use]
pub fn amz_date(unix_s: u64) -> String {
    let (y, m, d) =
        myriad_client::proto::trash::civil_date(i64::try_from(unix_s / 86_400).unwrap_or(0));
    let secs = unix_s % 86_400;
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The headers a signed `GET path` to `host` carries: (name, value) pairs, Authorization
/// last. `path` must already be URI-encoded (the benchmark's keys need no encoding).
#[must_use]
pub fn signed_get(
    host: &str,
    path: &str,
    access_key: &str,
    secret_key: &str,
    date: &str,
) -> Vec<(&'static str, String)> {
    let day = &date[..8];
    let signed_headers = "host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "GET\n{path}\n\nhost:{host}\nx-amz-content-sha256:{EMPTY_SHA256}\nx-amz-date:{date}\n\n{signed_headers}\n{EMPTY_SHA256}"
    );
    let scope = format!("{day}/{REGION}/s3/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{secret_key}").as_bytes(), day);
    let k_signing = hmac(&hmac(&hmac(&k_date, REGION), "s3"), "aws4_request");
    let signature = hex(&hmac(&k_signing, &to_sign));
    vec![
        ("host", host.to_string()),
        ("x-amz-content-sha256", EMPTY_SHA256.to_string()),
        ("x-amz-date", date.to_string()),
        (
            "authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed_headers}, Signature={signature}"
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(951_782_400), "20000229T000000Z");
        assert_eq!(amz_date(1_764_417_661), "20251129T120101Z");
    }

    #[test]
    fn the_signature_matches_awss_published_example() {
        // AWS's documented example key, date and object, without the example's Range
        // header; the expected value is what botocore's S3SigV4Auth signs for the same.
        let h = signed_get(
            "examplebucket.s3.amazonaws.com",
            "/test.txt",
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "20130524T000000Z",
        );
        assert_eq!(
            h[3].1,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=df548e2ce037944d03f3e68682813b093763996d597cf890ca3d9037fd231eb4"
        );
    }
}
