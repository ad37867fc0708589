//! `sluice`: run and inspect pipelines of built-in ops described in a TOML or JSON file.
//!
//! A library so that the one implementation serves two front doors: the `sluice` binary
//! (`src/main.rs`) and the wheel's `sluice` console script, which calls [`main_from`] through
//! the Python extension (`sluice._native.cli_main`) instead of shipping a second executable.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
        /// Time the ops as the run goes and print the plan made from those times (what
        /// `iter(optimize=True)` runs from its second pass).
        #[arg(long, conflicts_with = "plan")]
        optimize: bool,
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
    /// The ingest checker (Ray AIR's DummyTrainer): read like a training loop that spends
    /// --consumer-delay-ms per batch and report how long it waited for each batch.
    Bench {
        /// Pipeline file (.toml or .json).
        pipeline: String,
        /// Passes over the pipeline (epochs 0, 1, …: each reshuffles).
        #[arg(long, default_value_t = 1)]
        epochs: u64,
        /// Outputs to read per epoch (default: all).
        #[arg(long)]
        batches: Option<u64>,
        /// Milliseconds the dummy trainer spends on each batch.
        #[arg(long, default_value_t = 0.0)]
        consumer_delay_ms: f64,
        /// Run this optimizer plan.
        #[arg(long)]
        plan: Option<String>,
        /// Profile, plan and run in one step (`iter(optimize=True)`): the first epoch runs
        /// the default plan and times its ops, later epochs run the plan made from them.
        #[arg(long, conflicts_with = "plan")]
        optimize: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a pipeline and write one self-contained HTML page about the run.
    ///
    /// The page shows the pipeline diagram, every stage's figures and plots over time, CPU
    /// and memory, the batch-delay histogram, skips and the error that ended the run. A
    /// failed run still gets its page (exit status 1).
    Report {
        /// Pipeline file (.toml or .json).
        pipeline: String,
        /// Where to write the page.
        #[arg(short, long, default_value = "report.html")]
        out: String,
        /// Stop after this many outputs (default: the whole run).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        batches: Option<u64>,
        /// Run this optimizer plan; the page compares its predictions with the run.
        #[arg(long)]
        plan: Option<String>,
        /// Time the ops as the run goes (`iter(optimize=True)`); the page shows the plan made
        /// from those times.
        #[arg(long, conflicts_with = "plan")]
        optimize: bool,
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

/// `e`, about the content of the file at `path`, naming it.
fn in_file(path: &str, e: sluice::Error) -> sluice::Error {
    sluice::Error::invalid(format!("{path}: {e}"))
}

/// A plan or profile file: a regular file of at most 16 MiB, as pipeline files.
fn read(path: &str, what: &str) -> Result<String, sluice::Error> {
    sluice::read_small_file(path, what)
}

/// Prints `value` as text, or as JSON (`as_json`) with `--json`.
fn show(json: bool, value: &impl std::fmt::Display, as_json: impl FnOnce() -> String) {
    if json {
        println!("{}", as_json());
    } else {
        println!("{value}");
    }
}

fn write(path: &str, text: &str) -> Result<(), sluice::Error> {
    std::fs::write(path, text)
        .map_err(|e| sluice::Error::invalid(format!("cannot write {path}: {e}")))
}

/// Runs the command line `args` (the first item is the program name, as in `std::env::args`)
/// and returns the process exit status: 0 on success (and for `--help`/`--version`), 1 when
/// the pipeline fails, 2 for a usage error. Never exits the process itself, so a host (the
/// Python console script) decides how to exit.
pub fn main_from<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let parsed = Cli::command()
        .after_help(vocabulary())
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0, usage errors to stderr with 2.
            let _ = e.print();
            return e.exit_code();
        }
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

/// The help's list of every source, step and op a pipeline file may name, from the spec
/// enums themselves (a list written here by hand fell behind them).
fn vocabulary() -> String {
    let (sources, steps, ops) = sluice::spec_vocabulary();
    format!(
        "Sources (source = ...): {}\nSteps (step = ...): {}\nOps of a map step (op = ...): {}",
        sources.join(", "),
        steps.join(", "),
        ops.join(", ")
    )
}

fn run(cli: Cli) -> Result<(), sluice::Error> {
    match cli.command {
        Command::Bench {
            pipeline,
            epochs,
            batches,
            consumer_delay_ms,
            plan,
            optimize,
            json,
        } => {
            if epochs == 0 || batches == Some(0) || consumer_delay_ms < 0.0 {
                return Err(sluice::Error::invalid(
                    "epochs and batches must be >= 1 and the delay >= 0",
                ));
            }
            let (ds, mut opts) = PipelineSpec::load(&pipeline)?.build()?;
            if let Some(path) = plan {
                opts.plan = Some(
                    Plan::from_json(&read(&path, "plan file")?)
                        .map_err(|e| in_file(&path, e))?
                        .into(),
                );
            }
            if optimize {
                opts.optimize = Some(Default::default());
            }
            let mut report = bench(&ds, &opts, epochs, batches, consumer_delay_ms)?;
            if let (Some(plan), Some(r)) = (ds.auto_plan(&opts)?, report.as_object_mut()) {
                r.insert("plan".into(), serde_json::json!(plan.to_string()));
            }
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                println!(
                    "{} epochs, {} batches, {} samples, {:.1} MiB in {:.2} s: {:.0} samples/s, \
                     {:.1} MiB/s\nbatch wait: P50 {:.3} ms, P95 {:.3} ms, max {:.3} ms; peak RSS {:.0} MiB",
                    report["epochs"], report["batches"], report["samples"],
                    report["mib"].as_f64().unwrap_or(0.0), report["seconds"].as_f64().unwrap_or(0.0),
                    report["samples_per_s"].as_f64().unwrap_or(0.0),
                    report["mib_per_s"].as_f64().unwrap_or(0.0),
                    report["wait_p50_ms"].as_f64().unwrap_or(0.0),
                    report["wait_p95_ms"].as_f64().unwrap_or(0.0),
                    report["wait_max_ms"].as_f64().unwrap_or(0.0),
                    report["peak_rss_mib"].as_f64().unwrap_or(0.0),
                );
            }
            Ok(())
        }
        Command::Report {
            pipeline,
            out,
            batches,
            plan,
            optimize,
        } => report(&pipeline, &out, batches, plan.as_deref(), optimize),
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
                ..Default::default()
            })?;
            if let Some(path) = out {
                write(&path, &p.to_json())?;
            }
            show(json, &p, || p.to_json());
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
                Some(path) => Profile::from_json(&read(&path, "profile file")?)
                    .map_err(|e| in_file(&path, e))?,
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
            show(json, &plan, || plan.to_json());
            Ok(())
        }
        Command::Plan { pipeline, json, .. } => {
            let (ds, opts) = PipelineSpec::load(&pipeline)?.build()?;
            let plan = ds.physical_plan(&opts)?;
            show(json, &plan, || plan.to_json());
            Ok(())
        }
        Command::Run {
            pipeline,
            limit,
            seed,
            threads,
            json,
            plan,
            optimize,
        } => {
            let (mut ds, mut opts) = PipelineSpec::load(&pipeline)?.build()?;
            if optimize {
                opts.optimize = Some(Default::default());
            }
            if let Some(path) = plan {
                opts.plan = Some(
                    Plan::from_json(&read(&path, "plan file")?)
                        .map_err(|e| in_file(&path, e))?
                        .into(),
                );
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
                    Next::Rows(_, n) => outputs += n as u64,
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
            show(json, &report, || {
                serde_json::to_string_pretty(&report).unwrap_or_default()
            });
            if optimize {
                match ds.auto_plan(&opts)? {
                    Some(plan) => eprintln!("plan made from this run's step times:\n{plan}"),
                    None => eprintln!(
                        "no plan: the run ended before it had timed 1% of an epoch (16-100 samples)"
                    ),
                }
            }
            Ok(())
        }
    }
}

