#!/usr/bin/env python3
"""Chapter 07's induction-head model, trained with several seeds: what each one learned.

    python scripts/induction_seeds.py            # writes attn_edu/data/induction/seeds.json

Seeds 0-9 of the chapter's model (two layers, two heads each) and seeds 0-1 of the same
model with one head per layer, each trained as in the chapter (400 steps, CPU, one
thread; deterministic) and described by :func:`attn_edu.induction_seeds.induction_study`.
About half a minute per seed on a CPU core, which is why the chapter trains one seed live
and reads the others from this file.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attn_edu import induction_seeds  # noqa: E402

OUT = induction_seeds.INDUCTION_SEEDS
RUNS = [(seed, 2) for seed in range(10)] + [(seed, 1) for seed in range(2)]


def main() -> int:
    results = []
    for seed, heads in RUNS:
        r = induction_seeds.induction_study(seed, num_heads=heads)
        print(f"seed {seed}, {heads} head(s)/layer: accuracy {r['accuracy']:.3f}, "
              f"layer 0 {r['roles']}, ablated {r['ablated']}", flush=True)
        results.append(r)
    doc = {"command": "python scripts/induction_seeds.py",
           "setup": "attn_edu.induction_seeds.induction_study(seed, num_heads): AttentionOnlyLM(vocab=32, max_len=24, "
                    "d_model=32, 2 layers), train_induction(steps=400), 1000 held-out sequences "
                    "(torch.Generator seed 7)",
           "runs": results}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
