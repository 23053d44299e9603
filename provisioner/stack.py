"""The stack manifest: load, reject unknown keys, resolve defaults, check the matrix, map to roles.

A stack file may give any subset of the keys of `data/default-stack.yml`; the rest come from the
default. Structural errors (unknown key, wrong type, bad value) and matrix rule violations raise
`StackError` (exit 2) naming the key path or the rule. Facts the matrix marks unconfirmed become
warnings, unless the mirror declares it carries them (`mirrors.nvidia_repo_carries`).
"""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner import rolevars, yamlfile
from provisioner.exitcodes import SetupError, StackError

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_STACK = DATA_DIR / "default-stack.yml"
MATRIX = DATA_DIR / "matrix.yml"
MAX_STACK_BYTES = 64 * 1024  # a full stack is about 1 KiB

DISTRO_PREFIX = "distros: "
_VERSION3 = r"^\d+\.\d+\.\d+$"
_DISTRO_ARCH = r"^[a-z]+[0-9]+/(x86_64|sbsa|ppc64el|cross-linux-sbsa)$"
# A URL as the stack takes it (matched whole, with re.fullmatch): http, https or file, then only
# RFC 3986 characters: no whitespace, no control characters, nothing an apt sources line or a pip
# command line would read as a second field or an option (`deb [trusted=yes] ...`). An IPv6
# literal host in brackets is the one place a bracket may stand.
_URL = r"(https?|file)://(?=.)(\[[0-9A-Fa-f:.]+\])?[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]*"
_URL_HINT = "an http(s):// or file:// URL: no whitespace, control characters or options"


@dataclass(frozen=True)
class Field:
    """One leaf of the schema. `hint` may name the built-in default as `{default}`."""

    kinds: tuple[type, ...]
    nullable: bool = False
    choices: tuple[Any, ...] = ()
    pattern: str | None = None
    hint: str = ""


def _s(pattern: str | None = None, *, nullable: bool = False, hint: str = "") -> Field:
    return Field((str,), nullable=nullable, pattern=pattern, hint=hint)


def _choice(*values: str) -> Field:
    return Field((str,), choices=values)


# the threshold overrides the validation program accepts (roles/validation/files/provision_validate)
THRESHOLD_KEYS = ("allreduce_busbw_gbps", "ddp_scaling_efficiency", "straggler_ratio")

SCHEMA: dict[str, Any] = {
    "schema": Field((int,), choices=(1,)),
    "name": _s(r"^[A-Za-z0-9_.-]+$"),
    "driver": {
        "branch": _s(r"^\d{3}$", hint='a driver branch such as "{default}"'),
        "version": _s(
            r"^\d+\.\d+(\.\d+)?$", nullable=True,
            hint="a full version of the branch: <branch>.<minor>.<patch>",
        ),
        "flavor": _choice("proprietary", "open"),
        "fabricmanager": _choice("auto", "always", "never"),
    },
    "cuda": {"version": _s(r"^\d+\.\d+$", hint='major.minor such as "{default}"')},
    "cudnn": {"version": _s(r"^\d+\.\d+\.\d+\.\d+$", hint='four parts such as "{default}"')},
    "nccl": {"version": _s(_VERSION3, hint='three parts such as "{default}"')},
    "pytorch": {
        "version": _s(r"^\d+\.\d+\.\d+([.a-z0-9+]*)?$", hint='such as "{default}"'),
        # the matrix's pytorch table names the CUDA builds (cu<major><minor>); `cpu` is always known
        "build": _s(r"^[a-z0-9]+$", hint="a build label of the matrix's pytorch table, or cpu"),
        "venv": _s(r"^[A-Za-z0-9_.+/@-]+$", hint="an absolute path such as {default}"),
        "torchvision": _s(r"^\d+\.\d+\.\d+([.a-z0-9+]*)?$", nullable=True),
        "torchaudio": _s(r"^\d+\.\d+\.\d+([.a-z0-9+]*)?$", nullable=True),
    },
    "mirrors": {
        "nvidia_repo": _s(_URL, hint=_URL_HINT),
        "nvidia_repo_carries": Field((list,)),
        "pytorch_index": _s(_URL, nullable=True, hint=_URL_HINT),
        "pytorch_find_links": _s(_URL, nullable=True, hint=_URL_HINT),
        "pytorch_hashes": Field((list,)),
    },
    "validation": {
        "enabled": Field((bool,)),
        "backend": _choice("auto", "nccl", "gloo"),
        "nproc_per_node": Field((str, int)),
        "timeout_s": Field((int,)),
        "network_interface": _s(r"^[A-Za-z0-9_.:@-]+$", nullable=True),
        "thresholds": Field((dict,)),
    },
    "dcgm": {
        "install": Field((bool,)),
        "diag_level": Field((int,), choices=(1, 2, 3, 4)),
        "diag_timeout_s": Field((int,)),
    },
}


