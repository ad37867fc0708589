//! Values to and from Python. Tensors leave Rust without a copy: numpy takes ownership of
//! the buffer (copy-on-write buffers are copied only when still shared).

use std::mem::ManuallyDrop;

use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{
    IntoPyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::Borrowed;
use sluice::{ColumnData, Error, Sample, Tensor, TensorData, Value};

use crate::errors::IntoPy;

fn array<'py, T: numpy::Element>(
    py: Python<'py>,
    shape: &[usize],
    v: Vec<T>,
) -> PyResult<Bound<'py, PyAny>> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    Ok(a.into_pyarray(py).into_any())
}

/// A batch buffer numpy views, handed back to [`sluice::recycle`] when numpy frees the
/// array: the next batch is written into memory already mapped (where a fresh buffer has
/// each of its pages zeroed by the kernel first), and already page-locked when a device
/// consumes the batches ([`sluice::recycle::pinned`]).
#[pyclass(frozen, module = "sluice._native")]
struct Recycled {
    data: Buffer,
}

/// The element types [`sluice::recycle`] keeps.
enum Buffer {
    F32(Vec<f32>),
    U8(Vec<u8>),
}

impl Drop for Recycled {
    fn drop(&mut self) {
        match &mut self.data {
            Buffer::F32(v) => sluice::recycle::give_f32(std::mem::take(v)),
            Buffer::U8(v) => sluice::recycle::give_u8(std::mem::take(v)),
        }
    }
}

/// A batch buffer as a numpy array over it, the buffer going back to [`sluice::recycle`]
/// when the array is freed.
fn recycled_array<'py>(
    py: Python<'py>,
    shape: &[usize],
    data: Buffer,
) -> PyResult<Bound<'py, PyAny>> {
    let owner = Bound::new(py, Recycled { data })?;
    let base = owner.clone().into_any();
    match &owner.get().data {
        Buffer::F32(v) => view_of(v, shape, base),
        Buffer::U8(v) => view_of(v, shape, base),
    }
}

/// A numpy array over `v` whose base is `base`, the object that owns `v`.
fn view_of<'py, T: numpy::Element>(
    v: &[T],
    shape: &[usize],
    base: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let view = numpy::ndarray::ArrayViewD::from_shape(IxDyn(shape), v)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    // SAFETY: `base` holds the buffer unchanged until numpy drops the array (the buffer is
    // never reallocated: `Recycled` is frozen).
    Ok(unsafe { PyArrayDyn::borrow_from_array(&view, base) }.into_any())
}

/// A value as a Python object.
pub fn value_to_py(py: Python<'_>, v: Value) -> PyResult<Bound<'_, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::Float(f) => f.into_pyobject(py)?.into_any(),
        Value::Str(s) => PyString::new(py, &s).into_any(),
        Value::Bytes(b) => PyBytes::new(py, &b).into_any(),
        Value::List(items) => {
            let l = PyList::empty(py);
            for it in items {
                l.append(value_to_py(py, it)?)?;
            }
            l.into_any()
        }
        Value::Tensor(t) => {
            let (shape, data) = t.into_parts();
            match data {
                TensorData::Bool(v) => array(py, &shape, v)?,
                TensorData::U8(v) if sluice::recycle::worth_keeping::<u8>(v.capacity()) => {
                    recycled_array(py, &shape, Buffer::U8(v))?
                }
                TensorData::U8(v) => array(py, &shape, v)?,
                TensorData::I8(v) => array(py, &shape, v)?,
                TensorData::U16(v) => array(py, &shape, v)?,
                TensorData::I16(v) => array(py, &shape, v)?,
                TensorData::U32(v) => array(py, &shape, v)?,
                TensorData::I32(v) => array(py, &shape, v)?,
                TensorData::U64(v) => array(py, &shape, v)?,
                TensorData::I64(v) => array(py, &shape, v)?,
                TensorData::F32(v) if sluice::recycle::worth_keeping::<f32>(v.capacity()) => {
                    recycled_array(py, &shape, Buffer::F32(v))?
                }
                TensorData::F32(v) => array(py, &shape, v)?,
                TensorData::F64(v) => array(py, &shape, v)?,
            }
        }
        Value::Object(o) => object_to_py(py, o)?,
        Value::Column(c) => match c.0.as_any().downcast_ref::<sluice::ArrowColumn>() {
            Some(a) => arrow_to_py(py, a)?,
            None => value_to_py(py, c.to_value().py()?)?,
        },
    })
}

