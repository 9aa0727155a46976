//! `nemo-lens goodput`: how much of a job's GPU time was peak-rate, committed training, and where
//! the rest went, with NeMo Lens's model and figures (its tools/goodput_report.py).
//!
//! Steps: the job's files ([`files`]); the reckoner's Slurm spans injected into every rank (the
//! training's own view of the Slurm side dropped); ft_launcher restart spans fanned onto the ranks
//! of their node; the job's checkpoint iterations; each rank's accounting ([`rank`], with the
//! lost-work rule of [`lost`]); the sum over ranks, its three factors and the flame ([`report`]).
//! The allocation per rank is the reckoner's `slurm.job` envelope, else Slurm's accounting for a
//! job id in the first argument's name ([`sacct`]), else each rank's own window.

mod classify;
mod files;
mod html;
pub mod lost;
mod rank;
mod report;
mod sacct;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result};

use crate::input::{Jobs, ReadOptions};
use files::{FileSpans, Kept, Role};
pub use report::Sort;

/// What `goodput` was asked.
#[derive(Debug)]
pub struct Options {
    /// Job directories or span files.
    pub inputs: Vec<PathBuf>,
    /// Print JSON instead of the text report.
    pub json: bool,
    /// Also write folded stacks here.
    pub fold: Option<PathBuf>,
    /// Also write the flame as a self-contained HTML page here.
    pub html: Option<PathBuf>,
    /// Child order of the flame.
    pub sort: Sort,
    /// How files are read.
    pub read: ReadOptions,
    /// Files read at once.
    pub jobs: Jobs,
}

/// The text of the denominator when the window comes from the ranks' own spans.
const WINDOW_DENOMINATOR: &str = "slurm.job span (SLURM_JOB_START -> shutdown)";

