//! Sluice's transport policy, sans-IO like the protocol engines: readings and the current time
//! go in, decisions come out. Nothing here reads a clock, touches a socket or holds a task; the
//! drivers in the server read `TCP_INFO` and quinn's ACKs and apply the decisions.
//!
//! - [`inflight`]: the in-flight bound: bytes handed to the kernel (or to quinn) bounded near
//!   the path's bandwidth-delay product, so a newly urgent response waits behind about one
//!   round trip of older data rather than a bottleneck queue.
//! - [`contention`]: whether the bottleneck's queue is another flow's, so the bound steps aside.
//! - [`quic`]: the bound as a QUIC congestion controller defers to it.
//! - [`recv_mark`]: the receive low-water mark for fast uploads of declared length.
//! - [`window`] and [`autotune`]: receive windows: the policy seam the HTTP/2 engine and the
//!   QUIC driver share, fixed windows, and the autotuners (Sluice's, the write-up's rule,
//!   quiche's, hyper's BDP estimator) under a process-wide memory budget.
//!
//! See `docs/decisions/` for why the in-flight bound exists and `docs/protocols.md` for the
//! rules as the drivers apply them.

#![forbid(unsafe_code)]

pub mod autotune;
pub mod contention;
pub mod inflight;
pub mod quic;
pub mod recv_mark;
pub mod window;
