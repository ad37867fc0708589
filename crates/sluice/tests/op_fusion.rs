//! Op fusion end to end: `decode` + `random_resized_crop` run as one DCT-scaled op by default,
//! not with `fuse_ops: false` or under exact plans, and still after an optimizer plan that
//! reordered the crop next to the decode.

use std::sync::Arc;

use sluice::*;
use sluice_optimizer::{OptimizerOptions, ProfileOptions};

fn photos() -> String {
    format!(
        "{}/../../examples/fixtures/images",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    )
}

fn op(json: &str) -> OpRef {
    serde_json::from_str::<OpSpec>(json)
        .unwrap()
        .build()
        .unwrap()
}

/// read → decode → [jitter] → random_resized_crop(32), `epochs` times over the 8 photos.
fn pipeline(jitter_first: bool, epochs: u64) -> Dataset {
    let mut ds = Dataset::read_images(&[photos()], LabelMode::ParentDir)
        .unwrap()
        .repeat(Some(epochs))
        .unwrap()
        .map(op(r#"{"op":"image.decode"}"#), OnError::Raise, None)
        .unwrap();
    if jitter_first {
        let jitter = r#"{"op":"image.color_jitter","brightness":0.4,"contrast":0.4}"#;
        ds = ds.map(op(jitter), OnError::Raise, None).unwrap();
    }
    ds.map(
        op(r#"{"op":"image.random_resized_crop","size":32}"#),
        OnError::Raise,
        None,
    )
    .unwrap()
}

fn run(ds: &Dataset, opts: &IterOptions) -> Vec<Sample> {
    ds.iter(opts).unwrap().collect::<Result<_>>().unwrap()
}

fn stage0(ds: &Dataset, opts: &IterOptions) -> String {
    ds.physical_plan(opts).unwrap().stages[0].kind.label()
}

fn image(s: &Sample) -> &[u8] {
    match s.get("image") {
        Some(Value::Tensor(t)) => match t.data() {
            TensorData::U8(d) => d,
            _ => panic!(),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn fused_by_default_off_by_option_and_thread_independent() {
    let ds = pipeline(false, 4);
    let on = IterOptions::default();
    let off = IterOptions {
        fuse_ops: false,
        ..Default::default()
    };
    assert_eq!(stage0(&ds, &on), "read+decode_random_resized_crop");
    assert_eq!(stage0(&ds, &off), "read+decode+random_resized_crop");

    let fused = run(
        &ds,
        &IterOptions {
            num_threads: Some(1),
            ..on.clone()
        },
    );
    for threads in [2, 4] {
        let again = run(
            &ds,
            &IterOptions {
                num_threads: Some(threads),
                ..on.clone()
            },
        );
        assert_eq!(fused, again, "{threads} threads");
    }
    let unfused = run(&ds, &off);
    assert_eq!(fused.len(), 32);
    let mut differ = 0;
    for (a, b) in fused.iter().zip(&unfused) {
        assert_eq!(a.get("label"), b.get("label"));
        assert_eq!(a.get("path"), b.get("path"));
        let (x, y) = (image(a), image(b));
        assert_eq!(x.len(), y.len());
        let mean = x
            .iter()
            .zip(y)
            .map(|(&p, &q)| p.abs_diff(q) as f64)
            .sum::<f64>()
            / x.len() as f64;
        assert!(mean < 2.5, "mean |Δ| {mean}");
        differ += usize::from(x != y);
    }
    assert!(differ > 0, "no crop took the scaled decode");
}

#[test]
fn plans_fuse_after_reorder_but_never_when_exact() {
    // decode → jitter → crop: nothing to fuse as written; the reorder rule moves the crop
    // before the jitter, next to the decode, and the run fuses them. (One epoch: over
    // several, the caching rule keeps decoded images instead, and there is no decode left
    // in the chain to fuse.)
    let ds = pipeline(true, 1);
    assert_eq!(
        stage0(&ds, &IterOptions::default()),
        "read+decode+color_jitter+random_resized_crop"
    );
    let prof = ds
        .profile(&ProfileOptions {
            samples: 8,
            ..Default::default()
        })
        .unwrap();
    let iter = IterOptions::default();
    let plan = ds
        .optimize(&prof, &OptimizerOptions::default(), &iter)
        .unwrap();
    // The plan itself names the unfused ops, so it loads and applies as before.
    let plan = Arc::new(sluice_optimizer::Plan::from_json(&plan.to_json()).unwrap());
    assert!(plan.to_string().contains("random_resized_crop"));
    let with_plan = IterOptions {
        plan: Some(plan.clone()),
        ..Default::default()
    };
    let labels = ds.physical_plan(&with_plan).unwrap().to_string();
    assert!(labels.contains("decode_random_resized_crop"), "{labels}");
    assert_eq!(run(&ds, &with_plan).len(), 8);
    let no_fusion = IterOptions {
        fuse_ops: false,
        ..with_plan.clone()
    };
    let labels = ds.physical_plan(&no_fusion).unwrap().to_string();
    assert!(!labels.contains("decode_random_resized_crop"), "{labels}");

    // An exact plan keeps every op exact: unfused, byte-identical to `fuse_ops: false`.
    let ds = pipeline(false, 2);
    let exact = OptimizerOptions {
        exact: true,
        ..Default::default()
    };
    let plan = ds.optimize(&prof_of(&ds), &exact, &iter).unwrap();
    let exact_run = IterOptions {
        plan: Some(Arc::new(plan)),
        ..Default::default()
    };
    assert!(!ds
        .physical_plan(&exact_run)
        .unwrap()
        .to_string()
        .contains("decode_random_resized_crop"));
    let off = IterOptions {
        fuse_ops: false,
        ..Default::default()
    };
    assert_eq!(run(&ds, &exact_run), run(&ds, &off));
}

fn prof_of(ds: &Dataset) -> Profile {
    ds.profile(&ProfileOptions {
        samples: 8,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn offload_plans_name_unfused_ops_and_runs_fuse_after() {
    let ds = pipeline(false, 1);
    let plan = ds.offload_plan(&IterOptions::default(), "ray", 2).unwrap();
    let ids: Vec<u64> = plan.stages.iter().flat_map(|s| s.op_ids.clone()).collect();
    assert_eq!(ids.len(), 2, "{plan}");
    let opts = IterOptions {
        context: RunContext::Remote {
            backend: "ray".into(),
            workers: 2,
        },
        ..Default::default()
    };
    let phys = ds.physical_plan(&opts).unwrap();
    assert_eq!(
        phys.stages[0].kind.label(),
        "read+decode_random_resized_crop"
    );
}
