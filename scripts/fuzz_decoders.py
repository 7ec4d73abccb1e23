"""The long fuzzing profile of every decoder, with counts (docs/reliability.md).

Runs each property of ``tests/fuzz_decoders.py`` on ``--examples`` generated cases
(seeded: ``--seed``), and prints one row per decoder: cases tried, accepted, refused
with the documented error, and errors of another type (a property failure: Hypothesis
then shrinks it and this script prints the smallest case and exits 1).

    python scripts/fuzz_decoders.py --examples=2000
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

#: tests/fuzz_decoders.py, loaded from its file (scripts never edit the import path).
_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                     "fuzz_decoders.py")
_SPEC = importlib.util.spec_from_file_location("fuzz_decoders", _PATH)
fuzz_decoders = importlib.util.module_from_spec(_SPEC)
sys.modules["fuzz_decoders"] = fuzz_decoders
_SPEC.loader.exec_module(fuzz_decoders)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated decoder names")
    args = p.parse_args()
    names = [n for n in fuzz_decoders.DECODERS if not args.only or n in args.only.split(",")]
    failed = 0
    print("| decoder | documented error | cases tried | accepted | refused | errors of another type | s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |", flush=True)
    for name in names:
        t0 = time.monotonic()
        other = 0
        try:
            stats = fuzz_decoders.run(name, args.examples, seed=args.seed)
        except Exception as exc:  # noqa: BLE001  (a property failed: reported, the rest go on)
            stats, other = fuzz_decoders.STATS[name], 1
            failed += 1
            print(f"{name}: FAILED: {type(exc).__name__}: {str(exc)[:2000]}", file=sys.stderr)
        n = sum(stats.values())
        print(f"| {name} | {fuzz_decoders.DECODERS[name].raises} | {n:,} | {stats['accepted']:,} | "
              f"{stats['refused']:,} | {other} | {time.monotonic() - t0:.0f} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
