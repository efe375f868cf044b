//! `myriad s3`: the S3 gateway (crates/myriad-s3). Placeholder until the gateway lands.

use std::net::SocketAddr;
use std::path::PathBuf;

use myriad_client::Client;

#[derive(clap::Args)]
pub struct S3Args {
    /// Address to serve S3 on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// Credentials file: one `ACCESS_KEY SECRET_KEY [UID:GID]` per line (mode 0600).
    #[arg(long)]
    pub credentials: PathBuf,
}

pub async fn run(args: S3Args, client: Client) -> anyhow::Result<()> {
    let _ = (args, client);
    anyhow::bail!("the S3 gateway is not built yet")
}
