//! `set-slurm-resource-attrs`: the Slurm variables as `NAME=VALUE` lines; the inherited
//! `OTEL_RESOURCE_ATTRIBUTES` (raw bytes) after a NUL byte, then the container image after
//! another.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == 0);
    let vars = nemo_lens::fuzzing::environment(parts.next().unwrap_or_default());
    let inherited = parts.next().unwrap_or_default();
    let image = parts.next().map(String::from_utf8_lossy);
    nemo_lens_cli::fuzzing::slurm_export_line(&vars, inherited, image.as_deref());
});
