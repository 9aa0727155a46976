//! A value as an error message shows it: cut, so that a 100 KiB mistake does not flood a
//! thousand ranks' logs.

/// How many characters of a bad value an error message shows.
pub(crate) const SHOWN_VALUE_CHARS: usize = 64;

/// The value as an error message shows it: at most [`SHOWN_VALUE_CHARS`] characters, with `…`
/// when cut.
pub(crate) fn shown(value: &str) -> String {
    let mut chars = value.chars();
    let mut out: String = chars.by_ref().take(SHOWN_VALUE_CHARS).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}
