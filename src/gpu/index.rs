//! Which physical GPU a rank runs on: its local rank mapped through `CUDA_VISIBLE_DEVICES`, the
//! rule of the Python `detect_gpu`.

use std::fmt;

/// Why a rank has no physical GPU index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoIndex {
    /// The local rank is negative or too large for NVML (Python indexes the list from its end,
    /// or hands NVML a wrapped-around number).
    LocalRank(i64),
    /// The local rank points past the end of `CUDA_VISIBLE_DEVICES`.
    PastVisibleDevices { rank: i64, visible: usize },
    /// The entry of `CUDA_VISIBLE_DEVICES` is not a device index (a `GPU-…`/`MIG-…` UUID, an
    /// empty entry, a negative number).
    NotAnIndex(String),
}

impl fmt::Display for NoIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoIndex::LocalRank(rank) => write!(f, "local rank {rank} is not a GPU index"),
            NoIndex::PastVisibleDevices { rank, visible } => write!(
                f,
                "local rank {rank} is past the {visible} entries of CUDA_VISIBLE_DEVICES"
            ),
            NoIndex::NotAnIndex(entry) => write!(
                f,
                "CUDA_VISIBLE_DEVICES entry '{}' is not a device index",
                crate::config::env::shown(entry)
            ),
        }
    }
}

