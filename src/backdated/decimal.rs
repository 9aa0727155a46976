//! Exact decimal numbers as Python's `decimal.Decimal` reads, compares, subtracts and prints
//! them: the times of a backdated span and its `inverted.*` evidence.
//!
//! Only what `EmitSpan` needs: parsing Python's decimal syntax, exact comparison, subtraction
//! rounded to Python's default context (28 significant digits, half-even), truncation to
//! nanoseconds, and Python's `str()`.

use std::cmp::Ordering;
use std::fmt;

/// At most this many significant digits are accepted (Python has no limit; a timestamp needs
/// about 20).
const MAX_DIGITS: usize = 1000;
/// Significant digits of a result (Python's default context).
const PRECISION: usize = 28;
/// Beyond this span of digit positions, subtraction keeps the smaller operand as a sticky digit.
const MAX_SPAN: i64 = 4096;

/// A finite decimal: `(-1)^negative × digits × 10^exp`, `digits` without leading zeros (most
/// significant first; empty for zero).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exp: i64,
}

/// What a text is, read as Python's `Decimal(text)`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A finite number.
    Finite(Decimal),
    /// `Infinity`, `Inf`, `NaN`, `sNaN` (any case, signed).
    NonFinite,
    /// Not a number Python accepts (or more than [`MAX_DIGITS`] significant digits, or an
    /// exponent beyond ±10^15).
    Invalid,
}

impl Decimal {
    /// Reads `text` as Python's `Decimal(text)`: surrounding blanks ignored, underscores
    /// ignored, `[sign] (digits [. [digits]] | . digits) [e [sign] digits]`, or a non-finite
    /// word. Only ASCII digits are read (Python also reads other Unicode decimal digits).
    pub(crate) fn parse(text: &str) -> Parsed {
        let t: String = text.trim().chars().filter(|&c| c != '_').collect();
        let (negative, body) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, &t[..]),
        };
        let lower = body.to_ascii_lowercase();
        if matches!(lower.as_str(), "inf" | "infinity")
            || ["nan", "snan"].iter().any(|p| {
                lower
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
            })
        {
            return Parsed::NonFinite;
        }
        let (mantissa, exponent) = match body.find(['e', 'E']) {
            Some(i) => (&body[..i], Some(&body[i + 1..])),
            None => (body, None),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if (int.is_empty() && frac.is_empty())
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return Parsed::Invalid;
        }
        let mut exp: i64 = match exponent {
            None => 0,
            Some(e) => {
                let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Parsed::Invalid;
                }
                match e.parse::<i64>() {
                    Ok(n) if n.unsigned_abs() <= 1_000_000_000_000_000 => n,
                    _ => return Parsed::Invalid,
                }
            }
        };
        exp -= frac.len() as i64;
        let digits: Vec<u8> = int
            .bytes()
            .chain(frac.bytes())
            .map(|b| b - b'0')
            .skip_while(|&d| d == 0)
            .collect();
        if digits.len() > MAX_DIGITS {
            return Parsed::Invalid;
        }
        Parsed::Finite(Decimal {
            negative,
            digits,
            exp,
        })
    }

    /// Exactly `nanos` × 10^-9, without trailing zeros after the point (`1.5`, `3`).
    pub(crate) fn from_nanos(nanos: i128) -> Decimal {
        let mut d = Decimal {
            negative: nanos < 0,
            digits: nanos
                .unsigned_abs()
                .to_string()
                .bytes()
                .map(|b| b - b'0')
                .collect(),
            exp: -9,
        };
        if d.digits == [0] {
            d.digits.clear();
        }
        while d.exp < 0 && d.digits.last() == Some(&0) {
            d.digits.pop();
            d.exp += 1;
        }
        d
    }

    /// Nanoseconds as Python's `int(seconds * 1_000_000_000)`: the product rounded to 28
    /// significant digits (half-even), then truncated toward zero; `None` when they do not fit
    /// an `i128`.
    pub(crate) fn to_nanos(&self) -> Option<i128> {
        let mut digits = self.digits.clone();
        let mut shift = self.exp + 9;
        round_to_precision(&mut digits, &mut shift);
        let kept = (digits.len() as i64 + shift.min(0)).max(0) as usize;
        if shift > 0 && digits.len() as i64 + shift > 40 {
            return None;
        }
        let mut n: i128 = 0;
        for &d in &digits[..kept] {
            n = n.checked_mul(10)?.checked_add(i128::from(d))?;
        }
        for _ in 0..shift.max(0) {
            n = n.checked_mul(10)?;
        }
        Some(if self.negative { -n } else { n })
    }

    /// Position of the most significant digit (`None` for zero).
    fn msd(&self) -> Option<i64> {
        (!self.digits.is_empty()).then(|| self.exp + self.digits.len() as i64 - 1)
    }

    /// The digit at position `p` (units: 0, tenths: -1).
    fn digit_at(&self, p: i64) -> u8 {
        let i = self.exp + self.digits.len() as i64 - 1 - p;
        if i < 0 || i >= self.digits.len() as i64 {
            0
        } else {
            self.digits[i as usize]
        }
    }

    /// Compares magnitudes.
    fn cmp_abs(&self, other: &Decimal) -> Ordering {
        match (self.msd(), other.msd()) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(a), Some(b)) if a != b => a.cmp(&b),
            (Some(top), Some(_)) => {
                let low = self.exp.min(other.exp);
                let mut p = top;
                while p >= low {
                    match self.digit_at(p).cmp(&other.digit_at(p)) {
                        Ordering::Equal => p -= 1,
                        unequal => return unequal,
                    }
                }
                Ordering::Equal
            }
        }
    }

    /// `self - other` as Python computes it: exact, then rounded half-even to 28 significant
    /// digits.
    pub(crate) fn sub(&self, other: &Decimal) -> Decimal {
        let negated = Decimal {
            negative: !other.negative,
            ..other.clone()
        };
        add(self, &negated)
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        let sign = |d: &Decimal| match (d.digits.is_empty(), d.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        };
        match sign(self).cmp(&sign(other)) {
            Ordering::Equal if sign(self) < 0 => other.cmp_abs(self),
            Ordering::Equal => self.cmp_abs(other),
            unequal => unequal,
        }
    }
}

