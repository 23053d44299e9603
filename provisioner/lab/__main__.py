"""`python -m provisioner.lab ...` is `provision lab ...`."""

from __future__ import annotations

from provisioner.lab.cli import lab

if __name__ == "__main__":
    lab(prog_name="python -m provisioner.lab")
