//! Experiments run side by side with peer servers (being written).

/// Arguments of `sluice-lab run` (being written).
#[derive(clap::Args, Debug)]
pub struct RunArgs {}

/// `sluice-lab run` (being written).
pub fn run_main(_a: RunArgs) -> Result<(), String> {
    Err("not written yet".into())
}
