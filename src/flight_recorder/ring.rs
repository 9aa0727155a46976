//! Fixed slots for span records: a ring of closed spans and a table of open ones.
//!
//! Every slot is allocated once, at setup, as an array of `AtomicU64` words guarded by a
//! *seqlock* (a sequence number that is odd while a writer is inside):
//!
//! * a writer claims the slot by moving the sequence from even to odd with one
//!   compare-and-swap; if another writer holds it (a wrapped ring on a busy process), the record
//!   is dropped and counted instead of waiting: **recording never blocks**;
//! * a reader (the dump, on another thread) copies the words and keeps the copy only when the
//!   sequence was even and unchanged around it, so it never sees a half-written record and never
//!   stops a writer.
//!
//! A [`Record`] is plain data of fixed size: the callsite's `&'static Metadata` (name, target
//! and field names, nothing copied), ids, times, and up to [`ATTRS`] attribute values with
//! strings cut to [`INLINE`] bytes. Recording a span therefore allocates nothing.
//!
//! The open table is indexed by the `tracing` span id with a short linear probe
//! ([`PROBES`] slots): finding a span on close costs a hash and at most four loads.

use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Attribute values kept per span.
pub(super) const ATTRS: usize = 6;
/// Bytes kept of a string attribute value (cut on a character boundary).
pub(super) const INLINE: usize = 24;
/// Open-table slots (open spans of the recorder's groups at one time; more are counted as
/// dropped).
pub(super) const OPEN_SLOTS: usize = 1024;
/// Slots looked at to find an open span.
pub(super) const PROBES: usize = 4;

const HEADER: usize = 6;
const ATTR_WORDS: usize = 1 + INLINE / 8;
pub(crate) const WORDS: usize = HEADER + ATTRS * ATTR_WORDS;

/// Bytes of one slot (sequence + record words): the documented memory bound,
/// `(N + OPEN_SLOTS) × 256` bytes, holds while a slot fits in 256.
const SLOT_BYTES: usize = 8 * (WORDS + 1);
const _: () = assert!(SLOT_BYTES <= 256);

/// The kind of an attribute value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub(crate) enum Kind {
    #[default]
    Empty = 0,
    I64 = 1,
    U64 = 2,
    F64 = 3,
    Bool = 4,
    Str = 5,
}

/// One attribute: the index of its field in the callsite's field set, and its value.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Attr {
    pub field: u8,
    pub kind: Kind,
    pub len: u8,
    pub bytes: [u8; INLINE],
}

impl Attr {
    pub(crate) fn number(&self) -> u64 {
        u64::from_le_bytes(self.bytes[..8].try_into().unwrap())
    }
}

/// One span, as the recorder keeps it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Record {
    /// `&'static Metadata<'static>` of the callsite, as an address (0 = none).
    pub meta: usize,
    /// The recorder's own id of the span (unique in the process, never 0).
    pub id: u64,
    /// The recorder id of the nearest recorded ancestor, 0 for none.
    pub parent: u64,
    /// Unix nanoseconds.
    pub start_ns: u64,
    /// Unix nanoseconds; 0 while open.
    pub end_ns: u64,
    pub n_attrs: u8,
    pub attrs: [Attr; ATTRS],
}

impl Record {
    /// Writes the record's words and returns how many are used (the header and its
    /// attributes: a span with one field writes 10 words, not [`WORDS`]).
    fn encode(&self, w: &mut [u64; WORDS]) -> usize {
        w[0] = self.meta as u64;
        w[1] = self.id;
        w[2] = self.parent;
        w[3] = self.start_ns;
        w[4] = self.end_ns;
        w[5] = u64::from(self.n_attrs);
        for (i, a) in self.attrs.iter().enumerate().take(self.n_attrs as usize) {
            let base = HEADER + i * ATTR_WORDS;
            w[base] = u64::from(a.field) | (a.kind as u64) << 8 | u64::from(a.len) << 16;
            for j in 0..INLINE / 8 {
                w[base + 1 + j] = u64::from_le_bytes(a.bytes[j * 8..j * 8 + 8].try_into().unwrap());
            }
        }
        used(w)
    }

    fn decode(w: &[u64; WORDS]) -> Record {
        let mut r = Record {
            meta: w[0] as usize,
            id: w[1],
            parent: w[2],
            start_ns: w[3],
            end_ns: w[4],
            n_attrs: (w[5] as u8).min(ATTRS as u8),
            ..Record::default()
        };
        for i in 0..r.n_attrs as usize {
            let base = HEADER + i * ATTR_WORDS;
            let head = w[base];
            let a = &mut r.attrs[i];
            a.field = head as u8;
            a.kind = match (head >> 8) as u8 {
                1 => Kind::I64,
                2 => Kind::U64,
                3 => Kind::F64,
                4 => Kind::Bool,
                5 => Kind::Str,
                _ => Kind::Empty,
            };
            a.len = ((head >> 16) as u8).min(INLINE as u8);
            for j in 0..INLINE / 8 {
                a.bytes[j * 8..j * 8 + 8].copy_from_slice(&w[base + 1 + j].to_le_bytes());
            }
        }
        r
    }
}

