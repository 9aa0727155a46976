//! The log-record processor: [`LensBatchLogProcessor`], a [`Batcher`] of log records.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use opentelemetry::Context as OtelContext;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter, LogProcessor, SdkLogRecord};

use super::batcher::{BatchExport, Batcher, Role, block_on_timeout};
use super::config::QueueConfig;
use crate::error::Result;

/// Exports log records through a [`LogExporter`], shared with the processor.
struct LogExport<E> {
    exporter: Arc<StdMutex<E>>,
}

impl<E: LogExporter + 'static> BatchExport<(SdkLogRecord, InstrumentationScope)> for LogExport<E> {
    fn export(
        &mut self,
        batch: Vec<(SdkLogRecord, InstrumentationScope)>,
        timeout: Duration,
    ) -> std::result::Result<(), String> {
        let exporter = self.exporter.lock().map_err(|_| "exporter poisoned")?;
        let _guard = OtelContext::enter_telemetry_suppressed_scope();
        let refs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
            batch.iter().map(|(r, s)| (r, s)).collect();
        match block_on_timeout(exporter.export(LogBatch::new(&refs)), timeout) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(format!("log export failed: {e}")),
            None => Err(format!("log export timed out after {timeout:?}")),
        }
    }

    fn shutdown(&mut self, timeout: Duration) -> std::result::Result<(), String> {
        let exporter = self.exporter.lock().map_err(|_| "exporter poisoned")?;
        exporter
            .shutdown_with_timeout(timeout)
            .map_err(|e| format!("log exporter shutdown: {e}"))
    }
}

/// The log-record processor of nemo-lens: a bounded queue and worker thread in front of a
/// [`LogExporter`], sized by `OTEL_BLRP_*`, counting what it drops.
pub(crate) struct LensBatchLogProcessor<E> {
    batcher: Batcher<(SdkLogRecord, InstrumentationScope)>,
    exporter: Arc<StdMutex<E>>,
    flush_timeout: Duration,
}

impl<E> fmt::Debug for LensBatchLogProcessor<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensBatchLogProcessor")
            .field("batcher", &self.batcher)
            .finish_non_exhaustive()
    }
}

impl<E: LogExporter + 'static> LensBatchLogProcessor<E> {
    /// Starts the worker thread; records dropped are added to `dropped`.
    pub(crate) fn new(exporter: E, config: QueueConfig, dropped: Arc<AtomicU64>) -> Result<Self> {
        let exporter = Arc::new(StdMutex::new(exporter));
        let batcher = Batcher::new(
            Role::LOGS,
            config,
            dropped,
            LogExport {
                exporter: exporter.clone(),
            },
        )?;
        Ok(LensBatchLogProcessor {
            batcher,
            exporter,
            flush_timeout: config.export_timeout,
        })
    }
}

impl<E: LogExporter + 'static> LogProcessor for LensBatchLogProcessor<E> {
    #[inline]
    fn emit(&self, record: &mut SdkLogRecord, scope: &InstrumentationScope) {
        self.batcher.push((record.clone(), scope.clone()));
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.batcher
            .force_flush(self.flush_timeout)
            .map_err(OTelSdkError::InternalFailure)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.batcher
            .shutdown(timeout)
            .map_err(OTelSdkError::InternalFailure)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Ok(mut e) = self.exporter.lock() {
            e.set_resource(resource);
        }
    }
}
