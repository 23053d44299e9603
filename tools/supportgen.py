"""The files generated from the support table (provisioner/data/support.yml), for tools/rolegen.py.

- every roles/*/meta/main.yml: its `platforms:` block (the accepted releases);
- README.md: the "Supported targets" table, between its GENERATED PLATFORMS markers;
- plugins/module_utils/platforms.py: SUPPORTED and REFUSED, between its GENERATED markers (the probe
  runs on targets: it cannot read provisioner/data);
- plugins/module_utils/components/preflight.py: the text of the check preflight.os, between its
  markers.

The CUDA column and the consistency of each release's status come from the matrix row of the
release's NVIDIA directory for the default stack's CUDA.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

from provisioner import stack as stk
from provisioner import support

README_BEGIN = "<!-- BEGIN GENERATED PLATFORMS (make roles) -->"
README_END = "<!-- END GENERATED PLATFORMS -->"
PY_BEGIN = "# BEGIN GENERATED SUPPORT (make roles, from provisioner/data/support.yml)"
PY_END = "# END GENERATED SUPPORT"
STATUS_TEXT = {
    "supported": "supported",
    "preflight-stops": "accepted; the default stack stops in preflight (`preflight.cuda_repo`)",
    "refused": "refused in preflight (`preflight.os`)",
}
_PLATFORMS = re.compile(r"^  platforms:\n(?:    .*\n)*", re.M)


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def accepted(table: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in table["releases"] if r["status"] != "refused"]


def cuda_rows(cuda: str) -> dict[str, dict[str, Any]]:
    """NVIDIA directory -> the matrix's row for that CUDA version."""
    rows = stk.load_matrix()["cuda"][cuda].get("distros") or []
    return {str(r["name"]): r for r in rows}


def published(row: dict[str, Any] | None) -> str:
    """yes | no | unconfirmed | unknown: does NVIDIA publish the CUDA there (x86_64)."""
    if row is None:
        return "unknown"
    if row.get("published") is False:
        return "no"
    return "unconfirmed" if row.get("confidence") == "U" else "yes"


def check_statuses(table: dict[str, Any], cuda: str) -> None:
    """A supported release has the default stack's CUDA published; a preflight-stops one has not
    (the matrix decides what preflight.cuda_repo does: the table must say the same)."""
    rows = cuda_rows(cuda)
    wrong = []
    for rel in accepted(table):
        got = published(rows.get(rel["repo"]))
        want_stop = got != "yes"
        if want_stop != (rel["status"] == "preflight-stops"):
            wrong.append(
                f"{rel['os']} {rel['version']}: status {rel['status']}, but the matrix says CUDA "
                f"{cuda} in {rel['repo']} is {got} (preflight.cuda_repo "
                f"{'stops' if want_stop else 'passes'} the default stack)"
            )
    if wrong:
        raise SystemExit(
            "provisioner/data/support.yml disagrees with the matrix:\n" + "\n".join(wrong)
        )


def meta_platforms(table: dict[str, Any]) -> str:
    """The `platforms:` block of a role's meta/main.yml (galaxy_info)."""
    by_name: dict[str, list[str]] = {}
    order: dict[str, tuple[int, ...]] = {}
    for rel in accepted(table):
        g = rel["galaxy"]
        by_name.setdefault(g["name"], [])
        if str(g["version"]) not in by_name[g["name"]]:
            by_name[g["name"]].append(str(g["version"]))
            order[str(g["version"])] = _vkey(rel["version"])
    lines = ["  platforms:"]
    for name, versions in by_name.items():
        vs = sorted(versions, key=lambda v: order[v])
        shown = ", ".join(f'"{v}"' if v.isdigit() else v for v in vs)
        lines += [f"    - name: {name}", f"      versions: [{shown}]"]
    return "\n".join(lines) + "\n"


def meta_text(current: str, block: str) -> str:
    if _PLATFORMS.search(current):
        return _PLATFORMS.sub(block, current, count=1)
    return current.replace("  galaxy_tags:", block + "  galaxy_tags:", 1)