# Stack variables (docs/architecture.md, "Role variables"): every leaf of a section is the role
# variable gpu_stack_<section>_<key>. Variable name -> path in the stack.
STACK_VARS: dict[str, tuple[str, ...]] = {
    f"gpu_stack_{section}_{key}": (section, key)
    for section, sub in SCHEMA.items()
    if isinstance(sub, dict)
    for key in sub
}
# Variables derived from the stack and the matrix (not settable; set the stack key instead).
DERIVED_VARS = {
    "gpu_stack_pytorch_python_range": "pytorch.version and pytorch.build",
    "gpu_stack_cuda_min_driver": "cuda.version",
    "gpu_stack_cudnn_build": "cudnn.version and cuda.version",
    "gpu_stack_nccl_build": "nccl.version and cuda.version",
    "gpu_stack_cuda_distros": "cuda.version and mirrors.nvidia_repo_carries",
    "gpu_stack_driver_support": "the matrix's driver.branches",
}
CPU_BUILD = "cpu"


def cuda_build_label(cuda: str) -> str:
    """PyTorch's build label for a CUDA version: X.Y -> cuXY (download.pytorch.org/whl/<label>)."""
    return "cu" + cuda.replace(".", "")


@dataclass(frozen=True)
class Stack:
    """A resolved, validated stack."""

    data: dict[str, Any]
    source: str
    warnings: tuple[str, ...] = field(default=())
    # unconfirmed distro support; preflight reports it per host, so runs print it only without one
    distro_warning: str | None = None
    matrix: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def all_warnings(self) -> tuple[str, ...]:
        return (*self.warnings, *([self.distro_warning] if self.distro_warning else []))

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @property
    def cuda_version(self) -> str:
        return str(self.data["cuda"]["version"])

    @property
    def cudnn_major(self) -> int:
        return int(str(self.data["cudnn"]["version"]).split(".", 1)[0])

    def carries(self) -> list[str]:
        return [str(x) for x in self.data["mirrors"]["nvidia_repo_carries"]]

    def _matrix(self) -> dict[str, Any]:
        return self.matrix or load_matrix()

    def cuda_row(self) -> dict[str, Any]:
        """The matrix row of the stack's CUDA version."""
        return dict(self._matrix().get("cuda", {}).get(self.cuda_version) or {})

    def distros(self) -> list[dict[str, Any]]:
        """The distro rows of the stack's CUDA version (name, arches, confidence)."""
        return list(self.cuda_row().get("distros") or [])

    def torch_releases(self) -> dict[str, Any]:
        """The matrix's torch releases for the stack's build; {} for CPU builds."""
        build = str(self.data["pytorch"]["build"])
        return dict((self._matrix().get("pytorch", {}).get(build) or {}).get("releases") or {})

    def pytorch_python_range(self) -> list[str]:
        """[min, max] Python (major.minor) of the torch wheels, from the matrix; [] if unknown."""
        rel = self.torch_releases().get(str(self.data["pytorch"]["version"])) or {}
        return [str(v) for v in rel.get("python") or []][:2]

    def cuda_distros(self) -> dict[str, str]:
        """<distro>/<arch> -> published | absent | unconfirmed, for the stack's CUDA (the
        preflight role stops a host where NVIDIA publishes no packages for it)."""
        out: dict[str, str] = {}
        for d in self.distros():
            if d.get("published") is False:
                status = "absent"
            else:
                status = "unconfirmed" if d.get("confidence") == "U" else "published"
            for arch in d.get("arches", []):
                out[f"{d['name']}/{arch}"] = status
        return out

    def driver_support(self) -> dict[str, dict[str, str]]:
        """NVIDIA's driver branches from the matrix: branch -> kind, end_of_support (YYYY-MM),
        source. Independent of the stack's branch, so the role default fits any branch; the
        driver.branch_support check looks its branch up and warns past the date."""
        branches = self._matrix().get("driver", {}).get("branches") or {}
        return {
            str(b): {
                "kind": str(v["kind"]),
                "end_of_support": str(v["end_of_support"]),
                # the end-of-support part of the source (the matrix adds notes after a ";")
                "source": " ".join(str(v["source"]).split(";")[0].split()),
            }
            for b, v in sorted(branches.items())
        }

    def cuda_min_driver(self) -> str:
        return str((self.cuda_row().get("min_driver") or {}).get("version") or "")

    def cudnn_build(self) -> str:
        """Package build label of the cuDNN row for the stack's cuDNN major (e.g. cuda<X.Y>)."""
        rows = {int(r["major"]): r for r in self.cuda_row().get("cudnn") or []}
        return str((rows.get(self.cudnn_major) or {}).get("build") or "")

    def nccl_build(self) -> str:
        """Package build label of the NCCL row listing the stack's version (else the first row)."""
        rows = list(self.cuda_row().get("nccl") or [])
        version = str(self.data["nccl"]["version"])
        row = next((r for r in rows if version in [str(v) for v in r.get("versions", [])]),
                   rows[0] if rows else {})
        return str(row.get("build") or "")

    def to_extravars(self, *, allow_reboot: bool = True) -> dict[str, Any]:
        """The role variables of docs/architecture.md: gpu_stack_<section>_<key> for every leaf
        (`None` becomes ""), the derived gpu_stack_* values, and nvidia_driver_allow_reboot."""
        out: dict[str, Any] = {}
        for var, (section, key) in STACK_VARS.items():
            value = self.data[section][key]
            out[var] = "" if value is None else copy.deepcopy(value)
        out["gpu_stack_pytorch_python_range"] = self.pytorch_python_range()
        out["gpu_stack_cuda_min_driver"] = self.cuda_min_driver()
        out["gpu_stack_cudnn_build"] = self.cudnn_build()
        out["gpu_stack_nccl_build"] = self.nccl_build()
        out["gpu_stack_cuda_distros"] = self.cuda_distros()
        out["gpu_stack_driver_support"] = self.driver_support()
        out["nvidia_driver_allow_reboot"] = allow_reboot
        return out