/// Words in use by the record in `w` (its header says how many attributes follow).
#[inline]
fn used(w: &[u64; WORDS]) -> usize {
    HEADER + (w[5] as usize).min(ATTRS) * ATTR_WORDS
}

/// The end time word of an encoded record.
pub(crate) const END_WORD: usize = 4;

/// One seqlock-guarded slot.
pub(crate) struct Slot {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            seq: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Slot {
    /// Writes `record`, or returns `false` at once when another writer holds the slot.
    pub(crate) fn write(&self, record: &Record) -> bool {
        let mut w = [0u64; WORDS];
        let n = record.encode(&mut w);
        self.write_words(&w[..n])
    }

    /// Writes encoded words (see [`Slot::read_words`]), or returns `false` at once when another
    /// writer holds the slot.
    pub(crate) fn write_words(&self, w: &[u64]) -> bool {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 == 1
            || self
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        fence(Ordering::Release);
        for (slot, v) in self.words.iter().zip(w) {
            slot.store(*v, Ordering::Relaxed);
        }
        self.seq.store(seq + 2, Ordering::Release);
        true
    }

    /// A consistent copy of the slot, or `None` when it was never written or a writer kept
    /// changing it.
    pub(crate) fn read(&self) -> Option<Record> {
        let mut w = [0u64; WORDS];
        self.read_words(&mut w)?;
        Some(Record::decode(&w))
    }

    /// Copies the slot's used words into `w` (consistent: the sequence was even and unchanged
    /// around the copy) and returns how many; `None` when never written or always busy.
    pub(crate) fn read_words(&self, w: &mut [u64; WORDS]) -> Option<usize> {
        for _ in 0..64 {
            let before = self.seq.load(Ordering::Acquire);
            if before == 0 {
                return None;
            }
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            for (v, slot) in w[..HEADER].iter_mut().zip(&self.words) {
                *v = slot.load(Ordering::Relaxed);
            }
            // A torn count is clamped here and rejected by the sequence check below.
            let n = used(w);
            for (v, slot) in w[HEADER..n].iter_mut().zip(&self.words[HEADER..n]) {
                *v = slot.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return Some(n);
            }
        }
        None
    }
}

/// The last `capacity` closed spans.
pub(crate) struct Ring {
    head: AtomicU64,
    slots: Box<[Slot]>,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Self {
        Ring {
            head: AtomicU64::new(0),
            slots: (0..capacity).map(|_| Slot::default()).collect(),
        }
    }

    /// Appends `record`, overwriting the oldest; `false` when it was dropped (no slots, or the
    /// slot is being written by another thread).
    #[cfg(test)]
    pub(crate) fn push(&self, record: &Record) -> bool {
        let mut w = [0u64; WORDS];
        let n = record.encode(&mut w);
        self.push_words(&w[..n])
    }

    /// Appends an encoded record (the words of an open-table slot), overwriting the oldest.
    pub(crate) fn push_words(&self, w: &[u64]) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let i = self.head.fetch_add(1, Ordering::Relaxed);
        self.slots[(i % self.slots.len() as u64) as usize].write_words(w)
    }

    /// Calls `f` with each kept record, oldest first, one slot read at a time (a dump of a
    /// ring of any size holds one record, not a copy of the ring). `f` may stop the walk by
    /// returning an error, which is returned.
    pub(crate) fn try_for_each<E>(
        &self,
        mut f: impl FnMut(&Record) -> Result<(), E>,
    ) -> Result<(), E> {
        let n = self.slots.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let head = self.head.load(Ordering::Acquire);
        for i in head.saturating_sub(n)..head {
            if let Some(r) = self.slots[(i % n) as usize].read()
                && r.end_ns != 0
            {
                f(&r)?;
            }
        }
        Ok(())
    }

    /// The kept records, oldest first.
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> Vec<Record> {
        let mut all = Vec::new();
        let _ = self.try_for_each(|r| {
            all.push(*r);
            Ok::<(), ()>(())
        });
        all
    }
}

/// Open spans, keyed by their `tracing` span id.
pub(crate) struct OpenTable {
    keys: Box<[AtomicU64]>,
    /// The recorder id of the span in each slot (read when a child looks for its parent).
    ids: Box<[AtomicU64]>,
    slots: Box<[Slot]>,
}

#[inline]
fn home(key: u64) -> usize {
    (crate::ids::spread(key) >> 54) as usize % OPEN_SLOTS
}

