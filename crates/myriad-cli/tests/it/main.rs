//! Integration tests: real `myriad server` processes on 127.0.0.1, started through
//! `myriad cluster up`, driven with the native client over real sockets.

mod auto_index;
mod bad_input;
mod counting;
mod crash;
mod creds;
mod erasure;
mod exchange;
mod exerciser;
mod failover;
mod file_locks;
mod frozen;
mod fsck;
mod fsstats;
mod fsx;
mod full_disk;
mod fuse_posix;
mod fuse_programs;
mod fuse_semantics;
mod harness;
mod hugedirs;
mod index;
mod integrity;
mod leases;
mod links;
mod mount;
mod netsplit;
mod nsx;
mod ops;
mod orphans;
mod permissions;
mod redirect;
mod replication;
mod tiers;
mod write_behind;
mod zones;
