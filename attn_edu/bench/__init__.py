"""Benchmarks of attention implementations: ``python -m attn_edu.bench``.

A sweep times every implementation named with ``--impl`` at every length ``--n`` and
writes one JSON document that says where and how the numbers were taken:

* ``device`` (CPU model from /proc/cpuinfo, or ``torch.cuda.get_device_name``),
  ``versions`` (python, numpy, torch, triton, attn_edu), ``git_commit``, ``date``
  (UTC, ISO 8601) and the ``command`` line;
* per (impl, n): median and minimum time in ms, TFLOP/s and, with ``--memory``, the
  peak bytes above the inputs (:func:`attn_edu.profiling.peak_memory`); ``timer`` (how it
  was timed: ``perf_counter`` on the CPU, ``cuda_events_l2_flushed`` on a GPU, as
  ``triton.testing.do_bench``) and ``host_median_ms`` (on a GPU, the host's time in the
  call beside the GPU's); for ``triton`` rows ``autotune_config`` (the tile it ran);
* ``sdpa_backend``: SDPA's best backend for the device, dtype and head dim (flash, else
  efficient, else math); on a GPU the dtype defaults to its half type (float16 on a T4,
  bfloat16 from compute capability 8.0).

TFLOP/s use :func:`attn_edu.profiling.attention_flops` (``FLOP_FORMULA``): matmul FLOPs
only, ``4*B*H*n^2*d`` forward, half of that when causal. The sparse ``numpy_window`` and
``torch_window`` (tiled attention with a ``--window`` sliding-window mask) count only the
allowed pairs (:func:`attn_edu.masks.allowed_pairs`). Chapters 08 and 10 plot the recorded
sweeps in ``attn_edu/data/bench/*.json`` (:func:`recorded_results`).

``--goals`` measures the book's performance goals side by side in one run and exits
non-zero when a measured goal fails; goals that cannot run here (no GPU) are printed as
*not run*. ``--block-sparse`` benchmarks the block-sparse Triton kernel (CUDA only).
Examples::

    python -m attn_edu.bench --impl numpy_naive torch_sdpa --n 256 512 1024 --memory \\
        --out sweep.json
    python -m attn_edu.bench --list
    python -m attn_edu.bench --goals
    python -m attn_edu.bench --block-sparse --n 8192 16384 --out block_sparse.json
    python -m attn_edu.bench --correctness     # every kernel vs float64, the GPU's half type
    python -m attn_edu.bench --measure backward --out backward.json   # see MEASURES

One module per part, all reachable from here (``attn_edu.bench.X``):

* ``attn_edu.bench.registry`` -- the implementations (``REGISTRY``,
  :func:`register_impl`, :class:`BenchConfig`) and their inputs;
* ``attn_edu.bench.env`` -- device, versions, commit, threads; the GPU's half type
  (:func:`gpu_half_dtype`), SDPA's best backend there (:func:`best_sdpa_backend`) and the
  autotuner's choice (:func:`autotune_config`);
* ``attn_edu.bench.check`` -- every kernel against float64 in the GPU's half type;
* ``attn_edu.bench.sweep`` -- timing sweeps and their JSON files;
* ``attn_edu.bench.goals`` -- the goals, as ratios measured side by side;
* ``attn_edu.bench.block_sparse`` -- the block-sparse kernel against FlexAttention;
* ``attn_edu.bench.decode`` -- one decoding step (``L_q = 1``) over a KV cache (chapter 13);
* ``attn_edu.bench.measure`` -- the measurements the recorded sweeps lack (``--measure NAME``:
  the backward, the forward against cuDNN, causal at d = 128, host time, CUDA graphs, memory);
* ``attn_edu.bench.host`` -- the package's own Python time per Triton call on the CPU, the
  launches stubbed, before and after the launch decisions' caches, and the autotuned
  launches with Triton's dispatch, through the autotuner or its choice direct, each call
  with Triton's dispatch on every launch or the package's direct launch, and each call's
  host time split between the dispatch and the package (``--host-overhead``);
* ``attn_edu.bench.diagnose`` -- why a call is slow: its host time split by whose code spent it
  (cProfile), and Nsight Compute's reading of its kernels (``--measure profile``);
* ``attn_edu.bench.compile_time`` -- a first autotuned call's compiles for an H100, in series
  against ahead in parallel threads, timed on the CPU (``--compile-ahead``);
* ``attn_edu.bench.published`` -- published GPU numbers (cited) and the roofline model;
* ``attn_edu.bench.figures`` -- figures of recorded documents, labelled with the device;
* ``attn_edu.bench.validate`` -- the schema and plausibility check of documents and submissions
  (``python -m attn_edu.bench validate FILE_OR_FOLDER ...``);
* ``attn_edu.bench.submission`` -- a run as one folder (``attn_edu/data/submissions/``), and reading them;
* ``attn_edu.bench.results`` -- the "Results by GPU" page's table and figure, from every run;
* ``attn_edu.bench.cli`` -- the command line.
"""
from __future__ import annotations

from . import block_sparse, check, cli, compile_time, decode, diagnose, env, figures, goals, host, measure, published, registry, results, submission, sweep, validate
from .block_sparse import *  # noqa: F401,F403  (each module's __all__)
from .check import *  # noqa: F401,F403
from .decode import *  # noqa: F401,F403
from .cli import *  # noqa: F401,F403
from .env import *  # noqa: F401,F403
from .figures import *  # noqa: F401,F403
from .goals import *  # noqa: F401,F403
from .measure import *  # noqa: F401,F403
from .host import *  # noqa: F401,F403
from .diagnose import *  # noqa: F401,F403
from .compile_time import *  # noqa: F401,F403
from .published import *  # noqa: F401,F403
from .registry import *  # noqa: F401,F403
from .sweep import *  # noqa: F401,F403
from .results import *  # noqa: F401,F403
from .submission import *  # noqa: F401,F403
from .validate import *  # noqa: F401,F403