impl OpenTable {
    pub(crate) fn new() -> Self {
        OpenTable {
            keys: (0..OPEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            ids: (0..OPEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            slots: (0..OPEN_SLOTS).map(|_| Slot::default()).collect(),
        }
    }

    /// Stores an open span under `key`; `None` when its probe window is full.
    pub(crate) fn insert(&self, key: u64, record: &Record) -> Option<usize> {
        let h = home(key);
        for p in 0..PROBES {
            let i = (h + p) % OPEN_SLOTS;
            if self.keys[i]
                .compare_exchange(0, key, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                self.ids[i].store(record.id, Ordering::Relaxed);
                if !self.slots[i].write(record) {
                    self.keys[i].store(0, Ordering::Release);
                    return None;
                }
                return Some(i);
            }
        }
        None
    }

    /// The slot of the open span `key`.
    #[inline]
    pub(crate) fn find(&self, key: u64) -> Option<usize> {
        let h = home(key);
        (0..PROBES)
            .map(|p| (h + p) % OPEN_SLOTS)
            .find(|&i| self.keys[i].load(Ordering::Acquire) == key)
    }

    pub(crate) fn id_at(&self, slot: usize) -> u64 {
        self.ids[slot].load(Ordering::Relaxed)
    }

    pub(crate) fn read(&self, slot: usize) -> Option<Record> {
        self.slots[slot].read()
    }

    pub(crate) fn read_words(&self, slot: usize, w: &mut [u64; WORDS]) -> Option<usize> {
        self.slots[slot].read_words(w)
    }

    pub(crate) fn write(&self, slot: usize, record: &Record) -> bool {
        self.slots[slot].write(record)
    }

    pub(crate) fn remove(&self, slot: usize) {
        self.keys[slot].store(0, Ordering::Release);
    }

    /// The open spans, as of now.
    pub(crate) fn snapshot(&self) -> Vec<Record> {
        (0..OPEN_SLOTS)
            .filter(|&i| self.keys[i].load(Ordering::Acquire) != 0)
            .filter_map(|i| {
                let r = self.slots[i].read()?;
                (self.keys[i].load(Ordering::Acquire) != 0 && r.end_ns == 0).then_some(r)
            })
            .collect()
    }

    /// Number of open spans.
    pub(crate) fn len(&self) -> usize {
        self.keys
            .iter()
            .filter(|k| k.load(Ordering::Relaxed) != 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_capacity_records_in_order() {
        let ring = Ring::new(3);
        for i in 1..=5u64 {
            let r = Record {
                id: i,
                end_ns: i,
                ..Record::default()
            };
            assert!(ring.push(&r));
        }
        let ids: Vec<u64> = ring.snapshot().iter().map(|r| r.id).collect();
        assert_eq!(ids, [3, 4, 5]);
    }

    #[test]
    fn record_round_trips_through_words() {
        let mut r = Record {
            meta: 0xdead_beef,
            id: 7,
            parent: 3,
            start_ns: 11,
            end_ns: 12,
            n_attrs: 2,
            ..Record::default()
        };
        r.attrs[0] = Attr {
            field: 2,
            kind: Kind::I64,
            len: 0,
            bytes: {
                let mut b = [0; INLINE];
                b[..8].copy_from_slice(&(-5i64).to_le_bytes());
                b
            },
        };
        r.attrs[1] = Attr {
            field: 4,
            kind: Kind::Str,
            len: 3,
            bytes: {
                let mut b = [0; INLINE];
                b[..3].copy_from_slice(b"abc");
                b
            },
        };
        let slot = Slot::default();
        assert!(slot.write(&r));
        let back = slot.read().unwrap();
        assert_eq!(
            (back.meta, back.id, back.parent, back.n_attrs),
            (0xdead_beef, 7, 3, 2)
        );
        assert_eq!(back.attrs[0].number() as i64, -5);
        assert_eq!(back.attrs[1].kind, Kind::Str);
        assert_eq!(&back.attrs[1].bytes[..3], b"abc");
    }

    #[test]
    fn open_table_finds_and_forgets_by_key() {
        let t = OpenTable::new();
        let r = Record {
            id: 9,
            start_ns: 1,
            ..Record::default()
        };
        let slot = t.insert(42, &r).unwrap();
        assert_eq!(t.find(42), Some(slot));
        assert_eq!(t.id_at(slot), 9);
        assert_eq!(t.snapshot().len(), 1);
        t.remove(slot);
        assert_eq!(t.find(42), None);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_busy_slot_drops_instead_of_waiting() {
        let slot = Slot::default();
        slot.seq.store(1, Ordering::Relaxed); // a writer is inside
        assert!(!slot.write(&Record::default()));
    }
}
