//! Architecture rules checked by machine (ARCHITECTURE.md, "Dependency direction"): which
//! workspace crates each crate may depend on, and that the sans-IO crates use no runtime.

use std::collections::BTreeMap;
use std::path::PathBuf;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Names in the `[dependencies]` table of a crate's manifest (not dev-dependencies).
fn dependencies(krate: &str) -> Vec<String> {
    let path = workspace_root()
        .join("crates")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut in_deps = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && let Some((name, _)) = line.split_once('=') {
            let name = name.trim().trim_end_matches(".workspace").trim();
            if !name.is_empty() && !name.starts_with('#') {
                out.push(name.to_string());
            }
        }
    }
    out
}

#[test]
fn crates_depend_only_in_the_written_direction() {
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("myriad-placement", &[][..]),
        ("myriad-proto", &["myriad-placement"][..]),
        ("myriad-storage", &["myriad-proto"][..]),
        (
            "myriad-membership",
            &["myriad-placement", "myriad-proto", "myriad-storage"][..],
        ),
        ("myriad-net", &["myriad-proto"][..]),
        (
            "myriad-server",
            &[
                "myriad-proto",
                "myriad-placement",
                "myriad-storage",
                "myriad-membership",
                "myriad-net",
            ][..],
        ),
        (
            "myriad-client",
            &["myriad-proto", "myriad-placement", "myriad-net"][..],
        ),
        (
            "myriad-fuse",
            &["myriad-client", "myriad-proto", "myriad-placement"][..],
        ),
        (
            "myriad-cli",
            &[
                "myriad-client",
                "myriad-fuse",
                "myriad-net",
                "myriad-placement",
                "myriad-server",
            ][..],
        ),
    ]);
    let crates: Vec<String> = std::fs::read_dir(workspace_root().join("crates"))
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for krate in &crates {
        let rules = allowed.get(krate.as_str()).unwrap_or_else(|| {
            panic!("crate {krate} has no dependency rule: add one here and in ARCHITECTURE.md")
        });
        for dep in dependencies(krate)
            .into_iter()
            .filter(|d| d.starts_with("myriad-"))
        {
            assert!(
                rules.contains(&dep.as_str()),
                "{krate} must not depend on {dep}"
            );
        }
    }
    for sans_io in ["myriad-placement", "myriad-proto", "myriad-storage"] {
        let deps = dependencies(sans_io);
        assert!(
            !deps.iter().any(|d| d == "tokio" || d == "tokio-util"),
            "{sans_io} must not use an async runtime"
        );
    }
}