__all__ = (registry.__all__ + env.__all__ + sweep.__all__ + goals.__all__
           + block_sparse.__all__ + check.__all__ + decode.__all__ + measure.__all__ + host.__all__
           + diagnose.__all__
           + compile_time.__all__
           + published.__all__
           + figures.__all__ + validate.__all__ + submission.__all__
           + results.__all__
           + cli.__all__)

# Data is documented where the API page reads it, the package (functions and classes
# carry their docstrings along; a constant does not).
#: Every implementation a sweep can time, by name (``attn_edu.bench.registry``).
REGISTRY = registry.REGISTRY
#: The ``schema`` field of every benchmark document (``attn_edu.bench.sweep``).
SCHEMA = sweep.SCHEMA
#: What a document holds, its ``"kind"`` (``attn_edu.bench.sweep``).
KINDS = sweep.KINDS
#: Vendor peak figures of the H100, A100 and T4 (``attn_edu.bench.published``).
GPU_SPECS = published.GPU_SPECS
#: Published FlashAttention-2/-3 throughput, with citations (``attn_edu.bench.published``).
PUBLISHED = published.PUBLISHED
#: Per-length forward throughput measured side by side by others, published as text (``attn_edu.bench.published``).
PUBLISHED_SWEEPS = published.PUBLISHED_SWEEPS
#: SDPA's backends, best first (``attn_edu.bench.env``).
SDPA_PREFERENCE = env.SDPA_PREFERENCE
#: The ``torch.nn.attention.SDPBackend`` member of each backend name (``attn_edu.bench.env``).
SDPA_BACKENDS = env.SDPA_BACKENDS
#: The GPU goals' tiny shapes in a dry run on the CPU (``attn_edu.bench.goals``).
DRY_RUN_GPU_GOALS = goals.DRY_RUN_GPU_GOALS
#: Where the recorded sweeps live, ``attn_edu/data/bench/`` (``attn_edu.bench.sweep``).
DATA_DIR = sweep.DATA_DIR
#: How a row's FLOPs are counted, written into every document (``attn_edu.bench.sweep``).
FLOP_FORMULA = sweep.FLOP_FORMULA
#: The goals, each with its comparison, its target and what is measured (``attn_edu.bench.goals``).
GOALS = goals.GOALS
#: Who measured a run ("maintainers" or "submitted"), as each edition labels it (``attn_edu.bench.figures``).
LABELS = figures.LABELS
#: Where submitted runs live, one folder a run (``attn_edu.bench.submission``).
SUBMISSIONS_DIR = submission.SUBMISSIONS_DIR
#: The "Results by GPU" page's words in each edition (``attn_edu.bench.results``).
WORDS = results.WORDS
#: The calls ``--host-overhead`` times, by name (``attn_edu.bench.host``).
HOST_CASES = host.HOST_CASES
#: The launches ``--host-overhead`` times with Triton's dispatch (the autotuned ones and the decode step), by name (``attn_edu.bench.host``).
DISPATCH_CASES = host.DISPATCH_CASES
#: Who may have measured a document, its ``measured_by`` field (``attn_edu.bench.submission``).
MEASURED_BY = submission.MEASURED_BY
#: The JSON Schema of every document kind, ``attn_edu/data/schema/bench.schema.json`` (``attn_edu.bench.validate``).
SCHEMA_FILE = validate.SCHEMA_FILE
#: The maintainers' recordings from a dirty working tree that validate still accepts, by commit (``attn_edu.bench.validate``).
GRANDFATHERED_DIRTY = validate.GRANDFATHERED_DIRTY
#: The tile of the CPU goals, 256 x 256 (``attn_edu.bench.goals``).
GOAL_BLOCK = goals.GOAL_BLOCK
#: Where the recorded decode sweeps live, ``attn_edu/data/bench/decode/`` (``attn_edu.bench.decode``).
DECODE_DIR = decode.DECODE_DIR
#: The implementations a decode sweep times (``attn_edu.bench.decode``).
DECODE_IMPLS = decode.DECODE_IMPLS
#: The measurements of ``--measure NAME``, each the kind of its document (``attn_edu.bench.measure``).
MEASURES = measure.MEASURES
#: Each measurement's sizes on a GPU and in a dry run on the CPU (``attn_edu.bench.measure``).
MEASURE_SIZES = measure.MEASURE_SIZES
#: How the ``backward`` measurement counts FLOPs, 2.5 x the forward (``attn_edu.bench.measure``).
BACKWARD_FLOP_FORMULA = measure.BACKWARD_FLOP_FORMULA
#: Whose code a host profile splits a call's time by (``attn_edu.bench.diagnose``).
OWNERS = diagnose.OWNERS
#: The Nsight Compute sections ``--measure profile`` collects (``attn_edu.bench.diagnose``).
NCU_SECTIONS = diagnose.NCU_SECTIONS
#: The kernel launched before each profiled call, where one call's kernels begin (``attn_edu.bench.diagnose``).
MARKER = diagnose.MARKER
#: What a kernel's summary keeps of ncu's sections, (key, ncu's metric name) (``attn_edu.bench.diagnose``).
SUMMARY_METRICS = diagnose.SUMMARY_METRICS
