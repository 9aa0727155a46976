//! A collector's answer to a trace export (gRPC message or HTTP body), read for the spans its
//! partial success rejected.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nemo_lens::fuzzing::export_response(data);
});
