//! Lens's instrument families: `InferenceMetrics`, `RlMetrics`, `GymMetrics`, `TrainingMetrics`.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Gauge, Histogram, Meter};

use super::Instruments;
use crate::semconv;

fn gauge(
    meter: &Meter,
    name: &'static str,
    description: &'static str,
    unit: &'static str,
) -> Gauge<f64> {
    let b = meter.f64_gauge(name).with_description(description);
    if unit.is_empty() {
        b.build()
    } else {
        b.with_unit(unit).build()
    }
}

fn histogram(
    meter: &Meter,
    name: &'static str,
    description: &'static str,
    unit: &'static str,
) -> Histogram<f64> {
    meter
        .f64_histogram(name)
        .with_description(description)
        .with_unit(unit)
        .build()
}

// ------------------------------------------------------------------------------------------
// Inference (gen_ai.*)
// ------------------------------------------------------------------------------------------

pub(super) struct Inference {
    request_duration: Histogram<f64>,
    token_usage: Histogram<u64>,
}

/// One inference request: `record_inference_metrics` of the Python library.
///
/// Every point carries `gen_ai.operation.name` and `gen_ai.provider.name`, plus
/// `gen_ai.request.model` when `model` is set and non-empty; token points add
/// `gen_ai.token.type` (`input` / `output`).
///
/// ```
/// use nemo_lens::metrics::InferenceMetrics;
/// # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// InferenceMetrics {
///     request_duration_s: Some(0.5),
///     model: Some("llama-3-8b"),
///     input_tokens: Some(10),
///     output_tokens: Some(5),
///     ..Default::default()
/// }
/// .record(telemetry.instruments());
/// assert_eq!(InferenceMetrics::default().provider_name, "nemo");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct InferenceMetrics<'a> {
    /// Request duration in seconds → `gen_ai.server.request.duration`.
    pub request_duration_s: Option<f64>,
    /// Model name → `gen_ai.request.model` (omitted when `None` or empty).
    pub model: Option<&'a str>,
    /// Input tokens → `gen_ai.client.token.usage` with `gen_ai.token.type = input`.
    pub input_tokens: Option<u64>,
    /// Output tokens → `gen_ai.client.token.usage` with `gen_ai.token.type = output`.
    pub output_tokens: Option<u64>,
    /// `gen_ai.provider.name` (default `nemo`).
    pub provider_name: &'a str,
    /// `gen_ai.operation.name` (default `text_completion`).
    pub operation_name: &'a str,
}

impl Default for InferenceMetrics<'_> {
    fn default() -> Self {
        InferenceMetrics {
            request_duration_s: None,
            model: None,
            input_tokens: None,
            output_tokens: None,
            provider_name: "nemo",
            operation_name: "text_completion",
        }
    }
}

