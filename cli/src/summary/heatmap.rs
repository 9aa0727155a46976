//! `summary --plot`: the step heatmap, ranks as rows and steps as columns.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;

use super::{STEP_SPAN_NAMES, StepSpan, rank_label};

/// Draws the step heatmap; returns (ranks, steps) drawn.
pub(super) fn plot(
    steps: &mut BTreeMap<i64, Vec<StepSpan>>,
    path: &Path,
) -> Result<(usize, usize)> {
    // (row, step, duration µs)
    let mut cells = Vec::new();
    let ranks: Vec<i64> = steps.keys().copied().collect();
    for (row, spans) in steps.values_mut().enumerate() {
        spans.sort_by_key(|s| s.start_us);
        for (i, s) in spans.iter().enumerate() {
            cells.push((row, s.step.unwrap_or(i as i64), s.duration_us));
        }
    }
    anyhow::ensure!(
        !cells.is_empty(),
        "no complete step span (named {STEP_SPAN_NAMES:?}) to plot"
    );
    let min_step = cells.iter().map(|c| c.1).min().unwrap_or(0);
    let max_step = cells.iter().map(|c| c.1).max().unwrap_or(0);
    let lo = cells.iter().map(|c| c.2).min().unwrap_or(0) as f64 / 1000.0;
    let hi = cells.iter().map(|c| c.2).max().unwrap_or(0) as f64 / 1000.0;
    // Step numbers come from the input: compute the span in 128 bits.
    let n_steps =
        usize::try_from(i128::from(max_step) - i128::from(min_step) + 1).unwrap_or(usize::MAX);
    let x_end = max_step.saturating_add(1);

    let width = (160 + n_steps.clamp(10, 400) * 4) as u32;
    let height = (140 + ranks.len().clamp(4, 256) * 18) as u32;
    // Drawn into memory and written here: plotters' own file target drops a failed write.
    let mut svg = String::new();
    let root = SVGBackend::with_string(&mut svg, (width.max(640), height)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Step duration by rank (ms; {lo:.3} dark .. {hi:.3} bright)"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(min_step..x_end, (0..ranks.len()).into_segmented())?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("step")
            .y_desc("rank")
            .y_labels(ranks.len().min(32))
            // One label in the middle of each row.
            .y_label_formatter(&|row| {
                match row {
                    SegmentValue::CenterOf(r) => ranks.get(*r).map(|r| rank_label(*r)),
                    _ => None,
                }
                .unwrap_or_default()
            })
            .draw()?;
        let span = if hi > lo { hi - lo } else { 1.0 };
        chart.draw_series(cells.iter().map(|&(row, step, dur)| {
            let v = ((dur as f64 / 1000.0 - lo) / span) as f32;
            let color = ViridisRGB.get_color(v);
            Rectangle::new(
                [
                    (step, SegmentValue::Exact(row)),
                    (step.saturating_add(1), SegmentValue::Exact(row + 1)),
                ],
                color.filled(),
            )
        }))?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(root);
    std::fs::write(path, svg.as_bytes())?;
    Ok((ranks.len(), n_steps))
}
