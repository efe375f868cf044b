//! One partition's state machine (docs/replication.md: the rest of the server once called
//! a partition a node): driven by requests and ticks (`dispatch`), talking to the world only
//! through `Env` (the server process implements it), committing through `commit`, shipping
//! to its copies through `replication`.
//!
//! Inside, from the bottom: `env`, and the partition's in-memory parts (`replicas`,
//! `popularity`, `split_state`, `touches`, `changes`, `lock_table`, `open_files`); `core` (the `Partition` and what every family
//! uses: ownership checks, lookups, calls to other partitions); the families (`ancestors`,
//! `shards`, `split`, `twophase`, `tree_move` (a tree moving between zones), `dirtimes`, `links`, `copy`, `repair`, `fsck`, `once`, `grants`,
//! `file_locks`, `orphans`, `coding`: erasure coding of settled chunks, docs/redundancy.md); `dispatch`.

pub(crate) mod absent_dirs;
pub(crate) mod ancestor_replicas;
pub(crate) mod ancestors;
pub(crate) mod anti_entropy;
pub(crate) mod auto_index;
pub(crate) mod changes;
pub(crate) mod client_ops;
pub(crate) mod coding;
pub(crate) mod coding_state;
pub(crate) mod confirmed_dirs;
pub(crate) mod copy_range;
pub(crate) mod core;
pub(crate) mod dir_rename;
pub(crate) mod dirtimes;
pub(crate) mod dispatch;
pub(crate) mod env;
pub(crate) mod exactly_once;
pub(crate) mod file_locks;
pub(crate) mod fsck;
pub(crate) mod grants;
pub(crate) mod hard_links;
pub(crate) mod lock_table;
pub(crate) mod made;
pub(crate) mod open_files;
pub(crate) mod orphans;
pub(crate) mod peer_chunks;
pub(crate) mod peer_dirs;
pub(crate) mod peer_names;
pub(crate) mod peer_ops;
pub(crate) mod pending_touches;
pub(crate) mod popularity;
pub(crate) mod quota_grants;
pub(crate) mod quota_homes;
pub(crate) mod read_mostly;
pub(crate) mod read_only;
pub(crate) mod recovery;
pub(crate) mod removal_claims;
pub(crate) mod repair;
pub(crate) mod resend_guard;
pub(crate) mod serve_changes;
pub(crate) mod serve_names;
pub(crate) mod serve_reads;
pub(crate) mod serve_request;
pub(crate) mod split;
pub(crate) mod split_dirs;
pub(crate) mod split_state;
pub(crate) mod touch_sender;
pub(crate) mod trash;
pub(crate) mod trash_dirs;
pub(crate) mod trash_expiry;
pub(crate) mod tree_move;
pub(crate) mod twophase;
pub(crate) mod undecided_dirs;
