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
