//! `traceparent` / `tracestate` / `baggage` through nemo-lens's extraction, re-injected and
//! checked against W3C. The input is a JSON carrier (the cross-rank payload), else three lines:
//! `traceparent`, `tracestate`, `baggage`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nemo_lens::fuzzing::propagation(&nemo_lens::fuzzing::carrier(data));
});
