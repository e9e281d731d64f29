"""Readers for quotacalc calibrate: vllm bench serve JSON, GuideLLM reports, CSV, vLLM start-up logs.

Good files give the figures the file holds (converted by hand here: ms -> s, totals / completed);
bad files give one line naming the file, the row and the field, with exit code 1 (2 for a missing file).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc.errors import EXIT_INVALID_INPUT, EXIT_USAGE, QuotacalcError, UsageError
from quotacalc.inputs.benchmarks import read_benchmark, read_start_up_log

EXAMPLES = Path(__file__).parent.parent / "examples" / "calibration"
NIM_CSV = EXAMPLES / "nim-llama-3.3-70b-h100-tp2.csv"
QWEN_LOG = EXAMPLES / "vllm-startup-qwen3-235b-fp8-tp4-h100.log"


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _error(call, *args) -> QuotacalcError:
    with pytest.raises(QuotacalcError) as caught:
        call(*args)
    return caught.value


# --------------------------------------------------------------------------- CSV


def test_csv_example_reads_every_row_with_blank_cells_as_not_measured():
    points, notes = read_benchmark(str(NIM_CSV))
    assert notes == [] and len(points) == 13
    first, second = points[0], points[1]
    # The first data row of the file: 1,200,200,0.03122,0.0188 (NIM 1.8.0, 200/200 at concurrency 1).
    assert (first.concurrency, first.prompt_tokens, first.output_tokens) == (1, 200, 200)
    assert (first.ttft_s, first.itl_s, first.row) == (0.03122, 0.0188, "row 1")
    assert second.ttft_s is None and second.itl_s == 0.02333 and second.concurrency == 50


def test_csv_in_milliseconds(tmp_path):
    path = _write(tmp_path, "ms.csv", "concurrency,prompt_tokens,output_tokens,ttft_ms,itl_ms\n8,1000,200,120,15.5\n")
    (point,), _ = read_benchmark(path)
    assert point.ttft_s == pytest.approx(0.120) and point.itl_s == pytest.approx(0.0155)


def test_csv_model_column_names_each_runs_model(tmp_path, run_cli):
    """An optional model column: each run's model, compared with the deployment's as a vLLM result's model_id is (a
    run of another model is a warning naming the file); a blank cell names none."""
    text = "label,model,concurrency,prompt_tokens,output_tokens,itl_s\na,Qwen/Qwen3-8B,1,200,200,0.0046\nb,,4,200,200,0.0052\n"
    path = _write(tmp_path, "runs.csv", text)
    points, _ = read_benchmark(path)
    assert [point.model for point in points] == ["Qwen/Qwen3-8B", None]
    code, out, err = run_cli("calibrate", "--model", "Qwen3-8B", "--gpu", "h100-sxm", "--bench", path)
    assert code == 0 and "benchmarked model" not in err + out
    code, out, err = run_cli("calibrate", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--bench", path)
    assert code == 0 and "benchmarked model 'Qwen/Qwen3-8B' is not this deployment's" in err + out


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("concurency,prompt_tokens,output_tokens,itl_s\n1,2,3,0.01\n", ("header", "unknown column 'concurency'", "did you mean 'concurrency'")),
        ("prompt_tokens,output_tokens,itl_s\n2,3,0.01\n", ("header", "no 'concurrency' column")),
        ("concurrency,prompt_tokens,output_tokens\n1,2,3\n", ("header", "no 'ttft_s' or 'itl_s' column")),
        ("concurrency,prompt_tokens,output_tokens,itl_s\n1,200,20,0.01\n2,200,20,fast\n", ("row 2: itl_s", "expected a number, got 'fast'")),
        ("concurrency,prompt_tokens,output_tokens,itl_s\n1,200,20,nan\n", ("row 1: itl_s", "finite")),
        ("concurrency,prompt_tokens,output_tokens,itl_s\n1,200,20,-0.01\n", ("row 1: itl_s: must be a positive number of seconds, got -0.01 (leave the cell blank",)),
        ("concurrency,prompt_tokens,output_tokens,itl_s\n1.5,200,20,0.01\n", ("row 1: concurrency", "whole number")),
        ("concurrency,prompt_tokens,output_tokens,itl_s\n0,200,20,0.01\n", ("row 1: concurrency: must be a whole number of requests in flight from 1 to 100,000, got 0",)),
        ("concurrency,prompt_tokens,output_tokens,itl_s\n1,200,20\n", ("row 1", "3 cells for 4 columns", "one cell per column")),
        (
            'concurrency,prompt_tokens,output_tokens,itl_s\n1,"200,20,0.01\n2,200,20,0.02\n',
            ("row 1", "2 cells for 4 columns", "a quote opened in this row is never closed"),
        ),
        ("concurrency,prompt_tokens,output_tokens,ttft_s,itl_s\n1,200,20,,\n", ("row 1", "neither a time to first token")),
        ("concurrency,prompt_tokens,output_tokens,itl_s\n,200,20,0.01\n", ("row 1: concurrency", "is empty")),
        ("concurrency,prompt_tokens,output_tokens,itl_s\n", ("no data rows",)),
        ("# only a comment\n", ("empty CSV",)),
        ("", ("empty file",)),
    ],
    ids=[
        "typo-column", "no-concurrency", "no-times", "not-a-number", "nan", "negative", "fractional-concurrency",
        "zero-concurrency", "short-row", "unclosed-quote", "no-figure", "empty-cell", "header-only", "comment-only", "empty",
    ],
)  # fmt: skip
def test_bad_csv(tmp_path, text, needles):
    path = _write(tmp_path, "bench.csv", text)
    line = _error(read_benchmark, path).one_line()
    assert line.startswith(path) and "\n" not in line
    for needle in needles:
        assert needle in line, (needle, line)


def test_missing_file_is_a_usage_error(tmp_path):
    error = _error(read_benchmark, str(tmp_path / "nope.json"))
    assert isinstance(error, UsageError) and error.exit_code == EXIT_USAGE and "no such file" in error.one_line()


# --------------------------------------------------------------------------- vllm bench serve

#: The keys 'vllm bench serve --save-result' writes (vllm/benchmarks/serve.py), for one run.
VLLM_RESULT = {
    "date": "20250101-000000",
    "backend": "vllm",
    "model_id": "meta-llama/Llama-3.3-70B-Instruct",
    "num_prompts": 100,
    "request_rate": "inf",
    "burstiness": 1.0,
    "max_concurrency": 16,
    "duration": 61.5,
    "completed": 100,
    "failed": 0,
    "total_input_tokens": 102400,
    "total_output_tokens": 25600,
    "mean_ttft_ms": 250.0,
    "median_ttft_ms": 240.0,
    "mean_tpot_ms": 22.0,
    "mean_itl_ms": 21.5,
    "median_itl_ms": 20.0,
}


def test_vllm_result_means_per_request(json_file):
    (point,), _ = read_benchmark(json_file(VLLM_RESULT))
    # 102,400 input tokens over 100 completed requests: 1,024 per request; 25,600 / 100 = 256.
    assert (point.concurrency, point.prompt_tokens, point.output_tokens) == (16, 1024, 256)
    assert point.ttft_s == pytest.approx(0.250) and point.itl_s == pytest.approx(0.0215)  # the means, not medians
    assert point.model == "meta-llama/Llama-3.3-70B-Instruct"  # model_id: calibrate compares it with the plan's


#: The line 'python -m sglang.bench_serving --output-file runs.jsonl' appends for one run (its benchmark() result
#: dict, python/sglang/bench_serving.py): vLLM's keys, with the rate written by json.dumps as Infinity.
SGLANG_LINE = (
    '{"backend": "sglang", "dataset_name": "random", "request_rate": Infinity, "max_concurrency": 1, '
    '"sharegpt_output_len": null, "random_input_len": 1000, "random_output_len": 1000, "random_range_ratio": 0.0, '
    '"duration": 183.1, "completed": 10, "total_input_tokens": 6101, "total_output_tokens": 41941, '
    '"total_output_tokens_retokenized": 41921, "request_throughput": 0.05, "input_throughput": 33.3, '
    '"output_throughput": 229.0, "mean_e2e_latency_ms": 18310.0, "median_e2e_latency_ms": 17200.0, '
    '"mean_ttft_ms": 153.0, "median_ttft_ms": 140.76, "mean_tpot_ms": 4.33, "median_tpot_ms": 4.3, '
    '"mean_itl_ms": 4.33, "median_itl_ms": 4.2, "concurrency": 0.99}'
)


def test_sglang_bench_serving_lines_read_as_vllm_results(json_file):
    """SGLang's bench_serving writes vLLM's keys: each appended line is a run; the means per request, as for vLLM
    (6,101 input and 41,941 output tokens over 10 requests: 610.1 and 4,194.1). The second line's 16 clients sent
    those 10 requests: at most 10 were ever in flight, its concurrency."""
    second = SGLANG_LINE.replace('"max_concurrency": 1', '"max_concurrency": 16').replace(
        '"mean_itl_ms": 4.33', '"mean_itl_ms": 9.1'
    )
    points, notes = read_benchmark(json_file(SGLANG_LINE + "\n" + second + "\n"))
    assert notes == [] and [point.concurrency for point in points] == [1, 10]
    first = points[0]
    assert (first.prompt_tokens, first.output_tokens) == (pytest.approx(610.1), pytest.approx(4194.1))
    assert first.ttft_s == pytest.approx(0.153) and first.itl_s == pytest.approx(0.00433)
    assert points[1].itl_s == pytest.approx(0.0091)
    assert first.model is None  # SGLang's result names no model: calibrate cannot compare it with the plan's


@pytest.mark.parametrize(
    ("changes", "varied"),
    [
        ({}, "random_range_ratio 0"),  # SGLang's default: lengths drawn from [0 × len, len]
        ({"random_range_ratio": 0.5}, "random_range_ratio 0.5"),
        ({"random_range_ratio": 1.0}, None),  # [len, len]: every request alike
        ({"dataset_name": "sharegpt"}, "dataset_name sharegpt"),
        ({"dataset_name": "generated-shared-prefix"}, None),
        ({"dataset_name": "random-ids", "random_range_ratio": 1}, None),
    ],
)
def test_an_sglang_line_says_whether_its_lengths_varied(json_file, changes, varied):
    line = {**json.loads(SGLANG_LINE.replace("Infinity", '"inf"')), **changes}
    (point,), _ = read_benchmark(json_file(line))
    assert point.varied_lengths == varied


def test_a_vllm_result_s_random_range_ratio_is_not_read_as_sglang_s(json_file):
    # vLLM draws from [len × (1 − r), len × (1 + r)]: its r of 0 fixes the lengths, and its results carry no
    # sharegpt_output_len.
    (point,), _ = read_benchmark(json_file({**VLLM_RESULT, "dataset_name": "random", "random_range_ratio": 0.0}))
    assert point.varied_lengths is None


@pytest.fixture
def json_file(tmp_path):
    """Write a JSON document (or raw text) to a file; return its path."""
    count = iter(range(1000))

    def write(document) -> str:
        text = document if isinstance(document, str) else json.dumps(document)
        return _write(tmp_path, f"result-{next(count)}.json", text)

    return write


def test_vllm_appended_results_are_one_point_per_line(json_file):
    lines = "\n".join(json.dumps({**VLLM_RESULT, "max_concurrency": c}) for c in (1, 8, 32)) + "\n"
    points, _ = read_benchmark(json_file(lines))
    assert [point.concurrency for point in points] == [1, 8, 32]
    assert [point.row for point in points] == ["line 1", "line 2", "line 3"]
    listed, _ = read_benchmark(json_file([VLLM_RESULT, VLLM_RESULT]))
    assert [point.row for point in listed] == ["[0]", "[1]"]


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        ({"max_concurrency": None}, ("max_concurrency", "is null", "--max-concurrency")),
        ({"request_rate": 5.0}, ("request_rate", "rate-limited", "--request-rate inf")),
        ({"completed": 0}, ("completed", "no request completed")),
        ({"completed": None}, ("completed", "missing")),
        ({"total_input_tokens": "many"}, ("total_input_tokens", "expected a number")),
        ({"mean_itl_ms": float("inf")}, ("mean_itl_ms", "finite")),
        ({"mean_ttft_ms": -3.0}, ("mean_ttft_ms: must be a positive number of milliseconds, got -3",)),
        ({"max_concurrency": True}, ("max_concurrency", "expected a number, got true")),
    ],
    ids=["uncapped", "rate-limited", "none-completed", "no-completed", "text-tokens", "infinite", "negative", "bool"],
)
def test_bad_vllm_result(json_file, change, needles):
    path = json_file({**VLLM_RESULT, **change})
    line = _error(read_benchmark, path).one_line()
    assert line.startswith(path)
    for needle in needles:
        assert needle in line, (needle, line)


def test_vllm_result_without_latencies_and_malformed_json(json_file):
    result = {key: value for key, value in VLLM_RESULT.items() if key not in ("mean_ttft_ms", "mean_itl_ms")}
    assert "neither mean_ttft_ms nor mean_itl_ms" in _error(read_benchmark, json_file(result)).one_line()
    assert (
        "malformed JSON: expected a key in double quotes at line 1, column 17"
        in _error(read_benchmark, json_file('{"completed": 3,')).one_line()
    )
    line = _error(read_benchmark, json_file(json.dumps(VLLM_RESULT) + "\n{oops\n")).one_line()
    assert "line 2" in line and "malformed JSON" in line
    assert "expected a JSON object" in _error(read_benchmark, json_file("[1, 2]")).one_line()


# --------------------------------------------------------------------------- GuideLLM


def _summary(mean: float) -> dict:
    return {"successful": {"mean": mean, "median": mean * 0.9, "count": 50}, "errored": None, "incomplete": None}


def _guidellm_benchmark(strategy: dict, ttft_ms: float, itl_ms: float) -> dict:
    """One entry of a GuideLLM report's 'benchmarks' (guidellm/benchmark/schemas: config.strategy, metrics)."""
    return {
        "type_": "generative_benchmark",
        "config": {"strategy": strategy},
        "metrics": {
            "request_concurrency": _summary(7.6),
            "prompt_token_count": _summary(512.0),
            "output_token_count": _summary(128.0),
            "time_to_first_token_ms": _summary(ttft_ms),
            "inter_token_latency_ms": _summary(itl_ms),
        },
    }


