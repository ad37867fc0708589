//! The data model: a sample is an ordered map of named [`Value`]s; tensors share their buffer.

use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Element type of a [`Tensor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Bool,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F32,
    F64,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }
    /// numpy's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::U32 => "uint32",
            DType::I32 => "int32",
            DType::U64 => "uint64",
            DType::I64 => "int64",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }
}

/// Typed tensor storage. One variant per [`DType`], so kernels get real slices, not bytes.
#[derive(Clone, PartialEq)]
pub enum TensorData {
    Bool(Vec<bool>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Runs `$body` with `$v` bound to the inner `Vec` of any [`TensorData`] variant.
#[macro_export]
macro_rules! with_tensor_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::TensorData::Bool($v) => $body,
            $crate::TensorData::U8($v) => $body,
            $crate::TensorData::I8($v) => $body,
            $crate::TensorData::U16($v) => $body,
            $crate::TensorData::I16($v) => $body,
            $crate::TensorData::U32($v) => $body,
            $crate::TensorData::I32($v) => $body,
            $crate::TensorData::U64($v) => $body,
            $crate::TensorData::I64($v) => $body,
            $crate::TensorData::F32($v) => $body,
            $crate::TensorData::F64($v) => $body,
        }
    };
}

impl TensorData {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::Bool(_) => DType::Bool,
            TensorData::U8(_) => DType::U8,
            TensorData::I8(_) => DType::I8,
            TensorData::U16(_) => DType::U16,
            TensorData::I16(_) => DType::I16,
            TensorData::U32(_) => DType::U32,
            TensorData::I32(_) => DType::I32,
            TensorData::U64(_) => DType::U64,
            TensorData::I64(_) => DType::I64,
            TensorData::F32(_) => DType::F32,
            TensorData::F64(_) => DType::F64,
        }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        with_tensor_data!(self, v => v.len())
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// An empty buffer of `dtype` with room for `cap` elements.
    pub fn with_capacity(dtype: DType, cap: usize) -> Self {
        match dtype {
            DType::Bool => TensorData::Bool(Vec::with_capacity(cap)),
            DType::U8 => TensorData::U8(Vec::with_capacity(cap)),
            DType::I8 => TensorData::I8(Vec::with_capacity(cap)),
            DType::U16 => TensorData::U16(Vec::with_capacity(cap)),
            DType::I16 => TensorData::I16(Vec::with_capacity(cap)),
            DType::U32 => TensorData::U32(Vec::with_capacity(cap)),
            DType::I32 => TensorData::I32(Vec::with_capacity(cap)),
            DType::U64 => TensorData::U64(Vec::with_capacity(cap)),
            DType::I64 => TensorData::I64(Vec::with_capacity(cap)),
            DType::F32 => TensorData::F32(Vec::with_capacity(cap)),
            DType::F64 => TensorData::F64(Vec::with_capacity(cap)),
        }
    }
    /// Appends all of `other`'s elements; both must have the same dtype.
    pub fn extend_from(&mut self, other: &TensorData) -> Result<()> {
        macro_rules! ext {
            ($($var:ident),*) => {
                match (self, other) {
                    $((TensorData::$var(a), TensorData::$var(b)) => { a.extend_from_slice(b); Ok(()) })*
                    (a, b) => Err(Error::type_error(format!(
                        "cannot combine {} and {} tensors", a.dtype().name(), b.dtype().name()))),
                }
            };
        }
        ext!(Bool, U8, I8, U16, I16, U32, I32, U64, I64, F32, F64)
    }
    /// Elements `[start, end)` as a new buffer.
    pub fn slice(&self, start: usize, end: usize) -> TensorData {
        macro_rules! sl {
            ($($var:ident),*) => {
                match self { $(TensorData::$var(v) => TensorData::$var(v[start..end].to_vec()),)* }
            };
        }
        sl!(Bool, U8, I8, U16, I16, U32, I32, U64, I64, F32, F64)
    }
}

impl fmt::Debug for TensorData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.dtype().name(), self.len())
    }
}

/// A tensor's shape, inline up to four dimensions: cloning a tensor (a cache hit, a sample
/// handed to two branches) or taking it apart and rebuilding it in an op then allocates
/// nothing — at a million cached samples a second, the shape's allocation and its free on
/// the collating thread cost more than the lookup. `vec![h, w, c].into()` makes one.
pub type Shape = SmallVec<[usize; 4]>;

/// An n-dimensional array: dtype + shape + a shared, copy-on-write buffer (row-major).
///
/// ```
/// use sluice_model::{Tensor, TensorData};
/// let t = Tensor::new(vec![2, 2], TensorData::U8(vec![1, 2, 3, 4])).unwrap();
/// assert_eq!(t.shape(), &[2, 2]);
/// ```
#[derive(Clone, PartialEq)]
pub struct Tensor {
    shape: Shape,
    data: Arc<TensorData>,
}

impl Tensor {
    /// A tensor of `shape` over `data`; fails if the sizes disagree.
    pub fn new(shape: impl Into<Shape>, data: TensorData) -> Result<Self> {
        let shape = shape.into();
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::invalid(format!(
                "tensor shape {shape:?} needs {n} elements, buffer has {}",
                data.len()
            )));
        }
        Ok(Tensor {
            shape,
            data: Arc::new(data),
        })
    }
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }
    /// The buffer (shared).
    pub fn data(&self) -> &TensorData {
        &self.data
    }
    /// A mutable buffer; copies it first if another tensor shares it.
    pub fn data_mut(&mut self) -> &mut TensorData {
        Arc::make_mut(&mut self.data)
    }
    /// Takes the shape and buffer out, copying the buffer only if it is shared.
    pub fn into_parts(self) -> (Shape, TensorData) {
        let data = Arc::try_unwrap(self.data).unwrap_or_else(|shared| (*shared).clone());
        (self.shape, data)
    }
    /// Total size of the buffer in bytes.
    pub fn nbytes(&self) -> usize {
        self.data.len() * self.dtype().size()
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}, {:?})", self.dtype().name(), self.shape)
    }
}

