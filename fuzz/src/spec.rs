//! Keeps a fuzzed pipeline file inside the sandbox: the parser and builder see the file as
//! written, but what it then *runs* reads only small fixtures (never the fuzzing machine's
//! files or the network) and a `range` source stays small, so a run is bounded by the spec's
//! own arithmetic rather than by the size of a disk.

use std::sync::OnceLock;

use serde_json::Value;
use sluice::PipelineSpec;

const TINY_PNG: &[u8] = include_bytes!("../../crates/sluice-imgproc/tests/fixtures/rgb8.png");

struct Fixtures {
    images: String,
    jsonl: String,
    text: String,
    csv: String,
    tar: String,
}

fn tar_member(out: &mut Vec<u8>, name: &str, data: &[u8]) {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let dir = crate::scratch_dir().join("fixtures");
        let images = dir.join("images");
        for class in ["a", "b"] {
            std::fs::create_dir_all(images.join(class)).expect("fixture dir");
            std::fs::write(images.join(class).join("x.png"), TINY_PNG).expect("fixture");
        }
        let write = |name: &str, data: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, data).expect("fixture");
            p.display().to_string()
        };
        let mut tar = Vec::new();
        for (name, data) in [
            ("s/0.png", TINY_PNG),
            ("s/0.cls", b"1"),
            ("s/1.txt", b"hello"),
            ("s/1.cls", b"0"),
        ] {
            tar_member(&mut tar, name, data);
        }
        tar.resize(tar.len() + 1024, 0);
        Fixtures {
            images: images.display().to_string(),
            jsonl: write(
                "data.jsonl",
                b"{\"id\": 1, \"text\": \"a b\", \"input_ids\": [1, 2, 3], \"x\": 0.5}\n\
                  {\"id\": 2, \"text\": \"c\", \"input_ids\": [4], \"x\": 1.5}\n",
            ),
            text: write("data.txt", b"one line\nanother line\n"),
            csv: write("data.csv", b"id,name,x\n1,a,0.5\n2,\"b, c\",1.5\n"),
            tar: write("shard.tar", &tar),
        }
    })
}

fn walk(v: &mut Value, source: Option<&str>) {
    match v {
        Value::Object(map) => {
            let kind = map.get("source").and_then(Value::as_str).map(str::to_string);
            let kind = kind.as_deref().or(source);
            for (k, child) in map.iter_mut() {
                match k.as_str() {
                    "paths" => {
                        let f = fixtures();
                        let path = match kind {
                            Some("read_files" | "read_images") => &f.images,
                            Some("read_text") => &f.text,
                            Some("read_jsonl") => &f.jsonl,
                            Some("read_csv") => &f.csv,
                            Some("read_webdataset") => &f.tar,
                            _ => "/nonexistent/sluice-fuzz",
                        };
                        *child = Value::Array(vec![path.into()]);
                    }
                    "tokenizer" => *child = "/nonexistent/tokenizer.json".into(),
                    "n" if kind == Some("range") => {
                        if let Some(n) = child.as_u64() {
                            *child = (n % 1000).into();
                        }
                    }
                    _ => walk(child, kind),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|x| walk(x, source)),
        _ => {}
    }
}

/// `spec` with its data paths replaced by fixtures of the same format, tokenizer paths by a
/// path that does not exist and `range(n)` by `range(n % 1000)`; `None` if it does not
/// survive a JSON round trip.
pub fn confine(spec: &PipelineSpec) -> Option<PipelineSpec> {
    let mut v = serde_json::to_value(spec).ok()?;
    walk(&mut v, None);
    serde_json::from_value(v).ok()
}
