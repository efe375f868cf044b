//! Key files (SECURITY.md): the cluster secret (`cluster:<hex>` lines, servers and
//! administrators) and the client key derived from it (`client:<hex>`, client machines).
//! Both are made mode 0600. A cluster secret that anyone but its owner can read is refused;
//! a client key may be shared with a group (0640: the users of a client machine) but not
//! with everyone.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use myriad_client::Keyring;
use myriad_client::proto::auth;
use rand::RngCore;

/// File name of the cluster secret beside a local cluster's map.
pub const SECRET_FILE: &str = "cluster.secret";
/// File name of the client key beside a local cluster's map.
pub const CLIENT_KEY_FILE: &str = "client.key";

/// Reads a key file, refusing one that too many may read.
pub fn load(path: &Path) -> anyhow::Result<Keyring> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read key file {}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read key file {}", path.display()))?;
    let keys = Keyring::parse(&text).with_context(|| format!("bad key file {}", path.display()))?;
    let allowed = if keys.has_cluster_secret() {
        0o700
    } else {
        0o750
    };
    if mode & !allowed != 0 {
        bail!(
            "key file {} can be read by others (mode {mode:o}); run `chmod 600 {}`",
            path.display(),
            path.display()
        );
    }
    Ok(keys)
}

/// The key file a client uses: `--secret-file` / MYRIAD_SECRET_FILE, else the cluster secret
/// beside the cluster map, else the client key beside it.
pub fn client_keys(explicit: Option<&Path>, map: Option<&Path>) -> anyhow::Result<Keyring> {
    if let Some(p) = explicit {
        return load(p);
    }
    let dir = map.and_then(Path::parent).unwrap_or(Path::new("."));
    for name in [SECRET_FILE, CLIENT_KEY_FILE] {
        let p = dir.join(name);
        if p.exists() {
            return load(&p);
        }
    }
    bail!(
        "no cluster key: pass --secret-file FILE or set MYRIAD_SECRET_FILE (a cluster's `{SECRET_FILE}` or `{CLIENT_KEY_FILE}`; none beside the map in {})",
        dir.display()
    )
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