/// One field's value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Arc<str>),
    Bytes(Arc<[u8]>),
    Tensor(Tensor),
    List(Vec<Value>),
    /// A batch column kept as its source decoded it (see [`Column`]).
    Column(Column),
    /// An object of the bindings' own handed through untouched (see [`Object`]).
    Object(Object),
}

/// An object the bindings made, handed through the engine as it is: a Python function's
/// result that nothing after the function reads goes to the consumer unconverted (see
/// [`crate::Op::keeping_objects`]). Only stages that never look at values (`take`,
/// `shuffle_buffer`) and ops that take such objects themselves ever hold one, inside a
/// sample made by [`crate::Sample::from_object`].
///
/// ```
/// use sluice_model::{Object, Sample};
/// let s = Sample::from_object(Object::new(String::from("a Python dict, say")));
/// let o = s.into_object().unwrap();
/// assert_eq!(o.downcast::<String>().unwrap().as_str(), "a Python dict, say");
/// ```
#[derive(Clone)]
pub struct Object(Arc<dyn std::any::Any + Send + Sync>, usize);

impl Object {
    /// Wraps `value`.
    pub fn new<T: std::any::Any + Send + Sync>(value: T) -> Self {
        Object(Arc::new(value), 0)
    }
    /// Wraps `value`, which holds about `bytes` bytes (what a memory cap counts it as).
    pub fn sized<T: std::any::Any + Send + Sync>(value: T, bytes: usize) -> Self {
        Object(Arc::new(value), bytes)
    }
    /// The bytes it was said to hold ([`Object::sized`]; 0 when unknown).
    pub fn nbytes(&self) -> usize {
        self.1
    }
    /// The value, if it is a `T`.
    pub fn downcast_ref<T: std::any::Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
    /// The value itself if it is a `T` held nowhere else, a shared reference to it if it is
    /// held elsewhere too (a filter's kept input), `Err` if it is not a `T`.
    pub fn downcast<T: std::any::Any + Send + Sync>(self) -> std::result::Result<Owned<T>, Self> {
        match self.0.downcast::<T>() {
            Ok(arc) => Ok(match Arc::try_unwrap(arc) {
                Ok(v) => Owned::Unique(v),
                Err(arc) => Owned::Shared(arc),
            }),
            Err(any) => Err(Object(any, self.1)),
        }
    }
}

/// What [`Object::downcast`] gives: the value, or a reference shared with other holders.
pub enum Owned<T> {
    Unique(T),
    Shared(Arc<T>),
}

impl<T> std::ops::Deref for Owned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Owned::Unique(v) => v,
            Owned::Shared(a) => a,
        }
    }
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Object")
    }
}

