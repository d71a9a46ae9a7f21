//! Sluice's lab: an emulated link between a client and a server network namespace, and the
//! experiments that back every performance claim, run side by side with peer servers.
//!
//! - [`model`]: the sans-IO link model (loss, drop-tail queue, serialisation at a rate, delay).
//! - [`net`]: namespaces, TUN devices and the forwarder thread that applies the model.
//! - [`experiments`]: experiment runner, peer server configurations, reports and charts.

pub mod experiments;
pub mod model;
pub mod net;
