//! Setup's variables (`NEMO_LENS_*`, `MEGATRON_OTEL_*`, `OTEL_*`, the launcher's): the input is
//! `NAME=VALUE` lines.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let vars = nemo_lens::fuzzing::environment(data);
    nemo_lens::fuzzing::configuration(&vars);
});
