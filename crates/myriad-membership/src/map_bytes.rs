//! The cluster map's extension (`MapExt`) in the group's records (docs/upgrades.md "New
//! fields in the cluster map", step 3). A map inside a postcard record outside any
//! `versioned::scope` is written as protocol 34 wrote it, without its extension, so that
//! every member, a 34 one included, reads the log, the snapshots and a forwarded proposal.
//! The extension is kept beside it, each time after the protocol version it is written
//! for (the cluster's floor, at least 35), so that a reader decodes it as written and
//! fields appended to the extension later need no new record:
//! - a log entry of a map with an extension is `MapCommand::InstallExt`, a new last
//!   variant holding (version, the map written for it); proposed only once the floor is
//!   35 or later, when every member reads it;
//! - the state machine's record (and so its snapshots) and a proposal forwarded to the
//!   leader are the 34 bytes followed by (version, the extension written for it):
//!   postcard's `from_bytes` leaves bytes after a value unread, so a member of 34 reads
//!   the map and ignores the rest.

use std::fmt;

use myriad_placement::map_wire::{MAP_EXT_SINCE, scope};
use myriad_placement::{ClusterMap, MapExt};
use serde::de::{DeserializeOwned, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The version a map with extension `ext` is written for in the group's records: its
/// floor, which every member speaks (at least 35, the first that has an extension).
fn written_for(ext: &MapExt) -> u16 {
    ext.protocol_floor.max(MAP_EXT_SINCE)
}

/// `value` written as (version, `value` encoded for that version).
struct Versioned<'a, T>(u16, &'a T);

impl<T: Serialize> Serialize for Versioned<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(2)?;
        t.serialize_element(&self.0)?;
        scope(self.0, || t.serialize_element(self.1))?;
        t.end()
    }
}

/// A value that carries the version it is written for (`written_for` of its extension).
trait WrittenFor {
    fn written_for(&self) -> u16;
}

impl WrittenFor for MapExt {
    fn written_for(&self) -> u16 {
        written_for(self)
    }
}

impl WrittenFor for ClusterMap {
    fn written_for(&self) -> u16 {
        written_for(&self.ext)
    }
}

/// Reads what `Versioned` wrote: the value decoded for the version written before it.
/// The version must be the one the value itself says it is written for, as `Versioned`
/// wrote it: bytes of another version (which no member writes) would decode to a value
/// that is written back differently (fields of the version read, dropped for the one
/// written), so they are refused, not read.
fn read_versioned<'de, T: Deserialize<'de> + WrittenFor, D: Deserializer<'de>>(
    d: D,
) -> Result<T, D::Error> {
    struct V<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de> + WrittenFor> Visitor<'de> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a protocol version and a value written for it")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
            let version: u16 = seq
                .next_element()?
                .ok_or_else(|| serde::de::Error::invalid_length(0, &self))?;
            let value: T = scope(version, || seq.next_element())?
                .ok_or_else(|| serde::de::Error::invalid_length(1, &self))?;
            let expected = value.written_for();
            if version != expected {
                return Err(serde::de::Error::custom(format_args!(
                    "a map extension marked as written for protocol {version} says it is \
                     written for {expected}"
                )));
            }
            Ok(value)
        }
    }
    d.deserialize_tuple(2, V(std::marker::PhantomData))
}

/// `#[serde(with)]` for a map written with its extension (`MapCommand::InstallExt`).
pub(crate) mod with_ext {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(map: &ClusterMap, s: S) -> Result<S::Ok, S::Error> {
        Versioned(written_for(&map.ext), map).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ClusterMap, D::Error> {
        read_versioned(d)
    }
}

/// The extension as the trailer of a record.
struct Trailer(MapExt);

impl<'de> Deserialize<'de> for Trailer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        read_versioned(d).map(Trailer)
    }
}

/// `v` (holding a map written without its extension), then `ext` (`Versioned`).
pub(crate) fn to_bytes_with_ext<T: Serialize>(
    v: &T,
    ext: &MapExt,
) -> Result<Vec<u8>, postcard::Error> {
    let mut bytes = postcard::to_allocvec(v)?;
    bytes.extend(postcard::to_allocvec(&Versioned(written_for(ext), ext))?);
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
    Ok((v, Some(postcard::from_bytes::<Trailer>(rest)?.0)))
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
        // Written for the map's floor, read for the version written.
        let trailer = &bytes[postcard::to_allocvec(&without).unwrap_or_default().len()..];
        assert_eq!(trailer.first(), Some(&36), "the version first: {trailer:?}");
        let plain = postcard::to_allocvec(&map).unwrap_or_default();
        let (_, none) = from_bytes_with_ext::<ClusterMap>(&plain).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(none, None);
    }

    /// Bytes marked with another version than the one their map is written for are
    /// refused: read for that version they would be written back differently (the fuzz
    /// target `membership` found an `InstallExt` marked 108 holding a map of floor 0,
    /// whose quotas, read for 108, were dropped when written again for 35).
    #[test]
    fn a_map_marked_with_another_version_than_its_floor_is_refused() {
        let mut map = map_with_floor();
        map.ext.protocol_floor = 37;
        let map = map
            .with_quota("/lab", 10, 20)
            .unwrap_or_else(|e| panic!("{e}"));
        let good =
            postcard::to_allocvec(&crate::MapCommand::install(map.clone())).unwrap_or_default();
        assert_eq!(good.get(..2), Some(&[1, 37][..]), "InstallExt, version 37");
        let back: crate::MapCommand = postcard::from_bytes(&good).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.into_map(), map);
        let mut bad = good.clone();
        bad[1] = 38;
        let err = postcard::from_bytes::<crate::MapCommand>(&bad);
        assert!(err.is_err(), "read for 38 though written for 37: {err:?}");
        // The trailer of a stored record likewise.
        let mut rec = to_bytes_with_ext(&map, &map.ext).unwrap_or_default();
        let at = rec.len()
            - postcard::to_allocvec(&Versioned(37, &map.ext))
                .unwrap_or_default()
                .len();
        assert_eq!(rec[at], 37);
        rec[at] = 38;
        assert!(from_bytes_with_ext::<ClusterMap>(&rec).is_err());
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
