//! The gateway's own metrics (`myriad s3 --metrics ADDR`, docs/metrics.md): requests by S3
//! operation and outcome, their latency, and body bytes in and out.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    operation: &'static str,
    /// `OK`, or the S3 error code answered.
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Operation {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Direction {
    direction: &'static str,
}

fn latency_histogram() -> Histogram {
    // 100 us to about 6.5 s.
    Histogram::new(exponential_buckets(0.000_1, 2.0, 17))
}

pub struct GatewayMetrics {
    registry: Registry,
    requests: Family<Outcome, Counter>,
    latency: Family<Operation, Histogram, fn() -> Histogram>,
    bytes: Family<Direction, Counter>,
}

impl Default for GatewayMetrics {
    fn default() -> GatewayMetrics {
        let mut registry = Registry::with_prefix("myriad_s3");
        let requests = Family::<Outcome, Counter>::default();
        let latency = Family::<Operation, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let bytes = Family::<Direction, Counter>::default();
        registry.register(
            "requests",
            "S3 requests by operation and outcome (OK or the S3 error code)",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival at its operation to its answer, by operation (a GET's body streams after)",
            latency.clone(),
        );
        registry.register(
            "body_bytes",
            "Body bytes by direction (in: request bodies, out: answers), by their Content-Length",
            bytes.clone(),
        );
        GatewayMetrics {
            registry,
            requests,
            latency,
            bytes,
        }
    }
}

impl GatewayMetrics {
    /// One request of `operation`, answered with `status` after `took`.
    pub fn request(&self, operation: &'static str, status: &str, took: Duration) {
        self.requests
            .get_or_create(&Outcome {
                operation,
                status: status.to_string(),
            })
            .inc();
        self.latency
            .get_or_create(&Operation { operation })
            .observe(took.as_secs_f64());
    }

    /// Body bytes received (`inbound`) and sent.
    pub fn bytes(&self, inbound: u64, outbound: u64) {
        for (direction, n) in [("in", inbound), ("out", outbound)] {
            if n > 0 {
                self.bytes.get_or_create(&Direction { direction }).inc_by(n);
            }
        }
    }

    /// One OpenMetrics scrape.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_shows_requests_latency_and_bytes() {
        let m = GatewayMetrics::default();
        m.request("get_object", "OK", Duration::from_millis(3));
        m.request("get_object", "NoSuchKey", Duration::from_millis(1));
        m.bytes(10, 4096);
        let text = m.render();
        assert!(
            text.contains("myriad_s3_requests_total{operation=\"get_object\",status=\"OK\"} 1"),
            "{text}"
        );
        assert!(text.contains("status=\"NoSuchKey\"} 1"), "{text}");
        assert!(
            text.contains("myriad_s3_request_duration_seconds_count{operation=\"get_object\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("myriad_s3_body_bytes_total{direction=\"out\"} 4096"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
