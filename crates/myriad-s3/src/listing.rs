//! ListObjectsV2 over directories, in S3's order (keys compared as UTF-8 bytes).
//!
//! A directory's children are sorted with each directory keyed as `name/`: every key under
//! directory `a` starts with `a/`, so "a-b" < "a/b" < "a0" holds when the walk visits `a-b`,
//! then `a`'s children, then `a0`. With delimiter "/" a page is one listing of the
//! prefix's directory (files become Contents, directories CommonPrefixes). Without a
//! delimiter (or with another one) the tree below the prefix is walked depth-first in that
//! order, directories wholly before the start skipped unlisted.
//!
//! Continuation tokens are the last item returned: a key (continue after it) or a common
//! prefix (continue after every key starting with it).

use std::cmp::Ordering;

use s3s::{S3Result, s3_error};

/// What a listing shows of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    pub size: u64,
    pub mtime_ns: i64,
    /// Unquoted (`etag::etag_value`).
    pub etag: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Object(ObjectMeta),
    Dir,
    /// Symlinks, devices and the like: not objects, never listed.
    Other,
}

/// One child of a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: EntryKind,
}

/// One line of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Object { key: String, meta: ObjectMeta },
    Prefix(String),
}

/// Where a listing starts: after `key`, and with `past_prefix` also after every key that
/// starts with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    pub key: String,
    pub past_prefix: bool,
}

impl Marker {
    /// Whether object `key` comes after the marker.
    pub fn passes_key(&self, key: &str) -> bool {
        key > self.key.as_str() && !(self.past_prefix && key.starts_with(&self.key))
    }

    /// Whether some key starting with `prefix` may come after the marker.
    pub fn may_pass_prefix(&self, prefix: &str) -> bool {
        if self.past_prefix && prefix.starts_with(&self.key) {
            return false;
        }
        prefix > self.key.as_str() || self.key.starts_with(prefix)
    }

    /// The marker after `item`, as the next page starts.
    pub fn after(item: &Item) -> Marker {
        match item {
            Item::Object { key, .. } => Marker {
                key: key.clone(),
                past_prefix: false,
            },
            Item::Prefix(p) => Marker {
                key: p.clone(),
                past_prefix: true,
            },
        }
    }

