//! Size caps checked by machine (ARCHITECTURE.md, "Files and functions: size caps"): no
//! source file over 1,000 lines and no function over 150, outside tests. What was over
//! when the caps came in is listed below with the size it had; a listed file or function
//! may shrink but not grow, and leaves the list once it is under the cap (the test says
//! so), so the lists only get shorter.

use std::path::{Path, PathBuf};

const FILE_LINES_MAX: usize = 1000;
const FN_LINES_MAX: usize = 150;

/// Files over the cap (path under `crates/`, lines at most).
const FILES_OVER: &[(&str, usize)] = &[];

/// Functions over the cap (`path::name`, lines at most): none left. The routing tables
/// `serve_client` and `serve_peer` came under it as requests became types of their own
/// (`myriad-proto` `requests.rs`) and their arms calls of one handler each (issue 50).
const FNS_OVER: &[(&str, usize)] = &[];

fn crates_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every non-test source file: under a crate's `src/`, not a `tests.rs` or `*_tests.rs`,
/// not under a `tests` directory.
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "tests" {
                    walk(&p, out);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                out.push(p);
            }
        }
    }
    let root = crates_dir();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&root).unwrap_or_else(|e| panic!("{e}")) {
        let src = krate.unwrap_or_else(|e| panic!("{e}")).path().join("src");
        walk(&src, &mut files);
    }
    let mut out: Vec<(String, String)> = files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{rel}: {e}"));
            (rel, text)
        })
        .collect();
    out.sort();
    out
}

/// A line with string and char literals and `//` comments blanked, so that only code
/// braces count.
fn code_of(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '/' if chars.peek() == Some(&'/') => break,
            // A char literal of a brace ('{', '}'); lifetimes have no closing quote.
            '\'' => {
                let rest: String = chars.clone().take(2).collect();
                if rest == "{'" || rest == "}'" {
                    chars.next();
                    chars.next();
                } else {
                    out.push(c);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w == "fn" {
            let name: String = words
                .next()?
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            return (!name.is_empty()).then_some(name);
        }
        let lead =
            w.starts_with("pub") || matches!(w, "async" | "const" | "unsafe" | "extern" | "\"C\"");
        if !lead {
            return None;
        }
    }
    None
}

/// (lines of code outside inline test modules, every function with its length), for the
/// text of one file.
fn measure(text: &str) -> (usize, Vec<(String, usize)>) {
    let lines: Vec<String> = text.lines().map(code_of).collect();
    let mut fns = Vec::new();
    let mut counted = 0;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim();
        // An inline test module: skipped whole.
        if l == "#[cfg(test)]"
            && lines
                .get(i + 1)
                .is_some_and(|n| n.trim_start().starts_with("mod ") && n.contains('{'))
        {
            let mut depth = 0i64;
            let mut j = i + 1;
            while j < lines.len() {
                depth += brace_delta(&lines[j]);
                if depth <= 0 && j > i + 1 {
                    break;
                }
                j += 1;
            }
            i = j + 1;
            continue;
        }
        counted += 1;
        if let Some(name) = fn_name(l) {
            let mut depth = 0i64;
            let mut started = false;
            let mut j = i;
            while j < lines.len() {
                let c = &lines[j];
                if !started && c.trim_end().ends_with(';') && !c.contains('{') {
                    break; // a declaration without a body
                }
                depth += brace_delta(c);
                started |= c.contains('{');
                if started && depth <= 0 {
                    fns.push((name.clone(), j - i + 1));
                    break;
                }
                j += 1;
            }
        }
        i += 1;
    }
    (counted, fns)
}

fn brace_delta(code: &str) -> i64 {
    code.chars()
        .map(|c| match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        })
        .sum()
}

#[test]
fn no_file_or_function_passes_its_cap() {
    let mut problems = Vec::new();
    let mut files_seen = Vec::new();
    let mut fns_seen = Vec::new();
    for (path, text) in sources() {
        let (lines, fns) = measure(&text);
        let allowed = FILES_OVER.iter().find(|(p, _)| *p == path).map(|(_, n)| *n);
        match allowed {
            Some(max) => {
                files_seen.push(path.clone());
                if lines > max {
                    problems.push(format!("{path}: {lines} lines, listed at {max}: it grew"));
                } else if lines <= FILE_LINES_MAX {
                    problems.push(format!(
                        "{path}: {lines} lines, under the cap now: take it off FILES_OVER"
                    ));
                }
            }
            None if lines > FILE_LINES_MAX => problems.push(format!(
                "{path}: {lines} lines, over the cap of {FILE_LINES_MAX}: split it by what its parts do"
            )),
            None => {}
        }
        // Two functions of one name in a file (methods of different types) count as the
        // longer.
        let mut longest: std::collections::BTreeMap<String, usize> = Default::default();
        for (name, len) in fns {
            let l = longest.entry(name).or_default();
            *l = (*l).max(len);
        }
        for (name, len) in longest {
            let key = format!("{path}::{name}");
            let allowed = FNS_OVER.iter().find(|(k, _)| *k == key).map(|(_, n)| *n);
            match allowed {
                Some(max) => {
                    fns_seen.push(key.clone());
                    if len > max {
                        problems.push(format!("{key}: {len} lines, listed at {max}: it grew"));
                    } else if len <= FN_LINES_MAX {
                        problems.push(format!(
                            "{key}: {len} lines, under the cap now: take it off FNS_OVER"
                        ));
                    }
                }
                None if len > FN_LINES_MAX => problems.push(format!(
                    "{key}: {len} lines, over the cap of {FN_LINES_MAX}: give its parts functions of their own"
                )),
                None => {}
            }
        }
    }
    for (p, _) in FILES_OVER {
        if !files_seen.iter().any(|s| s == p) {
            problems.push(format!("{p}: listed in FILES_OVER but not found"));
        }
    }
    for (k, _) in FNS_OVER {
        if !fns_seen.iter().any(|s| s == k) {
            problems.push(format!("{k}: listed in FNS_OVER but not found"));
        }
    }
    assert!(problems.is_empty(), "size caps:\n{}", problems.join("\n"));
}

#[test]
fn the_measure_sees_a_long_function_and_skips_tests_and_strings() {
    let mut text = String::from("/// doc\npub(crate) async fn long(x: u32) -> u32 {\n");
    for _ in 0..200 {
        text.push_str("    let s = \"}}}\"; // }\n");
    }
    text.push_str("    x\n}\n\nfn short() {}\n\n#[cfg(test)]\nmod tests {\n");
    for _ in 0..2000 {
        text.push_str("    fn t() {}\n");
    }
    text.push_str("}\n");
    let (lines, fns) = measure(&text);
    assert_eq!(lines, 207, "{fns:?}");
    assert_eq!(
        fns,
        vec![("long".to_string(), 203), ("short".to_string(), 1)]
    );
}