def _data_file(path: Path, what: str) -> dict[str, Any]:
    """A data file shipped with provision (matrix, default stack): broken means a broken install."""
    try:
        data = yamlfile.load_packaged(path)
    except yamlfile.YamlFileError as exc:
        raise SetupError(f"{what} {exc} (broken install?)") from exc
    if not isinstance(data, dict):
        raise SetupError(f"{what} {path}: not a mapping (broken install?)")
    return data


def load_matrix(path: Path = MATRIX) -> dict[str, Any]:
    return _data_file(path, "compatibility matrix")


def _show(value: object, limit: int = 60) -> str:
    """repr() for messages, cut short: a value may be a 60 KiB string."""
    return _cut(repr(value), limit)


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def _check_leaf(
    path: str, value: Any, spec: Field, errors: list[str], default: Any = None  # noqa: ANN401
) -> Any:  # noqa: ANN401
    if value is None:
        if not spec.nullable:
            errors.append(f"{path}: a value is required (got null)")
        return value
    if isinstance(value, float) and str in spec.kinds:
        errors.append(f'{path}: {_show(value)} is a YAML number; quote it as a string ("{value}")')
        return value
    if isinstance(value, int) and not isinstance(value, bool) and str in spec.kinds and (
        int not in spec.kinds and spec.pattern is not None
    ):
        value = str(value)  # an unquoted driver branch
    ok_type = isinstance(value, spec.kinds) and not (
        isinstance(value, bool) and bool not in spec.kinds
    )
    if not ok_type:
        want = " or ".join(k.__name__ for k in spec.kinds)
        errors.append(f"{path}: expected {want}, got {type(value).__name__} {_show(value)}")
        return value
    if spec.choices and value not in spec.choices:
        errors.append(f"{path}: {_show(value)} is not one of {', '.join(map(str, spec.choices))}")
    # fullmatch: `re.match(...$)` lets a trailing newline through
    if spec.pattern and isinstance(value, str) and not re.fullmatch(spec.pattern, value):
        hint = f" (expected {spec.hint.format(default=default)})" if spec.hint else ""
        errors.append(f"{path}: {_show(value)} is not valid{hint}")
    return value


