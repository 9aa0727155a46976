//! `emit-spans --span NAME,START,END[,PARENT]`: one argument per line, and the epoch-seconds
//! values on their own.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let args: Vec<String> = text.lines().map(str::to_string).collect();
    nemo_lens_cli::fuzzing::span_specs(&args);
    for arg in &args {
        for field in arg.split(',') {
            nemo_lens::fuzzing::epoch_seconds(field.trim());
        }
    }
});
