//! Signals to other processes.

use std::io;

/// Send SIGHUP to process `pid` (`sluice reload` without an admin listener).
pub fn hangup(pid: i32) -> io::Result<()> {
    if pid <= 0 {
        // kill(2) with 0 or a negative pid signals a process group: never meant here.
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a single process id"));
    }
    // SAFETY: kill takes no pointers; a positive pid names one process.
    if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
