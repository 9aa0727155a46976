//! The tool's record reader over span files: console JSONL (compact or pretty-printed),
//! flight-recorder dumps, gzip-framed or plain.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nemo_lens_cli::fuzzing::records(data);
});