def _merge(path: str, user: Any, default: Any, schema: Any, errors: list[str]) -> Any:  # noqa: ANN401
    if isinstance(schema, dict):
        if not isinstance(user, Mapping):
            errors.append(f"{path or 'stack'}: expected a mapping, got {type(user).__name__}")
            return copy.deepcopy(default)
        out: dict[str, Any] = {}
        for key in user:
            if key not in schema:
                where = f"{path}.{key}" if path else str(key)
                errors.append(f"{_cut(where)}: unknown key (known: {', '.join(schema)})")
        for key, sub in schema.items():
            where = f"{path}.{key}" if path else key
            if key in user:
                out[key] = _merge(where, user[key], default[key], sub, errors)
            else:
                out[key] = copy.deepcopy(default[key])
        return out
    return _check_leaf(path, user, schema, errors, default)


def _vtuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _rule_driver(data: dict[str, Any], row: dict[str, Any], matrix: dict[str, Any],
                 errors: list[str], warnings: list[str]) -> None:
    cuda = str(data["cuda"]["version"])
    drv = data["driver"]
    min_driver = str(row["min_driver"]["version"])
    branch = int(drv["branch"])
    if branch < _vtuple(min_driver)[0]:
        errors.append(f"driver branch {branch} is below the minimum {min_driver} for CUDA {cuda}")
    if drv["version"]:
        version = str(drv["version"])
        if not version.startswith(f"{drv['branch']}."):
            errors.append(f"driver version {version} is not in branch {drv['branch']}")
        if _vtuple(version) < _vtuple(min_driver):
            errors.append(
                f"driver version {version} is below the minimum {min_driver} for CUDA {cuda}"
            )
    okm = matrix.get("driver", {}).get("open_kernel_modules", {})
    if drv["flavor"] == "open":
        min_open = int(okm.get("min_branch", 515))
        if branch < min_open:
            errors.append(
                f"open kernel modules need driver branch {min_open} or newer (got {branch})"
            )
        archs = ", ".join(okm.get("gpu_architectures", []))
        warnings.append(f"driver.flavor open: supported only on GPUs of {archs}")


def _today() -> datetime.date:
    return datetime.date.today()


def _rule_branch_support(data: dict[str, Any], row: dict[str, Any], matrix: dict[str, Any],
                         errors: list[str], warnings: list[str]) -> None:
    """A branch past NVIDIA's end of support still runs, but gets no bug or security fixes: a
    warning naming the date and its source, and the supported branches to choose instead."""
    branches = matrix.get("driver", {}).get("branches") or {}
    branch = str(data["driver"]["branch"])
    info = branches.get(branch)
    month = _today().strftime("%Y-%m")
    if not info or str(info["end_of_support"]) >= month:
        return
    supported = [
        f"{b} ({v['kind']}, supported until {v['end_of_support']})"
        for b, v in sorted(branches.items())
        if str(v["end_of_support"]) >= month and int(b) >= int(branch)
    ]
    warnings.append(
        f"driver branch {branch} is past NVIDIA's end of support ({info['kind']}, support ended "
        f"{info['end_of_support']}: {' '.join(str(info['source']).split())}); it gets no bug or "
        f"security fixes; choose a supported branch: {', '.join(supported) or 'none known'}"
    )


