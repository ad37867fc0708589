//! The `sluice` binary: the command line lives in the library (`sluice_ml_cli::main_from`).

use std::process::ExitCode;

// Samples are made and freed on different threads: see `sluice::alloc` for the allocator.
#[global_allocator]
static ALLOC: sluice::alloc::MiMalloc = sluice::alloc::MiMalloc;

fn main() -> ExitCode {
    // Statuses are 0, 1 or 2 (see `main_from`).
    ExitCode::from(sluice_ml_cli::main_from(std::env::args_os()) as u8)
}
