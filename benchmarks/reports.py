"""An HTML report (``Iterator.report``) of each reference workload — CV, NLP, ASR, the
pipelines of ``benchmarks/peers/sluice_native.py`` on the benchmark data — after running it for
``--seconds``; open them in a browser.

    .venv/bin/python benchmarks/reports.py [--data ~/.cache/sluice-bench] [--out reports/] [--seconds 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache" / "sluice-bench")
    ap.add_argument("--out", type=Path, default=Path("reports"))
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--workloads", default="cv,nlp,asr")
    a = ap.parse_args(argv)
    import sluice

    sys.path.insert(0, str(HERE))
    from peers import sluice_native

    a.out.mkdir(parents=True, exist_ok=True)
    for w in a.workloads.split(","):
        make = {"cv": sluice_native._cv, "nlp": sluice_native._nlp, "asr": sluice_native._asr}[w]
        ds = make(sluice, a.data, None, 0)
        it = (ds.repeat() if w != "nlp" else ds).iter()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < a.seconds:
            next(it)
        path = it.report(a.out / f"{w}.html")
        it.close()
        print(f"{w}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
