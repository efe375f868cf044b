//! The cluster map's extension (`MapExt`) in the group's records (docs/upgrades.md "New
//! fields in the cluster map", step 3). A map inside a postcard record outside any
//! `versioned::scope` is written as protocol 34 wrote it, without its extension, so that
//! every member, a 34 one included, reads the log, the snapshots and a forwarded proposal.
//! The extension is kept beside it:
//! - a log entry of a map with an extension is `MapCommand::InstallExt`, a new last
//!   variant whose map is written with it; proposed only once the cluster's protocol floor
//!   is 35 or later, when every member reads it;
//! - the state machine's record (and so its snapshots) and a proposal forwarded to the
//!   leader are the 34 bytes followed by the extension: postcard's `from_bytes` leaves
//!   bytes after a value unread, so a member of 34 reads the map and ignores it.

use myriad_placement::map_wire::{MAP_EXT_SINCE, scope, version};
use myriad_placement::{ClusterMap, MapExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `#[serde(with)]` for a map written with its extension (`MapCommand::InstallExt`).
pub(crate) mod with_ext {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(map: &ClusterMap, s: S) -> Result<S::Ok, S::Error> {
        scope(version().max(MAP_EXT_SINCE), || map.serialize(s))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ClusterMap, D::Error> {
        scope(version().max(MAP_EXT_SINCE), || ClusterMap::deserialize(d))
    }
}

/// `v` (holding a map written without its extension), then `ext`.
pub(crate) fn to_bytes_with_ext<T: Serialize>(
    v: &T,
    ext: &MapExt,
) -> Result<Vec<u8>, postcard::Error> {
    let mut bytes = postcard::to_allocvec(v)?;
    bytes.extend(postcard::to_allocvec(ext)?);
    Ok(bytes)
}

/// What `to_bytes_with_ext` wrote: the value, and the extension if there is one (bytes
/// written before it existed have none).
pub(crate) fn from_bytes_with_ext<T: DeserializeOwned>(
    bytes: &[u8],
) -> Result<(T, Option<MapExt>), postcard::Error> {
    let (v, rest) = postcard::take_from_bytes::<T>(bytes)?;
    if rest.is_empty() {
        return Ok((v, None));
    }
    Ok((v, Some(postcard::from_bytes(rest)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_with_floor() -> ClusterMap {
        let mut map = ClusterMap::new(3, &["h1:1".to_string(), "h2:1".to_string()]);
        map.ext.protocol_floor = 36;
        map
    }

    /// A map and its extension survive the trailer; a reader of 34 (a plain `from_bytes`
    /// of the map) reads the map and ignores what follows; bytes without a trailer read
    /// with no extension.
    #[test]
    fn the_extension_follows_the_map_and_an_older_reader_ignores_it() {
        let map = map_with_floor();
        let bytes = to_bytes_with_ext(&map, &map.ext).unwrap_or_default();
        let (back, ext) =
            from_bytes_with_ext::<ClusterMap>(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ext.as_ref(), Some(&map.ext));
        let mut without = map.clone();
        without.ext = MapExt::default();
        assert_eq!(back, without, "the map itself as 34 wrote it");
        assert_eq!(
            postcard::from_bytes::<ClusterMap>(&bytes).ok(),
            Some(without.clone())
        );
        let plain = postcard::to_allocvec(&map).unwrap_or_default();
        let (_, none) = from_bytes_with_ext::<ClusterMap>(&plain).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(none, None);
    }

    /// `InstallExt` keeps the extension in a log entry; `Install` drops it (34's entry).
    #[test]
    fn a_log_entry_keeps_the_extension_only_in_its_new_variant() {
        let map = map_with_floor();
        let ext =
            postcard::to_allocvec(&crate::MapCommand::install(map.clone())).unwrap_or_default();
        let back: crate::MapCommand = postcard::from_bytes(&ext).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.into_map(), map);
        let mut low = map.clone();
        low.ext.protocol_floor = MAP_EXT_SINCE - 1;
        let old =
            postcard::to_allocvec(&crate::MapCommand::install(low.clone())).unwrap_or_default();
        let back: crate::MapCommand = postcard::from_bytes(&old).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(back, crate::MapCommand::Install(_)));
        low.ext = MapExt::default();
        assert_eq!(back.into_map(), low);
    }
}
