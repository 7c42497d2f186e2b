"""The human side of the analytics: an HTML page (tables and matplotlib plots, PNGs
embedded and also written to ``plots/``) and a short text summary. Works on plain
Python rows collected from the job's tables, so it never touches Spark."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txmq_analytics.compute import Options

Row = dict[str, Any]
MAX_TABLE_ROWS = 200
MAX_BAR_ROWS = 20
COLORS = {"committed": "#2e7d32", "rolled_back": "#f9a825", "discarded": "#c62828", "pending": "#9e9e9e"}
OUTCOMES = ("committed", "rolled_back", "discarded", "pending")
OUTCOME_LABEL = {"committed": "committed", "rolled_back": "rolled back", "discarded": "discarded", "pending": "pending"}


@dataclass
class ReportData:
    input_dir: str
    output_dir: str
    options: Options
    counts: dict[str, int]
    group_status: list[Row]
    consumer_status: list[Row]
    tx_summary: list[Row]
    tx_latency: list[Row]
    time_range: tuple[int | None, int | None] = (None, None)
    group_series: list[Row] = field(default_factory=list)
    topic_series: list[Row] = field(default_factory=list)
    latencies: list[Row] = field(default_factory=list)
    checks: list[Row] = field(default_factory=list)


MAX_PLOT_SERIES = 8
MAX_LATENCIES = 200_000


def load_data(read: Callable[..., Any], *, input_dir: str, output_dir: str, options: Options) -> ReportData:
    """Everything the report shows, from the job's output tables (``read(name,
    columns=None)`` returns a pyarrow Table): sorted, top series picked."""
    import pyarrow as pa
    import pyarrow.compute as pc

    groups = sorted(read("group_status").to_pylist(), key=lambda r: (-(r["lag"] or 0), r["consumer_group"], r["topic"]))
    queues = sorted(
        read("consumer_status").to_pylist(),
        key=lambda r: (not r["stalled"], not r["behind_min"], -(r["lag"] or 0), r["store_id"], r["consumer_group"],
                       r["topic"], r["queue_id"]),
    )  # fmt: skip
    tx_summary = sorted(
        read("tx_summary").to_pylist(), key=lambda r: (-r["transactions"], r["producer_group"], r["topic"])
    )
    tx_latency = sorted(read("tx_latency").to_pylist(), key=lambda r: (r["producer_group"], r["topic"], r["outcome"]))

    group_series: list[Row] = []
    top = {(r["consumer_group"], r["topic"]) for r in groups[:MAX_PLOT_SERIES]}
    if top:
        gts = read(
            "group_timeseries",
            ["store_id", "consumer_group", "topic", "snapshot_ms", "lag", "consume_rate", "produce_rate"],
        )
        mask = pc.is_in(
            pc.binary_join_element_wise(gts["consumer_group"], gts["topic"], "\x00"),
            value_set=pa.array(["\x00".join(k) for k in top]),
        )
        group_series = sorted(gts.filter(mask).to_pylist(), key=lambda r: r["snapshot_ms"])
    rates = read("topic_rates", ["store_id", "topic", "snapshot_ms", "max_offset", "produce_rate"])
    topic_series: list[Row] = []
    if rates.num_rows:
        peak = rates.group_by("topic").aggregate([("max_offset", "max")]).to_pylist()
        top_topics = [
            r["topic"] for r in sorted(peak, key=lambda r: (-r["max_offset_max"], r["topic"]))[:MAX_PLOT_SERIES]
        ]
        topic_series = sorted(
            rates.filter(pc.is_in(rates["topic"], value_set=pa.array(top_topics))).to_pylist(),
            key=lambda r: r["snapshot_ms"],
        )
    txs = read("transactions", ["outcome", "latency_ms", "checks", "half_ms", "outcome_ms"])
    timed = txs.filter(pc.is_valid(txs["latency_ms"]))
    latencies = timed.select(["outcome", "latency_ms", "checks"]).slice(0, MAX_LATENCIES).to_pylist()
    checks = sorted(
        (
            {"checks": r["checks"], "count": r["checks_count"]}
            for r in txs.group_by("checks").aggregate([("checks", "count")]).to_pylist()
        ),
        key=lambda r: r["checks"],
    )
    ts = read("lag_timeseries", ["snapshot_ms"])["snapshot_ms"]
    lows = [pc.min(c).as_py() for c in (ts, txs["half_ms"], txs["outcome_ms"])]
    highs = [pc.max(c).as_py() for c in (ts, txs["half_ms"], txs["outcome_ms"])]
    lo = min((v for v in lows if v is not None), default=None)
    hi = max((v for v in highs if v is not None), default=None)
    return ReportData(
        input_dir=input_dir,
        output_dir=output_dir,
        options=options,
        counts={"offset_rows": len(ts), "transactions": txs.num_rows},
        group_status=groups,
        consumer_status=queues,
        tx_summary=tx_summary,
        tx_latency=tx_latency,
        time_range=(lo, hi),
        group_series=group_series,
        topic_series=topic_series,
        latencies=latencies,
        checks=checks,
    )


# -- formatting --------------------------------------------------------------------------------


def fmt_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _since(r: Row) -> str:
    """Since when the offset has not moved (see compute._run_start)."""
    since = r.get("stalled_since_ms")
    return f", since {fmt_time(since)}" if since is not None else ""


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    s = float(seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(round(s), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def fmt_drain(r: Row) -> str:
    return "caught up" if r.get("lag") == 0 else fmt_duration(r.get("time_to_drain_s"))


def fmt_ms(ms: float | None) -> str:
    return "-" if ms is None else fmt_duration(ms / 1000)


def fmt_rate(r: float | None) -> str:
    return "-" if r is None else f"{r:,.2f}/s"


def fmt_int(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _qname(r: Row) -> str:
    return f"{r['consumer_group']} / {r['topic']} q{r['queue_id']}"


# -- text summary ------------------------------------------------------------------------------


def text_summary(d: ReportData, *, top: int = 5) -> str:
    lines = []
    lo, hi = d.time_range
    span = f"{fmt_time(lo)} .. {fmt_time(hi)}" if lo is not None else "no data"
    topics = {r["topic"] for r in d.group_status}
    lines.append(
        f"txmq analytics: {len(d.group_status)} group/topic pairs, {len(topics)} topics, "
        f"{len(d.consumer_status)} queues; {span}"
    )
    if d.group_status:
        total = sum(r["lag"] or 0 for r in d.group_status)
        worst = ", ".join(
            f"{r['consumer_group']}/{r['topic']} {fmt_int(r['lag'])} (drain {fmt_duration(r['time_to_drain_s'])})"
            for r in d.group_status[:top]
            if (r["lag"] or 0) > 0
        )
        lines.append(f"lag: {fmt_int(total)} messages in total" + (f"; largest: {worst}" if worst else ""))
    stalled = [r for r in d.consumer_status if r["stalled"]]
    behind = [r for r in d.consumer_status if r["behind_min"]]
    if stalled:
        lines.append(
            f"STALLED consumers ({plural(len(stalled), 'queue')}): "
            + ", ".join(
                f"{_qname(r)} lag {fmt_int(r['lag'])} for {fmt_ms(r['stalled_for_ms'])}{_since(r)}"
                for r in stalled[:top]
            )
            + (" ..." if len(stalled) > top else "")
        )
    else:
        lines.append("stalled consumers: none")
    if behind:
        lines.append(
            f"BEHIND MIN OFFSET, data lost ({plural(len(behind), 'queue')}): "
            + ", ".join(f"{_qname(r)} lost {fmt_int(r['lost_messages'])}" for r in behind[:top])
            + (" ..." if len(behind) > top else "")
        )
    else:
        lines.append("groups behind a queue's min offset: none")
    if d.tx_summary:
        n = sum(r["transactions"] for r in d.tx_summary)
        parts = ", ".join(
            f"{OUTCOME_LABEL[k]} {fmt_int(sum(r[k] for r in d.tx_summary))} "
            f"({fmt_pct(sum(r[k] for r in d.tx_summary) / n if n else None)})"
            for k in ("committed", "rolled_back", "discarded", "pending")
        )
        checks = sum(r["checks"] or 0 for r in d.tx_summary)
        lines.append(f"transactions: {fmt_int(n)}; {parts}; {checks / n if n else 0:.2f} checks per transaction")
        for r in d.tx_summary[:top]:
            lines.append(
                f"  {r['producer_group']} -> {r['topic']}: {r['transactions']} tx,"
                f" commit {fmt_pct(r['committed_ratio'])}, "
                f"rollback {fmt_pct(r['rolled_back_ratio'])}, discard {fmt_pct(r['discarded_ratio'])}; "
                f"half->outcome p50 {fmt_ms(r['latency_p50_ms'])} p95 {fmt_ms(r['latency_p95_ms'])} "
                f"p99 {fmt_ms(r['latency_p99_ms'])}"
            )
    else:
        lines.append("transactions: none exported")
    return "\n".join(lines)


# -- plots -------------------------------------------------------------------------------------


def _figure(width: float = 9, height: float = 3.6) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _series(rows: Sequence[Row], key: Callable[[Row], str], y: str) -> dict[str, tuple[list[datetime], list[float]]]:
    out: dict[str, tuple[list[datetime], list[float]]] = {}
    for r in rows:
        if r.get(y) is None:
            continue
        xs, ys = out.setdefault(key(r), ([], []))
        xs.append(_dt(r["snapshot_ms"]))
        ys.append(r[y])
    return out


def _time_axis(ax: Any) -> None:
    from matplotlib import dates as mdates

    loc = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))
    ax.grid(True, alpha=0.3)


def plot_lag(d: ReportData) -> bytes | None:
    stores = {r["store_id"] for r in d.group_series}

    def label(r: dict) -> str:
        return f"{r['consumer_group']} / {r['topic']}" + (f" @{r['store_id']}" if len(stores) > 1 else "")

    series = _series(d.group_series, label, "lag")
    if not series:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=name)
    ax.set_title("Lag over time (messages, all queues of the group on the topic)")
    ax.set_ylabel("messages")
    ax.set_ylim(bottom=0)
    _time_axis(ax)
    ax.legend(fontsize=8, loc="upper left")
    return _png(fig)


def plot_rates(d: ReportData) -> bytes | None:
    consume = _series(d.group_series, lambda r: f"{r['consumer_group']} / {r['topic']}", "consume_rate")
    produce = _series(d.topic_series, lambda r: r["topic"], "produce_rate")
    if not consume and not produce:
        return None
    fig = _figure(9, 5.6)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    for name, (xs, ys) in consume.items():
        ax1.plot(xs, ys, label=name)
    ax1.set_title("Consumption rate per group (committed offsets, messages/s)")
    for name, (xs, ys) in produce.items():
        ax2.plot(xs, ys, label=name)
    ax2.set_title("Production rate per topic (queue max offsets, messages/s)")
    for ax, s in ((ax1, consume), (ax2, produce)):
        ax.set_ylabel("msg/s")
        _time_axis(ax)
        if s:
            ax.legend(fontsize=8, loc="upper left")
    return _png(fig)


def plot_queue_lag(d: ReportData) -> bytes | None:
    rows = sorted(
        (r for r in d.consumer_status if (r["lag"] or 0) > 0 or r["behind_min"]), key=lambda r: -(r["lag"] or 0)
    )
    rows = rows[:MAX_BAR_ROWS]
    if not rows:
        return None
    fig = _figure(9, 0.8 + 0.28 * len(rows))
    ax = fig.add_subplot()
    names = [_qname(r) + (f" @{r['store_id']}" if r["store_id"] else "") for r in rows][::-1]
    colors = ["#c62828" if r["stalled"] else "#ef6c00" if r["behind_min"] else "#1565c0" for r in rows][::-1]
    ax.barh(names, [r["lag"] for r in rows][::-1], color=colors)
    ax.set_title("Current lag per queue (red: stalled, orange: behind the min offset)")
    ax.set_xlabel("messages")
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def plot_outcomes(d: ReportData) -> bytes | None:
    from matplotlib.ticker import MaxNLocator

    rows = d.tx_summary[:MAX_BAR_ROWS]
    if not rows:
        return None
    fig = _figure(9, 1.4 + 0.35 * len(rows))
    ax = fig.add_subplot()
    names = [f"{r['producer_group']} -> {r['topic']}" for r in rows][::-1]
    left = [0.0] * len(rows)
    for k in ("committed", "rolled_back", "discarded", "pending"):
        vals = [r[k] for r in rows][::-1]
        ax.barh(names, vals, left=left, color=COLORS[k], label=OUTCOME_LABEL[k])
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_title("Transaction outcomes per producer group and topic")
    ax.set_xlabel("transactions")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(fontsize=8, loc="outside lower center", ncols=4)
    ax.tick_params(axis="y", labelsize=8)
    return _png(fig)


def plot_latency(d: ReportData) -> bytes | None:
    import numpy as np

    by: dict[str, list[float]] = {}
    for r in d.latencies:
        if r["outcome"] != "pending" and r["latency_ms"] is not None:
            by.setdefault(r["outcome"], []).append(r["latency_ms"] / 1000)
    if not by:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for k in OUTCOMES:
        if k in by:
            ax.ecdf(by[k], color=COLORS[k], label=f"{OUTCOME_LABEL[k]} ({len(by[k])})")
    everything = np.asarray([v for vals in by.values() for v in vals])
    for q, style in ((50, ":"), (95, "--"), (99, "-.")):
        p = float(np.percentile(everything, q))
        ax.axvline(p, color="black", linestyle=style, linewidth=1, label=f"p{q} {fmt_duration(p)}")
    ax.set_title("Time from half message to outcome (cumulative share of transactions)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("share")
    if everything.min() > 0 and everything.max() / everything.min() > 100:
        ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _png(fig)


def plot_checks(d: ReportData) -> bytes | None:
    from matplotlib.ticker import MaxNLocator

    if not d.checks:
        return None
    fig = _figure(9, 3)
    ax = fig.add_subplot()
    ax.bar([str(r["checks"]) for r in d.checks], [r["count"] for r in d.checks], color="#5e35b1")
    ax.set_title("Checks per transaction (transactions by number of checks sent)")
    ax.set_xlabel("checks sent")
    ax.set_ylabel("transactions")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


PLOTS: dict[str, Callable[[ReportData], bytes | None]] = {
    "lag_over_time": plot_lag,
    "rates": plot_rates,
    "queue_lag": plot_queue_lag,
    "tx_outcomes": plot_outcomes,
    "tx_latency": plot_latency,
    "tx_checks": plot_checks,
}


# -- HTML --------------------------------------------------------------------------------------

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.meta { color: #666; font-size: .9em; }
table { border-collapse: collapse; font-size: .85em; margin: .6em 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
tr.stalled td { background: #ffebee; } tr.behind td { background: #fff3e0; }
.alert { border-left: 4px solid #c62828; background: #ffebee; padding: .5em 1em; margin: .5em 0; }
.warn { border-left: 4px solid #ef6c00; background: #fff3e0; padding: .5em 1em; margin: .5em 0; }
.ok { border-left: 4px solid #2e7d32; background: #e8f5e9; padding: .5em 1em; margin: .5em 0; }
img { max-width: 100%; border: 1px solid #eee; margin: .5em 0; }
.note { color: #666; font-size: .85em; }
"""