def _rule_libraries(data: dict[str, Any], row: dict[str, Any], matrix: dict[str, Any],
                    errors: list[str], warnings: list[str]) -> None:
    cuda = str(data["cuda"]["version"])
    cudnn = str(data["cudnn"]["version"])
    major = int(cudnn.split(".", 1)[0])
    cudnn_rows = {int(r["major"]): r for r in row.get("cudnn", [])}
    crow = cudnn_rows.get(major)
    if crow is None:
        errors.append(
            f"cuDNN {major}.x has no build for CUDA {cuda} "
            f"(majors with builds: {', '.join(map(str, sorted(cudnn_rows)))})"
        )
    elif not cudnn.startswith(str(crow["prefix"])):
        errors.append(
            f"cuDNN {cudnn} has no build for CUDA {cuda} "
            f"(builds for CUDA {cuda}: {crow['prefix']}x)"
        )
    elif cudnn not in [str(v) for v in crow.get("versions", [])]:
        warnings.append(
            f"cuDNN {cudnn} is not among the builds the matrix lists for CUDA {cuda} "
            f"({', '.join(crow['versions'])}); unconfirmed"
        )
    nccl = str(data["nccl"]["version"])
    nccl_known = [str(v) for r in row.get("nccl", []) for v in r.get("versions", [])]
    if nccl not in nccl_known:
        warnings.append(
            f"NCCL {nccl} is not among the builds the matrix lists for CUDA {cuda} "
            f"({', '.join(nccl_known)}); unconfirmed"
        )


def _rule_pytorch(data: dict[str, Any], row: dict[str, Any], matrix: dict[str, Any],
                  errors: list[str], warnings: list[str]) -> None:
    cuda = str(data["cuda"]["version"])
    pt = data["pytorch"]
    tv = str(pt["version"])
    build = str(pt["build"])
    tables = matrix.get("pytorch", {})
    if build == CPU_BUILD:
        return
    if build not in tables:
        known = ", ".join([*tables, CPU_BUILD])
        errors.append(f"pytorch.build: {build!r} is not one of {known}")
        return
    if build != cuda_build_label(cuda):
        errors.append(
            f"pytorch.build {build} does not match CUDA {cuda} "
            f"(the build for CUDA {cuda} is {cuda_build_label(cuda)})"
        )
    releases = tables[build].get("releases", {})
    rel = releases.get(tv)
    if rel is None:
        first, last = min(releases, key=_vtuple), max(releases, key=_vtuple)
        errors.append(
            f"torch {tv} has no {build} wheels ({build} wheels exist for {first} to {last})"
        )
        return
    if pt["torchvision"] and str(pt["torchvision"]) != str(rel["torchvision"]):
        errors.append(
            f"torchvision {pt['torchvision']} does not pair with torch {tv} "
            f"(torch {tv} pairs with torchvision {rel['torchvision']})"
        )
    if pt["torchaudio"] and str(pt["torchaudio"]) != tv:
        errors.append(
            f"torchaudio {pt['torchaudio']} does not pair with torch {tv} "
            f"(torchaudio versions equal torch versions)"
        )


def _rule_validation(data: dict[str, Any], row: dict[str, Any], matrix: dict[str, Any],
                     errors: list[str], warnings: list[str]) -> None:
    val = data["validation"]
    nproc = val["nproc_per_node"]
    if isinstance(nproc, str) and nproc != "auto":
        errors.append(f"validation.nproc_per_node: {nproc!r} is not 'auto' or a positive integer")
    if isinstance(nproc, int) and nproc < 1:
        errors.append("validation.nproc_per_node: must be a positive integer")
    if val["timeout_s"] < 1:
        errors.append("validation.timeout_s: must be a positive integer")
    for key, value in (val["thresholds"] or {}).items():
        where = f"validation.thresholds.{key}"
        if key not in THRESHOLD_KEYS:
            errors.append(f"{where}: unknown key (known: {', '.join(THRESHOLD_KEYS)})")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            errors.append(f"{where}: expected a number, got {type(value).__name__} {value!r}")
        elif value <= 0 or (key != "allreduce_busbw_gbps" and value > 1):
            bound = "> 0" if key == "allreduce_busbw_gbps" else "in (0, 1]"
            errors.append(f"{where}: {value!r} is out of range (must be {bound})")


