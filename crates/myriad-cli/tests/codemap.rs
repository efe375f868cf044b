//! The code map (docs/codemap.md) lists every source module of the workspace with the
//! first paragraph of its own documentation, by crate in dependency order and the server by
//! layer. It is generated from the sources, so it cannot drift: this test renders it and
//! fails when a module has no `//!` summary or the file differs from the rendering.
//! `MYRIAD_BLESS_CODEMAP=1 cargo test -p myriad-cli --test codemap` rewrites it.

use std::path::{Path, PathBuf};

mod layers;
use layers::SERVER_LAYERS;

/// The crates, lowest first (ARCHITECTURE.md "Dependency direction").
const CRATES: &[&str] = &[
    "myriad-placement",
    "myriad-proto",
    "myriad-storage",
    "myriad-membership",
    "myriad-net",
    "myriad-server",
    "myriad-client",
    "myriad-fuse",
    "myriad-fuse-ring",
    "myriad-s3",
    "myriad-py",
    "myriad-cli",
    "myriad-sim",
];

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Source files of a crate's `src/` that are modules of the program (not unit tests), as
/// paths relative to `src/`, sorted.
fn module_files(src: &Path) -> Vec<String> {
    fn walk(dir: &Path, src: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "tests" {
                    walk(&path, src, out);
                }
            } else if is_module(&name) {
                let rel = path.strip_prefix(src).unwrap_or(&path);
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(src, src, &mut out);
    out.sort();
    out
}

fn is_module(file_name: &str) -> bool {
    file_name.ends_with(".rs") && file_name != "tests.rs" && !file_name.ends_with("_tests.rs")
}

/// The first paragraph of a file's `//!` documentation, on one line.
fn summary(text: &str) -> Option<String> {
    let mut words: Vec<&str> = Vec::new();
    for line in text.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            if line.trim().is_empty() && words.is_empty() {
                continue;
            }
            break;
        };
        let doc = doc.trim();
        if doc.is_empty() {
            if words.is_empty() {
                continue;
            }
            break;
        }
        words.push(doc);
    }
    (!words.is_empty()).then(|| words.join(" "))
}

/// The server layer a module of the server belongs to (by its top-level module).
fn server_layer(rel: &str) -> &'static str {
    let top = rel.split('/').next().unwrap_or(rel).trim_end_matches(".rs");
    SERVER_LAYERS
        .iter()
        .find(|(_, mods)| mods.contains(&top))
        .map_or("unlisted", |(layer, _)| layer)
}

/// The code map as it should read, and the modules without a summary.
fn render() -> (String, Vec<String>) {
    let root = workspace_root();
    let mut out = String::from(
        "# Code map\n\n\
         Every source module of the workspace with the first paragraph of its own \
         documentation, by crate from the lowest (ARCHITECTURE.md \"Dependency direction\"), \
         the server by layer (ARCHITECTURE.md \"The server's layers\"). Generated from the \
         sources by `crates/myriad-cli/tests/codemap.rs`, which fails when a module has no \
         summary or this file is out of date; \
         `MYRIAD_BLESS_CODEMAP=1 cargo test -p myriad-cli --test codemap` rewrites it.\n",
    );
    let mut missing = Vec::new();
    for krate in CRATES {
        let src = root.join("crates").join(krate).join("src");
        out.push_str(&format!("\n## {krate}\n"));
        let files = module_files(&src);
        let groups: Vec<(&str, Vec<&String>)> = if *krate == "myriad-server" {
            SERVER_LAYERS
                .iter()
                .map(|(layer, _)| *layer)
                .chain(["unlisted"])
                .map(|layer| {
                    let of: Vec<&String> =
                        files.iter().filter(|f| server_layer(f) == layer).collect();
                    (layer, of)
                })
                .filter(|(_, of)| !of.is_empty())
                .collect()
        } else {
            vec![("", files.iter().collect())]
        };
        for (layer, of) in groups {
            if !layer.is_empty() {
                out.push_str(&format!("\n### {layer}\n"));
            }
            out.push('\n');
            for rel in of {
                let text = std::fs::read_to_string(src.join(rel)).unwrap_or_default();
                match summary(&text) {
                    Some(s) => out.push_str(&format!("- `{rel}`: {s}\n")),
                    None => missing.push(format!("crates/{krate}/src/{rel}")),
                }
            }
        }
    }
    (out, missing)
}

#[test]
fn every_module_is_in_the_code_map_with_its_own_summary() {
    let crates_dir = workspace_root().join("crates");
    let on_disk: Vec<String> = std::fs::read_dir(&crates_dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("Cargo.toml").exists())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    for krate in &on_disk {
        assert!(
            CRATES.contains(&krate.as_str()),
            "crate {krate} is not in CRATES"
        );
    }
    let (map, missing) = render();
    assert!(
        missing.is_empty(),
        "modules without a `//!` summary (say what the module holds and why):\n{}",
        missing.join("\n")
    );
    let path = workspace_root().join("docs/codemap.md");
    if std::env::var_os("MYRIAD_BLESS_CODEMAP").is_some() {
        std::fs::write(&path, &map).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    if kept != map {
        let first_difference = kept
            .lines()
            .zip(map.lines())
            .find(|(a, b)| a != b)
            .map_or_else(
                || "one is a prefix of the other".to_string(),
                |(a, b)| format!("kept:     {a}\nrendered: {b}"),
            );
        panic!(
            "docs/codemap.md is out of date (a module added, moved, or its summary changed); \
             rewrite it with MYRIAD_BLESS_CODEMAP=1 cargo test -p myriad-cli --test codemap\n\
             {first_difference}"
        );
    }
}

#[test]
fn the_summary_is_the_first_paragraph_of_the_module_docs() {
    let text = "\n//! First line\n//! goes on.\n//!\n//! Second paragraph.\n\nuse x;\n";
    assert_eq!(summary(text).as_deref(), Some("First line goes on."));
    assert_eq!(summary("use x;\n//! late\n"), None);
    assert_eq!(summary("/// item doc\nfn f() {}\n"), None);
}

#[test]
fn every_server_module_has_a_layer() {
    let src = workspace_root().join("crates/myriad-server/src");
    let unlisted: Vec<String> = module_files(&src)
        .into_iter()
        .filter(|f| server_layer(f) == "unlisted")
        .collect();
    assert!(
        unlisted.is_empty(),
        "server modules in no layer: {unlisted:?}"
    );
}
