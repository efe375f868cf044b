//! Path helpers that placement needs. Paths are assumed already validated (absolute,
//! normalized); validation lives in `myriad-proto`.

/// The parent directory of `path` ("/" for top-level names and for "/" itself).
#[must_use]
pub fn parent_of(path: &str) -> &str {
    split_parent(path).0
}

/// Splits `path` into (parent directory, final name). For "/" the name is empty.
#[must_use]
pub fn split_parent(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

/// The path of name `name` in directory `dir`.
#[must_use]
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// True if `path` is absolute, not `/`, and has no empty, `.` or `..` component (what a
/// policy root in a map must be; requests are validated in `myriad-proto`).
#[must_use]
pub fn is_normal_below_root(path: &str) -> bool {
    path.len() <= 4096
        && path.strip_prefix('/').is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
        })
}

/// True if `path` is `root` or inside it (both normalized).
#[must_use]
pub fn is_within(path: &str, root: &str) -> bool {
    root == "/"
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits() {
        assert_eq!(split_parent("/"), ("/", ""));
        assert_eq!(split_parent("/a"), ("/", "a"));
        assert_eq!(split_parent("/a/b"), ("/a", "b"));
        assert_eq!(split_parent("/a/b/c.txt"), ("/a/b", "c.txt"));
        assert_eq!(parent_of("/x/y"), "/x");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a/b", "c"), "/a/b/c");
        assert_eq!(split_parent(&join("/a", "b")), ("/a", "b"));
    }

    #[test]
    fn policy_roots_and_trees() {
        assert!(is_normal_below_root("/a"));
        assert!(is_normal_below_root("/a/b.c"));
        for bad in [
            "", "/", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/a\0",
        ] {
            assert!(!is_normal_below_root(bad), "{bad:?}");
        }
        assert!(is_within("/a/b", "/a"));
        assert!(is_within("/a", "/a"));
        assert!(!is_within("/ab", "/a"));
        assert!(!is_within("/", "/a"));
        assert!(is_within("/x", "/"));
    }
}
