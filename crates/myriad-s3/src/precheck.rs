//! Requests answered before s3s sees them, where s3s would answer otherwise than S3:
//!
//! - Signed for a region s3s cannot take. s3cmd's default configuration signs with the
//!   region `US` (its default bucket location), which s3s refuses as malformed
//!   (`InvalidRequest`). AWS answers such a request with `AuthorizationHeaderMalformed`
//!   naming the right region, and s3cmd then signs again for that region: so does the
//!   gateway.
//! - Presigned for longer than S3 allows (`X-Amz-Expires` over 7 days), which s3s takes.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::service::Service;
use hyper::{HeaderMap, Request, Response, StatusCode, Uri};
use s3s::service::S3Service;

use crate::metrics::GatewayMetrics;

/// The region the gateway asks clients to sign for.
pub const REGION: &str = "us-east-1";

/// The region of a SigV4 `Authorization` header's credential scope
/// (`Credential=<key>/<date>/<region>/s3/aws4_request`), if it is not one s3s takes
/// (`[a-z0-9-]+`).
pub fn refused_region(headers: &HeaderMap) -> Option<String> {
    let auth = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let rest = auth.strip_prefix("AWS4-HMAC-SHA256")?;
    let scope = rest.split("Credential=").nth(1)?.split([',', ' ']).next()?;
    let region = scope.split('/').nth(2)?;
    let valid = !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    (!valid).then(|| region.to_string())
}

/// S3's longest presigned URL lifetime, in seconds (7 days).
pub const PRESIGNED_SECONDS_MAX: u64 = 7 * 24 * 3600;

/// Whether a presigned URL asks to live longer than S3 allows.
pub fn presigned_too_long(uri: &Uri) -> bool {
    uri.query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .any(|(k, v)| {
            k.eq_ignore_ascii_case("X-Amz-Expires")
                && v.parse::<u64>().map_or(true, |s| s > PRESIGNED_SECONDS_MAX)
        })
}

fn error(code: &str, message: &str, extra: &str) -> Response<s3s::Body> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message>{extra}</Error>"
    );
    let mut response = Response::new(s3s::Body::from(body));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/xml"),
    );
    response
}

/// AWS's answer to a request signed for the wrong region.
fn wrong_region(region: &str) -> Response<s3s::Body> {
    let shown: String = region
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    let mut response = error(
        "AuthorizationHeaderMalformed",
        &format!(
            "The authorization header is malformed; the region '{shown}' is wrong; expecting '{REGION}'"
        ),
        &format!("<Region>{REGION}</Region>"),
    );
    response.headers_mut().insert(
        "x-amz-bucket-region",
        hyper::header::HeaderValue::from_static(REGION),
    );
    response
}

fn content_length(headers: &HeaderMap) -> u64 {
    headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

/// The S3 service, with the requests above answered as AWS does and body bytes counted.
#[derive(Clone)]
pub struct Precheck {
    pub service: S3Service,
    pub metrics: Arc<GatewayMetrics>,
}

impl Service<Request<Incoming>> for Precheck {
    type Response = <S3Service as Service<Request<Incoming>>>::Response;
    type Error = <S3Service as Service<Request<Incoming>>>::Error;
    type Future = <S3Service as Service<Request<Incoming>>>::Future;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let answer = if let Some(region) = refused_region(req.headers()) {
            wrong_region(&region)
        } else if presigned_too_long(req.uri()) {
            error(
                "AuthorizationQueryParametersError",
                "X-Amz-Expires must be less than a week (in seconds) that is 604800",
                "",
            )
        } else {
            let inbound = content_length(req.headers());
            let answering = Service::call(&self.service, req);
            let metrics = self.metrics.clone();
            return Box::pin(async move {
                let answered = answering.await;
                if let Ok(response) = &answered {
                    metrics.bytes(inbound, content_length(response.headers()));
                }
                answered
            });
        };
        Box::pin(async move { Ok(answer) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = value.parse() {
            h.insert(AUTHORIZATION, v);
        }
        h
    }

    #[test]
    fn only_regions_s3s_refuses_are_caught() {
        let signed = |region: &str| {
            auth(&format!(
                "AWS4-HMAC-SHA256 Credential=AKID/20261205/{region}/s3/aws4_request, SignedHeaders=host, Signature=00"
            ))
        };
        assert_eq!(refused_region(&signed("US")).as_deref(), Some("US"));
        assert_eq!(refused_region(&signed("EU")).as_deref(), Some("EU"));
        assert_eq!(refused_region(&signed("us-east-1")), None);
        assert_eq!(refused_region(&signed("eu-west-3")), None);
        assert_eq!(refused_region(&HeaderMap::new()), None);
        assert_eq!(refused_region(&auth("AWS AKID:sig")), None);
    }

    #[test]
    fn presigned_urls_live_at_most_a_week() {
        let uri = |q: &str| -> Uri { format!("/b/k?{q}").parse().unwrap_or_default() };
        assert!(!presigned_too_long(&uri(
            "X-Amz-Expires=604800&X-Amz-Date=x"
        )));
        assert!(presigned_too_long(&uri("X-Amz-Expires=604801")));
        assert!(presigned_too_long(&uri("a=b&x-amz-expires=99999999999")));
        assert!(presigned_too_long(&uri("X-Amz-Expires=-1")));
        assert!(!presigned_too_long(&uri("uploads")));
    }

    #[test]
    fn the_answer_names_the_region_to_sign_for() {
        let r = wrong_region("US<x>");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            r.headers().get("x-amz-bucket-region").map(|v| v.as_bytes()),
            Some(REGION.as_bytes())
        );
    }
}
