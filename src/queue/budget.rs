//! The byte budget of a queue: memory bounded in bytes, not only in items.
//!
//! A queue of 2048 items is small with ordinary spans and gigabytes with 1 MB attributes. Every
//! item that enters a batch queue therefore reserves its approximate size ([`ApproxSize`]) from
//! the queue's [`ByteBudget`] and gives it back once exported (or dropped); an item that does not
//! fit is dropped and counted like one that finds the queue full. The budget covers the items
//! waiting *and* the batch in flight.
//!
//! | Variable | Default | Meaning |
//! |---|---|---|
//! | `NEMO_LENS_QUEUE_MAX_BYTES` | 67108864 (64 MiB) | bytes the span queue may hold, and the log queue as much again |
//!
//! The item limits (`OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BLRP_MAX_QUEUE_SIZE`) still apply; the ring
//! of slots a queue allocates up front is kept within the byte budget too: a larger item limit
//! is clamped, with a warning ([`clamp_queue_size`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::env::{Env, invalid};
use crate::error::Result;
#[cfg(doc)]
use crate::size::ApproxSize;

/// The variable of the queue byte budget.
pub(crate) const QUEUE_MAX_BYTES_VAR: &str = "NEMO_LENS_QUEUE_MAX_BYTES";

/// The byte budget of each queue when [`QUEUE_MAX_BYTES_VAR`] is unset: 64 MiB.
pub(crate) const DEFAULT_QUEUE_MAX_BYTES: usize = 64 << 20;

/// The smallest accepted budget (64 KiB): less would refuse ordinary spans.
pub(crate) const MIN_QUEUE_MAX_BYTES: usize = 64 << 10;

/// A lock-free count of the bytes a queue holds, against its limit.
///
/// The batch queues take each item's [`ApproxSize`] from their budget when it is queued and
/// give it back once its batch is exported (or dropped); an item that does not fit is dropped
/// and counted. The limit is `NEMO_LENS_QUEUE_MAX_BYTES` ([`QUEUE_MAX_BYTES_VAR`]), default
/// [`DEFAULT_QUEUE_MAX_BYTES`] (64 MiB) for the span queue and as much for the log queue. An
/// `OTEL_BSP_MAX_QUEUE_SIZE` / `OTEL_BLRP_MAX_QUEUE_SIZE` whose ring of slots (allocated up
/// front) would not fit in it is clamped, with a warning on stderr.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    used: AtomicUsize,
    limit: usize,
}

impl ByteBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        ByteBudget {
            used: AtomicUsize::new(0),
            limit,
        }
    }

    /// Takes `bytes` from the budget; `false` (nothing taken) when they do not fit.
    #[inline]
    pub(crate) fn try_reserve(&self, bytes: usize) -> bool {
        let before = self.used.fetch_add(bytes, Ordering::AcqRel);
        if before.saturating_add(bytes) > self.limit {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Gives back `bytes` taken by [`ByteBudget::try_reserve`].
    #[inline]
    pub(crate) fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// The byte budget of each queue: [`QUEUE_MAX_BYTES_VAR`], else [`DEFAULT_QUEUE_MAX_BYTES`].
/// Anything but an integer of at least [`MIN_QUEUE_MAX_BYTES`] is an error naming the
/// variable.
pub(crate) fn queue_max_bytes(env: Env<'_>) -> Result<usize> {
    let Some(value) = env.get(QUEUE_MAX_BYTES_VAR) else {
        return Ok(DEFAULT_QUEUE_MAX_BYTES);
    };
    match value.parse::<usize>() {
        Ok(v) if v >= MIN_QUEUE_MAX_BYTES => Ok(v),
        _ => Err(invalid(
            QUEUE_MAX_BYTES_VAR,
            &value,
            &format!("an integer number of bytes, at least {MIN_QUEUE_MAX_BYTES}"),
        )),
    }
}

/// The item limit of a queue whose slots are `slot_bytes` each, kept within `max_bytes`: a
/// larger `max_queue_size` (from `var`) is clamped, with a warning on stderr (the ring is
/// allocated, and touched, up front: 16 Mi slots are gigabytes before the first span).
pub(crate) fn clamp_queue_size(
    var: &str,
    max_queue_size: usize,
    slot_bytes: usize,
    max_bytes: usize,
) -> usize {
    let fits = (max_bytes / slot_bytes.max(1)).max(1);
    if max_queue_size <= fits {
        return max_queue_size;
    }
    eprintln!(
        "nemo-lens: warning: {var}={max_queue_size} would reserve {} MiB of queue slots up \
         front; clamped to {fits} items (the {QUEUE_MAX_BYTES_VAR} budget of {max_bytes} bytes)",
        max_queue_size.saturating_mul(slot_bytes) >> 20
    );
    fits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_what_does_not_fit_and_takes_it_back() {
        let budget = ByteBudget::new(100);
        assert!(budget.try_reserve(60));
        assert!(!budget.try_reserve(41));
        assert!(budget.try_reserve(40));
        budget.release(100);
        assert_eq!(budget.used(), 0);
        assert!(!budget.try_reserve(usize::MAX), "no overflow");
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn the_variable_is_bytes_with_a_floor() {
        let get = |v: &'static str| move |k: &str| (k == QUEUE_MAX_BYTES_VAR).then(|| v.into());
        assert_eq!(
            queue_max_bytes(Env::new(&|_| None)).unwrap(),
            DEFAULT_QUEUE_MAX_BYTES
        );
        assert_eq!(
            queue_max_bytes(Env::new(&get(" 1048576 "))).unwrap(),
            1 << 20
        );
        for bad in ["1", "64MiB", "-5", "1e9"] {
            let lookup = move |k: &str| (k == QUEUE_MAX_BYTES_VAR).then(|| bad.to_string());
            let err = queue_max_bytes(Env::new(&lookup)).unwrap_err().to_string();
            assert!(err.contains(QUEUE_MAX_BYTES_VAR), "{err}");
        }
    }

    #[test]
    fn a_huge_item_limit_is_clamped_to_the_budget() {
        assert_eq!(clamp_queue_size("V", 2048, 300, 64 << 20), 2048);
        assert_eq!(clamp_queue_size("V", 1 << 24, 256, 64 << 20), 1 << 18);
    }

    #[test]
    fn reservations_beyond_the_limit_are_refused() {
        use super::ByteBudget;
        use crate::size::ApproxSize;

        let budget = ByteBudget::new(1000);
        let item = "x".repeat(600);
        assert!(budget.try_reserve(item.approx_size()));
        assert!(!budget.try_reserve(item.approx_size())); // would exceed 1000 bytes: refused
        budget.release(item.approx_size());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn reserved_bytes_are_used() {
        let budget = super::ByteBudget::new(1 << 20);
        assert!(budget.try_reserve(4096));
        assert_eq!(budget.used(), 4096);
    }
}
