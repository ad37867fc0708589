//! `sluice`: run and inspect pipelines of built-in ops described in a TOML or JSON file.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use sluice::{Next, PipelineSpec};

/// sluice — a fast, reproducible ML input pipeline engine.
///
/// A pipeline file names a source and a list of steps, e.g. (TOML):
///
///   seed = 0
///   [source]
///   source = "read_images"
///   paths = ["data/images"]
///   labels = "parent_dir"
///   [[steps]]
///   step = "batch"
///   size = 64
///
/// Sources: range, read_files, read_images, read_text, read_jsonl.
/// Steps: map (op = noop|select|drop|rename|...), batch, shuffle, shuffle_buffer, shard,
/// repeat, prefetch, take.
#[derive(Parser)]
#[command(name = "sluice", version, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a pipeline to the end (or --limit outputs) and print throughput and per-stage stats.
    Run {
        /// Pipeline file (.toml or .json).
        pipeline: String,
        /// Stop after this many outputs.
        #[arg(long)]
        limit: Option<u64>,
        /// Override the file's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override the file's thread count.
        #[arg(long)]
        threads: Option<usize>,
        /// Print the stats report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the physical plan (stages, variants, queue depths) without running it.
    Plan {
        /// Pipeline file (.toml or .json).
        pipeline: String,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), sluice::Error> {
    match cli.command {
        Command::Plan { pipeline, json } => {
            let (ds, opts) = PipelineSpec::load(&pipeline)?.build()?;
            let plan = ds.physical_plan(&opts)?;
            println!(
                "{}",
                if json {
                    plan.to_json()
                } else {
                    plan.to_string()
                }
            );
            Ok(())
        }
        Command::Run {
            pipeline,
            limit,
            seed,
            threads,
            json,
        } => {
            let (mut ds, mut opts) = PipelineSpec::load(&pipeline)?.build()?;
            if let Some(s) = seed {
                opts.seed = s;
            }
            if threads.is_some() {
                opts.num_threads = threads;
            }
            if let Some(n) = limit {
                ds = ds.take(n);
            }
            let mut exec = ds.iter(&opts)?;
            let progress = std::io::stderr().is_terminal();
            let t0 = Instant::now();
            let mut last = t0;
            let mut outputs = 0u64;
            loop {
                match exec.next_timeout(Duration::from_millis(200)) {
                    Next::Item(_) => outputs += 1,
                    Next::Err(e) => return Err(e),
                    Next::Timeout => {}
                    Next::End => break,
                }
                if progress && last.elapsed() > Duration::from_millis(200) {
                    last = Instant::now();
                    let samples = exec.stats().consumer.samples;
                    eprint!(
                        "\r{outputs} outputs, {samples} samples, {:.0} samples/s   ",
                        samples as f64 / t0.elapsed().as_secs_f64()
                    );
                }
            }
            if progress {
                eprintln!();
            }
            let report = exec.stats();
            exec.close(Duration::from_secs(5));
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                println!("{report}");
            }
            Ok(())
        }
    }
}
