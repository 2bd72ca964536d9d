"""A tiny Transformer to train on a toy task and look inside: explained in chapter 07.

Everything chapter 07 needs, in one file that reads top to bottom:

* :class:`TinyTransformer` -- an encoder-only Transformer (learned token and position
  embeddings, pre-LayerNorm blocks built from :class:`attn_edu.multihead_torch.MultiHeadAttention`,
  a linear read-out at every position) that can return every layer's attention weights;
* toy tasks with held-out data: :func:`reversal_batch` (``y_i = x_{L-1-i}``) and
  :func:`sorting_batch` (``y = sorted(x)``); :func:`is_held_out` splits the space of
  sequences into a training part and a held-out part by a hash, so no held-out sequence
  is ever a training example;
* :func:`train` (AdamW, fresh random batches every step, seeded, deterministic on the
  CPU) and :func:`evaluate` (per-token and per-sequence accuracy);
* :func:`attention_rollout` (Abnar & Zuidema, 2020) and :func:`ablate_heads`, a context
  manager that silences chosen heads and restores the model afterwards;
* induction heads: :class:`AttentionOnlyLM` (a causal, attention-only language model),
  :func:`repeated_batch` (random tokens whose first ``period`` tokens repeat),
  :func:`train_induction` and :func:`induction_scores`.

Shapes: B batch, L sequence length, H heads, D model width, V vocabulary size.
Both models take ``impl=`` (:mod:`attn_edu.impls`), by default ``"naive"``, the path whose
numbers chapter 07 records; ``model.blocks[i].attn.last_impl`` says what ran.
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .multihead_torch import MultiHeadAttention

__all__ = [
    "TinyTransformer",
    "Block",
    "TASKS",
    "is_held_out",
    "reversal_batch",
    "sorting_batch",
    "make_batch",
    "held_out_set",
    "train",
    "evaluate",
    "attention_rollout",
    "ablate_heads",
    "AttentionOnlyLM",
    "repeated_batch",
    "induction_targets",
    "train_induction",
    "induction_scores",
    "copy_accuracy",
    "layer0_role",
]


# --------------------------------------------------------------------------- the model
class Block(nn.Module):
    """One pre-LayerNorm Transformer block: ``x + attn(LN(x))``, then ``x + mlp(LN(x))``.

    Input and output (B, L, D). ``forward(x, return_weights=True)`` also returns the
    attention weights (B, H, L, L) of this block; ``impl``: the attention's (:mod:`attn_edu.impls`).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, impl: str = "naive") -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, impl=impl)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: Tensor, return_weights: bool = False) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        """x (B, L, D) -> (B, L, D); with ``return_weights=True`` also (B, H, L, L)."""
        h = self.ln1(x)  # (B, L, D); the weights (B, H, L, L) only when asked for (impl="naive" or "auto")
        a, w = self.attn(h, return_weights=True) if return_weights else (self.attn(h), None)
        x = x + a  # (B, L, D) residual stream
        x = x + self.mlp(self.ln2(x))  # (B, L, D)
        return (x, w) if return_weights else x