/// An Arrow column as Python values: strings straight from the array's buffers into a list
/// (as pyarrow's `to_pylist` does); anything else as its ordinary values.
fn arrow_to_py<'py>(py: Python<'py>, a: &sluice::ArrowColumn) -> PyResult<Bound<'py, PyAny>> {
    use sluice::arrow_array::cast::AsArray;
    use sluice::arrow_array::Array;
    use sluice::arrow_schema::DataType;
    let arr = &a.0;
    if arr.null_count() == 0 {
        match arr.data_type() {
            DataType::Utf8 => {
                return Ok(PyList::new(py, arr.as_string::<i32>().iter().flatten())?.into_any())
            }
            DataType::LargeUtf8 => {
                return Ok(PyList::new(py, arr.as_string::<i64>().iter().flatten())?.into_any())
            }
            _ => {}
        }
    }
    value_to_py(py, a.to_value().py()?)
}

/// A buffer of a split reply as a 1-D uint8 numpy array: a tensor's buffer is handed to
/// numpy as is (viewed as bytes), a `bytes` value copied once.
pub fn out_of_band_to_py(
    py: Python<'_>,
    b: sluice_remote::wire::OutOfBand,
) -> PyResult<Bound<'_, PyAny>> {
    use sluice_remote::wire::OutOfBand;
    match b {
        OutOfBand::Bytes(b) => array(py, &[b.len()], b.to_vec()),
        // Views: the array that owns the tensor's `Vec` stays their base.
        OutOfBand::Tensor(t) => value_to_py(py, Value::Tensor(t))?
            .call_method1("reshape", (-1,))?
            .call_method1("view", ("uint8",)),
    }
}

/// A report (anything serde serialises) as the Python dicts and lists of its JSON.
pub fn json_to_py<'py>(
    py: Python<'py>,
    value: &impl serde::Serialize,
) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_string(value).map_err(|e| {
        pyo3::exceptions::PyRuntimeError::new_err(format!("cannot convert a report: {e}"))
    })?;
    py.import("json")?.call_method1("loads", (json,))
}

/// The bytes of a C-contiguous uint8 numpy array (a buffer of a split reply), borrowed.
pub fn u8_array_bytes<'a>(a: &'a numpy::PyReadonlyArray1<'_, u8>) -> PyResult<&'a [u8]> {
    a.as_slice()
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("reply buffer: {e}")))
}

/// A field name and its interned Python string.
type KeyEntry = (sluice::Name, ManuallyDrop<Py<PyString>>);

thread_local! {
    /// Field names already turned into interned Python strings. Samples share their names
    /// ([`sluice::Name`]), so this is a handful of entries; the strings stay alive for good,
    /// like every interned name.
    // `ManuallyDrop`: never decref'd, since a thread-local may be dropped after the
    // interpreter is gone.
    static KEYS: std::cell::RefCell<Vec<KeyEntry>> =
        const { std::cell::RefCell::new(Vec::new()) };
}
const MAX_KEYS: usize = 256;

/// The interned Python string for a field name (looked up instead of built per sample).
pub(crate) fn key<'py>(py: Python<'py>, k: &sluice::Name) -> Bound<'py, PyString> {
    KEYS.with_borrow_mut(|keys| {
        // The same name object first (sources and ops share theirs): no text compared with
        // every other name's on the way.
        if let Some((_, s)) = keys
            .iter()
            .find(|(c, _)| c.ptr_eq(k))
            .or_else(|| keys.iter().find(|(c, _)| c == k))
        {
            return s.bind(py).clone();
        }
        let s = PyString::intern(py, k);
        if keys.len() < MAX_KEYS {
            keys.push((k.clone(), ManuallyDrop::new(s.clone().unbind())));
        }
        s
    })
}

/// The shared name for a Python field name: the cached one when Python hands back a name
/// sluice gave it (the usual case: a UDF returns the dict it got), a new one otherwise.
fn field_name(k: &Bound<'_, PyString>) -> sluice::Result<sluice::Name> {
    let cached = KEYS.with_borrow(|keys| {
        keys.iter()
            .find(|(_, s)| s.as_ptr() == k.as_ptr())
            .map(|(c, _)| c.clone())
    });
    if let Some(c) = cached {
        return Ok(c);
    }
    let text = k.to_cow().map_err(|e| Error::type_error(e.to_string()))?;
    Ok(sluice::Name::new(&text))
}

