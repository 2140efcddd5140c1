"""`pip install .` must carry every data file the packages read at run time (the step model's
profiles and MoE tile table): setuptools installs only the .py files unless pyproject.toml's
package-data names the rest, and a missing profile falls back to defaults without an error."""
import fnmatch
import os
import subprocess
import tomllib

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_package_data_covers_every_tracked_data_file_of_the_installed_packages():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        tool = tomllib.load(fh)["tool"]["setuptools"]
    roots = [p.rstrip("*") for p in tool["packages"]["find"]["include"]]
    patterns = {pkg.replace(".", "/"): globs for pkg, globs in tool.get("package-data", {}).items()}
    tracked = subprocess.run(["git", "ls-files", *roots], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    data = [f for f in tracked if not f.endswith(".py")]
    assert "generation/engine/perf/profiles/h100.json" in data
    assert "generation/engine/perf/moe_tile_configs.json" in data

    def covered(f):
        return any(f.startswith(pkg + "/") and fnmatch.fnmatch(f[len(pkg) + 1:], g)
                   for pkg, globs in patterns.items() for g in globs)
    assert [f for f in data if not covered(f)] == []
