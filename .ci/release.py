"""Build the release artefacts and prove both wheels work once installed: ``tox -e release``.

1. ``python -m build`` makes the sdist and the (pure) wheel in a temporary directory
   outside the checkout; then the compiled wheel is built from that sdist with
   ``GNSQLITE_COMPILE=1`` (setup.py). Any line of their output that says "warning"
   (any case; a compiler's ``-W...`` options on its command line aside) fails the run.
2. The artefacts must carry the dashboard's static files and ``py.typed``, the
   compiled wheel an extension module for each module setup.py compiles, and all
   must pass ``twine check --strict``.
3. For each wheel, a fresh virtualenv (outside the checkout) gets it with its
   ``[dashboard]`` extra and nothing else but their dependencies; ``pip check`` must agree.
4. ``.ci/release_smoke.py`` runs with that virtualenv's Python from an empty directory
   (no PYTHONPATH), so only the installed copy of gnsqlite can be imported; it checks
   that ``gnsqlite.compiled`` names the wheel installed.

Needs ``build`` and ``twine`` in the running Python (tox's ``release`` env installs them),
a C compiler, and the network or a pip index for the wheels' dependencies and the
compiled build's (mypy). Exits 0 on success;
otherwise prints ``release FAILED: <what>`` and exits 1, keeping the temporary
directory for a look.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC_DIR = ROOT / "gnsqlite" / "dashboard" / "static"
STATIC = sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file())
SHIPPED = ["gnsqlite/py.typed", *(f"gnsqlite/dashboard/static/{name}" for name in STATIC)]


class ReleaseFailure(Exception):
    """A step failed; the message says which and what was seen."""


def step(title: str) -> float:
    print(f"== release: {title}", flush=True)
    return time.monotonic()


def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run ``argv``, echo its output, fail on a non-zero status; returns the output."""
    result = subprocess.run(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    print(result.stdout, end="", flush=True)
    if result.returncode != 0:
        raise ReleaseFailure(f"{' '.join(argv)} exited with status {result.returncode}")
    return result.stdout


def clean_env(*, drop: tuple[str, ...]) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("GNSQLITE_")}


def compiled_modules() -> list[str]:
    """setup.py's COMPILED: the modules the compiled wheel must carry compiled."""
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if not isinstance(node, ast.Assign):
            continue
        if [getattr(t, "id", None) for t in node.targets] == ["COMPILED"]:
            modules: list[str] = ast.literal_eval(node.value)
            return modules
    raise ReleaseFailure("setup.py has no COMPILED list")


def check_warnings(output: str) -> None:
    # A compiler's command line names -W options ("-Wno-unknown-warning-option"): not warnings.
    lines = output.splitlines()
    warnings = [line for line in lines if re.search("warning", re.sub(r"\s-W\S*", " ", line), re.I)]
    if warnings:
        raise ReleaseFailure("the build printed warnings:\n  " + "\n  ".join(warnings))


def build(dist: Path) -> tuple[Path, Path]:
    # PYTHONDONTWRITEBYTECODE makes setuptools print "warning: byte-compiling is disabled";
    # that says nothing about the package, so the build runs without it.
    env = clean_env(drop=("PYTHONDONTWRITEBYTECODE", "PYTHONPATH"))
    output = run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], env=env)
    check_warnings(output)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise ReleaseFailure(f"expected one wheel and one sdist in {dist}, found {wheels + sdists}")
    return wheels[0], sdists[0]


def build_compiled(sdist: Path, dist: Path) -> Path:
    """The compiled wheel, built from the sdist (so the sdist is enough to build it)."""
    source = dist.parent / "compiled-source"
    with tarfile.open(sdist) as tf:
        tf.extractall(source, filter="data")
    env = clean_env(drop=("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")) | {"GNSQLITE_COMPILE": "1"}
    tree = source / sdist.name.removesuffix(".tar.gz")
    argv = [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(tree)]
    check_warnings(run(argv, env=env))
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1 or wheels[0].name.endswith("-none-any.whl"):
        raise ReleaseFailure(f"expected one platform wheel in {dist}, found {wheels}")
    return wheels[0]


def check_compiled_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    missing = [name for name in SHIPPED if name not in names]
    for module in [*compiled_modules(), "gnsqlite__mypyc.py"]:
        stem = module.removesuffix(".py") + "."
        if not any(n.startswith(stem) and n.endswith((".so", ".pyd")) for n in names):
            missing.append(f"{stem}*.so")
    if missing:
        raise ReleaseFailure(f"{wheel.name} lacks {', '.join(missing)}")
    compiled = ", ".join(compiled_modules())
    print(f"ok: {wheel.name} carries {', '.join(SHIPPED)} and the compiled {compiled}")


def install_and_smoke(tmp: Path, wheel: Path, build: str) -> None:
    """Install ``wheel`` with [dashboard] in a fresh venv and smoke-test it from outside."""
    t = step(f"install {wheel.name}[dashboard] into a fresh venv at {tmp / f'venv-{build}'}")
    venv = tmp / f"venv-{build}"
    env = clean_env(drop=("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"))
    run([sys.executable, "-m", "venv", str(venv)], env=env)
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--quiet", f"{wheel}[dashboard]"], cwd=tmp, env=env)
    run([python, "-m", "pip", "check"], cwd=tmp, env=env)
    run([python, "-m", "pip", "list", "--format=freeze"], cwd=tmp, env=env)
    print(f"ok: installed ({time.monotonic() - t:.1f} s)")

    step(f"smoke test of the {build} wheel from outside the checkout")
    version = wheel.name.split("-")[1]
    workdir = tmp / f"cwd-{build}"
    workdir.mkdir()
    run([python, str(ROOT / ".ci" / "release_smoke.py"), version, build], cwd=workdir, env=env)


def check_contents(wheel: Path, sdist: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
    with tarfile.open(sdist) as tf:
        prefix = sdist.name.removesuffix(".tar.gz") + "/"
        in_sdist = {name.removeprefix(prefix) for name in tf.getnames()}
    for artefact, names in ((wheel.name, in_wheel), (sdist.name, in_sdist)):
        missing = [name for name in SHIPPED if name not in names]
        if missing:
            raise ReleaseFailure(f"{artefact} lacks {', '.join(missing)}")
    print(f"ok: both artefacts carry {', '.join(SHIPPED)}")


def main() -> int:
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="gnsqlite-release-"))
    try:
        t = step(f"build sdist and wheel into {tmp / 'dist'}")
        wheel, sdist = build(tmp / "dist")
        took = time.monotonic() - t
        print(f"ok: built {wheel.name} and {sdist.name}, no warnings ({took:.1f} s)")
        check_contents(wheel, sdist)

        t = step(f"build the compiled wheel (GNSQLITE_COMPILE=1) from {sdist.name}")
        compiled = build_compiled(sdist, tmp / "dist-compiled")
        print(f"ok: built {compiled.name}, no warnings ({time.monotonic() - t:.1f} s)")
        check_compiled_contents(compiled)

        step("twine check --strict")
        argv = [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)]
        run([*argv, str(compiled)])

        install_and_smoke(tmp, wheel, "pure")
        install_and_smoke(tmp, compiled, "compiled")
    except ReleaseFailure as exc:
        print(f"release FAILED: {exc}\n(kept {tmp} for a look)", file=sys.stderr)
        return 1
    shutil.rmtree(tmp)
    print(f"release: all checks passed in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
