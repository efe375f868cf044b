//! Fields appended to requests in protocol 36, each written and read only in frames
//! encoded for 36 or later (`versioned::scope`, set by the connection around each frame),
//! so a peer of 35 gets 35's request byte for byte; JSON always has them. Outside any
//! scope (tests that encode a request by hand, the fuzzers' seeds) a request is written as
//! 35 wrote it.
//! - `requests::Create::data_at`: the time of writes answered behind folded into a create;
//! - `SetAttr::of`: the inode a change of attributes is meant for (the servers refuse it
//!   if the name holds another).
//!
//! And in protocol 43, written and read only in frames encoded for 43 or later:
//! - `requests::Create::then`: a setattr answered behind folded into the create.

use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::InodeId;
use crate::SetAttr;
use crate::requests::{Create, SetAfter};
use crate::versioned::version;

/// The first protocol version with these fields.
pub const APPENDED_36: u16 = 36;
/// The first with `Create::then`.
pub const APPENDED_43: u16 = 43;

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

/// A create in JSON: the fields, then `data_at` and `then` (absent in one written before
/// them).
#[derive(Deserialize)]
struct Json {
    #[serde(flatten)]
    base: Fields35,
    #[serde(default)]
    data_at: Option<i64>,
    #[serde(default)]
    then: Option<SetAfter>,
}

impl Fields35 {
    fn with(self, data_at: Option<i64>, then: Option<SetAfter>) -> Create {
        Create {
            path: self.path,
            mode: self.mode,
            exclusive: self.exclusive,
            data: self.data,
            durable: self.durable,
            ino: self.ino,
            data_at,
            then,
        }
    }
}

impl Serialize for Create {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let json = s.is_human_readable();
        let at = json || version() >= APPENDED_36;
        let then = json || version() >= APPENDED_43;
        let fields = 6 + usize::from(at) + usize::from(then);
        let mut st = s.serialize_struct("Create", fields)?;
        st.serialize_field("path", &self.path)?;
        st.serialize_field("mode", &self.mode)?;
        st.serialize_field("exclusive", &self.exclusive)?;
        st.serialize_field("data", serde_bytes::Bytes::new(&self.data))?;
        st.serialize_field("durable", &self.durable)?;
        st.serialize_field("ino", &self.ino)?;
        if at {
            st.serialize_field("data_at", &self.data_at)?;
        }
        if then {
            st.serialize_field("then", &self.then)?;
        }
        st.end()
    }
}

impl<'de> Deserialize<'de> for Create {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let j = Json::deserialize(d)?;
            return Ok(j.base.with(j.data_at, j.then));
        }
        if version() >= APPENDED_43 {
            // Laid out as one struct: the fields, then `data_at`, then `then`.
            let (base, at, then) = <(Fields35, Option<i64>, Option<SetAfter>)>::deserialize(d)?;
            return Ok(base.with(at, then));
        }
        if version() >= APPENDED_36 {
            let (base, at) = <(Fields35, Option<i64>)>::deserialize(d)?;
            return Ok(base.with(at, None));
        }
        Ok(Fields35::deserialize(d)?.with(None, None))
    }
}

/// The fields every version's `SetAttr` has, as protocol 35 wrote them.
#[derive(Deserialize)]
struct SetAttr35 {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    atime_ns: Option<i64>,
    mtime_ns: Option<i64>,
    touch: bool,
}

#[derive(Deserialize)]
struct SetAttrJson {
    #[serde(flatten)]
    base: SetAttr35,
    #[serde(default)]
    of: Option<InodeId>,
}

impl SetAttr35 {
    fn with(self, of: Option<InodeId>) -> SetAttr {
        SetAttr {
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            atime_ns: self.atime_ns,
            mtime_ns: self.mtime_ns,
            touch: self.touch,
            of,
        }
    }
}

impl Serialize for SetAttr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let of = s.is_human_readable() || version() >= APPENDED_36;
        let mut st = s.serialize_struct("SetAttr", if of { 7 } else { 6 })?;
        st.serialize_field("mode", &self.mode)?;
        st.serialize_field("uid", &self.uid)?;
        st.serialize_field("gid", &self.gid)?;
        st.serialize_field("atime_ns", &self.atime_ns)?;
        st.serialize_field("mtime_ns", &self.mtime_ns)?;
        st.serialize_field("touch", &self.touch)?;
        if of {
            st.serialize_field("of", &self.of)?;
        }
        st.end()
    }
}

impl<'de> Deserialize<'de> for SetAttr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let j = SetAttrJson::deserialize(d)?;
            return Ok(j.base.with(j.of));
        }
        if version() >= APPENDED_36 {
            let (base, of) = <(SetAttr35, Option<InodeId>)>::deserialize(d)?;
            return Ok(base.with(of));
        }
        Ok(SetAttr35::deserialize(d)?.with(None))
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
            then: None,
        }
    }

    /// A setattr folded into a create reaches a peer of 43 whole; one of 42 gets 42's
    /// bytes (clients fold only once the map's floor is 43); 42's bytes read as 43 are
    /// malformed, never a made-up setattr.
    #[test]
    fn a_folded_setattr_goes_only_to_peers_of_43() {
        let mut c = create(Some(9));
        c.then = Some(SetAfter {
            set: SetAttr {
                mode: Some(0o600),
                mtime_ns: Some(5),
                of: Some(InodeId(7)),
                ..SetAttr::default()
            },
            at_ns: 11,
        });
        let for_42 = scope(42, || encode(&c)).unwrap_or_default();
        let for_43 = scope(43, || encode(&c)).unwrap_or_default();
        assert!(for_43.len() > for_42.len());
        assert_eq!(
            scope(43, || decode::<Create>(&for_43)).ok(),
            Some(c.clone())
        );
        assert_eq!(
            scope(42, || decode::<Create>(&for_42)).ok(),
            Some(create(Some(9)))
        );
        assert!(scope(43, || decode::<Create>(&for_42)).is_err());
        let json = serde_json::to_string(&c).unwrap_or_default();
        assert_eq!(serde_json::from_str::<Create>(&json).ok(), Some(c));
    }

    /// A peer of 35 gets 35's bytes (no `data_at`); one of 36 gets it back whole; 35's
    /// bytes read as 36 are malformed, never a made-up time. The same for `SetAttr::of`.
    #[test]
    fn appended_fields_go_only_to_peers_that_know_them() {
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
        let old = json.replace(",\"data_at\":1234567,\"then\":null", "");
        assert_eq!(
            serde_json::from_str::<Create>(&old).ok(),
            Some(create(None))
        );
    }
}
