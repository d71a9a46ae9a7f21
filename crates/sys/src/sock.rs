//! Platform socket knobs: the only place that calls setsockopt/getsockopt.

use std::io;
use std::os::fd::RawFd;

/// Set TCP_NOTSENT_LOWAT: the socket reports writable only when fewer than `bytes` unsent
/// bytes remain queued, so data waits in the engine (where it can still be reordered) rather
/// than in the kernel. 0 leaves the system default.
pub fn set_notsent_lowat(fd: RawFd, bytes: u32) -> io::Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, bytes as libc::c_int)
}

/// Set SO_RCVLOWAT: the socket reports readable only once `bytes` are queued (or at the end
/// of the stream, or an error); a read still returns what is there. Linux checks at once
/// whether what is queued already meets a lowered mark and wakes the reader if so.
pub fn set_rcvlowat(fd: RawFd, bytes: u32) -> io::Result<()> {
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes.clamp(1, i32::MAX as u32) as libc::c_int)
}

/// Set the congestion control of one socket (TCP_CONGESTION), e.g. "bbr" or "cubic".
pub fn set_congestion(fd: RawFd, name: &str) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller; the option value is `name`'s bytes,
    // live for the call, with their length.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether this kernel lets us use congestion control `name` (tried on a throwaway socket).
pub fn congestion_available(name: &str) -> io::Result<()> {
    let s = std::net::TcpListener::bind("127.0.0.1:0")?;
    use std::os::fd::AsRawFd;
    set_congestion(s.as_raw_fd(), name)
}

/// Set TCP_NODELAY (frames are written whole; Nagle only adds latency).
pub fn set_nodelay(fd: RawFd) -> io::Result<()> {
    setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
}

fn setsockopt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller for the duration of the call, and the
    // option value is a live c_int whose size we pass.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Which socket buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// SO_RCVBUF (net.core.rmem_max bounds it).
    Receive,
    /// SO_SNDBUF (net.core.wmem_max bounds it).
    Send,
}

impl Buffer {
    /// The sysctl that bounds this buffer for unprivileged sockets.
    pub fn sysctl(self) -> &'static str {
        match self {
            Self::Receive => "net.core.rmem_max",
            Self::Send => "net.core.wmem_max",
        }
    }
}

/// Size a socket buffer to `want` bytes; if the kernel clamps it to its sysctl maximum, try the
/// forcing option (SO_RCVBUFFORCE / SO_SNDBUFFORCE, allowed with CAP_NET_ADMIN). Returns the
/// usable size obtained.
pub fn size_buffer(fd: RawFd, which: Buffer, want: usize) -> io::Result<usize> {
    match which {
        Buffer::Receive => set_buffer(fd, libc::SO_RCVBUF, libc::SO_RCVBUFFORCE, want),
        Buffer::Send => set_buffer(fd, libc::SO_SNDBUF, libc::SO_SNDBUFFORCE, want),
    }
}

/// Set a socket buffer (`opt`: SO_RCVBUF or SO_SNDBUF) to `want` bytes; if the kernel clamps it
/// to its sysctl maximum, try `force` (SO_RCVBUFFORCE / SO_SNDBUFFORCE, allowed with
/// CAP_NET_ADMIN). Returns the size obtained (Linux reports twice the usable size; this
/// returns the usable size).
fn set_buffer(fd: RawFd, opt: libc::c_int, force: libc::c_int, want: usize) -> io::Result<usize> {
    let get = || -> io::Result<usize> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are live and sized for the call.
        let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, opt, (&mut v as *mut libc::c_int).cast(), &mut len) };
        if rc == 0 {
            Ok(v.max(0) as usize / 2)
        } else {
            Err(io::Error::last_os_error())
        }
    };
    let want_c = libc::c_int::try_from(want).unwrap_or(libc::c_int::MAX);
    setsockopt(fd, libc::SOL_SOCKET, opt, want_c)?;
    if get()? < want {
        // Not allowed without privilege: keep what the plain option gave.
        let _ = setsockopt(fd, libc::SOL_SOCKET, force, want_c);
    }
    get()
}

