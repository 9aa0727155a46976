//! Who records, decided once at setup: which ranks export ([`strategy`]), whether a sampled
//! rank keeps its spans ([`RankAwareSampler`]), which span groups are on ([`groups`]) and which
//! of other crates' spans join them (`rules`).

pub mod groups;
pub(crate) mod rules;
pub(crate) mod sampler;
pub mod strategy;
pub(crate) mod tags;

pub use sampler::RankAwareSampler;
