//! Architecture rules checked by machine (ARCHITECTURE.md, "Dependency direction"): which
//! workspace crates each crate may depend on, and that the sans-IO crates use no runtime.

use std::collections::BTreeMap;
use std::path::PathBuf;

mod layers;
use layers::SERVER_LAYERS;

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
            &[
                "myriad-client",
                "myriad-net",
                "myriad-proto",
                "myriad-placement",
            ][..],
        ),
        // The FUSE transport probe speaks only the kernel's protocol.
        ("myriad-fuse-ring", &[][..]),
        // The Python bindings and the S3 gateway are clients like the mount.
        ("myriad-py", &["myriad-client"][..]),
        ("myriad-s3", &["myriad-client"][..]),
        (
            "myriad-sim",
            &[
                "myriad-client",
                "myriad-placement",
                "myriad-proto",
                "myriad-server",
                "myriad-storage",
            ][..],
        ),
        (
            "myriad-cli",
            &[
                "myriad-client",
                "myriad-fuse",
                "myriad-fuse-ring",
                "myriad-net",
                "myriad-placement",
                "myriad-s3",
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

// ---- Module graph: no import circles, and the server's layers point only downwards ----

/// A module is one `.rs` file under a crate's `src/` (`mod.rs`/`lib.rs`/`main.rs` name their
/// folder). Its path, e.g. `["partition", "split"]`.
type ModPath = Vec<String>;

fn modules(src: &std::path::Path) -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &std::path::Path, src: &std::path::Path, out: &mut BTreeMap<ModPath, PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.is_dir() {
                walk(&path, src, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap_or(&path).with_extension("");
                let mut parts: ModPath = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if matches!(
                    parts.last().map(String::as_str),
                    Some("mod" | "lib" | "main")
                ) {
                    parts.pop();
                }
                out.insert(parts, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The longest prefix of `path` that is a module.
fn resolve(path: &[String], mods: &BTreeMap<ModPath, PathBuf>) -> Option<ModPath> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| mods.contains_key(p))
}

/// Edges A -> B when A names `crate::b..`, `super::b..` or `self::b..` (also inside
/// `use crate::{..}` groups), unit-test modules left out.
fn module_edges(mods: &BTreeMap<ModPath, PathBuf>) -> BTreeMap<ModPath, Vec<ModPath>> {
    let mut edges = BTreeMap::new();
    for (module, file) in mods {
        let mut text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{e}"));
        if let Some(at) = text.find("#[cfg(test)]\nmod tests") {
            text.truncate(at);
        }
        // `self::` is the module itself, `super::` its parent (a file `a/b.rs` is module
        // `a::b` whose parent is `a`, as `a/b/mod.rs` would be).
        let here: ModPath = module.clone();
        let mut targets: Vec<ModPath> = Vec::new();
        let mut add =
            |base: &ModPath, rest: &str| {
                let mut path = base.clone();
                path.extend(rest.split("::").map(|p| p.trim().to_string()).filter(|p| {
                    !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_')
                }));
                if let Some(t) = resolve(&path, mods)
                    && &t != module
                    && !t.is_empty()
                {
                    targets.push(t);
                }
            };
        for (kw, base) in [
            ("crate::", Vec::new()),
            ("super::", here[..here.len().saturating_sub(1)].to_vec()),
            ("self::", here.clone()),
        ] {
            for (at, _) in text.match_indices(kw) {
                let before = text[..at].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let rest = &text[at + kw.len()..];
                if let Some(group) = rest.strip_prefix('{') {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    for item in group.split(',') {
                        add(&base, item);
                    }
                } else {
                    let end = rest
                        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                        .unwrap_or(rest.len());
                    add(&base, &rest[..end]);
                }
            }
        }
        // Paths relative to the module itself: `child::item` names a child module.
        for child in mods.keys().filter(|c| {
            c.len() == module.len() + 1 && c.starts_with(module) && !module.is_empty()
                || module.is_empty() && c.len() == 1
        }) {
            let needle = format!("{}::", child[child.len() - 1]);
            let named = text.match_indices(&needle).any(|(at, _)| {
                !text[..at]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if named {
                targets.push(child.clone());
            }
        }
        targets.sort();
        targets.dedup();
        edges.insert(module.clone(), targets);
    }
    edges
}

/// Modules on a circle: those that reach themselves.
fn circles(edges: &BTreeMap<ModPath, Vec<ModPath>>) -> Vec<ModPath> {
    let reaches = |from: &ModPath| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo: Vec<&ModPath> = edges
            .get(from)
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        while let Some(m) = todo.pop() {
            if seen.insert(m.clone()) {
                todo.extend(edges.get(m).into_iter().flatten());
            }
        }
        seen.contains(from)
    };
    edges.keys().filter(|m| reaches(m)).cloned().collect()
}

fn crate_sources() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(workspace_root().join("crates"))
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.path().join("src"),
            )
        })
        .filter(|(_, src)| src.is_dir())
        .collect();
    out.sort();
    out
}

