//! `OTEL_RESOURCE_ATTRIBUTES`: parsed, formatted and parsed again (the same attributes).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nemo_lens::fuzzing::resource_attributes(&String::from_utf8_lossy(data));
});
