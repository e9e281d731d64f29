"""A real enforcement stack for the tests: ``quotacalc emulate`` as the engine, a real LiteLLM proxy loading the config
``quotacalc generate --target litellm`` writes (with quotacalc's plugin), and a real ``redis-server`` where asked.
Each is started on a free loopback port and stopped by its fixture."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent

#: One pool of one replica of the priced Llama 3.3 70B deployment; small tiers so that limits bind in seconds.
PLAN = """\
deployment:
  model: meta-llama/Llama-3.3-70B-Instruct
  gpu: h100-sxm
  tp: 4
  weight_dtype: fp8
  kv_dtype: bf16
  kv_pool_tokens: 646503
pools:
  - name: std
    replicas: 1
    deployment: {batch: 64, context: 2048}
tiers:
  - {name: gold, max_context_tokens: 4096, kv_cap_tokens_per_replica: 60000, max_concurrent_sequences: 16,
     max_output_tokens: 1024, priority: 0, burst_s: 60, cached_prompt_weight: 0.1}
  - {name: bronze, max_context_tokens: 2048, kv_cap_tokens_per_replica: 30000, max_concurrent_sequences: 8,
     max_output_tokens: 512, priority: 2, burst_s: 60, cached_prompt_weight: 0.1}
tenants:
  - {name: alpha, tier: gold, pool: std, units_per_s: 2000}
  - {name: beta, tier: bronze, pool: std, units_per_s: 2000}
  - {name: gamma, tier: bronze, pool: std, units_per_s: 5000, cache_isolation: shared}
"""
SECRET = "quotacalc-enforce-tests-secret-0123456789"
SPEED = 20.0
ENV_BASE = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "DISABLE_SCHEMA_UPDATE": "True",
    "LITELLM_TELEMETRY": "False",
    "NO_PROXY": "127.0.0.1,localhost",
    "VLLM_API_KEY": "unused-by-the-emulator",
    # A stream that ends without usage (an engine failure, a disconnect, a quota stop) makes LiteLLM count its tokens
    # with a Hugging Face tokenizer it downloads; offline, huggingface_hub retries for about 23 s inside the proxy's
    # event loop, stalling every request in flight. Offline mode fails at once and LiteLLM falls back to tiktoken. The
    # generated config sets it too (--litellm-tokenizer); Proxy(hf_offline=False) leaves it to the config alone.
    "HF_HUB_OFFLINE": "1",
}


#: Ports this process handed out: two servers started together must not get the same one (the first has not bound
#: it yet when the second asks).
_PORTS_GIVEN: set[int] = set()


def free_port() -> int:
    """A loopback port free now. Another process may still take it before our server binds it: a server whose bind
    fails is started again on another port (``Proxy``, ``RedisServer``)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port


def wait_until(condition: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.1) -> Any:
    """Polls ``condition`` until it returns something true, at most ``timeout_s``; returns its last value. For what a
    server does after it answered (an engine abort, a record), which a loaded machine delays."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval_s)


def generate(directory: Path, plan_text: str = PLAN, *options: str) -> Path:
    """``quotacalc generate --target litellm`` of ``plan_text`` into ``directory``, with ``options`` (target options
    such as ``--litellm-tokenizer tiktoken``); returns the litellm folder."""
    plan = directory / "plan.yaml"
    plan.write_text(plan_text, encoding="utf-8")
    secret = directory / "secret"
    secret.write_text(SECRET, encoding="utf-8")
    secret.chmod(0o600)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "generate", str(plan),
               "--out", str(directory / "out"), "--target", "litellm", "--salt-secret-file", str(secret),
               *options]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return directory / "out" / "litellm"


def edit_policy(folder: Path, **tenants: dict[str, Any]) -> dict[str, Any]:
    """Change tenants' fields in the generated policy.json (e.g. a small bucket); returns the policy."""
    path = folder / "policy.json"
    policy = json.loads(path.read_text(encoding="utf-8"))
    for tenant in policy["tenants"]:
        tenant.update(tenants.get(tenant["name"], {}))
    path.write_text(json.dumps(policy, indent=1), encoding="utf-8")
    return policy


def edit_settings(folder: Path, **settings: Any) -> None:
    path = folder / "enforce.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document.update(settings)
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")