/// `sluice report`: runs the pipeline (up to `batches` outputs) as `run` does, then writes
/// the page to `out` and prints its path. The page is written whether or not the run failed;
/// a failure is then the command's error.
fn report(
    pipeline: &str,
    out: &str,
    batches: Option<u64>,
    plan: Option<&str>,
    optimize: bool,
) -> Result<(), sluice::Error> {
    let (ds, mut opts) = PipelineSpec::load(pipeline)?.build()?;
    if optimize {
        opts.optimize = Some(Default::default());
    }
    let mut plan_json = None;
    if let Some(path) = plan {
        let text = read(path, "plan file")?;
        let plan = Plan::from_json(&text).map_err(|e| in_file(path, e))?;
        plan_json = serde_json::to_value(&plan).ok();
        opts.plan = Some(plan.into());
    }
    let mut exec = ds.iter(&opts)?;
    let (mut outputs, mut failed) = (0u64, None);
    while batches.is_none_or(|n| outputs < n) {
        match exec.next_timeout(Duration::from_millis(200)) {
            Next::Item(_) => outputs += 1,
            Next::Rows(_, n) => outputs += n as u64,
            Next::Err(e) => {
                failed = Some(e);
                break;
            }
            Next::Timeout => {}
            Next::End => break,
        }
    }
    exec.close(Duration::from_secs(5));
    if optimize {
        plan_json = ds
            .auto_plan(&opts)?
            .and_then(|p| serde_json::to_value(&*p).ok());
    }
    let stats = serde_json::to_value(exec.stats())
        .map_err(|e| sluice::Error::invalid(format!("the run's statistics: {e}")))?;
    let html = sluice::report::render_report(
        &stats,
        &ds.plan().to_string(),
        plan_json.as_ref(),
        sluice::report::DEFAULT_TITLE,
    );
    sluice::report::write_report(out, &html)?;
    println!("{out}");
    match failed {
        Some(e) => {
            eprintln!("the run failed; {out} shows where");
            Err(e)
        }
        None => Ok(()),
    }
}

