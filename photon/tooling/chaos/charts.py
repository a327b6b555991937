"""The chaos report's PNG charts, after the Photon paper's figures.

* ``joined_per_dc.png``: joined clicks per second for each DC over the run
  (by each row's write time, in 5 s bins),
  the outage shaded and each fault marked — one DC carries the load alone
  while the other is down;
* ``catch_up.png``: the returning DC's backlog (MiB of click log not yet
  committed) and its lag (how far behind the end of its logs it is) draining.

Matplotlib's Agg backend draws without a display. How it fails: it raises
only for an unwritable directory; an empty timeline draws empty axes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from photon.extras import require
from photon.tooling.chaos.analysis import CatchUp, JoinTimes, Sample


def draw(
    samples: Sequence[Sample],
    joins: JoinTimes,
    dcs: Sequence[str],
    faults: Sequence[tuple[str, float]],
    outage: tuple[str, float, float] | None,
    catch_up: CatchUp | None,
    directory: Path,
) -> list[Path]:
    require("matplotlib", "verify", "drawing the chaos report's charts")
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "joined_per_dc.png", directory / "catch_up.png"]

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for dc in dcs:
        times, rates = _rates(joins, dc)
        ax.plot(times, rates, label=f"DC {dc}")
    if outage is not None:
        dc, down_s, up_s = outage
        ax.axvspan(down_s, up_s, color="0.85", label=f"DC {dc} down")
    for name, at_s in faults:
        ax.axvline(at_s, color="tab:red", alpha=0.35, linewidth=0.8)
        ax.annotate(name, (at_s, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                    fontsize=7, va="top", ha="right")  # fmt: skip
    ax.set(xlabel="seconds since the stream started", ylabel="joined clicks / s",
           title="Joined clicks per DC under faults")  # fmt: skip
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, backlog_ax = plt.subplots(figsize=(10, 4.5))
    dc = catch_up.dc if catch_up else (outage[0] if outage else dcs[0])
    times = [s.t_s for s in samples]
    backlog_ax.plot(times, [s.backlog_bytes.get(dc, 0) / (1 << 20) for s in samples],
                    color="tab:blue", label="backlog (MiB)")  # fmt: skip
    backlog_ax.set(xlabel="seconds since the stream started", ylabel="backlog (MiB)")
    lag_ax = backlog_ax.twinx()
    lag_ax.plot(times, [s.lag_s.get(dc, 0.0) for s in samples], color="tab:orange",
                label="lag (s)")  # fmt: skip
    lag_ax.set(ylabel="lag: behind the end of its logs (s)")
    if outage is not None:
        backlog_ax.axvspan(outage[1], outage[2], color="0.85")
    title = f"DC {dc}: backlog draining after its return"
    if catch_up and catch_up.catch_up_s is not None:
        backlog_ax.axvline(catch_up.caught_up_at_s or 0.0, color="tab:green", linestyle="--")
        title += (
            f" — caught up in {catch_up.catch_up_s:.0f} s: {catch_up.restart_s} s restart,"
            f" then drained at {catch_up.speed_x}x real time"
        )
    backlog_ax.set_title(title)
    lines = backlog_ax.get_legend_handles_labels()
    more = lag_ax.get_legend_handles_labels()
    backlog_ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left")
    fig.tight_layout()
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths


def _rates(joins: JoinTimes, dc: str, bin_s: int = 5) -> tuple[list[float], list[float]]:
    """Joined clicks per second, averaged over bins of ``bin_s`` (by each row's write time)."""
    seconds = joins.get(dc, Counter())
    if not seconds:
        return [], []
    first, last = min(seconds) // bin_s, max(seconds) // bin_s
    times, rates = [], []
    for b in range(first, last + 1):
        times.append(float(b * bin_s + bin_s / 2))
        rates.append(sum(seconds.get(b * bin_s + i, 0) for i in range(bin_s)) / bin_s)
    return times, rates
