#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    iac_agui::cli::main(std::env::args_os().skip(1))
}