/// A sample as a `dict`; a sample that is a Python object ([`object_sample`]) as that object.
pub fn sample_to_py(py: Python<'_>, s: Sample) -> PyResult<Bound<'_, PyAny>> {
    let s = match s.into_object() {
        Ok(o) => return object_to_py(py, o),
        Err(s) => s,
    };
    let d = PyDict::new(py);
    for (k, v) in s {
        d.set_item(key(py, &k), value_to_py(py, v)?)?;
    }
    Ok(d.into_any())
}

/// A Python object handed through the engine unconverted ([`sluice::Object`]), with the
/// bytes its arrays, bytes and strings hold (what a memory cap counts).
pub fn object_sample(obj: Bound<'_, PyAny>) -> Sample {
    let bytes = match obj.cast::<PyDict>() {
        Ok(d) => d.values().iter().map(|v| py_nbytes(&v)).sum(),
        Err(_) => py_nbytes(&obj),
    };
    Sample::from_object(sluice::Object::sized(obj.unbind(), bytes))
}

/// Bytes a Python value holds, for the kinds that can be big (others count 0).
fn py_nbytes(v: &Bound<'_, PyAny>) -> usize {
    if let Ok(a) = v.cast::<PyUntypedArray>() {
        return a.shape().iter().product::<usize>() * a.dtype().itemsize();
    }
    if let Ok(b) = v.cast::<PyBytes>() {
        return b.as_bytes().len();
    }
    if let Ok(s) = v.cast::<PyString>() {
        return s.len().unwrap_or(0);
    }
    0
}

fn object_to_py(py: Python<'_>, o: sluice::Object) -> PyResult<Bound<'_, PyAny>> {
    match o.downcast::<Py<PyAny>>() {
        Ok(sluice::Owned::Unique(obj)) => Ok(obj.into_bound(py)),
        Ok(sluice::Owned::Shared(obj)) => Ok(obj.bind(py).clone()),
        Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(
            "an object in the pipeline that the Python bindings did not make",
        )),
    }
}

/// `obj` as a dict, or an error naming `what` and the type it got.
pub fn as_dict<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    what: &str,
) -> sluice::Result<&'a Bound<'py, PyDict>> {
    // An exact dict first: a pointer compare, where the subclass check is a call into the
    // interpreter under the stable ABI.
    obj.cast_exact::<PyDict>()
        .or_else(|_| obj.cast::<PyDict>())
        .map_err(|_| {
            let ty = obj
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            Error::type_error(format!("{what} must be a dict, got {ty}"))
        })
}

fn tensor_from<T: numpy::Element + Copy>(
    arr: &Bound<'_, PyAny>,
    wrap: fn(Vec<T>) -> TensorData,
) -> Option<sluice::Result<Tensor>> {
    let a = arr.cast::<PyArrayDyn<T>>().ok()?;
    let ro = a.readonly();
    let view = ro.as_array();
    let shape = view.shape().to_vec();
    let data: Vec<T> = match view.as_slice() {
        Some(s) => s.to_vec(),
        None => view.iter().copied().collect(),
    };
    Some(Tensor::new(shape, wrap(data)))
}

fn numpy_to_tensor(obj: &Bound<'_, PyAny>) -> sluice::Result<Tensor> {
    macro_rules! try_types {
        ($($t:ty => $var:ident),*) => {
            $(if let Some(t) = tensor_from::<$t>(obj, TensorData::$var) { return t; })*
        };
    }
    try_types!(u8 => U8, f32 => F32, i64 => I64, i32 => I32, f64 => F64, bool => Bool,
               i8 => I8, u16 => U16, i16 => I16, u32 => U32, u64 => U64);
    let dtype = obj
        .getattr("dtype")
        .and_then(|d| d.str())
        .map(|s| s.to_string())
        .unwrap_or_default();
    Err(Error::type_error(format!(
        "unsupported numpy dtype '{dtype}'"
    )))
}

/// An `int` (or subclass) as a value.
fn int_value(i: &Bound<'_, PyInt>) -> sluice::Result<Value> {
    i.extract::<i64>()
        .map(Value::Int)
        .map_err(|_| Error::type_error("integer does not fit in 64 bits"))
}

/// A `str` (or subclass) as a value.
fn str_value(s: &Bound<'_, PyString>) -> sluice::Result<Value> {
    s.to_cow()
        .map(|s| Value::Str(s.into()))
        .map_err(|e| Error::type_error(e.to_string()))
}

