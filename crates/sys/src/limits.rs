//! Process resources: the open-file limit, and memory handed back to the system.

use std::io;

/// Raise the soft limit on open files (RLIMIT_NOFILE) to the hard limit: every connection,
/// file being sent and QUIC socket holds a descriptor, and the usual soft default (1,024) is far
/// below what `max_connections` allows. Returns the soft limit before and after.
pub fn raise_nofile() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a live, writable rlimit for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid rlimit, read above, for the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, lim.rlim_cur))
}

/// Hand memory the allocator holds free back to the operating system (glibc's `malloc_trim`,
/// every arena). glibc returns freed memory from the top of the main heap only, and keeps the
/// other arenas' freed pages: after a burst, a server's resident size stays at its peak. Returns
/// whether any memory was released.
pub fn trim_heap() -> bool {
    // SAFETY: malloc_trim takes no pointers and is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let (before, after) = raise_nofile().unwrap();
        assert!(after >= before);
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!((lim.rlim_cur, after), (lim.rlim_max, lim.rlim_max));
    }
}