    /// As an opaque continuation token.
    pub fn token(&self) -> String {
        let mut out = String::with_capacity(1 + 2 * self.key.len());
        out.push(if self.past_prefix { 'p' } else { 'k' });
        for b in self.key.bytes() {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// From a continuation token this gateway gave.
    pub fn from_token(token: &str) -> S3Result<Marker> {
        let bad = || {
            s3_error!(
                InvalidArgument,
                "the continuation token is not one this gateway gave"
            )
        };
        let past_prefix = match token.as_bytes().first() {
            Some(b'p') => true,
            Some(b'k') => false,
            _ => return Err(bad()),
        };
        let hex = &token[1..];
        if !hex.len().is_multiple_of(2) {
            return Err(bad());
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("x"), 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| bad())?;
        let key = String::from_utf8(bytes).map_err(|_| bad())?;
        Ok(Marker { key, past_prefix })
    }
}

/// Orders a directory's children as their keys sort (directories as `name/`), leaving out
/// what is never listed (non-objects, the gateway's temporary files).
pub fn sort_entries(entries: &mut Vec<Entry>) {
    entries
        .retain(|e| !matches!(e.kind, EntryKind::Other) && !crate::keys::is_hidden_entry(&e.name));
    entries.sort_by(compare_entries);
}

fn compare_entries(a: &Entry, b: &Entry) -> Ordering {
    let slash = |e: &Entry| matches!(e.kind, EntryKind::Dir).then_some(b'/');
    a.name
        .bytes()
        .chain(slash(a))
        .cmp(b.name.bytes().chain(slash(b)))
}

/// `prefix` split at its last '/': the directory part (empty or ending in '/') and the
/// start of the names in that directory.
pub fn split_prefix(prefix: &str) -> (&str, &str) {
    match prefix.rfind('/') {
        Some(at) => (&prefix[..=at], &prefix[at + 1..]),
        None => ("", prefix),
    }
}

/// The items of a listing with delimiter "/": from the children of `prefix`'s directory,
/// those whose names start with the rest of the prefix, in order, after `marker`.
pub fn one_level(prefix: &str, mut entries: Vec<Entry>, marker: Option<&Marker>) -> Vec<Item> {
    let (dir, start) = split_prefix(prefix);
    sort_entries(&mut entries);
    entries
        .into_iter()
        .filter(|e| e.name.starts_with(start))
        .filter_map(|e| match e.kind {
            EntryKind::Object(meta) => {
                let key = format!("{dir}{}", e.name);
                marker
                    .is_none_or(|m| m.passes_key(&key))
                    .then_some(Item::Object { key, meta })
            }
            EntryKind::Dir => {
                let p = format!("{dir}{}/", e.name);
                marker
                    .is_none_or(|m| m.may_pass_prefix(&p))
                    .then_some(Item::Prefix(p))
            }
            EntryKind::Other => None,
        })
        .collect()
}

/// The common prefix `key` rolls up into under `delimiter`: the key up to and including the
/// first delimiter after `prefix`.
pub fn rolled_up(prefix: &str, delimiter: &str, key: &str) -> Option<String> {
    if delimiter.is_empty() {
        return None;
    }
    let rest = key.strip_prefix(prefix)?;
    let at = rest.find(delimiter)?;
    Some(key[..prefix.len() + at + delimiter.len()].to_string())
}

/// The directories a walk lists.
pub trait Lister {
    /// The children of the directory holding the keys that start with `key_dir` (empty
    /// for the bucket, else ending in '/'); `None` if there is no such directory.
    fn list(
        &self,
        key_dir: &str,
    ) -> impl std::future::Future<Output = S3Result<Option<Vec<Entry>>>> + Send;
}

/// A depth-first walk of the objects whose keys start with a prefix, in key order.
pub struct Walk<'a, L> {
    lister: &'a L,
    prefix: String,
    marker: Option<Marker>,
    /// Directories being walked: their key prefix and the children not yet visited.
    stack: Vec<(String, std::vec::IntoIter<Entry>)>,
    started: bool,
}

impl<'a, L: Lister + Sync> Walk<'a, L> {
    pub fn new(lister: &'a L, prefix: &str, marker: Option<Marker>) -> Self {
        Walk {
            lister,
            prefix: prefix.to_string(),
            marker,
            stack: Vec::new(),
            started: false,
        }
    }

    /// Continues after `marker` from here on (it must not be before the keys returned).
    pub fn skip_to(&mut self, marker: Marker) {
        self.marker = Some(marker);
    }

    /// The next object, in key order.
    pub async fn next(&mut self) -> S3Result<Option<(String, ObjectMeta)>> {
        if !self.started {
            self.started = true;
            let (dir, start) = split_prefix(&self.prefix);
            if let Some(mut entries) = self.lister.list(dir).await? {
                entries.retain(|e| e.name.starts_with(start));
                sort_entries(&mut entries);
                self.stack.push((dir.to_string(), entries.into_iter()));
            }
        }
        loop {
            let Some((key_dir, children)) = self.stack.last_mut() else {
                return Ok(None);
            };
            let Some(entry) = children.next() else {
                self.stack.pop();
                continue;
            };
            match entry.kind {
                EntryKind::Object(meta) => {
                    let key = format!("{key_dir}{}", entry.name);
                    if self.marker.as_ref().is_none_or(|m| m.passes_key(&key)) {
                        return Ok(Some((key, meta)));
                    }
                }
                EntryKind::Dir => {
                    let sub = format!("{key_dir}{}/", entry.name);
                    if self.marker.as_ref().is_none_or(|m| m.may_pass_prefix(&sub))
                        && let Some(mut entries) = self.lister.list(&sub).await?
                    {
                        sort_entries(&mut entries);
                        self.stack.push((sub, entries.into_iter()));
                    }
                }
                EntryKind::Other => {}
            }
        }
    }
}

/// One page of a listing.
#[derive(Debug, PartialEq, Eq)]
pub struct Page {
    pub items: Vec<Item>,
    /// More items follow; the next page starts after the last of `items`.
    pub truncated: bool,
}

impl Page {
    /// The first `max_keys` of `items` (all of one listing).
    pub fn of(mut items: Vec<Item>, max_keys: usize) -> Page {
        let truncated = items.len() > max_keys && max_keys > 0;
        items.truncate(max_keys);
        Page { items, truncated }
    }

