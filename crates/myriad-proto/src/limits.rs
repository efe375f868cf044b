//! Protocol limits. Each is a named constant with the reason for its value.

/// Longest path in bytes. Linux's PATH_MAX (4,096) bounds one path argument, which may be
/// relative to any directory, however deep: the path from the root must be allowed to be
/// longer (issue 47). Four times PATH_MAX keeps a store key (the directory's path, a hash
/// and a name) far inside the storage engine's 64 KiB and a request far inside a frame.
pub const PATH_BYTES_MAX: usize = 16 * 1024;
/// Most components in a path (directory depth). Every request checks search permission on
/// each ancestor (a lookup per level, possibly on another server) and a directory rename
/// walks its subtree level by level, so depth is work per request; 1,024 is far beyond any
/// real tree (PATH_MAX alone would allow 2,048 one-letter levels).
pub const PATH_DEPTH_MAX: usize = 1024;
/// Largest file size, as Linux MAX_LFS_FILESIZE (2^63 - 1): every byte offset fits an
/// `i64` (`off_t`), so no size or offset arithmetic can overflow. Sizes beyond it are EFBIG.
pub const FILE_BYTES_MAX: u64 = i64::MAX as u64;
/// Most bytes one `CopyRange` copies: the serving node holds them in memory between the
/// read and the write; the caller gets a short count and goes on (copy_file_range allows
/// it, and `cp` loops).
pub const COPY_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// Longest single name in bytes, as Linux NAME_MAX.
pub const NAME_BYTES_MAX: usize = 255;
/// Largest data payload of one read or write request. Clients split bigger I/O. 4 MiB is one
/// default chunk, so a chunk moves in one request, and a frame stays far below `FRAME_BYTES_MAX`.
pub const IO_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// Largest frame on the wire: one maximal I/O payload plus generous room for headers and
/// metadata (a directory page, a map). Anything bigger is an error that closes the connection.
pub const FRAME_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Most entries in one readdir page: bounds the reply to about 300 bytes * 4096 = 1.2 MiB.
pub const READDIR_PAGE_MAX: u32 = 4096;
/// Most names in one batched stat.
pub const STAT_MANY_MAX: usize = 4096;
/// Most popular directories one server lists in its counters (`CounterSnapshot::popular`).
pub const POPULAR_LISTED_MAX: usize = 32;
/// Directory touches in one `PeerRequest::DirTouches`: a busy server's touches of one
/// target share a request, and a request stays small (each item is a path and a few
/// numbers).
pub const DIR_TOUCHES_MAX: usize = 512;
/// Longest symlink target, as Linux PATH_MAX.
pub const SYMLINK_TARGET_BYTES_MAX: usize = 4096;
/// Most supplementary groups carried per request (Linux NGROUPS_MAX is 65536; NFS AUTH_SYS is 16).
pub const GROUPS_MAX: usize = 256;

const _: () = assert!(IO_BYTES_MAX as usize + 1024 * 1024 <= FRAME_BYTES_MAX);

/// Longest extended attribute name, including its `user.` prefix (as Linux's XATTR_NAME_MAX).
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Largest extended attribute value, and all of one inode's names and values together: they
/// live inside the inode, which every stat and readdir carries, so they must stay small.
pub const XATTR_TOTAL_BYTES_MAX: usize = 64 * 1024;
/// How long a file whose last name went is kept with its data (an orphan) after its
/// unlink, and after each `KeepOpen` naming it: clients that have it open keep it
/// (docs/fuse.md "Open files unlinked elsewhere").
pub const ORPHAN_HOLD: std::time::Duration = std::time::Duration::from_secs(30);
/// How often a client with open files tells their partitions (`KeepOpen`): well inside
/// `ORPHAN_HOLD`, so an open file is never dropped for want of a keep.
pub const KEEP_OPEN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// Most inodes in one `KeepOpen`.
pub const KEEP_OPEN_MAX: usize = 65_536;

/// Most changes in one `Envelope::Batch` (a write-behind journal's batch).
pub const BATCH_MAX: usize = 256;
/// Most inode numbers one `ClientRequest::ReserveIds` reserves.
pub const RESERVE_IDS_MAX: u32 = 4096;
/// Most distinct readers a partition remembers per hot directory (`HotDir::readers`):
/// an automatic index asks only whether a tree is read from one client or from several.
pub const HOT_DIR_READERS_MAX: u32 = 8;
