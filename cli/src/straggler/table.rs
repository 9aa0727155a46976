//! The per-rank table: a fixed-size window of each rank's latest steps, shared by the readers.
//!
//! Every rank keeps at most [`WINDOW`] steps, the ones with the highest keys (the step number,
//! else the step span's start), so a rank costs the same whatever the length of its files, and
//! the window is the same whatever order the files are read in: it is the latest [`WINDOW`] steps
//! of the union of the rank's files. A step seen twice (two dumps of one rank, or a dump and
//! the console file) is one entry, the larger of each figure kept.
//!
//! The table is charged [`RANK_BYTES`] per rank against [`RANK_TABLE_BYTES`]; a rank first seen
//! once the table is full is skipped and counted (`ranks_over_budget`). Compute span names are
//! interned once ([`MAX_NAMES`] names of at most [`MAX_NAME_BYTES`] bytes), and each rank
//! follows at most [`NAMED`] of them.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Steps kept per rank: its latest ones.
pub const WINDOW: usize = 128;
/// Compute span names followed per rank.
pub const NAMED: usize = 4;
/// Bytes of the rank table (about 15,000 ranks).
pub const RANK_TABLE_BYTES: usize = 64 << 20;
/// What one rank is charged: its state, a full window, its host name and the map's node.
pub const RANK_BYTES: usize =
    std::mem::size_of::<RankState>() + WINDOW * std::mem::size_of::<Entry>() + MAX_HOST_BYTES + 64;
/// Distinct compute span names interned.
pub const MAX_NAMES: usize = 1024;
/// Longest compute span name followed (longer names are not).
pub const MAX_NAME_BYTES: usize = 256;
/// Longest host name kept (cut at a character boundary).
const MAX_HOST_BYTES: usize = 64;
/// Collective span names listed in the report.
const MAX_COLLECTIVE_NAMES: usize = 8;
/// `wait_us` of a step without any collective span.
const NO_WAIT: u32 = u32::MAX;
/// The longest figure an [`Entry`] holds, µs (71 minutes 35 s); longer ones are clamped and
/// counted ([`Merges::clamped_figures`]).
pub const MAX_FIGURE_US: u32 = NO_WAIT - 1;
/// An empty name slot.
const NO_NAME: u16 = u16::MAX;

/// One step of one rank: durations in µs (up to 71 minutes; longer ones are clamped and
/// counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The step number, else the step span's start (µs since the epoch).
    pub key: i64,
    /// The step span's duration.
    pub step_us: u32,
    /// Time in collective spans (their union), [`NO_WAIT`] when the step had none.
    wait_us: u32,
    /// Time in each followed compute span name (see [`RankState::names`]).
    pub named: [u32; NAMED],
}

impl Entry {
    /// Time in collective spans; `None` when the step had none.
    pub fn wait_us(&self) -> Option<u32> {
        (self.wait_us != NO_WAIT).then_some(self.wait_us)
    }

    /// The rest of the step: its duration less the time in collective spans.
    pub fn compute_us(&self) -> u32 {
        self.step_us - self.wait_us().unwrap_or(0).min(self.step_us)
    }

    fn merge(&mut self, other: &Entry) {
        self.step_us = self.step_us.max(other.step_us);
        self.wait_us = match (self.wait_us(), other.wait_us()) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b).unwrap_or(NO_WAIT),
        };
        for (a, b) in self.named.iter_mut().zip(other.named) {
            *a = (*a).max(b);
        }
    }
}

/// What a reader found for one step.
#[derive(Debug, Clone)]
pub struct StepRecord {
    /// The step number, else the step span's start.
    pub key: i64,
    /// `key` is a step number (`dl.step` / `step` attribute).
    pub numbered: bool,
    /// The step span's duration, µs.
    pub step_us: i64,
    /// Union of the collective spans inside the step, µs; `None` when there was none.
    pub wait_us: Option<i64>,
    /// (interned name, µs) of the compute spans inside the step.
    pub named: Vec<(u16, i64)>,
}

