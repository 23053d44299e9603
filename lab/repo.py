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

import yaml

from lab import payload
from lab import repo_model as model_mod
from lab.debs import Deb, shared_object
from lab.rpms import Rpm
from lab.util import LabError, clean_env, run

REPO_SUBDIR = "compute/cuda/repos"
NVIDIA_MODELS = ("ubuntu2204-x86_64", "debian11-x86_64", "debian12-x86_64", "rhel9-x86_64")
ARCHIVE_MODELS = (
    "ubuntu-jammy",
    "ubuntu-jammy-updates",
    "debian-bullseye",
    "debian-bookworm",
    "rocky-9",
)
EPEL_RELEASE = "epel-release-latest-9.noarch.rpm"
RPM_TOOLS = ("rpmbuild", "rpmsign", "createrepo_c", "modifyrepo_c")


def rpm_tools_missing() -> list[str]:
    """The tools the rpm repositories (el9) need that this machine lacks (apt: rpm createrepo-c)."""
    return [t for t in RPM_TOOLS if shutil.which(t) is None]


DEFAULT_DISTRO_ARCH = "ubuntu2204/x86_64"
KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
ARCHIVE_KEYRING = "archive-keyring.gpg"
# the fingerprints of the NVIDIA repositories' (throwaway) key, one a line
NVIDIA_KEY_FPR = "nvidia-key.fpr"
# the file of lab/payload a {program: ...} file spec installs (version-baked where it has a marker)
PROGRAMS = {
    "nvidia-smi": "nvidia_smi.py",
    "nvidia-persistenced": "persistenced.py",
    "nv-fabricmanager": "fabricmanager.py",
    "dkms": "dkms.py",
    "dcgmi": "dcgmi.py",
    "nv-hostengine": "nv_hostengine.py",
}


def epel_urls(base_url: str) -> tuple[str, str]:
    """(epel-release rpm, EPEL key) on the lab server at base_url: the values of the nvidia_repo
    role's nvidia_repo_el_epel_release_url / nvidia_repo_el_epel_key_url in a lab fleet."""
    return f"{base_url}/epel/{EPEL_RELEASE}", f"{base_url}/epel/RPM-GPG-KEY-EPEL-9"


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
    def key_fingerprints(self) -> list[str]:
        """The fingerprints of the key this lab's NVIDIA repositories (and cuda-keyring) carry:
        the lab's gpu_stack_repo_key_fingerprints, as a site's re-signed mirror would set it."""
        path = self.root / NVIDIA_KEY_FPR
        return path.read_text(encoding="utf-8").split() if path.exists() else []

    @property
    def repos_url(self) -> str:
        """The `gpu_stack_mirrors_nvidia_repo` value (stack `mirrors.nvidia_repo`): ends in
        /compute/cuda/repos."""
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

    @property
    def archive_key_armored(self) -> Path:
        """The same key, ASCII-armored (what rpm imports)."""
        return self.root / "archive-keyring.asc"

    @property
    def epel_release_url(self) -> str:
        """The lab's epel-release rpm (its .repo points at the lab's EPEL slice)."""
        return epel_urls(self.base_url)[0]

    @property
    def epel_key_url(self) -> str:
        return epel_urls(self.base_url)[1]


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

    def fingerprints(self) -> list[str]:
        """The key's fingerprints as gpg lists them (what gpu_stack_repo_key_fingerprints takes)."""
        listing = run(
            ["gpg", "--homedir", self.home, "--list-keys", "--with-colons"], env=self._env()
        ).stdout
        return [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]

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
    pin = spec.get("pin")
    if pin:  # /etc/apt/preferences.d/cuda-repository-pin-600: the repository's priority (600)
        deb.add_text(str(pin["path"]), str(pin["text"]))
        deb.conffiles.append(str(pin["path"]))
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
    if rpm_tools_missing():  # no rpmbuild/createrepo_c: the apt repositories only (no el9)
        nvidia_models = tuple(m for m in nvidia_models if model_mod.load(m).kind != "nvidia-rpm")
        archive_models = tuple(m for m in archive_models if model_mod.load(m).kind != "rpm-archive")
    with tempfile.TemporaryDirectory(prefix="provision-lab-repo-") as tmpname:
        tmp = Path(tmpname)
        nvidia = Signer(
            tmp / "nvidia", "cudatools (provision lab throwaway key) <cudatools@nvidia.invalid>"
        )
        try:
            (root / NVIDIA_KEY_FPR).parent.mkdir(parents=True, exist_ok=True)
            (root / NVIDIA_KEY_FPR).write_text(
                "\n".join(nvidia.fingerprints()) + "\n", encoding="utf-8"
            )
            for name in nvidia_models:
                m = model_mod.load(name)
                if m.kind == "nvidia-rpm":
                    build_rpm_repo(root, base_url, m, nvidia, cache, tmp)
                else:
                    build_nvidia_repo(root, base_url, m, nvidia, cache, tmp, label)
        finally:
            nvidia.close()
        if archive_models:
            archive = Signer(
                tmp / "archive", "provision lab archive key <archive@provision.invalid>"
            )
            try:
                for name in archive_models:
                    m = model_mod.load(name)
                    if m.kind == "rpm-archive":
                        build_rpm_archive(root, base_url, m, archive, cache, tmp)
                    else:
                        build_archive(root, m, archive, cache, tmp)
                shutil.copy2(archive.keyring, root / ARCHIVE_KEYRING)
                (root / "archive-keyring.asc").write_text(archive.armored, encoding="utf-8")
            finally:
                archive.close()
    return Repo(root=root, base_url=base_url)


