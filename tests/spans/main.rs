//! Spans: how `tracing` spans and events become OpenTelemetry spans (fields, parents, events,
//! errors, links, groups, redaction, limits), the IDs they get, propagation across threads and
//! processes, the open-span closer and the flight recorder.
//!
//! One test binary: its tests run as threads of one process. A test that needs a process of its
//! own (process-wide slots, `fork`) runs its body in a child (`nemo_lens_test_support::child`).

mod attributes;
mod callsite_interest;
mod closer;
mod concurrency;
mod context_activation;
mod depth;
mod depth_work;
mod detail;
mod emit_span;
mod groups;
mod ids;
mod layer;
mod linked_span;
mod own_providers;
mod propagation;
mod recorder;
mod recording;
mod redaction;
mod span_ext;
mod span_rules;
mod threads;
mod trace_flags;
mod trace_per;
mod unwinding;
mod w3c_service;
mod w3c_trace_context;
