//! Configuration: the `NEMO_LENS_*` and `OTEL_*` variables (names, defaults, typed errors,
//! garbage), export strategies and the rank sampler, the resource, and one environment for a
//! whole job of real trainer processes, hostile values included.
//!
//! One test binary: its tests run as threads of one process. A test that sets the process
//! environment, reads process-wide state, or must not see other threads fork runs its body in a
//! child (`nemo_lens_test_support::child`).

mod bad_input;
mod carrier;
mod config;
mod env_sampler;
mod hostile_env;
mod identity;
mod identity_vectors;
mod job_env;
mod named_files;
mod publish;
mod resource;
mod sampler;