Column = tuple[str, str, Callable[[Row], str], bool]  # key, title, format, left-aligned


def _table(rows: Sequence[Row], cols: Sequence[Column], *, row_class: Callable[[Row], str] | None = None) -> str:
    if not rows:
        return '<p class="note">no data</p>'
    out = [
        "<table><tr>"
        + "".join(f'<th class="{"l" if left else ""}">{html.escape(t)}</th>' for _, t, _, left in cols)
        + "</tr>"
    ]
    for r in rows[:MAX_TABLE_ROWS]:
        cls = row_class(r) if row_class else ""
        out.append(
            f'<tr class="{cls}">'
            + "".join(f'<td class="{"l" if left else ""}">{html.escape(fmt(r))}</td>' for _, _, fmt, left in cols)
            + "</tr>"
        )
    out.append("</table>")
    if len(rows) > MAX_TABLE_ROWS:
        out.append(f'<p class="note">first {MAX_TABLE_ROWS} of {len(rows)} rows; all are in the Parquet tables</p>')
    return "".join(out)


def _c(key: str, title: str, fmt: Callable[[Any], str] = str, left: bool = False) -> Column:
    return (key, title, lambda r: fmt(r[key]), left)


def _img(name: str, png: bytes | None, plots_dir: Path) -> str:
    if png is None:
        return ""
    (plots_dir / f"{name}.png").write_bytes(png)
    return f'<img alt="{name}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def write_report(d: ReportData, out_dir: Path) -> Path:
    """Write ``report.html`` (and ``plots/*.png``) into ``out_dir``; returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots_dir = out_dir / "plots"
    plots_dir.mkdir(exist_ok=True)
    imgs = {name: _img(name, fn(d), plots_dir) for name, fn in PLOTS.items()}
    parts = [
        *_header(d),
        *_attention(d),
        *_groups_section(d, imgs),
        *_queues_section(d, imgs),
        *_transactions_section(d, imgs),
        f'<p class="note">Parquet tables: <code>{html.escape(d.output_dir)}/tables/</code></p>',
        "</body></html>",
    ]
    path = out_dir / "report.html"
    tmp = path.with_name(".report.html.tmp")
    tmp.write_text("\n".join(p for p in parts if p), encoding="utf-8")
    tmp.replace(path)
    return path


def _header(d: ReportData) -> list[str]:
    lo, hi = d.time_range
    o = d.options
    return [
        "<!doctype html><html><head><meta charset='utf-8'><title>txmq consume-offset analytics</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>txmq consume-offset analytics</h1>",
        f'<p class="meta">data from {html.escape(fmt_time(lo))} to {html.escape(fmt_time(hi))} · input '
        f"<code>{html.escape(d.input_dir)}</code> · {fmt_int(d.counts.get('offset_rows'))} offset snapshot rows, "
        f"{fmt_int(d.counts.get('transactions'))} transactions · rate window {fmt_ms(o.rate_window_ms)}, "
        f"stall window {fmt_ms(o.stall_window_ms)} · generated "
        f"{html.escape(fmt_time(int(datetime.now(UTC).timestamp() * 1000)))}</p>",
    ]  # fmt: skip


def _attention(d: ReportData) -> list[str]:
    """Stalled queues, groups behind a min offset and discarded transactions, or that
    there are none."""
    o = d.options
    stalled = [r for r in d.consumer_status if r["stalled"]]
    behind = [r for r in d.consumer_status if r["behind_min"]]
    parts = ["<h2>Needs attention</h2>"]
    if stalled:
        parts.append(
            f'<div class="alert"><b>{plural(len(stalled), "stalled consumer queue")}</b> '
            "(lag &gt; 0 and no progress for at "
            f"least {fmt_ms(o.stall_window_ms)}): "
            + html.escape(
                ", ".join(
                    f"{_qname(r)} (lag {fmt_int(r['lag'])}, {fmt_ms(r['stalled_for_ms'])}{_since(r)})"
                    for r in stalled[:20]
                )
            )
            + "</div>"
        )  # fmt: skip
    if behind:
        parts.append(
            f'<div class="warn"><b>{plural(len(behind), "queue")} where the group fell behind the min offset</b> '
            "(messages expired before they were consumed): "
            + html.escape(", ".join(f"{_qname(r)} ({fmt_int(r['lost_messages'])} lost)" for r in behind[:20]))
            + "</div>"
        )
    discarded = sum(r["discarded"] for r in d.tx_summary)
    if discarded:
        parts.append(
            f'<div class="warn"><b>{plural(discarded, "transaction")} discarded</b> after the check limit '
            "(kept in TRANS_CHECK_MAX_TIME_TOPIC; <code>txmq transaction resume</code> checks one again)</div>"
        )
    if not (stalled or behind or discarded):
        parts.append('<div class="ok">Nothing needs attention: no stalled consumer, no group behind a min offset, '
                     "no discarded transaction.</div>")  # fmt: skip
    return parts


def _groups_section(d: ReportData, imgs: dict[str, str]) -> list[str]:
    return [
        "<h2>Consumer groups</h2>",
        _table(d.group_status, [
            _c("consumer_group", "group", left=True), _c("topic", "topic", left=True), _c("queues", "queues"),
            _c("lag", "lag", fmt_int), _c("consume_rate", "consumed", fmt_rate),
            _c("produce_rate", "produced", fmt_rate),
            ("time_to_drain_s", "time to drain", fmt_drain, False), _c("stalled_queues", "stalled queues"),
            _c("behind_min_queues", "behind min"), _c("lost_messages", "lost", fmt_int),
        ], row_class=lambda r: "stalled" if r["stalled_queues"] else "behind" if r["behind_min_queues"] else ""),
        '<p class="note">rates over the rate window; time to drain = lag / (consumed - produced), "never" when '
        "the group does not catch up</p>",
        imgs["lag_over_time"],
        imgs["rates"],
    ]  # fmt: skip


def queue_columns(d: ReportData) -> list[Column]:
    """The per-queue table, narrow enough for a terminal-sized window (~100 characters):
    one name column (the store only when there are several), the committed offset and
    the lag but not the min and max offsets (the state column says what was lost), and
    the snapshot time only for a queue not seen in the latest snapshot."""
    several_stores = len({r["store_id"] for r in d.consumer_status}) > 1
    latest = max((r["last_snapshot_ms"] or 0 for r in d.consumer_status), default=0)

    def name(r: Row) -> str:
        group, topic = r["consumer_group"], r["topic"]
        topic = "%RETRY%" if topic == f"%RETRY%{group}" else topic  # the group's own retry topic
        return f"{group} / {topic} q{r['queue_id']}" + (f" @{r['store_id']}" if several_stores else "")

    def state(r: Row) -> str:
        said = []
        if r["stalled"]:
            said.append(f"stalled {fmt_ms(r['stalled_for_ms'])}")
        elif r["stalled_for_ms"]:
            said.append(f"idle {fmt_ms(r['stalled_for_ms'])}")
        if r["behind_min"]:
            said.append(f"lost {fmt_int(r['lost_messages'])}")
        if (r["last_snapshot_ms"] or 0) < latest:
            said.append(f"as of {_dt(r['last_snapshot_ms']):%H:%M:%S}")
        return "; ".join(said)

    return [
        ("queue", "group / topic queue", name, True), _c("committed_offset", "offset", fmt_int),
        _c("lag", "lag", fmt_int), _c("consume_rate", "out/s", _fmt_per_s),
        _c("produce_rate", "in/s", _fmt_per_s), ("time_to_drain_s", "drain", fmt_drain, False),
        ("state", "state", state, True),
    ]  # fmt: skip


def _fmt_per_s(r: float | None) -> str:
    if r is None:
        return "-"
    return f"{r:,.0f}" if abs(r) >= 100 else f"{r:.1f}"


def _queues_section(d: ReportData, imgs: dict[str, str]) -> list[str]:
    return [
        "<h2>Queues</h2>",
        imgs["queue_lag"],
        _table(
            d.consumer_status,
            queue_columns(d),
            row_class=lambda r: "stalled" if r["stalled"] else "behind" if r["behind_min"] else "",
        ),
        '<p class="note">offset: the group\'s committed offset; out/s and in/s: consumed and produced messages per '
        "second over the rate window; %RETRY%: the group's retry topic; state: stalled (lag and no progress for "
        "the stall window), idle (no progress for the time shown, less than the window), lost (behind the min "
        "offset: messages expired unread), as of (not in the latest snapshot; UTC). Min and max offsets and all "
        "snapshots are in the Parquet tables.</p>",
    ]


def _transactions_section(d: ReportData, imgs: dict[str, str]) -> list[str]:
    return [
        "<h2>Transactions</h2>",
        _table(d.tx_summary, [
            _c("producer_group", "producer group", left=True), _c("topic", "topic", left=True),
            _c("transactions", "transactions", fmt_int), _c("committed_ratio", "committed", fmt_pct),
            _c("rolled_back_ratio", "rolled back", fmt_pct), _c("discarded_ratio", "discarded", fmt_pct),
            _c("pending", "pending", fmt_int),
            _c("checks_per_tx", "checks/tx", lambda v: "-" if v is None else f"{v:.2f}"),
            _c("max_checks", "max checks"), _c("latency_p50_ms", "p50", fmt_ms), _c("latency_p95_ms", "p95", fmt_ms),
            _c("latency_p99_ms", "p99", fmt_ms), _c("latency_max_ms", "max", fmt_ms),
        ]),
        '<p class="note">ratios of all transactions seen (pending included); p50/p95/p99: exact percentiles of the '
        "time from the half message to its outcome (decided transactions)</p>",
        imgs["tx_outcomes"],
        imgs["tx_latency"],
        imgs["tx_checks"],
        "<h3>By outcome</h3>",
        _table(d.tx_latency, [
            _c("producer_group", "producer group", left=True), _c("topic", "topic", left=True),
            _c("outcome", "outcome", lambda v: OUTCOME_LABEL.get(v, v), left=True),
            _c("transactions", "transactions", fmt_int),
            _c("checks_per_tx", "checks/tx", lambda v: "-" if v is None else f"{v:.2f}"),
            _c("latency_p50_ms", "p50", fmt_ms), _c("latency_p95_ms", "p95", fmt_ms),
            _c("latency_p99_ms", "p99", fmt_ms),
            _c("latency_mean_ms", "mean", fmt_ms), _c("latency_max_ms", "max", fmt_ms),
        ]),
    ]  # fmt: skip
