"""Chapter 07's induction-head model trained with several seeds: what each one learned.

Training one seed takes about half a minute on a CPU core, too slow for ten on the page,
so ``python scripts/induction_seeds.py`` runs :func:`induction_study` for each seed and
records the results in ``data/induction/seeds.json``; the chapter trains one seed live
and reads the others with :func:`recorded_induction_seeds`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import torch

from .tiny_transformer import (AttentionOnlyLM, ablate_heads, copy_accuracy, induction_scores,
                               layer0_role, repeated_batch, train_induction)

__all__ = ["INDUCTION_SEEDS", "induction_study", "recorded_induction_seeds"]

#: the recorded study of seeds 0-9 (``python scripts/induction_seeds.py`` regenerates it)
INDUCTION_SEEDS = Path(__file__).resolve().parent / "data" / "induction" / "seeds.json"


def recorded_induction_seeds() -> List[Dict[str, object]]:
    """The :func:`induction_study` of several seeds, as recorded by
    ``python scripts/induction_seeds.py`` (half a minute per seed to regenerate)."""
    return json.loads(INDUCTION_SEEDS.read_text(encoding="utf-8"))["runs"]


def induction_study(seed: int, num_heads: int = 2, steps: int = 400, d_model: int = 32,
                    vocab: int = 32, seq_len: int = 24) -> Dict[str, object]:
    """Train chapter 07's two-layer :class:`~attn_edu.tiny_transformer.AttentionOnlyLM` with ``seed`` and describe
    what it learned, as plain numbers (for the per-seed table in chapter 07).

    Returns ``seed``, ``num_heads``, ``accuracy`` (:func:`~attn_edu.tiny_transformer.copy_accuracy` on 1000 held-out
    sequences), per layer and head the ``previous_token``, ``duplicate_token`` and
    ``induction`` scores and ``ablated`` (accuracy with that head silenced), the ``roles``
    of the layer-0 heads (:func:`~attn_edu.tiny_transformer.layer0_role`) and, with two or more heads,
    ``ablated_layer1_all`` (accuracy with every layer-1 head silenced).
    """
    torch.manual_seed(seed)
    model = AttentionOnlyLM(vocab=vocab, max_len=seq_len, d_model=d_model, num_heads=num_heads,
                            num_layers=2)
    train_induction(model, steps=steps, seq_len=seq_len, seed=seed)
    x, period = repeated_batch(1000, seq_len, vocab, torch.Generator().manual_seed(7))
    with torch.no_grad():
        _, ws = model(x[:, :-1], return_attention=True)
    scores = induction_scores(ws, period)
    ablated = [[0.0] * num_heads for _ in range(2)]
    for layer in range(2):
        for head in range(num_heads):
            with ablate_heads(model, layer, head):
                ablated[layer][head] = copy_accuracy(model, x, period)
    out: Dict[str, object] = {
        "seed": seed, "num_heads": num_heads, "accuracy": copy_accuracy(model, x, period),
        **{k: [[round(float(v), 4) for v in row] for row in scores[k].tolist()] for k in scores},
        "ablated": [[round(a, 4) for a in row] for row in ablated],
    }
    out["roles"] = [layer0_role(p, d) for p, d in zip(out["previous_token"][0], out["duplicate_token"][0])]
    out["accuracy"] = round(out["accuracy"], 4)
    if num_heads > 1:
        with ablate_heads(model, 1, list(range(num_heads))):
            out["ablated_layer1_all"] = round(copy_accuracy(model, x, period), 4)
    return out
