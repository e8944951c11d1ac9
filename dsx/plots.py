"""The figures of `dsx report -o DIR`, drawn from result rows with matplotlib's Agg backend (no display needed).

matplotlib is imported inside `write_plots` only, so tables and `dsx report --help` never pay for it. Each plot
function takes rows (dicts, as dsx.report reads them) and returns a figure, or the reason it would say nothing on
those rows (then it is left out, and report.md says why: a flat line under a far-away capacity is not a finding).
"""

from __future__ import annotations

from pathlib import Path

from dsx import report as rp
from dsx.results import MEMORY_FIELDS

PLOTS = (
    ("memory_vs_micro_batch.png", "Peak memory vs micro-batch"),
    ("throughput.png", "Throughput per configuration (best micro-batch)"),
    ("memory_breakdown.png", "Memory breakdown per configuration (best micro-batch)"),
)
"""(file name, title) of every plot, in the order report.md shows them."""


FLAT = 0.05
"""A configuration's memory 'changes with micro-batch' when its ok rows differ by at least this share of the most."""

FAR = 3.0
"""A capacity more than this many times the highest memory measured is named in the legend, not drawn: its line
would flatten the measured ones to the floor."""

MARKERS = ("o", "s", "^", "D", "v", "P")
DASHES = ("-", "-.", ":")
"""Each configuration's line in the memory plot gets its own marker and dash: equal lines stay visible ("--" is the
capacity's)."""


