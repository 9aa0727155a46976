//! The record reader behind gzip framing: the input is compressed first (one or more gzip
//! members, as concatenated `.gz` files), so the fuzzer explores the records inside it; a cut
//! member is tried too.
#![no_main]

use std::io::Write;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // A form feed splits the input into gzip members.
    let mut framed = Vec::new();
    for part in data.split(|&b| b == 0x0c) {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(part).expect("in memory");
        framed.extend(gz.finish().expect("in memory"));
    }
    nemo_lens_cli::fuzzing::records(&framed);
    let cut = framed.len() - framed.len() / 3;
    nemo_lens_cli::fuzzing::records(&framed[..cut]);
});
