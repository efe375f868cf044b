//! How a `requests::Create` is encoded for a peer of a given protocol version: its
//! `data_at`, appended in 36, is written and read only in frames encoded for 36 or later
//! (`versioned::scope`, set by the connection around each frame), so a peer of 35 gets
//! 35's create byte for byte; JSON always has it. Outside any scope (tests that encode a
//! request by hand, the fuzzers' seeds) a create is written as 35 wrote it.

use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::InodeId;
use crate::requests::Create;
use crate::versioned::version;

/// The first protocol version whose creates carry `data_at`.
pub const CREATE_DATA_AT_SINCE: u16 = 36;

/// The fields every version's create has, as protocol 35 wrote them.
#[derive(Deserialize)]
struct Fields35 {
    path: String,
    mode: u32,
    exclusive: bool,
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
    durable: bool,
    ino: Option<InodeId>,
}

/// A create in JSON: the fields, then `data_at` (absent in one written before it).
#[derive(Deserialize)]
struct Json {
    #[serde(flatten)]
    base: Fields35,
    #[serde(default)]
    data_at: Option<i64>,
}

impl Fields35 {
    fn with(self, data_at: Option<i64>) -> Create {
        Create {
            path: self.path,
            mode: self.mode,
            exclusive: self.exclusive,
            data: self.data,
            durable: self.durable,
            ino: self.ino,
            data_at,
        }
    }
}

impl Serialize for Create {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let at = s.is_human_readable() || version() >= CREATE_DATA_AT_SINCE;
        let mut st = s.serialize_struct("Create", if at { 7 } else { 6 })?;
        st.serialize_field("path", &self.path)?;
        st.serialize_field("mode", &self.mode)?;
        st.serialize_field("exclusive", &self.exclusive)?;
        st.serialize_field("data", serde_bytes::Bytes::new(&self.data))?;
        st.serialize_field("durable", &self.durable)?;
        st.serialize_field("ino", &self.ino)?;
        if at {
            st.serialize_field("data_at", &self.data_at)?;
        }
        st.end()
    }
}

impl<'de> Deserialize<'de> for Create {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let j = Json::deserialize(d)?;
            return Ok(j.base.with(j.data_at));
        }
        if version() >= CREATE_DATA_AT_SINCE {
            // Laid out as one struct: the fields, then `data_at`.
            let (base, at) = <(Fields35, Option<i64>)>::deserialize(d)?;
            return Ok(base.with(at));
        }
        Ok(Fields35::deserialize(d)?.with(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};
    use crate::versioned::scope;

    fn create(data_at: Option<i64>) -> Create {
        Create {
            path: "/d/f".into(),
            mode: 0o644,
            exclusive: true,
            data: b"bytes".to_vec(),
            durable: false,
            ino: Some(InodeId(7)),
            data_at,
        }
    }

    /// A peer of 35 gets 35's bytes (no `data_at`); one of 36 gets it back whole; 35's
    /// bytes read as 36 are malformed, never a made-up time.
    #[test]
    fn a_create_carries_its_data_time_only_to_peers_that_know_it() {
        let c = create(Some(1_234_567));
        let for_35 = scope(35, || encode(&c)).unwrap_or_default();
        let for_36 = scope(36, || encode(&c)).unwrap_or_default();
        assert!(for_36.len() > for_35.len());
        assert_eq!(
            scope(35, || decode::<Create>(&for_35)).ok(),
            Some(create(None))
        );
        assert_eq!(
            scope(36, || decode::<Create>(&for_36)).ok(),
            Some(c.clone())
        );
        assert!(scope(36, || decode::<Create>(&for_35)).is_err());
        // Outside any scope: as 35.
        assert_eq!(encode(&c).unwrap_or_default(), for_35);
        // JSON keeps it, and reads one written without it.
        let json = serde_json::to_string(&c).unwrap_or_default();
        assert_eq!(serde_json::from_str::<Create>(&json).ok(), Some(c));
        let old = json.replace(",\"data_at\":1234567", "");
        assert_eq!(
            serde_json::from_str::<Create>(&old).ok(),
            Some(create(None))
        );
    }
}
