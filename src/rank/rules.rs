//! Span-group rules: spans of other crates in span groups, by target.
//!
//! A framework's spans declare no `nemo.group.*` field. A rule puts every callsite whose
//! *target* (its module path) lies under a prefix into a group, optionally only the spans of one
//! name; the group then switches them on or off like the spans that declare it, decided once
//! per callsite. The spec comes from `NEMO_LENS_SPAN_GROUP_RULES` or
//! [`GroupsConfig::rules`](crate::GroupsConfig::rules), whose documentation describes the
//! entries for users; setup parses it with [`parse_span_group_rules`] and the group gate asks
//! [`CallsiteRules`] once per callsite.

use std::fmt;

use tracing_core::{LevelFilter, Metadata};

use crate::error::{LensError, Result};

/// The rules used when `NEMO_LENS_SPAN_GROUP_RULES` is unset: burn's collective operations
/// (`burn_collective`, the all-reduce a rank waits in) in group `collective`.
pub(crate) const DEFAULT_SPAN_GROUP_RULES: &str = "burn_collective=collective";

/// One rule: callsites under a target prefix (optionally of one name) belong to a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpanGroupRule {
    prefix: String,
    name: Option<String>,
    group: String,
}

impl SpanGroupRule {
    /// The target prefix (whole path segments).
    #[cfg(test)]
    fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The span name the rule is narrowed to, if any.
    #[cfg(test)]
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The group (lower-case).
    #[cfg(test)]
    fn group(&self) -> &str {
        &self.group
    }

    /// Whether the rule covers a callsite of `target` named `name`.
    fn matches(&self, target: &str, name: &str) -> bool {
        target
            .strip_prefix(self.prefix.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
            && self.name.as_deref().is_none_or(|n| n == name)
    }
}

impl fmt::Display for SpanGroupRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{}:{}={}", self.prefix, name, self.group),
            None => write!(f, "{}={}", self.prefix, self.group),
        }
    }
}

const SYNTAX: &str = "comma-separated 'prefix=group' or 'prefix:name=group' entries (prefix a module path such as 'burn_collective'), 'default' or 'none'";

fn invalid(var: &str, value: &str) -> LensError {
    LensError::InvalidValue {
        var: var.to_string(),
        value: crate::config::env::shown(value),
        expected: SYNTAX.to_string(),
    }
}

