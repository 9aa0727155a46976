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

/// The values of `0..end` that are not in `present` (ascending), as inclusive ranges: at most
/// one more range than `present` holds, however large `end` (a made-up world size never
/// becomes a list as long as itself).
pub fn gaps(present: impl IntoIterator<Item = i64>, end: i64) -> Vec<[i64; 2]> {
    let mut out = Vec::new();
    let mut next = 0_i64;
    for v in present.into_iter().filter(|v| (0..end).contains(v)) {
        if v > next {
            out.push([next, v - 1]);
        }
        next = v + 1;
    }
    if next < end {
        out.push([next, end - 1]);
    }
    out
}

/// How many values inclusive `ranges` of non-negative values hold.
pub fn count(ranges: &[[i64; 2]]) -> u64 {
    ranges.iter().map(|[a, b]| b.abs_diff(*a) + 1).sum()
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
    fn gaps_below_the_end_are_ranges_whatever_the_end() {
        assert_eq!(gaps([0, 5, 9, 12], 11), [[1, 4], [6, 8], [10, 10]]);
        assert_eq!(gaps([0, 5, 9, 12], i64::MAX).len(), 4);
        assert!(gaps([0, 5, 9, 12], 1).is_empty());
        assert!(gaps([0, 5, 9, 12], -3).is_empty());
        assert_eq!(gaps([5, 12], 8), [[0, 4], [6, 7]]);
        assert_eq!(gaps([], i64::MAX), [[0, i64::MAX - 1]]);
        assert_eq!(count(&gaps([0], i64::MAX)), i64::MAX as u64 - 1);
    }

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
