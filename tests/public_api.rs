//! The public API of the library, item by item, checked against `docs/public-api.txt`, so that a
//! change to it shows up as a diff in review.
//!
//! After an intended change, rewrite the listing and commit it:
//!
//! ```sh
//! UPDATE_SNAPSHOTS=1 cargo test --all-features --test public_api
//! ```
//!
//! The listing comes from rustdoc's JSON output, which the stable toolchain produces when
//! `RUSTC_BOOTSTRAP=1` unlocks the flag, read by the `public-api` crate (the library behind
//! `cargo public-api`). The JSON format changes between toolchains: the test says so, by name,
//! when the toolchain writes a format this `public-api` version does not read.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The rustdoc JSON format version that the `public-api` dev-dependency reads.
const FORMAT_VERSION: u64 = 57;

#[test]
fn public_api_matches_the_committed_listing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A target directory of its own: the outer `cargo test` holds the lock of the usual one.
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("public-api");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(root)
        .env("RUSTC_BOOTSTRAP", "1")
        .env_remove("RUSTDOCFLAGS")
        .args([
            "rustdoc",
            "--quiet",
            "--lib",
            "-p",
            "nemo-lens",
            "--all-features",
        ])
        .arg("--target-dir")
        .arg(&target)
        .args(["--", "-Z", "unstable-options", "--output-format", "json"])
        .status()
        .expect("run cargo rustdoc");
    assert!(
        status.success(),
        "cargo rustdoc --output-format json failed"
    );
    let json = target.join("doc").join("nemo_lens.json");

    let text = std::fs::read_to_string(&json).expect("read the rustdoc JSON");
    let version =
        serde_json::from_str::<serde_json::Value>(&text).expect("rustdoc JSON")["format_version"]
            .as_u64();
    assert_eq!(
        version,
        Some(FORMAT_VERSION),
        "rustdoc wrote JSON format {version:?}; the `public-api` dev-dependency reads format \
         {FORMAT_VERSION}: move both to a matching pair (public-api's rustdoc-types version is the \
         format it reads)"
    );

    let api = public_api::Builder::from_rustdoc_json(&json)
        .omit_blanket_impls(true)
        .omit_auto_trait_impls(true)
        .omit_auto_derived_impls(true)
        .build()
        .expect("read the public API from the rustdoc JSON");
    api.assert_eq_or_update(root.join("docs").join("public-api.txt"));
}

/// The most free items (modules, types, traits, functions, constants; not methods or other
/// associated items) the public API may have beside `semconv`'s attribute names: few enough
/// to hold in mind.
const MAX_FREE_ITEMS: usize = 60;

#[test]
fn the_public_api_has_at_most_60_free_items_beside_semconv() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listing = std::fs::read_to_string(root.join("docs").join("public-api.txt"))
        .expect("read docs/public-api.txt");
    let items = free_items(&listing);
    assert!(
        items.len() <= MAX_FREE_ITEMS,
        "{} free public items beside semconv (at most {MAX_FREE_ITEMS}):\n{}",
        items.len(),
        items
            .iter()
            .map(|(kind, path)| format!("{kind} {path}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn free_items_counts_module_level_items_only() {
    let listing = "\
pub mod nemo_lens
pub mod nemo_lens::semconv
pub mod nemo_lens::groups
pub const nemo_lens::semconv::SERVICE_NAME: &str
pub const nemo_lens::groups::JOB: &str
pub fn nemo_lens::groups::resolve(&str) -> nemo_lens::Result<()>
#[non_exhaustive] pub struct nemo_lens::LensConfig
pub nemo_lens::LensConfig::enabled: bool
pub fn nemo_lens::LensConfig::with(self, impl FnOnce(&mut nemo_lens::LensConfig)) -> Self
pub struct nemo_lens::EmitSpan<'a>
pub fn nemo_lens::EmitSpan<'a>::new(&str) -> Self
pub const nemo_lens::TelemetryBuilder::DEFAULT_REDACT_KEYS: [&str; 8]
pub type nemo_lens::Result<T, E> = core::result::Result<T, E>
";
    let paths: Vec<_> = free_items(listing).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        paths,
        [
            "nemo_lens",
            "nemo_lens::groups",
            "nemo_lens::groups::JOB",
            "nemo_lens::groups::resolve",
            "nemo_lens::LensConfig",
            "nemo_lens::EmitSpan",
            "nemo_lens::Result",
        ]
    );
}

/// The free items of a `public-api` listing, as (kind, path): the modules, and the structs,
/// enums, traits, type aliases, functions, constants, statics and macros whose parent is a
/// module, without those of `semconv`.
fn free_items(listing: &str) -> Vec<(String, String)> {
    const KINDS: [&str; 9] = [
        "mod", "struct", "enum", "trait", "type", "fn", "const", "static", "macro",
    ];
    let modules: std::collections::HashSet<&str> = listing
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    let mut items = Vec::new();
    for line in listing.lines() {
        // Attributes first (`#[non_exhaustive] pub struct …`).
        let mut line = line;
        while let Some(rest) = line.strip_prefix("#[") {
            line = rest.split_once("] ").map_or("", |(_, after)| after);
        }
        let Some(rest) = line.strip_prefix("pub ") else {
            continue;
        };
        let rest = rest.strip_prefix("unsafe ").unwrap_or(rest);
        // `pub const fn f` is a function; `pub const C` a constant.
        let rest = match rest.strip_prefix("const ") {
            Some(after) if after.starts_with("fn ") => after,
            _ => rest,
        };
        let Some((kind, rest)) = rest.split_once(' ') else {
            continue;
        };
        if !KINDS.contains(&kind) {
            continue;
        }
        let path: String = without_generics(rest)
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        // `pub const nemo_lens::groups::JOB: &str`: the colon before the type is not the path's.
        let path = path.trim_end_matches(':').to_string();
        let parent = path.rsplit_once("::").map_or("", |(parent, _)| parent);
        if (kind != "mod" && !modules.contains(parent)) || path.contains("::semconv") {
            continue;
        }
        items.push((kind.to_string(), path));
    }
    items
}

/// `text` without what stands between `<` and `>` (`EmitSpan<'a>::new` → `EmitSpan::new`).
fn without_generics(text: &str) -> String {
    let mut depth = 0i32;
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}