# ------------------------------------------------------------------------------------ rpm
def _split_evr(version: str) -> tuple[str, str, str]:
    epoch, _, rest = version.rpartition(":")
    upstream, _, release = rest.rpartition("-")
    return epoch, upstream, release


def _rpm_rel(values: list[str]) -> list[str]:
    return list(values)


def to_rpm(pkg: model_mod.Package, repo_model: model_mod.RepoModel, cache: Path) -> Rpm:
    """Turn a model package into a buildable Rpm (facts from the model, payload from the lab)."""
    epoch, upstream, release = _split_evr(pkg.version)
    arch = {"amd64": "x86_64", "all": "noarch"}.get(pkg.arch, pkg.arch)
    rel = pkg.relations
    rpm = Rpm(
        pkg.name,
        upstream,
        release,
        f"{pkg.name} (provision lab model of {repo_model.repo})",
        epoch=epoch,
        arch=arch,
        requires=_rpm_rel(rel.get("requires", [])),
        provides=_rpm_rel(rel.get("provides", [])),
        conflicts=_rpm_rel(rel.get("conflicts", [])),
        obsoletes=_rpm_rel(rel.get("obsoletes", [])),
        config=list(pkg.conffiles),
        description=(
            f"Model: lab/repos/{repo_model.name}.yml (confidence {pkg.confidence}); "
            "the payload is a simulation."
        ),
    )
    deb = to_deb(pkg, repo_model, cache)  # the same payload machinery, then re-labelled
    rpm.files = dict(deb.files)
    rpm.symlinks = dict(deb.symlinks)
    scripts = {k: v for k, v in pkg.scripts.items()}
    if pkg.payload.get("dkms"):
        d = pkg.payload["dkms"]
        scripts["post"] = f"/usr/lib/dkms/common.postinst {d['module']} {d['version']} || :\n"
        scripts["preun"] = (
            f"dkms remove -m {d['module']} -v {d['version']} --all >/dev/null 2>&1 || :\n"
        )
    rpm.scripts = scripts
    if deb.ldconfig_trigger:
        rpm.scripts.setdefault("post", "")
        rpm.scripts["post"] = rpm.scripts["post"] + "/sbin/ldconfig || :\n"
    return rpm


def _sign_rpms(signer: Signer, paths: list[Path]) -> None:
    if not paths:
        return
    uid = run(
        ["gpg", "--homedir", signer.home, "--list-keys", "--with-colons"], env=signer._env()
    ).stdout
    fpr = next(line.split(":")[9] for line in uid.splitlines() if line.startswith("fpr:"))
    run(
        [
            "rpmsign",
            "--addsign",
            "--define",
            f"_gpg_name {fpr}",
            "--define",
            f"_gpg_path {signer.home}",
            "--define",
            "__gpg /usr/bin/gpg",
            "--define",
            "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback --passphrase ''",
            *[str(p) for p in paths],
        ],
        env=signer._env(),
        timeout=600,
    )


def _modules_yaml(repo_model: model_mod.RepoModel, built: list[Rpm]) -> str:
    spec = repo_model.data["modules"]
    name = str(spec["name"])
    docs: list[dict[str, Any]] = []
    by_branch: dict[str, list[Rpm]] = {}
    for pkg, rpm in zip(repo_model.packages, built, strict=True):
        if pkg.set_id.startswith("driver"):
            by_branch.setdefault(pkg.variables.get("B", ""), []).append(rpm)
    for i, stream in enumerate(spec["streams"]):
        branch = str(stream["branch"])
        rpms = by_branch.get(branch, [])
        kmod = str(stream["kmod"])
        other_kmods = {"kmod-nvidia-latest-dkms", "kmod-nvidia-open-dkms"} - {kmod}
        # genmodules.py lists every version of the branch's BRANCH_PKGS and OPTIONAL_PKGS
        # (all_rpms_from_pkgname) but only the newest kmod of the branch (latest_rpm_from_pkgname
        # with branch.version()): an older kmod is a non-modular package whose name an enabled
        # stream carries, so dnf's modular filtering hides it
        newest = max(
            (tuple(int(x) for x in r.version.split(".")) for r in rpms if r.name == kmod),
            default=(),
        )
        members = [
            r
            for r in rpms
            if r.name not in other_kmods
            and (r.name != kmod or tuple(int(x) for x in r.version.split(".")) == newest)
        ]
        fm = [str(x).replace("{B}", branch) for x in stream.get("fm_pkgs", spec.get("fm_pkgs", []))]
        base_pkgs = [str(x) for x in spec["branch_pkgs"]] + [kmod]
        artifacts = sorted(
            {f"{r.name}-{r.epoch or '0'}:{r.version}-{r.release}.{r.arch}" for r in members}
        )
        docs.append(
            {
                "document": "modulemd",
                "version": 2,
                "data": {
                    "name": name,
                    "stream": str(stream["stream"]),
                    "version": 20240101000000 + i,
                    "context": "3a3a3a3a",
                    "arch": "x86_64",
                    "summary": f"Nvidia driver for {stream['stream']} branch",
                    "description": "provision lab model of NVIDIA's nvidia-driver module",
                    "license": {"module": ["MIT"]},
                    "profiles": {
                        "default": {"rpms": base_pkgs},
                        "fm": {"rpms": base_pkgs + fm},
                        "ks": {"rpms": [p for p in base_pkgs if p != "cuda-drivers"]},
                    },
                    "artifacts": {"rpms": artifacts},
                },
            }
        )
    docs.append(
        {
            "document": "modulemd-defaults",
            "version": 1,
            "data": {
                "module": name,
                "stream": str(spec["default_stream"]),
                "profiles": {str(s["stream"]): ["default"] for s in spec["streams"]},
            },
        }
    )
    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False) + "...\n" for d in docs)


