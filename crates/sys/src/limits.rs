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

/// Let glibc keep freed memory until [`trim_heap`] hands it back, rather than returning the
/// top of a heap to the system on every free that leaves more than 128 KiB free there (its
/// default, raised only once large blocks have been mmapped and freed). A bulk transfer frees
/// and allocates buffers tens of KiB at a time, and each time the top was given back, the next
/// allocation page-faulted it in again: up to 145,000 page faults per GB of an HTTP/2 upload.
/// Blocks up to `mmap_threshold` come from the heap (glibc's dynamic threshold stops at 32 MiB
/// on 64-bit; setting either value ends the dynamic adjustment, so both are set). Returns
/// whether glibc took both.
pub fn keep_freed_heap(trim_threshold: usize, mmap_threshold: usize) -> bool {
    let (Ok(trim), Ok(mmap)) = (libc::c_int::try_from(trim_threshold), libc::c_int::try_from(mmap_threshold)) else {
        return false;
    };
    // SAFETY: mallopt takes no pointers; glibc serialises it against the allocator.
    unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, trim) == 1 && libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_takes_the_heap_thresholds_and_sizes_past_an_int_are_refused() {
        assert!(keep_freed_heap(64 << 20, 4 << 20));
        assert!(!keep_freed_heap(usize::MAX, 4 << 20));
    }

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
