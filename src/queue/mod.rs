//! Batching with a bounded queue, counted drops and a bounded shutdown.
//!
//! Spans are exported in batches, on a worker thread, so that the thread that ends a span never
//! waits for the network. [`Batcher`] is that queue and worker, for any item type (spans and
//! log records); [`LensBatchProcessor`](span_processor::LensBatchProcessor) puts it behind the
//! OpenTelemetry span-processor interface. nemo-lens uses its own instead of the SDK's because
//! the trainer must never be hurt and nothing may be lost silently:
//!
//! * **bounded memory**: at most
//!   [`QueueConfig::max_queue_size`](config::QueueConfig::max_queue_size) items wait, plus one
//!   batch in flight; the queue is a fixed-size lock-free ring allocated at setup;
//! * **non-blocking producers**: [`Batcher::push`] is a try-push; a full queue (the exporter
//!   cannot keep up, the collector is down) drops the item and counts it;
//! * **counted failures**: the items of a batch whose export fails or times out
//!   ([`QueueConfig::export_timeout`](config::QueueConfig::export_timeout)) count as dropped too, so *dropped = produced − exported*;
//!   the counts are on the handle ([`Telemetry::stats`](crate::Telemetry::stats)) and
//!   reported once, on stderr, at shutdown when not zero;
//! * **bounded shutdown**: [`Batcher::shutdown`] exports what is queued until its deadline, then
//!   counts the rest as dropped and returns.
//!
//! The queue's sizes ([`QueueConfig`](config::QueueConfig)) and its byte budget ([`ByteBudget`]) are read once, at
//! setup; [`DropCounts`](drops::DropCounts) is what the processors dropped. SDK spans started outside the lens
//! layer and still open at shutdown are ended by the [`SdkSpanCloser`](sdk_span_closer).

pub(crate) mod batcher;
pub(crate) mod budget;
pub(crate) mod config;
pub(crate) mod drops;
pub(crate) mod log_processor;
pub(crate) mod processors;
pub(crate) mod sdk_span_closer;
pub(crate) mod span_processor;

#[cfg(test)]
mod tests;