impl PartialEq for Object {
    /// Objects are equal when they are the same object.
    fn eq(&self, other: &Object) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A batch's column as its source decoded it (an Arrow array for Parquet), handed to the
/// consumer with no value made per row. Only a `batch()` that reads a columnar source and is
/// the plan's last stage, or feeds an op that takes columns ([`crate::Op::takes_columns`]: a
/// Python function), makes columns, so other ops never see one; anything else that meets one
/// works on [`Column::to_value`].
#[derive(Clone, Debug)]
pub struct Column(pub Arc<dyn ColumnData>);

/// What a [`Column`] holds.
pub trait ColumnData: Send + Sync + fmt::Debug {
    /// Rows in the column.
    fn len(&self) -> usize;
    /// Whether it has no rows.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Payload size in bytes.
    fn nbytes(&self) -> usize;
    /// The column as ordinary values: exactly what collating its rows gives.
    fn to_value(&self) -> Result<Value>;
    /// The concrete column, for code that knows its type (the bindings, Arrow export).
    fn as_any(&self) -> &dyn std::any::Any;
}

impl Column {
    /// The column as ordinary values (see [`ColumnData::to_value`]).
    pub fn to_value(&self) -> Result<Value> {
        self.0.to_value()
    }
}

impl PartialEq for Column {
    /// Columns are equal when their values are (what collating the rows gives).
    fn eq(&self, other: &Column) -> bool {
        matches!((self.to_value(), other.to_value()), (Ok(a), Ok(b)) if a == b)
    }
}

impl Value {
    /// This value with any [`Column`] turned into ordinary values.
    pub fn materialized(self) -> Result<Value> {
        match self {
            Value::Column(c) => c.to_value(),
            v => Ok(v),
        }
    }
    /// A short name of the value's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::Tensor(_) => "tensor",
            Value::List(_) => "list",
            Value::Column(_) => "column",
            Value::Object(_) => "object",
        }
    }
    /// Approximate payload size in bytes (for stats and memory budgets).
    pub fn nbytes(&self) -> usize {
        match self {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) | Value::Float(_) => 8,
            Value::Str(s) => s.len(),
            Value::Bytes(b) => b.len(),
            Value::Tensor(t) => t.nbytes(),
            Value::List(l) => l.iter().map(Value::nbytes).sum(),
            Value::Column(c) => c.0.nbytes(),
            // What the bindings measured when they wrapped it (their arrays' bytes).
            Value::Object(o) => o.nbytes(),
        }
    }
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    /// The bytes of a `Bytes` (or the UTF-8 of a `Str`).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            Value::Str(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.into())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v.into())
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v.into())
    }
}
impl From<Tensor> for Value {
    fn from(v: Tensor) -> Self {
        Value::Tensor(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_checks_size() {
        assert!(Tensor::new(vec![2, 3], TensorData::F32(vec![0.0; 5])).is_err());
        let t = Tensor::new(vec![2, 3], TensorData::F32(vec![0.0; 6])).unwrap();
        assert_eq!(t.nbytes(), 24);
    }

    #[test]
    fn shared_buffer_is_copy_on_write() {
        let mut a = Tensor::new(vec![2], TensorData::U8(vec![1, 2])).unwrap();
        let b = a.clone();
        if let TensorData::U8(v) = a.data_mut() {
            v[0] = 9;
        }
        assert_eq!(b.data(), &TensorData::U8(vec![1, 2]));
        assert_eq!(a.data(), &TensorData::U8(vec![9, 2]));
    }

    #[test]
    fn into_parts_moves_unique_buffer() {
        let t = Tensor::new(vec![3], TensorData::I64(vec![1, 2, 3])).unwrap();
        let ptr = match t.data() {
            TensorData::I64(v) => v.as_ptr(),
            _ => unreachable!(),
        };
        let (_, data) = t.into_parts();
        match data {
            TensorData::I64(v) => assert_eq!(v.as_ptr(), ptr, "unique buffer must not be copied"),
            _ => unreachable!(),
        }
    }

    #[test]
    fn extend_rejects_mixed_dtypes() {
        let mut a = TensorData::U8(vec![1]);
        assert!(a.extend_from(&TensorData::F32(vec![1.0])).is_err());
        a.extend_from(&TensorData::U8(vec![2])).unwrap();
        assert_eq!(a, TensorData::U8(vec![1, 2]));
    }
}
