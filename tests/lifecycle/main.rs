//! Lifecycle: setup (validation, the double-init guard, exporters, strategies, processors),
//! nothing built where nothing is exported, how the process ends (panic, SIGTERM, SIGINT, a
//! panicking field), fork without exec, resident memory over millions of re-entries, and the
//! examples as a user runs them.
//!
//! One test binary: its tests run as threads of one process. A test that needs a process of its
//! own (process-wide guard, panic hook, span groups, `fork`, thread and descriptor counts) runs
//! its body in a child (`nemo_lens_test_support::child`).

mod double_init;
mod dumps;
mod examples;
mod exit;
mod fork;
mod inert;
mod panicking_field;
mod reentry_memory;
mod setup;