/// A value of an exact built-in scalar type (`int`, `float`, `str`, `None`) without running
/// Python code; `None` for anything else. The common values of a dict a function returns,
/// told apart by their type pointer (under the stable ABI each subclass check `py_to_value`
/// makes after this is a call into the interpreter).
fn exact_scalar(obj: &Bound<'_, PyAny>) -> Option<sluice::Result<Value>> {
    if let Ok(i) = obj.cast_exact::<PyInt>() {
        Some(int_value(i))
    } else if let Ok(f) = obj.cast_exact::<PyFloat>() {
        Some(Ok(Value::Float(f.value())))
    } else if let Ok(s) = obj.cast_exact::<PyString>() {
        Some(str_value(s))
    } else if obj.is_none() {
        Some(Ok(Value::Null))
    } else {
        None
    }
}

/// A Python object as a value.
pub fn py_to_value(obj: &Bound<'_, PyAny>) -> sluice::Result<Value> {
    if let Some(v) = exact_scalar(obj) {
        return v;
    }
    // Subclasses of the scalar types (a bool is an int subclass: checked first).
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = obj.cast::<PyInt>() {
        return int_value(i);
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return str_value(s);
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Value::Bytes(b.as_bytes().into()));
    }
    if obj.cast::<PyUntypedArray>().is_ok() {
        return numpy_to_tensor(obj).map(Value::Tensor);
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l
            .iter()
            .map(|x| py_to_value(&x))
            .collect::<sluice::Result<_>>()
            .map(Value::List);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t
            .iter()
            .map(|x| py_to_value(&x))
            .collect::<sluice::Result<_>>()
            .map(Value::List);
    }
    // What numpy can view as an array (torch CPU tensors, jax arrays, PIL images): as
    // numpy sees it. A 0-d result (a numpy scalar) falls through to `.item()` below. Pillow
    // (since 10) exposes only `__array_interface__`, not `__array__`.
    let array_like = ["__array__", "__array_interface__", "__array_struct__"]
        .iter()
        .any(|a| obj.hasattr(*a).unwrap_or(false));
    if array_like {
        let arr = obj
            .py()
            .import("numpy")
            .and_then(|np| np.call_method1("asarray", (obj,)))
            .map_err(|e| Error::type_error(format!("numpy.asarray failed: {e}")))?;
        if arr
            .getattr("ndim")
            .and_then(|n| n.extract::<usize>())
            .unwrap_or(0)
            > 0
        {
            return numpy_to_tensor(&arr).map(Value::Tensor);
        }
    }
    // numpy scalars (np.int64(3), np.float32(1.5), ...) and other objects with .item().
    if let Ok(item) = obj.call_method0("item") {
        if !item.is(obj) && item.cast::<PyUntypedArray>().is_err() {
            return py_to_value(&item);
        }
    }
    let ty = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    Err(Error::type_error(format!(
        "cannot convert a value of type '{ty}'; supported: None, bool, int, float, str, bytes, \
         numpy arrays and scalars (and what numpy.asarray takes: torch CPU tensors, jax arrays, \
         images), lists/tuples of these"
    )))
}

/// A `dict` as a sample (non-dicts are an error naming `what`).
pub fn py_to_sample(obj: &Bound<'_, PyAny>, what: &str) -> sluice::Result<Sample> {
    let d = as_dict(obj, what)?;
    let py = obj.py();
    let mut s = Sample::with_capacity(d.len());
    let (mut pos, mut k, mut v) = (0, std::ptr::null_mut(), std::ptr::null_mut());
    // The dict's own entries, borrowed: no reference counted per key and value, as a
    // `d.iter()` would. A value that may run Python code on conversion (which could change
    // the dict) is held by a reference of its own first.
    // SAFETY: `d` is a dict we hold; `pos`, `k` and `v` are what PyDict_Next expects.
    while unsafe { pyo3::ffi::PyDict_Next(d.as_ptr(), &mut pos, &mut k, &mut v) } != 0 {
        // SAFETY: entries PyDict_Next just returned, read before any Python code runs.
        let (k, v) = unsafe { (Borrowed::from_ptr(py, k), Borrowed::from_ptr(py, v)) };
        let name = k
            .cast_exact::<PyString>()
            .or_else(|_| k.cast::<PyString>())
            .map_err(|_| Error::type_error(format!("{what}: field names must be str")))?;
        let key = field_name(&name)?;
        let value = match exact_scalar(&v) {
            Some(value) => value,
            None => py_to_value(&v.to_owned()),
        }
        .map_err(|e| Error::type_error(format!("{what}: field '{key}': {e}")))?;
        // A dict's keys are distinct (and `field_name` maps equal names to one name).
        s.push_new(key, value);
    }
    Ok(s)
}