#[test]
fn no_module_imports_in_a_circle() {
    let mut found = Vec::new();
    for (krate, src) in crate_sources() {
        let on_circle = circles(&module_edges(&modules(&src)));
        if !on_circle.is_empty() {
            let names: Vec<String> = on_circle.iter().map(|m| m.join("/")).collect();
            found.push(format!("{krate}: {}", names.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules on import circles:\n{}",
        found.join("\n")
    );
}

/// No `task_local!` carries request context between frames (issue 50,
/// docs/request-context.md): what a request is for is passed as a value (the server's
/// `Made` and the applier's `Context`, the client's handle).
#[test]
fn no_task_local_carries_request_context() {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let crates = workspace_root().join("crates");
    let mut files = Vec::new();
    walk(&crates, &mut files);
    let marker = concat!("task_local", "!");
    let holding: Vec<String> = files
        .iter()
        .filter(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .any(|l| !l.trim_start().starts_with("//") && l.contains(marker))
        })
        .filter_map(|p| p.strip_prefix(&crates).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    assert!(
        holding.is_empty(),
        "task-locals carrying context between frames: pass it as a value instead \
         (docs/request-context.md): {holding:?}"
    );
}

fn server_layer(module: &ModPath) -> usize {
    let top = module.first().map_or("lib", String::as_str);
    SERVER_LAYERS
        .iter()
        .position(|(_, mods)| mods.contains(&top))
        .unwrap_or_else(|| panic!("server module {top} is in no layer: add it to SERVER_LAYERS"))
}

#[test]
fn server_layers_name_only_layers_below() {
    let src = workspace_root().join("crates/myriad-server/src");
    let edges = module_edges(&modules(&src));
    let mut wrong = Vec::new();
    for (from, targets) in &edges {
        for to in targets {
            if server_layer(to) > server_layer(from) {
                wrong.push(format!(
                    "{} ({}) names {} ({})",
                    from.join("/"),
                    SERVER_LAYERS[server_layer(from)].0,
                    to.join("/"),
                    SERVER_LAYERS[server_layer(to)].0
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a layer names one above it:\n{}",
        wrong.join("\n")
    );
}

/// The test above must be able to fail: a module naming the layer above it is caught.
#[test]
fn the_layer_check_sees_an_upward_import() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(dir.path().join("state")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("lib.rs"), "mod state;\nmod commit;\n")
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.path().join("state/mod.rs"),
        "use crate::commit::Applier;\nuse child::Other;\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // A child named by a path relative to its parent is an import too.
    std::fs::write(dir.path().join("state/child.rs"), "use super::Thing;\n")
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.path().join("commit.rs"),
        "use crate::state::{Store, x};\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let edges = module_edges(&modules(dir.path()));
    let state = vec!["state".to_string()];
    let commit = vec!["commit".to_string()];
    let child = vec!["state".to_string(), "child".to_string()];
    assert_eq!(
        edges.get(&state),
        Some(&vec![commit.clone(), child.clone()])
    );
    assert_eq!(edges.get(&child), Some(&vec![state.clone()]));
    assert_eq!(server_layer(&commit), server_layer(&state) + 1);
    assert_eq!(circles(&edges), vec![commit, state, child]);
}
