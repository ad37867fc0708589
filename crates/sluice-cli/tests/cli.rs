//! The `sluice` binary end to end on the example pipeline and images.

use std::process::Command;

fn sluice(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .current_dir(format!(
            "{}/../..",
            std::env::var("CARGO_MANIFEST_DIR").unwrap()
        ))
        .output()
        .expect("run sluice");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn profile_plan_run_and_bench_a_pipeline_file() {
    let dir = tempfile::tempdir().unwrap();
    let (prof, plan) = (
        dir.path().join("p.json").display().to_string(),
        dir.path().join("plan.json").display().to_string(),
    );
    let (ok, out, err) = sluice(&[
        "profile",
        "examples/pipeline.toml",
        "--samples",
        "8",
        "--out",
        &prof,
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("read_images") && out.contains("select"),
        "{out}"
    );
    let (ok, out, err) = sluice(&[
        "plan",
        "examples/pipeline.toml",
        "--optimize",
        "--profile",
        &prof,
        "--out",
        &plan,
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("predicted") && out.contains("bottleneck"),
        "{out}"
    );
    let (ok, out, err) = sluice(&[
        "run",
        "examples/pipeline.toml",
        "--plan",
        &plan,
        "--limit",
        "3",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("consumer: 3 outputs"), "{out}");
    let (ok, out, err) = sluice(&[
        "bench",
        "examples/pipeline.toml",
        "--batches",
        "4",
        "--epochs",
        "2",
        "--json",
    ]);
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["batches"], 8);
    assert!(report["wait_p95_ms"].as_f64().unwrap() >= 0.0);
    let (ok, _, err) = sluice(&["bench", "examples/pipeline.toml", "--epochs", "0"]);
    assert!(!ok && err.contains("epochs"), "{err}");
    let (ok, _, err) = sluice(&["run", "examples/pipeline.toml", "--plan", &prof]);
    assert!(!ok && err.contains("not a sluice plan"), "{err}");
}

/// The library entry the wheel's console script calls: statuses come back, the process is not
/// exited (a host such as the Python extension decides that).
#[test]
fn main_from_returns_the_exit_status() {
    assert_eq!(sluice_ml_cli::main_from(["sluice", "--version"]), 0);
    assert_eq!(sluice_ml_cli::main_from(["sluice", "--help"]), 0);
    assert_eq!(sluice_ml_cli::main_from(["sluice", "frobnicate"]), 2);
    assert_eq!(sluice_ml_cli::main_from(["sluice", "run"]), 2);
    assert_eq!(
        sluice_ml_cli::main_from(["sluice", "run", "no-such-pipeline.toml"]),
        1
    );
}

#[test]
fn files_that_are_not_regular_or_are_damaged_are_refused_naming_them() {
    // Read until memory ran out before; now refused without being opened.
    let (ok, _, err) = sluice(&["run", "/dev/zero"]);
    assert!(
        !ok && err.contains("/dev/zero: not a regular file (a character device)"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    std::fs::write(&plan, "{\"stages\": [").unwrap();
    let plan = plan.display().to_string();
    let (ok, _, err) = sluice(&["run", "examples/pipeline.toml", "--plan", &plan]);
    assert!(!ok && err.contains(&format!("{plan}: ")), "{err}");
    let typo = dir.path().join("p.toml");
    std::fs::write(
        &typo,
        "[source]\nsource = \"range\"\nn = 4\n[[steps]]\nstep = \"batch\"\nsize = 2\ndrop_lst = true\n",
    )
    .unwrap();
    let (ok, _, err) = sluice(&["run", &typo.display().to_string()]);
    assert!(!ok && err.contains("did you mean 'drop_last'?"), "{err}");
}

/// The help lists every source, step and op a pipeline file may name (it listed 5 of 9
/// sources and 8 of 12 steps by hand).
#[test]
fn help_lists_every_source_step_and_op() {
    let (ok, out, err) = sluice(&["--help"]);
    assert!(ok, "{err}");
    let (sources, steps, ops) = sluice::spec_vocabulary();
    assert_eq!(sources.len(), 9, "{sources:?}");
    assert_eq!(steps.len(), 12, "{steps:?}");
    for name in sources.iter().chain(&steps).chain(&ops) {
        assert!(out.contains(name.as_str()), "{name} missing from:\n{out}");
    }
    assert!(
        out.contains("read_tfrecord") && out.contains("repartition"),
        "{out}"
    );
}

/// `--optimize` is `iter(optimize=True)` from the command line: the first pass is timed and
/// the plan made from its step times is what later passes run.
#[test]
fn optimize_times_the_first_pass_and_plans_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.toml");
    std::fs::write(
        &file,
        "[source]\nsource = \"range\"\nn = 2000\n[[steps]]\nstep = \"map\"\nop = \"noop\"\n\
         [[steps]]\nstep = \"batch\"\nsize = 10\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let (ok, _, err) = sluice(&["run", &file, "--optimize"]);
    assert!(ok, "{err}");
    assert!(
        err.contains("plan made from this run's step times"),
        "{err}"
    );
    assert!(err.contains("predicted"), "{err}");
    let (ok, out, err) = sluice(&["bench", &file, "--epochs", "2", "--optimize", "--json"]);
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["batches"], 400);
    assert!(
        report["plan"].as_str().unwrap().contains("predicted"),
        "{report}"
    );
    // The report of an --optimize run shows the plan made from it.
    let page = dir.path().join("r.html").display().to_string();
    let (ok, _, err) = sluice(&["report", &file, "-o", &page, "--optimize"]);
    assert!(ok, "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("predicted capacity"), "no plan in the page");
}

/// `sluice report` runs a pipeline file and writes its page; a failed run still gets one,
/// naming the op, and the exit status says it failed.
#[test]
fn report_writes_the_page_of_a_run_and_of_a_failed_one() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("pipeline.html");
    let page_s = page.display().to_string();
    let (ok, out, err) = sluice(&[
        "report",
        "examples/pipeline.toml",
        "-o",
        &page_s,
        "--batches",
        "3",
    ]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), page_s);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!doctype html>") && html.contains("select"));
    assert!(html.matches(r#"<svg class="plot""#).count() >= 8, "{html}");
    assert!(
        html.contains("&quot;outputs&quot;: 3"),
        "three batches, then the page"
    );
    assert!(!html.contains("http://") && !html.contains("https://"));

    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not an image").unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        serde_json::json!({
            "source": {"source": "read_files", "paths": [notes.display().to_string()]},
            "steps": [{"step": "map", "op": "image.decode"}, {"step": "batch", "size": 1}],
        })
        .to_string(),
    )
    .unwrap();
    let failed_page = dir.path().join("bad.html");
    let (ok, _, err) = sluice(&[
        "report",
        &bad.display().to_string(),
        "-o",
        &failed_page.display().to_string(),
    ]);
    assert!(!ok && err.contains("the run failed"), "{err}");
    let html = std::fs::read_to_string(&failed_page).unwrap();
    assert!(
        html.contains(r#"id="error""#) && html.contains("decode"),
        "{html}"
    );

    let (ok, _, err) = sluice(&["report", "examples/pipeline.toml", "--batches", "0"]);
    assert!(!ok && err.contains("--batches"), "{err}");
}
