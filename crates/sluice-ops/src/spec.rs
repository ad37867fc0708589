//! Reading an [`OpSpec`] from its serde form, with errors that name the op, the argument and
//! its value.
//!
//! A derived deserializer for `OpSpec` (an internally tagged enum whose families are untagged
//! variants) can only say "data did not match any variant", whatever was wrong. So the tag is
//! read first and only that family's enum is tried; when it refuses the spec, the culprit is
//! found by trying again without each argument in turn: the one whose removal makes the spec
//! parse (or fail only for lacking it) is the bad one. That search runs only on the error path.

use serde::de::{Deserialize, Deserializer, Error as _};
use serde_json::{Map, Value};
use sluice_core::{Error, Result};

use crate::{audio, image, text, OpSpec};

/// The generic ops' serde form (their `OpSpec` variants, which serialize through `OpSpec`'s
/// derived `Serialize`).
#[derive(serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum GenericSpec {
    Noop,
    Select { fields: Vec<String> },
    Drop { fields: Vec<String> },
    Rename { from: String, to: String },
}

impl From<GenericSpec> for OpSpec {
    fn from(g: GenericSpec) -> Self {
        match g {
            GenericSpec::Noop => OpSpec::Noop,
            GenericSpec::Select { fields } => OpSpec::Select { fields },
            GenericSpec::Drop { fields } => OpSpec::Drop { fields },
            GenericSpec::Rename { from, to } => OpSpec::Rename { from, to },
        }
    }
}

#[derive(Clone, Copy)]
enum Family {
    Generic,
    Image,
    Audio,
    Text,
}

impl Family {
    fn of(name: &str) -> Family {
        match name.split_once('.') {
            Some(("image", _)) => Family::Image,
            Some(("audio", _)) => Family::Audio,
            Some(("text", _)) => Family::Text,
            _ => Family::Generic,
        }
    }

    fn parse(self, spec: &Map<String, Value>) -> std::result::Result<OpSpec, serde_json::Error> {
        let v = Value::Object(spec.clone());
        match self {
            Family::Generic => serde_json::from_value::<GenericSpec>(v).map(OpSpec::from),
            Family::Image => serde_json::from_value::<image::ImageSpec>(v).map(OpSpec::Image),
            Family::Audio => serde_json::from_value::<audio::AudioSpec>(v).map(OpSpec::Audio),
            Family::Text => serde_json::from_value::<text::TextSpec>(v).map(OpSpec::Text),
        }
    }
}

impl OpSpec {
    /// Every built-in op's name (`select`, `image.resize`, ...), read from the families' spec
    /// enums: what serde says an unknown name of each family should have been.
    ///
    /// ```
    /// let names = sluice_ops::OpSpec::names();
    /// assert!(names.iter().any(|n| n == "select") && names.iter().any(|n| n == "text.tokenize"));
    /// ```
    pub fn names() -> Vec<String> {
        let families = [
            ("", Family::Generic),
            ("image.", Family::Image),
            ("audio.", Family::Audio),
            ("text.", Family::Text),
        ];
        let mut names = Vec::new();
        for (prefix, family) in families {
            let mut probe = Map::new();
            probe.insert("op".into(), Value::String(format!("{prefix}\u{1}")));
            if let Err(e) = family.parse(&probe) {
                let msg = e.to_string();
                let listed = msg.split_once("expected").map_or("", |(_, l)| l);
                names.extend(listed.split('`').skip(1).step_by(2).map(String::from));
            }
        }
        names
    }

    /// Parses an op's JSON form (`{"op": "image.resize", "size": 224}`).
    ///
    /// A bad spec is an [`Error::Type`] (an argument of the wrong type) or an
    /// [`Error::InvalidArgument`] (a bad value, an unknown op or argument, a missing one),
    /// naming the op, the argument and the value:
    ///
    /// ```
    /// let e = sluice_ops::OpSpec::from_json(r#"{"op": "text.truncate", "length": -1}"#).unwrap_err();
    /// assert!(e.to_string().starts_with("text.truncate: argument length=-1"), "{e}");
    /// ```
    pub fn from_json(json: &str) -> Result<OpSpec> {
        let v: Value = serde_json::from_str(json)
            .map_err(|e| Error::invalid(format!("an op spec must be a JSON object: {e}")))?;
        OpSpec::from_value(v)
    }

    /// [`OpSpec::from_json`] for an already-parsed value.
    pub fn from_value(v: Value) -> Result<OpSpec> {
        let Value::Object(spec) = v else {
            return Err(Error::type_error(format!(
                "an op spec must be an object with an \"op\" name, got {}",
                shown(&v)
            )));
        };
        let name = match spec.get("op") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(Error::type_error(format!(
                    "an op's \"op\" name must be a string, got {}",
                    shown(other)
                )))
            }
            None => return Err(Error::invalid("an op spec needs an \"op\" name")),
        };
        let family = Family::of(&name);
        family
            .parse(&spec)
            .map_err(|e| explain(&name, &spec, family, &e))
    }
}

