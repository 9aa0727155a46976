//! The process's one NVTX domain, `NeMo Lens`, and the colour of each span group in it.

use std::sync::OnceLock;

use nvtx::Domain;

/// The NVTX domain every range and mark of nemo-lens belongs to.
const DOMAIN_NAME: &std::ffi::CStr = c"NeMo Lens";

/// The process's one domain. Created once (the first NVTX call of the process, which loads an
/// NVTX tool if one is attached) and never destroyed: categories and registered strings borrow
/// it for the life of the process.
pub(super) fn domain() -> &'static Domain {
    static DOMAIN: OnceLock<Domain> = OnceLock::new();
    DOMAIN.get_or_init(|| Domain::new(DOMAIN_NAME))
}

/// The colour of a group: a hue from the FNV-1a hash of its name (saturation 0.65, value 0.9),
/// as opaque ARGB. The same in every process, rank and run.
pub(super) fn group_color(group: &str) -> u32 {
    let hash = group.bytes().fold(0x811C_9DC5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let hue = f64::from(hash % 360) / 60.0;
    let (s, v) = (0.65, 0.90);
    let c = v * s;
    let x = c * (1.0 - (hue % 2.0 - 1.0).abs());
    let (r, g, b) = match hue as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let channel = |f: f64| ((f + v - c) * 255.0).round() as u32;
    0xFF00_0000 | channel(r) << 16 | channel(g) << 8 | channel(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_colours_are_stable_opaque_and_distinct() {
        let groups = [
            "job",
            "checkpoint",
            "evaluate",
            "model_init",
            "load_checkpoint",
            "step",
            "forward_backward",
            "optimizer",
            "collective",
        ];
        let colours: Vec<u32> = groups.iter().map(|g| group_color(g)).collect();
        assert!(colours.iter().all(|c| c >> 24 == 0xFF), "{colours:08X?}");
        let mut distinct = colours.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), groups.len(), "{colours:08X?}");
        assert_eq!(group_color("step"), colours[5]);
    }
}
