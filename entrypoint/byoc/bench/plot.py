"""The figure (bench.png) and the plain-text table of `make bench`'s combined results.

`results` is the driver's document (byoc.bench.run): {"allreduce": [byoc.bench.allreduce
documents], "link": {"one_way_gbps", "bidir_per_direction_gbps"} (each a number or a
stats.summary, GB/s) or null, "nccl_tests": {"rows": [{"bytes", "busbw_gbps"}]}, "throughput":
[{"label", "samples_per_s": {"summary"}}], "scaling", "launch", "pipe": byoc.bench.pipe's
document or null, "errors": {step: message}}. Every part may be missing: the figure and the
table show what there is.
"""

from __future__ import annotations

from pathlib import Path

from byoc.bench import stats
from byoc.bench.allreduce import label


def _median(value) -> float | None:
    """A number, a summary ({"median": ...}) or a measurement ({"summary": {...}}): its median."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        if "summary" in value:
            return _median(value["summary"])
        if isinstance(value.get("median"), int | float):
            return float(value["median"])
    return None


def _spread(value) -> tuple[float, float, float] | None:
    """(median, min, max) of a summary or measurement; a bare number has no spread."""
    if isinstance(value, dict) and "summary" in value:
        value = value["summary"]
    med = _median(value)
    if med is None:
        return None
    if isinstance(value, dict):
        return med, float(value.get("min", med)), float(value.get("max", med))
    return med, med, med


def _num(x: float) -> str:
    """Three significant digits or so, never in e-notation."""
    if x >= 100:
        return f"{x:.0f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "-"
    return f"{a / b:.2f}x"


def _docs(results: dict) -> list[dict]:
    return [d for d in results.get("allreduce") or [] if isinstance(d, dict) and "results" in d]


def _baseline(doc: dict, docs: list[dict]) -> dict | None:
    """What a Horovod line is compared with: torch.distributed on the same transport (gloo for
    CPU tensors, nccl for GPU ones)."""
    backend = "nccl" if doc.get("backend") == "nccl" else "gloo"
    for other in docs:
        if other.get("lib") == "torch" and other.get("backend") == backend:
            return other
    return None


def _nccl_rows(results: dict) -> list[dict]:
    nccl = results.get("nccl_tests")
    return (nccl.get("rows") or []) if isinstance(nccl, dict) else []


def _grid(rows: list[list[str]]) -> list[str]:
    """Columns aligned: the first to the left, the numbers to the right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _where(results: dict) -> tuple[int | None, list[str]]:
    """(world size, hosts) of the run: from an allreduce document, else the driver's own."""
    for doc in _docs(results):
        return doc.get("world_size"), list(doc.get("hosts") or [])
    hosts = list(results.get("hosts") or [])
    slots = results.get("slots")
    return (len(hosts) * slots if hosts and isinstance(slots, int) else None), hosts


def _allreduce_table(results: dict) -> list[str]:
    docs = _docs(results)
    nccl = {r["bytes"]: r["busbw_gbps"] for r in _nccl_rows(results)}
    if not docs and not nccl:
        return []
    by_size = [{r["bytes"]: r for r in doc["results"]} for doc in docs]
    sizes = sorted({n for rows in by_size for n in rows} | set(nccl))
    versus = [
        (i, _baseline(doc, docs)) for i, doc in enumerate(docs) if doc.get("lib") == "horovod"
    ]
    versus = [(i, base) for i, base in versus if base is not None]
    # Horovod cells carry their ratio to torch on the same transport: "0.757 1.97x".
    header = ["size", *(label(d).replace("Horovod", "hvd") for d in docs)]
    header += ["nccl-tests"] if nccl else []
    base_of = dict(versus)
    rows = [header]
    for n in sizes:
        medians = [_median(rows_.get(n)) for rows_ in by_size]
        row = [stats.human(n)]
        for i, m in enumerate(medians):
            cell = "-" if m is None else _num(m)
            if i in base_of and m is not None:
                base = _median({r["bytes"]: r for r in base_of[i]["results"]}.get(n))
                cell += f" {_ratio(m, base)}"
            row.append(cell)
        if nccl:
            row.append(_num(nccl[n]) if n in nccl else "-")
        rows.append(row)
    steady = []
    for doc in docs:
        worst = min(
            (
                (r["summary"]["min"] / r["summary"]["median"], r["bytes"])
                for r in doc["results"]
                if r.get("summary") and r["summary"].get("median")
            ),
            default=None,
        )
        if worst:
            steady.append(f"{label(doc)} {worst[0]:.2f} at {stats.human(worst[1])}")
    world, hosts = _where(results)
    repeats = max((len(r.get("busbw_gbps", [])) for d in docs for r in d["results"]), default=0)
    title = "allreduce bus bandwidth, GB/s"
    title += f" (median of {repeats} repeats)" if repeats else ""
    if world:
        title += f"; world size {world} on {len(hosts)} host(s): {', '.join(hosts)}"
    lines = [title, *_grid(rows)]
    if steady:
        lines.append("steadiness (slowest repeat / median, worst size): " + "; ".join(steady))
    return lines


