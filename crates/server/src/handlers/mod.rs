//! What answers requests: static files, the speed test, the built-in site.

pub(crate) mod builtin;
pub(crate) mod speedtest;
pub(crate) mod static_files;
