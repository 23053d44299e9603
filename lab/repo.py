"""The lab's repositories, built from the models in lab/repos/ and signed like the real ones.

`build_repo(root, base_url, cache)` writes, under root (what the HTTP server serves):

* `compute/cuda/repos/<distro>/<arch>/` for every NVIDIA model (ubuntu2204, debian11, debian12,
  ...): flat apt repositories as NVIDIA lays them out, one throwaway key for all of them (NVIDIA
  signs them all with one key too), each with a `cuda-keyring_1.1-1_all.deb` whose sources file
  points at its own directory;
* `ubuntu/` and `debian/`: the slices of the distributions' own archives the roles need (dkms,
  kernel headers, Debian's contrib helpers, Canonical's -server driver), laid out as real archives
  (`dists/<suite>/<component>/binary-amd64/`, `pool/`), signed with a second throwaway key
  (`archive-keyring.gpg`), since the lab's hosts have no Ubuntu or Debian mirror.

Package contents are simulations (see lab/README.md); names, versions, relations, paths and unit
files are the models' facts.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab import model as model_mod
from lab import payload
from lab.debs import Deb, shared_object
from lab.util import LabError, clean_env, run

REPO_SUBDIR = "compute/cuda/repos"
NVIDIA_MODELS = ("ubuntu2204-x86_64", "debian11-x86_64", "debian12-x86_64")
ARCHIVE_MODELS = ("ubuntu-jammy", "debian-bullseye", "debian-bookworm")
DEFAULT_DISTRO_ARCH = "ubuntu2204/x86_64"
KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
ARCHIVE_KEYRING = "archive-keyring.gpg"
# the file of lab/payload a {program: ...} file spec installs (version-baked where it has a marker)
PROGRAMS = {
    "nvidia-smi": "nvidia_smi.py",
    "nvidia-persistenced": "persistenced.py",
    "nv-fabricmanager": "fabricmanager.py",
    "dkms": "dkms.py",
}


@dataclass(frozen=True)
class Repo:
    """The built repositories: `root` is served at `base_url`."""

    root: Path
    base_url: str  # http://127.0.0.1:PORT  (no trailing slash)
    distro_arch: str = DEFAULT_DISTRO_ARCH  # the directory `dir` and `keyring_url` refer to

    @property
    def dir(self) -> Path:
        return self.dir_for(self.distro_arch)

    def dir_for(self, distro_arch: str) -> Path:
        return self.root / REPO_SUBDIR / distro_arch

    @property
    def repos_url(self) -> str:
        """The `nvidia_repo_base_url` value: ends in /compute/cuda/repos."""
        return f"{self.base_url}/{REPO_SUBDIR}"

    @property
    def keyring_url(self) -> str:
        return self.keyring_url_for(self.distro_arch)

    def keyring_url_for(self, distro_arch: str) -> str:
        return f"{self.repos_url}/{distro_arch}/cuda-keyring_1.1-1_all.deb"

    def archive_url(self, archive: str) -> str:
        """Where a distribution archive slice is served (archive: "ubuntu" or "debian")."""
        return f"{self.base_url}/{archive}"

    @property
    def archive_keyring(self) -> Path:
        """The (binary) public key that signs the archive slices."""
        return self.root / ARCHIVE_KEYRING

    def with_distro(self, distro_arch: str) -> Repo:
        return Repo(root=self.root, base_url=self.base_url, distro_arch=distro_arch)


# ------------------------------------------------------------------------------------ payloads
def _program(kind: str, spec: dict[str, Any], pkg: model_mod.Package) -> str:  # noqa: PLR0911
    v = pkg.variables
    if kind in PROGRAMS:
        text = payload.read(PROGRAMS[kind])
        version = str(spec.get("version") or v.get("V", ""))
        text = text.replace('"@DRIVER_VERSION@"', f'"{version}"')
        return text.replace('"@DKMS_VERSION@"', f'"{v.get("DKMS", "")}"')
    if kind == "nvcc":
        year = v["BUILT"][-4:]
        return (
            "#!/bin/sh\ncase \"$1\" in\n  --version|-V)\n    cat <<'EOF'\n"
            "nvcc: NVIDIA (R) Cuda compiler driver\n"
            f"Copyright (c) 2005-{year} NVIDIA Corporation\n"
            f"Built on {v['BUILT']}\n"
            f"Cuda compilation tools, release {v['TV']}, V{v['NVCC']}\nBuild {v['BUILD']}\nEOF\n"
            "    exit 0 ;;\nesac\n"
            "echo 'nvcc fatal   : No input files specified; "
            "use option --help for more information' >&2\nexit 1\n"
        )
    if kind == "cuda-version-json":
        return (
            json.dumps(
                {
                    "cuda": {"name": "CUDA SDK", "version": v["PKG"]},
                    "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": v["CUDART"]},
                    "cuda_nvcc": {"name": "CUDA NVCC", "version": v["NVCC"]},
                },
                indent=3,
            )
            + "\n"
        )
    if kind == "cudnn-version-h":
        return (
            "#ifndef CUDNN_VERSION_H_\n#define CUDNN_VERSION_H_\n\n"
            f"#define CUDNN_MAJOR {v['MAJ']}\n#define CUDNN_MINOR {v['MIN']}\n"
            f"#define CUDNN_PATCHLEVEL {v['PATCH']}\n\n"
            "#define CUDNN_VERSION (CUDNN_MAJOR * 1000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n\n"
            "#endif /* CUDNN_VERSION_H */\n"
        )
    if kind == "nccl-h":
        code = int(v["MAJ"]) * 10000 + int(v["MIN"]) * 100 + int(v["PATCH"])
        return (
            "#ifndef NCCL_H_\n#define NCCL_H_\n\n"
            f"#define NCCL_MAJOR {v['MAJ']}\n#define NCCL_MINOR {v['MIN']}\n"
            f"#define NCCL_PATCH {v['PATCH']}\n"
            '#define NCCL_SUFFIX ""\n\n'
            f"#define NCCL_VERSION_CODE {code}\n"
            "#define NCCL_VERSION(X,Y,Z) "
            "(((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : "
            "(X) * 10000 + (Y) * 100 + (Z))\n\n#endif\n"
        )
    if kind == "dkms-common-postinst":
        return (
            "#!/bin/sh\n# provision lab: what dh_dkms's postinst runs\n"
            'exec /usr/sbin/dkms common.postinst "$@"\n'
        )
    if kind == "dkms-kernel-hook":
        return (
            "#!/bin/sh\n# provision lab: dkms autoinstall for a new kernel or new headers\n"
            'exec /usr/sbin/dkms kernel-hook "$1"\n'
        )
    raise LabError(f"{pkg.name}: unknown payload program {kind!r}")


def _merge_script(deb: Deb, name: str, body: str) -> None:
    if name in deb.scripts:
        raise LabError(f"{deb.name}: {name} given twice (model and payload)")
    deb.scripts[name] = body


def to_deb(pkg: model_mod.Package, repo_model: model_mod.RepoModel, cache: Path) -> Deb:
    """Turn a model package into a buildable Deb (facts from the model, payload from the lab)."""
    nvidia = repo_model.kind == "nvidia-apt"
    rel = pkg.relations
    deb = Deb(
        pkg.name,
        pkg.version,
        f"{pkg.name} (provision lab model of {repo_model.repo})",
        arch=pkg.arch,
        section=pkg.section,
        depends=list(rel.get("depends", [])),
        pre_depends=list(rel.get("pre_depends", [])),
        recommends=list(rel.get("recommends", [])),
        suggests=list(rel.get("suggests", [])),
        breaks=list(rel.get("breaks", [])),
        conflicts=list(rel.get("conflicts", [])),
        replaces=list(rel.get("replaces", [])),
        provides=list(rel.get("provides", [])),
        maintainer=(
            "cudatools <cudatools@nvidia.com>"
            if nvidia
            else "provision lab <lab@provision.invalid>"
        ),
        long_description=(
            f"Model: lab/repos/{repo_model.name}.yml (confidence {pkg.confidence}); "
            "the payload is a simulation."
        ),
        conffiles=list(pkg.conffiles),
    )
    for path, spec in pkg.files.items():
        if isinstance(spec, str):
            deb.add_text(path, spec)
            continue
        mode = int(str(spec.get("mode", "0")), 8) or None
        if "program" in spec:
            deb.add_text(path, _program(str(spec["program"]), spec, pkg), mode or 0o755)
        elif "so" in spec:
            deb.add_bytes(
                path,
                shared_object(cache, str(spec["so"]), str(spec["symbol"]), pkg.version),
                mode or 0o644,
            )
            deb.ldconfig_trigger = True
        elif "unit" in spec:
            deb.add_text(path, str(repo_model.units[spec["unit"]]["text"]), mode or 0o644)
        elif "text" in spec:
            deb.add_text(path, str(spec["text"]), mode or 0o644)
        else:
            raise LabError(f"{pkg.name}: file {path}: no program/so/unit/text")
    deb.symlinks.update(pkg.links)
    for name, body in pkg.scripts.items():
        deb.scripts[name] = body
    dkms = pkg.payload.get("dkms")
    if dkms:
        module, version, flavor = dkms["module"], dkms["version"], dkms["flavor"]
        deb.add_text(
            f"/usr/src/{module}-{version}/dkms.conf",
            f'PACKAGE_NAME="{module}"\nPACKAGE_VERSION="{version}"\nAUTOINSTALL="yes"\n'
            f"# provision-lab flavor: {flavor}\n",
        )
        _merge_script(
            deb,
            "postinst",
            '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n'
            f"  /usr/lib/dkms/common.postinst {module} {version}\nfi\nexit 0\n",
        )
        _merge_script(
            deb,
            "prerm",
            '#!/bin/sh\nset -e\ncase "$1" in remove|upgrade|deconfigure)\n'
            f"  dkms remove -m {module} -v {version} --all >/dev/null 2>&1 || true ;;\n"
            "esac\nexit 0\n",
        )
    prebuilt = pkg.payload.get("prebuilt")
    if prebuilt:
        branch = pkg.variables.get("B", "")
        deb.add_text(
            f"/lib/modules/{prebuilt['kernel']}/kernel/nvidia-{branch}srv/nvidia.ko",
            f"simulated nvidia.ko {prebuilt['version']} {prebuilt['flavor']}\n",
        )
        _merge_script(
            deb,
            "postinst",
            '#!/bin/sh\nset -e\nif [ "$1" = configure ] && [ -x /usr/lib/fake-nvidia/loader ]; '
            "then\n  /usr/lib/fake-nvidia/loader modprobe || true\nfi\nexit 0\n",
        )
    return deb


# ------------------------------------------------------------------------------------ signing
class Signer:
    """A throwaway ed25519 signing key in a private GNUPGHOME."""

    def __init__(self, home: Path, uid: str) -> None:
        self.home = home
        home.mkdir(mode=0o700, parents=True)
        self._gpg("--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "1d")
        self.keyring = home.parent / f"{home.name}.gpg"
        self._gpg("--output", str(self.keyring), "--export")
        self.armored = run(
            ["gpg", "--homedir", home, "--armor", "--export"], env=self._env()
        ).stdout

    def _env(self) -> dict[str, str]:
        return clean_env(GNUPGHOME=str(self.home))

    def _gpg(self, *args: str) -> None:
        run(["gpg", "--batch", "--quiet", "--homedir", self.home, *args], env=self._env())

    def sign_release(self, release: Path) -> None:
        out = release.parent
        self._gpg("--clearsign", "-o", str(out / "InRelease"), str(release))
        self._gpg("-abs", "-o", str(out / "Release.gpg"), str(release))

    def close(self) -> None:
        run(["gpgconf", "--homedir", self.home, "--kill", "all"], env=self._env())


def _write_packages(directory: Path, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Packages").write_text(text, encoding="utf-8")
    with gzip.open(directory / "Packages.gz", "wt", encoding="utf-8", compresslevel=9) as fh:
        fh.write(text)


def _release(directory: Path, tmp: Path, options: dict[str, str]) -> Path:
    args = ["apt-ftparchive"]
    for key, value in options.items():
        args += ["-o", f"APT::FTPArchive::Release::{key}={value}"]
    text = run([*args, "release", "."], cwd=directory).stdout
    staged = tmp / "Release"
    staged.write_text(text, encoding="utf-8")  # never inside the tree it indexes
    shutil.move(staged, directory / "Release")
    return directory / "Release"


# ------------------------------------------------------------------------------------ builders
def _keyring_deb(keyring: bytes, base_url: str, repo_model: model_mod.RepoModel) -> Deb:
    spec = repo_model.data["keyring"]
    deb = Deb(
        "cuda-keyring",
        str(spec["version"]),
        "GPG keyring for the CUDA repository",
        arch="all",
        section="non-free/admin",
    )
    deb.add_bytes(str(spec["keyring"]), keyring)
    listfile = str(spec["list"])
    deb.add_text(
        listfile,
        f"deb [signed-by={spec['keyring']}] {base_url}/{REPO_SUBDIR}/{repo_model.repo}/ /\n",
    )
    deb.conffiles.append(listfile)
    return deb


def build_nvidia_repo(  # noqa: PLR0917
    root: Path,
    base_url: str,
    repo_model: model_mod.RepoModel,
    signer: Signer,
    cache: Path,
    tmp: Path,
    label: str | None = None,
) -> Path:
    out = root / REPO_SUBDIR / repo_model.repo
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    work = tmp / "build"
    work.mkdir(exist_ok=True)
    debs_cache = cache.parent / "debs"
    for pkg in repo_model.packages:
        to_deb(pkg, repo_model, cache).build_cached(out, work, debs_cache)
    _keyring_deb(signer.keyring.read_bytes(), base_url, repo_model).build(out, work)
    _write_packages(out, run(["apt-ftparchive", "packages", "."], cwd=out).stdout)
    rel = repo_model.data["release"]
    release = _release(
        out,
        tmp,
        {
            "Origin": str(rel["origin"]),
            "Label": label or str(rel["label"]),
            "Architecture": repo_model.repo.split("/")[1],
            "Description": f"provision lab model of {repo_model.repo}",
        },
    )
    signer.sign_release(release)
    (out / "cuda-archive-keyring.asc").write_text(signer.armored, encoding="utf-8")
    return out


def build_archive(
    root: Path, repo_model: model_mod.RepoModel, signer: Signer, cache: Path, tmp: Path
) -> Path:
    """One suite of a distribution archive slice: <root>/<repo>/{dists/<suite>,pool/<suite>}."""
    data = repo_model.data
    top = root / repo_model.repo
    suite = str(data["suite"])
    pool = top / "pool" / suite
    dists = top / "dists" / suite
    shutil.rmtree(pool, ignore_errors=True)
    shutil.rmtree(dists, ignore_errors=True)
    work = tmp / "build"
    work.mkdir(exist_ok=True)
    debs_cache = cache.parent / "debs"
    components = [str(c) for c in data["components"]]
    for pkg in repo_model.packages:
        if pkg.component not in components:
            raise LabError(f"{repo_model.name}: {pkg.name} in unknown component {pkg.component}")
        d = pool / pkg.component
        d.mkdir(parents=True, exist_ok=True)
        to_deb(pkg, repo_model, cache).build_cached(d, work, debs_cache)
    for comp in components:
        (pool / comp).mkdir(parents=True, exist_ok=True)
        text = run(["apt-ftparchive", "packages", f"pool/{suite}/{comp}"], cwd=top).stdout
        _write_packages(dists / comp / "binary-amd64", text)
    rel = data["release"]
    release = _release(
        dists,
        tmp,
        {
            "Origin": str(rel["origin"]),
            "Label": str(rel["label"]),
            "Suite": str(rel.get("suite_name", suite)),
            "Codename": suite,
            "Version": str(rel["version"]),
            "Components": " ".join(components),
            "Architectures": "amd64",
            "Description": f"provision lab slice of {rel['origin']} {suite}",
        },
    )
    signer.sign_release(release)
    return top


def build_repo(
    root: Path,
    base_url: str,
    cache: Path,
    label: str = "NVIDIA CUDA",
    *,
    nvidia_models: tuple[str, ...] = NVIDIA_MODELS,
    archive_models: tuple[str, ...] = ARCHIVE_MODELS,
) -> Repo:
    """Build and sign every repository under root; base_url is where root is served."""
    base_url = base_url.rstrip("/")
    with tempfile.TemporaryDirectory(prefix="provision-lab-repo-") as tmpname:
        tmp = Path(tmpname)
        nvidia = Signer(
            tmp / "nvidia", "cudatools (provision lab throwaway key) <cudatools@nvidia.invalid>"
        )
        try:
            for name in nvidia_models:
                build_nvidia_repo(root, base_url, model_mod.load(name), nvidia, cache, tmp, label)
        finally:
            nvidia.close()
        if archive_models:
            archive = Signer(
                tmp / "archive", "provision lab archive key <archive@provision.invalid>"
            )
            try:
                for name in archive_models:
                    build_archive(root, model_mod.load(name), archive, cache, tmp)
                shutil.copy2(archive.keyring, root / ARCHIVE_KEYRING)
            finally:
                archive.close()
    return Repo(root=root, base_url=base_url)