def test_guidellm_report_keeps_closed_loop_runs(json_file):
    report = {
        "benchmarks": [
            _guidellm_benchmark({"type_": "synchronous"}, 80.0, 12.0),
            _guidellm_benchmark({"type_": "throughput", "max_concurrency": 512}, 900.0, 40.0),
            _guidellm_benchmark({"type_": "concurrent", "streams": 8}, 95.0, 14.0),
        ]
    }
    points, notes = read_benchmark(json_file(report))
    assert [(point.concurrency, point.row) for point in points] == [(1, "benchmarks[0]"), (8, "benchmarks[2]")]
    assert points[1].ttft_s == pytest.approx(0.095) and points[1].itl_s == pytest.approx(0.014)
    assert points[1].prompt_tokens == 512 and points[1].output_tokens == 128
    assert len(notes) == 1 and "benchmarks[1]" in notes[0] and "'throughput'" in notes[0]


def test_guidellm_before_0_4_keeps_the_strategy_under_args(json_file):
    benchmark = _guidellm_benchmark({}, 80.0, 12.0)
    benchmark["args"] = {"strategy": {"type_": "concurrent", "streams": 4}}
    del benchmark["config"]
    (point,), _ = read_benchmark(json_file({"benchmarks": [benchmark]}))
    assert point.concurrency == 4


