"""The host's effective pip configuration, rewritten for the image build (used by run.sh).

pip inside the image build must reach the same package index as the host,
through the same proxy and CA certificate. This reads what `pip config list`
reports on the host (configuration files and PIP_* variables, later ones
overriding earlier ones, as pip applies them) and writes into OUT_DIR:

* pip.conf: the same settings, with `cert` pointing at /run/secrets/ca.crt where
  the Containerfile mounts the `ca.crt` build secret. Values that name local
  paths (file:// indexes, find-links folders, constraint files) are left out:
  they are this machine's mirrors and caps, not the registry, and do not exist in
  the build; the network indexes (index-url, extra-index-url, trusted-host, proxy)
  are kept as they are.
* ca.crt: a copy of the host's CA bundle (pip's `cert`, else SSL_CERT_FILE, else
  the system bundle), passed as that secret.

Both go to `podman build --secret`, so neither lands in a layer of the image.
The settings left out are printed on stderr.

Usage: python host_pip_config.py OUT_DIR   (run with the python of the host's venv)
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

SECRET_CERT = "/run/secrets/ca.crt"
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def effective_settings() -> dict[tuple[str, str], str]:
    """(section, key) -> value, as pip applies them (environment variables count as [global])."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], check=True, capture_output=True, text=True
    ).stdout
    settings: dict[tuple[str, str], str] = {}
    for line in out.splitlines():
        if "=" not in line:
            continue
        name, value = line.split("=", 1)
        section, _, key = name.rpartition(".")
        section = "global" if section in ("", ":env:") else section
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        settings[(section, key)] = value
    return settings


def is_local(token: str) -> bool:
    """A file:// URL or an absolute path: something on this machine's disk."""
    return token.startswith("file:") or token.startswith("/")


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = effective_settings()
    cert = settings.pop(("global", "cert"), None) or os.environ.get("SSL_CERT_FILE") or SYSTEM_BUNDLE
    parser = configparser.ConfigParser(interpolation=None)
    parser.add_section("global")
    for (section, key), value in sorted(settings.items()):
        kept = [t for t in value.split() if not is_local(t)]
        dropped = [t for t in value.split() if is_local(t)]
        if dropped:
            print(f"host pip setting {section}.{key}: left out local {' '.join(dropped)}", file=sys.stderr)
        if not kept and dropped:
            continue
        if not parser.has_section(section):
            parser.add_section(section)
        parser.set(section, key, " ".join(kept) if dropped else value)
    if os.path.isfile(cert):
        shutil.copyfile(cert, out / "ca.crt")
        parser.set("global", "cert", SECRET_CERT)
    with open(out / "pip.conf", "w") as fh:
        parser.write(fh)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
