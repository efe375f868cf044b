//! The server's layers, shared by the tests that check them (`tidy.rs`) and the code map
//! that lists the modules by them (`codemap.rs`).

/// The server's layers, lowest first (ARCHITECTURE.md, "The server's layers"). A module may
/// name modules of its own layer (without circles) and of the layers below, never above.
/// Every top-level module of the server must be listed.
pub const SERVER_LAYERS: &[(&str, &[&str])] = &[
    (
        "support",
        &[
            "backoff",
            "clock",
            "cluster",
            "config",
            "counters",
            "unpoisoned",
            "metrics",
            "health",
            "recalls",
            "space",
            "test_disk",
            "tiers",
        ],
    ),
    ("state", &["state"]),
    ("commit", &["commit"]),
    ("replication", &["replication"]),
    ("partition", &["partition"]),
    ("membership", &["membership"]),
    (
        "process",
        &[
            "embed",
            "host",
            "host_copy_reads",
            "host_env",
            "host_fragments",
            "host_quotas",
            "host_serve",
            "lib",
            "metrics_http",
            "seams",
            "step_down",
        ],
    ),
];
