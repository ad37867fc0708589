"""sluice's native pipelines with its own kernels capped at AVX2 (`SLUICE_SIMD=avx2`): what a
CPU without AVX-512 runs, measured on this one. The JPEG and MP3 decoders and the FFTs take
AVX2 at most anyway; the cap moves sluice's colour, resize, blur and normalize kernels."""
import os

os.environ["SLUICE_SIMD"] = "avx2"  # read on the first kernel call, in this fresh process

from .sluice_native import WORKLOADS, make_iter  # noqa: E402,F401

NAME = "sluice (AVX2 kernels)"
