//! `sluice`: run and inspect pipelines of built-in ops described in a TOML or JSON file.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use sluice::{Next, OptimizerOptions, PipelineSpec, Plan, Profile, ProfileOptions};

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
        /// Run this optimizer plan (from `sluice plan --optimize --out`).
        #[arg(long)]
        plan: Option<String>,
    },
    /// Print the physical plan (stages, variants, queue depths) without running it; with
    /// --optimize, profile the pipeline (or load --profile) and print the optimized plan.
    Plan {
        /// Pipeline file (.toml or .json).
        pipeline: String,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
        /// Optimize: profile → rules → plan with the model's predicted throughput.
        #[arg(long)]
        optimize: bool,
        /// Use this saved profile instead of profiling now.
        #[arg(long)]
        profile: Option<String>,
        /// Only moves that keep outputs byte-identical.
        #[arg(long)]
        exact: bool,
        /// Cores the plan may use.
        #[arg(long)]
        cpus: Option<usize>,
        /// Samples/s to meet with the fewest cores.
        #[arg(long)]
        est_throughput: Option<f64>,
        /// Write the plan (JSON) here.
        #[arg(long)]
        out: Option<String>,
    },
    /// Profile a pipeline op by op: CPU time per sample, bytes in/out, selectivity.
    Profile {
        /// Pipeline file (.toml or .json).
        pipeline: String,
        /// Source samples to run.
        #[arg(long, default_value_t = 200)]
        samples: u64,
        /// Stop after this many seconds.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Write the profile (JSON) here.
        #[arg(long)]
        out: Option<String>,
        /// Print the profile as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn read(path: &str) -> Result<String, sluice::Error> {
    std::fs::read_to_string(path)
        .map_err(|e| sluice::Error::invalid(format!("cannot read {path}: {e}")))
}

fn write(path: &str, text: &str) -> Result<(), sluice::Error> {
    std::fs::write(path, text)
        .map_err(|e| sluice::Error::invalid(format!("cannot write {path}: {e}")))
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
        Command::Profile {
            pipeline,
            samples,
            seconds,
            out,
            json,
        } => {
            let (ds, opts) = PipelineSpec::load(&pipeline)?.build()?;
            let p = ds.profile(&ProfileOptions {
                samples,
                seconds,
                seed: opts.seed,
            })?;
            if let Some(path) = out {
                write(&path, &p.to_json())?;
            }
            println!("{}", if json { p.to_json() } else { p.to_string() });
            Ok(())
        }
        Command::Plan {
            pipeline,
            json,
            optimize: true,
            profile,
            exact,
            cpus,
            est_throughput,
            out,
        } => {
            let (ds, opts) = PipelineSpec::load(&pipeline)?.build()?;
            let prof = match profile {
                Some(path) => Profile::from_json(&read(&path)?)?,
                None => ds.profile(&ProfileOptions {
                    seed: opts.seed,
                    ..Default::default()
                })?,
            };
            let options = OptimizerOptions {
                exact,
                available_local_cpus: cpus,
                est_throughput,
                ..Default::default()
            };
            let plan = ds.optimize(&prof, &options, &opts)?;
            if let Some(path) = out {
                write(&path, &plan.to_json())?;
            }
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
        Command::Plan { pipeline, json, .. } => {
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
            plan,
        } => {
            let (mut ds, mut opts) = PipelineSpec::load(&pipeline)?.build()?;
            if let Some(path) = plan {
                opts.plan = Some(Plan::from_json(&read(&path)?)?.into());
            }
            if let Some(s) = seed {
                opts.seed = s;
            }
            if threads.is_some() {
                opts.num_threads = threads;
            }
            // A plan is tied to the pipeline as written, so a limit with a plan stops the
            // loop instead of adding a step.
            match limit {
                Some(n) if opts.plan.is_none() => ds = ds.take(n),
                _ => {}
            }
            let mut exec = ds.iter(&opts)?;
            let progress = std::io::stderr().is_terminal();
            let t0 = Instant::now();
            let mut last = t0;
            let mut outputs = 0u64;
            loop {
                if limit.is_some_and(|n| outputs >= n) {
                    break;
                }
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
