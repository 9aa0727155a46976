//! Lists of ranks and steps for a person: `0-4,6-7`, cut after a few ranges.

/// `values` (sorted) as ranges, `0-4,6-7`; after `max_ranges` ranges, `… (+N more)` counts the
/// values left out.
pub fn ranges(values: &[i64], max_ranges: usize) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < values.len() {
        if out.len() == max_ranges {
            return format!("{},… (+{} more)", out.join(","), values.len() - i);
        }
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] == values[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            values[i].to_string()
        } else {
            format!("{}-{}", values[i], values[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn consecutive_values_become_ranges_and_long_lists_are_cut() {
        assert_eq!(ranges(&[0, 1, 2, 3, 4, 6, 7], 8), "0-4,6-7");
        assert_eq!(ranges(&[5], 8), "5");
        assert_eq!(ranges(&[], 8), "");
        let odd: Vec<i64> = (0..100).map(|i| 2 * i).collect();
        assert_eq!(ranges(&odd, 3), "0,2,4,… (+97 more)");
    }
}
