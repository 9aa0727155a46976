//! The ranges one thread has pushed, in push order, and what an exit pops.
//!
//! NVTX's pop always ends the innermost range of the thread, whichever span exits. `tracing`
//! lets guards drop in any order, so a span may exit while a span entered after it is still
//! entered. Such an exit is recorded and its range stays open until every range pushed after it
//! has ended: ranges stay nested, and no exit ever ends another span's range.

/// At most this many ranges are open on one thread; a deeper enter pushes nothing (a program
/// that forgets its guards cannot grow the stack without bound).
pub(super) const MAX_DEPTH: usize = 1024;

/// One pushed range.
struct Entry<R> {
    span: u64,
    exited: bool,
    /// Held only: dropping it pops the range.
    _range: R,
}

/// The open ranges of one thread; `R` pops its range when dropped.
pub(super) struct Stack<R> {
    entries: Vec<Entry<R>>,
}

impl<R> Stack<R> {
    pub(super) const fn new() -> Self {
        Stack {
            entries: Vec::new(),
        }
    }

    /// Pushes the range `push` makes for an enter of `span`, unless the stack is full.
    pub(super) fn enter(&mut self, span: u64, push: impl FnOnce() -> R) {
        if self.entries.len() < MAX_DEPTH {
            self.entries.push(Entry {
                span,
                exited: false,
                _range: push(),
            });
        }
    }

    /// An exit of `span`: pops its range when it is the innermost one (and then the ranges of
    /// spans that exited earlier beneath it), otherwise marks it exited. An exit of a span with
    /// no open range here does nothing.
    pub(super) fn exit(&mut self, span: u64) {
        let Some(at) = self
            .entries
            .iter()
            .rposition(|e| e.span == span && !e.exited)
        else {
            return;
        };
        if at + 1 < self.entries.len() {
            self.entries[at].exited = true;
            return;
        }
        self.entries.pop();
        while self.entries.last().is_some_and(|e| e.exited) {
            self.entries.pop();
        }
    }

    #[cfg(test)]
    fn depth(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    /// A range that logs its pop.
    struct Logged(u64, Rc<RefCell<Vec<u64>>>);

    impl Drop for Logged {
        fn drop(&mut self) {
            self.1.borrow_mut().push(self.0);
        }
    }

    fn stack() -> (Stack<Logged>, Rc<RefCell<Vec<u64>>>) {
        (Stack::new(), Rc::new(RefCell::new(Vec::new())))
    }

    #[test]
    fn nested_exits_pop_innermost_first() {
        let (mut s, pops) = stack();
        for span in [1, 2, 3] {
            s.enter(span, || Logged(span, pops.clone()));
        }
        for span in [3, 2, 1] {
            s.exit(span);
        }
        assert_eq!(*pops.borrow(), [3, 2, 1]);
        assert_eq!(s.depth(), 0);
    }

    #[test]
    fn an_early_exit_waits_for_the_ranges_above_it() {
        let (mut s, pops) = stack();
        s.enter(1, || Logged(1, pops.clone()));
        s.enter(2, || Logged(2, pops.clone()));
        s.exit(1); // out of order: 2 is still entered
        assert!(pops.borrow().is_empty());
        s.enter(3, || Logged(3, pops.clone()));
        s.exit(3);
        assert_eq!(*pops.borrow(), [3]);
        s.exit(2); // now 1's range ends too, after 2's
        assert_eq!(*pops.borrow(), [3, 2, 1]);
        assert_eq!(s.depth(), 0);
    }

    #[test]
    fn re_entries_and_unknown_exits() {
        let (mut s, pops) = stack();
        s.enter(1, || Logged(1, pops.clone()));
        s.enter(1, || Logged(1, pops.clone()));
        s.exit(7); // never entered here
        s.exit(1);
        assert_eq!(s.depth(), 1);
        s.exit(1);
        s.exit(1); // one exit too many
        assert_eq!(*pops.borrow(), [1, 1]);
        assert_eq!(s.depth(), 0);
    }

    #[test]
    fn an_exited_span_entered_again_gets_a_range_of_its_own() {
        let (mut s, pops) = stack();
        s.enter(1, || Logged(1, pops.clone()));
        s.enter(2, || Logged(2, pops.clone()));
        s.exit(1);
        s.enter(1, || Logged(10, pops.clone()));
        s.exit(1);
        assert_eq!(*pops.borrow(), [10]);
        s.exit(2);
        assert_eq!(*pops.borrow(), [10, 2, 1]);
    }

    #[test]
    fn the_depth_is_bounded() {
        let (mut s, pops) = stack();
        let pushed = std::cell::Cell::new(0);
        for span in 0..(MAX_DEPTH as u64 + 10) {
            s.enter(span, || {
                pushed.set(pushed.get() + 1);
                Logged(span, pops.clone())
            });
        }
        assert_eq!(pushed.get(), MAX_DEPTH);
        s.exit(MAX_DEPTH as u64 + 5); // not pushed: no pop
        assert!(pops.borrow().is_empty());
        drop(s);
        assert_eq!(pops.borrow().len(), MAX_DEPTH);
    }
}