def _link_line(results: dict) -> list[str]:
    link = results.get("link")
    if not isinstance(link, dict):
        return []
    one, both = _median(link.get("one_way_gbps")), _median(link.get("bidir_per_direction_gbps"))
    parts = []
    if one is not None:
        parts.append(f"one way {_num(one)} GB/s")
    if both is not None:
        parts.append(f"both ways at once {_num(both)} GB/s per direction")
    return [f"link: {', '.join(parts)}"] if parts else []


def _throughput_lines(results: dict) -> list[str]:
    entries = [e for e in results.get("throughput") or [] if isinstance(e, dict)]
    shown = []
    for e in entries:
        spread = _spread(e.get("samples_per_s"))
        if spread is not None:
            med, lo, hi = spread
            shown.append((str(e.get("label", "?")), med, f"{_num(med)} ({_num(lo)}-{_num(hi)})"))
    if not shown:
        return []
    lines = [
        "training throughput, samples/s, median (min-max): "
        + ", ".join(f"{name} {text}" for name, _, text in shown)
    ]
    ddp = next((med for name, med, _ in shown if "ddp" in name.lower()), None)
    for name, med, _ in shown:
        if "ddp" not in name.lower() and ddp:
            lines.append(f"{name} / DDP: {_ratio(med, ddp)}")
    return lines


def _scaling_lines(results: dict) -> list[str]:
    lines = []
    scaling = results.get("scaling")
    if isinstance(scaling, dict) and isinstance(scaling.get("efficiency"), int | float):
        one, all_ = _median(scaling.get("one_host")), _median(scaling.get("all_hosts"))
        lines.append(
            f"weak scaling: 1 host {'-' if one is None else _num(one)} samples/s, "
            f"{scaling.get('hosts', '?')} hosts {'-' if all_ is None else _num(all_)} samples/s, "
            f"efficiency {scaling['efficiency']:.2f}"
        )
    launch = results.get("launch")
    if isinstance(launch, dict) and isinstance(launch.get("overhead_s"), int | float):
        lines.append(f"horovodrun launch overhead: {launch['overhead_s']:.2f} s")
    return lines


def _pipe_lines(results: dict) -> list[str]:
    pipe = results.get("pipe")
    cases = (pipe.get("results") or []) if isinstance(pipe, dict) else []
    lines = []
    for c in cases:
        reader, raw = _median(c.get("reader")), _median(c.get("raw"))
        if reader is None or raw is None:
            continue
        lines.append(
            f"pipe {c.get('framing')} {stats.human(c.get('record_bytes', 0))} records: "
            f"ChannelDataset {_num(reader)} MB/s, raw FIFO read {_num(raw)} MB/s, "
            f"{_ratio(reader, raw)}"
        )
    return lines


def table(results: dict) -> str:
    """The results as plain text: allreduce medians per size (each Horovod line also as a ratio
    to torch.distributed on the same transport), then the link, training throughput (Horovod /
    DDP), scaling, launch overhead, the Pipe-mode reader and the steps that failed. A part that
    cannot be read says so instead of failing the rest."""
    sections = []
    for part in (_allreduce_table, _link_line, _throughput_lines, _scaling_lines, _pipe_lines):
        try:
            lines = part(results)
        except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
            lines = [f"{part.__name__.strip('_')}: unreadable ({type(exc).__name__}: {exc})"]
        if lines:
            sections.append("\n".join(lines))
    errors = results.get("errors")
    if isinstance(errors, dict) and errors:
        first = {k: (str(v).strip().splitlines() or [""])[-1][:160] for k, v in errors.items()}
        sections.append("\n".join(f"FAILED {k}: {v}" for k, v in first.items()))
    return "\n\n".join(sections) + "\n" if sections else "no results\n"


# --- the figure --------------------------------------------------------------------------------