def _createrepo(directory: Path, modules: str | None, tmp: Path) -> None:
    run(["createrepo_c", "--quiet", "--no-database", str(directory)], timeout=600)
    if modules is not None:
        path = tmp / "modules.yaml"
        path.write_text(modules, encoding="utf-8")
        run(["modifyrepo_c", "--mdtype=modules", str(path), str(directory / "repodata")])


def build_rpm_repo(  # noqa: PLR0917
    root: Path,
    base_url: str,
    repo_model: model_mod.RepoModel,
    signer: Signer,
    cache: Path,
    tmp: Path,
) -> Path:
    out = root / REPO_SUBDIR / repo_model.repo
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    work = tmp / "build"
    work.mkdir(exist_ok=True)
    built = [to_rpm(p, repo_model, cache) for p in repo_model.packages]
    paths = []
    for rpm in built:
        paths.append(rpm.build_cached(out, work, cache.parent / "rpms"))
    # a fresh key per build: sign the copies in the tree (links would sign the cache)
    for p in paths:
        data = p.read_bytes()
        p.unlink()
        p.write_bytes(data)
    _sign_rpms(signer, paths)
    _createrepo(out, _modules_yaml(repo_model, built), tmp)
    spec = repo_model.data["repo_file"]
    (out / str(spec["gpgkey"])).write_text(signer.armored, encoding="utf-8")
    url = f"{base_url}/{REPO_SUBDIR}/{repo_model.repo}"
    (out / f"cuda-{repo_model.repo.split('/')[0]}.repo").write_text(
        f"[{spec['id']}]\nname={spec['id']}\nbaseurl={url}\nenabled=1\ngpgcheck=1\n"
        f"gpgkey={url}/{spec['gpgkey']}\n",
        encoding="utf-8",
    )
    return out


def build_rpm_archive(  # noqa: PLR0917
    root: Path,
    base_url: str,
    repo_model: model_mod.RepoModel,
    signer: Signer,
    cache: Path,
    tmp: Path,
) -> Path:
    """Rocky's repositories at <root>/rocky/9/<Component>/x86_64/os/ and EPEL at
    <root>/epel/9/Everything/x86_64/, plus the lab's epel-release rpm pointing at the latter."""
    work = tmp / "build"
    work.mkdir(exist_ok=True)
    comps = [str(c) for c in repo_model.data["components"]]
    dirs = {
        c: (
            root / "epel/9/Everything/x86_64"
            if c == "epel"
            else root / repo_model.repo / str(repo_model.data["suite"]) / c / "x86_64/os"
        )
        for c in comps
    }
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    paths: list[Path] = []
    for pkg in repo_model.packages:
        rpm = to_rpm(pkg, repo_model, cache)
        paths.append(rpm.build_cached(dirs[pkg.component], work, cache.parent / "rpms"))
    release = Rpm(
        "epel-release",
        "9",
        "7.el9",
        "Extra Packages for Enterprise Linux repository configuration (provision lab)",
        arch="noarch",
    )
    release.add_text(
        "/etc/yum.repos.d/epel.repo",
        f"[epel]\nname=Extra Packages for Enterprise Linux $releasever - $basearch\n"
        f"baseurl={base_url}/epel/$releasever/Everything/$basearch/\nenabled=1\ngpgcheck=1\n"
        "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-9\n",
    )
    release.add_text("/etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-9", signer.armored)
    (root / "epel").mkdir(exist_ok=True)
    paths.append(release.build_cached(root / "epel", work, cache.parent / "rpms"))
    for p in paths:
        data = p.read_bytes()
        p.unlink()
        p.write_bytes(data)
    _sign_rpms(signer, paths)
    (root / "epel" / release.filename).rename(root / "epel" / EPEL_RELEASE)
    (root / "epel" / "RPM-GPG-KEY-EPEL-9").write_text(signer.armored, encoding="utf-8")
    for d in dirs.values():
        _createrepo(d, None, tmp)
    return root / repo_model.repo
