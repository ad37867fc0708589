//! Pipeline files with absurd sizes (found with the `spec` fuzz target, fuzz/README.md): each
//! either runs, reserving memory for what the data holds rather than for the declared size,
//! or fails with an error naming the argument — never an allocation abort.

use sluice::{PipelineSpec, TensorData, Value};

fn file(steps: &str, threads: &str) -> String {
    format!("{threads}\n[source]\nsource = \"range\"\nn = 10\n{steps}")
}

fn run(text: &str) -> sluice::Result<Vec<sluice::Sample>> {
    let (ds, opts) = PipelineSpec::parse(text, "toml")?.build()?;
    ds.iter(&opts)?.collect()
}

fn ids(batch: &sluice::Sample) -> Vec<i64> {
    match batch.get("id") {
        Some(Value::Tensor(t)) => match t.data() {
            TensorData::I64(v) => v.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_batch_larger_than_the_data_is_one_batch() {
    let out = run(&file(
        "[[steps]]\nstep = \"batch\"\nsize = 1000000000000000",
        "",
    ))
    .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(ids(&out[0]), (0..10).collect::<Vec<_>>());
}

#[test]
fn a_shuffle_buffer_larger_than_the_data_shuffles_all_of_it() {
    let steps = "[[steps]]\nstep = \"shuffle_buffer\"\nsize = 1000000000000000";
    let out = run(&file(steps, "")).unwrap();
    let mut got: Vec<i64> = out
        .iter()
        .map(|s| s.get("id").and_then(Value::as_int).unwrap())
        .collect();
    got.sort();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

#[test]
fn absurd_pack_length_partitions_and_threads_are_errors() {
    let pack = "[[steps]]\nstep = \"pack\"\nfield = \"id\"\nlength = 1000000000000000";
    let e = run(&file(pack, "")).unwrap_err().to_string();
    assert!(e.contains("above the limit of 16777216"), "{e}");
    let part = "[[steps]]\nstep = \"repartition\"\nn = 1000000000000000";
    let e = run(&file(part, "")).unwrap_err().to_string();
    assert!(e.contains("at most 1048576 partitions"), "{e}");
    let e = run(&file("", "num_threads = 100000"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("num_threads must be in 1..=1024"), "{e}");
}
