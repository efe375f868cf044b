//! The `s3s::S3` implementation: each operation runs as the cluster user of the key that
//! signed the request (a client handle acting for that user, `Client::for_caller`) and is
//! handed to the module that does it.

use std::sync::Arc;

use myriad_client::{Caller, Client};
use s3s::dto::*;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};

use crate::credentials::Credentials;
use crate::metrics::GatewayMetrics;
use crate::{buckets, copy_object, list_objects, multipart, objects};

pub struct Gateway {
    client: Arc<Client>,
    credentials: Credentials,
    metrics: Arc<GatewayMetrics>,
}

impl Gateway {
    pub fn new(
        client: Arc<Client>,
        credentials: Credentials,
        metrics: Arc<GatewayMetrics>,
    ) -> Gateway {
        Gateway {
            client,
            credentials,
            metrics,
        }
    }

    /// The cluster user of the key that signed `req`. s3s has checked the signature and
    /// refuses unsigned requests before any operation runs.
    fn caller<T>(&self, req: &S3Request<T>) -> S3Result<Caller> {
        req.credentials
            .as_ref()
            .and_then(|c| self.credentials.caller_of(&c.access_key))
            .ok_or_else(|| s3_error!(AccessDenied, "the request is not signed with a known key"))
    }

    /// The gateway acting as root: what S3 lets any key do that a file system keeps to root
    /// (making a top-level directory for a bucket and giving it to the key's user).
    fn as_root(&self) -> Client {
        self.client.for_caller(Caller {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        })
    }
}

/// Runs `$body` with `$client` acting for the request's caller and wraps its output in a
/// response.
macro_rules! as_caller {
    ($self:ident, $req:ident, $op:literal, |$client:ident, $caller:ident, $input:ident| $body:expr) => {{
        let started = std::time::Instant::now();
        let answered = async {
            let $caller = $self.caller(&$req)?;
            let $client = $self.client.for_caller($caller.clone());
            let $input = $req.input;
            $body.await
        }
        .await;
        let status = match &answered {
            Ok(_) => "OK",
            Err(e) => e.code().as_str(),
        };
        $self.metrics.request($op, status, started.elapsed());
        Ok(S3Response::new(answered?))
    }};
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        as_caller!(self, req, "list_buckets", |client, caller, _input| {
            buckets::list(&client, &caller)
        })
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        as_caller!(self, req, "create_bucket", |client, caller, input| {
            buckets::create((&client, self.as_root()), &caller, input)
        })
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        as_caller!(self, req, "delete_bucket", |client, caller, input| {
            buckets::delete((&client, self.as_root()), &caller, input)
        })
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        as_caller!(self, req, "head_bucket", |client, _caller, input| {
            buckets::head(&client, input)
        })
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        as_caller!(
            self,
            req,
            "get_bucket_location",
            |client, _caller, input| buckets::location(&client, input)
        )
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        as_caller!(self, req, "list_objects_v2", |client, _caller, input| {
            list_objects::v2(&client, input)
        })
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        as_caller!(self, req, "list_objects", |client, _caller, input| {
            list_objects::v1(&client, input)
        })
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        as_caller!(self, req, "get_object", |client, _caller, input| {
            objects::get(&client, input)
        })
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        as_caller!(self, req, "head_object", |client, _caller, input| {
            objects::head(&client, input)
        })
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        as_caller!(self, req, "put_object", |client, _caller, input| {
            objects::put(&client, input, req.trailing_headers.clone())
        })
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        as_caller!(self, req, "delete_object", |client, _caller, input| {
            objects::delete(&client, input)
        })
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        as_caller!(self, req, "delete_objects", |client, _caller, input| {
            objects::delete_many(&client, input)
        })
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        as_caller!(
            self,
            req,
            "create_multipart_upload",
            |client, _caller, input| multipart::create(&client, input)
        )
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        as_caller!(self, req, "upload_part", |client, _caller, input| {
            multipart::upload_part(&client, input, req.trailing_headers.clone())
        })
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        as_caller!(
            self,
            req,
            "complete_multipart_upload",
            |client, _caller, input| multipart::complete(&client, input)
        )
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        as_caller!(
            self,
            req,
            "abort_multipart_upload",
            |client, _caller, input| multipart::abort(&client, input)
        )
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        as_caller!(self, req, "list_parts", |client, _caller, input| {
            multipart::list_parts(&client, input)
        })
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        as_caller!(self, req, "copy_object", |client, _caller, input| {
            copy_object::copy(&client, input)
        })
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        as_caller!(
            self,
            req,
            "get_bucket_versioning",
            |client, _caller, input| buckets::versioning(&client, input)
        )
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        as_caller!(self, req, "upload_part_copy", |client, _caller, input| {
            copy_object::upload_part_copy(&client, input)
        })
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        as_caller!(self, req, "put_bucket_acl", |client, _caller, input| {
            buckets::put_acl(&client, input)
        })
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        as_caller!(self, req, "get_bucket_acl", |client, _caller, input| {
            buckets::get_acl(&client, input)
        })
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        as_caller!(
            self,
            req,
            "list_object_versions",
            |client, _caller, input| list_objects::versions(&client, input)
        )
    }
}