@pytest.mark.parametrize(
    ("report", "needles"),
    [
        ({"benchmarks": []}, ("benchmarks", "no benchmarks")),
        (
            {"benchmarks": [_guidellm_benchmark({"type_": "poisson", "rate": 2}, 1, 1)]},
            ("no synchronous or concurrent",),
        ),
        (
            {"benchmarks": [_guidellm_benchmark({"type_": "concurrent"}, 1, 1)]},
            ("benchmarks[0].config.strategy.streams",),
        ),
        ({"benchmarks": [{"config": {}}]}, ("benchmarks[0]", "has no metrics")),
    ],
    ids=["empty", "rate-only", "no-streams", "no-metrics"],
)
def test_bad_guidellm_report(json_file, report, needles):
    line = _error(read_benchmark, json_file(report)).one_line()
    for needle in needles:
        assert needle in line, (needle, line)


# --------------------------------------------------------------------------- vLLM start-up log


def test_example_log():
    reading = read_start_up_log(str(QWEN_LOG))
    # The two lines quoted in vllm-project/vllm#21348: 8.11 GiB and 178,880 tokens.
    assert reading.available_kv_gib == 8.11 and reading.kv_pool_tokens == 178_880


def test_log_with_prefixes_colours_and_one_line_per_rank(tmp_path):
    text = (
        "INFO 05-06 10:00:00 [core.py:58] Initializing a V1 LLM engine\n"
        "\x1b[1;36m(VllmWorker rank=0 pid=11)\x1b[0;0m INFO 05-06 10:01:00 [gpu_worker.py:227] Available KV cache memory: 40.55 GiB\n"
        "\x1b[1;36m(VllmWorker rank=1 pid=12)\x1b[0;0m INFO 05-06 10:01:00 [gpu_worker.py:227] Available KV cache memory: 40.49 GiB\n"
        "INFO 05-06 10:01:01 [kv_cache_utils.py:634] GPU KV cache size: 1,234,567 tokens\n"
        "INFO 05-06 10:01:01 [kv_cache_utils.py:637] Maximum concurrency for 8,192 tokens per request: 150.70x\n"
    )
    reading = read_start_up_log(_write(tmp_path, "serve.log", text))
    assert reading.kv_pool_tokens == 1_234_567
    assert reading.available_kv_gib == 40.49  # the engine sizes the pool by the smallest rank