def write_plots(rows: list[dict], folder: str | Path) -> tuple[list[tuple[Path, str]], list[tuple[str, str]]]:
    """Draw every plot that says something on these rows into `folder`: ((path, title) of each PNG written,
    (title, why not) of each left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written, left_out = [], []
    models = {rp.model_text(r) for r in rows}
    suffix = f" ({models.pop()})" if len(models) == 1 else ""  # one model: the line labels leave it out
    for (name, title), draw in zip(PLOTS, (memory_vs_micro_batch, throughput, memory_breakdown)):
        fig = draw(plt, rows, title + suffix)
        if isinstance(fig, str):
            left_out.append((title, fig))
            continue
        path = folder / name
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append((path, title))
    return written, left_out


def _changes_with_micro_batch(group: list[dict]) -> bool:
    """Whether a configuration's line says something: an OOM, or ok rows at several micro-batches whose memory
    differs by at least FLAT of the most."""
    if any(r["status"] == "oom" for r in group):
        return True
    measured = [rp.memory(r) for r in group if r["status"] == "ok" and rp.memory(r) is not None]
    return len(measured) >= 2 and max(measured) - min(measured) >= FLAT * max(measured)


def memory_vs_micro_batch(plt, rows: list[dict], title: str):
    """One panel per kind of hardware (CPU, H100, 2 x H200...: their memory is not comparable), one line per
    configuration through its ok trials, an x where a micro-batch ran out of memory (at the memory it reached when
    that was measured, else at the capacity line), and a dashed line per distinct capacity, labelled with its
    source (named in the legend only when it is FAR above what was measured). A panel whose configurations all
    keep their memory flat across micro-batches, without an OOM, is left out."""
    usable = [r for r in rows if r["status"] in ("ok", "oom")]
    if not any(rp.memory(r) is not None for r in usable):
        return "no row measured memory"
    panels: dict[str, list[dict]] = {}
    for r in usable:
        panels.setdefault(rp.gpu_label(r), []).append(r)
    panels = {hardware: panel for hardware, panel in panels.items()
              if any(_changes_with_micro_batch(group) for group in rp.plot_rows(panel).values())}
    if not panels:
        return (f"no configuration's memory changes by {FLAT:.0%} or more across micro-batches, and none ran out of "
                "memory")
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, (hardware, panel) in zip(axes[0], panels.items()):
        lines = rp.plot_rows(panel)
        capacities: dict[int, str] = {}
        for r in panel:
            if r["memory"]["capacity"]:
                capacities.setdefault(r["memory"]["capacity"], r["memory"]["capacity_source"] or "capacity")
        measured_top = max(rp.memory(r) or 0 for r in panel)
        far = {c: s for c, s in capacities.items() if measured_top and c > FAR * measured_top}
        capacities = {c: s for c, s in capacities.items() if c not in far}
        top = max([measured_top] + list(capacities)) / rp.GIB
        micro_batches: set[int] = set()
        for n, (name, group) in enumerate(lines.items()):
            color = colors[n % len(colors)]
            ok = sorted((r["micro_batch"], rp.memory(r)) for r in group
                        if r["status"] == "ok" and rp.memory(r) is not None)
            if ok:
                # lines with equal values (ZeRO-1 and ZeRO-2 often measure the same) must not hide each other:
                # each its own marker and dash, the earlier ones drawn larger underneath
                ax.plot([m for m, _ in ok], [v / rp.GIB for _, v in ok], color=color, label=name,
                        marker=MARKERS[n % len(MARKERS)], markersize=max(3, 9 - 1.5 * (n % 4)),
                        linestyle=DASHES[n % len(DASHES)], alpha=0.85)
            for r in (r for r in group if r["status"] == "oom"):
                y = (rp.memory(r) or r["memory"]["capacity"] or top * rp.GIB) / rp.GIB
                ax.scatter([r["micro_batch"]], [y], marker="x", s=90, color=color, zorder=3,
                           label=None if ok else f"{name} (OOM)")
            micro_batches.update(r["micro_batch"] for r in group)
        for capacity, source in capacities.items():
            ax.axhline(capacity / rp.GIB, linestyle="--", color="grey",
                       label=f"capacity {capacity / rp.GIB:,.1f} GiB ({source})")
        for capacity, source in far.items():
            ax.plot([], [], linestyle="none", label=f"capacity {capacity / rp.GIB:,.1f} GiB ({source}): off the scale")
        ax.scatter([], [], marker="x", color="black", label="ran out of memory (OOM)")
        ticks = sorted(micro_batches)
        if ticks and ticks[-1] / ticks[0] >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(m) for m in ticks], rotation=45 if sum(len(str(m)) + 1 for m in ticks) > 24 else 0)
        ax.minorticks_off()
        ax.set_xlabel("micro-batch per rank")
        ax.set_ylabel("peak memory per rank, GiB (" + ("host RSS" if hardware.endswith("CPU") else "peak reserved")
                      + ")")
        ax.set_title(f"{title}: {hardware}", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1, frameon=False)
    return fig


def throughput(plt, rows: list[dict], title: str):
    """A bar per configuration at its fastest ok row: tokens/s, with micro-batch and MFU (where known) beside it."""
    best = [(name, rp.best_ok(group)) for name, group in rp.plot_rows(rows).items()]
    best = [(name, r) for name, r in best if r is not None]
    if not best:
        return "no ok row with a throughput"
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.5 * len(best)))
    names = [name for name, _ in best]
    values = [rp.tokens_per_s(r) for _, r in best]
    bars = ax.barh(range(len(best)), values, color="tab:blue")
    ax.set_yticks(range(len(best)))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    for bar, (_, r) in zip(bars, best):
        mfu = r["figures"]["mfu"]
        text = f" {rp.tokens_per_s(r):,.0f} tokens/s, micro-batch {r['micro_batch']}" + (
            f", MFU {mfu:.1%}" if mfu is not None else "")
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=7)
    ax.set_xlim(0, max(values) * 1.6)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.set_xlabel("tokens/s (all ranks)")
    ax.set_title(title)
    return fig


def memory_breakdown(plt, rows: list[dict], title: str):
    """Grouped horizontal bars per configuration at its fastest ok row: every memory figure the rows measured (max
    over ranks); figures no row measured are left out. One figure alone is no breakdown (the runs table has it)."""
    best = [(name, rp.best_ok(group)) for name, group in rp.plot_rows(rows).items()]
    best = [(name, r) for name, r in best if r is not None]
    fields = [f for f in MEMORY_FIELDS if any(r["memory"]["max"][f] is not None for _, r in best)]
    if not best:
        return "no ok row"
    if len(fields) < 2:
        return f"the rows measured {' and '.join(fields) or 'no memory figure'} only: nothing to break down"
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.18 * len(best) * (len(fields) + 1)))
    height = 0.8 / len(fields)
    for i, f in enumerate(fields):
        values = [(r["memory"]["max"][f] or 0) / rp.GIB for _, r in best]
        ax.barh([y + i * height for y in range(len(best))], values, height, label=f)
    ax.set_yticks([y + height * (len(fields) - 1) / 2 for y in range(len(best))])
    ax.set_yticklabels([name for name, _ in best], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("GiB (max over ranks)")
    ax.set_title(title)
    # beside the bars, not over them (inside, it covered the last configuration's bars)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return fig
