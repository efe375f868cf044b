//! How a cluster map is encoded for a peer of a given protocol version (docs/upgrades.md
//! "New fields in the cluster map"): the map's extension (`MapExt`), appended after
//! protocol 34, is written and read only when the message is encoded for protocol 35 or
//! later, so a peer of 34 gets the map of 34 byte for byte. JSON (map files) always has it.
//!
//! The version is the encoding thread's (`scope`): a connection sets its negotiated
//! version around each frame it encodes or decodes. Outside any scope a map is encoded
//! as protocol 34 encoded it (the Raft log and snapshots, which every member replays,
//! until the cluster's protocol floor allows more).

use std::cell::Cell;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::map::{ClusterMap, MapExt};
use crate::members::{NodeInfo, PartitionInfo, Policy};
use crate::quotas::Quota;

/// The first protocol version whose maps carry `MapExt`.
pub const MAP_EXT_SINCE: u16 = 35;
/// The first protocol version whose `MapExt` carries quotas (appended after the floor).
pub const QUOTAS_SINCE: u16 = 37;
/// The first protocol version whose `MapExt` carries the trash's setting (docs/trash.md).
pub const TRASH_SINCE: u16 = 38;

thread_local! {
    static VERSION: Cell<u16> = const { Cell::new(MAP_EXT_SINCE - 1) };
}

/// Runs `f` with maps encoded and decoded for protocol `version` on this thread (restored
/// after, even if `f` panics). `f` must not await: the version is the thread's.
pub fn scope<R>(version: u16, f: impl FnOnce() -> R) -> R {
    struct Restore(u16);
    impl Drop for Restore {
        fn drop(&mut self) {
            VERSION.with(|v| v.set(self.0));
        }
    }
    let _restore = Restore(VERSION.with(|v| v.replace(version)));
    f()
}

/// The protocol version maps are encoded for on this thread now.
#[must_use]
pub fn version() -> u16 {
    VERSION.with(Cell::get)
}

/// The fields every version's map has, as protocol 34 wrote them.
#[derive(Deserialize)]
struct Fields34 {
    epoch: u64,
    vnodes_per_partition: u32,
    chunk_size_bytes: u64,
    inline_max_bytes: u64,
    replication: u32,
    nodes: Vec<NodeInfo>,
    partitions: Vec<PartitionInfo>,
    #[serde(default)]
    policies: Vec<Policy>,
    #[serde(default)]
    retired_partitions_max: u32,
}

/// A map file: the fields, then the extension (absent in files older than it).
#[derive(Deserialize)]
struct Json {
    #[serde(flatten)]
    base: Fields34,
    #[serde(default)]
    ext: MapExt,
}

impl Fields34 {
    fn with(self, ext: MapExt) -> ClusterMap {
        ClusterMap {
            epoch: self.epoch,
            vnodes_per_partition: self.vnodes_per_partition,
            chunk_size_bytes: self.chunk_size_bytes,
            inline_max_bytes: self.inline_max_bytes,
            replication: self.replication,
            nodes: self.nodes,
            partitions: self.partitions,
            policies: self.policies,
            retired_partitions_max: self.retired_partitions_max,
            ext,
        }
    }
}

impl Serialize for ClusterMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ext = s.is_human_readable() || version() >= MAP_EXT_SINCE;
        let mut st = s.serialize_struct("ClusterMap", if ext { 10 } else { 9 })?;
        st.serialize_field("epoch", &self.epoch)?;
        st.serialize_field("vnodes_per_partition", &self.vnodes_per_partition)?;
        st.serialize_field("chunk_size_bytes", &self.chunk_size_bytes)?;
        st.serialize_field("inline_max_bytes", &self.inline_max_bytes)?;
        st.serialize_field("replication", &self.replication)?;
        st.serialize_field("nodes", &self.nodes)?;
        st.serialize_field("partitions", &self.partitions)?;
        st.serialize_field("policies", &self.policies)?;
        st.serialize_field("retired_partitions_max", &self.retired_partitions_max)?;
        if ext {
            st.serialize_field("ext", &self.ext)?;
        }
        st.end()
    }
}

impl<'de> Deserialize<'de> for ClusterMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let j = Json::deserialize(d)?;
            return Ok(j.base.with(j.ext));
        }
        if version() >= MAP_EXT_SINCE {
            // Laid out as one struct: the fields, then the extension's.
            let (base, ext) = <(Fields34, MapExt)>::deserialize(d)?;
            return Ok(base.with(ext));
        }
        Ok(Fields34::deserialize(d)?.with(MapExt::default()))
    }
}

/// `MapExt` in a map file: every field, each absent in files older than it.
#[derive(Serialize, Deserialize)]
struct ExtJson {
    #[serde(default)]
    protocol_floor: u16,
    #[serde(default)]
    quotas: Vec<Quota>,
    #[serde(default)]
    trash_days: u32,
}