/// `a + b`, rounded to [`PRECISION`] digits half-even.
fn add(a: &Decimal, b: &Decimal) -> Decimal {
    let (hi, lo) = if a.cmp_abs(b) == Ordering::Less {
        (b, a)
    } else {
        (a, b)
    };
    let Some(top) = hi.msd() else {
        // Both zero: exponent of the smaller, positive (Python: `0E-9`).
        return Decimal {
            negative: false,
            digits: Vec::new(),
            exp: a.exp.min(b.exp),
        };
    };
    let mut low = a.exp.min(b.exp);
    // A tiny operand far below the larger one only decides the rounding: a sticky digit two
    // places below a window wider than the precision.
    let mut sticky = false;
    let lo_effective = if top - low > MAX_SPAN {
        low = low.max(top - (PRECISION as i64 + 2)).min(hi.exp);
        sticky = !lo.digits.is_empty();
        low -= 1;
        None
    } else {
        Some(lo)
    };
    // Little-endian digits from position `low` to `top + 1` (room for a carry).
    let width = (top - low + 2) as usize;
    let mut acc: Vec<i8> = (0..width)
        .map(|i| hi.digit_at(low + i as i64) as i8)
        .collect();
    let same_sign = hi.negative == lo.negative;
    match lo_effective {
        Some(lo) => {
            for (i, slot) in acc.iter_mut().enumerate() {
                let d = lo.digit_at(low + i as i64) as i8;
                *slot += if same_sign { d } else { -d };
            }
        }
        None if sticky => acc[0] += if same_sign { 1 } else { -1 },
        None => {}
    }
    // Normalise carries and borrows (|hi| >= |lo|, so the result is non-negative).
    for i in 0..width {
        let (q, r) = (acc[i].div_euclid(10), acc[i].rem_euclid(10));
        acc[i] = r;
        if i + 1 < width {
            acc[i + 1] += q;
        }
    }
    let mut digits: Vec<u8> = acc
        .iter()
        .rev()
        .map(|&d| d as u8)
        .skip_while(|&d| d == 0)
        .collect();
    let mut exp = low;
    round_to_precision(&mut digits, &mut exp);
    let negative = !digits.is_empty() && hi.negative;
    Decimal {
        negative,
        digits,
        exp,
    }
}

