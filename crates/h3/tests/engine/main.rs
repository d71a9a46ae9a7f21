//! Whole-connection tests of the HTTP/3 server engine, in memory: a test client encodes frames,
//! varints and QPACK itself and checks the exact bytes and codes the engine produces.

mod client;
mod control;
mod glitch;
mod priority;
mod requests;
mod streams;
mod timers;