impl InferenceMetrics<'_> {
    /// Records the fields that are set (see the [struct docs](Self)) into `instruments` (an
    /// [`Instruments`] or the [`Telemetry`](crate::Telemetry) handle).
    ///
    /// ```
    /// let instruments = nemo_lens::metrics::Instruments::noop();
    /// nemo_lens::metrics::InferenceMetrics { output_tokens: Some(42), ..Default::default() }.record(&instruments);
    /// ```
    pub fn record(&self, instruments: &impl AsRef<Instruments>) {
        let inner = &instruments.as_ref().inner;
        let i = inner.inference.get_or_init(|| Inference {
            request_duration: histogram(
                &inner.meter,
                semconv::GEN_AI_SERVER_REQUEST_DURATION,
                "GenAI server request duration.",
                "s",
            ),
            token_usage: inner
                .meter
                .u64_histogram(semconv::GEN_AI_CLIENT_TOKEN_USAGE)
                .with_description("Number of input and output tokens used.")
                .with_unit("{token}")
                .build(),
        });
        let mut attrs = Vec::with_capacity(4);
        attrs.push(KeyValue::new(
            semconv::GEN_AI_OPERATION_NAME,
            self.operation_name.to_owned(),
        ));
        attrs.push(KeyValue::new(
            semconv::GEN_AI_PROVIDER_NAME,
            self.provider_name.to_owned(),
        ));
        if let Some(model) = self.model.filter(|m| !m.is_empty()) {
            attrs.push(KeyValue::new(
                semconv::GEN_AI_REQUEST_MODEL,
                model.to_owned(),
            ));
        }
        if let Some(d) = self.request_duration_s {
            i.request_duration.record(d, &attrs);
        }
        for (tokens, kind) in [(self.input_tokens, "input"), (self.output_tokens, "output")] {
            if let Some(n) = tokens {
                attrs.push(KeyValue::new(semconv::GEN_AI_TOKEN_TYPE, kind));
                i.token_usage.record(n, &attrs);
                attrs.pop();
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// RL (rl.*)
// ------------------------------------------------------------------------------------------

pub(super) struct Rl {
    reward_mean: Gauge<f64>,
    kl_divergence: Gauge<f64>,
    policy_loss: Gauge<f64>,
    value_loss: Gauge<f64>,
    entropy: Gauge<f64>,
    response_length_mean: Gauge<f64>,
    grad_norm: Gauge<f64>,
    learning_rate: Gauge<f64>,
    throughput_tokens_per_sec: Gauge<f64>,
    generation_duration_ms: Histogram<f64>,
    rollout_duration_ms: Histogram<f64>,
}

/// One RL training step: `record_rl_metrics` of the Python library (main). No attributes.
///
/// ```
/// use nemo_lens::metrics::RlMetrics;
/// # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// RlMetrics { reward_mean: Some(0.85), kl_divergence: Some(0.01), rollout_duration_ms: Some(2300.0),
///     ..Default::default() }
///     .record(telemetry.instruments());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RlMetrics {
    /// → gauge `rl.reward.mean`.
    pub reward_mean: Option<f64>,
    /// → gauge `rl.kl_divergence`.
    pub kl_divergence: Option<f64>,
    /// → gauge `rl.policy_loss`.
    pub policy_loss: Option<f64>,
    /// → gauge `rl.value_loss`.
    pub value_loss: Option<f64>,
    /// → gauge `rl.entropy`.
    pub entropy: Option<f64>,
    /// → gauge `rl.response_length.mean`.
    pub response_length_mean: Option<f64>,
    /// → gauge `rl.grad_norm`.
    pub grad_norm: Option<f64>,
    /// → gauge `rl.learning_rate`.
    pub learning_rate: Option<f64>,
    /// → gauge `rl.throughput.tokens_per_sec` (`{token}/s`).
    pub throughput_tokens_per_sec: Option<f64>,
    /// → histogram `rl.generation.duration_ms` (`ms`).
    pub generation_duration_ms: Option<f64>,
    /// → histogram `rl.rollout.duration_ms` (`ms`).
    pub rollout_duration_ms: Option<f64>,
}

impl RlMetrics {
    /// Records the fields that are set.
    ///
    /// ```
    /// let instruments = nemo_lens::metrics::Instruments::noop();
    /// nemo_lens::metrics::RlMetrics { entropy: Some(2.1), ..Default::default() }.record(&instruments);
    /// ```
    pub fn record(&self, instruments: &impl AsRef<Instruments>) {
        let inner = &instruments.as_ref().inner;
        let m = &inner.meter;
        let i = inner.rl.get_or_init(|| Rl {
            reward_mean: gauge(
                m,
                semconv::RL_REWARD_MEAN,
                "Mean reward across rollout batch.",
                "",
            ),
            kl_divergence: gauge(
                m,
                semconv::RL_KL_DIVERGENCE,
                "KL divergence between policy and reference.",
                "",
            ),
            policy_loss: gauge(m, semconv::RL_POLICY_LOSS, "Policy gradient loss.", ""),
            value_loss: gauge(m, semconv::RL_VALUE_LOSS, "Value function loss.", ""),
            entropy: gauge(m, semconv::RL_ENTROPY, "Policy entropy.", ""),
            response_length_mean: gauge(
                m,
                semconv::RL_RESPONSE_LENGTH_MEAN,
                "Mean generated response length (tokens).",
                "",
            ),
            grad_norm: gauge(
                m,
                semconv::RL_GRAD_NORM,
                "Gradient norm of the policy update.",
                "",
            ),
            learning_rate: gauge(
                m,
                semconv::RL_LEARNING_RATE,
                "Current optimizer learning rate.",
                "",
            ),
            throughput_tokens_per_sec: gauge(
                m,
                semconv::RL_THROUGHPUT_TOKENS_PER_SEC,
                "Training throughput in tokens per second.",
                "{token}/s",
            ),
            generation_duration_ms: histogram(
                m,
                semconv::RL_GENERATION_DURATION_MS,
                "Duration of text generation in milliseconds.",
                "ms",
            ),
            rollout_duration_ms: histogram(
                m,
                semconv::RL_ROLLOUT_DURATION_MS,
                "Duration of rollout collection in milliseconds.",
                "ms",
            ),
        });
        let gauges = [
            (self.reward_mean, &i.reward_mean),
            (self.kl_divergence, &i.kl_divergence),
            (self.policy_loss, &i.policy_loss),
            (self.value_loss, &i.value_loss),
            (self.entropy, &i.entropy),
            (self.response_length_mean, &i.response_length_mean),
            (self.grad_norm, &i.grad_norm),
            (self.learning_rate, &i.learning_rate),
            (self.throughput_tokens_per_sec, &i.throughput_tokens_per_sec),
        ];
        for (value, gauge) in gauges {
            if let Some(v) = value {
                gauge.record(v, &[]);
            }
        }
        if let Some(v) = self.generation_duration_ms {
            i.generation_duration_ms.record(v, &[]);
        }
        if let Some(v) = self.rollout_duration_ms {
            i.rollout_duration_ms.record(v, &[]);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Gym (gym.*)
// ------------------------------------------------------------------------------------------

pub(super) struct Gym {
    server_request_duration_ms: Histogram<f64>,
    rollout_duration_ms: Histogram<f64>,
    verify_duration_ms: Histogram<f64>,
    verify_success_rate: Gauge<f64>,
    active_servers: Gauge<u64>,
}

/// NeMo Gym server metrics: `record_gym_metrics` of the Python library. No attributes.
///
/// ```
/// use nemo_lens::metrics::GymMetrics;
/// # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// GymMetrics { verify_duration_ms: Some(120.0), verify_success_rate: Some(0.87), active_servers: Some(4),
///     ..Default::default() }
///     .record(telemetry.instruments());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GymMetrics {
    /// → histogram `gym.server.request_duration_ms` (`ms`).
    pub server_request_duration_ms: Option<f64>,
    /// → histogram `gym.rollout.duration_ms` (`ms`).
    pub rollout_duration_ms: Option<f64>,
    /// → histogram `gym.verify.duration_ms` (`ms`).
    pub verify_duration_ms: Option<f64>,
    /// → gauge `gym.verify.success_rate` (no unit, as Python).
    pub verify_success_rate: Option<f64>,
    /// → gauge `gym.servers.active`.
    pub active_servers: Option<u64>,
}

impl GymMetrics {
    /// Records the fields that are set.
    ///
    /// ```
    /// let instruments = nemo_lens::metrics::Instruments::noop();
    /// nemo_lens::metrics::GymMetrics { active_servers: Some(4), ..Default::default() }.record(&instruments);
    /// ```
    pub fn record(&self, instruments: &impl AsRef<Instruments>) {
        let inner = &instruments.as_ref().inner;
        let m = &inner.meter;
        let i = inner.gym.get_or_init(|| Gym {
            server_request_duration_ms: histogram(
                m,
                semconv::GYM_SERVER_REQUEST_DURATION_MS,
                "Gym server request duration in milliseconds.",
                "ms",
            ),
            rollout_duration_ms: histogram(
                m,
                semconv::GYM_ROLLOUT_DURATION_MS,
                "Rollout collection duration in milliseconds.",
                "ms",
            ),
            verify_duration_ms: histogram(
                m,
                semconv::GYM_VERIFY_DURATION_MS,
                "Verification endpoint duration in milliseconds.",
                "ms",
            ),
            verify_success_rate: gauge(
                m,
                semconv::GYM_VERIFY_SUCCESS_RATE,
                "Fraction of successful verifications.",
                "",
            ),
            active_servers: m
                .u64_gauge(semconv::GYM_SERVERS_ACTIVE)
                .with_description("Number of active Gym servers.")
                .build(),
        });
        let histograms = [
            (
                self.server_request_duration_ms,
                &i.server_request_duration_ms,
            ),
            (self.rollout_duration_ms, &i.rollout_duration_ms),
            (self.verify_duration_ms, &i.verify_duration_ms),
        ];
        for (value, histogram) in histograms {
            if let Some(v) = value {
                histogram.record(v, &[]);
            }
        }
        if let Some(v) = self.verify_success_rate {
            i.verify_success_rate.record(v, &[]);
        }
        if let Some(v) = self.active_servers {
            i.active_servers.record(v, &[]);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Training (dl.*)
// ------------------------------------------------------------------------------------------

pub(super) struct Training {
    step_duration: Histogram<f64>,
    loss: Gauge<f64>,
    grad_norm: Gauge<f64>,
    learning_rate: Gauge<f64>,
    tokens_per_sec: Gauge<f64>,
    tflops: Gauge<f64>,
}

/// Bucket bounds of `dl.step.duration`, seconds: from 10 ms to 10 minutes.
pub(crate) const STEP_DURATION_BOUNDS_S: [f64; 16] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 600.0,
];

/// One training step of a Rust trainer (`dl.*` names; no Python counterpart).
///
/// `attributes` go on every point; keep them low-cardinality (a phase, a model name), never the
/// step number.
///
/// ```
/// use nemo_lens::metrics::TrainingMetrics;
/// use opentelemetry::KeyValue;
/// # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// let phase = [KeyValue::new("phase", "pretrain")];
/// TrainingMetrics {
///     step_duration_s: Some(0.84),
///     loss: Some(2.31),
///     grad_norm: Some(1.02),
///     learning_rate: Some(3e-4),
///     tokens_per_sec: Some(51_200.0),
///     tflops: Some(182.5),
///     attributes: &phase,
/// }
/// .record(telemetry.instruments());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TrainingMetrics<'a> {
    /// Step wall time in seconds → histogram `dl.step.duration` (`s`, bucket bounds 0.01,
    /// 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500 and 600 s).
    pub step_duration_s: Option<f64>,
    /// → gauge `dl.loss`.
    pub loss: Option<f64>,
    /// → gauge `dl.grad_norm`.
    pub grad_norm: Option<f64>,
    /// → gauge `dl.learning_rate`.
    pub learning_rate: Option<f64>,
    /// → gauge `dl.throughput_tokens_per_sec` (`{token}/s`).
    pub tokens_per_sec: Option<f64>,
    /// Model TFLOP/s per GPU → gauge `dl.throughput_tflops` (`TFLOP/s`).
    pub tflops: Option<f64>,
    /// Attributes of every point.
    pub attributes: &'a [KeyValue],
}

impl TrainingMetrics<'_> {
    /// Records the fields that are set.
    ///
    /// ```
    /// let instruments = nemo_lens::metrics::Instruments::noop();
    /// nemo_lens::metrics::TrainingMetrics { grad_norm: Some(1.02), ..Default::default() }.record(&instruments);
    /// ```
    pub fn record(&self, instruments: &impl AsRef<Instruments>) {
        let inner = &instruments.as_ref().inner;
        let m = &inner.meter;
        let i = inner.training.get_or_init(|| Training {
            step_duration: m
                .f64_histogram(semconv::DL_STEP_DURATION)
                .with_description("Training step duration.")
                .with_unit("s")
                .with_boundaries(STEP_DURATION_BOUNDS_S.to_vec())
                .build(),
            loss: gauge(m, semconv::DL_LOSS, "Training loss.", ""),
            grad_norm: gauge(m, semconv::DL_GRAD_NORM, "Global gradient norm.", ""),
            learning_rate: gauge(m, semconv::DL_LEARNING_RATE, "Current learning rate.", ""),
            tokens_per_sec: gauge(
                m,
                semconv::DL_THROUGHPUT_TOKENS_PER_SEC,
                "Training throughput in tokens per second.",
                "{token}/s",
            ),
            tflops: gauge(
                m,
                semconv::DL_THROUGHPUT_TFLOPS,
                "Model throughput in TFLOP/s per GPU.",
                "TFLOP/s",
            ),
        });
        let attrs = self.attributes;
        if let Some(v) = self.step_duration_s {
            i.step_duration.record(v, attrs);
        }
        let gauges = [
            (self.loss, &i.loss),
            (self.grad_norm, &i.grad_norm),
            (self.learning_rate, &i.learning_rate),
            (self.tokens_per_sec, &i.tokens_per_sec),
            (self.tflops, &i.tflops),
        ];
        for (value, gauge) in gauges {
            if let Some(v) = value {
                gauge.record(v, attrs);
            }
        }
    }
}
