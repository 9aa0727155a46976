//! The `nemo-lens` executable: the tool lives in the library target (`lib.rs`), where the fuzz
//! targets in `fuzz/` reach its readers.

fn main() -> std::process::ExitCode {
    nemo_lens_cli::main()
}
