"""tf.data peer (tensorflow-cpu): graph-mode tf.image ops, `num_parallel_calls=AUTOTUNE`,
`prefetch(AUTOTUNE)`, numpy batches out.

- cv:  tf.io.decode_jpeg → sample_distorted_bounding_box crop (area 0.08–1, ratio 3/4–4/3)
       resized to 224 (bilinear, antialias) → flip → colour jitter (brightness, contrast,
       saturation, hue in a random order, p=0.8) → grayscale p=0.2 → 23-tap separable Gaussian
       blur with reflect padding, σ∈[0.1, 2], p=0.5 → normalise → CHW
- nlp: TextLineDataset → batch(128) → HF tokenizers `encode_batch` in a `tf.py_function`
       (tf.data has no op for a tokenizer.json BPE; this is what users write)
- asr: not implemented (tf.signal has no phase vocoder; the brief does not ask for it)
"""
from __future__ import annotations

import os
from pathlib import Path

from . import common as C

NAME = "tf.data"
WORKLOADS = ("cv", "nlp")


def _cv_map(tf):
    mean = tf.constant(C.MEAN, tf.float32)
    std = tf.constant(C.STD, tf.float32)
    half = C.CV_BLUR_KERNEL // 2
    xs = tf.range(-half, half + 1, dtype=tf.float32)

    def maybe(p, fn, img):
        return tf.cond(tf.random.uniform([]) < p, lambda: fn(img), lambda: img)

    def jitter(img):
        b, c, s, h = C.CV_JITTER
        ops = [
            lambda x: x * tf.random.uniform([], 1 - b, 1 + b),
            lambda x: tf.image.adjust_contrast(x, tf.random.uniform([], 1 - c, 1 + c)),
            lambda x: tf.image.adjust_saturation(x, tf.random.uniform([], 1 - s, 1 + s)),
            lambda x: tf.image.adjust_hue(x, tf.random.uniform([], -h, h)),
        ]
        order = tf.random.shuffle(tf.range(4))
        for k in range(4):
            idx = order[k]
            img = tf.switch_case(idx, [lambda f=f: tf.clip_by_value(f(img), 0.0, 1.0) for f in ops])
        return img

    def gray(img):
        return tf.tile(tf.image.rgb_to_grayscale(img), [1, 1, 3])

    def blur(img):
        sigma = tf.random.uniform([], *C.CV_BLUR_SIGMA)
        k = tf.exp(-(xs ** 2) / (2.0 * sigma ** 2))
        k = k / tf.reduce_sum(k)
        x = tf.pad(img[None], [[0, 0], [half, half], [half, half], [0, 0]], mode="REFLECT")
        kh = tf.tile(tf.reshape(k, [-1, 1, 1, 1]), [1, 1, 3, 1])
        kw = tf.tile(tf.reshape(k, [1, -1, 1, 1]), [1, 1, 3, 1])
        x = tf.nn.depthwise_conv2d(x, kh, [1, 1, 1, 1], "VALID")
        x = tf.nn.depthwise_conv2d(x, kw, [1, 1, 1, 1], "VALID")
        return x[0]

    def fn(path, label):
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(img), bounding_boxes=tf.zeros([1, 0, 4]), min_object_covered=0.0,
            aspect_ratio_range=C.CV_RATIO, area_range=C.CV_SCALE, max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        img = tf.slice(img, begin, size)
        img = tf.image.resize(img, [C.CV_SIZE, C.CV_SIZE], method="bilinear", antialias=True)
        img = tf.clip_by_value(img / 255.0, 0.0, 1.0)
        img = maybe(C.CV_FLIP_P, tf.image.flip_left_right, img)
        img = maybe(C.CV_JITTER_P, jitter, img)
        img = maybe(C.CV_GRAY_P, gray, img)
        img = maybe(C.CV_BLUR_P, blur, img)
        img = (img - mean) / std
        return {"image": tf.transpose(img, [2, 0, 1]), "label": tf.cast(label, tf.int64)}

    return fn


def make_iter(workload: str, data_dir: Path, *, samples: int | None = None, seed: int = 0,
              workers: int = 2, **_):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.random.set_seed(seed)
    data_dir = Path(data_dir)
    auto = tf.data.AUTOTUNE
    if workload == "cv":
        items = C.cv_items(data_dir, samples, seed)
        paths = tf.constant([p for p, _ in items])
        labels = tf.constant([l for _, l in items], tf.int64)
        ds = tf.data.Dataset.from_tensor_slices((paths, labels))
        ds = ds.map(_cv_map(tf), num_parallel_calls=auto).batch(C.CV_BATCH)
    elif workload == "nlp":
        tok = C.NLPSample(data_dir)

        def encode(batch):
            return tok.ids_batch([b.decode("utf-8") for b in batch.numpy()])

        ds = tf.data.TextLineDataset(str(C.text_file(data_dir)))
        if samples is not None:
            ds = ds.repeat().take(samples)
        ds = ds.batch(C.NLP_BATCH).map(
            lambda b: {"input_ids": tf.ensure_shape(
                tf.py_function(encode, [b], tf.int64), [None, C.NLP_LEN])},
            num_parallel_calls=auto)
    else:
        raise ValueError(f"tf.data peer has no {workload!r} workload")
    ds = ds.prefetch(auto)
    yield from ds.as_numpy_iterator()
