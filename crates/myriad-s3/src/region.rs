//! Requests signed for a region s3s cannot take. s3cmd's default configuration signs with
//! the region `US` (its default bucket location), which s3s refuses as malformed
//! (`InvalidRequest`) before any operation runs. AWS answers such a request with
//! `AuthorizationHeaderMalformed` naming the right region, and s3cmd then signs again for
//! that region: so does the gateway, before s3s sees the request.

use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::service::Service;
use hyper::{HeaderMap, Request, Response, StatusCode};
use s3s::service::S3Service;

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

/// AWS's answer to a request signed for the wrong region.
fn wrong_region(region: &str) -> Response<s3s::Body> {
    let escaped: String = region
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AuthorizationHeaderMalformed</Code>\
         <Message>The authorization header is malformed; the region '{escaped}' is wrong; expecting '{REGION}'</Message>\
         <Region>{REGION}</Region></Error>"
    );
    let mut response = Response::new(s3s::Body::from(body));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/xml"),
    );
    response.headers_mut().insert(
        "x-amz-bucket-region",
        hyper::header::HeaderValue::from_static(REGION),
    );
    response
}

/// The S3 service, with requests signed for a region it cannot take answered as AWS does.
#[derive(Clone)]
pub struct RegionCheck(pub S3Service);

impl Service<Request<Incoming>> for RegionCheck {
    type Response = <S3Service as Service<Request<Incoming>>>::Response;
    type Error = <S3Service as Service<Request<Incoming>>>::Error;
    type Future = <S3Service as Service<Request<Incoming>>>::Future;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        match refused_region(req.headers()) {
            Some(region) => {
                let answer = wrong_region(&region);
                Box::pin(async move { Ok(answer) })
            }
            None => Service::call(&self.0, req),
        }
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
    fn the_answer_names_the_region_to_sign_for() {
        let r = wrong_region("US<x>");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            r.headers().get("x-amz-bucket-region").map(|v| v.as_bytes()),
            Some(REGION.as_bytes())
        );
    }
}