def test_bad_logs(tmp_path):
    two = "GPU KV cache size: 1,000 tokens\nGPU KV cache size: 2,000 tokens\n"
    line = _error(read_start_up_log, _write(tmp_path, "two.log", two)).one_line()
    assert "2 different KV pools" in line and "one start-up" in line
    line = _error(read_start_up_log, _write(tmp_path, "none.log", "INFO starting\n")).one_line()
    assert "no 'GPU KV cache size" in line and "none.log" in line
    assert _error(read_start_up_log, str(tmp_path / "missing.log")).exit_code == EXIT_USAGE
    zero = _error(read_start_up_log, _write(tmp_path, "zero.log", "GPU KV cache size: 0 tokens\n"))
    assert zero.exit_code == EXIT_INVALID_INPUT


def test_csv_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffconcurrency,prompt_tokens,output_tokens,itl_s\r\n2,100,50,0.02\r\n".encode())
    (point,), _ = read_benchmark(str(path))
    assert (point.concurrency, point.itl_s) == (2, 0.02)


def test_log_lines_that_only_look_like_figures_are_named(tmp_path):
    text = "GPU KV cache size: ,,, tokens\nAvailable KV cache memory: 1.2.3 GiB\n"
    line = _error(read_start_up_log, _write(tmp_path, "odd.log", text)).one_line()
    assert "line 1: 'GPU KV cache size: ,,, tokens' is no pool figure" in line


@pytest.mark.parametrize(
    ("figure", "line_number"),
    [
        ("GPU KV cache size: -178,880 tokens", 2),
        ("GPU KV cache size: nan tokens", 2),
        ("GPU KV cache size: 178880.5 tokens", 2),
        ("Available KV cache memory: nan GiB", 1),
        ("Available KV cache memory: inf GiB", 1),
        ("Available KV cache memory: 8300 MiB", 1),
        ("KV Cache is allocated. #tokens: -5, K size: 1.0 GB, V size: 1.0 GB", 1),
    ],
)
def test_a_pool_figure_that_is_no_count_is_refused_with_its_line(tmp_path, figure, line_number):
    """A log edited or corrupted into a negative, NaN, fractional or other-unit figure: one line naming the log's
    line, exit 1, never the other figure alone (the pool line was dropped, and --write saved no measured pool)."""
    lines = ["Available KV cache memory: 8.11 GiB", "GPU KV cache size: 178,880 tokens"]
    if figure.startswith("KV Cache"):
        lines = [figure]
    else:
        lines[line_number - 1] = figure
    error = _error(read_start_up_log, _write(tmp_path, "edited.log", "\n".join(lines) + "\n"))
    assert error.exit_code == EXIT_INVALID_INPUT
    quoted = "#tokens: -5" if figure.startswith("KV Cache") else figure
    assert f"edited.log: line {line_number}: '{quoted}" in error.one_line()


def test_special_files_are_refused_without_waiting(tmp_path):
    import os

    fifo = tmp_path / "results.fifo"
    os.mkfifo(fifo)  # opening a FIFO for reading would block until a writer came
    for reader in (read_benchmark, read_start_up_log):
        error = _error(reader, str(fifo))
        assert error.exit_code == EXIT_USAGE and "not a regular file" in error.one_line()
        assert _error(reader, str(tmp_path)).exit_code == EXIT_USAGE  # a directory


def test_a_figure_with_hundreds_of_digits_is_not_read(tmp_path):
    text = f"GPU KV cache size: {'9' * 500} tokens\nAvailable KV cache memory: {'9' * 500} GiB\n"
    line = _error(read_start_up_log, _write(tmp_path, "huge.log", text)).one_line()
    assert "line 1: 'GPU KV cache size: 9999" in line and "is no pool figure" in line and "9" * 60 not in line


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ('{"completed": ' + "9" * 5000 + "}", ("malformed JSON",)),
        ("[" * 100_000 + "]" * 100_000, ("malformed JSON",)),
        (
            json.dumps({**VLLM_RESULT, "max_concurrency": 10**9}),
            ("max_concurrency", "from 1 to 100,000, got 1,000,000,000"),
        ),
        (
            json.dumps({**VLLM_RESULT, "mean_itl_ms": 1e12}),
            ("mean_itl_ms: must be at most 3,600,000 milliseconds (an hour)",),
        ),
        (
            json.dumps(VLLM_RESULT)[:-1] + ', "mean_ttft_ms": 5000}',
            ("duplicate key 'mean_ttft_ms': JSON keeps the last", "(keep one)"),
        ),
        (
            json.dumps(VLLM_RESULT) + "\n" + json.dumps(VLLM_RESULT)[:-1] + ', "mean_itl_ms": 1}\n',
            ("line 2: duplicate key 'mean_itl_ms'",),
        ),
    ],
    ids=[
        "5000-digit-int",
        "deep-nesting",
        "concurrency-1e9",
        "itl-in-wrong-unit",
        "duplicate-key",
        "duplicate-key-jsonl",
    ],
)
def test_hostile_json(json_file, text, needles):
    error = _error(read_benchmark, json_file(text))
    assert error.exit_code == EXIT_INVALID_INPUT
    for needle in needles:
        assert needle in error.one_line(), (needle, error.one_line())


