//! Reading file data without blocking on the disk.

use std::io;
use std::os::fd::AsRawFd;

/// Read up to `n` bytes at `off` only if they are in the page cache (preadv2 with RWF_NOWAIT):
/// `None` when that would block or the kernel does not support it; an `UnexpectedEof` error
/// when the file ends before `off`.
pub fn read_cached(f: &std::fs::File, off: u64, n: usize) -> Option<io::Result<Vec<u8>>> {
    let mut buf = vec![0u8; n];
    let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: n };
    let off = libc::off_t::try_from(off).ok()?;
    // SAFETY: `iov` points into `buf`, which is live and `n` bytes long for the call; the
    // descriptor is open for the lifetime of `f`.
    let got = unsafe { libc::preadv2(f.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
    if got < 0 {
        return None;
    }
    if got == 0 {
        return Some(Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")));
    }
    buf.truncate(got as usize);
    Some(Ok(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        // Just written, so in the page cache: either served from it or not supported here.
        if let Some(r) = read_cached(&f, 10, 100) {
            assert_eq!(r.unwrap(), &content[10..110]);
        }
        if let Some(r) = read_cached(&f, 300_000, 100) {
            assert_eq!(r.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        }
    }
}