/// One rank's fixed-size state.
#[derive(Debug)]
pub struct RankState {
    /// `host.name` of its resource, cut to 64 bytes.
    pub host: Option<Box<str>>,
    /// Keys are step numbers.
    pub numbered: bool,
    /// Interned name of each `Entry::named` slot.
    names: [u16; NAMED],
    /// The latest steps, by key.
    window: VecDeque<Entry>,
    /// Steps older than the window.
    pub older: u64,
    /// Step spans not compared: open at a dump, truncated, or whose children a dump may have
    /// lost.
    pub partial: u64,
    /// A step of this rank was seen twice with different figures.
    conflicting: bool,
}

impl Default for RankState {
    fn default() -> Self {
        RankState {
            host: None,
            numbered: false,
            names: [NO_NAME; NAMED],
            window: VecDeque::new(),
            older: 0,
            partial: 0,
            conflicting: false,
        }
    }
}

impl RankState {
    /// The slot of [`Entry::named`] that follows an interned name.
    pub fn slot_of(&self, name: u16) -> Option<usize> {
        self.names
            .iter()
            .position(|n| *n == name && name != NO_NAME)
    }

    /// The latest steps, oldest first.
    pub fn window(&self) -> &VecDeque<Entry> {
        &self.window
    }

    /// The interned name of each slot of [`Entry::named`].
    pub fn names(&self) -> impl Iterator<Item = (usize, u16)> + '_ {
        self.names
            .iter()
            .enumerate()
            .filter(|(_, n)| **n != NO_NAME)
            .map(|(i, n)| (i, *n))
    }

    fn slot(&mut self, name: u16) -> Option<usize> {
        if let Some(i) = self.names.iter().position(|n| *n == name) {
            return Some(i);
        }
        let free = self.names.iter().position(|n| *n == NO_NAME)?;
        self.names[free] = name;
        Some(free)
    }

    /// Adds a step: whether it met a different step of the same key, and how many of its
    /// figures were clamped.
    fn push(&mut self, record: &StepRecord) -> (bool, u64) {
        // Numbered steps and steps keyed by start time do not mix: the numbers win.
        if record.numbered != self.numbered {
            if !record.numbered {
                return (false, 0);
            }
            self.numbered = true;
            self.older += self.window.len() as u64;
            self.window.clear();
        }
        let clamped = std::cell::Cell::new(0u64);
        let clamp = |us: i64| {
            if us > i64::from(MAX_FIGURE_US) {
                clamped.set(clamped.get() + 1);
            }
            us.clamp(0, i64::from(MAX_FIGURE_US)) as u32
        };
        let mut entry = Entry {
            key: record.key,
            step_us: clamp(record.step_us),
            wait_us: record.wait_us.map_or(NO_WAIT, clamp),
            named: [0; NAMED],
        };
        for &(name, us) in &record.named {
            if let Some(slot) = self.slot(name) {
                entry.named[slot] = entry.named[slot].saturating_add(clamp(us));
            }
        }
        let clamped = clamped.get();
        let w = &mut self.window;
        // Steps mostly come in order: the newest goes to the back.
        if w.back().is_none_or(|last| last.key < entry.key) {
            w.push_back(entry);
        } else {
            match w.binary_search_by_key(&entry.key, |e| e.key) {
                Ok(i) => {
                    // The same step twice (overlapping dumps) has the same figures; others
                    // mean two sources claim this rank.
                    let conflict = w[i] != entry;
                    w[i].merge(&entry);
                    return (conflict, clamped);
                }
                Err(i) => w.insert(i, entry),
            }
        }
        if w.len() > WINDOW {
            w.pop_front();
            self.older += 1;
        }
        (false, clamped)
    }
}