class TinyTransformer(nn.Module):
    """An encoder-only Transformer that predicts one output token at every position.

    ``logits = TinyTransformer(...)(x)``: tokens x (B, L) in ``[0, vocab)`` -> logits
    (B, L, vocab). With ``return_attention=True`` it returns ``(logits, weights)``, where
    ``weights`` is a list with one (B, H, L, L) tensor per layer (row i = where position i
    reads from). No causal mask: every position sees the whole input, so a sequence-to-
    sequence task of equal lengths (reverse, sort) is solved in one forward pass.

    Args:
        vocab: number of token values V.
        seq_len: sequence length L (learned absolute position embeddings, one per position).
        d_model: residual-stream width D.
        num_heads: heads per attention layer H (``d_model`` must be divisible by it).
        num_layers: number of blocks.
        d_ff: hidden width of each block's MLP.
        impl: the attention layers' implementation (:mod:`attn_edu.impls`), default ``"naive"``;
            ``"auto"`` picks the plain path for ``return_attention=True`` and a faster one otherwise.

    Built from :class:`attn_edu.multihead_torch.MultiHeadAttention`; explained in chapter 07.
    """

    def __init__(self, vocab: int, seq_len: int, d_model: int = 64, num_heads: int = 4,
                 num_layers: int = 2, d_ff: int = 128, impl: str = "naive") -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.vocab, self.seq_len = vocab, seq_len
        self.num_heads, self.num_layers = num_heads, num_layers
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, num_heads, d_ff, impl) for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x: Tensor, return_attention: bool = False
                ) -> Union[Tensor, Tuple[Tensor, List[Tensor]]]:
        """Tokens x (B, L) -> logits (B, L, V); with ``return_attention=True`` also the
        list of per-layer attention weights, each (B, H, L, L)."""
        if x.dim() != 2 or x.shape[1] != self.seq_len:
            raise ValueError(f"x must have shape (B, {self.seq_len}); got {tuple(x.shape)}")
        pos = torch.arange(self.seq_len, device=x.device)  # (L,)
        h = self.tok_emb(x) + self.pos_emb(pos)  # (B, L, D)
        weights = []
        for block in self.blocks:
            if return_attention:
                h, w = block(h, return_weights=True)  # (B, L, D), (B, H, L, L)
                weights.append(w)
            else:
                h = block(h)  # (B, L, D)
        logits = self.head(self.ln_f(h))  # (B, L, V)
        return (logits, weights) if return_attention else logits


# --------------------------------------------------------------------------- toy tasks
def is_held_out(x: Tensor, vocab: int, every: int = 16) -> Tensor:
    """Which sequences belong to the held-out part of the sequence space: (B, L) -> (B,) bool.

    Each sequence is read as an integer in base ``vocab`` and hashed (multiplied by an odd
    constant modulo 2**32, then the top bits taken); about one sequence in ``every`` is
    held out. The split depends only on the sequence, so training batches can exclude
    held-out sequences exactly, whatever the random seed.
    """
    code = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
    for t in range(x.shape[1]):  # code = sum_t x_t * vocab**t, mixed as it grows
        code = (code * vocab + x[:, t].long()) % (2**31 - 1)
    h = (code * 2654435761) % 2**32  # Knuth's multiplicative hash
    return (h >> 16) % every == 0


def _draw(batch: int, seq_len: int, vocab: int, generator: Optional[torch.Generator],
          split: Optional[str]) -> Tensor:
    """``batch`` uniform random sequences (B, L) on the CPU, from ``split``."""
    if split not in (None, "train", "test"):
        raise ValueError(f"split must be None, 'train' or 'test'; got {split!r}")
    if split is None:
        return torch.randint(vocab, (batch, seq_len), generator=generator)
    keep_test = split == "test"
    parts, have = [], 0
    for _ in range(1000):  # rejection sampling: the held-out part is ~1/16 of the space
        n = 20 * batch if keep_test else 2 * batch
        x = torch.randint(vocab, (n, seq_len), generator=generator)
        x = x[is_held_out(x, vocab) == keep_test]
        parts.append(x)
        have += x.shape[0]
        if have >= batch:
            return torch.cat(parts)[:batch]
    raise ValueError(f"could not draw {batch} {split!r} sequences of length {seq_len} over "
                     f"{vocab} tokens; the space is too small for a hash split")


