//! A worker process for stages of built-in ops only (no Python): the Rust counterpart of
//! `python -m sluice._worker`, for Rust programs and the process-pool tests.
//!
//! Usage: a [`sluice_remote::ProcessBackend`] started with `["sluice-worker"]` as its command.

fn main() {
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    if let Err(e) = sluice_remote::pool::serve(&mut input, &mut output, &|_| Ok(None), None) {
        eprintln!("sluice-worker: {e}");
        std::process::exit(1);
    }
}
