"""The README's first commands stay true: .ci/run runs exactly the README's test command."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [line.strip() for line in readme[:12] if line.startswith("    ")]
    assert len(commands) >= 2, "the README must open with the two commands"
    assert "odradek broker start" in commands[0]
    test_command = commands[1]
    assert "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in [line.strip() for line in ci], ".ci/run must run the README's test command verbatim"
