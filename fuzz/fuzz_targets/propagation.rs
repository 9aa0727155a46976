//! `traceparent` / `tracestate` / `baggage` through nemo-lens's extraction, re-injected and
//! checked against W3C. The input is a JSON carrier (the cross-rank payload of
//! `decode_carrier`), else three lines: `traceparent`, `tracestate`, `baggage`.
#![no_main]

use std::collections::HashMap;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let carrier = nemo_lens::propagation::decode_carrier(data).unwrap_or_else(|| {
        let text = String::from_utf8_lossy(data);
        ["traceparent", "tracestate", "baggage"]
            .into_iter()
            .zip(text.split('\n'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>()
    });
    nemo_lens::fuzzing::propagation(&carrier);
});