# --------------------------------------------------------------------------- what real files also carry


def test_a_zero_latency_is_not_measured(json_file):
    # vllm/benchmarks/serve.py calculate_metrics: mean_itl_ms = np.mean(itls or 0) * 1000, 0 with one output token.
    (point,), _ = read_benchmark(json_file(json.dumps({**VLLM_RESULT, "mean_itl_ms": 0.0, "median_itl_ms": 0.0})))
    assert point.itl_s is None and point.ttft_s == pytest.approx(0.25)
    error = _error(read_benchmark, json_file(json.dumps({**VLLM_RESULT, "mean_itl_ms": 0, "mean_ttft_ms": 0})))
    assert "measured neither a first token nor an inter-token latency" in error.problem
    # GuideLLM: an empty distribution (guidellm/schemas/statistics.py) is mean 0, count 0.
    benchmark = _guidellm_benchmark({"type_": "synchronous"}, 80.0, 12.0)
    benchmark["metrics"]["inter_token_latency_ms"] = {"successful": {"mean": 0.0, "count": 0}}
    (point,), _ = read_benchmark(json_file(json.dumps({"benchmarks": [benchmark]})))
    assert point.itl_s is None and point.ttft_s == pytest.approx(0.08)


def test_runs_that_never_hold_their_concurrency(json_file):
    # A ramp-up run (vllm bench serve --ramp-up-strategy): rate-driven arrivals, refused alone.
    ramp = {**VLLM_RESULT, "ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 20}
    error = _error(read_benchmark, json_file(json.dumps(ramp)))
    assert error.field == "ramp_up_strategy" and "a ramp-up run's arrivals follow a rate" in error.problem
    # In an --append-result sweep, rate-driven runs are skipped with a note, as GuideLLM's are.
    rated = {**VLLM_RESULT, "max_concurrency": None, "request_rate": 4.0}
    text = "\n".join(json.dumps(run) for run in (VLLM_RESULT, rated, ramp))
    points, notes = read_benchmark(json_file(text))
    assert [point.concurrency for point in points] == [16]
    assert [note.split(": ")[1] for note in notes] == ["line 2", "line 3"]
    assert "max_concurrency is null" in notes[0] and "a ramp-up run (linear)" in notes[1]
    error = _error(read_benchmark, json_file("\n".join(json.dumps(run) for run in (rated, ramp))))
    assert error.problem == "no run at a fixed concurrency (2 skipped)"
    # 64 clients for 20 requests: never more than 20 in flight.
    (point,), _ = read_benchmark(json_file(json.dumps({**VLLM_RESULT, "max_concurrency": 64, "completed": 20})))
    assert point.concurrency == 20
    assert _error(read_benchmark, json_file("[]")).problem == "no benchmark results"


def test_guidellm_yaml_report(tmp_path):
    import yaml

    report = {
        "metadata": {"version": 2, "guidellm_version": "0.5.0"},
        "benchmarks": [
            _guidellm_benchmark({"type_": "synchronous"}, 80.0, 12.0),
            _guidellm_benchmark({"type_": "concurrent", "streams": 8}, 95.0, 14.0),
        ],
    }
    points, notes = read_benchmark(_write(tmp_path, "benchmarks.yaml", yaml.safe_dump(report, sort_keys=False)))
    assert notes == [] and [(p.concurrency, p.ttft_s, p.itl_s) for p in points] == [(1, 0.08, 0.012), (8, 0.095, 0.014)]
    # GuideLLM 0.4-0.6 (yaml.dump sorts the keys): 'args' first, the strategy under it.
    older = {"args": {"profile": "sweep"}, "benchmarks": [_guidellm_benchmark({}, 80.0, 12.0)]}
    older["benchmarks"][0]["args"] = {"strategy": {"type_": "concurrent", "streams": 4}}
    del older["benchmarks"][0]["config"]
    (point,), _ = read_benchmark(_write(tmp_path, "v05.yaml", yaml.dump(older)))
    assert point.concurrency == 4
    error = _error(read_benchmark, _write(tmp_path, "other.yaml", "metadata: {version: 2}\nbenchmarks: 5\n"))
    assert error.problem == "no benchmarks"


VLLM_CONFIG_LINE = (
    "(EngineCore_DP0 pid=2456) INFO 08-05 10:11:20 [core.py:74] Initializing a V1 LLM engine (v0.10.1.1) with config: "
    "model='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=131072, load_format=auto, "
    "tensor_parallel_size={tp}, pipeline_parallel_size=1, quantization=None, kv_cache_dtype=auto\n"
)


def test_a_vllm_log_states_its_tp_and_memory_share(tmp_path):
    # vllm/config/__init__.py VllmConfig.__str__ ('tensor_parallel_size=...'); `vllm serve` logs 'non-default args:'
    # (vllm/entrypoints/utils.py), listing gpu_memory_utilization only when it was set.
    args = "(APIServer pid=2345) INFO 08-05 10:11:05 [utils.py:326] non-default args: {'model': 'm'%s}\n"
    pool = "Available KV cache memory: 55.66 GiB\nGPU KV cache size: 455,952 tokens\n"
    reading = read_start_up_log(_write(tmp_path, "a.log", args % "" + VLLM_CONFIG_LINE.format(tp=2) + pool))
    assert (reading.tp, reading.memory_utilization, reading.max_model_len) == (2, 0.9, 131_072)
    text = args % ", 'gpu_memory_utilization': 0.95" + VLLM_CONFIG_LINE.format(tp=1) + pool
    reading = read_start_up_log(_write(tmp_path, "b.log", text))
    assert (reading.tp, reading.memory_utilization) == (1, 0.95)
    # No 'non-default args' line (an offline LLM(), an older server): the share is not stated.
    assert read_start_up_log(_write(tmp_path, "c.log", VLLM_CONFIG_LINE.format(tp=1) + pool)).memory_utilization is None
    failed = _error(read_start_up_log, _write(tmp_path, "d.log", "Available KV cache memory: -2.81 GiB\n"))
    assert "the engine found no memory for the KV cache (Available KV cache memory: -2.81 GiB)" in failed.problem


def test_files_that_are_not_benchmark_text_say_what_they_are(tmp_path):
    import gzip

    zipped = tmp_path / "result.json.gz"
    zipped.write_bytes(gzip.compress(json.dumps(VLLM_RESULT).encode()))
    assert _error(read_benchmark, str(zipped)).problem == "is gzip-compressed"
    binary = tmp_path / "image.csv"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert _error(read_benchmark, str(binary)).problem == "is not UTF-8 text (a binary file, or UTF-16)"
    utf16 = tmp_path / "excel.csv"
    utf16.write_bytes("concurrency,prompt_tokens\n".encode("utf-16"))
    assert _error(read_benchmark, str(utf16)).problem == "is not UTF-8 text (a binary file, or UTF-16)"
    # A string is not shown: a file holding one quoted line may hold a secret (tests/test_errors_hide_secrets.py).
    for value, shown in (("null", "null"), ('"hello"', "a string"), ("42", "42")):
        scalar = _write(tmp_path, "value.json", value + "\n")
        assert _error(read_benchmark, scalar).problem.startswith(f"is a single JSON value ({shown}), not a benchmark")


def test_a_gzipped_or_pipeline_parallel_log_is_named(tmp_path):
    import gzip

    pool = "Available KV cache memory: 55.66 GiB\nGPU KV cache size: 455,952 tokens\n"
    zipped = tmp_path / "serve.log.gz"
    zipped.write_bytes(gzip.compress(pool.encode()))
    assert _error(read_start_up_log, str(zipped)).problem == "is gzip-compressed"
    staged = VLLM_CONFIG_LINE.format(tp=1).replace("pipeline_parallel_size=1", "pipeline_parallel_size=2")
    error = _error(read_start_up_log, _write(tmp_path, "pp.log", staged + pool))
    assert error.problem.startswith("the engine ran 2 pipeline-parallel stages")


def test_a_unit_slip_names_the_files_own_column_in_its_unit(run_cli, tmp_path):
    # 0.0249 in a milliseconds column: a 25 ms first token written in seconds.
    bench = _write(tmp_path, "b.csv", "concurrency,prompt_tokens,output_tokens,ttft_ms\n1,1000,100,0.0249\n")
    code, out, err = run_cli("calibrate", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--bench", bench)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert f"{bench}: row 1: ttft_ms: ttft_ms 0.0249 ms is 1/" in err and "seconds in a milliseconds column?" in err


def test_a_run_with_failed_requests_is_fitted_with_a_note(json_file):
    (point,), notes = read_benchmark(json_file({**VLLM_RESULT, "failed": 7}))
    assert point.concurrency == 16
    (note,) = notes
    assert note.endswith(
        "result: 7 requests failed: the run is fitted on the 100 that completed, at a concurrency of at most as many "
        "(rerun it where none fail)"
    )
    assert read_benchmark(json_file({**VLLM_RESULT, "failed": 0}))[1] == []


# --------------------------------------------------------------------------- what QA fed calibrate (one line, exit 1)

#: The calibrate command the bad files below are given to: a deployment the example runs fit.
CALIBRATE = ("calibrate", "--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--bench")
GUIDELLM_RESAVE = "re-save it with guidellm benchmark --output-path report.json"


def _refused(run_cli, path: str) -> str:
    """The one line calibrate prints for a bad benchmark file, after checking it exits 1 with nothing on stdout."""
    code, out, err = run_cli(*CALIBRATE, path)
    assert (code, out) == (EXIT_INVALID_INPUT, ""), err
    assert err.startswith("quotacalc: error: ") and err.count("\n") == 1, err
    return err.removeprefix("quotacalc: error: ").removesuffix("\n")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"config": "oops"},
            "benchmarks[0].config: expected an object (a GuideLLM report's run settings), got 'oops'",
        ),
        (
            {"config": None, "args": [1]},
            "benchmarks[0].args: expected an object (a GuideLLM report's run settings), got [1]",
        ),
        (
            # A damaged args is named even where config holds the strategy: the report is not as GuideLLM wrote it.
            {"args": 7},
            "benchmarks[0].args: expected an object (a GuideLLM report's run settings), got 7",
        ),
        (
            {"config": {}},
            "benchmarks[0].config.strategy: missing: the run's strategy (synchronous, concurrent, ...) is unknown",
        ),
    ],
    ids=["config-text", "args-list", "args-number", "no-strategy"],
)
def test_a_guidellm_section_that_is_not_an_object_is_named(run_cli, json_file, change, expected):
    benchmark = {**_guidellm_benchmark({"type_": "synchronous"}, 80.0, 12.0), **change}
    path = json_file({"benchmarks": [benchmark]})
    assert _refused(run_cli, path) == f"{path}: {expected} ({GUIDELLM_RESAVE})"