/// What merging the steps of the input changed, counted: each is reported on stderr in one
/// line and in the JSON verdict.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Merges {
    /// Steps of a rank seen twice with different figures: two sources (files of two runs, two
    /// processes given one rank) claim the rank. The larger figures are kept.
    pub conflicting_steps: u64,
    /// Ranks with such a step.
    pub conflicting_ranks: u64,
    /// Step, wait or span figures over 71 minutes ([`MAX_FIGURE_US`]), clamped to it.
    pub clamped_figures: u64,
    /// The first (rank, step key) of each, for the report.
    #[serde(skip)]
    pub first_conflict: Option<(i64, i64)>,
    /// See `first_conflict`.
    #[serde(skip)]
    pub first_clamped: Option<(i64, i64)>,
}

/// All ranks, and what the readers share.
#[derive(Debug, Default)]
pub struct Table {
    ranks: BTreeMap<i64, RankState>,
    /// What merging steps changed.
    pub merges: Merges,
    bytes: usize,
    /// Ranks skipped because the table was full.
    pub ranks_over_budget: u64,
    /// Largest `dl.world_size` seen.
    pub world_size: Option<i64>,
    names: Vec<Box<str>>,
    name_ids: HashMap<Box<str>, u16>,
    /// Names of the collective spans seen (the first few, sorted).
    pub collective_names: BTreeSet<String>,
}

impl Table {
    /// The ranks, by rank.
    pub fn ranks(&self) -> &BTreeMap<i64, RankState> {
        &self.ranks
    }

    /// An interned compute span name.
    pub fn name(&self, id: u16) -> &str {
        self.names.get(usize::from(id)).map_or("?", |n| n)
    }

    /// Interns a compute span name; `None` for a name too long or beyond [`MAX_NAMES`].
    pub fn intern(&mut self, name: &str) -> Option<u16> {
        if let Some(id) = self.name_ids.get(name) {
            return Some(*id);
        }
        if name.len() > MAX_NAME_BYTES || self.names.len() >= MAX_NAMES {
            return None;
        }
        let id = self.names.len() as u16;
        self.names.push(name.into());
        self.name_ids.insert(name.into(), id);
        Some(id)
    }

    /// Notes the name of a collective span.
    pub fn collective_name(&mut self, name: &str) {
        if self.collective_names.len() < MAX_COLLECTIVE_NAMES && name.len() <= MAX_NAME_BYTES {
            self.collective_names.insert(name.to_owned());
        }
    }

    /// The rank's state, created when the budget allows; notes its host and world size.
    pub fn rank(
        &mut self,
        rank: i64,
        host: Option<&str>,
        world_size: Option<i64>,
    ) -> Option<&mut RankState> {
        if let Some(ws) = world_size.filter(|w| *w >= 1) {
            self.world_size = Some(self.world_size.map_or(ws, |w| w.max(ws)));
        }
        if !self.ranks.contains_key(&rank) {
            if self.bytes + RANK_BYTES > RANK_TABLE_BYTES {
                self.ranks_over_budget += 1;
                return None;
            }
            self.bytes += RANK_BYTES;
        }
        let state = self.ranks.entry(rank).or_default();
        if let (None, Some(h)) = (&state.host, host) {
            let mut cut = h.len().min(MAX_HOST_BYTES);
            while !h.is_char_boundary(cut) {
                cut -= 1;
            }
            state.host = Some(h[..cut].into());
        }
        Some(state)
    }

    /// Adds a complete step of `rank`.
    pub fn push(&mut self, rank: i64, record: &StepRecord) {
        let Some(state) = self.ranks.get_mut(&rank) else {
            return;
        };
        let (conflict, clamped) = state.push(record);
        let m = &mut self.merges;
        if conflict {
            m.conflicting_steps += 1;
            if !state.conflicting {
                state.conflicting = true;
                m.conflicting_ranks += 1;
            }
            m.first_conflict = m.first_conflict.or(Some((rank, record.key)));
        }
        if clamped > 0 {
            m.clamped_figures += clamped;
            m.first_clamped = m.first_clamped.or(Some((rank, record.key)));
        }
    }

