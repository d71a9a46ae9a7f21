//! The operating-system calls Sluice makes beyond the standard library, in one place: socket
//! options and TCP_INFO ([`sock`]), page-cache reads ([`file`]), resource limits ([`limits`]),
//! signals ([`process`]), the machine's addresses ([`net`]),
//! glibc's tunables ([`tunables`]: its per-thread cache of freed blocks, and its copy tuning
//! on AMD, [`memcpy`]).
//! Every `unsafe` block of the server and the client lives in this crate, each with the
//! invariant that makes it sound.

#![warn(missing_docs)]

pub mod file;
pub mod limits;
pub mod memcpy;
pub mod net;
pub mod process;
pub mod sock;
pub mod tunables;
