//! Element-wise ops: the unit the planner reorders, fuses and places.

use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::rng::SampleRng;
use crate::sample::Sample;
use crate::value::Value;

/// What an op does to data, as far as reordering is concerned (Pecan's AutoOrder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Reads or decodes (e.g. bytes → image); changes representation.
    Decode,
    /// Changes geometry and makes data smaller (crop, downscale).
    SizeReducing,
    /// Changes geometry without shrinking it (flip, rotate).
    Geometric,
    /// Per-pixel/per-element arithmetic (jitter, normalize).
    PixelWise,
    /// Anything else, including Python UDFs: never moved unless marked movable.
    Opaque,
}

/// What an op declares about itself: its read and write sets, kind and randomness.
///
/// The planner only moves ops whose declarations make the move safe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpMeta {
    /// Fields read.
    pub reads: Vec<String>,
    /// Fields written (created or replaced).
    pub writes: Vec<String>,
    /// Kind, for reordering.
    pub kind: OpKind,
    /// Draws randomness (so its output depends on seed/epoch/index).
    pub random: bool,
    /// Runs Python code and needs the GIL.
    pub python: bool,
}

impl OpMeta {
    /// Metadata of an opaque op (reads/writes unknown).
    pub fn opaque(python: bool) -> Self {
        OpMeta {
            reads: vec![],
            writes: vec![],
            kind: OpKind::Opaque,
            random: false,
            python,
        }
    }
}

/// Where a sample is when an op runs on it: the coordinates randomness derives from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpContext {
    /// The iteration seed.
    pub seed: u64,
    /// Epoch number (0-based).
    pub epoch: u64,
    /// Position of the sample in its epoch (before filtering).
    pub index: u64,
    /// Index among the outputs of an upstream flat_map (0 otherwise).
    pub sub: u64,
    /// The op's stable id in the pipeline.
    pub op_id: u64,
}

impl OpContext {
    /// The generator for this op on this sample.
    pub fn rng(&self) -> SampleRng {
        let index = crate::rng::combine(self.index, self.sub);
        SampleRng::new(self.seed, self.epoch, index, self.op_id)
    }
}

/// What an element-wise op produces for one input.
#[derive(Debug, Clone, PartialEq)]
pub enum Emit {
    /// One output (map).
    One(Sample),
    /// No output (a filter that rejected the sample).
    Drop,
    /// Zero or more outputs (flat_map).
    Many(Vec<Sample>),
}

/// An element-wise operation on samples.
///
/// Implementations must be pure given `(sample, cx)`: any randomness comes from `cx.rng()`.
///
/// ```
/// use sluice_core::{Emit, Op, OpContext, OpMeta, Result, Sample, Value};
/// #[derive(Debug)]
/// struct AddOne;
/// impl Op for AddOne {
///     fn name(&self) -> &str { "add_one" }
///     fn spec(&self) -> serde_json::Value { serde_json::json!({"op": "add_one"}) }
///     fn meta(&self) -> OpMeta { OpMeta::opaque(false) }
///     fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
///         let v = s.require("id", "add_one")?.as_int().unwrap_or(0);
///         s.set("id", Value::Int(v + 1));
///         Ok(Emit::One(s))
///     }
/// }
/// ```
pub trait Op: Send + Sync + fmt::Debug {
    /// The API name, as shown in plans and errors (e.g. `random_resized_crop`).
    fn name(&self) -> &str;
    /// The serde form of the op (a tagged object), used to print, save and ship plans.
    fn spec(&self) -> serde_json::Value;
    /// Read/write sets and kind.
    fn meta(&self) -> OpMeta;
    /// The fields of a `map` output given the input's: what later steps are checked
    /// against and what `ds.columns` reports without running. By default the input's plus
    /// what the op writes; ops that remove fields (`select`, `drop`, `rename`) override it.
    /// `None`: only running tells (Python code).
    fn output_fields(&self, input: &[String]) -> Option<Vec<String>> {
        let meta = self.meta();
        if meta.python {
            return None;
        }
        let mut out = input.to_vec();
        for w in meta.writes {
            if !out.contains(&w) {
                out.push(w);
            }
        }
        Some(out)
    }
    /// The portable form another process rebuilds the op from (a worker process, a Ray
    /// actor). Built-in ops ship their spec; Python UDFs add their pickled function.
    fn ship(&self) -> Result<serde_json::Value> {
        Ok(self.spec())
    }
    /// A digest of the code the op runs when its [`Op::spec`] does not describe it (a
    /// Python function's bytecode, constants and captured values): checkpoints save it, so
    /// one is not resumed under a function whose body changed. `None` (the default): the
    /// spec says everything.
    fn code_digest(&self) -> Option<String> {
        None
    }
    /// Counters the op keeps about its own work over its lifetime (e.g. `text.tokenize`'s
    /// lines through its fast path and through `tokenizers`); a run's stats show how much
    /// each grew while it ran ([`crate::stats::OpReport`]). Empty (the default) for most ops.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Applies the op to one sample.
    fn apply(&self, sample: Sample, cx: &OpContext) -> Result<Emit>;
    /// Applies the op to many samples at once. Ops with a per-call cost (e.g. taking the
    /// GIL) override this to pay it once per chunk.
    fn apply_many(&self, inputs: Vec<(Sample, OpContext)>) -> Vec<Result<Emit>> {
        inputs
            .into_iter()
            .map(|(s, cx)| self.apply(s, &cx))
            .collect()
    }
    /// One op doing this op and then `next` (the op right after it in a chain, with id
    /// `next_op_id`) more cheaply than the two apart, or `None` (the default). Applied by
    /// [`crate::plan::fuse::fuse_ops`] when plans are lowered with
    /// [`crate::LowerOptions::fuse_ops`].
    ///
    /// The fused op runs with *this* op's id in its [`OpContext`]; whatever `next` draws at
    /// random it must draw from a context with `next_op_id`, so fused and unfused runs make
    /// the same random choices. Its output may differ from the unfused pair's only as its
    /// docs say (e.g. an approximate but faster kernel), and its `name` must say it is a
    /// fusion (plans and errors show it).
    fn fuse_next(&self, next: &dyn Op, next_op_id: u64) -> Option<OpRef> {
        let _ = (next, next_op_id);
        None
    }
    /// For an op [`Op::fuse_next`] made: the id of the op it took in. A run that times its
    /// ops ([`crate::stats::ops`]) records the fused op as the two, splitting its cost where
    /// its first part ended ([`crate::stats::ops::FirstPart`]; all of it to the first op when
    /// it does not say). `None` (the default): not a fusion.
    fn fused_second(&self) -> Option<u64> {
        None
    }
    /// For a consumer that decodes images on its GPU ([`crate::plan::device`]): the op that
    /// leaves this one's pixel work to the device and makes only its random draws (and
    /// `next`'s, when it takes `next` in too: the returned `bool`), from the same generators,
    /// so the device makes the crops the host would have. `None` (the default): the op's
    /// work stays on the host.
    fn device_draws(&self, next: Option<(&dyn Op, u64)>) -> Option<(OpRef, bool)> {
        let _ = next;
        None
    }
    /// This op in a form that takes samples made by [`Sample::from_object`] and leaves its
    /// results as such objects, for when nothing after it reads their fields and the
    /// consumer takes objects (a Python function's dict then reaches the loop as the
    /// function returned it, unconverted); `None` (the default): the op reads fields.
    /// Applied by [`crate::plan::objects::keep_objects`] only.
    fn keeping_objects(&self) -> Option<OpRef> {
        None
    }
    /// Whether the op takes batches whose fields are [`crate::Column`]s (a source's own
    /// arrays) as they are: a Python function does, since the bindings hand columns to
    /// Python straight from their buffers. A batch that reads a columnar source then keeps
    /// the columns when this op is next; other ops get ordinary values.
    fn takes_columns(&self) -> bool {
        false
    }
    /// Whether the op only selects, drops or renames fields: a value it keeps reaches its
    /// output unchanged, so an op on that field may run after it instead of before
    /// ([`crate::plan::slots`]). `false` (the default): it may look at what it reads.
    fn moves_fields(&self) -> bool {
        false
    }
    /// This op's way of writing its output straight into a batch, when it replaces one
    /// field by a float32 tensor made from that field alone (`normalize`); `None` (the
    /// default): it does not. A batch right after the op's chain then runs it while stacking
    /// ([`crate::plan::slots`]).
    fn slot_writer(&self) -> Option<&dyn SlotWriter> {
        None
    }
}

