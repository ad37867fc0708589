//! Fixed pipelines the checkpoint and plan targets load their inputs into: one of each shape
//! whose checkpoint tree or plan differs (re-sequencing nodes, shards, caches, repeats).

use std::sync::OnceLock;

use sluice::{Dataset, IterOptions, OnError, OpSpec, Result};

fn op(json: &str) -> sluice::OpRef {
    serde_json::from_str::<OpSpec>(json)
        .expect("op spec")
        .build()
        .expect("op")
}

fn build(k: usize) -> Result<Dataset> {
    let noop = || op(r#"{"op": "noop"}"#);
    let select = || op(r#"{"op": "select", "fields": ["id"]}"#);
    match k {
        // Index order: shuffle, shard, repeat, then element-wise ops and a batch.
        0 => Dataset::range(50)
            .shuffle(None)?
            .shard(1, 3, true)?
            .repeat(Some(2))?
            .map(noop(), OnError::Raise, None)?
            .map(select(), OnError::Skip, None)?
            .batch(4, false),
        // Re-sequencing nodes: shuffle_buffer and take (restart records in the checkpoint).
        1 => Dataset::range(40)
            .map(noop(), OnError::Raise, None)?
            .shuffle_buffer(8, None)?
            .take(30)
            .batch(3, true),
        // A batch followed by per-item work re-sequences too.
        2 => Dataset::range(25)
            .batch(4, false)?
            .map(noop(), OnError::Raise, None)?
            .prefetch(2),
        // An endless repeat cut by take.
        3 => Ok(Dataset::range(20).repeat(None)?.shuffle(Some(5))?.take(15)),
        // Sharded, for elastic checkpoints: rank/world vary (they are not fingerprinted).
        _ => {
            let i = k - 4;
            let world = 1 + (i as u64) % 3;
            let rank = (i as u64 / 3) % world;
            Dataset::range(30)
                .shuffle(None)?
                .shard(rank, world, true)?
                .repeat(Some(3))?
                .map(select(), OnError::Raise, None)?
                .batch(2, false)
        }
    }
}

/// Number of fixed pipelines.
pub const COUNT: usize = 10;

/// Fixed pipeline `k % COUNT` (built once).
pub fn pipeline(k: usize) -> &'static Dataset {
    static ALL: OnceLock<Vec<Dataset>> = OnceLock::new();
    &ALL.get_or_init(|| (0..COUNT).map(|k| build(k).expect("pipeline")).collect())[k % COUNT]
}

/// Run options: small chunks and one or two threads, so a run is cheap.
pub fn options(threads: usize) -> IterOptions {
    IterOptions {
        seed: 0,
        num_threads: Some(1 + threads % 2),
        chunk_size: Some(3),
        ..Default::default()
    }
}

/// Writes real inputs for the `state` and `plan` targets into `dir` (what `seed.sh` asks for
/// through `SLUICE_FUZZ_SEEDS`): checkpoints of every fixed pipeline after 0, 1, 3 and 7
/// outputs, each rank's checkpoint of the sharded pipeline merged elastically, and the
/// optimizer's plan for every pipeline. Each file starts with the target's flags byte.
pub fn write_seeds(target: &str, dir: &std::path::Path) -> Result<()> {
    use sluice::{OptimizerOptions, ProfileOptions};
    std::fs::create_dir_all(dir).map_err(|e| sluice::Error::io(dir.display().to_string(), e))?;
    let write = |name: String, flags: u8, text: String| {
        let mut bytes = vec![flags];
        bytes.extend_from_slice(text.as_bytes());
        std::fs::write(dir.join(name), bytes).map_err(|e| sluice::Error::io("seed", e))
    };
    let opts = options(0);
    for k in 0..COUNT {
        let ds = pipeline(k);
        if target == "state" {
            for n in [0, 1, 3, 7] {
                let mut exec = ds.iter(&opts)?;
                for _ in 0..n {
                    let _ = exec.next();
                }
                let st = ds.state(&opts, &exec)?;
                let text = serde_json::to_string(&st).expect("state json");
                write(format!("state-{k}-{n}"), k as u8, text)?;
            }
        } else {
            let prof = ds.profile(&ProfileOptions {
                samples: 20,
                ..Default::default()
            })?;
            let plan = ds.optimize(&prof, &OptimizerOptions::default(), &opts)?;
            write(format!("plan-{k}"), k as u8, plan.to_json())?;
        }
    }
    if target == "state" {
        // Ranks 0..3 of a world of 3 (pipelines 6 and 9 are ranks 0 and 1), one per line.
        let mut lines = Vec::new();
        for k in [6, 9] {
            let ds = pipeline(k);
            let mut exec = ds.iter(&opts)?;
            let _ = exec.next();
            lines.push(serde_json::to_string(&ds.state(&opts, &exec)?).expect("json"));
        }
        write("elastic".into(), 0x80 | 2, lines.join("\n"))?;
    }
    Ok(())
}
