"""Render docs/grafana-provision-fleet.png: the panels of contrib/grafana/provision-fleet.json, each
panel's PromQL evaluated by a real Prometheus, drawn with matplotlib. Grafana itself is not used
(Debian does not package it, and this project's machines have no network), and the image says so.

    .venv/bin/pip install matplotlib          # not a project dependency
    .venv/bin/python contrib/grafana/render_screenshot.py [--out docs/grafana-provision-fleet.png]

Needs Debian's `prometheus` package (prometheus and promtool on PATH; the server it installs need
not run). What it does:

1. Writes seven nightly `provision check --validate` reports of a simulated 12-host fleet with
   provisioner.reports (the code that writes provision.prom in a real run) and exposes the newest
   one every 30 minutes, as node_exporter's textfile collector would (with the instance and job
   labels a scrape adds), in OpenMetrics form; `promtool tsdb create-blocks-from openmetrics`
   turns that into TSDB blocks.
2. Starts prometheus on 127.0.0.1:<a free port> over those blocks (`--query.lookback-delta=1h`,
   since there is one sample every 30 minutes), and stops it at the end.
3. Evaluates every panel's query through the HTTP API: /api/v1/query at "now" for stat, table and
   bar gauge panels, /api/v1/query_range over the dashboard's 7 days for time series
   ($instance = .*).
4. Draws each panel at its gridPos, Grafana's dark theme imitated.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from provisioner import __version__, reports

HERE = Path(__file__).resolve().parent
DASHBOARD = HERE / "provision-fleet.json"
DEFAULT_OUT = HERE.parent.parent / "docs" / "grafana-provision-fleet.png"
SCRAPE_LABELS = 'instance="ctl01:9100",job="node"'
SCRAPE_EVERY = 1800
NIGHTS = 7

# ------------------------------------------------------------------ the simulated fleet
HOSTS = [f"gpu{i:02d}" for i in range(1, 13)]
STACK = {
    "driver.branch": "535",
    "driver.version": "535.129.03",
    "driver.module_loaded": "535.129.03",
    "driver.next_boot": "535.129.03",
    "driver.fabricmanager": "535.129.03",
    "driver.persistence": "enabled",
    "driver.hold": "held",
    "driver.nouveau_blacklist": "present",
    "driver.reboot": "not required",
    "driver.secure_boot": "disabled",
    "repo.source": "cuda-debian12-x86_64",
    "cuda.toolkit": "12.1.1-1",
    "cuda.nvcc": "12.1.105",
    "cuda.symlink": "/usr/local/cuda-12.1",
    "cudnn.version": "8.9.2.26-1+cuda12.1",
    "cudnn.hold": "held",
    "nccl.version": "2.18.3-1+cuda12.1",
    "nccl.hold": "held",
    "env.path": "/usr/local/cuda-12.1/bin",
    "env.ld_library_path": "/usr/local/cuda-12.1/lib64",
    "env.ldconfig": "present",
    "pytorch.version": "2.5.1+cu121",
    "pytorch.cuda": "12.1",
    "validation.allreduce": ">= 180 GB/s",
    "validation.ddp": ">= 0.9",
    "validation.multinode": "ok",
}
BROKEN: dict[tuple[str, int], dict[str, tuple[str, str]]] = {
    # (host, night) -> check id -> (status, actual); night 6 is the newest
    **{("gpu05", n): {"driver.version": ("drift", "535.154.05"),
                      "driver.hold": ("drift", "not held")}
       for n in (3, 4)},
    **{("gpu08", n): {"driver.module_loaded": ("fail", "Driver/library version mismatch"),
                      "validation.allreduce": ("fail", "not run: nvidia-smi failed"),
                      "validation.ddp": ("fail", "not run: nvidia-smi failed"),
                      "validation.multinode": ("skip", "not run")}
       for n in (4, 5, 6)},
    ("gpu03", 6): {"env.path": ("drift", "/usr/local/cuda-12.4/bin")},
}
UNREACHABLE = {("gpu11", 5), ("gpu11", 6)}


def host_report(host: str, night: int) -> dict[str, Any]:
    if (host, night) in UNREACHABLE:
        check = {"id": "ssh.connect", "status": "fail", "expected": "SSH answers on port 22",
                 "actual": "timed out after 10 s", "message": "connect timed out",
                 "remediation": "is the host up?"}
        return reports.host_entry(status="unreachable", checks=[check], facts={},
                                  validation=None, message="connect timed out")
    broken = BROKEN.get((host, night), {})
    checks = []
    for cid, expected in STACK.items():
        status, actual = broken.get(cid, ("pass", expected))
        checks.append({"id": cid, "status": status, "expected": expected, "actual": actual,
                       "message": "" if status == "pass" else f"{cid}: {actual}",
                       "remediation": "" if status == "pass" else f"provision --host {host}"})
    statuses = {c["status"] for c in checks}
    status = "failed" if "fail" in statuses else "drift" if "drift" in statuses else "ok"
    a100 = host >= "gpu09"
    facts = {
        "gpu_count": 8,
        "gpu_model": "NVIDIA A100-SXM4-80GB" if a100 else "NVIDIA H100 80GB HBM3",
        "driver_version": "535.154.05" if (host, night) in {("gpu05", 3), ("gpu05", 4)}
        else "535.129.03",
        "cuda_version": "12.1", "system_cudnn_version": "8.9.2.26",
        "system_nccl_version": "2.18.3", "torch_version": "2.5.1+cu121", "torch_cuda": "12.1",
        # torch 2.5.1+cu121 bundles nvidia-cudnn-cu12 9.1.0.70 and nvidia-nccl-cu12 2.21.5
        "torch_bundled_cudnn_version": "9.1.0", "torch_bundled_nccl_version": "2.21.5",
    }
    return reports.host_entry(status=status, checks=checks, facts=facts, validation=None)


def nightly_reports(now: float) -> list[dict[str, Any]]:
    """Seven nightly check reports, the newest the last night before `now`."""
    day = 86400
    last_night = (now - 2 * 3600 - 3600) // day * day + 2 * 3600  # 02:00 UTC, an hour done
    out = []
    for night in range(NIGHTS):
        start = last_night - (NIGHTS - 1 - night) * day + [13, 41, 7, 52, 26, 35, 19][night] * 60
        duration = 290.0 + 9 * night
        hosts = {h: host_report(h, night) for h in HOSTS}
        statuses = {e["status"] for e in hosts.values()}
        exit_code = (1 if "failed" in statuses else 3 if "unreachable" in statuses
                     else 5 if "drift" in statuses else 0)
        out.append({"command": "check", "version": __version__,
                    "run_id": f"night{night}", "finished_ts": start + duration,
                    "duration_s": duration, "exit_code": exit_code, "hosts": hosts,
                    "summary": reports.summarize(hosts)})
    return out


def openmetrics(nightly: list[dict[str, Any]], now: float) -> str:
    """The textfile as a scrape every SCRAPE_EVERY seconds would have seen it, family by family."""
    families: dict[str, list[str]] = {}
    headers: dict[str, list[str]] = {}
    texts = [(r["finished_ts"], reports.prom_text(r)) for r in nightly]
    t = (texts[0][0] // SCRAPE_EVERY + 1) * SCRAPE_EVERY
    while t <= now:
        text = [txt for finished, txt in texts if finished <= t][-1]
        for line in text.splitlines():
            if line.startswith("#"):
                name = line.split()[2]
                headers.setdefault(name, [])
                if len(headers[name]) < 2:
                    headers[name].append(line)
                continue
            series, value = line.rsplit(" ", 1)
            name, labels = series.split("{", 1)
            families.setdefault(name, []).append(
                f"{name}{{{labels[:-1]},{SCRAPE_LABELS}}} {value} {t:.0f}"
            )
        t += SCRAPE_EVERY
    out = []
    for name, head in headers.items():
        out.extend(head)
        out.extend(families.get(name, []))
    return "\n".join([*out, "# EOF"]) + "\n"


# ------------------------------------------------------------------ prometheus
class Prometheus:
    def __init__(self, workdir: Path, openmetrics_text: str) -> None:
        self.workdir = workdir
        data = workdir / "data"
        source = workdir / "provision.om"
        source.write_text(openmetrics_text, encoding="utf-8")
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(source), str(data)],
            check=True,
        )
        (workdir / "prometheus.yml").write_text("scrape_configs: []\n", encoding="utf-8")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=60d",
             f"--web.listen-address=127.0.0.1:{self.port}", "--query.lookback-delta=1h"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:  # noqa: S310
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log = (workdir / "prometheus.log").read_text(encoding="utf-8")[-2000:]
                raise RuntimeError(f"prometheus did not become ready:\n{log}")
            time.sleep(0.3)

    def api(self, path: str, **params: str) -> Any:  # noqa: ANN401
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ------------------------------------------------------------------ drawing
BG, PANEL, BORDER, TEXT, MUTED = "#111217", "#181b1f", "#2c3235", "#ccccdc", "#8e8e9a"
COLORS = {"green": "#73BF69", "orange": "#FF9830", "red": "#F2495C", "purple": "#B877D9",
          "blue": "#5794F2", "text": TEXT, "yellow": "#FADE2A"}
PALETTE = ["#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9"]


def color(name: str | None) -> str:
    return COLORS.get(name or "text", name or TEXT)


def fmt(value: float, unit: str, decimals: int | None = None) -> str:
    if unit == "s":
        if value >= 3600:
            return f"{value / 3600:.1f} h"
        return f"{value / 60:.1f} min" if value >= 60 else f"{value:.0f} s"
    if unit == "percent":
        return f"{value:.0f}%"
    if unit == "percentunit":
        return f"{100 * value:.0f}%"
    if decimals is not None:
        return f"{value:.{decimals}f}"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def threshold_color(value: float, defaults: dict[str, Any]) -> str:
    chosen = "green"
    for step in defaults.get("thresholds", {}).get("steps", []):
        if step["value"] is None or value >= step["value"]:
            chosen = step["color"]
    return color(chosen)


def mapped(value: float, defaults: dict[str, Any]) -> tuple[str, str] | None:
    for mapping in defaults.get("mappings", []):
        hit = mapping.get("options", {}).get(fmt(value, "none"))
        if hit:
            return hit.get("text", fmt(value, "none")), color(hit.get("color"))
    return None


def legend(fmt_: str, metric: dict[str, str]) -> str:
    if fmt_ in ("", "__auto"):
        return ",".join(f"{k}={v}" for k, v in metric.items() if k != "__name__") or "value"
    out = fmt_
    for key, value in metric.items():
        out = out.replace("{{" + key + "}}", value)
    return out


def status_colors(panel: dict[str, Any]) -> dict[str, str]:
    out = {}
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        for prop in override.get("properties", []):
            if prop["id"] == "color":
                out[override["matcher"]["options"]] = color(prop["value"].get("fixedColor"))
    return out


def table_value_colors(panel: dict[str, Any]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        for prop in override.get("properties", []):
            if prop["id"] == "mappings":
                opts = prop["value"][0]["options"]
                name = override["matcher"]["options"]
                out[name] = {k: color(v["color"]) for k, v in opts.items()}
    return out


def draw_stat(ax: Any, panel: dict[str, Any], result: list[dict[str, Any]]) -> None:  # noqa: ANN401
    defaults = panel["fieldConfig"]["defaults"]
    if not result:
        ax.text(0.5, 0.4, "No data", ha="center", va="center", color=MUTED, fontsize=14)
        return
    if panel["options"].get("textMode") == "name":
        names = [legend(panel["targets"][0]["legendFormat"], r["metric"]) for r in result]
        ax.text(0.5, 0.4, ", ".join(names), ha="center", va="center", color=TEXT, fontsize=22,
                fontweight="bold")
        return
    value = float(result[0]["value"][1])
    hit = mapped(value, defaults)
    text, fill = hit or (fmt(value, defaults.get("unit", "none"), defaults.get("decimals")),
                         threshold_color(value, defaults))
    ax.add_patch(Rectangle((0.0, 0.0), 1, 0.82, color=fill, transform=ax.transAxes,
                               zorder=0))
    ax.text(0.5, 0.4, text, ha="center", va="center", color="white", fontsize=26,
            fontweight="bold", zorder=2)


def draw_timeseries(
    ax: Any,  # noqa: ANN401
    panel: dict[str, Any],
    result: list[dict[str, Any]],
    span: tuple[float, float],
) -> None:
    defaults = panel["fieldConfig"]["defaults"]
    colors = status_colors(panel)
    legend_fmt = panel["targets"][0]["legendFormat"]
    stacked = defaults.get("custom", {}).get("stacking", {}).get("mode") == "normal"
    series = sorted(
        result,
        key=lambda r: list(colors).index(legend(legend_fmt, r["metric"]))
        if legend(legend_fmt, r["metric"]) in colors else 99,
    )
    base: dict[float, float] = {}
    for i, r in enumerate(series):
        name = legend(legend_fmt, r["metric"])
        xs = [float(t) for t, _ in r["values"]]
        ys = [float(v) for _, v in r["values"]]
        if stacked:
            lows = [base.get(x, 0.0) for x in xs]
            ys = [low + y for low, y in zip(lows, ys, strict=True)]
            for x, y in zip(xs, ys, strict=True):
                base[x] = y
        when = [datetime.fromtimestamp(x, UTC) for x in xs]
        c = colors.get(name, PALETTE[i % len(PALETTE)])
        ax.step(when, ys, where="post", color=c, linewidth=1.8, label=name)
        if stacked:
            ax.fill_between(when, lows, ys, step="post", color=c, alpha=0.35)
        else:
            ax.fill_between(when, 0, ys, step="post", color=c, alpha=0.1)
    ax.set_xlim(datetime.fromtimestamp(span[0], UTC), datetime.fromtimestamp(span[1], UTC))
    if "min" in defaults:
        ax.set_ylim(bottom=defaults["min"])
    if "max" in defaults:
        ax.set_ylim(top=defaults["max"] * 1.05)
    unit = defaults.get("unit", "none")
    ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _p: fmt(v, unit)))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%a %d"))  # type: ignore[no-untyped-call]
    ax.tick_params(colors=MUTED, labelsize=8)
    ax.grid(color=BORDER, linewidth=0.6)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(0, -0.12), ncol=6, frameon=False, fontsize=8,
              labelcolor=TEXT)


def draw_table(ax: Any, panel: dict[str, Any], result: list[dict[str, Any]]) -> None:  # noqa: ANN401
    org = next(t for t in panel["transformations"] if t["id"] == "organize")["options"]
    columns = sorted(org["indexByName"], key=org["indexByName"].get)
    value_colors = table_value_colors(panel)
    rows = sorted(tuple(r["metric"].get(c, "") for c in columns) for r in result)
    x_weights = [max([len(c), *(len(row[i]) for row in rows)]) + 2 for i, c in enumerate(columns)]
    total = sum(x_weights)
    xs = [sum(x_weights[:i]) / total for i in range(len(columns))]
    line = 0.075
    y = 0.9
    for x, c in zip(xs, columns, strict=True):
        ax.text(x + 0.01, y, c, color=COLORS["blue"], fontsize=8, fontweight="bold", va="top")
    ax.plot([0, 1], [y - line * 0.9] * 2, color=BORDER, linewidth=0.8)
    fit = int((y - 0.02) / line) - 1
    for row in rows[:fit]:
        y -= line
        for x, c, cell in zip(xs, columns, row, strict=True):
            ax.text(x + 0.01, y - 0.01, cell or "-", va="top", fontsize=8,
                    color=value_colors.get(c, {}).get(cell, TEXT))
    if len(rows) > fit:
        ax.text(0.99, 0.01, f"+{len(rows) - fit} more rows", ha="right", color=MUTED, fontsize=7)
    if not rows:
        ax.text(0.5, 0.45, "No data", ha="center", color=MUTED, fontsize=12)


def draw_bargauge(ax: Any, panel: dict[str, Any], result: list[dict[str, Any]]) -> None:  # noqa: ANN401
    defaults = panel["fieldConfig"]["defaults"]
    legend_fmt = panel["targets"][0]["legendFormat"]
    bars = [(legend(legend_fmt, r["metric"]), float(r["value"][1])) for r in result]
    if not bars:
        ax.text(0.5, 0.45, "No data", ha="center", color=MUTED, fontsize=12)
        return
    top = max(v for _, v in bars) or 1.0
    slot = min(0.16, 0.85 / len(bars))
    for i, (name, value) in enumerate(bars):
        y = 0.86 - (i + 1) * slot
        ax.text(0.0, y + slot * 0.35, name, color=TEXT, fontsize=8, va="center")
        ax.add_patch(Rectangle((0.42, y + slot * 0.1), 0.46, slot * 0.55, color=BORDER))
        ax.add_patch(Rectangle((0.42, y + slot * 0.1), 0.46 * value / top, slot * 0.55,
                                   color=threshold_color(value, defaults)))
        ax.text(0.99, y + slot * 0.35, fmt(value, defaults.get("unit", "none")), ha="right",
                va="center", color=threshold_color(value, defaults), fontsize=10,
                fontweight="bold")


def evaluate(prom: Prometheus, panel: dict[str, Any], now: float) -> list[dict[str, Any]]:
    target = panel["targets"][0]
    expr = target["expr"].replace("$instance", ".*")
    if panel["type"] == "timeseries":
        data = prom.api("query_range", query=expr, start=f"{now - 7 * 86400:.0f}",
                        end=f"{now:.0f}", step="1800")
    else:
        data = prom.api("query", query=expr, time=f"{now:.0f}")
    result: list[dict[str, Any]] = data["result"]
    return result


def render(prom: Prometheus, dashboard: dict[str, Any], now: float, out: Path,
           reports_count: int) -> None:
    version = prom.api("status/buildinfo")["version"]
    major_minor = ".".join(version.split(".")[:2])
    col_w, row_h = 0.74, 0.36
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    head, foot = 0.9, 0.75
    width, height = 24 * col_w, rows * row_h + head + foot
    fig = plt.figure(figsize=(width, height), facecolor=BG)
    fig.text(0.008, 1 - 0.35 / height, dashboard["title"], color=TEXT, fontsize=17,
             fontweight="bold", va="center")
    stamp = datetime.fromtimestamp(now, UTC)
    fig.text(0.992, 1 - 0.35 / height,
             f"Last 7 days  ·  Controller: All  ·  {stamp:%Y-%m-%d %H:%M} UTC",
             color=MUTED, fontsize=10, va="center", ha="right")
    fig.text(0.5, 0.42 / height,
             f"panels of contrib/grafana/provision-fleet.json, queries evaluated by Prometheus "
             f"{major_minor}; rendered without Grafana",
             color=COLORS["yellow"], fontsize=13, fontweight="bold", ha="center", va="center")
    fig.text(0.5, 0.14 / height,
             f"Data: {reports_count} nightly `provision check --validate` reports of a simulated "
             f"{len(HOSTS)}-host fleet written by provisioner.reports, exposed every 30 min as "
             f"node_exporter would, backfilled with promtool; Prometheus {version}; drawn with "
             f"matplotlib by contrib/grafana/render_screenshot.py",
             color=MUTED, fontsize=9, ha="center", va="center")
    pad = 0.06
    for panel in panels:
        g = panel["gridPos"]
        left = (g["x"] * col_w + pad) / width
        bottom = (foot + (rows - g["y"] - g["h"]) * row_h + pad) / height
        w = (g["w"] * col_w - 2 * pad) / width
        h = (g["h"] * row_h - 2 * pad) / height
        if panel["type"] == "row":
            fig.text(left, bottom + h / 2, panel["title"], color=TEXT, fontsize=12,
                     fontweight="bold", va="center")
            continue
        frame = fig.add_axes((left, bottom, w, h))
        frame.set_facecolor(PANEL)
        frame.set_xticks([])
        frame.set_yticks([])
        for spine in frame.spines.values():
            spine.set_color(BORDER)
        title_h = 0.3 / (g["h"] * row_h)
        frame.text(0.015, 1 - title_h / 2, panel["title"], transform=frame.transAxes,
                   color=TEXT, fontsize=10, fontweight="bold", va="center")
        result = evaluate(prom, panel, now)
        inner_top = 1 - title_h * 1.2
        if panel["type"] == "timeseries":
            ax = fig.add_axes((left + 0.6 / width, bottom + h * 0.2, w - 0.75 / width,
                               h * (inner_top - 0.24)))
            ax.set_facecolor(PANEL)
            draw_timeseries(ax, panel, result, (now - 7 * 86400, now))
            continue
        ax = fig.add_axes((left + 0.004, bottom + 0.004, w - 0.008, h * inner_top - 0.004))
        ax.set_axis_off()
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        {"stat": draw_stat, "table": draw_table, "bargauge": draw_bargauge}[panel["type"]](
            ax, panel, result
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100, facecolor=BG)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: apt-get install --no-install-recommends "
                             "prometheus (make host-packages-test)")
    now = float(int(time.time()) // 60 * 60)
    nightly = nightly_reports(now)
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="provision-grafana-") as tmp:
        prom = Prometheus(Path(tmp), openmetrics(nightly, now))
        try:
            render(prom, dashboard, now, args.out, len(nightly))
        finally:
            prom.stop()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
