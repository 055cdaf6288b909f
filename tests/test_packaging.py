"""pyproject.toml and environment.yml list the same dependencies; the CLI entry point exists;
the Makefile and CI script call the README's commands."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower()


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r): r.replace(" ", "") for r in project["dependencies"]}
    wanted |= {_name(r): r.replace(" ", "") for r in project["optional-dependencies"]["dev"]}
    text = (ROOT / "environment.yml").read_text().split("- pip:", 1)[1]  # the pip section
    env_lines = [ln.strip()[2:].strip() for ln in text.splitlines()
                 if ln.strip().startswith("- ") and not ln.strip()[2:].startswith("-e")]
    found = {_name(r): r.replace(" ", "") for r in env_lines}
    assert found == wanted


def test_console_script_and_commands():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["mgpukit"] == "mgpukit.cli:main"
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo:", "test:", "lab:"):
        assert target in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    for command in ("make demo", "make test", "jupyter lab notebooks/", "accelerate launch"):
        assert command in readme


def test_notebooks_are_stored_without_outputs():
    import json

    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        for cell in cells:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and not cell.get("execution_count"), nb.name