    /// Counts a step of `rank` that cannot be compared.
    pub fn partial(&mut self, rank: i64) {
        if let Some(state) = self.ranks.get_mut(&rank) {
            state.partial += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(key: i64, step_us: i64, wait_us: Option<i64>) -> StepRecord {
        StepRecord {
            key,
            numbered: true,
            step_us,
            wait_us,
            named: vec![],
        }
    }

    #[test]
    fn the_window_keeps_the_latest_steps_whatever_the_order() {
        let keys: Vec<i64> = (0..400).collect();
        let mut shuffled = keys.clone();
        // A fixed permutation, and every step twice (two overlapping dumps).
        shuffled.sort_by_key(|k| (k * 7919) % 400);
        shuffled.extend(keys.iter().rev());
        let mut a = RankState::default();
        let mut b = RankState::default();
        for k in &keys {
            a.push(&step(*k, 100, Some(10)));
        }
        for k in &shuffled {
            b.push(&step(*k, 100, Some(10)));
        }
        assert_eq!(a.window, b.window);
        assert_eq!(a.window.len(), WINDOW);
        assert_eq!(a.window.front().unwrap().key, 400 - WINDOW as i64);
        assert_eq!(a.older, 400 - WINDOW as u64);
    }

    #[test]
    fn a_step_seen_twice_keeps_the_larger_figures() {
        let mut s = RankState::default();
        s.push(&step(1, 100, None));
        let mut second = step(1, 90, Some(40));
        second.named = vec![(7, 30)];
        s.push(&second);
        let e = s.window[0];
        assert_eq!(
            (e.step_us, e.wait_us(), e.compute_us()),
            (100, Some(40), 60)
        );
        assert_eq!(e.named[0], 30);
        assert_eq!(s.names().collect::<Vec<_>>(), [(0, 7)]);
    }

    #[test]
    fn conflicting_steps_and_clamped_figures_are_counted() {
        let mut t = Table::default();
        t.rank(3, None, None);
        t.push(3, &step(1, 100, Some(10)));
        t.push(3, &step(1, 100, Some(10)));
        assert_eq!(
            t.merges,
            Merges::default(),
            "the same step twice is no conflict"
        );
        t.push(3, &step(1, 120, Some(10)));
        t.push(3, &step(2, 5_000_000_000, Some(4_500_000_000)));
        assert_eq!(
            (t.merges.conflicting_steps, t.merges.conflicting_ranks),
            (1, 1)
        );
        assert_eq!(t.merges.first_conflict, Some((3, 1)));
        assert_eq!(
            (t.merges.clamped_figures, t.merges.first_clamped),
            (2, Some((3, 2)))
        );
        let e = t.ranks()[&3].window()[1];
        assert_eq!(
            (e.step_us, e.wait_us()),
            (MAX_FIGURE_US, Some(MAX_FIGURE_US))
        );
    }

    #[test]
    fn numbered_steps_replace_steps_keyed_by_time() {
        let mut s = RankState::default();
        let mut timed = step(1_000_000, 100, None);
        timed.numbered = false;
        s.push(&timed);
        s.push(&step(3, 100, None));
        s.push(&timed);
        assert!(s.numbered);
        assert_eq!(s.window.len(), 1);
        assert_eq!(s.window[0].key, 3);
    }

    #[test]
    fn ranks_beyond_the_budget_are_counted() {
        let mut t = Table::default();
        let fit = RANK_TABLE_BYTES / RANK_BYTES;
        assert!(fit > 10_000, "{fit} ranks fit");
        for r in 0..fit as i64 + 5 {
            t.rank(r, Some("node"), Some(i64::MAX));
        }
        assert_eq!(t.ranks().len(), fit);
        assert_eq!(t.ranks_over_budget, 5);
        assert!(t.rank(0, None, None).is_some(), "known ranks still come in");
        assert_eq!(t.world_size, Some(i64::MAX));
    }
}
