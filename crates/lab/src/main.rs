//! `sluice-lab`: the lab's command line.
//!
//! - `sluice-lab link ...`: an emulated link between two namespaces, until interrupted.
//! - `sluice-lab run <experiment> ...`: an experiment, side by side with peer servers.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Sluice's lab: emulated links and experiments side by side with nginx, h2o and Caddy.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a client and a server network namespace joined by an emulated link, run until
    /// interrupted, then remove them (root).
    Link(sluice_lab::net::LinkArgs),
    /// Run an experiment (root): starts the servers in the server namespace, the clients in
    /// the client namespace, writes CSV, a Markdown table and charts.
    Run(sluice_lab::experiments::RunArgs),
    /// Traffic endpoints for use inside the namespaces (tests, measuring the link by hand).
    #[command(hide = true)]
    Tool(sluice_lab::net::ToolArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Link(a) => sluice_lab::net::link_main(a),
        Command::Run(a) => sluice_lab::experiments::run_main(a),
        Command::Tool(a) => sluice_lab::net::tool_main(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-lab: {e}");
            ExitCode::FAILURE
        }
    }
}