/// Reads `epochs` passes like a training loop and measures its waits.
fn bench(
    ds: &sluice::Dataset,
    opts: &sluice::IterOptions,
    epochs: u64,
    batches: Option<u64>,
    delay_ms: f64,
) -> Result<serde_json::Value, sluice::Error> {
    let mut waits: Vec<f64> = Vec::new();
    let (mut samples, mut bytes) = (0u64, 0u64);
    let t0 = Instant::now();
    for epoch in 0..epochs {
        let mut o = opts.clone();
        o.epoch = epoch;
        let mut exec = ds.iter(&o)?;
        let mut n = 0;
        while batches.is_none_or(|b| n < b) {
            let t = Instant::now();
            let Some(out) = exec.next() else { break };
            let out = out?;
            waits.push(t.elapsed().as_secs_f64() * 1e3);
            bytes += out.nbytes() as u64;
            samples += out.iter().next().map_or(1, |(_, v)| match v {
                sluice::Value::Tensor(t) if !t.shape().is_empty() => t.shape()[0] as u64,
                sluice::Value::List(l) => l.len() as u64,
                _ => 1,
            });
            n += 1;
            if delay_ms > 0.0 {
                std::thread::sleep(Duration::from_secs_f64(delay_ms / 1e3));
            }
        }
        exec.close(Duration::from_secs(5));
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    let mut sorted = waits.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        sorted
            .get(((sorted.len().max(1) - 1) as f64 * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let mib = bytes as f64 / (1 << 20) as f64;
    Ok(serde_json::json!({
        "epochs": epochs,
        "batches": waits.len(),
        "samples": samples,
        "mib": mib,
        "seconds": secs,
        "samples_per_s": samples as f64 / secs,
        "mib_per_s": mib / secs,
        "wait_p50_ms": pct(0.5),
        "wait_p95_ms": pct(0.95),
        "wait_max_ms": sorted.last().copied().unwrap_or(0.0),
        "peak_rss_mib": peak_rss_mib(),
    }))
}

/// Peak resident memory of this process (Linux: VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
