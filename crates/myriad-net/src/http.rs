//! A small HTTP/1.1 endpoint for what operators read with a browser or a scraper (server
//! and mount metrics, the status page): `GET`/`HEAD` of a path answered by a function,
//! one task per connection, keep-alive, and a client that sends no complete request head
//! within `HEAD_TIMEOUT` dropped. Not the cluster protocol: nothing here is authenticated,
//! so whoever can reach the address can read what it serves.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

/// A connection that sends no complete request head within this long is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The answer to one `GET`.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Reply {
    #[must_use]
    pub fn ok(content_type: &'static str, body: String) -> Reply {
        Reply {
            status: 200,
            content_type,
            body,
        }
    }

    /// A plain-text answer with `status`.
    #[must_use]
    pub fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{body}\n"),
        }
    }
}

/// What answers a path (the URI's path, without its query).
pub type Route = Arc<dyn Fn(&str) -> Reply + Send + Sync>;

/// Serves `route` on `listener` until the task is dropped or aborted.
pub async fn serve(listener: TcpListener, route: Route) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, most likely: wait rather than spin.
                tracing::warn!("http endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let route = route.clone();
        tokio::spawn(async move {
            let answer = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let reply = respond(&req, &route);
                async move { Ok::<_, Infallible>(reply) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), answer)
                .await;
        });
    }
}

fn respond<B>(req: &Request<B>, route: &Route) -> Response<Full<Bytes>> {
    let reply = if req.method() == hyper::Method::GET || req.method() == hyper::Method::HEAD {
        route(req.uri().path())
    } else {
        Reply::text(405, "only GET")
    };
    let mut r = Response::new(Full::new(Bytes::from(reply.body)));
    *r.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(reply.content_type),
    );
    // Every answer is a live view: never cached.
    h.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        s.write_all(request.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        out
    }

    #[tokio::test]
    async fn paths_are_answered_by_the_route_and_other_methods_refused() {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let route: Route = Arc::new(|path| match path {
            "/metrics" => Reply::ok("text/plain", "m 1\n".into()),
            _ => Reply::text(404, "not here"),
        });
        let task = tokio::spawn(serve(listener, route));
        let ok = get(
            addr,
            "GET /metrics?x=1 HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(
            ok.contains("cache-control: no-store") && ok.ends_with("m 1\n"),
            "{ok}"
        );
        let missing = get(
            addr,
            "GET /x HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let post = get(
            addr,
            "POST /metrics HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        task.abort();
    }
}
