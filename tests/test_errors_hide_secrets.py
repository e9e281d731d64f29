"""A file that holds a secret (a .env, /proc/self/environ, the salt secret file itself), given where a plan, scenario,
replay, benchmark, start-up log, model config or manifest goes, is refused without its contents: the error names
the file and the problem. A line is shown only from a file of the expected kind, and never the salt secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLATFORM = EXAMPLES / "platform.yaml"
FLAT = EXAMPLES / "llama-3.3-70b-h100.yaml"
SECRET = "hX7q-Vq8Zx3Kp0Lm9Wt5Rb1Yc7nD4s-Jg2"

#: Files that hold the secret, as a user's machine or a CI runner has them.
SHAPES = {
    "dotenv": f"QUOTACALC_SALT_SECRET={SECRET}\nOTHER=1\n",
    "dotenv as yaml": f"QUOTACALC_SALT_SECRET: {SECRET}\n",
    "export line": f"export QUOTACALC_SALT_SECRET='{SECRET}'\n",
    "secret file": f"{SECRET}\n",
    "environ": f"PATH=/usr/bin\0QUOTACALC_SALT_SECRET={SECRET}\0HOME=/root\0",
    "json string": json.dumps(SECRET) + "\n",
    "json object": json.dumps({"QUOTACALC_SALT_SECRET": SECRET}) + "\n",
    "secret as key": f"{SECRET}:\n",
    "secret as tag": f"key: !{SECRET} x\n",
    "csv of secrets": f"{SECRET},x\n1,2\n",
    "yaml list": f"- {SECRET}\n",
}

#: Where each kind of input goes: (file name, command line with FILE in its place).
KINDS = {
    "plan": ("plan.yaml", ["check", "FILE"]),
    "flat plan": ("plan.yaml", ["price", "FILE"]),
    "scenario": ("scenario.yaml", ["simulate", "FILE"]),
    "replay csv": ("usage.csv", ["simulate", "SCENARIO"]),
    "replay jsonl": ("usage.jsonl", ["simulate", "SCENARIO"]),
    "benchmark csv": ("bench.csv", ["calibrate", str(FLAT), "--bench", "FILE"]),
    "benchmark json": ("bench.json", ["calibrate", str(FLAT), "--bench", "FILE"]),
    "benchmark jsonl": ("bench.jsonl", ["calibrate", str(FLAT), "--bench", "FILE"]),
    "benchmark yaml": ("bench.yaml", ["calibrate", str(FLAT), "--bench", "FILE"]),
    "start-up log": ("startup.log", ["calibrate", str(FLAT), "--log", "FILE"]),
    "model config": ("config.json", ["price", "--model", "FILE", "--gpu", "h100-sxm"]),
    "manifest": (".quotacalc-manifest.json", ["generate", str(PLATFORM), "--out", "OUT", "--target", "vllm"]),
    "salt secret file": ("salt.secret", ["check", str(PLATFORM), "--salt-secret-file", "FILE"]),
}


def _replaying(tmp_path: Path, usage: Path) -> Path:
    """A scenario whose first tenant replays ``usage``."""
    document = yaml.safe_load((EXAMPLES / "simulate-named-plan.yaml").read_text(encoding="utf-8"))
    document["plan"] = str(PLATFORM)
    tenant = document["workload"]["tenants"][0]
    tenant["arrival"] = {"kind": "replay", "file": str(usage)}
    del tenant["prompt_tokens"], tenant["output_tokens"]
    path = tmp_path / "replaying.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def _run(run_cli, tmp_path: Path, kind: str, text: str) -> tuple[int, str]:
    name, command = KINDS[kind]
    folder = tmp_path / "out" if kind == "manifest" else tmp_path
    folder.mkdir(exist_ok=True)
    file = folder / name
    file.write_text(text, encoding="utf-8")
    places = {"FILE": str(file), "OUT": str(folder), "SCENARIO": str(_replaying(tmp_path, file))}
    code, out, err = run_cli(*(places.get(part, part) for part in command))
    return code, out + err


def _runs_of_the_secret(output: str, run: int = 8) -> list[str]:
    """Every ``run`` characters of the secret (any case) that the output holds."""
    lowered = output.lower()
    return [
        SECRET[start : start + run]
        for start in range(len(SECRET) - run + 1)
        if SECRET[start : start + run].lower() in lowered
    ]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_secret_file_given_as_any_input_is_refused_without_its_contents(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, shape: str
):
    """Without the secret in the environment, so that nothing but the readers' own wording keeps it out."""
    monkeypatch.delenv("QUOTACALC_SALT_SECRET", raising=False)
    code, output = _run(run_cli, tmp_path, kind, SHAPES[shape])
    if kind != "salt secret file":  # any text is a secret there: check runs with it, and must not show it
        assert code in (1, 2), output
    assert "Traceback" not in output and "internal error" not in output, output
    assert _runs_of_the_secret(output) == [], output


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("plan", f"model: {SECRET}\ngpu: h100-sxm\n"),
        ("benchmark csv", f"concurrency,prompt_tokens,output_tokens,itl_s\n1,200,20,{SECRET}\n"),
        ("replay csv", f"timestamp,tenant,prompt_tokens,output_tokens\n0,globex,{SECRET},1\n"),
        ("replay jsonl", json.dumps({"timestamp": 0, "tenant": "globex", "prompt_tokens": SECRET, "output_tokens": 1})),
    ],
)
def test_the_salt_secret_is_never_shown_even_from_a_file_of_the_expected_kind(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, text: str
):
    """A file of the right kind may have a value shown in its error (a model name, a cell): never the salt secret
    (nor a shortened or lower-cased part of it) when it is the secret quotacalc was given."""
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    code, output = _run(run_cli, tmp_path, kind, text)
    assert code in (1, 2), output
    assert "<salt secret>" in output, output
    assert _runs_of_the_secret(output, run=12) == [], output


def test_a_file_of_the_expected_kind_still_gets_its_line(run_cli, tmp_path: Path, monkeypatch):
    """What the user needs to fix a real input stays: the misspelt column of a benchmark CSV, the header of a usage
    file that names some of the columns."""
    monkeypatch.delenv("QUOTACALC_SALT_SECRET", raising=False)
    code, output = _run(run_cli, tmp_path, "benchmark csv", "concurency,prompt_tokens,output_tokens,itl_s\n1,2,3,0.1\n")
    assert code == 1 and "unknown column 'concurency' (did you mean 'concurrency'?)" in output
    code, output = _run(run_cli, tmp_path, "replay csv", "time,tenant,prompt_tokens,output_tokens\n0,globex,1,1\n")
    assert code == 1 and "it has time,tenant,prompt_tokens,output_tokens" in output
    code, output = _run(run_cli, tmp_path, "plan", "model: Llama-3.3-70B-Instruct\ngpu: h100x\n")
    assert code in (1, 2) and "'h100x'" in output