impl Serialize for MapExt {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            return ExtJson {
                protocol_floor: self.protocol_floor,
                quotas: self.quotas.clone(),
                trash_days: self.trash_days,
            }
            .serialize(s);
        }
        // Each field after the first only for the versions that know it.
        let quotas = version() >= QUOTAS_SINCE;
        let trash = version() >= TRASH_SINCE;
        let fields = 1 + usize::from(quotas) + usize::from(trash);
        let mut st = s.serialize_struct("MapExt", fields)?;
        st.serialize_field("protocol_floor", &self.protocol_floor)?;
        if quotas {
            st.serialize_field("quotas", &self.quotas)?;
        }
        if trash {
            st.serialize_field("trash_days", &self.trash_days)?;
        }
        st.end()
    }
}

impl<'de> Deserialize<'de> for MapExt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let j = ExtJson::deserialize(d)?;
            return Ok(MapExt {
                protocol_floor: j.protocol_floor,
                quotas: j.quotas,
                trash_days: j.trash_days,
            });
        }
        if version() >= TRASH_SINCE {
            let (protocol_floor, quotas, trash_days) = <(u16, Vec<Quota>, u32)>::deserialize(d)?;
            return Ok(MapExt {
                protocol_floor,
                quotas,
                trash_days,
            });
        }
        if version() >= QUOTAS_SINCE {
            let (protocol_floor, quotas) = <(u16, Vec<Quota>)>::deserialize(d)?;
            return Ok(MapExt {
                protocol_floor,
                quotas,
                ..MapExt::default()
            });
        }
        let (protocol_floor,) = <(u16,)>::deserialize(d)?;
        Ok(MapExt {
            protocol_floor,
            ..MapExt::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map file keeps the extension; one written before it existed reads with none.
    #[test]
    fn a_map_file_keeps_the_extension_and_an_older_file_reads_without_it() {
        let mut map = ClusterMap::new(3, &["h1:1".to_string()]);
        map.ext.protocol_floor = 35;
        let json = map.to_json();
        assert!(json.contains("\"protocol_floor\": 35"), "{json}");
        assert_eq!(ClusterMap::from_json(&json).ok(), Some(map.clone()));
        let mut old: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        if let Some(o) = old.as_object_mut() {
            assert!(o.remove("ext").is_some());
        }
        map.ext = MapExt::default();
        assert_eq!(ClusterMap::from_json(&old.to_string()).ok(), Some(map));
    }

    /// Quotas go only to peers of 37 or later; one of 35 or 36 reads the floor alone, and
    /// a map file keeps them.
    #[test]
    fn quotas_are_written_for_37_and_later_only() {
        let map = ClusterMap::new(3, &["h1:1".to_string()])
            .with_quota("/lab", 10, 20)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut floored = map.clone();
        floored.ext.protocol_floor = 36;
        let bytes =
            |v: u16, m: &ClusterMap| scope(v, || postcard::to_allocvec(m).unwrap_or_default());
        let read = |v: u16, b: &[u8]| scope(v, || postcard::from_bytes::<ClusterMap>(b).ok());
        let mut without = floored.clone();
        without.ext.quotas.clear();
        assert_eq!(
            bytes(36, &floored),
            bytes(36, &without),
            "36 gets no quotas"
        );
        assert_eq!(read(36, &bytes(36, &floored)), Some(without));
        assert_eq!(read(37, &bytes(37, &floored)), Some(floored.clone()));
        assert_ne!(
            read(37, &bytes(36, &floored)),
            Some(floored.clone()),
            "never made up"
        );
        assert_eq!(
            ClusterMap::from_json(&floored.to_json()).ok(),
            Some(floored)
        );
    }

    /// The trash's setting goes only to peers of 38 or later; one of 37 reads the floor
    /// and the quotas, and a map file keeps it.
    #[test]
    fn the_trash_setting_is_written_for_38_and_later_only() {
        let mut map = ClusterMap::new(3, &["h1:1".to_string()])
            .with_quota("/lab", 10, 20)
            .unwrap_or_else(|e| panic!("{e}"));
        map.ext.protocol_floor = 38;
        map.ext.trash_days = 7;
        let bytes =
            |v: u16, m: &ClusterMap| scope(v, || postcard::to_allocvec(m).unwrap_or_default());
        let read = |v: u16, b: &[u8]| scope(v, || postcard::from_bytes::<ClusterMap>(b).ok());
        let mut without = map.clone();
        without.ext.trash_days = 0;
        assert_eq!(
            bytes(37, &map),
            bytes(37, &without),
            "37 gets no trash setting"
        );
        assert_eq!(read(37, &bytes(37, &map)), Some(without));
        assert_eq!(read(38, &bytes(38, &map)), Some(map.clone()));
        let json = map.to_json();
        assert!(json.contains("\"trash_days\": 7"), "{json}");
        assert_eq!(ClusterMap::from_json(&json).ok(), Some(map));
    }

    #[test]
    fn a_scope_sets_the_version_and_puts_it_back() {
        assert_eq!(version(), MAP_EXT_SINCE - 1, "outside any scope: as 34");
        let inner = scope(40, || (version(), scope(36, version), version()));
        assert_eq!(inner, (40, 36, 40));
        let caught = std::panic::catch_unwind(|| scope(41, || panic!("inside")));
        assert!(caught.is_err());
        assert_eq!(version(), MAP_EXT_SINCE - 1, "restored after a panic");
    }
}
