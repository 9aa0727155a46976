//! Export: the batch processor and its byte budget, drop counting, OTLP to a real collector
//! (rotel) over every protocol, TLS and a Tokio runtime of the application's, collector faults
//! (absent, killed, hung, size limits), shutdown accounting on the real trainer, the console
//! span exporter against Python's output, a trace across two processes, and OTLP headers
//! (secrets) kept out of every Debug, error and log.
//!
//! One test binary: its tests run as threads of one process. A test that sets the process
//! environment, measures resident memory or reads the global providers runs its body in a child
//! (`nemo_lens_test_support::child`).

mod app_http_client;
mod batch;
mod collector_faults;
mod console_jsonl;
mod crypto_provider;
mod drops;
mod hung_collector;
mod keepup;
mod otlp;
mod otlp_runtime;
mod otlp_tls;
mod oversize;
mod queue_bytes;
mod reward_server;
mod secrets;
mod shutdown_accounting;
