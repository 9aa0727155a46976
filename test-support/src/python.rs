//! Python 3 as the oracle: a test hands it inputs and compares with what Python's own standard
//! library (`uuid`, `urllib.parse`, `shlex`, `decimal`) computes. CI has Python 3; a missing
//! `python3` fails the test (it never skips).

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `python3 -c script` with `input` on its standard input and returns its standard output
/// (UTF-8). Fails the test when Python is missing or the script fails.
pub fn run(script: &str, input: &str) -> String {
    let mut child = Command::new("python3")
        .args(["-c", script])
        // UTF-8 on the pipes whatever the locale.
        .env("PYTHONUTF8", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("python3 is needed as the test oracle: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("python3 printed UTF-8")
}

/// Python's answer for each input line: `expression` is evaluated with `line` bound to one line
/// of `lines` (without its newline), after `imports`; one result per line, printed with `str`.
pub fn map_lines(imports: &str, expression: &str, lines: &[String]) -> Vec<String> {
    for line in lines {
        assert!(!line.contains('\n'), "one input per line: {line:?}");
    }
    let script = format!(
        "import sys\n{imports}\nfor line in sys.stdin.read().split('\\n')[:-1]:\n    print({expression})\n"
    );
    let mut input = lines.join("\n");
    input.push('\n');
    run(&script, &input).lines().map(str::to_owned).collect()
}

/// `int(hashlib.md5(str(rank).encode()).hexdigest(), 16) % 10000 / 10000.0`, computed with
/// CPython 3.11 for ranks 0..16: the `sampled` export strategy's rule, pinned where a test
/// compares without running Python.
pub const MD5_RANK_FRACTIONS: [(u32, f64); 16] = [
    (0, 0.785),
    (1, 0.8411),
    (2, 0.9212),
    (3, 0.0883),
    (4, 0.19),
    (5, 0.0693),
    (6, 0.0412),
    (7, 0.5555),
    (8, 0.3101),
    (9, 0.8374),
    (10, 0.1824),
    (11, 0.265),
    (12, 0.8112),
    (13, 0.4873),
    (14, 0.6038),
    (15, 0.7603),
];
