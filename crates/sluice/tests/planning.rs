//! The planning path end to end: the physical plans of representative pipelines under the
//! default lowering, `num_threads=0`, `processes=2`, no op fusion, an optimizer plan (alone,
//! with processes, with a Ray context) and a Ray-context offload, each for three consumers (a
//! Rust loop over samples, the Python iterator, a timed run), printed and compared with
//! `tests/planning_expected.txt`. The file was written by the code before the one planner,
//! with the rewrites the executor then made itself applied; the planner must make the same
//! plans (`SLUICE_BLESS=1` rewrites the file after an intended change).

use std::fmt::Write;
use std::sync::Arc;

use sluice::*;
use sluice_optimizer::{OptimizerOptions, ProfileOptions};

/// An op flagged as Python code (GIL-bound), as a UDF is; like a UDF it has a form that
/// leaves its results as the consumer's objects (named "kept" here, so the plan shows the
/// swap).
#[derive(Debug)]
struct Py(&'static str);
impl Op for Py {
    fn name(&self) -> &str {
        self.0
    }
    fn keeping_objects(&self) -> Option<OpRef> {
        (self.0 != "kept").then(|| Arc::new(Py("kept")) as OpRef)
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": self.0})
    }
    fn meta(&self) -> OpMeta {
        OpMeta::opaque(true)
    }
    fn apply(&self, s: Sample, _: &OpContext) -> Result<Emit> {
        Ok(Emit::One(s))
    }
}

/// An op that cannot describe itself portably (a callable without cloudpickle).
#[derive(Debug)]
struct Local;
impl Op for Local {
    fn name(&self) -> &str {
        "local_only"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "local_only"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta::opaque(false)
    }
    fn ship(&self) -> Result<serde_json::Value> {
        Err(Error::invalid("local_only cannot be shipped"))
    }
    fn apply(&self, s: Sample, _: &OpContext) -> Result<Emit> {
        Ok(Emit::One(s))
    }
}

fn op(json: &str) -> OpRef {
    serde_json::from_str::<OpSpec>(json)
        .unwrap()
        .build()
        .unwrap()
}

fn map(ds: Dataset, op: OpRef) -> Dataset {
    ds.map(op, OnError::Raise, None).unwrap()
}

fn photos() -> String {
    format!(
        "{}/../../examples/fixtures/images",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    )
}

/// The pipelines: Rust and Python ops mixed, stateful steps between them, fusable ops, an
/// op that cannot travel.
/// A folder of this test's own, removed when dropped (also when the test fails).
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pipelines(scratch: &Scratch) -> Vec<(&'static str, Dataset)> {
    let noop = || op(r#"{"op":"noop"}"#);
    let mixed = {
        let ds = Dataset::range(100).shuffle(Some(1)).unwrap();
        let ds = map(map(map(ds, noop()), Arc::new(Py("udf"))), noop());
        ds.batch(8, false).unwrap().take(5)
    };
    let images = {
        let ds = Dataset::read_images(&[photos()], LabelMode::ParentDir)
            .unwrap()
            .repeat(Some(2))
            .unwrap();
        let ds = map(ds, op(r#"{"op":"image.decode"}"#));
        let ds = map(ds, op(r#"{"op":"image.random_resized_crop","size":32}"#));
        map(ds, Arc::new(Py("augment"))).batch(4, false).unwrap()
    };
    let stuck = {
        let ds = map(map(Dataset::range(50), Arc::new(Local)), noop());
        let ds = ds.shuffle_buffer(10, None).unwrap();
        let ds = map(map(ds, Arc::new(Py("py_a"))), noop());
        map(ds, Arc::new(Py("py_b"))).batch(5, true).unwrap()
    };
    // Ops that write straight into the batch's slots.
    let tensors = {
        let ds = Dataset::read_images(&[photos()], LabelMode::ParentDir).unwrap();
        let ds = map(ds, op(r#"{"op":"image.decode"}"#));
        let ds = map(ds, op(r#"{"op":"image.resize","size":[8,8]}"#));
        let ds = map(
            ds,
            op(r#"{"op":"image.normalize","mean":[0.5,0.5,0.5],"std":[0.2,0.2,0.2]}"#),
        );
        ds.batch(4, false).unwrap()
    };
    // A columnar read and nothing else: rows in bulk for a consumer that takes them.
    let rows = {
        let dir = scratch.0.join("rows").to_string_lossy().into_owned();
        Dataset::range(20)
            .write_parquet(&dir, &SinkOptions::default(), &IterOptions::default())
            .unwrap();
        Dataset::read_parquet(&[dir], None)
            .unwrap()
            .shuffle(Some(2))
            .unwrap()
    };
    // A Python function last: its results can stay the consumer's objects.
    let udf_last = map(map(Dataset::range(10), noop()), Arc::new(Py("udf")));
    vec![
        ("udf_last", udf_last),
        ("mixed", mixed),
        ("images", images),
        ("stuck", stuck),
        ("tensors", tensors),
        ("rows", rows),
    ]
}

/// A plan from the optimizer with fixed measurements (no clock): every op 100 µs per
/// sample, Python ones 400 µs, the read 10 µs, on 4 cores.
fn plan_for(ds: &Dataset) -> Arc<Plan> {
    let mut prof = ds
        .profile(&ProfileOptions {
            samples: 8,
            ..Default::default()
        })
        .unwrap();
    let n = prof.samples as f64;
    prof.source.cpu_s = 10e-6 * n;
    prof.source.wall_s = prof.source.cpu_s;
    for o in &mut prof.ops {
        o.cpu_s = if o.python { 400e-6 } else { 100e-6 } * o.items_in as f64;
        o.wall_s = o.cpu_s;
        o.parallel_efficiency = 1.0;
    }
    prof.elapsed_s = 1.0;
    let options = OptimizerOptions {
        available_local_cpus: Some(4),
        ..Default::default()
    };
    // A process pool is available, so the placement rule may choose it.
    let iter = IterOptions {
        backends: exec::Backends::default().with(Arc::new(sluice_remote::ProcessBackend::new(
            vec!["/nonexistent".into()],
            vec![],
            None,
        ))),
        ..Default::default()
    };
    Arc::new(ds.optimize(&prof, &options, &iter).unwrap())
}

/// The consumers a plan is made for: a Rust loop over samples, the Python iterator (objects,
/// columns, rows in bulk), and a run that times its ops.
fn consumers(opts: &IterOptions) -> Vec<(&'static str, IterOptions)> {
    vec![
        ("samples", opts.clone()),
        (
            "python",
            IterOptions {
                objects: true,
                columns: true,
                row_batches: true,
                ..opts.clone()
            },
        ),
        (
            "timed",
            IterOptions {
                time_ops: true,
                ..opts.clone()
            },
        ),
    ]
}

fn printed() -> String {
    let mut out = String::new();
    let scratch =
        Scratch(std::env::temp_dir().join(format!("sluice-planning-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&scratch.0);
    for (name, ds) in pipelines(&scratch) {
        let base = IterOptions {
            seed: 3,
            num_threads: Some(2),
            ..Default::default()
        };
        let plan = plan_for(&ds);
        let ray = RunContext::Remote {
            backend: exec::backend::RAY.into(),
            workers: 3,
        };
        let runs: Vec<(&str, IterOptions)> = vec![
            ("default", base.clone()),
            (
                "num_threads=0",
                IterOptions {
                    num_threads: Some(0),
                    ..base.clone()
                },
            ),
            (
                "fuse_ops=false",
                IterOptions {
                    fuse_ops: false,
                    ..base.clone()
                },
            ),
            (
                "processes=2",
                IterOptions {
                    context: RunContext::Processes { workers: 2 },
                    ..base.clone()
                },
            ),
            (
                "plan",
                IterOptions {
                    plan: Some(plan.clone()),
                    ..base.clone()
                },
            ),
            (
                "plan+processes=2",
                IterOptions {
                    plan: Some(plan.clone()),
                    context: RunContext::Processes { workers: 2 },
                    ..base.clone()
                },
            ),
            (
                "ray",
                IterOptions {
                    context: ray.clone(),
                    ..base.clone()
                },
            ),
            (
                "plan+ray",
                IterOptions {
                    plan: Some(plan.clone()),
                    context: ray.clone(),
                    ..base.clone()
                },
            ),
        ];
        for (how, opts) in runs {
            for (consumer, opts) in consumers(&opts) {
                let phys = ds.physical_plan(&opts).unwrap();
                writeln!(out, "## {name} / {how} / {consumer}\n{phys}").unwrap();
            }
        }
        let explicit = ds.offload_plan(&base, exec::backend::RAY, 3).unwrap();
        writeln!(out, "## {name} / ray decisions").unwrap();
        for d in &explicit.decisions {
            writeln!(out, "- {d}").unwrap();
        }
        writeln!(out).unwrap();
    }
    out
}

#[test]
fn physical_plans_are_what_they_were() {
    let path = format!(
        "{}/tests/planning_expected.txt",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    let got = printed();
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
        assert_eq!(g, w, "line {}", i + 1);
    }
    assert_eq!(got.lines().count(), want.lines().count());
}

/// A consumer that decodes on its GPU: the decode and crop (and the flip after them) become
/// their draws in every plan that keeps the pixels off the host, and in none that reads them.
#[test]
fn device_decode_leaves_decode_and_crop_to_the_consumer() {
    let crops = |then: Option<OpRef>| {
        let ds = Dataset::read_images(&[photos()], LabelMode::ParentDir).unwrap();
        let ds = map(ds, op(r#"{"op":"image.decode"}"#));
        let ds = map(ds, op(r#"{"op":"image.random_resized_crop","size":32}"#));
        let ds = map(ds, op(r#"{"op":"image.horizontal_flip"}"#));
        let ds = match then {
            Some(o) => map(ds, o),
            None => ds,
        };
        ds.batch(4, false).unwrap()
    };
    let gpu = IterOptions {
        objects: true,
        columns: true,
        row_batches: true,
        device_decode: true,
        ..Default::default()
    };
    let plan = |ds: &Dataset, opts: &IterOptions| ds.physical_plan(opts).unwrap().to_string();
    for opts in [
        gpu.clone(),
        IterOptions {
            fuse_ops: false,
            ..gpu.clone()
        },
        IterOptions {
            num_threads: Some(0),
            ..gpu.clone()
        },
    ] {
        let p = plan(&crops(None), &opts);
        assert!(p.contains("device_draws"), "{p}");
        assert!(
            !p.contains("horizontal_flip") && !p.contains("random_resized_crop"),
            "{p}"
        );
    }
    // Not asked, timed, or the pixels read on the host (a Python function, a jitter).
    let timed = IterOptions {
        time_ops: true,
        ..gpu.clone()
    };
    let jitter = op(r#"{"op":"image.color_jitter","brightness":0.2}"#);
    for (ds, opts) in [
        (crops(None), IterOptions::default()),
        (crops(None), timed),
        (crops(Some(Arc::new(Py("augment")))), gpu.clone()),
        (crops(Some(jitter)), gpu.clone()),
    ] {
        let p = plan(&ds, &opts);
        assert!(!p.contains("device_draws"), "{p}");
    }
}
