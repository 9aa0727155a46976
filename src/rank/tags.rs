//! The attributes a span of a group carries because of its group: `lens.group`, and for a group
//! with a category `lens.span_category` and `purpose` (see [`crate::groups`]).
//!
//! They are built once per group at setup; a new span takes a shared reference to its group's
//! (no allocation on the training thread), and the export worker appends them to the span's
//! attributes.

use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry::{Array, KeyValue, StringValue, Value};
use tracing_core::Metadata;

use crate::rank::groups::{self, declared_group};
use crate::rank::rules::CallsiteRules;
use crate::semconv;

/// The attributes of one group's spans.
pub(crate) type Tags = Arc<[KeyValue]>;

/// The tags of every group registered at setup, and the rules that give a callsite without a
/// declared group its group.
#[derive(Debug, Default)]
pub(crate) struct GroupTags {
    /// One lookup per new span of a recording rank: a fast hash of the group name.
    by_group: HashMap<String, Tags, foldhash::fast::RandomState>,
    rules: CallsiteRules,
}

impl GroupTags {
    /// The tags of the groups registered now, with the telemetry's span-group rules.
    pub(crate) fn new(rules: CallsiteRules) -> Self {
        let by_group = groups::categories()
            .into_iter()
            .map(|(group, category)| {
                let mut tags = vec![KeyValue::new(semconv::LENS_GROUP, group.clone())];
                if let Some(category) = category {
                    tags.push(KeyValue::new(semconv::LENS_SPAN_CATEGORY, category));
                    tags.push(KeyValue::new(
                        semconv::PURPOSE,
                        Value::Array(Array::String(vec![StringValue::from(category)])),
                    ));
                }
                (group, Tags::from(tags))
            })
            .collect();
        GroupTags { by_group, rules }
    }

    /// The tags of a callsite's group, if it has one.
    #[inline]
    pub(crate) fn of(&self, meta: &Metadata<'_>) -> Option<Tags> {
        if self.by_group.is_empty() {
            return None;
        }
        let group = declared_group(meta).or_else(|| self.rules.group_of(meta))?;
        self.by_group.get(group).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_groups_have_their_category_and_purpose() {
        let tags = GroupTags::new(CallsiteRules::default());
        let step = &tags.by_group["step"];
        assert_eq!(step[0], KeyValue::new("lens.group", "step"));
        assert_eq!(step[1], KeyValue::new("lens.span_category", "goodput"));
        assert_eq!(
            step[2].value,
            Value::Array(Array::String(vec!["goodput".into()]))
        );
        let optimizer = &tags.by_group["optimizer"];
        assert_eq!(
            optimizer[1],
            KeyValue::new("lens.span_category", "profiling")
        );
    }
}
