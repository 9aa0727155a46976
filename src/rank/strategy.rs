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
//! `sampled` uses exactly the rule of the Python library, so in a job that mixes Python and Rust
//! processes the same ranks export:
//!
//! ```
//! use nemo_lens::strategy::{rank_sample_value, rank_is_sampled};
//! // int(hashlib.md5(b"0").hexdigest(), 16) % 10000 / 10000 == 0.785
//! assert_eq!(rank_sample_value(0), 0.785);
//! assert!(rank_is_sampled(0, 0.8));
//! assert!(!rank_is_sampled(0, 0.785));
//! ```
//!
//! Custom strategies are registered by name and selected with `NEMO_LENS_EXPORT_STRATEGY`:
//!
//! ```
//! use nemo_lens::strategy;
//! strategy::register_export_strategy("every_64th", |_cfg, rank, _ws| rank % 64 == 0, false).unwrap();
//! assert!(strategy::registered_strategies().contains(&"every_64th".to_string()));
//! strategy::unregister_export_strategy("every_64th").unwrap();
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use md5::{Digest, Md5};
use parking_lot::RwLock;

use crate::config::LensConfig;
use crate::error::{LensError, Result};

/// A user-supplied strategy: `(config, rank, world_size) -> export?`.
pub type StrategyFn = dyn Fn(&LensConfig, u32, u32) -> bool + Send + Sync;

/// The names of the built-in strategies, which cannot be unregistered.
pub const BUILTIN_STRATEGIES: [&str; 4] =
    ["all_ranks", "first_rank_per_node", "sampled", "single_rank"];

/// A registered strategy: one of the built-ins or a user function.
#[derive(Clone)]
#[non_exhaustive]
pub enum ExportStrategy {
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
    ///
    /// ```
    /// use nemo_lens::{LensConfig, strategy::ExportStrategy};
    /// let s = ExportStrategy::custom(|_, rank, _| rank < 2);
    /// assert!(s.decide(&LensConfig::default(), 1, 8).unwrap());
    /// ```
    pub fn custom(f: impl Fn(&LensConfig, u32, u32) -> bool + Send + Sync + 'static) -> Self {
        ExportStrategy::Custom(Arc::new(f))
    }

    /// Evaluates the strategy for one rank. Only `first_rank_per_node` can fail (a non-integer
    /// `LOCAL_RANK`).
    ///
    /// ```
    /// use nemo_lens::{LensConfig, strategy::ExportStrategy};
    /// let cfg = LensConfig::default(); // export.rank = None: the last rank exports
    /// assert!(ExportStrategy::SingleRank.decide(&cfg, 7, 8).unwrap());
    /// assert!(!ExportStrategy::SingleRank.decide(&cfg, 0, 8).unwrap());
    /// ```
    pub fn decide(&self, config: &LensConfig, rank: u32, world_size: u32) -> Result<bool> {
        self.decide_with(config, rank, world_size, &crate::config::env::process_var)
    }

    /// [`ExportStrategy::decide`], reading `LOCAL_RANK` through `lookup` (the builder's
    /// [`env_lookup`](crate::TelemetryBuilder::env_lookup)).
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
///
/// ```
/// assert_eq!(nemo_lens::strategy::rank_sample_value(3), 0.0883);
/// ```
pub fn rank_sample_value(rank: u32) -> f64 {
    let digest = Md5::digest(rank.to_string().as_bytes());
    let value = u128::from_be_bytes(digest.into());
    (value % 10_000) as f64 / 10_000.0
}

/// Whether `rank` exports under `sampled` at `rate` (the Python rule, bit for bit).
///
/// ```
/// assert!(nemo_lens::strategy::rank_is_sampled(3, 1.0));
/// assert!(!nemo_lens::strategy::rank_is_sampled(3, 0.0));
/// ```
pub fn rank_is_sampled(rank: u32, rate: f64) -> bool {
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

/// Registers a strategy under `name`. Replacing an existing one (built-in or not) needs
/// `allow_override`.
///
/// ```
/// use nemo_lens::strategy::register_export_strategy;
/// assert!(register_export_strategy("all_ranks", |_, _, _| false, false).is_err());
/// assert!(register_export_strategy("", |_, _, _| false, false).is_err());
/// ```
pub fn register_export_strategy(
    name: &str,
    strategy: impl Fn(&LensConfig, u32, u32) -> bool + Send + Sync + 'static,
    allow_override: bool,
) -> Result<()> {
    if name.trim().is_empty() {
        return Err(LensError::Registry(
            "Strategy name must be a non-empty string.".into(),
        ));
    }
    let mut reg = registry().write();
    if reg.contains_key(name) && !allow_override {
        return Err(LensError::Registry(format!(
            "Strategy '{name}' is already registered. Pass allow_override=true to replace it."
        )));
    }
    reg.insert(name.to_string(), ExportStrategy::custom(strategy));
    Ok(())
}

/// Removes a user strategy. Built-ins cannot be removed.
///
/// ```
/// use nemo_lens::strategy::unregister_export_strategy;
/// assert!(unregister_export_strategy("single_rank").is_err());
/// assert!(unregister_export_strategy("never_registered").is_err());
/// ```
pub fn unregister_export_strategy(name: &str) -> Result<()> {
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
///
/// ```
/// let names = nemo_lens::strategy::registered_strategies();
/// assert!(names.starts_with(&["all_ranks".to_string()]));
/// ```
pub fn registered_strategies() -> Vec<String> {
    registry().read().keys().cloned().collect()
}

/// Looks a strategy up by name; `var` names where the name came from, for the error.
///
/// ```
/// use nemo_lens::strategy::get_export_strategy;
/// let err = get_export_strategy("fastest", "NEMO_LENS_EXPORT_STRATEGY").unwrap_err();
/// assert!(err.to_string().contains("NEMO_LENS_EXPORT_STRATEGY"));
/// assert!(err.to_string().contains("single_rank"));
/// ```
pub fn get_export_strategy(name: &str, var: &str) -> Result<ExportStrategy> {
    let reg = registry().read();
    reg.get(name)
        .cloned()
        .ok_or_else(|| LensError::UnknownStrategy {
            var: var.to_string(),
            name: crate::config::env::shown(name),
            registered: reg.keys().cloned().collect(),
        })
}
