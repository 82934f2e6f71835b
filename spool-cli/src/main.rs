//! The `spool` binary: everything is in the library ([`spool_cli::main_with`]).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    spool_cli::main_with(std::env::args_os())
}