def reversal_batch(batch: int, seq_len: int, vocab: int,
                   generator: Optional[torch.Generator] = None,
                   split: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """Reverse a sequence: x (B, L) uniform digits, y (B, L) with ``y[:, i] = x[:, L-1-i]``.

    ``split="train"`` draws only sequences outside the held-out set, ``"test"`` only
    inside it (see :func:`is_held_out`), ``None`` from everything. Tensors on the CPU.
    """
    return _targets("reverse", _draw(batch, seq_len, vocab, generator, split))


def sorting_batch(batch: int, seq_len: int, vocab: int,
                  generator: Optional[torch.Generator] = None,
                  split: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """Sort a sequence: x (B, L) uniform digits, y (B, L) = x sorted ascending (per row).

    ``split`` as in :func:`reversal_batch`. Tensors on the CPU.
    """
    return _targets("sort", _draw(batch, seq_len, vocab, generator, split))


#: The two toy tasks by name; each maps (batch, seq_len, vocab, generator) to (x, y).
TASKS: Dict[str, Callable[..., Tuple[Tensor, Tensor]]] = {
    "reverse": reversal_batch,
    "sort": sorting_batch,
}


def make_batch(task: str, batch: int, seq_len: int, vocab: int,
               generator: Optional[torch.Generator] = None,
               split: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """``TASKS[task](batch, seq_len, vocab, generator, split)``; task "reverse" or "sort"."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASKS)}")
    return TASKS[task](batch, seq_len, vocab, generator, split)


def held_out_set(task: str, n: int, seq_len: int, vocab: int, seed: int = 1234
                 ) -> Tuple[Tensor, Tensor]:
    """A fixed, seeded held-out set ``(x, y)``, each (n, L): ``n`` distinct sequences from
    the held-out part of the space (:func:`is_held_out`), so none is ever trained on."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASKS)}")
    g = torch.Generator().manual_seed(seed)
    x = torch.unique(_draw(2 * n, seq_len, vocab, g, "test"), dim=0)  # distinct, sorted
    if x.shape[0] < n:
        raise ValueError(f"only {x.shape[0]} distinct held-out sequences found; ask for fewer")
    x = x[torch.randperm(x.shape[0], generator=g)][:n]  # (n, L), shuffled
    return _targets(task, x)


def _targets(task: str, x: Tensor) -> Tuple[Tensor, Tensor]:
    """``(x, y)`` for given inputs x (B, L) of ``task``."""
    return (x, x.flip(1)) if task == "reverse" else (x, x.sort(dim=1).values)


# --------------------------------------------------------------------------- training
@torch.no_grad()
def evaluate(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 1024) -> Tuple[float, float]:
    """Accuracy of ``model`` on inputs x (N, L) and targets y (N, L).

    Returns ``(token_acc, seq_acc)``: the fraction of positions predicted right, and the
    fraction of sequences predicted right at *every* position (exact match). Inputs are
    moved to the model's device; the model is left in the mode it was in.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    right_tokens, right_seqs = 0, 0
    for i in range(0, x.shape[0], batch_size):
        xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
        ok = model(xb).argmax(-1) == yb  # (b, L)
        right_tokens += int(ok.sum())
        right_seqs += int(ok.all(dim=1).sum())
    model.train(was_training)
    return right_tokens / y.numel(), right_seqs / y.shape[0]


def train(
    model: TinyTransformer,
    task: str = "reverse",
    steps: int = 600,
    *,
    batch_size: int = 256,
    lr: float = 3e-3,
    weight_decay: float = 0.01,
    warmup: int = 50,
    eval_every: int = 50,
    eval_data: Optional[Tuple[Tensor, Tensor]] = None,
    probe: Optional[Tensor] = None,
    seed: int = 0,
    log: Optional[Callable[[str], None]] = None,
) -> Dict[str, list]:
    """Train ``model`` on ``task`` with AdamW and a fresh random batch every step.

    Every batch is drawn with ``split="train"`` from a ``torch.Generator`` seeded with
    ``seed``, on the CPU, then moved to the model's device: the data are the same on every
    device. The learning rate warms up linearly over ``warmup`` steps, then decays along a
    cosine to 10%. Cross-entropy over all B*L positions. Deterministic on the CPU for a
    given seed and initial model.

    Every ``eval_every`` steps (and after the last) it records, in the returned history:

    * ``"step"``, ``"loss"`` (mean training loss since the last record),
      ``"token_acc"``, ``"seq_acc"`` (on ``eval_data`` = (x, y), when given),
      ``"seconds"`` (wall-clock since the start);
    * ``"snapshots"``: when ``probe`` (P, L) is given, the attention weights on it, one
      (num_layers, P, H, L, L) CPU tensor per record (step 0, before training, included).

    ``log(line)`` is called with a one-line summary at every record when given.
    """
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # no weight decay on embeddings, norms, biases
        (decay if p.dim() == 2 and "emb" not in name else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr)

    def lr_at(step: int) -> float:  # linear warm-up, then cosine down to 10 %
        if step < warmup:
            return lr * (step + 1) / warmup
        t = (step - warmup) / max(1, steps - warmup)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    history: Dict[str, list] = {k: [] for k in ("step", "loss", "token_acc", "seq_acc",
                                                "seconds", "snapshots")}

    def record(step: int, loss: float) -> None:
        history["step"].append(step)
        history["loss"].append(loss)
        history["seconds"].append(time.perf_counter() - start)
        tok, seq = evaluate(model, *eval_data) if eval_data is not None else (math.nan, math.nan)
        history["token_acc"].append(tok)
        history["seq_acc"].append(seq)
        if probe is not None:
            model.eval()
            with torch.no_grad():
                _, ws = model(probe.to(device), return_attention=True)
            model.train()
            history["snapshots"].append(torch.stack(ws).cpu())  # (layers, P, H, L, L)
        if log is not None:
            log(f"step {step:5d}  loss {loss:.4f}  token acc {tok:.4f}  seq acc {seq:.4f}")

    start = time.perf_counter()
    model.train()
    record(0, math.nan)
    running, count = 0.0, 0
    for step in range(1, steps + 1):
        x, y = make_batch(task, batch_size, model.seq_len, model.vocab, g, split="train")
        x, y = x.to(device), y.to(device)
        for group in opt.param_groups:
            group["lr"] = lr_at(step - 1)
        logits = model(x)  # (B, L, V)
        loss = nn.functional.cross_entropy(logits.reshape(-1, model.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        running += loss.item()
        count += 1
        if step % eval_every == 0 or step == steps:
            record(step, running / count)
            running, count = 0.0, 0
    model.eval()
    return history


# --------------------------------------------------------------------------- looking inside
def attention_rollout(attn_per_layer: Union[Sequence[Tensor], Tensor],
                      residual_alpha: float = 0.5,
                      all_layers: bool = False) -> Tensor:
    r"""Attention rollout (Abnar & Zuidema, 2020): how much each output position draws on
    each *input* position, following attention through all layers.

    Per layer, average the heads and account for the residual connection:
    :math:`\tilde A_\ell = (1-\alpha)\,\bar A_\ell + \alpha I`, rows renormalised to sum to 1;
    then multiply the layers, the last on the left:
    :math:`R = \tilde A_{N} \cdots \tilde A_2 \tilde A_1`.

    Args:
        attn_per_layer: a list of N per-layer weights (B, H, L, L) (as returned by
            ``TinyTransformer(..., return_attention=True)``) or one (N, B, H, L, L) tensor;
            3-D (H, L, L) layers (no batch) are accepted too.
        residual_alpha: :math:`\alpha`, the weight of the identity (the residual path);
            0 multiplies the raw head-averaged attention.
        all_layers: return the rollout after every layer, (N, B, L, L), instead of the last.

    Returns (B, L, L) (or (N, B, L, L)); every row sums to 1. Float64 on the input device.
    Explained in chapter 07.
    """
    if not 0.0 <= residual_alpha <= 1.0:
        raise ValueError(f"residual_alpha must be in [0, 1]; got {residual_alpha}")
    layers = list(attn_per_layer)
    if not layers:
        raise ValueError("attention_rollout needs at least one layer")
    rolled, out = None, []
    for a in layers:
        a = torch.as_tensor(a).double()
        if a.dim() == 3:
            a = a.unsqueeze(0)  # (1, H, L, L)
        if a.dim() != 4 or a.shape[-1] != a.shape[-2]:
            raise ValueError(f"each layer must be (B, H, L, L) self-attention weights; got {tuple(a.shape)}")
        eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)  # (L, L)
        a_tilde = (1 - residual_alpha) * a.mean(dim=1) + residual_alpha * eye  # (B, L, L)
        a_tilde = a_tilde / a_tilde.sum(dim=-1, keepdim=True)
        rolled = a_tilde if rolled is None else a_tilde @ rolled  # (B, L, L)
        out.append(rolled)
    return torch.stack(out) if all_layers else rolled


@contextlib.contextmanager
def ablate_heads(model: nn.Module, layer: int, heads: Union[int, Sequence[int]]
                 ) -> Iterator[nn.Module]:
    """Silence attention heads while the ``with`` block runs; restore them afterwards.

    ``with ablate_heads(model, layer=0, heads=[1]): ...`` zeroes the output of head 1 of
    block 0 *before* the output projection, i.e. the head's slice ``[h*d_head, (h+1)*d_head)``
    of the concatenated head outputs (B, L, H*d_head) that ``out_proj`` reads. Its
    attention weights are still computed (and returned); they just no longer reach the
    residual stream. Implemented as a forward pre-hook on ``out_proj``, removed on exit
    (even after an exception), so the model is exactly as before. Works on
    :class:`TinyTransformer` and :class:`AttentionOnlyLM` (anything whose ``blocks[layer]``
    has an ``attn``). Explained in chapter 07.
    """
    blocks = model.blocks
    if not 0 <= layer < len(blocks):
        raise ValueError(f"layer must be in [0, {len(blocks)}); got {layer}")
    heads = [heads] if isinstance(heads, int) else list(heads)
    attn = blocks[layer].attn
    num_heads, d_head = attn.num_heads, attn.d_head
    for h in heads:
        if not 0 <= h < num_heads:
            raise ValueError(f"heads must be in [0, {num_heads}); got {h}")

    def zero_heads(module: nn.Module, inputs: Tuple[Tensor, ...]) -> Tuple[Tensor, ...]:
        (merged,) = inputs  # (B, L, H*d_head), heads side by side
        merged = merged.clone()
        for h in heads:
            merged[..., h * d_head:(h + 1) * d_head] = 0
        return (merged,)

    handle = attn.out_proj.register_forward_pre_hook(zero_heads)
    try:
        yield model
    finally:
        handle.remove()


# --------------------------------------------------------------------------- induction heads
class _AttentionOnlyBlock(nn.Module):
    """``x + attn(x)`` with a causal mask: no layer norm, no MLP."""

    def __init__(self, d_model: int, num_heads: int, impl: str = "naive") -> None:
        super().__init__()
        self.attn = MultiHeadAttention(d_model, num_heads, impl=impl)

    def forward(self, x: Tensor, return_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        a, w = self.attn(x, causal=True, return_weights=True) if return_weights else (self.attn(x, causal=True), None)
        return x + a, w  # (B, L, D), and (B, H, L, L) or None


class AttentionOnlyLM(nn.Module):
    """A causal language model made of attention layers only, the kind of small model in
    which induction heads form (Olsson et al., 2022): two layers suffice, and one head per
    layer is enough (chapter 07).

    Tokens x (B, L) -> next-token logits (B, L, vocab): learned token and position
    embeddings, ``num_layers`` residual causal attention layers (no MLPs, no layer norms),
    a linear unembedding. ``return_attention=True`` also returns one (B, H, L, L) weight
    tensor per layer. Any length up to ``max_len`` works. ``impl``: the attention layers'
    implementation, as in :class:`TinyTransformer` (default ``"naive"``). Explained in chapter 07.
    """

    def __init__(self, vocab: int, max_len: int, d_model: int = 32, num_heads: int = 2,
                 num_layers: int = 2, impl: str = "naive") -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.vocab, self.max_len = vocab, max_len
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(_AttentionOnlyBlock(d_model, num_heads, impl) for _ in range(num_layers))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x: Tensor, return_attention: bool = False
                ) -> Union[Tensor, Tuple[Tensor, List[Tensor]]]:
        """Tokens x (B, L) -> logits (B, L, V) for the token after each position."""
        if x.dim() != 2 or not 1 <= x.shape[1] <= self.max_len:
            raise ValueError(f"x must have shape (B, L) with 1 <= L <= {self.max_len}; got {tuple(x.shape)}")
        h = self.tok_emb(x) + self.pos_emb.weight[:x.shape[1]]  # (B, L, D)
        weights = []
        for block in self.blocks:
            h, w = block(h, return_weights=return_attention)  # (B, L, D), (B, H, L, L) or None
            weights.append(w)
        logits = self.head(h)  # (B, L, V)
        return (logits, weights) if return_attention else logits


def repeated_batch(batch: int, seq_len: int, vocab: int, generator: Optional[torch.Generator] = None,
                   min_period: int = 4) -> Tuple[Tensor, Tensor]:
    """Random tokens in which the first ``period`` tokens are repeated once, right after.

    Returns x (B, seq_len) and period (B,), each period drawn uniformly from
    ``[min_period, seq_len // 2]`` so that the distance between the two copies varies:
    ``x[b, t] == x[b, t - period[b]]`` for ``period <= t < 2 * period``; every other token
    is uniform random. The second copy (after its first token) is predictable only by
    finding the earlier occurrence of the current token and copying what followed it.
    """
    if not 1 <= min_period <= seq_len // 2:
        raise ValueError(f"min_period must be in [1, seq_len // 2 = {seq_len // 2}]; got {min_period}")
    x = torch.randint(vocab, (batch, seq_len), generator=generator)  # (B, T)
    period = torch.randint(min_period, seq_len // 2 + 1, (batch,), generator=generator)  # (B,)
    t = torch.arange(seq_len)[None, :]  # (1, T)
    second = (t >= period[:, None]) & (t < 2 * period[:, None])  # (B, T)
    source = torch.where(second, t - period[:, None], t)  # (B, T) where each token comes from
    return torch.gather(x, 1, source), period


def induction_targets(period: Tensor, length: int) -> Tensor:
    """(B, length) boolean: query positions i whose *next* token an induction head can
    predict, ``period <= i < 2 * period - 1`` (the token after the earlier occurrence of
    x_i, at position ``i - period + 1``, is x_{i+1})."""
    i = torch.arange(length)[None, :]  # (1, length)
    return (i >= period[:, None]) & (i < 2 * period[:, None] - 1)


def train_induction(model: AttentionOnlyLM, steps: int = 400, *, seq_len: int = 24,
                    batch_size: int = 64, lr: float = 1e-2, seed: int = 0) -> Dict[str, list]:
    """Next-token training of ``model`` on :func:`repeated_batch` sequences (AdamW, fresh
    batches from a seeded generator, deterministic on the CPU).

    Returns a history with ``"step"``, ``"loss_repeat"`` (mean loss on the targets an
    induction head can predict) and ``"loss_other"`` (every other target), every 25 steps.
    On the CPU it trains on one thread (restored afterwards): for matrices this small,
    more threads only add synchronisation, and on a busy machine they cost many times
    the run time.
    """
    device = next(model.parameters()).device
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        return _train_induction(model, steps, seq_len, batch_size, lr, seed, device)
    finally:
        torch.set_num_threads(threads)


def _train_induction(model: AttentionOnlyLM, steps: int, seq_len: int, batch_size: int,
                     lr: float, seed: int, device: torch.device) -> Dict[str, list]:
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    history: Dict[str, list] = {"step": [], "loss_repeat": [], "loss_other": []}
    model.train()
    for step in range(1, steps + 1):
        x, period = repeated_batch(batch_size, seq_len, model.vocab, g)
        x = x.to(device)
        logits = model(x[:, :-1])  # (B, T-1, V): position i predicts x_{i+1}
        loss = nn.functional.cross_entropy(logits.reshape(-1, model.vocab), x[:, 1:].reshape(-1),
                                           reduction="none").view(batch_size, -1)  # (B, T-1)
        opt.zero_grad(set_to_none=True)
        loss.mean().backward()
        opt.step()
        if step % 25 == 0 or step == steps:
            rep = induction_targets(period, seq_len - 1).to(device)
            history["step"].append(step)
            history["loss_repeat"].append(loss[rep].mean().item())
            history["loss_other"].append(loss[~rep].mean().item())
    model.eval()
    return history


def induction_scores(weights: Sequence[Tensor], period: Tensor) -> Dict[str, Tensor]:
    """Per layer and head, how much attention follows the two patterns of an induction
    circuit, averaged over the batch:

    * ``"previous_token"``: the weight of query i on key i - 1 (over 1 <= i < L);
    * ``"induction"``: the weight of query i on key i - period + 1, the token after the
      earlier occurrence of x_i (over the :func:`induction_targets` queries).
    * ``"duplicate_token"``: the weight of query i on key i - period, the earlier
      occurrence of x_i itself (over the second copy, period <= i < 2 * period). A layer-0
      head with this pattern can stand in for the previous-token head: it tells position
      i where its token occurred before, and layer 1 can read the successor from there.

    ``weights``: one (B, H, L, L) tensor per layer; period (B,). Returns (layers, H)
    tensors; 1 means all weight on the pattern.
    """
    prev, ind, dup = [], [], []

    def mean_on(w: Tensor, shift: int, rows: Tensor) -> Tensor:
        # mean weight of query i on key i - period + shift over the rows (B, L) -> (H,)
        B, H, L, _ = w.shape
        key = (torch.arange(L)[None, :] - period[:, None] + shift).clamp(min=0).to(w.device)  # (B, L)
        on_key = torch.gather(w, 3, key[:, None, :, None].expand(B, H, L, 1))[..., 0]  # (B, H, L)
        rows = rows.to(w.device)
        return (on_key * rows[:, None, :]).sum(dim=(0, 2)) / rows.sum()

    for w in weights:
        B, H, L, _ = w.shape
        i = torch.arange(1, L)
        prev.append(w[:, :, i, i - 1].mean(dim=(0, 2)))  # (H,)
        ind.append(mean_on(w, 1, induction_targets(period, L)))  # (H,)
        t = torch.arange(L)[None, :]
        dup.append(mean_on(w, 0, (t >= period[:, None]) & (t < 2 * period[:, None])))  # (H,)
    return {"previous_token": torch.stack(prev), "induction": torch.stack(ind),
            "duplicate_token": torch.stack(dup)}


def copy_accuracy(model: nn.Module, x: Tensor, period: Tensor) -> float:
    """Share of the predictable second-copy tokens of :func:`repeated_batch` sequences
    ``x`` (B, L) that ``model`` predicts right (its argmax at position i against x_{i+1},
    over the :func:`induction_targets` positions)."""
    device = next(model.parameters()).device
    targets = induction_targets(period, x.shape[1] - 1)  # (B, L-1)
    with torch.no_grad():
        pred = model(x[:, :-1].to(device)).argmax(-1).cpu()  # (B, L-1)
    return (pred == x[:, 1:])[targets].float().mean().item()


def layer0_role(previous_token: float, duplicate_token: float, threshold: float = 0.3) -> str:
    """Name a layer-0 head of an induction circuit by its scores: ``"previous-token"`` or
    ``"duplicate-token"`` (the larger score, when it exceeds ``threshold``), else ``"other"``."""
    best = max(previous_token, duplicate_token)
    if best <= threshold:
        return "other"
    return "previous-token" if previous_token >= duplicate_token else "duplicate-token"

