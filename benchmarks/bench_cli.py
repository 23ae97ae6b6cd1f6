"""``litstore get KEY`` in a fresh process: a store of images against one without, same run.

Builds two small stores (``--records`` records each; PNG images of ``--size`` pixels in
one, the same records without the image in the other), then times
``python -m litstore get ROOT KEY`` in fresh interpreters (best of ``--rounds``) on each,
and a Python ``store[key]`` of an image in a fresh interpreter. Prints wall times, peak
resident memory, the ratio (target: at most 1.5x) and whether torch or torchvision
were imported.

    python benchmarks/bench_cli.py --records 200 --rounds 3 [--src OTHER_CHECKOUT/src]
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The peak resident memory of this process (VmHWM; ru_maxrss would count the parent's, kept across exec).
_PEAK = """
def _peak_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
"""

_PROBE = (
    _PEAK
    + """
import json, runpy, sys
sys.argv = ["litstore", "get", {root!r}, {key!r}]
try:
    runpy.run_module("litstore", run_name="__main__")
except SystemExit:
    pass
print(json.dumps({{"torch": "torch" in sys.modules, "torchvision": "torchvision" in sys.modules,
    "rss_mb": _peak_mb()}}), file=sys.stderr)
"""
)

_LOOKUP = (
    _PEAK
    + """
import json, sys
import litstore
value = litstore.open({root!r})[{key!r}]["image"]
print(json.dumps({{"torch": "torch" in sys.modules, "torchvision": "torchvision" in sys.modules,
    "rss_mb": _peak_mb(), "shape": list(value.shape)}}), file=sys.stderr)
"""
)


def build(folder: Path, records: int, size: int) -> tuple[str, str]:
    """Two stores of ``records`` records, with and without a PNG image each."""
    import litdata
    import numpy as np
    from PIL import Image

    import litstore

    rng = np.random.default_rng(0)
    rows, images = [], []
    for index in range(records):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (size, size, 3)).astype(np.uint8)).save(buffer, format="PNG")
        rows.append({"id": f"k{index:06d}", "label": index % 10, "caption": f"picture {index}"})
        images.append(rows[-1] | {"image": litdata.Image(bytes=buffer.getvalue())})
    plain = litstore.Store.create(folder / "plain", key="id")
    plain.append(rows)
    pictures = litstore.Store.create(folder / "images", key="id")
    pictures.append(images)
    return plain.root, pictures.root


def timed(script: str, rounds: int, source: Path) -> tuple[float, dict[str, object]]:
    """Best wall time of ``python -c script`` in fresh interpreters, and what the last one reported."""
    best, report = float("inf"), {}
    for _ in range(rounds):
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-c", script],
            env={"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin", "COLUMNS": "120"},
            capture_output=True,
            text=True,
            check=True,
        )
        best = min(best, time.perf_counter() - start)
        report = json.loads(result.stderr.strip().splitlines()[-1])
    return best, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--size", type=int, default=32, help="image width and height in pixels")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the litstore sources the probes import")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        plain, pictures = build(Path(folder), options.records, options.size)
        key = f"k{options.records // 2:06d}"
        results = {
            "get, no images": timed(_PROBE.format(root=plain, key=key), options.rounds, options.src),
            "get, images": timed(_PROBE.format(root=pictures, key=key), options.rounds, options.src),
            "store[key] image": timed(_LOOKUP.format(root=pictures, key=key), options.rounds, options.src),
        }
    for name, (seconds, report) in results.items():
        print(f"{name:18} {seconds:6.2f} s  peak {report['rss_mb']:6.0f} MiB  "
              f"torch={report['torch']} torchvision={report['torchvision']}")  # fmt: skip
    ratio = results["get, images"][0] / results["get, no images"][0]
    print(f"ratio images / no images: {ratio:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
