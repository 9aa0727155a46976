//! The flight recorder's control file (`NEMO_LENS_CONTROL_FILE`, re-read on `SIGUSR2`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // The recorder reads the file as UTF-8 and ignores it otherwise.
    if let Ok(text) = std::str::from_utf8(data) {
        nemo_lens::fuzzing::control_file(text);
    }
});
