//! Namespaces, TUN devices and the forwarder that applies the link model (being written).

/// Arguments of `sluice-lab link` (being written).
#[derive(clap::Args, Debug)]
pub struct LinkArgs {}

/// `sluice-lab link` (being written).
pub fn link_main(_a: LinkArgs) -> Result<(), String> {
    Err("not written yet".into())
}