class Emulator:
    """``quotacalc emulate`` of the plan's pool; on ``port`` where the plan names it (a replica's address), else on one
    the system picks."""

    def __init__(self, plan: Path, *args: str, port: int = 0, speed: float = SPEED) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "emulate", str(plan),
                   "--port", str(port), "--speed", str(speed), *args]  # fmt: skip
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        deadline = time.monotonic() + 60
        port = None
        lines = []
        while port is None and time.monotonic() < deadline:
            line = self.process.stderr.readline()  # type: ignore[union-attr]
            if not line:
                break
            lines.append(line)
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        if port is None:
            self.stop()
            raise AssertionError(f"the emulator did not start: {''.join(lines)}")
        self.url = f"http://127.0.0.1:{port}"

    def received(self) -> list[dict[str, Any]]:
        return httpx.get(self.url + "/admin/received", timeout=10).json()["received"]

    def metric(self, name: str) -> float:
        """A metric summed over its replicas (and labels)."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and line[len(name)] in "{ "
        )

    def fail(self) -> None:
        httpx.post(self.url + "/admin/fail", timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr:
            self.process.stderr.close()


def litellm_executable() -> str | None:
    return shutil.which("litellm", path=str(Path(sys.executable).parent)) or shutil.which("litellm")


class Proxy:
    """A LiteLLM proxy running the generated config (the plugin loaded from the folder), the engine at ``engine``."""

    def __init__(
        self,
        folder: Path,
        engine: str | None,
        *,
        env: dict[str, str] | None = None,
        port: int | None = None,
        engines: dict[str, str] | None = None,
        wait: bool = True,
        hf_offline: bool = True,
    ):
        """``engine`` None: config.yaml's api_bases are used as generated (the plan gave the engines' addresses);
        else every deployment's is ``engine``, or its engine in ``engines`` by its ``model_info.id`` (one replica of
        a pool each). ``wait=False``: return once the process is started; ``wait_ready`` then waits for it
        (several start together). ``hf_offline=False``: the proxy's environment does not set ``HF_HUB_OFFLINE`` (nor
        passes on this process's), so only what the generated config does keeps it from downloading a tokenizer."""
        if engine is not None:
            config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
            for deployment in config["model_list"]:
                deployment_id = (deployment.get("model_info") or {}).get("id")
                deployment["litellm_params"]["api_base"] = (engines or {}).get(deployment_id, engine) + "/v1"
            (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        self.folder = folder
        self.master_key = "sk-quotacalc-enforce-tests"
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full = {**os.environ, **ENV_BASE, "LITELLM_MASTER_KEY": self.master_key, "PYTHONPATH": str(ROOT), **(env or {})}
        full.pop("DATABASE_URL", None)
        if not hf_offline:
            for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
                if name not in (env or {}):
                    full.pop(name, None)
        self.env = full
        self.log_path = folder / f"proxy-{self.port}.log"
        self.start(wait=wait)

    def start(self, wait: bool = True) -> None:
        executable = litellm_executable()
        assert executable is not None
        self.log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [executable, "--config", str(self.folder / "config.yaml"), "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.folder,
        )
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 180
        while True:
            if self.process.poll() is not None and "address already in use" in self.tail()[-1500:].lower():
                # Another process took the port between free_port and the bind: start again on another one.
                self.log.close()
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
                self.start(wait=False)
            assert self.process.poll() is None, self.tail()
            try:
                if httpx.get(self.url + "/health/liveliness", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "proxy not healthy in 180 s:\n" + self.tail()
            time.sleep(0.5)

    def tail(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]

    def headers(self, tenant: str | None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.master_key}"}
        if tenant is not None:
            headers["x-tenant-id"] = tenant
        return headers

    def chat(self, tenant: str | None, body: dict[str, Any], timeout: float = 60) -> httpx.Response:
        return httpx.post(self.url + "/v1/chat/completions", json=body, headers=self.headers(tenant), timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=20)
        self.log.close()


class RedisServer:
    """Debian's redis-server on a free loopback port, without persistence."""

    def __init__(self, port: int | None = None, persist_dir: Path | None = None, appendfsync: str = "always") -> None:
        """``persist_dir``: keep the data there (an append-only file, fsync'ed as ``appendfsync`` says: ``always``, or
        ``everysec``, which a graceful stop also fsyncs at shutdown), so a restart keeps the buckets."""
        self.persist_dir = persist_dir
        self.appendfsync = appendfsync
        executable = shutil.which("redis-server")
        assert executable is not None
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.executable = executable
        for _ in range(3):
            if self.start(first=True):
                return
            # Another process took the port between free_port and the bind: start again on another one.
            self.port = free_port()
            self.url = f"redis://127.0.0.1:{self.port}/0"
        raise AssertionError("redis-server did not start on any of three ports")

    def start(self, first: bool = False) -> bool:
        """Starts the server on its port; returns whether it did (only ``first`` may fail, to take another port:
        a restart keeps the port its clients know)."""
        persistence = ["--appendonly", "no"]
        if self.persist_dir is not None:
            persistence = ["--appendonly", "yes", "--appendfsync", self.appendfsync, "--dir", str(self.persist_dir)]
        self.process = subprocess.Popen(
            [self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *persistence],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        deadline = time.monotonic() + 20
        while True:
            # Ours exited (its port taken): a PING would reach whichever server holds the port.
            if self.process.poll() is not None:
                assert first, f"redis-server did not start again on port {self.port} (exit {self.process.returncode})"
                return False
            try:
                redis.Redis.from_url(self.url).ping()
                return True
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def pause(self, seconds: float) -> None:
        """Stops the server (SIGSTOP) for ``seconds``, then lets it go on: a Redis too slow to answer within its
        clients' timeout, which then runs the scripts they gave up on."""
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(self.process.pid, signal.SIGCONT)


def records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "usage.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def stream_chat(proxy: Proxy, tenant: str, body: dict[str, Any], timeout: float = 60) -> tuple[int, list[dict]]:
    """A streamed chat completion: (status, the JSON events)."""
    events: list[dict] = []
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", json={**body, "stream": True}, headers=proxy.headers(tenant),
        timeout=timeout,
    ) as response:  # fmt: skip
        if response.status_code != 200:
            response.read()
            return response.status_code, [response.json()]
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line.removeprefix("data: ")))
    return 200, events


def in_process_enforcer(folder: Path, redis_url: str | None = None):
    """The plugin as LiteLLM loads it, driven in this process (no proxy app to mount its metrics on); ``redis_url``:
    its store's Redis, for ``state: redis``."""
    from quotacalc.enforce.litellm import QuotacalcEnforcer

    if redis_url is not None:
        os.environ["QUOTACALC_REDIS_URL"] = redis_url
    try:
        enforcer = QuotacalcEnforcer(folder / "enforce.json")
    finally:
        os.environ.pop("QUOTACALC_REDIS_URL", None)
    enforcer._mounted = True
    return enforcer