def readme_table(table: dict[str, Any], cuda: str) -> str:
    rows = cuda_rows(cuda)
    out = [
        README_BEGIN,
        f"| target | CUDA {cuda} in NVIDIA's repo | status (default stack) | what runs in this "
        "project's lab | what rests on recorded evidence only | proved by |",
        "|---|---|---|---|---|---|",
    ]
    for rel in table["releases"]:
        got = published(rows.get(rel["repo"]))
        repo = {"yes": f"yes (`{rel['repo']}`)", "no": f"no (`{rel['repo']}`)",
                "unconfirmed": "not found (unconfirmed)", "unknown": "not in the matrix"}[got]
        out.append(
            f"| {rel['os']} {rel['version']} | {repo} | {STATUS_TEXT[rel['status']]} | "
            f"{rel['lab']} | {rel['evidence']} | {rel.get('proved_by') or 'nothing yet'} |"
        )
    return "\n".join([*out, README_END])


def _replace(text: str, begin: str, end: str, block: str, where: Path) -> str:
    if begin not in text or end not in text:
        raise SystemExit(f"{where}: the markers {begin!r} / {end!r} are missing")
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return head + block + tail


def os_verifies(table: dict[str, Any]) -> str:
    """preflight.os: what it verifies, from the accepted and the refused releases."""
    groups: dict[str, list[str]] = {}
    for rel in accepted(table):
        groups.setdefault(rel["os"].replace(" / ", "/"), []).append(rel["version"])
    shown = ", ".join(
        f"{os} {'/'.join(sorted(vs, key=_vkey))}" for os, vs in groups.items()
    )
    refused = "; ".join(r.get("short") or r["reason"] for r in table["releases"]
                        if r["status"] == "refused")
    return f"the host runs a supported OS release ({shown}{'; ' + refused if refused else ''})"


def _py_str(text: str, indent: str) -> str:
    parts = textwrap.wrap(text, 70, drop_whitespace=False, break_on_hyphens=False)
    return "\n".join(f"{indent}{json.dumps(p)}" for p in parts)


def platforms_block(table: dict[str, Any]) -> str:
    supported: dict[str, list[str]] = {}
    for rel in accepted(table):
        for os_id in rel["os_ids"]:
            supported.setdefault(os_id, []).append(rel["version"])
    lines = [
        PY_BEGIN,
        "# Releases preflight.os accepts (os-release ID -> VERSION_ID for Ubuntu, the",
        "# major elsewhere), and the ones it refuses ((family, version) -> the reason).",
        "SUPPORTED = {",
    ]
    for os_id, vs in supported.items():
        inner = ", ".join(f'"{v}"' for v in sorted(vs, key=_vkey))
        lines.append(f'    "{os_id}": ({inner}{"," if len(vs) == 1 else ""}),')
    lines += ["}", "REFUSED = {"]
    for rel in table["releases"]:
        if rel["status"] == "refused":
            lines += [f'    ("{rel["family"]}", "{rel["version"]}"): (',
                      _py_str(rel["reason"], " " * 8), "    ),"]
    lines += ["}", PY_END]
    return "\n".join(lines)


def catalog_block(table: dict[str, Any]) -> str:
    return "\n".join([
        "    " + PY_BEGIN,
        "    CheckSpec(",
        '        "preflight.os",',
        "        (",
        _py_str(os_verifies(table), " " * 12),
        "        ),",
        '        "use a supported distribution release",',
        "    ),",
        "    " + PY_END,
    ])


def render(repo: Path, table: dict[str, Any] | None = None) -> dict[Path, str]:
    """Every file the support table generates, with its wanted content."""
    table = table or support.load_table()
    cuda = stk.resolve(None).cuda_version
    check_statuses(table, cuda)
    out: dict[Path, str] = {}
    block = meta_platforms(table)
    for meta in sorted((repo / "roles").glob("*/meta/main.yml")):
        out[meta] = meta_text(meta.read_text(encoding="utf-8"), block)
    readme = repo / "README.md"
    out[readme] = _replace(readme.read_text(encoding="utf-8"), README_BEGIN, README_END,
                           readme_table(table, cuda), readme)
    mu = repo / "plugins" / "module_utils"
    plat = mu / "platforms.py"
    out[plat] = _replace(plat.read_text(encoding="utf-8"), PY_BEGIN, PY_END,
                         platforms_block(table), plat)
    cat = mu / "components" / "preflight.py"
    out[cat] = _replace(cat.read_text(encoding="utf-8"), "    " + PY_BEGIN, "    " + PY_END,
                        catalog_block(table), cat)
    return out