/// How an op writes its output for a sample straight into that sample's slot of a batch
/// ([`Op::slot_writer`]): one pass from the op's input to the batch, where running the op
/// and then stacking writes a float32 copy per sample and copies it again.
///
/// The op must replace [`SlotWriter::field`] in place and read nothing else, and writing
/// its output must give the same bytes as [`Op::apply`] does.
///
/// # Safety
///
/// The batch buffer is not zeroed first: when `write_slot` returns `Ok`, it must have
/// written every element of `out` (the batch is then read as initialised floats).
///
/// ```
/// use std::mem::MaybeUninit;
/// use sluice_core::{OpContext, Result, SlotWriter, Value};
/// /// Writes an int `x` as the one-element float32 tensor `[x / 2]`.
/// struct Half;
/// // SAFETY: writes its one element whenever it returns Ok.
/// unsafe impl SlotWriter for Half {
///     fn field(&self) -> &str { "x" }
///     fn slot_shape(&self, input: &Value) -> Option<Vec<usize>> {
///         input.as_int().map(|_| vec![1])
///     }
///     fn write_slot(&self, input: &Value, _cx: &OpContext, out: &mut [MaybeUninit<f32>]) -> Result<()> {
///         out[0].write(input.as_int().unwrap_or(0) as f32 / 2.0);
///         Ok(())
///     }
/// }
/// let mut slot = [MaybeUninit::uninit()];
/// let cx = OpContext { seed: 0, epoch: 0, index: 0, sub: 0, op_id: 0 };
/// Half.write_slot(&Value::Int(3), &cx, &mut slot)?;
/// // SAFETY: written on Ok.
/// assert_eq!(unsafe { slot[0].assume_init() }, 1.5);
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub unsafe trait SlotWriter: Send + Sync {
    /// The field the op reads and replaces.
    fn field(&self) -> &str;
    /// The shape of the op's float32 output for `input`, or `None` when `input` is not what
    /// the op takes as it is: the batch then runs the op on each sample first, as its chain
    /// would (so a bad input fails as it would there).
    fn slot_shape(&self, input: &Value) -> Option<Vec<usize>>;
    /// Writes the op's output for `input` (for which `slot_shape` gave a shape) into `out`,
    /// that shape's size: every element, when it returns `Ok`.
    fn write_slot(&self, input: &Value, cx: &OpContext, out: &mut [MaybeUninit<f32>])
        -> Result<()>;
}

/// A shared op.
pub type OpRef = Arc<dyn Op>;