def test_a_guidellm_benchmark_that_is_not_an_object_is_named(run_cli, json_file):
    path = json_file({"benchmarks": ["synchronous"]})
    assert _refused(run_cli, path) == (
        f"{path}: benchmarks[0]: expected an object (one GuideLLM benchmark), got 'synchronous' ({GUIDELLM_RESAVE})"
    )


def test_a_guidellm_strategy_written_as_its_name_is_refused(run_cli, json_file):
    """GuideLLM writes a strategy as its model ({"type_": "synchronous"}, guidellm/scheduler/strategies.py); the
    bare name is only its console and CSV output. A name alone is refused, not skipped as a 'None' benchmark."""
    path = json_file({"benchmarks": [_guidellm_benchmark("synchronous", 80.0, 12.0)]})
    assert _refused(run_cli, path) == (
        f"{path}: benchmarks[0].config.strategy: expected an object with type_, got 'synchronous' "
        f'(GuideLLM writes {{"type_": "concurrent", "streams": 8}}: {GUIDELLM_RESAVE})'
    )
    path = json_file({"benchmarks": [_guidellm_benchmark({"streams": 8}, 80.0, 12.0)]})
    assert _refused(run_cli, path) == (
        f"{path}: benchmarks[0].config.strategy.type_: missing "
        "(synchronous, concurrent, throughput, constant or poisson, as GuideLLM writes it)"
    )


