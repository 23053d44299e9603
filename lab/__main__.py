"""`python -m lab ...`: the simulated GPU lab (make lab-up, lab-status, lab-down)."""

from __future__ import annotations

from lab.cli import lab

if __name__ == "__main__":
    lab(prog_name="python -m lab")
