"""SGLang's KV pool (quotacalc/catalog/engines.yaml, core/memory.py): SGLang gives weights and KV a static fraction of
the GPU's memory (mem_fraction_static) and keeps activations and CUDA graphs outside it, so its pool is that share
less the weights and a fixed reserve, not vLLM's share less a profiling peak. Its default fraction follows SGLang's
own rule; both are checked by hand from SGLang's source and against its start-up logs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from quotacalc import Deployment, price, resolve
from quotacalc.catalog.engines import load_engine_catalog, parse_engine_catalog
from quotacalc.catalog.gpus import load_gpu_catalog
from quotacalc.core.deployment import GIB
from quotacalc.errors import QuotacalcError

LLAMA8 = "Llama-3.1-8B-Instruct"
#: Llama 3.1 8B's parameters (8,030,261,248: models/Llama-3.1-8B-Instruct) at 2 B each.
LLAMA8_BF16_BYTES = 8_030_261_248 * 2
MEASUREMENTS = Path(__file__).parent / "data" / "measurements" / "kv_pool.yaml"


def rule():
    return load_engine_catalog().get("sglang").static_memory_fraction


# SGLang 0.5's default mem_fraction_static by hand from python/sglang/srt/server_args.py
# (ServerArgs._handle_gpu_memory_settings): reserved MiB = 512 + 1.5 × max(chunked_prefill_size, 2048)
# + 2 × cuda_graph_max_bs + TP × 1024 / 8, at least 10,240 on GPUs above 60 GiB; round((memory − reserved) / memory, 3).
# The GPU's memory in MiB is the catalog's (CUDA's total).
@pytest.mark.parametrize(
    ("gpu", "tp", "reserved_mib", "fraction"),
    [
        # 81,090.125 MiB; chunk 8,192, graphs 256 below TP 4: 512 + 12,288 + 512 + 128 = 13,440.
        ("h100-sxm", 1, 13_440, 0.834),
        # 143,156 MiB at TP 8: graphs 512: 512 + 12,288 + 1,024 + 1,024 = 14,848 -> 128,308 / 143,156 = 0.8963.
        ("h200", 8, 14_848, 0.896),
        # 45,373 MiB (below 60 GiB: chunk 4,096, graphs 32, no floor): 512 + 6,144 + 64 + 128 = 6,848 -> 0.8491.
        ("l40s", 1, 6_848, 0.849),
        # 22,518 MiB (below 35 GiB: chunk 2,048, graphs 24): 512 + 3,072 + 48 + 128 = 3,760 -> 0.8330.
        ("l4", 1, 3_760, 0.833),
        # The same L4 at TP 4: graphs 80: 512 + 3,072 + 160 + 512 = 4,256 -> 18,262 / 22,518 = 0.8110.
        ("l4", 4, 4_256, 0.811),
        # 182,631 MiB at TP 8 (chunk 16,384, graphs 512): 512 + 24,576 + 1,024 + 1,024 = 27,136 -> 0.8514.
        ("b200", 8, 27_136, 0.851),
    ],
)
def test_sglangs_default_memory_share_by_hand(gpu, tp, reserved_mib, fraction):
    from quotacalc.core.memory import memory_utilization

    spec = load_gpu_catalog().get(gpu)
    tokens = load_engine_catalog().get("sglang").default_max_num_batched_tokens(spec.memory_bytes)
    assert rule().reserved_mib(spec.memory_bytes, tp, tokens) == reserved_mib
    assert memory_utilization(Deployment(model=LLAMA8, gpu=gpu, tp=tp, engine="sglang"), spec) == (
        fraction,
        "sglang default",
    )


def test_sglangs_rule_reproduces_the_fraction_its_docs_ci_printed():
    """SGLang reads the GPU's memory from nvidia-smi (81,559 MiB on an H100); its docs CI printed
    mem_fraction_static=0.835 there (reserved 13,440 MiB: 68,119 / 81,559 = 0.8352). quotacalc's catalog holds CUDA's
    total (81,090 MiB), one thousandth lower: 0.834."""
    assert rule().default_fraction(81_559 * 2**20, 1, 8192) == 0.835


def test_an_explicit_share_wins_and_vllm_keeps_0_9():
    spec = load_gpu_catalog().get("h100-sxm")
    from quotacalc.core.memory import memory_utilization

    assert memory_utilization(Deployment(model=LLAMA8, gpu="h100-sxm"), spec) == (0.9, "vLLM default")
    given = Deployment(model=LLAMA8, gpu="h100-sxm", engine="sglang", memory_utilization=0.88)
    assert memory_utilization(given, spec) == (0.88, "given")
    # An engine the catalog does not know (a name from outside Deployment's validation) keeps vLLM's share.
    from quotacalc.core.memory import default_memory_utilization

    assert default_memory_utilization("no-such-engine", spec, 1, 8192) == (0.9, "vLLM default")
    # A token budget of its own moves SGLang's default share (1.5 MiB a token): 16,384 tokens -> 25,728 MiB reserved.
    bigger = Deployment(model=LLAMA8, gpu="h100-sxm", engine="sglang", max_num_batched_tokens=16384)
    assert memory_utilization(bigger, spec)[0] == round((81_090.125 - 25_728) / 81_090.125, 3) == 0.683


@pytest.mark.parametrize("tp", [1, 2])
def test_sglangs_pool_is_its_share_less_weights_and_fixed_buffers_by_hand(tp):
    """KV per GPU = fraction × HBM − weights per GPU − (reserve_base + per_doubling × log2 TP): no activation or
    sampler peak, which SGLang keeps outside its share."""
    defaults = load_engine_catalog().get("sglang").defaults
    result = price(resolve(Deployment(model=LLAMA8, gpu="h100-sxm", tp=tp, engine="sglang", memory_utilization=0.88)))
    reserve = (defaults.reserve_base_gib + defaults.reserve_per_tp_doubling_gib * math.log2(tp)) * GIB
    expected = 0.88 * 85_029_158_912 - LLAMA8_BF16_BYTES / tp - reserve
    assert result.runtime_reserve_bytes_per_gpu == pytest.approx(reserve, rel=1e-12)
    assert result.kv_pool_bytes_per_gpu == pytest.approx(expected, rel=1e-12)
    # 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 131,072 B a token on one GPU; half of it per GPU at TP 2.
    assert result.kv_pool_tokens == math.floor(expected / (131_072 / tp))
    # vLLM's accounting of the same share subtracts a profiling peak on top: a smaller pool.
    vllm = price(resolve(Deployment(model=LLAMA8, gpu="h100-sxm", tp=tp, memory_utilization=0.88)))
    assert vllm.kv_pool_tokens < result.kv_pool_tokens


def sglang_points():
    points = yaml.safe_load(MEASUREMENTS.read_text(encoding="utf-8"))["points"]
    return [point for point in points if point.get("engine") == "sglang"]


@pytest.mark.parametrize("point", sglang_points(), ids=lambda point: point["id"])
def test_sglangs_pool_matches_its_start_up_logs(point):
    """Each SGLang log's 'KV Cache is allocated. #tokens' (or max_total_num_tokens) at the log's fraction: within 1% on
    the three TP 1 logs the reserve was fitted on, within 5% on the held-out TP 4 one (+3.9%)."""
    deployment = Deployment(
        model=point["model"],
        gpu=point["gpu"],
        tp=point["tp"],
        weight_dtype=point["weight_dtype"],
        kv_dtype=point["kv_dtype"],
        engine="sglang",
        memory_utilization=point["memory_utilization"],
    )
    error = price(resolve(deployment)).kv_pool_tokens / point["kv_pool_tokens"] - 1
    assert abs(error) < (0.05 if point.get("held_out") else 0.01), error


def test_the_explanation_shows_the_default_share_term_by_term():
    steps = {
        step.name: step for step in price(resolve(Deployment(model=LLAMA8, gpu="h100-sxm", engine="sglang"))).steps
    }
    pool = steps["kv_pool_bytes_estimate_per_gpu"]
    assert pool.substituted.startswith("0.834 (sglang default) × 85,029,158,912 − 16,060,522,496 − ")
    assert "512 + 1.5 × max(8,192 (sglang default), 2,048) + 2 × 256 (CUDA-graph batch) + 128 × 1 (TP)" in pool.note
    assert "= 13,440 MiB" in pool.note
    assert steps["runtime_reserve_bytes_per_gpu"].formula == "reserve_base + reserve_per_tp_doubling × log2(TP)"
    # vLLM's explanation names its own default and has no such note.
    plain = {step.name: step for step in price(resolve(Deployment(model=LLAMA8, gpu="h100-sxm"))).steps}
    assert plain["kv_pool_bytes_estimate_per_gpu"].substituted.startswith("0.9 (vLLM default) × ")
    assert plain["kv_pool_bytes_estimate_per_gpu"].note is None


def test_price_json_reports_the_share_it_used(run_cli):
    base = ("price", "--model", LLAMA8, "--gpu", "h100-sxm", "--json")
    shares = {}
    for extra in ((), ("--engine", "sglang"), ("--engine", "sglang", "--memory-utilization", "0.8")):
        code, out, err = run_cli(*base, *extra)
        assert code == 0, err
        shares[extra] = json.loads(out)["results"]["memory_utilization"]
    assert list(shares.values()) == [0.9, 0.834, 0.8]


def test_a_pool_measured_on_sglangs_default_share_holds_only_there():
    """A measured pool records the share as the engine ran it; on another engine's default share it is an error
    naming the change."""
    from quotacalc.inputs.deployment import measured_pool_mismatch

    def deployment(engine: str, **measured) -> Deployment:
        record = {"gpu": "h100-sxm", "tp": 1, "engine": "sglang", **measured}
        return Deployment(
            model=LLAMA8, gpu="h100-sxm", engine=engine, kv_pool_tokens=400_000, kv_pool_measured_with=record
        )

    assert measured_pool_mismatch(deployment("sglang", memory_utilization=0.834)) is None
    mismatch = measured_pool_mismatch(deployment("generic", memory_utilization=0.834))
    assert "memory_utilization 0.834 -> 0.9" in mismatch and "engine sglang -> generic" in mismatch
    # Recorded without a share (None: the engine's default), it is resolved on each side alike.
    assert measured_pool_mismatch(deployment("sglang")) is None
    assert "memory_utilization 0.834 -> 0.9" in measured_pool_mismatch(deployment("generic"))


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"below_gib": 35, "below_tp_4": 24, "from_tp_4": 80}], "the last without below_gib"),
        (
            [
                {"below_gib": 60, "below_tp_4": 32, "from_tp_4": 160},
                {"below_gib": 35, "below_tp_4": 24, "from_tp_4": 80},
                {"below_tp_4": 256, "from_tp_4": 512},
            ],
            "must grow",
        ),
        ([{"below_tp_4": 0, "from_tp_4": 512}], "greater than 0"),
    ],
)
def test_a_bad_memory_rule_names_its_field(rows, message):
    memory = dict(rule().model_dump(), cuda_graph_max_bs=rows)
    document = {"engines": {"x": {"name": "X", "defaults": {}, "static_memory_fraction": memory, "source": "s"}}}
    with pytest.raises(QuotacalcError) as caught:
        parse_engine_catalog(document, "engines.yaml")
    assert caught.value.field.startswith("engines.x.static_memory_fraction.cuda_graph_max_bs")
    assert message in str(caught.value)


# --------------------------------------------------------------------------- calibrate --log with SGLang's log

#: sglang PR 4760's start-up lines (kv_pool.yaml sglang-4760-llama-3.1-8b-h100), with a server_args line as SGLang
#: prints it (fields abridged) stating the 0.88 share and TP 1 the pool ran at.
PR4760_LOG = (
    "[2025-03-25 16:36:50] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', dtype='auto', "
    "kv_cache_dtype='auto', mem_fraction_static=0.88, max_running_requests=None, chunked_prefill_size=8192, "
    "tp_size=1, stream_interval=1)\n"
    "[2025-03-25 16:37:06 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.48 GB, "
    "mem usage=15.11 GB.\n"
    "[2025-03-25 16:37:06 TP0] KV Cache is allocated. #tokens: 442750, K size: 27.02 GB, V size: 27.02 GB\n"
    "[2025-03-25 16:37:06 TP0] Memory pool end. avail mem=8.26 GB\n"
)


def write_log(tmp_path, text: str, name: str = "serve.log") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_sglangs_start_up_lines_are_read(tmp_path):
    from quotacalc.inputs.benchmarks import read_start_up_log

    reading = read_start_up_log(write_log(tmp_path, PR4760_LOG))
    assert reading.engine == "sglang" and reading.kv_pool_tokens == 442_750
    assert reading.available_kv_gib == pytest.approx(54.04) and reading.memory_utilization == 0.88 and reading.tp == 1
    # SGLang before 0.4.4 (its docs' quick start, January 2025): no '#tokens' on the allocation line, the count in
    # 'max_total_num_tokens'; one line per TP rank, the smallest rank's cache bounding the pool; MLA's one cache.
    older = (
        "[TP0] KV Cache is allocated. K size: 27.13 GB, V size: 27.13 GB.\n"
        "[TP1] KV Cache is allocated. K size: 27.11 GB, V size: 27.11 GB.\n"
        "max_total_num_tokens=444500, chunked_prefill_size=8192, max_prefill_tokens=16384, context_len=131072\n"
    )
    reading = read_start_up_log(write_log(tmp_path, older))
    assert reading.kv_pool_tokens == 444_500 and reading.available_kv_gib == pytest.approx(54.22)
    assert reading.memory_utilization is None and reading.tp is None
    mla = read_start_up_log(write_log(tmp_path, "[TP0] KV Cache is allocated. #tokens: 1000000, KV size: 65.45 GB\n"))
    assert mla.kv_pool_tokens == 1_000_000 and mla.available_kv_gib == 65.45


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (PR4760_LOG + "GPU KV cache size: 1,000 tokens\n", "both vLLM's and SGLang's KV cache lines"),
        (PR4760_LOG + "KV Cache is allocated. #tokens: 442000, K size: 27 GB, V size: 27 GB\n", "2 different KV pools"),
        (PR4760_LOG + PR4760_LOG.replace("=0.88", "=0.9"), "2 different memory_utilization values"),
    ],
)
def test_a_confused_sglang_log_is_one_line(tmp_path, text, message):
    from quotacalc.inputs.benchmarks import read_start_up_log

    with pytest.raises(QuotacalcError) as caught:
        read_start_up_log(write_log(tmp_path, text))
    line = caught.value.one_line()
    assert message in line and "serve.log" in line and "\n" not in line


def test_calibrate_reads_the_reserve_off_sglangs_log_and_writes_it(tmp_path, run_cli):
    """reserve = 0.88 × 79.19 GiB − 14.957 GiB (weights) − 54.04 GiB (K + V) = 0.689 GiB; written into the plan with
    the pool and what it was measured with, price then reports the logged pool as measured."""
    log = write_log(tmp_path, PR4760_LOG)
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: Llama-3.1-8B-Instruct\ngpu: h100-sxm\nengine: sglang\nmemory_utilization: 0.88\n")
    code, out, err = run_cli("calibrate", plan, "--log", log, "--write", plan, "--json")
    assert code == 0, err
    expected = (0.88 * 85_029_158_912 - LLAMA8_BF16_BYTES - 54.04 * GIB) / GIB
    assert json.loads(out)["calibration"]["parameters"]["runtime_reserve_gib"] == pytest.approx(expected, abs=1e-3)
    written = yaml.safe_load(plan.read_text())
    assert written["kv_pool_tokens"] == 442_750
    assert written["kv_pool_measured_with"]["engine"] == "sglang"
    assert written["kv_pool_measured_with"]["memory_utilization"] == 0.88
    code, out, err = run_cli("price", plan, "--json")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert results["kv_pool_tokens"] == 442_750 and results["kv_pool_source"] == "measured"


@pytest.mark.parametrize(
    ("flags", "message", "fix"),
    [
        ((), "--log: an SGLang start-up log measures SGLang's KV pool, not that of engine generic", "--engine sglang"),
        (
            ("--engine", "sglang"),
            "serve.log: the log's pool was sized at mem_fraction_static 0.88, the deployment's share is 0.834",
            "(give --memory-utilization 0.88 (the share the engine ran at))",
        ),
        (
            ("--engine", "sglang", "--memory-utilization", "0.88", "--tp", "2"),
            "serve.log: the log ran at TP 1, the deployment is TP 2",
            "(give --tp 1, or the log of this deployment)",
        ),
        (
            ("--engine", "sglang", "--memory-utilization", "0.88", "--model", "gemma-3-27b-it"),
            "serve.log: gemma-3-27b-it keeps windowed or state layers",
            "(give the engine's logged pool as --kv-pool-tokens)",
        ),
    ],
)
def test_an_sglang_log_for_another_deployment_is_one_line(tmp_path, run_cli, flags, message, fix):
    log = write_log(tmp_path, PR4760_LOG)
    model = () if "--model" in flags else ("--model", LLAMA8)
    code, out, err = run_cli("calibrate", *model, "--gpu", "h100-sxm", *flags, "--log", log)
    assert code == 1 and out == ""
    assert message in err and fix in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("mem_fraction_static=0.88", "mem_fraction_static=1.5"),
            "the share the pool was sized at: SGLang's server_args mem_fraction_static",
        ),
        (
            ("tp_size=1", "tp_size=0"),
            "tp_size, vLLM's tensor_parallel_size (its config line): input should be greater than or equal to 1, got 0",
        ),
        (("#tokens: 442750", "#tokens: 0"), "(SGLang: '#tokens: N'), per replica: input should be greater than"),
    ],
)
def test_an_impossible_figure_in_the_log_names_it(tmp_path, run_cli, edit, message):
    log = write_log(tmp_path, PR4760_LOG.replace(*edit))
    code, out, err = run_cli("calibrate", "--model", LLAMA8, "--gpu", "h100-sxm", "--engine", "sglang", "--log", log)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "serve.log: " in err and message in err and "(give the log of a start-up that sized a KV pool)" in err


@pytest.mark.parametrize(
    "text",
    [
        "GPU KV cache size: 99,999,999,999 tokens\nAvailable KV cache memory: 2.0 GiB\n",  # vLLM's lines
        "KV Cache is allocated. #tokens: 99999999999, K size: 1 GB, V size: 1 GB\n",  # SGLang's
    ],
)
def test_a_logged_pool_larger_than_the_gpu_is_an_error_not_a_warning(tmp_path, run_cli, text):
    """99,999,999,999 tokens × 131,072 B is 12 million GiB a GPU: not this deployment's log, whatever else it says."""
    log = write_log(tmp_path, text)
    engine = ("--engine", "sglang") if "#tokens" in text else ()
    code, out, err = run_cli("calibrate", "--model", LLAMA8, "--gpu", "h100-sxm", *engine, "--log", log)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "the log's pool of 99,999,999,999 tokens needs 12,207,031.2 GiB of KV per GPU" in err
    assert "more than h100-sxm's 79.2 GiB (check that the log is from this model, TP and KV dtype)" in err


def test_the_table_says_which_share_of_memory_the_pool_estimate_rests_on(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    for extra, share in (((), "0.9"), (("--engine", "sglang"), "0.834"), (("--memory-utilization", "0.8"), "0.8")):
        code, out, err = run_cli("price", "--model", LLAMA8, "--gpu", "h100-sxm", *extra)
        assert code == 0, err
        row = next(line for line in out.splitlines() if line.startswith("KV pool "))
        assert f"estimated at {share} of memory" in row
    code, out, err = run_cli("price", "--model", LLAMA8, "--gpu", "h100-sxm", "--kv-pool-tokens", "400000")
    assert code == 0, err
    assert next(line for line in out.splitlines() if line.startswith("KV pool ")).rstrip().endswith("measured")
