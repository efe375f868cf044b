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
}
