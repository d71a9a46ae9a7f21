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

/// Start glibc's heap thresholds where a busy server's would end up. glibc serves blocks of
/// 128 KiB or more with their own mmap at first, and each time such a block is freed it raises
/// that threshold to the block's size and the trim threshold (free space at the top of a heap
/// handed back on every free) to twice that, up to 32 MiB. Until then a fresh process returns
/// any top beyond 128 KiB on each free and page-faults it in again on the next allocation: a
/// 1 GB HTTP/2 upload took up to 145,000 page faults. Allocating and freeing one block of
/// `bytes` makes that adjustment at start. Setting the thresholds with `mallopt` instead would
/// freeze them, and then memory freed after a burst stayed resident (40 MB against 10 MB
/// before the burst, 20 s later, where the adjusting glibc gave it back).
pub fn raise_heap_thresholds(bytes: usize) {
    // SAFETY: malloc and free of a block that is never read or written; `black_box` keeps the
    // pair from being optimised away.
    unsafe {
        let p = std::hint::black_box(libc::malloc(bytes));
        libc::free(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_the_warmup_a_megabyte_comes_from_the_heap_not_its_own_mmap() {
        // A fresh glibc mmaps blocks of 128 KiB and more on their own. Told by the block's own
        // header, not by mallinfo2's count of such blocks: that count is the process's, and
        // another test's large buffer, made or freed at the same time, moved it.
        raise_heap_thresholds(4 << 20);
        // SAFETY: glibc puts each block's size word just before the pointer it returns (the
        // chunk header, malloc/malloc.c); bit 1 of it is IS_MMAPPED. The word is read, never
        // written, while the block is allocated, and the block is freed once.
        unsafe {
            let p = std::hint::black_box(libc::malloc(1 << 20));
            assert!(!p.is_null());
            let size_word = p.cast::<usize>().sub(1).read();
            libc::free(p);
            assert_eq!(size_word & 2, 0, "a 1 MiB block was mmapped on its own");
        }
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
