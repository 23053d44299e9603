"""The support table (provisioner/data/support.yml): supported OS releases, and which role owns
each component (check id prefix) and with which variable prefix.

Read by the CLI (check ids to roles) and by the generator (tools/rolegen.py), which writes from it
the roles' meta/main.yml platforms, the README table, the probe's release list and the text of
preflight.os. The probe itself runs on targets and reads its generated copy.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from provisioner import yamlfile

TABLE = Path(__file__).resolve().parent / "data" / "support.yml"
STATUSES = ("supported", "preflight-stops", "refused")


def load_table(path: Path | None = None) -> dict[str, Any]:
    """The table as a mapping; SystemExit naming the file and the entry when it is malformed."""

    path = path or TABLE
    data = yamlfile.load_packaged(path)
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise SystemExit(f"{path}: not a support table (schema: 1)")
    for n, rel in enumerate(data.get("releases") or [], 1):
        missing = [k for k in ("os", "family", "version", "repo", "status", "lab", "evidence")
                   if k not in rel]
        if missing or rel["status"] not in STATUSES:
            raise SystemExit(
                f"{path}: release {n} ({rel.get('os')} {rel.get('version')}): missing "
                f"{', '.join(missing) or '-'}; status must be one of {', '.join(STATUSES)}"
            )
        if rel["status"] == "refused" and not rel.get("reason"):
            raise SystemExit(f"{path}: release {n}: a refused release needs a reason")
        if rel["status"] != "refused" and not (rel.get("os_ids") and rel.get("galaxy")):
            raise SystemExit(f"{path}: release {n}: an accepted release needs os_ids and galaxy")
    return data


@functools.cache
def role_of_component() -> dict[str, str]:
    """component (check id prefix) -> the role that owns it: `driver` -> nvidia_driver."""
    return {c: str(v["role"]) for c, v in load_table()["components"].items()}
