r"""A paged KV cache (vLLM's PagedAttention {cite}`kwon2023vllm`), in NumPy.

A contiguous cache reserves room for the longest sequence it might hold, for every
sequence, and most of that room is never written. A paged cache cuts the memory into a
*pool* of fixed-size **pages** of ``page_size`` token slots and gives each sequence a
**block table**: the list of pages that hold its keys and values, in order. Position
``p`` of a sequence lives in page ``table[p // page_size]`` at slot ``p % page_size``.
A sequence takes pages as it grows, so at most its last page is partly empty (internal
fragmentation below one page per sequence), and a finished sequence returns its pages
to the pool.

Sequences may *share* pages: :meth:`PagedKVCache.fork` gives a new sequence the same
block table (parallel sampling from one prompt, beam search), with a reference count per
page. Pages are **copy-on-write**: appending to a sequence whose partly filled last
page is shared first copies that page, so the other sequences never see the new tokens.

:meth:`PagedKVCache.attention` reads the keys page by page, through the block table,
without gathering them into one array: each page's partial output and log-sum-exp are
merged with :func:`attn_edu.decoding.merge_partials` (split-KV decoding with the pages
as the chunks). Explained in chapter 13.
"""
from __future__ import annotations

import numbers
from typing import Dict, Hashable, List, Optional, Tuple

import numpy as np

from .. import _checks
from ..flash import flash_attention
from ..masks import causal_mask
from .._checks import is_torch_tensor
from .split_kv import merge_partials

__all__ = ["PagedKVCache", "PoolExhaustedError", "paged_vs_contiguous", "parallel_sampling_pages"]

_CACHE_DTYPES = ("float16", "float32", "float64")


class PoolExhaustedError(RuntimeError):
    """The pool has fewer free pages than an append needs; nothing was written."""