    /// The continuation token of the next page, if there is one.
    pub fn next_token(&self) -> Option<String> {
        if !self.truncated {
            return None;
        }
        self.items.last().map(|i| Marker::after(i).token())
    }
}

/// A page of up to `max_keys` items walking the tree below `prefix`, keys rolled up into
/// common prefixes at `delimiter` if one is given.
pub async fn walk_page<L: Lister + Sync>(
    lister: &L,
    prefix: &str,
    delimiter: Option<&str>,
    marker: Option<Marker>,
    max_keys: usize,
) -> S3Result<Page> {
    let mut walk = Walk::new(lister, prefix, marker);
    let mut items = Vec::new();
    if max_keys == 0 {
        return Ok(Page::of(items, 0));
    }
    while let Some((key, meta)) = walk.next().await? {
        let item = match delimiter.and_then(|d| rolled_up(prefix, d, &key)) {
            Some(common) => {
                // Every other key under it comes next: skip them unvisited.
                walk.skip_to(Marker {
                    key: common.clone(),
                    past_prefix: true,
                });
                Item::Prefix(common)
            }
            None => Item::Object { key, meta },
        };
        if items.len() == max_keys {
            return Ok(Page {
                items,
                truncated: true,
            });
        }
        items.push(item);
    }
    Ok(Page {
        items,
        truncated: false,
    })
}

/// `s` percent-encoded as S3 does for `encoding-type=url` (all but unreserved characters
/// and '/').
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn meta() -> ObjectMeta {
        ObjectMeta {
            size: 1,
            mtime_ns: 0,
            etag: "e".into(),
        }
    }

    fn file(name: &str) -> Entry {
        Entry {
            name: name.into(),
            kind: EntryKind::Object(meta()),
        }
    }

    fn dir(name: &str) -> Entry {
        Entry {
            name: name.into(),
            kind: EntryKind::Dir,
        }
    }

    /// A bucket as a set of keys; directories are what the keys imply.
    struct Tree(BTreeMap<String, ()>);

    impl Tree {
        fn new(keys: &[&str]) -> Tree {
            Tree(keys.iter().map(|k| (k.to_string(), ())).collect())
        }
    }

    impl Lister for Tree {
        async fn list(&self, key_dir: &str) -> S3Result<Option<Vec<Entry>>> {
            let mut out: BTreeMap<String, Entry> = BTreeMap::new();
            for k in self.0.keys() {
                let Some(rest) = k.strip_prefix(key_dir) else {
                    continue;
                };
                match rest.split_once('/') {
                    Some((d, _)) => out.insert(d.to_string(), dir(d)),
                    None => out.insert(rest.to_string(), file(rest)),
                };
            }
            if out.is_empty() && !key_dir.is_empty() {
                return Ok(None);
            }
            // Unsorted, as a directory listing comes.
            Ok(Some(out.into_values().rev().collect()))
        }
    }

    fn keys(page: &Page) -> Vec<String> {
        page.items
            .iter()
            .map(|i| match i {
                Item::Object { key, .. } => key.clone(),
                Item::Prefix(p) => format!("[{p}]"),
            })
            .collect()
    }

    async fn walk_all(
        tree: &Tree,
        prefix: &str,
        delimiter: Option<&str>,
        max: usize,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut marker = None;
        loop {
            let page = walk_page(tree, prefix, delimiter, marker.clone(), max)
                .await
                .unwrap_or_else(|e| panic!("{e:?}"));
            assert!(page.items.len() <= max);
            out.extend(keys(&page));
            match page.next_token() {
                Some(t) => {
                    marker = Some(Marker::from_token(&t).unwrap_or_else(|e| panic!("{e:?}")))
                }
                None => return out,
            }
        }
    }

    const KEYS: &[&str] = &[
        "a-b", "a/b", "a/c/d", "a/c-e", "a0", "a.txt", "b", "ü/x", "z/y/x/w", "A",
    ];