def _rule_distros(data: dict[str, Any], row: dict[str, Any], matrix: dict[str, Any],
                  errors: list[str], warnings: list[str]) -> None:
    """Unconfirmed distros are warnings unless the mirror declares it carries them."""
    cuda = str(data["cuda"]["version"])
    carries = {str(c) for c in data["mirrors"]["nvidia_repo_carries"]}
    for entry in data["mirrors"]["nvidia_repo_carries"]:
        if not isinstance(entry, str) or not re.fullmatch(_DISTRO_ARCH, entry):
            errors.append(
                f"mirrors.nvidia_repo_carries: {entry!r} is not <distro>/<arch> "
                f"such as debian12/x86_64"
            )
    unconfirmed = [
        f"{d['name']}/{a}"
        for d in row.get("distros", [])
        if d.get("confidence") == "U"
        for a in d.get("arches", [])
    ]
    absent = [
        f"{d['name']}/{a}"
        for d in row.get("distros", [])
        if d.get("published") is False
        for a in d.get("arches", [])
        if f"{d['name']}/{a}" not in carries
    ]
    if absent:
        warnings.append(
            f"{DISTRO_PREFIX}NVIDIA publishes no CUDA {cuda} packages for {', '.join(absent)}: "
            f"hosts there stop in preflight (unless mirrors.nvidia_repo_carries declares them)"
        )
    missing = [u for u in unconfirmed if u not in carries]
    if missing:
        warnings.append(
            f"{DISTRO_PREFIX}CUDA {cuda} packages for {', '.join(missing)} are unconfirmed; "
            f"hosts there fail unless the mirror carries them "
            f"(declare it in mirrors.nvidia_repo_carries)"
        )


# pip installs into pytorch.venv as root: it must be a directory of its own, never a system one
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
    "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys",
    "/usr", "/usr/local", "/usr/local/bin", "/usr/local/lib", "/usr/local/sbin",
    "/usr/local/share", "/usr/local/include", "/usr/local/etc", "/var", "/var/lib",
    "/var/cache", "/var/log", "/var/opt",
})
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                "/run", "/sbin", "/sys", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32",
                "/usr/lib64", "/usr/libexec", "/usr/include", "/usr/share", "/usr/src",
                # world-writable: another user could plant the directory or a link first
                "/tmp", "/var/tmp", "/dev/shm")  # noqa: S108


def venv_problem(venv: str) -> str | None:
    """Why `venv` cannot be the PyTorch venv, or None."""
    if not venv.startswith("/"):
        return "must be an absolute path"
    parts = venv.split("/")
    if any(p in (".", "..") for p in parts) or "//" in venv.rstrip("/"):
        return "must be a plain absolute path (no '.', '..' or '//')"
    norm = venv.rstrip("/") or "/"
    if norm in SYSTEM_DIRS:
        return "is a system directory; give a directory of its own, such as /opt/pytorch"
    if any(norm == t or norm.startswith(t + "/") for t in SYSTEM_TREES):
        return "is inside a system directory; give a directory of its own, such as /opt/pytorch"
    if re.fullmatch(r"/home/[^/]+", norm):
        return "is a home directory; give a directory of its own, such as /opt/pytorch"
    return None


def _rule_venv(data: dict[str, Any], row: dict[str, Any], matrix: dict[str, Any],
               errors: list[str], warnings: list[str]) -> None:
    venv = str(data["pytorch"]["venv"])
    problem = venv_problem(venv)
    if problem:
        errors.append(f"pytorch.venv: {_show(venv)} {problem}")


