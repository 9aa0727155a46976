//! Export strategies: which ranks of a job export telemetry.
//!
//! A strategy is a function `(config, rank, world_size) -> bool` evaluated **once per process**
//! at setup. On a rank where it answers `false` nothing is built: no providers, no threads, no
//! sockets, and every `tracing` callsite is disabled for the lens layer, so a span there costs
//! what a disabled callsite costs.
//!
//! | name | exports when |
//! |---|---|
//! | `single_rank` (default) | `rank == export.rank`, where `None` (`-1` in the variable) means the last rank |
//! | `all_ranks` | always |
//! | `sampled` | `md5(str(rank)) % 10000 / 10000 < export.sample_rate` |
//! | `first_rank_per_node` | `LOCAL_RANK` is `0` (or unset) |
//!
//! `sampled` uses exactly the rule of the Python library (`int(md5(str(rank)).hexdigest(), 16)
//! % 10000 / 10000`), so in a job that mixes Python and Rust processes the same ranks export.
//! A built-in name is replaced only with [`Overwrite::Yes`].
//!
//! Custom strategies are registered by name and selected with `NEMO_LENS_EXPORT_STRATEGY` (or
//! `export.strategy` of a [`LensConfig`] built in code), as in the Python library:
//!
//! ```
//! use nemo_lens::{LensConfig, Overwrite, Place, Telemetry, strategy};
//!
//! strategy::register_export_strategy("every_64th", |_cfg, rank, _ws| rank % 64 == 0, Overwrite::No)
//!     .unwrap();
//! let config = LensConfig::default()
//!     .with_enabled(true)
//!     .with(|c| c.export.strategy = "every_64th".into());
//! let telemetry = Telemetry::builder(config).place(Place::rank(128).of(256)).build().unwrap();
//! assert!(telemetry.is_exporting());
//! # telemetry.shutdown(std::time::Duration::from_secs(5)).unwrap();
//! ```
//!
//! A registered name stays for the life of the process; [`Overwrite::Yes`] replaces its
//! function.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use md5::{Digest, Md5};
use parking_lot::RwLock;

use crate::Overwrite;
use crate::config::LensConfig;
use crate::error::{LensError, Result};

#[cfg(test)]
mod tests;

/// A user-supplied strategy: `(config, rank, world_size) -> export?`.
pub(crate) type StrategyFn = dyn Fn(&LensConfig, u32, u32) -> bool + Send + Sync;

/// The names of the built-in strategies, which cannot be unregistered.
#[cfg(test)]
pub(crate) const BUILTIN_STRATEGIES: [&str; 4] =
    ["all_ranks", "first_rank_per_node", "sampled", "single_rank"];

/// A registered strategy: one of the built-ins or a user function.
#[derive(Clone)]
pub(crate) enum ExportStrategy {
    /// `all_ranks`.
    AllRanks,
    /// `single_rank`.
    SingleRank,
    /// `sampled`.
    Sampled,
    /// `first_rank_per_node`.
    FirstRankPerNode,
    /// A user function.
    Custom(Arc<StrategyFn>),
}

