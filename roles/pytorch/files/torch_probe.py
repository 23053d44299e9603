"""Print the torch build facts of this interpreter as one JSON line (read-only)."""
import json
import sys

out = {"python": sys.version.split()[0]}
try:
    import torch
except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
    out["error"] = "import torch failed: %s" % exc
    print(json.dumps(out))
    sys.exit(0)
out["torch_version"] = torch.__version__
out["torch_cuda"] = torch.version.cuda
try:
    out["cuda_available"] = bool(torch.cuda.is_available())
except Exception:  # noqa: BLE001
    out["cuda_available"] = False
try:
    nccl = torch.cuda.nccl.version() if out["cuda_available"] else None
    out["nccl_version"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else nccl
except Exception:  # noqa: BLE001
    out["nccl_version"] = None
try:
    out["cudnn_version"] = torch.backends.cudnn.version()
except Exception:  # noqa: BLE001
    out["cudnn_version"] = None
for extra in ("torchvision", "torchaudio"):
    try:
        out[extra] = __import__(extra).__version__
    except Exception:  # noqa: BLE001
        out[extra] = None
print(json.dumps(out))