def _bars(ax, names: list[str], spreads: list[tuple[float, float, float]], **kw) -> None:
    meds = [s[0] for s in spreads]
    err = [[s[0] - s[1] for s in spreads], [s[2] - s[0] for s in spreads]]
    ax.bar(names, meds, yerr=err, capsize=4, **kw)


def plot(results: dict, png: Path) -> None:
    """bench.png: allreduce bus bandwidth vs message size (median, min-max bars) with the link's
    speed; training throughput; and the Pipe-mode reader vs a raw FIFO read, when measured."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    pipe = results.get("pipe")
    cases = [
        c
        for c in ((pipe.get("results") or []) if isinstance(pipe, dict) else [])
        if _spread(c.get("reader")) and _spread(c.get("raw"))
    ]
    panels = 3 if cases else 2
    ratios = [2.2, 1, 1.4][:panels]
    # The Figure API without pyplot: no global state, the Agg canvas whatever the environment.
    fig = Figure(figsize=(3.8 * sum(ratios) + 1, 6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, gridspec_kw={"width_ratios": ratios})

    ax = axes[0]
    sizes: set[int] = set()
    for doc in _docs(results):
        rows = sorted((r for r in doc["results"] if _spread(r)), key=lambda r: r["bytes"])
        if not rows:
            continue
        xs = [r["bytes"] for r in rows]
        spreads = [_spread(r) for r in rows]
        med = [s[0] for s in spreads]
        err = [[s[0] - s[1] for s in spreads], [s[2] - s[0] for s in spreads]]
        style = "-" if doc.get("lib") == "horovod" else "--"
        ax.errorbar(xs, med, yerr=err, fmt=style, marker="o", ms=4, capsize=3, label=label(doc))
        sizes.update(xs)
    nccl = sorted(_nccl_rows(results), key=lambda r: r["bytes"])
    if nccl:
        xs = [r["bytes"] for r in nccl]
        ax.plot(xs, [r["busbw_gbps"] for r in nccl], "k:", marker="x", label="nccl-tests")
        sizes.update(xs)
    link = results.get("link") if isinstance(results.get("link"), dict) else {}
    one, both = _median(link.get("one_way_gbps")), _median(link.get("bidir_per_direction_gbps"))
    if one is not None:
        ax.axhline(one, ls="--", color="0.35", label=f"link, one way ({_num(one)} GB/s)")
    if both is not None:
        ax.axhline(both, ls="-.", color="0.6", label=f"link, both ways ({_num(both)} GB/s each)")
    if sizes:
        ax.set_xscale("log", base=2)
        ticks = sorted(sizes)
        ax.set_xticks(ticks, [stats.human(n) for n in ticks], rotation=45, ha="right")
        ax.minorticks_off()
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("message size")
    ax.set_ylabel("allreduce bus bandwidth, GB/s")
    ax.set_title("allreduce (median, min-max)")
    ax.grid(alpha=0.3)

    ax = axes[1]
    entries = [
        (str(e.get("label", "?")), _spread(e.get("samples_per_s")))
        for e in results.get("throughput") or []
        if isinstance(e, dict)
    ]
    entries = [(name, s) for name, s in entries if s is not None]
    if entries:
        _bars(
            ax,
            [n for n, _ in entries],
            [s for _, s in entries],
            color=["C0", "C1", "C2"][: len(entries)],
        )
    else:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("samples/s")
    ax.set_title("training throughput (median, min-max)")
    ax.grid(axis="y", alpha=0.3)

    if cases:
        ax = axes[2]
        names = [f"{c['framing']}\n{stats.human(c['record_bytes'])}" for c in cases]
        xs = list(range(len(cases)))
        for offset, key, name in (
            (-0.2, "reader", "ChannelDataset"),
            (0.2, "raw", "raw FIFO read"),
        ):
            spreads = [_spread(c[key]) for c in cases]
            med = [s[0] for s in spreads]
            err = [[s[0] - s[1] for s in spreads], [s[2] - s[0] for s in spreads]]
            ax.bar([x + offset for x in xs], med, 0.4, yerr=err, capsize=3, label=name)
        ax.set_xticks(xs, names)
        ax.set_ylabel("MB/s of payload")
        ax.set_title("Pipe mode: reader vs raw read")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)

    world, hosts = _where(results)
    title = "make bench"
    if world:
        title += f": world size {world}"
    if hosts:
        title += f" on {len(hosts)} host(s): {', '.join(hosts)}"
    fig.suptitle(title)
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
