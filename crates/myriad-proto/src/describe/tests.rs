use super::*;
use crate::request_parts::{RenameFlags, SetAttr};

fn rename(from: &str, to: &str) -> ClientRequest {
    ClientRequest::Rename {
        from: from.into(),
        to: to.into(),
        flags: RenameFlags::default(),
    }
}

fn rmdir(path: &str) -> ClientRequest {
    ClientRequest::Rmdir { path: path.into() }
}

#[test]
fn a_request_is_served_from_its_names_directory_or_the_one_it_lists() {
    let rmdir = rmdir("/a/b");
    assert_eq!(rmdir.served_dir(), Some("/a"));
    assert_eq!(rename("/x", "/y/z").served_dir(), Some("/"));
    let stat = ClientRequest::Stat { path: "/".into() };
    assert_eq!(stat.served_dir(), None);
    let list = ClientRequest::ReadDir {
        path: "/a/b".into(),
        from: 0,
        after: None,
        limit: 10,
    };
    assert_eq!(list.served_dir(), Some("/a/b"));
    let link = ClientRequest::Link {
        from: "/a/f".into(),
        to: "/b/g".into(),
    };
    assert_eq!(
        link.served_dir(),
        None,
        "a link is not addressed by an entry"
    );
}

#[test]
fn a_request_is_served_from_the_entry_it_reads_or_first_changes() {
    assert_eq!(rmdir("/a/b").served_entry(), Some("/a/b"));
    assert_eq!(rename("/x", "/y/z").served_entry(), Some("/x"));
    let stat = ClientRequest::Stat {
        path: "/a/f".into(),
    };
    assert_eq!(stat.served_entry(), Some("/a/f"));
    let list = ClientRequest::ReadDir {
        path: "/a/b".into(),
        from: 0,
        after: None,
        limit: 10,
    };
    assert_eq!(list.served_entry(), None, "a listing reads no one entry");
    let link = ClientRequest::Link {
        from: "/a/f".into(),
        to: "/b/g".into(),
    };
    assert_eq!(link.served_entry(), None, "a link is served at its inode");
}

#[test]
fn changes_of_names_alter_their_directory_listing_and_others_do_not() {
    let rmdir = rmdir("/a/b");
    assert_eq!(rmdir.listing_altered(), Some("/a"));
    assert_eq!(rename("/x/f", "/y/z").listing_altered(), Some("/x"));
    let chmod = ClientRequest::SetAttr {
        path: "/a/f".into(),
        set: SetAttr::default(),
    };
    assert_eq!(chmod.listing_altered(), None, "a chmod keeps the names");
    let stat = ClientRequest::Stat {
        path: "/a/f".into(),
    };
    assert_eq!(stat.listing_altered(), None, "a read changes nothing");
}

#[test]
fn changes_name_what_they_change_and_reads_what_they_read() {
    let r = rename("/a/x", "/b/y");
    let c = r.change().unwrap_or_else(|| panic!("a rename is a change"));
    assert_eq!(c.names().collect::<Vec<_>>(), ["/a/x", "/b/y"]);
    assert!(c.subtree, "a rename may move a directory");
    assert_eq!(c.disk, Disk::Grows);

    let w = ClientRequest::Write(crate::requests::Write {
        path: "/d/f".into(),
        ino: InodeId(7),
        offset: 0,
        data: vec![1],
        opened: true,
    });
    let c = w.change().unwrap_or_else(|| panic!("a write is a change"));
    assert_eq!((c.file, c.answers_attributes), (Some(InodeId(7)), true));
    assert_eq!(c.served_dir, Some("/d"));

    let unlink = ClientRequest::Unlink { path: "/f".into() };
    let c = unlink
        .change()
        .unwrap_or_else(|| panic!("an unlink is a change"));
    assert_eq!(
        (c.disk, c.subtree, c.answers_attributes),
        (Disk::Writes, false, false)
    );

    let set = ClientRequest::SetAttr {
        path: "/f".into(),
        set: SetAttr::default(),
    };
    assert!(set.change().is_some_and(|c| c.answers_attributes));
    // A mkdir's answer is the new directory's entry: kept under its parent's lease, so
    // the kernel's look at it after its first create costs no request.
    let mkdir = ClientRequest::Mkdir {
        path: "/d".into(),
        mode: 0o755,
        shards: 0,
    };
    assert!(mkdir.change().is_some_and(|c| c.answers_attributes));

    let ids = ClientRequest::ReserveIds { count: 4 };
    assert!(
        ids.is_change(),
        "reservations are sent once: a retry must not reserve twice"
    );
    assert_eq!(ids.change().map(|c| c.disk), Some(Disk::Untouched));
    assert_eq!(ids.change().map(|c| c.names().count()), Some(0));

    let stat = ClientRequest::Stat {
        path: "/d/f".into(),
    };
    assert!(!stat.is_change());
    assert_eq!(stat.read_of(), Some(ReadOf::Name("/d/f")));
    assert!(stat.copy_may_answer());
    let read = ClientRequest::Read {
        path: "/d/f".into(),
        ino: InodeId(7),
        offset: 0,
        len: 1,
    };
    assert!(
        !read.copy_may_answer(),
        "a copy answers metadata reads only"
    );
    assert!(!ClientRequest::Echo(vec![]).is_change());
    assert_eq!(ClientRequest::Echo(vec![]).read_of(), None);
}
