//! Key files (SECURITY.md): the cluster secret (`cluster:<hex>` lines, servers and
//! administrators) and the client key derived from it (`client:<hex>`, client machines).
//! Both are made mode 0600. A cluster secret that anyone but its owner can read is refused;
//! a client key may be shared with a group (0640: the users of a client machine) but not
//! with everyone.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use myriad_client::Keyring;
use myriad_client::proto::auth;
use rand::RngCore;

pub use myriad_client::setup::{CLIENT_KEY_FILE, SECRET_FILE};

/// Reads a key file, refusing one that too many may read (`myriad_client::setup`).
pub fn load(path: &Path) -> anyhow::Result<Keyring> {
    Ok(myriad_client::setup::load_keys(path)?)
}

/// The key file a client uses (`myriad_client::setup::client_keys`).
pub fn client_keys(explicit: Option<&Path>, map: Option<&Path>) -> anyhow::Result<Keyring> {
    Ok(myriad_client::setup::client_keys(explicit, map)?)
}

/// Writes `text` to a new file of mode 0600 (never over an existing one).
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// Creates a new cluster secret at `secret` and its client key at `client` (both 0600).
pub fn init(secret: &Path, client: &Path) -> anyhow::Result<()> {
    // Both or neither: a secret written beside an old client key would not match it.
    for p in [secret, client] {
        if p.exists() {
            bail!("{} exists; refusing to overwrite a key file", p.display());
        }
    }
    let mut s = [0u8; auth::KEY_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut s);
    write_private(
        secret,
        &format!(
            "# Myriad cluster secret: servers and administrators only (SECURITY.md)\n{}\n",
            auth::secret_line(&s)
        ),
    )?;
    write_private(
        client,
        &format!(
            "# Myriad client key: lets a machine mount and use the cluster, not serve it\n{}\n",
            auth::client_key_line(&s)
        ),
    )
}

/// The local cluster's secret file and keys, made on first use.
pub fn ensure_local(dir: &Path) -> anyhow::Result<(PathBuf, Keyring)> {
    let secret = dir.join(SECRET_FILE);
    if !secret.exists() {
        init(&secret, &dir.join(CLIENT_KEY_FILE))?;
    }
    let keys = load(&secret)?;
    Ok((secret, keys))
}
