//! Lists of ranks and steps for a person: `0-4,6-7`, cut after a few ranges.

/// Sorted `values` as inclusive ranges of consecutive values.
pub fn to_ranges(values: &[i64]) -> Vec<[i64; 2]> {
    let mut out: Vec<[i64; 2]> = Vec::new();
    for &v in values {
        match out.last_mut() {
            Some(last) if last[1].checked_add(1) == Some(v) => last[1] = v,
            _ => out.push([v, v]),
        }
    }
    out
}

/// Inclusive ranges as `0-4,6-7`; after `max_ranges` ranges, `… (+N more)` counts the values
/// left out.
pub fn format_ranges(ranges: &[[i64; 2]], max_ranges: usize) -> String {
    let mut out: Vec<String> = ranges
        .iter()
        .take(max_ranges)
        .map(|&[a, b]| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    if ranges.len() > max_ranges {
        let left: i128 = ranges[max_ranges..]
            .iter()
            .map(|&[a, b]| i128::from(b) - i128::from(a) + 1)
            .sum();
        out.push(format!("… (+{left} more)"));
    }
    out.join(",")
}

/// Sorted `values` as `0-4,6-7`, cut after `max_ranges` ranges.
pub fn ranges(values: &[i64], max_ranges: usize) -> String {
    format_ranges(&to_ranges(values), max_ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_values_become_ranges_and_long_lists_are_cut() {
        assert_eq!(ranges(&[0, 1, 2, 3, 4, 6, 7], 8), "0-4,6-7");
        assert_eq!(ranges(&[5], 8), "5");
        assert_eq!(ranges(&[], 8), "");
        let odd: Vec<i64> = (0..100).map(|i| 2 * i).collect();
        assert_eq!(ranges(&odd, 3), "0,2,4,… (+97 more)");
        assert_eq!(
            format_ranges(&[[0, 9], [20, 1 << 40]], 1),
            "0-9,… (+1099511627757 more)"
        );
        assert_eq!(
            to_ranges(&[i64::MAX - 1, i64::MAX]),
            [[i64::MAX - 1, i64::MAX]]
        );
    }
}
