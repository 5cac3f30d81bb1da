//! `strata-benches produce|consume|disk`: the load generator (see the library's docs).

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = strata_benches::Cli::parse();
    match strata_benches::run(cli.command) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
