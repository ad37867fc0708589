//! Messages for pipeline files that name an unknown key: where it is (`[source]`,
//! `steps[2] (step = "batch")`), the keys allowed there and the closest one.
//!
//! serde's derived deserializers refuse unknown keys (`deny_unknown_fields` on every table of
//! the file: the top level, the source, each step kind, each op, each aggregate), but their
//! error says neither which step nor what was meant. A file that fails is parsed again part by
//! part to find the step, and the message is rewritten from serde's
//! ``unknown field `drop_lst`, expected `size` or `drop_last` ``.

use serde_json::Value;
use sluice_core::Error;

use super::StepSpec;
use sluice_io::SourceSpec;

/// The keys of the file's top level.
const TOP_KEYS: [&str; 4] = ["seed", "num_threads", "source", "steps"];

/// Where in the file `v` (the whole file, parsed) is refused, and serde's reason, rewritten;
/// `None` when every part parses on its own.
pub(super) fn locate(v: &Value) -> Option<String> {
    let Value::Object(top) = v else {
        return Some("expected a table of seed, num_threads, source and steps".into());
    };
    if let Some(k) = top.keys().find(|k| !TOP_KEYS.contains(&k.as_str())) {
        return Some(format!(
            "top level: {}",
            unknown(k, "key", &TOP_KEYS.map(String::from))
        ));
    }
    if let Some(source) = top.get("source") {
        if let Err(e) = SourceSpec::from_json(source) {
            return Some(format!("[source]: {}", explain(&e.to_string())));
        }
    }
    if let Some(Value::Array(steps)) = top.get("steps") {
        for (i, step) in steps.iter().enumerate() {
            if let Err(e) = serde_json::from_value::<StepSpec>(step.clone()) {
                let kind = match step.get("step") {
                    Some(Value::String(s)) => format!(" (step = \"{s}\")"),
                    _ => String::new(),
                };
                return Some(format!("steps[{i}]{kind}: {}", explain(&e.to_string())));
            }
        }
    }
    None
}

/// The names serde accepts for the tag `tag` of `T` (its variants), read from the message an
/// unknown name gets: derived from the enum, so a list printed from it cannot fall behind.
pub(super) fn variant_names<T: serde::de::DeserializeOwned>(tag: &str) -> Vec<String> {
    let probe = serde_json::json!({ tag: "\u{1}" });
    match serde_json::from_value::<T>(probe) {
        Ok(_) => Vec::new(),
        Err(e) => e
            .to_string()
            .split_once("expected")
            .map(|(_, list)| backticked(list))
            .unwrap_or_default(),
    }
}

/// serde's (or an op's) message with an unknown key or variant spelled out: the allowed
/// names and the closest one.
pub(super) fn explain(msg: &str) -> String {
    for (marker, what, quote) in [
        ("unknown field `", "key", '`'),
        ("unknown variant `", "name", '`'),
        ("unknown argument '", "argument", '\''),
    ] {
        let Some(at) = msg.find(marker) else {
            continue;
        };
        let rest = &msg[at + marker.len()..];
        let Some(end) = rest.find(quote) else {
            continue;
        };
        let name = &rest[..end];
        let expected = rest[end..]
            .split_once("expected")
            .map(|(_, list)| backticked(list))
            .unwrap_or_default();
        return format!("{}{}", &msg[..at], unknown(name, what, &expected));
    }
    msg.to_string()
}

/// "unknown key 'x' (allowed: a, b); did you mean 'a'?"
fn unknown(name: &str, what: &str, allowed: &[String]) -> String {
    let shown = sluice_io::show::show(name);
    let mut out = format!("unknown {what} '{shown}'");
    if allowed.is_empty() {
        out.push_str(" (none is allowed here)");
        return out;
    }
    out.push_str(&format!(" (allowed: {})", allowed.join(", ")));
    if let Some(best) = closest(name, allowed) {
        out.push_str(&format!("; did you mean '{best}'?"));
    }
    out
}

/// The words between backticks in `text`.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// The allowed name nearest `name` by edit distance, if near enough to be a typo.
pub(super) fn closest<'a>(name: &str, allowed: &'a [String]) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(2);
    allowed
        .iter()
        .map(|a| (distance(name, a), a))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a.as_str())
}

/// Levenshtein distance over characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// A pipeline file's error: the file, the line when the parser knows it, then the reason.
pub(super) fn file_error(path: Option<&str>, line: Option<usize>, reason: &str) -> Error {
    let place = match (path, line) {
        (Some(p), Some(l)) => format!("pipeline file {p}, line {l}"),
        (Some(p), None) => format!("pipeline file {p}"),
        (None, Some(l)) => format!("pipeline file, line {l}"),
        (None, None) => "pipeline file".into(),
    };
    Error::invalid(format!("{place}: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explains_unknown_keys_with_the_closest_allowed_one() {
        assert_eq!(
            explain("unknown field `drop_lst`, expected `size` or `drop_last`"),
            "unknown key 'drop_lst' (allowed: size, drop_last); did you mean 'drop_last'?"
        );
        assert_eq!(
            explain("unknown field `zzz`, there are no fields"),
            "unknown key 'zzz' (none is allowed here)"
        );
        assert_eq!(
            explain("image.resize: unknown argument 'sise' (expected one of `size`, `interpolation`)"),
            "image.resize: unknown argument 'sise' (allowed: size, interpolation); did you mean 'size'?"
        );
        assert_eq!(distance("sed", "seed"), 1);
        assert_eq!(closest("qqqqqq", &["seed".into()]), None);
    }
}
