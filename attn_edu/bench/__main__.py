"""``python -m attn_edu.bench``: see :mod:`attn_edu.bench.cli`."""
import sys

from .cli import main

sys.exit(main())
