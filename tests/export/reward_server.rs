//! The trace crosses the process boundary: the example trainer calls the example reward server
//! once per step, injecting its context with the standard OpenTelemetry propagator; both export
//! to one real collector (rotel) over OTLP, and the server's `reward` spans are children of the
//! trainer's `train_step` spans, in the trainer's trace.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::collector::{self, Collector, count_named};

/// An example exporting to `collector` over gRPC as `service`.
fn base(example: &str, collector: &Collector, service: &str) -> Child {
    Child::example(example)
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
            ("NEMO_LENS_SPAN_GROUPS", "per_step"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SERVICE_NAME", service),
        ])
        .envs(collector.otlp_env("grpc"))
}

#[test]
fn the_reward_servers_span_is_a_child_of_the_trainers_step() {
    let collector = Collector::start();
    // Killed if the test fails before it stops it.
    let mut server = base("reward_server", &collector, "reward")
        .args(["--listen", "127.0.0.1:0"])
        .spawn();
    let addr = server.wait_for_stderr_line("listening on ");

    let out = base("trainer", &collector, "trainer")
        .args(["--steps", "3", "--step-ms", "1", "--checkpoint-every", "0"])
        .args(["--reward-url", &format!("http://{addr}/reward")])
        .run();
    assert!(
        out.status.success(),
        "trainer: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The server flushes on SIGTERM, then dies by the signal.
    server.signal(libc::SIGTERM);
    let status = server.wait().status;
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGTERM),
        "{status:?}"
    );

    let output = collector.wait_for(
        "3 train_step and 3 reward spans",
        Duration::from_secs(30),
        |text| {
            let spans = collector::spans(text);
            count_named(&spans, "train_step") == 3 && count_named(&spans, "reward") == 3
        },
    );
    let spans = collector::spans(&output);
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

/// With the console exporter, stdout is the JSONL the server exports and nothing else: its
/// `listening on` line goes to stderr.
#[test]
fn the_reward_servers_stdout_is_only_its_console_jsonl() {
    let mut server = Child::example("reward_server")
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("OTEL_SERVICE_NAME", "reward"),
        ])
        .args(["--listen", "127.0.0.1:0"])
        .spawn();
    let addr = server.wait_for_stderr_line("listening on ");
    let mut stream = TcpStream::connect(&addr).unwrap();
    let body = "rollout";
    write!(
        stream,
        "POST /reward HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.contains("\"reward\""), "{response}");
    server.signal(libc::SIGTERM);
    let out = server.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(!lines.is_empty(), "nothing exported on stdout");
    for line in &lines {
        let value: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a stdout line that is not JSON ({e}): {line:?}"));
        assert!(value.is_object(), "{line}");
    }
    assert!(stdout.contains(r#""name": "reward""#), "{stdout}");
}
