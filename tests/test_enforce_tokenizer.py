"""The tokenizer a generated LiteLLM proxy counts with (``--litellm-tokenizer``, quotacalc/enforce/tokenizer.py): never
a download while it serves, the engine's tokenizer where the host's Hugging Face cache has it.

A stream that ends without the engine's usage makes LiteLLM count its tokens with a Hugging Face tokenizer it would
download inside the proxy's event loop; on a host without internet huggingface_hub retries for about 23 s
(1 + 2 + 4 + 8 + 8 s), stalling every request in flight. The real-proxy test runs the config as generated, without
the HF_HUB_OFFLINE the other proxy tests set, and with an empty Hugging Face cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from enforce_stack import ROOT, Emulator, Proxy, edit_settings, generate, litellm_executable, records, wait_until
from policy_samples import platform_policy, sample_salts

from quotacalc.exporters import litellm as litellm_exporter
from quotacalc.exporters.base import ExportOptions


def _files(enforce: str, tokenizer: str | None) -> dict[str, str]:
    policy = platform_policy()
    chosen = {"litellm_enforce": enforce} | ({"litellm_tokenizer": tokenizer} if tokenizer else {})
    result = litellm_exporter.export(policy, sample_salts(policy), ExportOptions(**chosen))
    return {f.path.removeprefix("litellm/"): f.text for f in result.files}


@pytest.mark.parametrize("enforce", ["plugin", "builtin"])
def test_the_default_config_reads_tokenizers_from_the_local_cache_only(enforce):
    files = _files(enforce, None)
    config = yaml.safe_load(files["config.yaml"])
    assert config["environment_variables"] == {"HF_HUB_OFFLINE": "1"}
    assert "disable_hf_tokenizer_download" not in config["litellm_settings"]
    if enforce == "plugin":
        assert json.loads(files["enforce.json"])["tokenizer"] == "local"
        assert config["litellm_settings"]["callbacks"] == ["quotacalc_enforce.enforcer"]


@pytest.mark.parametrize("enforce", ["plugin", "builtin"])
def test_tiktoken_disables_the_hugging_face_tokenizers(enforce):
    files = _files(enforce, "tiktoken")
    config = yaml.safe_load(files["config.yaml"])
    assert config["litellm_settings"]["disable_hf_tokenizer_download"] is True
    assert "environment_variables" not in config
    if enforce == "plugin":
        assert json.loads(files["enforce.json"])["tokenizer"] == "tiktoken"


@pytest.mark.litellm_proxy
@pytest.mark.parametrize("tokenizer", ["local", "tiktoken"])
def test_the_tokenizer_settings_pass_litellms_config_model(tokenizer, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    types = pytest.importorskip("litellm.proxy._types", reason="litellm[proxy] not installed (extra litellm-proxy)")
    import litellm

    for enforce in ("plugin", "builtin"):
        config = yaml.safe_load(_files(enforce, tokenizer)["config.yaml"])
        types.ConfigYAML.model_validate(config)
        # The proxy sets each litellm_settings key as an attribute of litellm (an unknown one is ignored).
        assert all(hasattr(litellm, key) for key in config["litellm_settings"] if key != "callbacks")


def test_an_unknown_tokenizer_is_one_line_naming_the_flag(run_cli, tmp_path):
    code, _out, err = run_cli(
        "generate", ROOT / "examples" / "platform.yaml", "--out", tmp_path / "out", "--target", "litellm",
        "--litellm-tokenizer", "hf", "--salt-secret-file", ROOT / "examples" / "platform.secret",
    )  # fmt: skip
    assert code != 0
    said = err.strip()
    assert "--litellm-tokenizer" in said and "local, tiktoken" in said and "Traceback" not in said, said


#: A tiny word-level tokenizer (one token a word), saved where huggingface_hub's cache keeps the tokenizer LiteLLM
#: picks for a Llama 3 model: counts by it differ from tiktoken's on long made-up words.
_COUNT = """
import json, sys
from quotacalc.enforce.tokenizer import engine_tokenizer, keep_offline
import litellm
keep_offline("local")
tokenizer = engine_tokenizer("meta-llama/Llama-3.3-70B-Instruct")
text = "supercalifragilisticexpialidocious " * 5
print(json.dumps({
    "type": tokenizer and tokenizer["type"],
    "counted": litellm.token_counter(model="std", custom_tokenizer=tokenizer, text=text),
    "tiktoken": litellm.token_counter(model="std", text=text),
}))
"""


def _count_in(hf_home: Path) -> dict:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HF_HOME": str(hf_home),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HOME": str(hf_home)}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _COUNT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_admission_counts_with_the_engines_tokenizer_where_the_cache_has_it_else_tiktoken(tmp_path):
    pytest.importorskip("litellm", reason="the litellm extra is not installed")
    from tokenizers import Tokenizer, models, pre_tokenizers

    empty = _count_in(tmp_path / "empty")
    assert empty["type"] is None
    assert empty["counted"] == empty["tiktoken"] > 5

    snapshot = tmp_path / "cached" / "hub" / "models--Xenova--llama-3-tokenizer"
    revision = "0" * 40
    (snapshot / "refs").mkdir(parents=True)
    (snapshot / "refs" / "main").write_text(revision, encoding="utf-8")
    (snapshot / "snapshots" / revision).mkdir(parents=True)
    words = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    words.save(str(snapshot / "snapshots" / revision / "tokenizer.json"))
    cached = _count_in(tmp_path / "cached")
    assert cached["type"] == "huggingface_tokenizer"
    # Five words, five tokens: the cached tokenizer counted, not tiktoken.
    assert cached["counted"] == 5 != cached["tiktoken"]


# -- a real proxy, as generated, offline and without HF_HUB_OFFLINE ------------------------------------------------

#: A request's latency bound: far below the stall (23 s a stream, and two streams end without usage), far above a short
#: completion on a loaded 2-core machine (under 2 s).
STALL_BOUND_S = 12.0


def _body(max_tokens: int, **extra) -> dict:
    return {"model": "std", "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens, **extra}


def _read_tokens(proxy: Proxy, tenant: str, then, tokens: int = 3) -> None:
    """Stream a long response; after ``tokens`` content chunks call ``then(response)``; returns when the stream ends
    (or ``then`` left it)."""
    import httpx

    got = 0
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", headers=proxy.headers(tenant), timeout=60,
                      json=_body(1000, ignore_eos=True, stream=True)) as response:  # fmt: skip
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[len("data: ") :])
                got += sum(1 for c in chunk.get("choices") or [] if (c.get("delta") or {}).get("content"))
            if got >= tokens:
                if then():
                    return
                tokens = 10**9


@pytest.mark.litellm_proxy
def test_streams_that_end_without_usage_do_not_stall_a_concurrent_request(tmp_path):
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    folder = generate(tmp_path)
    # The tests name the tenant in a header; the tokenizer settings stay as generated.
    edit_settings(folder, tenant_from="header")
    emulator = Emulator(tmp_path / "plan.yaml")
    try:
        proxy = Proxy(folder, emulator.url, hf_offline=False, env={"HF_HOME": str(tmp_path / "hf-cache")})
    except BaseException:
        emulator.stop()
        raise
    try:
        assert "HF_HUB_OFFLINE" not in proxy.env
        assert proxy.chat("alpha", _body(2)).status_code == 200
        # Short requests of another tenant, one after another, all the while two streams end without usage.
        latencies: list[float] = []
        statuses: list[int] = []
        done = threading.Event()

        def probe() -> None:
            while not done.is_set():
                began = time.monotonic()
                statuses.append(proxy.chat("gamma", _body(4), timeout=120).status_code)
                latencies.append(time.monotonic() - began)

        prober = threading.Thread(target=probe)
        prober.start()
        try:
            # A client that disconnects after three tokens, and a stream the engine fails after three.
            _read_tokens(proxy, "alpha", lambda: True)
            _read_tokens(proxy, "beta", lambda: emulator.fail() or False)
            # LiteLLM counts a stream's tokens once it ended: the probes go on past that.
            time.sleep(6)
        finally:
            done.set()
            prober.join(timeout=180)
        # A failure may catch a probe in flight at the engine (emulate fails every sequence it holds).
        assert statuses.count(200) >= len(statuses) - 1 and len(latencies) >= 3, statuses
        assert max(latencies) < STALL_BOUND_S, (latencies, proxy.tail())
        ended = wait_until(
            lambda: {r["outcome"] for r in records(folder) if r["tenant"] in ("alpha", "beta")} >= {"disconnect",
                                                                                                  "engine_error"}
        )  # fmt: skip
        assert ended, records(folder)
        # huggingface_hub's backoff logs "Retrying in 1s [Retry 1/5]" before each retry of a download.
        log = proxy.log_path.read_text(encoding="utf-8", errors="replace")
        assert "[Retry 1/5]" not in log, log[-4000:]
    finally:
        proxy.stop()
        emulator.stop()
