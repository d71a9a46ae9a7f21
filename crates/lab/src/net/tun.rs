//! TUN devices: open, read and write raw IP packets (no packet-information header).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags, padded to the union's size.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// A TUN device, alive as long as this value (the device is not persistent).
#[derive(Debug)]
pub(crate) struct Tun {
    fd: OwnedFd,
    name: String,
}

impl Tun {
    /// Creates the TUN device `name` (IFF_TUN | IFF_NO_PI), with a non-blocking descriptor.
    pub(crate) fn create(name: &str) -> Result<Self, String> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.bytes().any(|b| b == 0 || b == b'/') {
            return Err(format!("bad interface name {name:?}"));
        }
        // SAFETY: a NUL-terminated literal path; the flags are valid for open(2).
        let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(format!("cannot open /dev/net/tun: {e} (is the tun module loaded, and are we root?)"));
        }
        // SAFETY: `fd` was just returned by open(2) and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _pad: [0; 22],
        };
        for (dst, &src) in req.name.iter_mut().zip(name.as_bytes()) {
            *dst = src as libc::c_char;
        }
        // SAFETY: TUNSETIFF reads and writes a `struct ifreq`; `req` is a properly laid out,
        // live, exclusively borrowed value at least as large as the kernel's `struct ifreq`.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(format!("cannot create TUN device {name}: {e}"));
        }
        Ok(Self { fd, name: name.to_string() })
    }

    /// The interface name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Reads one packet into `buf` from the non-blocking descriptor: `Ok(Some(len))`, `Ok(None)` when
/// there is nothing to read.
pub(crate) fn read_packet(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: `buf` is a live, exclusively borrowed byte slice of `buf.len()` bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Writes one packet (a TUN write is all or nothing).
pub(crate) fn write_packet(fd: RawFd, pkt: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: `pkt` is a live byte slice of `pkt.len()` bytes.
        let n = unsafe { libc::write(fd, pkt.as_ptr().cast(), pkt.len()) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