def test_a_concurrent_strategy_under_args_names_its_own_key(json_file):
    benchmark = _guidellm_benchmark({}, 80.0, 12.0)
    del benchmark["config"]
    benchmark["args"] = {"strategy": {"type_": "concurrent", "streams": "eight"}}
    error = _error(read_benchmark, json_file({"benchmarks": [benchmark]}))
    assert (error.field, error.problem) == (
        "benchmarks[0].args.strategy.streams",
        "expected a whole number, got 'eight'",
    )


@pytest.mark.parametrize("name", ["g.json", "g.jsonl", "G.JSON"])
def test_a_json_name_over_text_that_is_not_json_is_malformed_json(run_cli, tmp_path, name):
    path = _write(tmp_path, name, "not json at all")
    assert _refused(run_cli, path) == (
        f"{path}: malformed JSON: it does not start with '{{' or '[' (a .json file holds a vllm bench serve "
        "--save-result result or a GuideLLM JSON report; a CSV needs a .csv name)"
    )


def test_a_csv_still_reads_whatever_its_name_when_it_is_not_json(tmp_path):
    (point,), _ = read_benchmark(
        _write(tmp_path, "runs.txt", "concurrency,prompt_tokens,output_tokens,itl_s\n2,100,50,0.02\n")
    )
    assert (point.concurrency, point.itl_s) == (2, 0.02)


def test_a_truncated_json_is_a_whole_sentence_with_a_fix(run_cli, json_file):
    whole = json.dumps(VLLM_RESULT)
    # Cut inside the string "median_ttft_ms": the string opens at the quote before it, column 1 + its offset.
    cut = whole.index('"median_ttft_ms"') + 5
    path = json_file(whole[:cut])
    assert _refused(run_cli, path) == (
        f"{path}: malformed JSON: a string that never ends, starting at line 1, column {cut - 4} "
        "(the file is cut short or is not JSON: re-save it with vllm bench serve --save-result)"
    )
    report = json.dumps({"benchmarks": [_guidellm_benchmark({"type_": "synchronous"}, 80.0, 12.0)]})
    path = json_file(report[:-3])  # '...}}]}' less its last three closing brackets
    assert _refused(run_cli, path) == (
        f"{path}: malformed JSON: expected ',' at line 1, column {len(report) - 2} "
        f"(the file is cut short or is not JSON: {GUIDELLM_RESAVE})"
    )
    # --append-result lines: the bad line is named, and the column within it.
    path = json_file(whole + "\n" + '{"completed": 3,\n')
    assert _refused(run_cli, path) == (
        f"{path}: line 2: malformed JSON: expected a key in double quotes at column 17 "
        "(the file is cut short or is not JSON: re-save it with vllm bench serve --save-result)"
    )


def test_json_beyond_the_parser_s_limits_names_no_python(json_file):
    line = _error(read_benchmark, json_file('{"completed": ' + "9" * 5000 + "}")).one_line()
    assert "malformed JSON: a number of more than 4,300 digits (the file is cut short or is not JSON" in line
    assert "sys." not in line and "int_max_str_digits" not in line


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("4,200,200,-0.1,0.01", "row 3: ttft_s: must be a positive number of seconds, got -0.1"),
        ("4,200,200,0,0.01", "row 3: ttft_s: must be a positive number of seconds, got 0"),
        ("4,200,200,0.05,-0.002", "row 3: itl_s: must be a positive number of seconds, got -0.002"),
    ],
    ids=["negative-ttft", "zero-ttft", "negative-itl"],
)
def test_a_latency_of_zero_or_less_in_a_csv_says_leave_it_blank(run_cli, tmp_path, row, expected):
    text = f"concurrency,prompt_tokens,output_tokens,ttft_s,itl_s\n1,200,200,0.03,0.01\n2,200,200,0.04,0.01\n{row}\n"
    path = _write(tmp_path, "bench.csv", text)
    assert _refused(run_cli, path) == f"{path}: {expected} (leave the cell blank where it was not measured)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            # 0.000005 s: below BenchmarkPoint's 1e-5 s for a first token.
            "concurrency,prompt_tokens,output_tokens,ttft_s\n1,200,200,0.000005\n",
            "row 1: ttft_s: must be at least 0.00001 seconds (no engine is faster), got 5e-06 (check the figure's "
            "unit: ttft_s is in seconds; name a column of milliseconds ttft_ms)",
        ),
        (
            # 0.0005 ms = 5e-7 s: below the 1e-6 s for an inter-token latency, shown in the column's milliseconds.
            "concurrency,prompt_tokens,output_tokens,itl_ms\n1,200,200,0.0005\n",
            "row 1: itl_ms: must be at least 0.001 milliseconds (no engine is faster), got 0.0005 (check the "
            "figure's unit: itl_ms is in milliseconds)",
        ),
        (
            # 90,000 s: more than a day (86,400 s) to a first token.
            "concurrency,prompt_tokens,output_tokens,ttft_s\n1,200,200,90000\n",
            "row 1: ttft_s: must be at most 86,400 seconds (a day), got 90,000 (check the figure's unit: ttft_s is in "
            "seconds; name a column of milliseconds ttft_ms)",
        ),
        (
            "concurrency,prompt_tokens,output_tokens,itl_s\n1,0,200,0.01\n",
            "row 1: prompt_tokens: must be at least 1 and at most 100,000,000 tokens per request, got a mean of 0 "
            "(the mean prompt length of the run's requests)",
        ),
        (
            "concurrency,prompt_tokens,output_tokens,itl_s\n1,200,0.5,0.01\n",
            "row 1: output_tokens: must be at least 1 and at most 100,000,000 tokens per request, got a mean of 0.5 "
            "(the mean output length of the run's requests)",
        ),
    ],
    ids=["ttft-too-small", "itl-ms-too-small", "ttft-too-large", "no-prompt", "half-a-token"],
)
def test_a_figure_out_of_range_is_named_in_the_file_s_unit(tmp_path, text, expected):
    path = _write(tmp_path, "bench.csv", text)
    error = _error(read_benchmark, path)
    assert (error.one_line(), error.exit_code) == (f"{path}: {expected}", EXIT_INVALID_INPUT)


