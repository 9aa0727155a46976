//! The span links of the trace, drawn as flow arrows: a bounded index of recent span positions
//! ([`RECENT_SPANS`]), and the links read before their span, waiting for it within
//! [`PENDING_LINK_BYTES`].

use std::collections::{HashMap, VecDeque};

use anyhow::Result;
use serde_json::{Map, Value};

use super::{ENTRY_BYTES, Loc, PENDING_LINK_BYTES, RECENT_SPANS};

/// A link read before the span it points to: where the linking span is, and the link's
/// attributes as JSON.
pub(super) type PendingLink = (Loc, String);

/// The spans seen recently and the links waiting for theirs.
pub(super) struct Links {
    recent: HashMap<u64, Loc>,
    recent_order: VecDeque<u64>,
    /// Linked span id → the linking spans' positions, for links read before their span.
    pending: HashMap<u64, Vec<PendingLink>>,
    pending_count: usize,
    pending_bytes: usize,
    /// Links not drawn because their span id is not one, or they did not fit the budget.
    unresolved: u64,
    /// Links not drawn because the links waiting for their span filled the budget.
    pub(super) over_budget: u64,
}

fn span_id_key(hex: &str) -> Option<u64> {
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()
}

impl Links {
    pub(super) fn new() -> Self {
        Links {
            recent: HashMap::with_capacity(RECENT_SPANS),
            recent_order: VecDeque::with_capacity(RECENT_SPANS),
            pending: HashMap::new(),
            pending_count: 0,
            pending_bytes: 0,
            unresolved: 0,
            over_budget: 0,
        }
    }

    /// Links whose span was not found (so far: those still waiting are counted too).
    pub(super) fn unresolved(&self) -> u64 {
        self.unresolved + self.pending_count as u64
    }

    /// A link from the span at `here` to span `span_id`: where that span is when it has been
    /// seen (the arrow is drawn now); else the link waits for it, or is counted when it does not
    /// fit.
    pub(super) fn link(
        &mut self,
        span_id: &str,
        attributes: &Map<String, Value>,
        here: Loc,
    ) -> Result<Option<Loc>> {
        let Some(key) = span_id_key(span_id) else {
            self.unresolved += 1;
            return Ok(None);
        };
        if let Some(from) = self.recent.get(&key).copied() {
            return Ok(Some(from));
        }
        // Measured before serializing, so a link over the budget costs no copy.
        let fits = |bytes: usize| self.pending_bytes + bytes + ENTRY_BYTES <= PENDING_LINK_BYTES;
        let attributes = match fits(json_len(attributes)) {
            true => Some(serde_json::to_string(attributes)?).filter(|a| fits(a.len())),
            false => None,
        };
        if let Some(attributes) = attributes {
            self.pending_bytes += attributes.len() + ENTRY_BYTES;
            self.pending
                .entry(key)
                .or_default()
                .push((here, attributes));
            self.pending_count += 1;
        } else {
            self.unresolved += 1;
            self.over_budget += 1;
        }
        Ok(None)
    }

    /// Span `span_id` is at `here`: the links that waited for it, and it is remembered for the
    /// links to come.
    pub(super) fn arrived(&mut self, span_id: &str, here: Loc) -> Vec<PendingLink> {
        let Some(key) = span_id_key(span_id) else {
            return Vec::new();
        };
        let waiting = self.pending.remove(&key).unwrap_or_default();
        self.pending_count -= waiting.len();
        for (_, attributes) in &waiting {
            self.pending_bytes -= attributes.len() + ENTRY_BYTES;
        }
        self.remember(key, here);
        waiting
    }

    /// Indexes a span's position, forgetting the oldest when the index is full (evicting before
    /// inserting, so the map never grows past its pre-sized capacity).
    fn remember(&mut self, span_id: u64, loc: Loc) {
        if let Some(known) = self.recent.get_mut(&span_id) {
            *known = loc;
            return;
        }
        if self.recent_order.len() == RECENT_SPANS
            && let Some(old) = self.recent_order.pop_front()
        {
            self.recent.remove(&old);
        }
        self.recent.insert(span_id, loc);
        self.recent_order.push_back(span_id);
    }
}

/// A lower bound of the length of `map` written as JSON (its keys and strings unescaped), found
/// without writing it.
fn json_len(map: &Map<String, Value>) -> usize {
    fn value_len(v: &Value) -> usize {
        match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => 4,
            Value::String(s) => s.len() + 2,
            Value::Array(a) => 2 + a.iter().map(|v| value_len(v) + 1).sum::<usize>(),
            Value::Object(m) => json_len(m),
        }
    }
    2 + map
        .iter()
        .map(|(k, v)| k.len() + 4 + value_len(v))
        .sum::<usize>()
}