    fn sorted(keys: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn directories_sort_as_name_slash() {
        let mut e = vec![file("a0"), dir("a"), file("a-b"), file("a.txt"), file("A")];
        sort_entries(&mut e);
        let names: Vec<&str> = e.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["A", "a-b", "a.txt", "a", "a0"]);
    }

    #[tokio::test]
    async fn a_walk_gives_keys_in_byte_order_on_every_page_size() {
        let tree = Tree::new(KEYS);
        for max in [1, 2, 3, 1000] {
            assert_eq!(
                walk_all(&tree, "", None, max).await,
                sorted(KEYS),
                "max {max}"
            );
        }
    }

    #[tokio::test]
    async fn a_walk_honours_the_prefix() {
        let tree = Tree::new(KEYS);
        assert_eq!(walk_all(&tree, "a/c", None, 1).await, ["a/c-e", "a/c/d"]);
        assert_eq!(walk_all(&tree, "a", None, 1000).await.len(), 6);
        assert!(walk_all(&tree, "nope/", None, 10).await.is_empty());
    }

    #[test]
    fn one_level_gives_contents_and_common_prefixes_in_order() {
        let entries = vec![file("a0"), dir("a"), file("a-b"), dir("b"), file("c")];
        let items = one_level("a", entries, None);
        let shown: Vec<String> = items
            .iter()
            .map(|i| match i {
                Item::Object { key, .. } => key.clone(),
                Item::Prefix(p) => format!("[{p}]"),
            })
            .collect();
        assert_eq!(shown, ["a-b", "[a/]", "a0"]);
        // Continuing after the common prefix skips it, after a key starts past it.
        let after_prefix = Marker::after(&Item::Prefix("a/".into()));
        let rest = one_level(
            "a",
            vec![file("a0"), dir("a"), file("a-b")],
            Some(&after_prefix),
        );
        assert_eq!(rest.len(), 1);
        let start_after = Marker {
            key: "a-b".into(),
            past_prefix: false,
        };
        let rest = one_level(
            "",
            vec![file("a0"), dir("a"), file("a-b")],
            Some(&start_after),
        );
        assert_eq!(rest.len(), 2);
    }

    #[tokio::test]
    async fn other_delimiters_roll_keys_up_while_walking() {
        let tree = Tree::new(&["x-1/a", "x-1/b", "x-2", "y"]);
        for max in [1, 2, 10] {
            assert_eq!(walk_all(&tree, "", Some("-"), max).await, ["[x-]", "y"]);
            assert_eq!(
                walk_all(&tree, "x-1/", Some("-"), max).await,
                ["x-1/a", "x-1/b"]
            );
        }
        assert_eq!(
            walk_all(&tree, "", Some("/"), 1).await,
            ["[x-1/]", "x-2", "y"]
        );
    }

    #[test]
    fn markers_round_trip_as_tokens() {
        for m in [
            Marker {
                key: "a/ü b".into(),
                past_prefix: true,
            },
            Marker {
                key: String::new(),
                past_prefix: false,
            },
        ] {
            assert_eq!(
                Marker::from_token(&m.token()).unwrap_or_else(|e| panic!("{e:?}")),
                m
            );
        }
        for bad in ["", "x61", "k6", "kzz", "kff"] {
            assert!(Marker::from_token(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn prefix_pruning_follows_the_marker() {
        let m = Marker {
            key: "a/c".into(),
            past_prefix: false,
        };
        assert!(m.may_pass_prefix("a/"));
        assert!(m.may_pass_prefix("a/d/"));
        assert!(!m.may_pass_prefix("a/b/"));
        let p = Marker {
            key: "a/".into(),
            past_prefix: true,
        };
        assert!(!p.may_pass_prefix("a/"));
        assert!(!p.may_pass_prefix("a/b/"));
        assert!(!p.passes_key("a/z"));
        assert!(p.passes_key("a0"));
    }

    #[test]
    fn url_encoding_keeps_slashes_and_unreserved() {
        assert_eq!(url_encode("a b/ü+x~"), "a%20b/%C3%BC%2Bx~");
    }
}