fn is_path(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.split("::").all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

fn parse_entry(entry: &str, var: &str, registered: &[String]) -> Result<SpanGroupRule> {
    let (lhs, group) = entry.split_once('=').ok_or_else(|| invalid(var, entry))?;
    let (lhs, group) = (lhs.trim(), group.trim().to_ascii_lowercase());
    // `::` separates path segments, a single `:` the span name: split at the first lone `:`.
    let b = lhs.as_bytes();
    let split = (0..b.len())
        .find(|&i| b[i] == b':' && b.get(i + 1) != Some(&b':') && (i == 0 || b[i - 1] != b':'));
    let (prefix, name) = match split {
        Some(i) => (lhs[..i].trim(), Some(lhs[i + 1..].trim())),
        None => (lhs, None),
    };
    if !is_path(prefix) || name.is_some_and(|n| n.is_empty() || n.contains('=')) {
        return Err(invalid(var, entry));
    }
    if group.is_empty() || group.contains('=') {
        return Err(invalid(var, entry));
    }
    if !registered.contains(&group) {
        return Err(LensError::UnknownSpanGroup {
            var: var.to_string(),
            name: crate::config::env::shown(&group),
            valid: registered.to_vec(),
        });
    }
    Ok(SpanGroupRule {
        prefix: prefix.to_string(),
        name: name.map(str::to_string),
        group,
    })
}

/// Parses a rule spec (entries `prefix=group`, `prefix:name=group`, `default`, `none`) whose
/// groups must be among `registered` (the group registry's, passed in so the registry's gate can
/// hold the rules); `var` names the spec's source in errors: [`LensError::InvalidValue`] for an
/// entry that is not a rule, [`LensError::UnknownSpanGroup`] (with the registered groups) for a
/// group no library registered. Duplicate rules are kept once.
pub(crate) fn parse_span_group_rules(
    spec: &str,
    var: &str,
    registered: &[String],
) -> Result<Vec<SpanGroupRule>> {
    let mut rules: Vec<SpanGroupRule> = Vec::new();
    for entry in spec.split(',') {
        let entry = entry.trim();
        let parsed = match entry.to_ascii_lowercase().as_str() {
            "" | "none" => continue,
            "default" => parse_span_group_rules(DEFAULT_SPAN_GROUP_RULES, var, registered)?,
            _ => vec![parse_entry(entry, var, registered)?],
        };
        for rule in parsed {
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    Ok(rules)
}

/// The rules and span level of one telemetry: which group a callsite without a declared group
/// belongs to, and the level from which ungrouped spans are recorded.
#[derive(Clone, Debug)]
pub(crate) struct CallsiteRules {
    /// Most specific first: longest prefix, then named before unnamed.
    rules: Box<[SpanGroupRule]>,
    span_level: LevelFilter,
}

impl Default for CallsiteRules {
    /// No rules, every ungrouped span recorded (what a gate built without a configuration does).
    fn default() -> Self {
        CallsiteRules {
            rules: Box::default(),
            span_level: LevelFilter::TRACE,
        }
    }
}

impl CallsiteRules {
    pub(crate) fn new(mut rules: Vec<SpanGroupRule>, span_level: LevelFilter) -> Self {
        rules.sort_by_key(|r| (std::cmp::Reverse(r.prefix.len()), r.name.is_none()));
        CallsiteRules {
            rules: rules.into_boxed_slice(),
            span_level,
        }
    }

    /// The group a rule puts this callsite in, if any.
    #[inline]
    pub(crate) fn group_of(&self, meta: &Metadata<'_>) -> Option<&str> {
        if self.rules.is_empty() {
            return None;
        }
        self.rules
            .iter()
            .find(|r| r.matches(meta.target(), meta.name()))
            .map(|r| r.group.as_str())
    }

    /// Whether an ungrouped callsite is recorded: spans from the span level on, events always
    /// (their levels are the log bridge's business).
    #[inline]
    pub(crate) fn ungrouped_allowed(&self, meta: &Metadata<'_>) -> bool {
        !meta.is_span() || self.span_level >= *meta.level()
    }

    #[cfg(test)]
    fn rules(&self) -> &[SpanGroupRule] {
        &self.rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> Result<Vec<SpanGroupRule>> {
        parse_span_group_rules(
            spec,
            "NEMO_LENS_SPAN_GROUP_RULES",
            &crate::rank::groups::registered_groups(),
        )
    }

    #[test]
    fn entries_parse_with_and_without_a_name() {
        let rules = parse(" Burn_collective = COLLECTIVE , a::b::c:Fwd Pass=ops,").unwrap();
        assert_eq!(rules[0].to_string(), "Burn_collective=collective");
        assert_eq!(rules[1].prefix(), "a::b::c");
        assert_eq!(rules[1].name(), Some("Fwd Pass"));
        assert_eq!(rules[1].group(), "ops");
    }

    #[test]
    fn default_expands_and_none_is_empty() {
        assert_eq!(
            parse("default").unwrap(),
            parse(DEFAULT_SPAN_GROUP_RULES).unwrap()
        );
        assert_eq!(parse("default,default").unwrap().len(), 1);
        assert!(parse("none").unwrap().is_empty());
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn malformed_entries_name_the_variable() {
        for bad in [
            "burn_collective",
            "=collective",
            "burn_collective=",
            "a:::b=ops",
            "a::=ops",
            "a:=ops",
            "burn collective=ops",
            "a=b=c",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(
                matches!(&err, LensError::InvalidValue { var, .. } if var == "NEMO_LENS_SPAN_GROUP_RULES"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn an_unknown_group_lists_the_registered_groups() {
        match parse("burn_collective=colective").unwrap_err() {
            LensError::UnknownSpanGroup { var, name, valid } => {
                assert_eq!(var, "NEMO_LENS_SPAN_GROUP_RULES");
                assert_eq!(name, "colective");
                assert!(valid.contains(&"collective".to_string()));
                assert!(valid.contains(&"ops".to_string()));
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn the_default_rule_puts_burn_collective_in_collective() {
        let rules = parse("default, candle_transformers=ops").unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].prefix(), "burn_collective");
        assert_eq!(rules[0].group(), "collective");
        assert!(rules[0].matches("burn_collective", "all_reduce"));
        assert!(rules[0].matches("burn_collective::local::client", "all_reduce"));
        assert!(!rules[0].matches("burn_collectives", "all_reduce"));
        assert_eq!(rules[1].group(), "ops");
        let named = &parse("burn_collective::local::client:all_reduce=collective").unwrap()[0];
        assert_eq!(named.name(), Some("all_reduce"));
    }

    #[test]
    fn prefixes_match_whole_segments() {
        let rule = &parse("burn_collective::local=collective").unwrap()[0];
        assert!(rule.matches("burn_collective::local", "x"));
        assert!(rule.matches("burn_collective::local::client", "x"));
        assert!(!rule.matches("burn_collective::locale", "x"));
        assert!(!rule.matches("burn_collective", "x"));
    }

    #[test]
    fn the_most_specific_rule_wins_whatever_the_order() {
        let rules =
            parse("burn=ops,burn_collective=collective,burn_collective:execute=step").unwrap();
        let set = CallsiteRules::new(rules, LevelFilter::INFO);
        let group = |target: &'static str, name: &'static str| {
            set.rules()
                .iter()
                .find(|r| r.matches(target, name))
                .map(|r| r.group().to_string())
        };
        assert_eq!(
            group("burn_collective::local", "execute").as_deref(),
            Some("step")
        );
        assert_eq!(
            group("burn_collective::local", "all_reduce").as_deref(),
            Some("collective")
        );
        assert_eq!(group("burn::tensor", "matmul").as_deref(), Some("ops"));
        assert_eq!(group("candle_core", "matmul"), None);
    }
}
