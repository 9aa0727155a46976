//! The answer to "replace what is already there?", shared by every registry and by the carrier.

/// Whether a registration or an addition replaces what is already there under the same name.
///
/// Taken by [`strategy::register_export_strategy`](crate::strategy::register_export_strategy),
/// [`metrics::register_metric_group`](crate::metrics::register_metric_group),
/// [`carrier::extend`](crate::carrier::extend) and [`carrier::publish`](crate::carrier::publish),
/// so that the call site says what it does.
///
/// ```
/// use nemo_lens::{Overwrite, carrier};
/// use opentelemetry::KeyValue;
///
/// let rank = [KeyValue::new("nv.dl.rank", 3_i64)];
/// assert_eq!(carrier::extend("nv.dl.rank=1", &rank, Overwrite::Yes), "nv.dl.rank=3");
/// assert_eq!(carrier::extend("nv.dl.rank=1", &rank, Overwrite::No), "nv.dl.rank=1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Overwrite {
    /// Replace: the new value wins.
    Yes,
    /// Keep: what is already there wins (a registry refuses the name with an error).
    No,
}

impl Overwrite {
    pub(crate) fn yes(self) -> bool {
        self == Overwrite::Yes
    }
}
