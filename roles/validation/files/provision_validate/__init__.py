"""provision_validate: multi-GPU (or CPU/gloo) validation for the `validation` role.

Pure-Python modules (no torch import): ``bw`` (nccl-tests bandwidth arithmetic), ``thresholds``
(threshold data lookup), ``faults`` (test hooks), ``checks`` (merge rank fragments, evaluate
checks). ``worker`` is the torch part, run under torchrun: ``python -m provision_validate run``.
"""

__version__ = "1.0.0"