impl<'de> Deserialize<'de> for OpSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        OpSpec::from_value(Value::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// Turns the family's serde error into one naming the op, the argument and its value.
fn explain(
    name: &str,
    spec: &Map<String, Value>,
    family: Family,
    err: &serde_json::Error,
) -> Error {
    let msg = err.to_string();
    if msg.starts_with(&format!("unknown variant `{name}`")) {
        return Error::invalid(match family {
            Family::Generic => format!(
                "unknown op '{name}' (built-in ops: noop, select, drop, rename, image.*, \
                 audio.*, text.*)"
            ),
            _ => format!("unknown op '{name}': {msg}"),
        });
    }
    let culprit = spec.keys().filter(|k| k.as_str() != "op").find(|k| {
        let mut without = spec.clone();
        without.remove(k.as_str());
        match family.parse(&without) {
            Ok(_) => true,
            Err(e) => e.to_string() == format!("missing field `{k}`"),
        }
    });
    match culprit {
        Some(k) if msg.starts_with("unknown field") => Error::invalid(format!(
            "{name}: unknown argument '{k}'{}",
            msg.split_once(", expected")
                .map(|(_, rest)| format!(" (expected{rest})"))
                .unwrap_or_default()
        )),
        Some(k) => {
            let text = format!(
                "{name}: argument {k}={} is invalid: {}",
                shown(&spec[k.as_str()]),
                reason(&msg)
            );
            if msg.starts_with("invalid type") {
                Error::type_error(text)
            } else {
                Error::invalid(text)
            }
        }
        None => match msg
            .strip_prefix("missing field `")
            .and_then(|r| r.strip_suffix('`'))
        {
            Some(field) => Error::invalid(format!("{name}: missing required argument '{field}'")),
            None => Error::invalid(format!("{name}: {msg}")),
        },
    }
}

/// What serde expected, in words (`expected usize` → `expected an integer >= 0`).
fn reason(msg: &str) -> String {
    let Some((_, expected)) = msg.split_once(", expected ") else {
        return msg.to_string();
    };
    let words = match expected {
        "usize" | "u64" => "an integer >= 0",
        "u32" => "an integer in [0, 2^32)",
        "i64" => "an integer in [-2^63, 2^63)",
        "f32" | "f64" => "a number",
        other => other,
    };
    format!("expected {words}")
}

/// A value as JSON, cut short when long.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(77).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(json: &str) -> Error {
        OpSpec::from_json(json).unwrap_err()
    }

    #[test]
    fn bad_arguments_name_op_argument_and_value() {
        for (json, want, is_type) in [
            (
                r#"{"op":"image.resize","size":-5}"#,
                "image.resize: argument size=-5 is invalid",
                false,
            ),
            (
                r#"{"op":"image.center_crop","size":[1,2,3]}"#,
                "image.center_crop: argument size=[1,2,3]",
                false,
            ),
            (
                r#"{"op":"image.horizontal_flip","p":"x"}"#,
                "image.horizontal_flip: argument p=\"x\" is invalid: expected a number",
                true,
            ),
            (
                r#"{"op":"text.truncate","length":-1}"#,
                "text.truncate: argument length=-1 is invalid: expected an integer >= 0",
                false,
            ),
            (
                r#"{"op":"text.add_tokens","bos":1e30}"#,
                "text.add_tokens: argument bos=1e+30 is invalid: expected an integer in",
                true,
            ),
            (
                r#"{"op":"text.pad","length":8,"pad_id":"0"}"#,
                "text.pad: argument pad_id=\"0\"",
                true,
            ),
            (
                r#"{"op":"audio.resample","rate":-3}"#,
                "audio.resample: argument rate=-3 is invalid: expected an integer in [0, 2^32)",
                false,
            ),
            (
                r#"{"op":"audio.spectrogram","window":"kaiser"}"#,
                "audio.spectrogram: argument window=\"kaiser\" is invalid",
                false,
            ),
            (
                r#"{"op":"select","fields":"a"}"#,
                "select: argument fields=\"a\" is invalid",
                true,
            ),
        ] {
            let e = err(json);
            assert!(e.to_string().starts_with(want), "{json}: {e}");
            assert_eq!(matches!(e, Error::Type(_)), is_type, "{json}: {e:?}");
        }
    }

    #[test]
    fn unknown_and_missing_arguments_and_ops() {
        let e = err(r#"{"op":"image.resize","size":4,"sise":5}"#).to_string();
        assert!(
            e.starts_with("image.resize: unknown argument 'sise'"),
            "{e}"
        );
        let e = err(r#"{"op":"audio.log","epsilon":1}"#).to_string();
        assert!(
            e.starts_with("audio.log: unknown argument 'epsilon'"),
            "{e}"
        );
        let e = err(r#"{"op":"image.resize"}"#).to_string();
        assert_eq!(e, "image.resize: missing required argument 'size'");
        let e = err(r#"{"op":"image.rotate"}"#).to_string();
        assert!(e.starts_with("unknown op 'image.rotate'"), "{e}");
        let e = err(r#"{"op":"nope"}"#).to_string();
        assert!(e.starts_with("unknown op 'nope'"), "{e}");
        assert!(matches!(err(r#"{"op":3}"#), Error::Type(_)));
        assert!(matches!(err("[1]"), Error::Type(_)));
        assert!(matches!(err("{}"), Error::InvalidArgument(_)));
    }

    #[test]
    fn good_specs_still_parse_through_serde() {
        let s: OpSpec = serde_json::from_str(r#"{"op":"image.resize","size":[4,5]}"#).unwrap();
        assert!(matches!(s, OpSpec::Image(_)));
        let s: OpSpec = serde_json::from_str(r#"{"op":"rename","from":"a","to":"b"}"#).unwrap();
        assert_eq!(
            s,
            OpSpec::Rename {
                from: "a".into(),
                to: "b".into()
            }
        );
        // Through serde, the error keeps the message.
        let e = serde_json::from_str::<OpSpec>(r#"{"op":"text.pad","length":-2}"#).unwrap_err();
        assert!(
            e.to_string().contains("text.pad: argument length=-2"),
            "{e}"
        );
    }
}