/// The MTU of the route to `peer`: the outgoing interface's, or a smaller path MTU the kernel
/// has learned for that destination (IP_MTU / IPV6_MTU on a throwaway UDP socket connected to
/// it; connecting a UDP socket sends nothing).
pub fn route_mtu(peer: std::net::SocketAddr) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    // A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d; ask the IPv4 route for them.
    let peer = std::net::SocketAddr::new(peer.ip().to_canonical(), peer.port());
    let (bind, level, opt): (std::net::SocketAddr, _, _) = if peer.is_ipv4() {
        ((std::net::Ipv4Addr::UNSPECIFIED, 0).into(), libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        ((std::net::Ipv6Addr::UNSPECIFIED, 0).into(), libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    let s = std::net::UdpSocket::bind(bind)?;
    s.connect(peer)?;
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live and sized for the call; the socket is open.
    let rc = unsafe { libc::getsockopt(s.as_raw_fd(), level, opt, (&mut v as *mut libc::c_int).cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(v).map_err(|_| io::Error::other(format!("route MTU {v}")))
}

/// What TCP_INFO tells about the path right now.
#[derive(Clone, Copy, Debug, Default)]
pub struct PathInfo {
    /// Smoothed RTT of what we sent, microseconds (0: no sample yet).
    pub rtt_us: u32,
    /// The receiver-side RTT estimate, microseconds (0: none).
    pub rcv_rtt_us: u32,
    /// The smallest RTT seen on the connection, microseconds (0: none): the path's RTT
    /// without queueing delay.
    pub min_rtt_us: u32,
    /// Congestion window in segments.
    pub cwnd: u32,
    /// Segments sent and not yet cumulatively acknowledged (`packets_out`): SACKed and lost
    /// ones included.
    pub unacked: u32,
    /// Of those, segments the peer has selectively acknowledged (RFC 2018).
    pub sacked: u32,
    /// Of those, segments the sender deems lost.
    pub lost: u32,
    /// Retransmitted segments not yet acknowledged.
    pub retrans: u32,
    /// Sender MSS in bytes.
    pub mss: u32,
    /// Bytes written and not yet sent.
    pub notsent_bytes: u32,
    /// The latest delivery-rate sample, bytes per second (0: none).
    pub delivery_rate: u64,
    /// The rate the kernel paces at, bytes per second (BBR sets it from its bandwidth model).
    pub pacing_rate: u64,
    /// Bytes cumulatively acknowledged by the peer so far (not those only SACKed).
    pub bytes_acked: u64,
}

impl PathInfo {
    /// The path's RTT without queueing delay: the connection's minimum RTT (fed by the ACKs of
    /// our frames, WINDOW_UPDATEs included, so it exists during uploads too), else the smoothed
    /// sender-side estimate, else the receiver-side one. Windows sized from the minimum keep a
    /// queue from inflating them (a sender filling a drop-tail buffer raises the smoothed RTT).
    pub fn rtt(&self) -> Option<std::time::Duration> {
        let us = [self.min_rtt_us, self.rtt_us, self.rcv_rtt_us].into_iter().find(|&us| us > 0)?;
        Some(std::time::Duration::from_micros(u64::from(us)))
    }

    /// Segments in the network, as the kernel counts them against the congestion window
    /// (`tcp_packets_in_flight`): sent and neither acknowledged, cumulatively or selectively,
    /// nor deemed lost, plus retransmissions not yet acknowledged. Not `unacked`: after a loss
    /// the cumulative ACK stays at the hole for a round trip or more while everything sent
    /// after it is delivered and SACKed, so `unacked` counts about a round trip of data that
    /// has left the network (at 0.5 % loss on a 200 Mbit/s × 40 ms path, nearly always).
    pub fn in_flight(&self) -> u32 {
        self.unacked.saturating_sub(self.sacked.saturating_add(self.lost)).saturating_add(self.retrans)
    }

    /// [`in_flight`](Self::in_flight) in bytes (full-sized segments).
    pub fn in_flight_bytes(&self) -> usize {
        self.in_flight() as usize * self.mss.max(536) as usize
    }

    /// Bytes the peer has received so far: cumulatively acknowledged, plus the segments it
    /// has SACKed beyond a hole (full-sized). Unlike `bytes_acked` alone it grows while a
    /// loss is being repaired, so a round's growth is what the path delivered in it.
    pub fn delivered_bytes(&self) -> u64 {
        self.bytes_acked + u64::from(self.sacked) * u64::from(self.mss.max(536))
    }

    /// Bytes the congestion window can take now.
    pub fn cwnd_room(&self) -> usize {
        self.cwnd.saturating_sub(self.in_flight()) as usize * self.mss.max(536) as usize
    }
}

/// Read TCP_INFO.
pub fn path_info(fd: RawFd) -> io::Result<PathInfo> {
    // SAFETY: tcp_info is plain old data; zeroed is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are live and sized for the call; `fd` is an open socket.
    let rc = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PathInfo {
        rtt_us: info.tcpi_rtt,
        rcv_rtt_us: info.tcpi_rcv_rtt,
        min_rtt_us: info.tcpi_min_rtt,
        cwnd: info.tcpi_snd_cwnd,
        unacked: info.tcpi_unacked,
        sacked: info.tcpi_sacked,
        lost: info.tcpi_lost,
        retrans: info.tcpi_retrans,
        mss: info.tcpi_snd_mss,
        notsent_bytes: info.tcpi_notsent_bytes,
        delivery_rate: info.tcpi_delivery_rate,
        pacing_rate: info.tcpi_pacing_rate,
        bytes_acked: info.tcpi_bytes_acked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn knobs_on_a_loopback_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let fd = c.as_raw_fd();
        set_nodelay(fd).unwrap();
        set_notsent_lowat(fd, 16_384).unwrap();
        assert!(set_congestion(fd, "no-such-cc").is_err());
        if congestion_available("reno").is_ok() {
            set_congestion(fd, "reno").unwrap();
        }
        let p = path_info(fd).unwrap();
        assert!(p.cwnd > 0 && p.mss > 0, "{p:?}");
        assert!(p.cwnd_room() > 0 && p.notsent_bytes == 0, "{p:?}");
        assert!(path_info(-1).is_err());
    }

    #[test]
    fn in_flight_leaves_out_what_was_sacked_or_lost() {
        // 100 segments past the cumulative ACK: 60 SACKed beyond a hole, 3 deemed lost, 2 of
        // them retransmitted. The network holds 100 - 60 - 3 + 2 = 39.
        let p = PathInfo {
            cwnd: 50,
            unacked: 100,
            sacked: 60,
            lost: 3,
            retrans: 2,
            mss: 1_000,
            bytes_acked: 7_000,
            ..Default::default()
        };
        assert_eq!(p.in_flight(), 39);
        assert_eq!(p.in_flight_bytes(), 39_000);
        assert_eq!(p.cwnd_room(), 11_000);
        // What the peer holds: the cumulative ACK and the SACKed segments.
        assert_eq!(p.delivered_bytes(), 67_000);
        // Without loss it is the unacknowledged count; inconsistent readings never underflow.
        let clean = PathInfo { cwnd: 10, unacked: 8, mss: 1_000, ..Default::default() };
        assert_eq!((clean.in_flight(), clean.cwnd_room()), (8, 2_000));
        let odd = PathInfo { cwnd: 10, unacked: 2, sacked: 5, lost: 1, mss: 1_000, ..Default::default() };
        assert_eq!((odd.in_flight(), odd.cwnd_room()), (0, 10_000));
    }

    #[test]
    fn route_mtu_of_loopback_and_mapped_addresses() {
        // The loopback interface's MTU (65536 on Linux), far above Ethernet's.
        let lo = route_mtu("127.0.0.1:443".parse().unwrap()).unwrap();
        assert!(lo > 1500, "{lo}");
        // An IPv4 peer as a dual-stack socket reports it takes the IPv4 route.
        assert_eq!(route_mtu("[::ffff:127.0.0.1]:443".parse().unwrap()).unwrap(), lo);
    }
}