# One pinned requirement with its hashes, as `pip-compile --generate-hashes` writes them.
HASHED_REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)((\s+--hash=sha256:[0-9a-f]{64})+)$"
)


def _rule_hashes(data: dict[str, Any], row: dict[str, Any], matrix: dict[str, Any],
                 errors: list[str], warnings: list[str]) -> None:
    """Wheels are verified: an index pip downloads from carries sha256 fragments pip checks; a
    find-links mirror alone (a directory listing) carries none, so the stack must give them."""
    mirrors, pt = data["mirrors"], data["pytorch"]
    hashes = [str(h).strip() for h in mirrors.get("pytorch_hashes") or []]
    # with an index too, pip still takes the mirror's wheel when the index is unreachable or the
    # mirror's wheel carries a build tag: find-links always needs the hashes
    if mirrors.get("pytorch_find_links") and not hashes:
        errors.append(
            "mirrors.pytorch_find_links without mirrors.pytorch_hashes: a find-links mirror serves "
            "no hashes pip can check (and pip may take its wheels over the index's); list every "
            "wheel's pin and sha256 in mirrors.pytorch_hashes "
            "(pip-compile --generate-hashes output: 'torch==X --hash=sha256:...')"
        )
        return
    names: dict[str, str] = {}
    for line in hashes:
        m = HASHED_REQUIREMENT.fullmatch(line)
        if not m:
            errors.append(
                f"mirrors.pytorch_hashes: {_show(line)} is not 'name==version "
                "--hash=sha256:<64 hex>' (one or more hashes)"
            )
            continue
        name = m.group("name").lower().replace("_", "-")
        if name in names:
            errors.append(f"mirrors.pytorch_hashes: {name} is pinned twice")
        names[name] = m.group("version")
    if not hashes or len(names) != len(hashes):
        return
    cpu = str(pt["build"]) == CPU_BUILD
    for pkg in ("torch", "torchvision", "torchaudio"):
        want = pt["version"] if pkg == "torch" else pt[pkg]
        if not want:
            continue
        got = names.get(pkg)
        # CPU wheels are `X` on PyPI and `X+cpu` on download.pytorch.org; CUDA ones `X+cuXY`
        label = "+cpu" if cpu else "+" + str(pt["build"])
        if got not in ((f"{want}{label}", str(want)) if cpu else (f"{want}{label}",)):
            errors.append(
                f"mirrors.pytorch_hashes pins {pkg} {got or '(not at all)'}, the stack wants "
                f"{want}{label}"
            )


RULES = (_rule_driver, _rule_branch_support, _rule_libraries, _rule_pytorch, _rule_validation,
         _rule_distros, _rule_venv, _rule_hashes)


