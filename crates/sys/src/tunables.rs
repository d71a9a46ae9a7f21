//! glibc tunables Sluice sets for itself, by running its binary again.
//!
//! glibc reads `GLIBC_TUNABLES` once, in the dynamic loader at start, so the only way to set a
//! tunable for the whole process (rustls and ring included) is the environment of a fresh
//! image: [`reexec_if_needed`] runs the binary again with the variable extended, before the
//! process has started a thread or opened anything. A tunable the variable already names is
//! the operator's and is left alone. Two are set:
//!
//! - `glibc.malloc.tcache_count` ([`TCACHE_COUNT`]), on every glibc: glibc keeps freed blocks of
//!   up to 1,032 bytes in a per-thread cache, 7 of each size by default. A server with a
//!   hundred requests in flight frees far more than 7 blocks of one size in a row (a request's
//!   head, its header map, its futures), and what overflows goes to the arena's bins, whose
//!   paths cost several times the cache's: measured on a proxied small request
//!   (`scripts/bench-callgrind.sh --servers sluice-proxy`, 100 in flight), 28,381 instructions
//!   with 7, 27,795 with 16, 27,595 with 32, 27,333 with 64, 27,157 with 128.
//! - `glibc.cpu.x86_rep_movsb_threshold` on AMD Zen 3 and later ([`crate::memcpy`]).
//!
//! What the larger cache costs: it can hold [`TCACHE_COUNT`] blocks of each of its 64 sizes
//! (32 to 1,040 bytes), at most about 2.2 MB per thread, which `malloc_trim` cannot hand back
//! while they are cached (they are in use as far as the arena knows).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;

/// The tunable that sets how many freed blocks of each size a thread's cache keeps.
pub const TCACHE: &str = "glibc.malloc.tcache_count";

/// How many Sluice keeps (glibc's default: 7).
pub const TCACHE_COUNT: u64 = 64;

/// The tunables this process wants, as `(name, value)`: the cache's size always, the copy
/// threshold on CPUs that want it.
pub fn wanted() -> Vec<(&'static str, u64)> {
    let mut w = vec![(TCACHE, TCACHE_COUNT)];
    if crate::memcpy::cpu_wants_tuning() {
        w.push((crate::memcpy::TUNABLE, crate::memcpy::THRESHOLD));
    }
    w
}

/// `current` (a `GLIBC_TUNABLES` value: `name=value` pairs separated by colons) with each of
/// `wanted` it does not name added after it, or `None` when it names them all.
pub fn extended(current: Option<&OsStr>, wanted: &[(&str, u64)]) -> Option<OsString> {
    let cur = current.filter(|c| !c.is_empty());
    let named = |name: &str| {
        cur.is_some_and(|c| {
            c.as_bytes().split(|&b| b == b':').any(|pair| pair.split(|&b| b == b'=').next() == Some(name.as_bytes()))
        })
    };
    let missing: Vec<String> =
        wanted.iter().filter(|(name, _)| !named(name)).map(|(name, value)| format!("{name}={value}")).collect();
    if missing.is_empty() {
        return None;
    }
    let mut out = cur.map(OsStr::to_os_string).unwrap_or_default();
    if !out.is_empty() {
        out.push(":");
    }
    out.push(missing.join(":"));
    Some(out)
}

/// With glibc, unless `GLIBC_TUNABLES` already names every tunable of [`wanted`]: replace this
/// process's image with the same binary, same arguments, and the missing tunables added.
/// Returns only if it did not exec: `Ok(false)` when no exec was needed, `Err` when the exec
/// failed (the process goes on with glibc's defaults).
///
/// Call it first thing in `main`, before any thread starts or any descriptor is opened: the
/// new image keeps the process id and inherited descriptors and starts over.
pub fn reexec_if_needed() -> io::Result<bool> {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return Ok(false);
    }
    let Some(tunables) = extended(std::env::var_os("GLIBC_TUNABLES").as_deref(), &wanted()) else {
        return Ok(false);
    };
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("sluice"));
    // The path /proc/self/exe links to, not the link itself: under valgrind the link is
    // valgrind's own binary (only reading it is made to give the program's), so exec'ing it
    // failed there. A binary replaced in the instants since start runs in its new version.
    let exe = std::env::current_exe()?;
    let err = std::process::Command::new(exe).arg0(arg0).args(args).env("GLIBC_TUNABLES", tunables).exec();
    Err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WANTED: &[(&str, u64)] = &[(TCACHE, 64), ("glibc.cpu.x86_rep_movsb_threshold", 1 << 30)];

    #[test]
    fn what_is_wanted_is_added_after_what_is_set() {
        let both = "glibc.malloc.tcache_count=64:glibc.cpu.x86_rep_movsb_threshold=1073741824";
        assert_eq!(extended(None, WANTED).unwrap(), OsString::from(both));
        assert_eq!(extended(Some(OsStr::new("")), WANTED).unwrap(), OsString::from(both));
        assert_eq!(
            extended(Some(OsStr::new("glibc.malloc.arena_max=2")), WANTED).unwrap(),
            OsString::from(format!("glibc.malloc.arena_max=2:{both}"))
        );
    }

    #[test]
    fn a_tunable_already_set_is_the_operators() {
        assert_eq!(
            extended(Some(OsStr::new("glibc.malloc.tcache_count=7")), WANTED).unwrap(),
            OsString::from("glibc.malloc.tcache_count=7:glibc.cpu.x86_rep_movsb_threshold=1073741824")
        );
        assert_eq!(
            extended(Some(OsStr::new("a.b=1:glibc.cpu.x86_rep_movsb_threshold=4096")), WANTED).unwrap(),
            OsString::from("a.b=1:glibc.cpu.x86_rep_movsb_threshold=4096:glibc.malloc.tcache_count=64")
        );
        let all = "glibc.cpu.x86_rep_movsb_threshold=2112:glibc.malloc.tcache_count=0";
        assert!(extended(Some(OsStr::new(all)), WANTED).is_none());
        assert!(extended(Some(OsStr::new("glibc.malloc.tcache_count=7")), &WANTED[..1]).is_none());
        // A longer name that starts the same is another tunable.
        assert_eq!(
            extended(Some(OsStr::new("glibc.malloc.tcache_count_x=1")), &WANTED[..1]).unwrap(),
            OsString::from("glibc.malloc.tcache_count_x=1:glibc.malloc.tcache_count=64")
        );
    }
}
