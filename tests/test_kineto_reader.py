"""The Kineto reader on the real corpus: every generation, vendor and edge case."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from corpus import corpus
from gpuscope.errors import CorruptInputError, EmptyTraceError, InputError, UnknownFormatError
from gpuscope.model import CopyDirection, Kind
from gpuscope.readers import load


def counts(path: Path) -> dict[str, int]:
    trace = load(path).traces[0]
    return {k.name: int((trace.events.kind == k).sum()) for k in Kind}


def test_df_index_resolver_counts_match_the_file() -> None:
    path = corpus("kineto/hta/df_index_resolver/df_index_resolver.json.gz")
    trace = load(path).traces[0]
    raw = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    by_cat: dict[str, int] = {}
    for e in raw:
        if e.get("ph") == "X":
            by_cat[e["cat"]] = by_cat.get(e["cat"], 0) + 1
    ev = trace.events
    assert int((ev.kind == Kind.KERNEL).sum()) == by_cat["kernel"] == 19_370
    assert int((ev.kind == Kind.MEMCPY).sum()) == by_cat["gpu_memcpy"]
    assert int((ev.kind == Kind.MEMSET).sum()) == by_cat["gpu_memset"]
    assert int((ev.kind == Kind.RUNTIME).sum()) == by_cat["cuda_runtime"]
    assert int((ev.kind == Kind.CPU_OP).sum()) == by_cat["cpu_op"]
    assert (trace.rank, trace.world_size) == (1, 2)
    assert trace.devices[1].name == "Tesla V100-SXM2-32GB"
    assert trace.devices[1].num_sms == 80
    assert [s.number for s in trace.steps] == [2, 3, 4, 5, 6]
    assert trace.schema == "kineto-int-us"
    # Every device event is linked to its launch, and back.
    device_rows = np.flatnonzero(ev.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))
    assert np.all(ev.link[device_rows] >= 0)
    launchers = ev.link[device_rows]
    assert np.all(ev.kind[launchers] == Kind.RUNTIME)
    assert np.all(ev.correlation[launchers] == ev.correlation[device_rows])
    # Integer microseconds become exact nanoseconds.
    first_kernel = ev.start_ns[ev.kind == Kind.KERNEL].min()
    assert first_kernel == 1_669_783_687_389_324_000


def test_rows_are_sorted_and_times_are_nanoseconds() -> None:
    ev = load(corpus("kineto/tracelens/mi300x_bert-small_inference.json.gz")).traces[0].events
    assert np.all(np.diff(ev.start_ns) >= 0)
    assert ev.start_ns.dtype == np.int64
    # Float µs with three decimals land on whole nanoseconds: 2204338330237.582 µs.
    assert 2_204_338_330_237_582 in set(ev.start_ns.tolist())


def test_2021_schema_capitalised_categories_and_compute_properties() -> None:
    trace = load(corpus("kineto/kineto-2021/v100_tiny_oldest_schema.json")).traces[0]
    ev = trace.events
    assert trace.schema == "kineto-2021"
    assert int((ev.kind == Kind.KERNEL).sum()) == 30
    assert int((ev.kind == Kind.MEMCPY).sum()) == 2
    assert int((ev.kind == Kind.CPU_OP).sum()) == 179
    assert trace.devices[0].name == "Tesla V100-DGXS-32GB"
    assert trace.devices[0].compute_capability == "7.0"
    copies = ev.kind == Kind.MEMCPY
    assert set(ev.copy_direction[copies].tolist()) == {CopyDirection.H2D}
    assert ev.pageable[copies].all()  # "Memcpy HtoD (Pageable -> Device)"
    assert set(ev.stream[ev.kind == Kind.KERNEL].tolist()) == {7}  # tid was "stream 7"
    assert np.all(ev.link[ev.of_kind(Kind.KERNEL, Kind.MEMCPY)] >= 0)


def test_rocm_device_index_maps_to_device_properties() -> None:
    trace = load(corpus("kineto/tracelens/mi300x_bert-small_inference.json.gz")).traces[0]
    assert trace.device_ids == [2]  # ROCm: pid / device arg is the agent index
    assert trace.devices[2].name == "AMD Instinct MI300X VF"
    assert trace.devices[2].vendor == "amd"
    assert trace.devices[2].num_sms == 304
    assert int((trace.events.kind == Kind.PYTHON).sum()) == 1389


def test_rocm_empty_device_name_is_unknown_not_guessed() -> None:
    trace = load(corpus("kineto/tracelens/mi300x_vllm_decode_hipgraph.json.gz")).traces[0]
    assert trace.devices[2].name is None
    assert trace.devices[2].vendor == "amd"


def test_mtia_device_events_and_flow_links() -> None:
    trace = load(corpus("kineto/hta/mtia_inference_trace/mtia_inference_rank_0.json.gz")).traces[0]
    ev = trace.events
    assert trace.devices[17].vendor == "mtia"
    assert int((ev.kind == Kind.KERNEL).sum()) == 436
    assert int((ev.kind == Kind.MEMCPY).sum()) == 877  # dma_* events
    # No correlation ids on MTIA device events: links come from ac2g flows.
    assert int((ev.link[ev.of_kind(Kind.KERNEL, Kind.MEMCPY)] >= 0).sum()) > 900


def test_folder_of_ranks_reads_every_rank_in_order() -> None:
    job = load(corpus("kineto/param-dlrm-8rank"))
    assert [t.rank for t in job.traces] == list(range(8))
    assert all(t.world_size == 8 for t in job.traces)
    assert [t.device_ids for t in job.traces] == [[r] for r in range(8)]


def test_b200_collectives_not_named_nccl_are_communication() -> None:
    from gpuscope.classify import communication_name_mask

    trace = load(corpus("kineto/tracelens/b200_vllm_moe_fp8_rank0of8.json.gz")).traces[0]
    ev = trace.events
    comm = (ev.kind == Kind.KERNEL) & communication_name_mask(trace.names)[ev.name_id]
    names = {trace.names[i] for i in np.unique(ev.name_id[comm])}
    assert any("multimem_all_reduce" in n for n in names)
    assert any(n.startswith("ncclDevKernel_AllGather") for n in names)
    assert (trace.rank, trace.world_size) == (0, 8)


def test_record_shapes_are_kept_for_cpu_ops() -> None:
    trace = load(corpus("kineto/tracelens/mi300x_bert-small_inference.json.gz")).traces[0]
    ev = trace.events
    row = next(r for r in ev.extra if trace.name(r) == "aten::slice")
    assert ev.extra[row]["input_dims"][0] == [1, 512]


@pytest.mark.parametrize(
    "relative",
    [
        "kineto/tracelens/mi300x_resnet_ddp_rank0of8.json.gz",
        "kineto/tracelens/mi300x_torch_compile_triton.json.gz",
        "kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz",
        "kineto/hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",
    ],
)
def test_traces_hta_fails_on_are_read(relative: str) -> None:
    trace = load(corpus(relative)).traces[0]
    assert trace.device_ids
    assert int(trace.events.of_kind(Kind.KERNEL).sum()) > 0


# --- bad input ---------------------------------------------------------------------------------


def test_truncated_trace_is_read_up_to_its_last_whole_event(tmp_path: Path) -> None:
    source = corpus("kineto/param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json.gz")
    data = gzip.decompress(source.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    whole = load(source).traces[0]
    trace = load(cut).traces[0]
    assert 0 < len(trace.events) < len(whole.events)
    assert len(trace.warnings) == 1
    assert "ends mid-write" in trace.warnings[0] and "cut.json" in trace.warnings[0]


def test_a_trace_cut_before_its_gpu_events_says_so(tmp_path: Path) -> None:
    source = corpus("kineto/param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json.gz")
    raw = source.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])  # this writer puts the CPU events first
    with pytest.raises(EmptyTraceError, match="in the part written before the file was cut off"):
        load(cut)


def test_truncated_gzip_is_read_with_a_warning(tmp_path: Path) -> None:
    source = corpus("kineto/param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json.gz")
    raw = source.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: int(len(raw) * 0.7)])
    trace = load(cut).traces[0]
    assert trace.warnings and "ends mid-write" in trace.warnings[0]


@pytest.mark.parametrize(
    ("content", "error", "message"),
    [
        (b"", EmptyTraceError, "empty"),
        (b"hello, world", UnknownFormatError, "not a profiler trace"),
        (b'{"foo": 1}', UnknownFormatError, "not a profiler trace"),
        (b'{"traceEvents": []}', EmptyTraceError, "no events"),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", '
            b'"pid": 1, "tid": 1, "ts": 1, "dur": 2}]}',
            EmptyTraceError,
            "CPU events only",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", '
            b'"pid": 1, "tid": 1, "ts": 1, "dur": 2}]}',
            EmptyTraceError,
            "GPU activity was not recorded",
        ),
        (b"\x1f\x8b\x08\x00garbage-garbage-garbage", CorruptInputError, "corrupt gzip"),
        (b'{"traceEvents": [{"ph": "X", ', CorruptInputError, "before its first whole event"),
    ],
)
def test_bad_input_names_the_file_and_the_problem(
    tmp_path: Path, content: bytes, error: type[InputError], message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(error) as raised:
        load(path)
    assert str(path) in str(raised.value)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_missing_path_and_nsys_report(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load(tmp_path / "nope.json")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"x")
    with pytest.raises(UnknownFormatError, match="nsys export --type sqlite"):
        load(report)


def test_folder_without_traces(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="empty"):
        load(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UnknownFormatError, match="no readable trace"):
        load(tmp_path)


def test_folder_of_job_folders_says_what_it_found_and_what_to_pass(tmp_path: Path) -> None:
    for job in ("job_a", "job_b"):
        (tmp_path / job).mkdir()
    with pytest.raises(InputError) as raised:
        load(tmp_path)
    message = str(raised.value)
    assert "2 sub-folders (job_a, job_b)" in message
    assert "one job's folder" in message and f"gpuscope fleet '{tmp_path}/*'" in message


def test_a_cpu_only_rank_among_gpu_ranks_is_left_out_with_a_warning(tmp_path: Path) -> None:
    cpu_only = corpus("kineto/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    ranks = sorted(corpus("kineto/param-dlrm-8rank").glob("worker[01]_*"))
    for path in (cpu_only, *ranks):
        (tmp_path / path.name).symlink_to(path)
    job = load(tmp_path)
    assert [t.rank for t in job.traces] == [0, 1]
    assert job.warnings == [
        f"{tmp_path / cpu_only.name}: left out, no GPU activity: the trace holds CPU events only"
    ]
    (tmp_path / ranks[0].name).unlink()
    (tmp_path / ranks[1].name).unlink()
    with pytest.raises(EmptyTraceError, match="CPU events only"):  # nothing else to diagnose
        load(tmp_path)


@pytest.mark.parametrize("events_first", [True, False])
def test_piecewise_reading_equals_whole_document_reading(
    tmp_path: Path, events_first: bool
) -> None:
    """Whatever the key order (events before a deviceProperties list of objects, or after), the
    piecewise reader gives the same trace as decoding the whole document."""
    from gpuscope.readers import kineto
    from gpuscope.testing import generator

    doc = generator.generate(generator.GeneratorConfig(seed=3, steps=3)).document
    events = doc.pop("traceEvents")
    doc["deviceProperties"] = [dict(doc["deviceProperties"][0], id=i) for i in range(2)]
    ordered = {"traceEvents": events, **doc} if events_first else {**doc, "traceEvents": events}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(ordered, separators=(",", ":")))
    streamed = kineto._read_streamed(path)
    whole = kineto.read(path, path.read_bytes())
    assert len(streamed.events) == len(whole.events) > 0
    assert np.array_equal(streamed.events.start_ns, whole.events.start_ns)
    assert np.array_equal(streamed.events.link, whole.events.link)
    assert streamed.names == whole.names
    assert streamed.devices == whole.devices and streamed.rank == whole.rank


def test_odd_argument_types_fall_back_to_the_lenient_decoder(tmp_path: Path) -> None:
    """A writer that puts ids in strings still gets its launches linked and streams read."""
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 10,
                "dur": 5,
                "args": {"correlation": "12", "External id": 3},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": 20,
                "dur": 4,
                "args": {"correlation": "12", "stream": "7", "device": 0, "grid": [2, 1, 1]},
            },
        ]
    }
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    trace = load(path).traces[0]
    ev = trace.events
    kernel = int(np.flatnonzero(ev.kind == Kind.KERNEL)[0])
    assert ev.stream[kernel] == 7 and ev.correlation[kernel] == 12
    assert trace.name(int(ev.link[kernel])) == "cudaLaunchKernel"
    assert ev.grid_blocks[kernel] == 2
