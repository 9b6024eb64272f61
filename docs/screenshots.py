"""The README's screenshots of `grm view`, taken by headless Chromium from real directories.

    python docs/screenshots.py RUN_DIR EVAL_DIR [--out docs]

RUN_DIR: a `grm run` directory; EVAL_DIR: a `grm eval --out` directory. Writes
docs/view-run.png (curves), docs/view-samples.png (the sample browser) and docs/view-eval.png
(metrics, confusion, pair browser), then shrinks them to a palette PNG with matplotlib's Pillow.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHOTS = [  # file, page (URL hash), window height
    ("view-run.png", "#d=0", 1250),
    ("view-samples.png", "#d=0&only=samples&diffs=1", 1250),
    ("view-eval.png", "#d=1&filter=disagree", 1500),
]


def shrink(png: Path) -> None:
    """Quantise to 256 colours: screenshots are flat UI colours, so this is ~4x smaller and looks the same."""
    from PIL import Image

    with Image.open(png) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(png, optimize=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("eval_dir")
    ap.add_argument("--out", default=str(ROOT / "docs"))
    args = ap.parse_args()

    from grm.view.chromium import screenshot

    p = subprocess.Popen(
        [sys.executable, "-m", "grm", "view", args.run_dir, args.eval_dir], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        url = p.stdout.readline().split()[2]
        for name, page, height in SHOTS:
            png = Path(args.out) / name
            screenshot(url + page, png, height=height)
            shrink(png)
            print(f"{png} ({png.stat().st_size // 1024} KB)")
    finally:
        p.terminate()
        p.wait(timeout=10)


if __name__ == "__main__":
    main()