def test_a_negative_latency_in_json_says_what_the_benchmark_writes(json_file):
    path = json_file({**VLLM_RESULT, "mean_itl_ms": -21.5})
    assert _error(read_benchmark, path).one_line() == (
        f"{path}: mean_itl_ms: must be a positive number of milliseconds, got -21.5 (a measured time is positive: "
        "re-save it with vllm bench serve --save-result)"
    )
    benchmark = _guidellm_benchmark({"type_": "synchronous"}, -80.0, 12.0)
    path = json_file({"benchmarks": [benchmark]})
    assert _error(read_benchmark, path).one_line() == (
        f"{path}: benchmarks[0]: metrics.time_to_first_token_ms: must be a positive number of milliseconds, got -80 "
        f"(a measured time is positive: {GUIDELLM_RESAVE})"
    )


def test_no_validation_wording_reaches_the_user(tmp_path, json_file):
    """pydantic's 'Input should be ...' and its class names stay inside: every out-of-range figure above is in
    quotacalc's words."""
    texts = [
        "concurrency,prompt_tokens,output_tokens,itl_s\n200000,200,20,0.01\n",
        "concurrency,prompt_tokens,output_tokens,itl_s\n1,200000000000,20,0.01\n",
        "concurrency,prompt_tokens,output_tokens,itl_s\n1,200,20,-1\n",
    ]
    for number, text in enumerate(texts):
        line = _error(read_benchmark, _write(tmp_path, f"b{number}.csv", text)).one_line()
        assert "Input should" not in line and "BenchmarkPoint" not in line and "greater than" not in line, line
    model = _error(read_benchmark, json_file({**VLLM_RESULT, "model_id": "m" * 1001})).one_line()
    assert model.endswith("model_id: is longer than 1,000 characters (the model's name, as the engine served it)"), (
        model
    )


# --------------------------------------------------------------------------- a plan's calibration section


def test_an_empty_pool_calibration_section_says_to_delete_it_or_calibrate_again(run_cli, tmp_path):
    """No flag gives a calibration key: the fix is to drop the section or let calibrate --write it again."""
    text = (EXAMPLES.parent / "platform.yaml").read_text(encoding="utf-8")
    assert text.count("    replicas: 6\n") == 1
    plan = tmp_path / "platform.yaml"
    plan.write_text(text.replace("    replicas: 6\n", "    replicas: 6\n    calibration: {}\n"), encoding="utf-8")
    code, out, err = run_cli("check", plan)
    assert (code, out) == (EXIT_INVALID_INPUT, "")
    assert err == (
        f"quotacalc: error: {plan}: pools[0].calibration.quotacalc_version: is required (delete the calibration "
        f"section, or re-run quotacalc calibrate --pool shared --write {plan})\n"
    )


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({}, "calibration.quotacalc_version: is required"),
        ([], "calibration: must be a mapping"),
        ({"quotacalc_version": 1}, "calibration.quotacalc_version: must be a string, got 1"),
    ],
    ids=["empty", "list", "number-version"],
)
def test_a_flat_plan_s_calibration_section_error(section, expected):
    """The helper a flat plan's reader (inputs/deployment.py) is to call, as pool_calibration does."""
    from pydantic import ValidationError

    from quotacalc.core.calibrate import CalibrationProvenance
    from quotacalc.inputs.plan import calibration_section_error

    with pytest.raises(ValidationError) as caught:
        CalibrationProvenance.model_validate(section)
    error = calibration_section_error(caught.value, source="plan.yaml", prefix="calibration.")
    assert (error.one_line(), error.exit_code) == (
        f"plan.yaml: {expected} (delete the calibration section, or re-run quotacalc calibrate --write plan.yaml)",
        EXIT_INVALID_INPUT,
    )


# --------------------------------------------------------------------------- calibrate's own wording


def test_calibrate_counts_its_points_in_words(run_cli, tmp_path):
    one = _write(tmp_path, "one.csv", "concurrency,prompt_tokens,output_tokens,ttft_s,itl_s\n1,200,200,0.05,0.02\n")
    code, out, _ = run_cli(*CALIBRATE, one)
    # One run gives a TTFT and an ITL: two figures, both listed below the title.
    title = " ".join(out.split("\n\n")[0].split())
    assert code == 0 and title.startswith(
        "Calibration of Llama-3.3-70B-Instruct on 4× h100-sxm (1 benchmark run, 2 measured figures)"
    ), out
    log = _write(tmp_path, "serve.log", "GPU KV cache size: 646,503 tokens\nAvailable KV cache memory: 40.55 GiB\n")
    code, out, _ = run_cli("calibrate", EXAMPLES.parent / "llama-3.3-70b-h100.yaml", "--log", log)
    assert code == 0 and out.splitlines()[0] == "Calibration of Llama-3.3-70B-Instruct on 4× h100-sxm (KV pool only)"