class PagedKVCache:
    r"""A pool of ``num_pages`` pages of ``page_size`` token slots, and a block table per sequence.

    Storage: ``k_pages`` of shape (num_pages, H_kv, page_size, d) and ``v_pages`` of
    shape (num_pages, H_kv, page_size, d_v), in ``dtype`` (float16, float32 or float64).
    A sequence is any hashable id (an int, a string); it is created by its first
    :meth:`append`.

    * :meth:`append` ``(seq, k, v)``: ``k`` (H_kv, t, d), ``v`` (H_kv, t, d_v) for the
      sequence's next ``t`` positions;
    * :meth:`fork` ``(seq) -> new_seq``: a new sequence sharing every page (copy-on-write);
    * :meth:`free` ``(seq)``: the sequence's pages go back to the pool when no other
      sequence uses them; the id cannot be used again;
    * :meth:`attention` ``(q, seq)``: ``q`` (H_q, t_q, d) for the sequence's newest
      ``t_q`` positions (bottom-right causal, grouped heads when H_q is a multiple of
      H_kv) -> (H_q, t_q, d_v);
    * :meth:`slot`, :meth:`block_table`, :meth:`gather`, :meth:`length`, and the memory
      counts ``num_used_pages``, ``num_free_pages``, ``page_bytes``,
      :meth:`memory_used`, ``copies`` (copy-on-write copies made).

    Errors: ``ValueError`` for an unknown or freed sequence and for shapes that do not
    fit, ``TypeError`` for a dtype other than the cache's or a torch tensor, and
    :class:`PoolExhaustedError` (naming the pages needed and free) when the pool cannot
    hold an append -- checked before anything is written. Explained in chapter 13.
    """

    def __init__(self, page_size: int, num_pages: int, num_kv_heads: int, head_dim: int,
                 dtype=np.float32, head_dim_v: Optional[int] = None) -> None:
        self.page_size = _checks.check_length("page_size", page_size, minimum=1)
        self.num_pages = _checks.check_length("num_pages", num_pages, minimum=1)
        self.num_kv_heads = _checks.check_length("num_kv_heads", num_kv_heads, minimum=1)
        self.head_dim = _checks.check_length("head_dim", head_dim, minimum=1)
        self.head_dim_v = self.head_dim if head_dim_v is None else _checks.check_length(
            "head_dim_v", head_dim_v, minimum=1)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype must be one of {', '.join(_CACHE_DTYPES)}; got {dtype!r}") from None
        if self.dtype.name not in _CACHE_DTYPES:
            raise TypeError(f"dtype must be one of {', '.join(_CACHE_DTYPES)} (NumPy has no "
                            f"bfloat16); got {self.dtype.name}")
        shape = (self.num_pages, self.num_kv_heads, self.page_size)
        self.k_pages = np.zeros(shape + (self.head_dim,), self.dtype)  # (pages, H_kv, P, d)
        self.v_pages = np.zeros(shape + (self.head_dim_v,), self.dtype)  # (pages, H_kv, P, d_v)
        self._refs = np.zeros(self.num_pages, np.int64)  # sequences using each page
        self._free: List[int] = list(range(self.num_pages - 1, -1, -1))  # pop() -> lowest id
        self._tables: Dict[Hashable, List[int]] = {}
        self._lengths: Dict[Hashable, int] = {}
        self._freed: set = set()
        self._next_id = 0
        self.copies = 0  # copy-on-write page copies made so far

    # ------------------------------------------------------------------ bookkeeping
    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def num_used_pages(self) -> int:
        return self.num_pages - len(self._free)

    @property
    def page_bytes(self) -> int:
        """The bytes of one page (keys and values of ``page_size`` tokens, every K/V head)."""
        return self.num_kv_heads * self.page_size * (self.head_dim + self.head_dim_v) * self.dtype.itemsize

    @property
    def token_bytes(self) -> int:
        """The bytes of one token's keys and values (every K/V head)."""
        return self.page_bytes // self.page_size

    def memory_used(self) -> int:
        """The bytes of the pages in use (a shared page counts once)."""
        return self.num_used_pages * self.page_bytes

    @property
    def sequences(self) -> List[Hashable]:
        """The live sequences, in the order they were created."""
        return list(self._tables)

    def _live(self, seq: Hashable) -> None:
        if seq in self._tables:
            return
        if seq in self._freed:
            raise ValueError(f"sequence {seq!r} was freed; its pages are back in the pool and "
                             "its id cannot be used again")
        raise ValueError(f"unknown sequence {seq!r}; live sequences: {self.sequences}")

    def length(self, seq: Hashable) -> int:
        """How many positions the sequence holds."""
        self._live(seq)
        return self._lengths[seq]

    def block_table(self, seq: Hashable) -> List[int]:
        """The sequence's pages, in order (a copy)."""
        self._live(seq)
        return list(self._tables[seq])

    def refcount(self, page: int) -> int:
        """How many live sequences use ``page``."""
        page = _checks.check_length("page", page)
        if page >= self.num_pages:
            raise ValueError(f"page must be < num_pages = {self.num_pages}; got {page}")
        return int(self._refs[page])

    def slot(self, seq: Hashable, position: int) -> Tuple[int, int]:
        """Where position ``position`` of ``seq`` is stored: ``(page, offset)`` with
        ``page = table[position // page_size]`` and ``offset = position % page_size``."""
        n = self.length(seq)
        position = _checks.check_length("position", position)
        if position >= n:
            raise ValueError(f"position must be < the sequence's length {n}; got {position}")
        return self._tables[seq][position // self.page_size], position % self.page_size

    # ------------------------------------------------------------------ writing
    def _check_kv(self, k: object, v: object) -> Tuple[np.ndarray, np.ndarray]:
        for name, x in (("k", k), ("v", v)):
            if is_torch_tensor(x):
                raise TypeError(f"{name} is a torch tensor; PagedKVCache holds NumPy arrays "
                                f"(convert with {name}.cpu().numpy())")
        k, v = np.asarray(k), np.asarray(v)
        for name, x, d in (("k", k, self.head_dim), ("v", v, self.head_dim_v)):
            if x.dtype != self.dtype:
                raise TypeError(f"{name} has dtype {x.dtype.name} but the cache holds "
                                f"{self.dtype.name}; convert with {name}.astype(np.{self.dtype.name})")
            if x.ndim != 3 or x.shape[0] != self.num_kv_heads or x.shape[2] != d:
                raise ValueError(f"{name} must have shape (H_kv, t, {'d' if name == 'k' else 'd_v'}) = "
                                 f"({self.num_kv_heads}, t, {d}); got {x.shape}")
        if k.shape[1] != v.shape[1]:
            raise ValueError(f"k and v must hold the same number of tokens t; got k {k.shape} and v {v.shape}")
        return k, v

    def _take(self) -> int:
        page = self._free.pop()
        self._refs[page] = 1
        return page

    def append(self, seq: Hashable, k: np.ndarray, v: np.ndarray) -> None:
        """Store ``k`` (H_kv, t, d) and ``v`` (H_kv, t, d_v) at the sequence's next ``t`` positions.

        Creates the sequence on first use. Takes new pages from the pool as needed, and
        first copies the last page when it is partly filled and shared (copy-on-write).
        Raises :class:`PoolExhaustedError` before writing anything when the pool has too
        few free pages.
        """
        try:
            hash(seq)
        except TypeError:
            raise TypeError(f"seq must be a hashable id (an int or a string); got {type(seq).__name__}") from None
        if seq in self._freed:
            self._live(seq)  # raises: appending after free
        k, v = self._check_kv(k, v)
        table = self._tables.get(seq, [])
        n, t, size = self._lengths.get(seq, 0), k.shape[1], self.page_size
        room = (-n) % size  # free slots in the last page
        copy = int(t > 0 and room > 0 and self._refs[table[-1]] > 1)
        new_pages = -(-max(0, t - room) // size)
        if copy + new_pages > len(self._free):
            what = f"{new_pages} new" + (" + 1 copy-on-write of the shared last page" if copy else "")
            raise PoolExhaustedError(
                f"the page pool is exhausted: appending {t} token(s) to sequence {seq!r} needs "
                f"{copy + new_pages} free page(s) ({what}), but only {len(self._free)} of "
                f"{self.num_pages} are free; nothing was written. Free finished sequences or "
                "create the cache with more pages.")
        self._tables.setdefault(seq, table)
        self._lengths.setdefault(seq, 0)
        if copy:  # copy-on-write: this sequence gets its own copy of the shared last page
            old, page = table[-1], self._take()
            self.k_pages[page], self.v_pages[page] = self.k_pages[old], self.v_pages[old]
            self._refs[old] -= 1
            table[-1] = page
            self.copies += 1
        table.extend(self._take() for _ in range(new_pages))
        pos = np.arange(n, n + t)  # the new positions
        pages = np.asarray(table, dtype=np.int64)[pos // size]  # (t,)
        self.k_pages[pages, :, pos % size] = k.transpose(1, 0, 2)  # (t, H_kv, d)
        self.v_pages[pages, :, pos % size] = v.transpose(1, 0, 2)  # (t, H_kv, d_v)
        self._lengths[seq] = n + t

    def fork(self, seq: Hashable, new_seq: Optional[Hashable] = None) -> Hashable:
        """A new sequence with the same contents, sharing every page of ``seq`` (no copy).

        ``new_seq`` names it (an id never used before); by default the smallest unused
        integer. Returns the new id.
        """
        self._live(seq)
        if new_seq is None:
            while self._next_id in self._tables or self._next_id in self._freed:
                self._next_id += 1
            new_seq = self._next_id
        elif new_seq in self._tables or new_seq in self._freed:
            raise ValueError(f"new_seq {new_seq!r} is already in use (or was freed); choose a new id")
        table = list(self._tables[seq])
        self._refs[table] += 1
        self._tables[new_seq] = table
        self._lengths[new_seq] = self._lengths[seq]
        return new_seq

    def free(self, seq: Hashable) -> None:
        """Release the sequence: each of its pages returns to the pool once no live sequence uses it."""
        self._live(seq)
        for page in reversed(self._tables.pop(seq)):
            self._refs[page] -= 1
            if self._refs[page] == 0:
                self._free.append(page)
        del self._lengths[seq]
        self._freed.add(seq)

    # ------------------------------------------------------------------ reading
    def gather(self, seq: Hashable) -> Tuple[np.ndarray, np.ndarray]:
        """The sequence's keys (H_kv, L, d) and values (H_kv, L, d_v) as contiguous arrays
        (a copy, for checking; :meth:`attention` never builds them)."""
        n = self.length(seq)
        pos = np.arange(n)
        pages = np.asarray(self._tables[seq], dtype=np.int64)[pos // self.page_size]
        k = self.k_pages[pages, :, pos % self.page_size]  # (L, H_kv, d)
        v = self.v_pages[pages, :, pos % self.page_size]  # (L, H_kv, d_v)
        return k.transpose(1, 0, 2), v.transpose(1, 0, 2)

    def attention(self, q: np.ndarray, seq: Hashable, scale: Optional[float] = None) -> np.ndarray:
        r"""Attention of the sequence's newest ``t_q`` positions over all its keys, page by page.

        ``q`` (H_q, t_q, d) in the cache's dtype, H_q a multiple of H_kv (grouped-query:
        query head ``h`` reads K/V head ``h // (H_q / H_kv)``). Query ``i`` stands for
        position ``L - t_q + i`` and sees keys ``0 .. L - t_q + i`` (bottom-right causal
        alignment). Returns (H_q, t_q, d_v): what
        :func:`attn_edu.reference.scaled_dot_product_attention` gives on :meth:`gather`'s
        keys with ``causal="bottom_right", enable_gqa=True``. Each page is one chunk of
        split-KV decoding (:func:`~attn_edu.decoding.merge_partials`).
        """
        n = self.length(seq)
        if is_torch_tensor(q):
            raise TypeError("q is a torch tensor; PagedKVCache holds NumPy arrays (convert with q.cpu().numpy())")
        q = np.asarray(q)
        _checks.check_float_dtypes(q=q.dtype.name, k=self.dtype.name, v=self.dtype.name)
        kv = (self.num_kv_heads, n)
        _checks.check_qkv_shapes(q.shape, kv + (self.head_dim,), kv + (self.head_dim_v,), enable_gqa=True)
        if q.ndim != 3:
            raise ValueError(f"q must have shape (H_q, t_q, d); got {q.shape}")
        t_q = q.shape[1]
        if t_q > n:
            raise ValueError(f"q holds {t_q} queries but sequence {seq!r} has only {n} positions; "
                             "append the new tokens' keys and values before attending")
        s = _checks.check_scale(scale, q.shape[-1])
        allowed = np.asarray(causal_mask(t_q, n, "bottom_right"))  # (t_q, L)
        outs, lses = [np.zeros(q.shape[:2] + (self.head_dim_v,), q.dtype)], [np.full(q.shape[:2], -np.inf, q.dtype)]
        for i, page in enumerate(self._tables[seq]):
            c0, c1 = i * self.page_size, min((i + 1) * self.page_size, n)
            if c0 >= c1:
                break
            page_mask = allowed[:, c0:c1]
            o, lse = flash_attention(q, self.k_pages[page, :, :c1 - c0], self.v_pages[page, :, :c1 - c0],
                                     mask=None if page_mask.all() else page_mask, scale=s,
                                     block_k=c1 - c0, return_lse=True, enable_gqa=True)
            outs.append(o)  # (H_q, t_q, d_v)
            lses.append(lse)  # (H_q, t_q)
        return merge_partials(outs, lses)[0]


# ---------------------------------------------------------------------- measurements
def paged_vs_contiguous(lengths, page_size: int, max_len: Optional[int] = None) -> Dict[str, int]:
    """Memory of a batch of sequences in a paged cache vs. contiguous max-length reservations.

    Fills a :class:`PagedKVCache` (one K/V head of width 1: what is counted is token
    *slots*, multiply by the bytes of one token's keys and values for a model) with one
    sequence per entry of ``lengths``, and reports, in slots: ``tokens`` (the sum of the
    lengths), ``paged`` (pages in use x ``page_size``), ``fragmentation`` (``paged -
    tokens``, below one page per sequence), ``reserved`` (``len(lengths) * max_len``, what
    a cache that reserves the longest allowed sequence for each one holds; ``max_len``
    defaults to the longest length) and ``table_entries`` (block-table entries, one per
    page). Chapter 13 plots it.
    """
    lengths = [_checks.check_length("length", n) for n in lengths]
    page_size = _checks.check_length("page_size", page_size, minimum=1)
    longest = max(lengths, default=0)
    max_len = longest if max_len is None else _checks.check_length("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"every length must be <= max_len={max_len}; got {longest}")
    pages = sum(-(-n // page_size) for n in lengths)
    cache = PagedKVCache(page_size, max(1, pages), 1, 1, dtype=np.float16)
    for i, n in enumerate(lengths):
        z = np.zeros((1, n, 1), np.float16)
        cache.append(i, z, z)
    tokens = sum(lengths)
    return {"tokens": tokens, "paged": cache.num_used_pages * page_size,
            "fragmentation": cache.num_used_pages * page_size - tokens,
            "reserved": len(lengths) * max_len, "table_entries": cache.num_used_pages}


def parallel_sampling_pages(prompt: int, samples: int, generated: int, page_size: int) -> Dict[str, int]:
    """Pages for ``samples`` continuations of one prompt, with and without prefix sharing.

    Measured on a :class:`PagedKVCache`: the prompt is appended once and
    :meth:`~PagedKVCache.fork` ed ``samples`` times, each fork appends ``generated`` tokens
    (its first append copies the shared, partly filled last page -- except the last fork
    to write, which by then owns it alone), the prompt's own sequence having been freed.
    Returns ``shared`` (pages in use then), ``unshared`` (pages of ``samples`` independent
    sequences of ``prompt + generated`` tokens) and ``copies`` (copy-on-write copies made).
    """
    prompt = _checks.check_length("prompt", prompt, minimum=1)
    samples = _checks.check_length("samples", samples, minimum=1)
    generated = _checks.check_length("generated", generated)
    page_size = _checks.check_length("page_size", page_size, minimum=1)
    unshared = samples * -(-(prompt + generated) // page_size)
    cache = PagedKVCache(page_size, unshared + samples, 1, 1, dtype=np.float16)
    z = np.zeros((1, prompt, 1), np.float16)
    cache.append("prompt", z, z)
    forks = [cache.fork("prompt") for _ in range(samples)]
    cache.free("prompt")
    g = np.zeros((1, generated, 1), np.float16)
    for seq in forks:
        cache.append(seq, g, g)
    return {"shared": cache.num_used_pages, "unshared": unshared, "copies": cache.copies}