/// Rounds `digits × 10^exp` to [`PRECISION`] significant digits, half-even (Python's default
/// context).
fn round_to_precision(digits: &mut Vec<u8>, exp: &mut i64) {
    if digits.len() <= PRECISION {
        return;
    }
    let dropped = digits.split_off(PRECISION);
    *exp += dropped.len() as i64;
    let rest_zero = dropped[1..].iter().all(|&d| d == 0);
    let round_up = match dropped[0] {
        d if d > 5 => true,
        5 if !rest_zero => true,
        5 => digits.last().is_some_and(|d| d % 2 == 1),
        _ => false,
    };
    if !round_up {
        return;
    }
    for i in (0..digits.len()).rev() {
        if digits[i] < 9 {
            digits[i] += 1;
            return;
        }
        digits[i] = 0;
    }
    // 99…9 rounded up: 100…0, one digit too many.
    digits.insert(0, 1);
    digits.pop();
    *exp += 1;
}

impl fmt::Display for Decimal {
    /// Python's `str(Decimal)` (to-scientific-string): plain notation when the exponent is not
    /// positive and the number is not below 1E-6 in its digits, else `d.dddE±n`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits: String = if self.digits.is_empty() {
            "0".into()
        } else {
            self.digits.iter().map(|d| char::from(b'0' + d)).collect()
        };
        let len = digits.len() as i64;
        let left = self.exp + len;
        let dot = if self.exp <= 0 && left > -6 { left } else { 1 };
        let mut out = String::new();
        if self.negative {
            out.push('-');
        }
        if dot <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-dot) as usize));
            out.push_str(&digits);
        } else if dot >= len {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', (dot - len) as usize));
        } else {
            out.push_str(&digits[..dot as usize]);
            out.push('.');
            out.push_str(&digits[dot as usize..]);
        }
        if left != dot {
            out.push_str(&format!("E{:+}", left - dot));
        }
        f.pad(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Decimal {
        match Decimal::parse(text) {
            Parsed::Finite(d) => d,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn reads_and_prints_as_python() {
        for (text, shown) in [
            ("1__0", "10"),
            ("_1", "1"),
            (" 1 ", "1"),
            (".5", "0.5"),
            ("5.", "5"),
            ("+1", "1"),
            ("-0", "-0"),
            ("1e3", "1E+3"),
            ("1.50", "1.50"),
            ("1790038547.061741440", "1790038547.061741440"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1E-7"),
            ("-0.0", "-0.0"),
            ("00012", "12"),
        ] {
            assert_eq!(d(text).to_string(), shown, "{text}");
        }
        for text in ["Infinity", "-inf", "nan", "sNaN", "NaN12"] {
            assert_eq!(Decimal::parse(text), Parsed::NonFinite, "{text}");
        }
        for text in ["0x10", "1.2.3", "e5", "1e", "", ".", "--1", "1e+"] {
            assert_eq!(Decimal::parse(text), Parsed::Invalid, "{text}");
        }
    }

    #[test]
    fn subtracts_as_python() {
        for (a, b, diff) in [
            ("1790038547.061741440", "1790038547.061741439", "1E-9"),
            ("2.0", "1.0", "1.0"),
            ("3600", "0", "3600"),
            ("1.0300000001", "1.0", "0.0300000001"),
            ("1.0000000002", "1.0000000001", "1E-10"),
            ("1e3", "1", "999"),
            ("1E+3", "1E+2", "9E+2"),
            (
                "12345678901234567890123456789.5",
                "0.1",
                "1.234567890123456789012345679E+28",
            ),
            ("1", "-1e-5000", "1.000000000000000000000000000"),
            ("1e-5000", "-5", "5.000000000000000000000000000"),
        ] {
            assert_eq!(d(a).sub(&d(b)).to_string(), diff, "{a} - {b}");
        }
        assert!(d("1.0000000001") < d("1.0000000002"));
        assert!(d("-2") < d("-1.5"));
        assert_eq!(d("1.9999999999").to_nanos(), Some(1_999_999_999));
        assert_eq!(d("-1.5").to_nanos(), Some(-1_500_000_000));
        assert_eq!(d("1e400").to_nanos(), None);
        // Python rounds the product to 28 digits before truncating.
        assert_eq!(
            d("1.9999999999999999999999999999999").to_nanos(),
            Some(2_000_000_000)
        );
        assert_eq!(Decimal::from_nanos(1_500_000_000).to_string(), "1.5");
    }
}
