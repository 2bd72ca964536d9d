"""Live explorers: ipywidgets controls that recompute a figure in a running kernel.

The static book page cannot run Python, so every explorer in the book comes twice:
a plotly slider figure with precomputed frames (:func:`attn_edu.viz.sweep_figure`),
which works online with no kernel, and a live version built here, which recomputes
with :mod:`attn_edu` on every change in Jupyter or Colab. On the static page a live
explorer shows only the state it was saved with.

ipywidgets, IPython and matplotlib are imported inside the function, so
``import attn_edu`` needs NumPy only. First used in chapter 01.
"""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["live_explorer"]


def _show(result: Any) -> None:
    """Display what a compute function returned, inside the current Output widget."""
    from IPython.display import display

    if result is None:  # the function drew with pyplot itself
        import sys

        if "matplotlib.pyplot" in sys.modules:
            import matplotlib.pyplot as plt

            if plt.get_fignums():
                plt.show()
        return
    if type(result).__module__.startswith("matplotlib") and hasattr(result, "savefig"):
        import matplotlib.pyplot as plt

        display(result)
        plt.close(result)  # displayed once, here; no second copy at the end of the cell
        return
    display(result)


def live_explorer(compute: Callable[..., object], *, columns: int = 2, **controls: Any):
    """Build a live explorer: ``compute(**values)`` re-runs whenever a control changes.

    Args:
        compute: called with one keyword argument per control, named as in ``controls``,
            holding that control's current value. It may return a matplotlib ``Figure``
            (displayed, then closed), a plotly figure or anything else IPython can display,
            or ``None`` after drawing with pyplot.
        columns: how many controls per row above the output.
        **controls: ipywidgets value widgets, e.g.
            ``scale=ipywidgets.FloatLogSlider(value=1, base=10, min=-1, max=1)``.

    Returns an ``ipywidgets.VBox`` (the controls, then an ``Output`` with the figure).
    Make it the last expression of a cell to show it. ``compute`` runs once immediately,
    so the saved notebook (and the static page) shows the initial state.

    Raises ValueError without controls and TypeError when ``compute`` is not callable or a
    control is not an ipywidgets value widget. Chapter 01 introduces it.

    Example::

        live_explorer(lambda scale, query: plot_weights(scale, query),
                      scale=widgets.FloatLogSlider(value=1, min=-1.3, max=1, description="scale"),
                      query=widgets.IntSlider(value=0, min=0, max=2, description="query"))
    """
    if not callable(compute):
        raise TypeError(f"compute must be callable; got {type(compute).__name__}")
    if not controls:
        raise ValueError("live_explorer needs at least one control, e.g. scale=ipywidgets.FloatSlider(...)")
    import ipywidgets as widgets

    for name, control in controls.items():
        if not isinstance(control, widgets.ValueWidget):
            raise TypeError(
                f"control {name!r} must be an ipywidgets value widget (FloatSlider, IntSlider, "
                f"Dropdown, ...); got {type(control).__name__}"
            )
        if not getattr(control, "description", None) and hasattr(control, "description"):
            control.description = name
        if hasattr(control, "continuous_update"):
            control.continuous_update = False  # recompute on release, not on every pixel
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise ValueError(f"columns must be a positive integer; got {columns!r}")

    def update(**values: Any) -> None:
        _show(compute(**values))

    output = widgets.interactive_output(update, controls)
    boxes = list(controls.values())
    rows = [widgets.HBox(boxes[i:i + columns]) for i in range(0, len(boxes), columns)]
    return widgets.VBox([*rows, output])
