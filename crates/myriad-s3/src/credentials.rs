//! The gateway's SigV4 keys and the cluster user each one acts as.
//!
//! File format (`--credentials FILE`, mode 0600): one key a line,
//! `ACCESS_KEY SECRET_KEY [UID:GID]`, fields separated by blanks, `#` starting a comment.
//! A key without `UID:GID` acts as the user running the gateway. The file is refused if
//! group or others may read it, or if it holds no key.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use myriad_client::Caller;
use s3s::auth::{S3Auth, SecretKey};
use s3s::{S3Result, s3_error};

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CredentialsError(String);

/// The keys the gateway accepts. Cheap to clone.
#[derive(Clone)]
pub struct Credentials {
    keys: Arc<HashMap<String, Key>>,
}

struct Key {
    secret: SecretKey,
    caller: Caller,
}

impl Credentials {
    /// Reads `path`, refusing it if others may read it or it holds no key. Keys without
    /// a `UID:GID` act as `default`.
    pub fn load(path: &Path, default: &Caller) -> Result<Credentials, CredentialsError> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| CredentialsError(format!("cannot read credentials file {shown}: {e}")))?;
        if !meta.is_file() {
            return Err(CredentialsError(format!(
                "credentials file {shown} is not a regular file"
            )));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(CredentialsError(format!(
                "credentials file {shown} may be read by others (mode {mode:04o}): \
                 it holds secret keys, `chmod 600` it"
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| CredentialsError(format!("cannot read credentials file {shown}: {e}")))?;
        Credentials::parse(&text, default)
            .map_err(|CredentialsError(m)| CredentialsError(format!("{shown}: {m}")))
    }

    /// The keys in `text` (the file's format, above).
    pub fn parse(text: &str, default: &Caller) -> Result<Credentials, CredentialsError> {
        let mut keys = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line_no = n + 1;
            let line = line.split_once('#').map_or(line, |(before, _)| before);
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (access, secret, ids) = match fields.as_slice() {
                [] => continue,
                [a, s] => (*a, *s, None),
                [a, s, ids] => (*a, *s, Some(*ids)),
                _ => {
                    return Err(CredentialsError(format!(
                        "line {line_no}: expected `ACCESS_KEY SECRET_KEY [UID:GID]`"
                    )));
                }
            };
            if access.contains('/') {
                return Err(CredentialsError(format!(
                    "line {line_no}: an access key cannot contain '/' (SigV4 uses it as a separator)"
                )));
            }
            let caller = match ids {
                None => default.clone(),
                Some(ids) => parse_ids(ids).ok_or_else(|| {
                    CredentialsError(format!(
                        "line {line_no}: {ids:?} is not UID:GID (two numbers)"
                    ))
                })?,
            };
            let key = Key {
                secret: SecretKey::from(secret),
                caller,
            };
            if keys.insert(access.to_string(), key).is_some() {
                return Err(CredentialsError(format!(
                    "line {line_no}: access key {access} is given twice"
                )));
            }
        }
        if keys.is_empty() {
            return Err(CredentialsError(
                "no keys: write one `ACCESS_KEY SECRET_KEY [UID:GID]` a line".into(),
            ));
        }
        Ok(Credentials {
            keys: Arc::new(keys),
        })
    }

    /// The cluster user that requests signed with `access_key` act as.
    pub fn caller_of(&self, access_key: &str) -> Option<Caller> {
        self.keys.get(access_key).map(|k| k.caller.clone())
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn parse_ids(ids: &str) -> Option<Caller> {
    let (uid, gid) = ids.split_once(':')?;
    let uid: u32 = uid.parse().ok()?;
    let gid: u32 = gid.parse().ok()?;
    Some(Caller {
        uid,
        gid,
        groups: vec![gid],
    })
}

#[async_trait::async_trait]
impl S3Auth for Credentials {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.keys.get(access_key) {
            Some(k) => Ok(k.secret.clone()),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "the access key is not one of this gateway's"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Caller {
        Caller {
            uid: 1000,
            gid: 100,
            groups: vec![100, 27],
        }
    }

    #[test]
    fn parses_keys_comments_and_ids() {
        let text = "# gateway keys\n\
                    AKIA1 secret1\n\
                    \n\
                    AKIA2   secret2  2000:300  # a tenant\n";
        let c = Credentials::parse(text, &me()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c.len(), 2);
        assert_eq!(c.caller_of("AKIA1"), Some(me()));
        assert_eq!(
            c.caller_of("AKIA2"),
            Some(Caller {
                uid: 2000,
                gid: 300,
                groups: vec![300]
            })
        );
        assert_eq!(c.caller_of("nobody"), None);
    }

    #[test]
    fn refuses_bad_lines_and_empty_files() {
        for bad in [
            "",
            "# only a comment\n",
            "AKIA1\n",
            "AKIA1 s 1:2 extra\n",
            "AKIA1 s 12\n",
            "AKIA1 s x:2\n",
            "AKIA1 s -1:2\n",
            "AKIA1 s\nAKIA1 t\n",
            "AK/IA s\n",
        ] {
            assert!(Credentials::parse(bad, &me()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn errors_never_show_the_secret() {
        let e = Credentials::parse("AKIA1 topsecret 1:x\n", &me())
            .err()
            .unwrap_or_else(|| panic!("expected an error"));
        assert!(!e.to_string().contains("topsecret"), "{e}");
    }

    #[test]
    fn refuses_a_file_others_may_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e:?}"));
        let path = dir.path().join("creds");
        std::fs::write(&path, "AKIA1 secret1\n").unwrap_or_else(|e| panic!("{e:?}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("{e:?}"));
        let e = Credentials::load(&path, &me())
            .err()
            .unwrap_or_else(|| panic!("expected an error"));
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            Credentials::load(&path, &me())
                .unwrap_or_else(|e| panic!("{e:?}"))
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn unknown_keys_are_invalid_access_key_id() {
        let c = Credentials::parse("AKIA1 secret1\n", &me()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            c.get_secret_key("AKIA1")
                .await
                .unwrap_or_else(|e| panic!("{e:?}"))
                .expose(),
            "secret1"
        );
        let e = c
            .get_secret_key("AKIA9")
            .await
            .err()
            .unwrap_or_else(|| panic!("expected an error"));
        assert_eq!(*e.code(), s3s::S3ErrorCode::InvalidAccessKeyId);
    }
}
