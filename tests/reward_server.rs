//! The trace crosses the process boundary: the example trainer calls the example reward server
//! once per step, injecting its context with the standard OpenTelemetry propagator; both export
//! to one real collector (rotel) over OTLP, and the server's `reward` spans are children of the
//! trainer's `train_step` spans, in the trainer's trace.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::collector::{Collector, items};

fn base(cmd: &mut Command, collector: &Collector, service: &str) {
    common::clear_telemetry_env(cmd);
    cmd.envs([
        ("NEMO_LENS_ENABLED", "1"),
        ("NEMO_LENS_EXPORTER", "otlp"),
        ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
        ("NEMO_LENS_SPAN_GROUPS", "per_step"),
        ("NEMO_LENS_METRICS_ENABLED", "0"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_SERVICE_NAME", service),
    ])
    .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint("grpc"));
}

/// The server process, killed if the test fails before it stops it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_reward_servers_span_is_a_child_of_the_trainers_step() {
    let collector = Collector::start();
    let mut server = Command::new(common::example("reward_server"));
    base(&mut server, &collector, "reward");
    let mut server = KillOnDrop(
        server
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut first_line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    let addr = first_line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first_line:?}"))
        .to_string();

    let mut trainer = Command::new(common::example("trainer"));
    base(&mut trainer, &collector, "trainer");
    let out = trainer
        .args(["--steps", "3", "--step-ms", "1", "--checkpoint-every", "0"])
        .args(["--reward-url", &format!("http://{addr}/reward")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "trainer: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The server flushes on SIGTERM, then dies by the signal.
    // SAFETY: `kill` on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) },
        0
    );
    let status = server.0.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGTERM),
        "{status:?}"
    );

    let output = collector.wait_for(
        "3 train_step and 3 reward spans",
        Duration::from_secs(30),
        |text| {
            let spans = items(text, "Span #");
            let count = |name: &str| {
                spans
                    .iter()
                    .filter(|s| s.field("Name").as_deref() == Some(name))
                    .count()
            };
            count("train_step") == 3 && count("reward") == 3
        },
    );
    let spans = items(&output, "Span #");
    let steps: Vec<_> = spans
        .iter()
        .filter(|s| s.field("Name").as_deref() == Some("train_step"))
        .collect();
    let rewards: Vec<_> = spans
        .iter()
        .filter(|s| s.field("Name").as_deref() == Some("reward"))
        .collect();
    for reward in &rewards {
        assert_eq!(
            reward.resource_attr("service.name").as_deref(),
            Some("Str(reward)")
        );
        let parent = reward.field("Parent ID").expect("a parent id");
        let step = steps
            .iter()
            .find(|s| s.field("ID") == Some(parent.clone()))
            .unwrap_or_else(|| panic!("reward's parent {parent} is no train_step: {steps:#?}"));
        assert_eq!(reward.field("Trace ID"), step.field("Trace ID"));
        assert_eq!(
            step.resource_attr("service.name").as_deref(),
            Some("Str(trainer)")
        );
    }
}
