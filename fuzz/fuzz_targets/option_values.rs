//! The tool's option values: `--max-record-bytes`, `--threshold`, RFC 3339 record times.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nemo_lens_cli::fuzzing::option_values(&String::from_utf8_lossy(data));
});
