//! Small helpers every layer of the experiments uses: the run's time bound and how durations
//! read, the order servers take run by run, the files the lab writes, and errors on one line.
//! Names nothing else in the crate.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

/// The default bound on a whole run: 3 × the expected duration, and at least 3 minutes more.
pub fn default_bound(expected: Duration) -> Duration {
    (expected * 3).max(expected + Duration::from_secs(180))
}

/// `1 h 02 min`, `3 min 20 s`, `45 s`.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

/// The order of servers in run `run` (from 1): rotated by one each run.
pub fn rotation<T: Copy>(items: &[T], run: u32) -> Vec<T> {
    if items.is_empty() {
        return Vec::new();
    }
    let k = (run.saturating_sub(1) as usize) % items.len();
    items[k..].iter().chain(&items[..k]).copied().collect()
}

/// Writes `n` pseudo-random bytes (xorshift64*: incompressible, no RNG dependency),
/// world-readable (the servers may read it after dropping privileges).
pub(crate) fn write_random(path: &Path, n: u64, seed: u64) -> Result<(), String> {
    let mut f = File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15 ^ seed;
    let mut buf = vec![0u8; 1 << 16];
    let mut left = n;
    while left > 0 {
        for chunk in buf.chunks_mut(8) {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let v = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        let k = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..k]).map_err(|e| format!("writing {}: {e}", path.display()))?;
        left -= k as u64;
    }
    let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o644));
    Ok(())
}

/// Writes the private key readable by root only (the servers read it before dropping
/// privileges).
pub(crate) fn write_private(path: &Path, text: &str) -> Result<(), String> {
    let _ = fs::remove_file(path);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    f.write_all(text.as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// A multi-line message on one line (its non-empty lines joined by ` | `), at most 400
/// characters.
pub fn one_line(s: &str) -> String {
    let joined = whole_on_one_line(s);
    if joined.chars().count() > 400 {
        joined.chars().take(399).chain(['…']).collect()
    } else {
        joined
    }
}

/// A multi-line message on one line, however long (the static-docroot experiments' skip
/// reasons).
pub fn whole_on_one_line(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ")
}

/// The first non-empty line of a message.
pub fn first_line(s: &str) -> String {
    s.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(fmt_duration(Duration::from_secs(45)), "45 s");
        assert_eq!(fmt_duration(Duration::from_secs(200)), "3 min 20 s");
        assert_eq!(fmt_duration(Duration::from_secs(3720)), "1 h 02 min");
        assert_eq!(default_bound(Duration::from_secs(30)), Duration::from_secs(210));
        assert_eq!(default_bound(Duration::from_secs(600)), Duration::from_secs(1800));
    }

    #[test]
    fn one_line_messages() {
        assert_eq!(one_line("a\n  b \n\nc"), "a | b | c");
        assert_eq!(one_line(&"x".repeat(1000)).chars().count(), 400);
        assert_eq!(whole_on_one_line(&"x".repeat(1000)).chars().count(), 1000);
        assert_eq!(first_line("\n  a \nb"), "a");
    }
}
