//! The allocation from Slurm's accounting: a first argument whose name holds a job id between
//! underscores (`…/run_4471093_…`, six digits or more) is looked up with
//! `sacct -j ID --format=ElapsedRaw --noheader -P`, as NeMo Lens's goodput report does. Its
//! elapsed seconds are then every rank's total (time past the ranks' window is unobserved). No
//! `sacct`, no answer within 10 s, or no number: the ranks' windows are the totals.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long `sacct` may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The job id in `arg` (without trailing slashes): the first `_` + 6 or more digits + `_`.
pub fn job_id(arg: &Path) -> Option<String> {
    let s = arg.to_string_lossy();
    let s = s.trim_end_matches('/').as_bytes();
    (0..s.len()).find_map(|i| {
        if s[i] != b'_' {
            return None;
        }
        let digits = s[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
        let end = i + 1 + digits;
        (digits >= 6 && s.get(end) == Some(&b'_'))
            .then(|| String::from_utf8_lossy(&s[i + 1..end]).into_owned())
    })
}

/// `ElapsedRaw` of the job, in seconds, from the first line `sacct` prints.
pub fn elapsed_s(job: &str) -> Option<i64> {
    let mut child = Command::new("sacct")
        .args(["-j", job, "--format=ElapsedRaw", "--noheader", "-P"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().split('\n').next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_are_six_digits_or_more_between_underscores() {
        let id = |s: &str| job_id(Path::new(s));
        assert_eq!(id("/runs/run_4471093_gpt/"), Some("4471093".into()));
        assert_eq!(id("a_12345_b_123456_c"), Some("123456".into()));
        assert_eq!(id("run_4471093"), None);
        assert_eq!(id("run_44710_x"), None);
    }
}