def _rules(data: dict[str, Any], matrix: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Matrix rules. Returns (errors, warnings)."""
    errors: list[str] = []
    warnings: list[str] = []
    cuda = str(data["cuda"]["version"])
    cuda_rows = matrix.get("cuda", {})
    row = cuda_rows.get(cuda)
    if row is None:
        known = ", ".join(sorted(cuda_rows))
        errors.append(f"CUDA {cuda} is not in the compatibility matrix (known: {known})")
        return errors, warnings
    for rule in RULES:
        rule(data, row, matrix, errors, warnings)
    return errors, warnings


def resolve(user: Mapping[str, Any] | None, *, source: str = "(inline)") -> Stack:
    """Merge `user` over the default stack, validate structure and matrix rules."""
    default = _data_file(DEFAULT_STACK, "default stack")
    errors: list[str] = []
    data = _merge("", user or {}, default, SCHEMA, errors)
    if errors:
        raise StackError(f"stack {source}:\n  " + "\n  ".join(errors))
    matrix = load_matrix()
    rule_errors, warnings = _rules(data, matrix)
    if rule_errors:
        raise StackError(f"stack {source}:\n  " + "\n  ".join(rule_errors))
    distro = [w.removeprefix(DISTRO_PREFIX) for w in warnings if w.startswith(DISTRO_PREFIX)]
    return Stack(
        data=data,
        source=source,
        warnings=tuple(w for w in warnings if not w.startswith(DISTRO_PREFIX)),
        distro_warning="; ".join(distro) if distro else None,
        matrix=matrix,
    )


def load(path: Path | None) -> Stack:
    """Load and resolve a stack file; `None` gives the built-in default."""
    if path is None:
        return resolve(None, source="built-in default")
    try:
        user = yamlfile.load(path, limit=MAX_STACK_BYTES, what="stack file")
    except yamlfile.YamlFileError as exc:
        raise StackError(str(exc)) from exc
    if user is None:
        user = {}
    if not isinstance(user, dict):
        raise StackError(f"stack {path}: expected a mapping at the top level")
    if "name" not in user:
        user = {**user, "name": re.sub(r"[^A-Za-z0-9_.-]", "-", path.stem) or "stack"}
    return resolve(user, source=str(path))


def _coerce(value: Any, spec: Field) -> Any:  # noqa: ANN401
    """An -e value for a stack leaf: `key=value` gives strings, and "" stands for null."""
    if not isinstance(value, str):
        return value
    if value == "" and spec.nullable:
        return None
    if str in spec.kinds:
        return value
    try:
        return yamlfile.parse(value, "-e value")
    except yamlfile.YamlFileError:
        return value  # reported as a type error by the schema check


def policy_vars() -> frozenset[str]:
    """The gpu_stack role's site-policy variables (waits, locks, holds, paths): gpu_stack_* names
    that are not stack leaves and not derived. Given with -e they reach the roles as they are."""
    names = rolevars.gpu_stack_variables()
    return frozenset(names - set(STACK_VARS) - set(DERIVED_VARS) - {"gpu_stack_desired"})


_FINGERPRINT = r"[0-9A-Fa-f]{40}"


def check_policy(values: Mapping[str, Any]) -> None:
    """Site-policy variables given with -e whose shape Ansible cannot check (StackError, exit 2):
    gpu_stack_repo_key_fingerprints is a list of 40-hex OpenPGP fingerprints."""
    fps = values.get("gpu_stack_repo_key_fingerprints")
    if fps is None:
        return
    where = "-e gpu_stack_repo_key_fingerprints"
    if not isinstance(fps, list):
        raise StackError(
            f"{where}: expected a list of fingerprints, got {type(fps).__name__} {_show(fps)} "
            """(give it as JSON: -e '{"gpu_stack_repo_key_fingerprints": ["<40 hex>"]}')"""
        )
    for fp in fps:
        if not isinstance(fp, str) or not re.fullmatch(_FINGERPRINT, fp.replace(" ", "")):
            raise StackError(
                f"{where}: {_show(fp)} is not an OpenPGP fingerprint (40 hex digits, as "
                "gpg --show-keys prints it)"
            )


def fold_overrides(stack: Stack, values: Mapping[str, Any]) -> Stack:
    """`-e gpu_stack_<section>_<key>=...` folded into the stack and checked by the same schema
    and matrix rules as a stack file (StackError, exit 2, naming the rule)."""
    errors = []
    for var in values:
        if var in DERIVED_VARS:
            errors.append(
                f"-e {var}: derived from the matrix; set {DERIVED_VARS[var]} instead "
                f"(-e gpu_stack_<section>_<key> or the stack file)"
            )
        elif var not in STACK_VARS:
            errors.append(
                f"-e {_cut(var)}: not a stack variable (see `provision stack show --vars`)"
            )
    if errors:
        raise StackError("\n".join(errors))
    if not values:
        return stack
    data = copy.deepcopy(stack.data)
    for var, value in values.items():
        section, key = STACK_VARS[var]
        data[section][key] = _coerce(value, SCHEMA[section][key])
    names = ", ".join(f"-e {k}" for k in values)
    return resolve(data, source=f"{stack.source} with {names}")


def dump(stack: Stack) -> str:
    import yaml  # noqa: PLC0415

    return str(yaml.safe_dump(stack.data, sort_keys=False, default_flow_style=False))
