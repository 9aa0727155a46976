//! A reward server for an RL trainer: one HTTP endpoint, `POST /reward`, traced with nemo-lens.
//!
//! ```sh
//! NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console OTEL_SERVICE_NAME=reward \
//!     cargo run --example reward_server -- --listen 127.0.0.1:8090
//! ```
//!
//! Each request carries the caller's trace context in W3C `traceparent` / `tracestate`
//! headers (the trainer injects them with the standard OpenTelemetry propagator, see
//! `examples/trainer.rs --reward-url`); the server extracts them with the global propagator
//! and makes its `reward` span a child of the caller's span, so the trainer's step and the
//! server's work land in one trace. The server exits on SIGTERM or SIGINT after flushing (the
//! nemo-lens signal handlers), with status 128 + signo.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use nemo_lens::{LensConfig, Telemetry};
use tracing_subscriber::prelude::*;

/// A traced reward server.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address to listen on, e.g. `127.0.0.1:8090` (port 0: any free port; the address is printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let telemetry = match LensConfig::from_env().and_then(|c| Telemetry::builder(c).build()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("reward_server: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .init();
    if let Err(e) = telemetry.install_signal_handlers() {
        eprintln!("reward_server: {e}");
    }
    let server = match tiny_http::Server::http(&args.listen) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("reward_server: cannot listen on {}: {e}", args.listen);
            return ExitCode::from(2);
        }
    };
    // The address actually bound, for callers that asked for port 0: on stderr, since stdout
    // carries the console exporter's JSONL; one write, so a reader never sees half the line.
    let line = format!("listening on {}\n", server.server_addr());
    let _ = std::io::stderr().write_all(line.as_bytes());
    for mut request in server.incoming_requests() {
        let carrier: HashMap<String, String> = request
            .headers()
            .iter()
            .map(|h| {
                (
                    h.field.as_str().as_str().to_ascii_lowercase(),
                    h.value.to_string(),
                )
            })
            .collect();
        let mut body = String::new();
        let _ = request.as_reader().read_to_string(&mut body);
        let reward = score(&carrier, &body);
        let _ = request.respond(tiny_http::Response::from_string(format!(
            "{{\"reward\": {reward}}}"
        )));
    }
    let _ = telemetry.shutdown(Duration::from_secs(5));
    ExitCode::SUCCESS
}

/// Scores one rollout under a `reward` span whose parent is the caller's span.
fn score(carrier: &HashMap<String, String>, body: &str) -> f64 {
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(carrier));
    // A remote parent is taken from the context attached while the span is created.
    let span = {
        let _attached = parent.attach();
        tracing::info_span!(
            "reward",
            otel.kind = "server",
            rollout.bytes = body.len() as i64,
            reward = tracing::field::Empty
        )
    };
    let _entered = span.enter();
    let reward = 1.0 / (1.0 + body.len() as f64);
    span.record("reward", reward);
    reward
}
