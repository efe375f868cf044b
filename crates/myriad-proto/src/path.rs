//! Path validation. Every path a server receives passes through `validate_path` before use.
//!
//! A valid path is absolute and normalized: it starts with '/', has no empty, "." or ".."
//! components, no trailing '/', no NUL byte, components of 1..=255 bytes, and at most
//! `PATH_BYTES_MAX` (16 KiB) bytes and `PATH_DEPTH_MAX` components in all. Normalization is
//! the caller's job (the CLI resolves "a/../b"); the wire only carries canonical paths so
//! that placement by path hash is unambiguous.

use crate::FsError;
use crate::limits::{NAME_BYTES_MAX, PATH_BYTES_MAX, PATH_DEPTH_MAX};

pub fn validate_path(path: &str) -> Result<(), FsError> {
    if path.len() > PATH_BYTES_MAX {
        return Err(FsError::NameTooLong);
    }
    if !path.starts_with('/') {
        return Err(FsError::InvalidArgument(format!(
            "path must be absolute: {path:?}"
        )));
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err(FsError::InvalidArgument(format!(
            "path must not end with '/': {path:?}"
        )));
    }
    for (depth, name) in path[1..].split('/').enumerate() {
        if depth >= PATH_DEPTH_MAX {
            return Err(FsError::NameTooLong);
        }
        validate_name(name)?;
    }
    Ok(())
}

/// Validates one path component.
pub fn validate_name(name: &str) -> Result<(), FsError> {
    if name.is_empty() {
        return Err(FsError::InvalidArgument("empty path component".into()));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(FsError::NameTooLong);
    }
    if name == "." || name == ".." {
        return Err(FsError::InvalidArgument(format!(
            "path component {name:?} is not allowed"
        )));
    }
    if name.contains('\0') || name.contains('/') {
        return Err(FsError::InvalidArgument(
            "path component contains NUL or '/'".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_is_bounded() {
        let deep = |n: usize| "/a".repeat(n);
        assert_eq!(validate_path(&deep(PATH_DEPTH_MAX)), Ok(()));
        assert_eq!(
            validate_path(&deep(PATH_DEPTH_MAX + 1)),
            Err(FsError::NameTooLong)
        );
    }

    #[test]
    fn accepts_normal_paths() {
        for p in [
            "/",
            "/a",
            "/a/b/c",
            "/with space/ünïcode",
            &format!("/{}", "x".repeat(255)),
        ] {
            assert_eq!(validate_path(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn rejects_bad_paths() {
        for p in [
            "", "a", "a/b", "/a/", "//a", "/a//b", "/./a", "/a/..", "/a\0b",
        ] {
            assert!(
                matches!(validate_path(p), Err(FsError::InvalidArgument(_))),
                "{p:?}"
            );
        }
        assert_eq!(
            validate_path(&format!("/{}", "x".repeat(256))),
            Err(FsError::NameTooLong)
        );
        // Longer than PATH_MAX is fine (a path argument of 4,095 bytes relative to a deep
        // directory); past PATH_BYTES_MAX it is not.
        let long = format!("/{}", "x".repeat(200)).repeat(40);
        assert!(long.len() > 8000);
        assert_eq!(validate_path(&long), Ok(()));
        let too_long = format!("/{}", "x".repeat(200)).repeat(PATH_BYTES_MAX / 201 + 1);
        assert_eq!(validate_path(&too_long), Err(FsError::NameTooLong));
    }
}