/// The physical index of this rank's GPU, as Python's `_physical_gpu_index`:
///
/// 1. the local rank is `explicit`, else the first of `LOCAL_RANK`, `SLURM_LOCALID` that is set
///    and not empty, else 0; a value that is not an integer counts as 0 (it does not fall
///    through to the next variable);
/// 2. with `CUDA_VISIBLE_DEVICES` blank or unset, the local rank is the physical index;
///    otherwise it picks an entry of that comma-separated list, which must be an integer.
///
/// Unlike Python, a negative local rank or an index outside `0..2³²` gives no index (Python
/// indexes the list from its end, or wraps the number around when it hands it to NVML).
pub(crate) fn physical_gpu_index(
    explicit: Option<u32>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<u32, NoIndex> {
    let rank = match explicit {
        Some(rank) => i64::from(rank),
        None => ["LOCAL_RANK", "SLURM_LOCALID"]
            .into_iter()
            .filter_map(lookup)
            .find(|value| !value.is_empty())
            .map_or(0, |value| match python_int(&value) {
                PyInt::Value(rank) => rank,
                PyInt::OutOfRange => i64::MAX,
                PyInt::NotAnInt => 0,
            }),
    };
    if rank < 0 {
        return Err(NoIndex::LocalRank(rank));
    }
    let visible = lookup("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    let visible = visible.trim();
    if visible.is_empty() {
        return u32::try_from(rank).map_err(|_| NoIndex::LocalRank(rank));
    }
    let entries: Vec<&str> = visible.split(',').map(str::trim).collect();
    let Some(entry) = usize::try_from(rank).ok().and_then(|r| entries.get(r)) else {
        return Err(NoIndex::PastVisibleDevices {
            rank,
            visible: entries.len(),
        });
    };
    match python_int(entry) {
        PyInt::Value(index) => u32::try_from(index).ok(),
        PyInt::OutOfRange | PyInt::NotAnInt => None,
    }
    .ok_or_else(|| NoIndex::NotAnIndex(entry.to_string()))
}

/// What Python's `int(text)` makes of a text.
#[derive(Debug, PartialEq, Eq)]
enum PyInt {
    Value(i64),
    /// An integer, outside `i64`.
    OutOfRange,
    NotAnInt,
}

/// Python's `int()` of decimal text: surrounding white space, one sign, `_` between digits.
/// (Python also takes non-ASCII decimal digits; no launcher writes them.)
fn python_int(text: &str) -> PyInt {
    let text = text.trim();
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return PyInt::NotAnInt;
    }
    match text.replace('_', "").parse::<i64>() {
        Ok(value) => PyInt::Value(value),
        Err(_) => PyInt::OutOfRange,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(explicit: Option<u32>, env: &[(&str, &str)]) -> Result<u32, NoIndex> {
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        physical_gpu_index(explicit, &lookup)
    }

    #[test]
    fn the_local_rank_picks_an_entry_of_the_visible_devices() {
        assert_eq!(index(None, &[]), Ok(0));
        assert_eq!(index(Some(1), &[("CUDA_VISIBLE_DEVICES", "4,5")]), Ok(5));
        let env = [("LOCAL_RANK", " 1 "), ("CUDA_VISIBLE_DEVICES", " 7 , 6 ")];
        assert_eq!(index(None, &env), Ok(6));
        assert_eq!(index(None, &[("CUDA_VISIBLE_DEVICES", "  ")]), Ok(0));
        assert_eq!(index(None, &[("CUDA_VISIBLE_DEVICES", "+2")]), Ok(2));
        assert_eq!(index(None, &[("LOCAL_RANK", "1_0")]), Ok(10));
    }

    #[test]
    fn local_rank_then_slurm_localid_and_no_fall_through() {
        let env = [("LOCAL_RANK", ""), ("SLURM_LOCALID", "2")];
        assert_eq!(index(None, &env), Ok(2));
        // Set but not an integer: rank 0, SLURM_LOCALID is not consulted.
        let env = [("LOCAL_RANK", "x"), ("SLURM_LOCALID", "2")];
        assert_eq!(index(None, &env), Ok(0));
        let env = [("LOCAL_RANK", "  "), ("SLURM_LOCALID", "2")];
        assert_eq!(index(None, &env), Ok(0));
        // An explicit rank wins over both.
        assert_eq!(index(Some(3), &[("LOCAL_RANK", "1")]), Ok(3));
    }

    #[test]
    fn entries_that_are_no_index_give_none() {
        let past = index(
            None,
            &[("LOCAL_RANK", "2"), ("CUDA_VISIBLE_DEVICES", "0,1")],
        );
        assert_eq!(
            past,
            Err(NoIndex::PastVisibleDevices {
                rank: 2,
                visible: 2
            })
        );
        for cvd in ["GPU-1a2b", "MIG-0", "0,,1", "-1", "1.5", "99999999999"] {
            let rank = if cvd == "0,,1" { "1" } else { "0" };
            let got = index(None, &[("LOCAL_RANK", rank), ("CUDA_VISIBLE_DEVICES", cvd)]);
            assert!(matches!(got, Err(NoIndex::NotAnIndex(_))), "{cvd}: {got:?}");
        }
    }

    #[test]
    fn negative_and_huge_ranks_give_none_where_python_wraps() {
        let env = [("LOCAL_RANK", "-1"), ("CUDA_VISIBLE_DEVICES", "0,2")];
        assert_eq!(index(None, &env), Err(NoIndex::LocalRank(-1)));
        assert_eq!(
            index(None, &[("LOCAL_RANK", "-1")]),
            Err(NoIndex::LocalRank(-1))
        );
        let env = [("LOCAL_RANK", "4294967296")];
        assert_eq!(index(None, &env), Err(NoIndex::LocalRank(4_294_967_296)));
        let env = [("LOCAL_RANK", "99999999999999999999999")];
        assert!(index(None, &env).is_err());
        let env = [
            ("LOCAL_RANK", "99999999999999999999999"),
            ("CUDA_VISIBLE_DEVICES", "0"),
        ];
        assert!(matches!(
            index(None, &env),
            Err(NoIndex::PastVisibleDevices { .. })
        ));
        assert_eq!(index(Some(u32::MAX), &[]), Ok(u32::MAX));
    }

    #[test]
    fn python_int_accepts_what_int_accepts() {
        assert_eq!(python_int(" -1 "), PyInt::Value(-1));
        assert_eq!(python_int("+0_7"), PyInt::Value(7));
        assert_eq!(python_int("99999999999999999999"), PyInt::OutOfRange);
        for bad in ["", "+", "_1", "1_", "1__0", "0x1", "GPU-0", "1 2"] {
            assert_eq!(python_int(bad), PyInt::NotAnInt, "{bad:?}");
        }
    }
}