/// Prints the report (and writes the folded stacks).
pub fn run(opts: &Options) -> Result<()> {
    let mut split = crate::input::archive::split(&opts.inputs, &opts.read)?;
    let paths = files::discover(&split.paths)?;
    let roles: Vec<Role> = paths.iter().map(|p| files::role_of(p)).collect();
    if !roles.contains(&Role::Trainer) {
        anyhow::bail!(
            "no trainer span files found (lens_rank<N>.jsonl[.gz]) in {} input(s)",
            opts.inputs.len()
        );
    }
    let (mut read, mut stats) = files::read(&paths, &roles, &opts.read, &opts.jobs)?;
    stats.add_skipped(std::mem::take(&mut split.stats));
    stats.report();
    let mut bad_numbers = 0;
    for (path, f) in paths.iter().zip(&read) {
        bad_numbers += f.bad_iteration_numbers;
        if f.cut {
            eprintln!(
                "warning: {}: not read past its first damaged record ({} span(s) before it \
                 counted), as NeMo Lens's goodput report stops there",
                path.display(),
                f.spans
            );
        }
    }
    if bad_numbers > 0 {
        eprintln!(
            "warning: {bad_numbers} span(s) with a megatron.iteration that is not a number were \
             read as having none"
        );
    }

    // The reckoner's spans: every slurm.job but one envelope over them, injected last.
    let mut inject: Vec<Kept> = Vec::new();
    let mut inject_others: Option<(i64, i64)> = None;
    let mut inject_host: Option<String> = None;
    let mut reckoner = false;
    let mut envelope: Option<(i64, i64)> = None;
    for (f, _) in read.iter().zip(&roles).filter(|(_, r)| **r == Role::Slurm) {
        reckoner |= !f.kept.is_empty() || f.others.is_some();
        for k in &f.kept {
            if k.name == classify::SLURM_JOB {
                let (a, b) = envelope.unwrap_or((k.start_us, k.end_us));
                envelope = Some((a.min(k.start_us), b.max(k.end_us)));
            } else {
                inject.push(*k);
            }
        }
        inject_others = merge_window(inject_others, f.others);
        if inject_host.is_none() {
            inject_host = f.first_host.clone();
        }
    }
    if let Some((a, b)) = envelope {
        inject.push(Kept {
            name: classify::SLURM_JOB,
            start_us: a,
            end_us: b,
            iteration: None,
        });
    }
    let mut fanned: BTreeMap<String, Vec<Kept>> = BTreeMap::new();
    let mut worker_write_s = 0.0;
    for (f, role) in read.iter_mut().zip(&roles) {
        match role {
            Role::FtLauncher => {
                for (node, spans) in std::mem::take(&mut f.fanned) {
                    fanned.entry(node).or_default().extend(spans);
                }
            }
            Role::CheckpointWorker => worker_write_s += f.worker_write_s,
            _ => {}
        }
    }

    let mut job = rank::Job {
        first_checkpoint: -1,
        ..rank::Job::default()
    };
    let mut last_checkpoint = -1;
    let trainers: Vec<(PathBuf, FileSpans)> = paths
        .into_iter()
        .zip(read)
        .zip(&roles)
        .filter(|(_, r)| **r == Role::Trainer)
        .map(|(pf, _)| pf)
        .collect();
    for (_, f) in &trainers {
        for k in &f.kept {
            if let Some(it) = k.iteration
                && lost::CHECKPOINTS.contains(&k.name)
            {
                last_checkpoint = last_checkpoint.max(it);
                job.first_checkpoint = if job.first_checkpoint < 0 {
                    it
                } else {
                    job.first_checkpoint.min(it)
                };
                job.checkpoints.insert(it);
            }
        }
    }
    let mut denominator = WINDOW_DENOMINATOR.to_owned();
    if let Some(id) = opts.inputs.first().and_then(|a| sacct::job_id(a))
        && let Some(s) = sacct::elapsed_s(&id)
    {
        job.allocation_s = Some(s as f64);
        denominator = format!("SLURM allocation (sacct job {id}, ElapsedRaw={s}s/rank)");
    }
    if let Some((a, b)) = envelope {
        let s = (b - a) as f64 / 1e6;
        job.allocation_s = Some(s);
        denominator = format!("SLURM allocation (reckoner slurm.job envelope = {s:.0}s)");
    }

    let mut ranks = Vec::with_capacity(trainers.len());
    for (path, mut f) in trainers {
        if reckoner {
            f.kept
                .retain(|k| !classify::REPLACED_BY_RECKONER.contains(&k.name));
        }
        let node = f
            .node(reckoner)
            .map(str::to_owned)
            .or_else(|| reckoner.then(|| inject_host.clone()).flatten());
        let fan: &[Kept] = node
            .as_ref()
            .and_then(|n| fanned.get(n))
            .map_or(&[], Vec::as_slice);
        let others = if reckoner {
            merge_window(f.others, inject_others)
        } else {
            f.others
        };
        let accounting = rank::account(&[&f.kept, &inject, fan], others, &job);
        ranks.push((path.display().to_string(), accounting));
    }
    let job_report = report::JobReport::new(
        ranks,
        (job.first_checkpoint, last_checkpoint),
        denominator,
        worker_write_s,
    );

    let mut stdout = std::io::stdout().lock();
    if opts.json {
        serde_json::to_writer_pretty(&mut stdout, &job_report.json())
            .context("cannot write stdout")?;
        writeln!(stdout).context("cannot write stdout")?;
    } else {
        write!(stdout, "{}", job_report.text(opts.sort)).context("cannot write stdout")?;
    }
    if let Some(fold) = &opts.fold {
        std::fs::write(fold, job_report.folded())
            .with_context(|| format!("cannot write {}", fold.display()))?;
        if !opts.json {
            writeln!(stdout, "  folded stacks -> {}", fold.display())
                .context("cannot write stdout")?;
        }
    }
    if let Some(html) = &opts.html {
        std::fs::write(html, html::page(&job_report, opts.sort))
            .with_context(|| format!("cannot write {}", html.display()))?;
        if !opts.json {
            writeln!(
                stdout,
                "  interactive flame -> {}  (open in a browser; click to zoom)",
                html.display()
            )
            .context("cannot write stdout")?;
        }
    }
    if !opts.json {
        writeln!(stdout).context("cannot write stdout")?;
    }
    stdout.flush().context("cannot write stdout")?;
    Ok(())
}

fn merge_window(a: Option<(i64, i64)>, b: Option<(i64, i64)>) -> Option<(i64, i64)> {
    match (a, b) {
        (Some((a0, a1)), Some((b0, b1))) => Some((a0.min(b0), a1.max(b1))),
        (x, None) | (None, x) => x,
    }
}