impl fmt::Debug for ExportStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportStrategy::AllRanks => f.write_str("AllRanks"),
            ExportStrategy::SingleRank => f.write_str("SingleRank"),
            ExportStrategy::Sampled => f.write_str("Sampled"),
            ExportStrategy::FirstRankPerNode => f.write_str("FirstRankPerNode"),
            ExportStrategy::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl ExportStrategy {
    /// Wraps a closure as a strategy.
    pub(crate) fn custom(
        f: impl Fn(&LensConfig, u32, u32) -> bool + Send + Sync + 'static,
    ) -> Self {
        ExportStrategy::Custom(Arc::new(f))
    }

    /// Evaluates the strategy for one rank. Only `first_rank_per_node` can fail (a non-integer
    /// `LOCAL_RANK`).
    #[cfg(test)]
    pub(crate) fn decide(&self, config: &LensConfig, rank: u32, world_size: u32) -> Result<bool> {
        self.decide_with(config, rank, world_size, &crate::config::env::process_var)
    }

    /// Evaluates the strategy for one rank, reading `LOCAL_RANK` through `lookup` (the builder's
    /// [`env_lookup`](crate::TelemetryBuilder::env_lookup)). Only `first_rank_per_node` can fail
    /// (a non-integer `LOCAL_RANK`).
    pub(crate) fn decide_with(
        &self,
        config: &LensConfig,
        rank: u32,
        world_size: u32,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<bool> {
        Ok(match self {
            ExportStrategy::AllRanks => true,
            ExportStrategy::SingleRank => match config.export.rank {
                Some(target) => rank == target,
                None => world_size.checked_sub(1) == Some(rank),
            },
            ExportStrategy::Sampled => rank_is_sampled(rank, config.export.sample_rate),
            ExportStrategy::FirstRankPerNode => {
                // Read as it is: an empty value fails `int()` in Python too.
                local_rank_is_zero(lookup("LOCAL_RANK"))?
            }
            ExportStrategy::Custom(f) => f(config, rank, world_size),
        })
    }
}

fn local_rank_is_zero(value: Option<String>) -> Result<bool> {
    match value {
        None => Ok(true),
        Some(v) => crate::config::env::parse_int("LOCAL_RANK", &v)
            .map(|r| r == 0)
            .map_err(|_| LensError::InvalidLocalRank {
                value: crate::config::env::shown(&v),
            }),
    }
}

/// `int(md5(str(rank)).hexdigest(), 16) % 10000 / 10000`: the per-rank value the Python
/// library compares with the sample rate.
pub(crate) fn rank_sample_value(rank: u32) -> f64 {
    let digest = Md5::digest(rank.to_string().as_bytes());
    let value = u128::from_be_bytes(digest.into());
    (value % 10_000) as f64 / 10_000.0
}

/// Whether `rank` exports under `sampled` at `rate` (the Python rule, bit for bit).
pub(crate) fn rank_is_sampled(rank: u32, rate: f64) -> bool {
    rank_sample_value(rank) < rate
}

type Registry = RwLock<BTreeMap<String, ExportStrategy>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        RwLock::new(BTreeMap::from([
            ("all_ranks".to_string(), ExportStrategy::AllRanks),
            ("single_rank".to_string(), ExportStrategy::SingleRank),
            ("sampled".to_string(), ExportStrategy::Sampled),
            (
                "first_rank_per_node".to_string(),
                ExportStrategy::FirstRankPerNode,
            ),
        ]))
    })
}

/// Registers `strategy`, a function `(config, rank, world_size) -> export?` evaluated once per
/// process at setup, under `name`: the name `NEMO_LENS_EXPORT_STRATEGY` selects. Replacing a
/// registered one (built-in or not) needs [`Overwrite::Yes`]; with [`Overwrite::No`] that is an
/// error. The name must not be blank.
///
/// ```
/// use nemo_lens::{Overwrite, strategy::register_export_strategy};
/// assert!(register_export_strategy("all_ranks", |_, _, _| false, Overwrite::No).is_err());
/// assert!(register_export_strategy("", |_, _, _| false, Overwrite::No).is_err());
/// register_export_strategy("first_eight", |_, rank, _| rank < 8, Overwrite::No).unwrap();
/// ```
pub fn register_export_strategy(
    name: &str,
    strategy: impl Fn(&LensConfig, u32, u32) -> bool + Send + Sync + 'static,
    overwrite: Overwrite,
) -> Result<()> {
    if name.trim().is_empty() {
        return Err(LensError::Registry(
            "Strategy name must be a non-empty string.".into(),
        ));
    }
    let mut reg = registry().write();
    if reg.contains_key(name) && !overwrite.yes() {
        return Err(LensError::Registry(format!(
            "Strategy '{name}' is already registered. Pass Overwrite::Yes to replace it."
        )));
    }
    reg.insert(name.to_string(), ExportStrategy::custom(strategy));
    Ok(())
}

/// Removes a user strategy. Built-ins cannot be removed.
#[cfg(test)]
pub(crate) fn unregister_export_strategy(name: &str) -> Result<()> {
    if BUILTIN_STRATEGIES.contains(&name) {
        return Err(LensError::Registry(format!(
            "Cannot unregister built-in strategy '{name}'."
        )));
    }
    match registry().write().remove(name) {
        Some(_) => Ok(()),
        None => Err(LensError::Registry(format!(
            "Strategy '{name}' is not registered."
        ))),
    }
}

/// The registered strategy names, sorted.
#[cfg(test)]
pub(crate) fn registered_strategies() -> Vec<String> {
    registry().read().keys().cloned().collect()
}

/// Looks a strategy up by name; `var` names where the name came from, for the error (which
/// lists the registered names).
pub(crate) fn get_export_strategy(name: &str, var: &str) -> Result<ExportStrategy> {
    let reg = registry().read();
    reg.get(name)
        .cloned()
        .ok_or_else(|| LensError::UnknownStrategy {
            var: var.to_string(),
            name: crate::config::env::shown(name),
            registered: reg.keys().cloned().collect(),
        })
}
