//! `myriad s3`: the S3 gateway (crates/myriad-s3, docs/s3.md). Binds, prints
//! `s3: http://HOST:PORT` once listening, serves until SIGINT or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use myriad_client::Client;
use myriad_client::setup::current_caller;
use myriad_s3::Credentials;

#[derive(clap::Args)]
#[command(after_help = "\
Buckets are the cluster's top-level directories (names starting with '.' are not buckets);
objects are regular files; a key with slashes is a path below its bucket, its directories
made by PUT and removed by DELETE once empty. Keys that cannot be paths (empty parts, '.',
'..', NUL, a part over 255 bytes) are refused. ETags are not MD5s. See docs/s3.md.")]
pub struct S3Args {
    /// Address to serve S3 on, plain HTTP (port 0: any free port; the address is printed
    /// as `s3: http://HOST:PORT`). Put TLS in front of it beyond a trusted network.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// SigV4 keys: one `ACCESS_KEY SECRET_KEY [UID:GID]` a line, `#` comments; the file
    /// must not be readable by group or others (0600). Requests signed with a key act on
    /// the cluster as its UID:GID, by default as the user running the gateway.
    #[arg(long)]
    pub credentials: PathBuf,
}

pub async fn run(args: S3Args, client: Client) -> anyhow::Result<()> {
    let credentials = Credentials::load(&args.credentials, &current_caller())?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let client = Arc::new(client);
    myriad_s3::prepare(&client).await;
    let service = myriad_s3::service(client, credentials);
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "s3: http://{addr}")?;
        out.flush()?;
    }
    myriad_s3::serve(listener, service, crate::signals::shutdown_signal()).await?;
    Ok(())
}
