//! [`NvtxFilter`]: which callsites push ranges, decided once per callsite, with the attributes
//! of their ranges beside the decision.
//!
//! The decision is the lens layer's (span groups and the exporters' own targets), on this
//! rank's groups, whether or not it exports. It is kept per callsite in a table that the
//! layer reads on every enter and event: a span needs no data of its own (no extension to
//! allocate), and `enabled`, which `tracing` asks per span when another layer decided otherwise
//! for the same callsite, is one table lookup.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use nvtx::domain::EventAttributes;
use parking_lot::RwLock;
use tracing_core::{Interest, LevelFilter, Metadata};
use tracing_subscriber::layer::{Context, Filter};

use super::domain::{domain, group_color};
use crate::layer::filter::{interest, is_internal_target};
use crate::rank::groups::{GroupGate, declared_group};

/// What one callsite does.
struct Callsite {
    /// Its spans push ranges (and events in them make marks).
    enabled: bool,
    /// A span's registered name, its group as the category and the group's colour; built the
    /// first time the callsite is enabled and kept (callsites are static, so the table is
    /// bounded).
    attributes: Option<EventAttributes<'static>>,
}

/// A hasher for the table's keys, the callsites' addresses: SplitMix64's finaliser, a few
/// instructions (the default SipHash would be most of a lookup).
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(5) ^ n;
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

type Table = HashMap<usize, Callsite, BuildHasherDefault<AddressHasher>>;

fn key(meta: &Metadata<'_>) -> usize {
    meta as *const Metadata<'_> as usize
}

/// The per-layer filter of the NVTX layer; see the [module docs](self).
#[derive(Clone)]
pub(super) struct NvtxFilter {
    /// The rank's enabled span groups; `None`: inert.
    groups: Option<Arc<GroupGate>>,
    table: Arc<RwLock<Table>>,
}

impl NvtxFilter {
    pub(super) fn new(groups: Option<Arc<GroupGate>>) -> Self {
        NvtxFilter {
            groups,
            table: Arc::default(),
        }
    }

    /// The decision for a callsite, as the lens layer's filter makes it.
    fn allows(&self, meta: &Metadata<'_>) -> bool {
        let Some(groups) = &self.groups else {
            return false;
        };
        !is_internal_target(meta.target()) && groups.allows(meta)
    }

    /// The range attributes of an enabled callsite, passed to `f` (the table is read-locked
    /// meanwhile: `f` must not register a callsite).
    pub(super) fn with_attributes<R>(
        &self,
        meta: &Metadata<'_>,
        f: impl FnOnce(&EventAttributes<'static>) -> R,
    ) -> Option<R> {
        match self.table.read().get(&key(meta)) {
            Some(Callsite {
                enabled: true,
                attributes: Some(attributes),
            }) => Some(f(attributes)),
            _ => None,
        }
    }
}

/// Built once per callsite, with the strings and categories NVTX keeps for the process.
fn attributes(meta: &'static Metadata<'static>) -> EventAttributes<'static> {
    let domain = domain();
    let group = declared_group(meta);
    EventAttributes {
        category: group.map(|g| domain.register_category(nvtx::Str::from_str_lossy(g))),
        color: group.map(|g| group_color(g).into()),
        message: Some(
            domain
                .register_string(nvtx::Str::from_str_lossy(meta.name()))
                .into(),
        ),
        payload: None,
    }
}

impl<S> Filter<S> for NvtxFilter {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        match self.table.read().get(&key(meta)) {
            Some(callsite) => callsite.enabled,
            None => self.allows(meta),
        }
    }

    // Called once per callsite, and again for every callsite when the span groups change
    // (`rebuild_interest_cache`).
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        let enabled = self.allows(meta);
        let mut table = self.table.write();
        let callsite = table.entry(key(meta)).or_insert(Callsite {
            enabled,
            attributes: None,
        });
        callsite.enabled = enabled;
        // Events make marks with the attributes of their span: only spans need their own.
        if enabled && meta.is_span() && callsite.attributes.is_none() {
            callsite.attributes = Some(attributes(meta));
        }
        interest(enabled)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        match self.groups {
            Some(_) => None,
            None => Some(LevelFilter::OFF),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        let hasher = BuildHasherDefault::<AddressHasher>::default();
        let buckets: std::collections::HashSet<u64> = (0..64_usize)
            .map(|i| hasher.hash_one(0x5555_0000_usize + i * 64) & 63)
            .collect();
        assert!(buckets.len() > 32, "{} of 64 buckets", buckets.len());
    }
}
