//! The S3 gateway (`myriad s3`, docs/s3.md): the cluster served over the S3 protocol with
//! the `s3s` crate. Buckets are the top-level directories, objects are regular files, a key
//! with slashes is a path below its bucket. Requests are checked with SigV4 against a
//! credentials file and run as the cluster user each key names.
//!
//! Depends on: myriad-client (its `proto` re-export for paths and limits), s3s, hyper.
//! Must not depend on the server or storage crates.
//!
//! Modules: `keys` (key <-> path), `record` (what is kept about an object beyond its bytes),
//! `etag`, `checksums` (S3's additional checksums), `headers` (stored headers and metadata in and out), `conditions` (conditional
//! requests), `errors` (FsError -> S3 error), `credentials`, `listing` (listing order,
//! pure) and `list_objects` (its S3 side), `body` (bodies in pieces), `store` (writing
//! objects whole or not at all), `lookup` (missing names as S3 errors), `objects`,
//! `folders` (keys ending in `/`), `copy_object`, `buckets`, `multipart`, `gateway` (the
//! `s3s::S3` impl), `precheck` (requests answered before s3s sees them), `metrics` (the
//! gateway's own), `serve` (the accept loop).

mod body;
mod buckets;
mod checksums;
mod conditions;
mod copy_object;
mod credentials;
mod errors;
mod etag;
mod folders;
mod gateway;
mod headers;
mod keys;
mod list_objects;
mod listing;
mod lookup;
mod metrics;
mod multipart;
mod objects;
mod precheck;
mod record;
mod serve;
mod store;

pub use credentials::{Credentials, CredentialsError};
pub use gateway::Gateway;
pub use metrics::GatewayMetrics;
pub use serve::{GatewayService, prepare, serve, service};
