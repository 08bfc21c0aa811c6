"""Communication kernels by what they are: name families, the stream they run on, the CPU
range that launched them, user rules (file, pyproject.toml, cache key, map workers, CLI)
and the DeepSeek H800 training trace whose DeepEP kernels read as compute before."""

import json

import numpy as np
import pytest

from profkit import schema as S
from profkit.classify import events as classify
from profkit.classify.rules import Rules, load_file, load_rules, project_rules
from profkit.errors import UsageError
from profkit.run.cache import cache_key
from profkit.run.loader import load_run
from tests.conftest import PUBLIC_CORPUS
from tests.factories import kernel, launch, step, trace_doc, write_trace, x

COMM, COMPUTE = S.CLS_COMMUNICATION, S.CLS_COMPUTE


@pytest.fixture(autouse=True)
def _no_rules_left_behind():
    classify.use_rules(Rules())
    yield
    classify.use_rules(None)


def test_communication_families_and_their_collectives():
    names = {
        # DeepEP as DeepSeek's trace names it, and as the open-source DeepEP does
        "void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*, float*)": (COMM, "all_to_all"),
        "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8>(int4*)": (COMM, "all_to_all"),
        "void dpsk::ep::internode::cached_notify<false>(int, int, int)": (COMM, "all_to_all"),
        "void dpsk::ep::internode::notify_dispatch<false, 8>(int const*)": (COMM, "all_to_all"),
        "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*)": (COMM, "all_to_all"),
        "void deep_ep::internode_ll::combine<false, 7168>(void*)": (COMM, "all_to_all"),
        "void deep_ep::intranode::cached_notify_combine<8>(void**)": (COMM, "all_to_all"),
        "void nvshmemi_transfer_rma_kernel<(nvshmemi_op_t)0>(void*)": (COMM, "other"),
        "void mscclpp::allreduce_allpairs<__nv_bfloat16>(int4*)": (COMM, "all_reduce"),
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)": (COMM, "all_reduce"),
        "void sglang::cross_device_reduce_2stage<half, 8>(sglang::RankData*)": (COMM, "all_reduce"),
        "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 4>(float**)": (COMM, "all_reduce"),
        "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)":
            (COMM, "all_reduce"),
        "ucc_ec_cuda_executor_kernel(ucc_ec_cuda_executor*)": (COMM, "other"),
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)": (COMM, "other"),  # RCCL, MI300
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": (COMM, "all_gather"),
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": (COMM, "all_reduce"),
        # compute that must stay compute
        "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>": (COMPUTE, "gemm"),
        "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128>(__nv_bfloat16 const*)":
            (COMPUTE, "elementwise"),
        "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)": (COMPUTE, "reduction"),
        # cuDNN attention backward's helper (H200 GPT): no convolution, so no attention FLOPs
        "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int)":
            (COMPUTE, "other"),
        "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false>":
            (COMPUTE, "other"),
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc": (COMPUTE, "conv"),
    }
    got = classify.classify_gpu_names(np.array([S.KIND_KERNEL] * len(names)), np.array(list(names)))
    assert dict(zip(names, zip(got.classes, got.subclasses))) == names


def load(tmp_path, events, name="rank0.json"):
    path = write_trace(tmp_path / name, trace_doc(rank=0, world_size=1, events=events))
    return load_run(path, cache=False).ranks[0].events


def classes(ev) -> dict[str, tuple[str, str]]:
    k = ev[ev[S.KIND] == S.KIND_KERNEL]
    return {n: (c, s) for n, c, s in zip(k[S.NAME].astype(str), k[S.CLASS], k[S.SUBCLASS])}


def test_deepep_kernel_on_its_own_stream_and_unknown_kernels_beside_it(tmp_path):
    """Stream 27 runs a DeepEP combine (communication by name) and a kernel whose name says
    nothing: the stream is a communication stream, so that kernel is communication too and
    takes the stream's collective. The same unknown name on the compute stream 7, beside a
    GEMM, stays compute."""
    ev = load(tmp_path, [
        step(1, 0.0, 200.0),
        launch(1.0, 1.0, 1), kernel("void dpsk::ep::internode::combine<false, 8>(int4*)",
                                    10.0, 50.0, 1, stream=27),
        launch(2.0, 1.0, 2), kernel("ep_token_shuffle", 70.0, 5.0, 2, stream=27),
        launch(3.0, 1.0, 3), kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 10.0, 80.0, 3, stream=7),
        launch(4.0, 1.0, 4), kernel("ep_token_shuffle_local", 95.0, 5.0, 4, stream=7),
    ])
    assert classes(ev) == {
        "void dpsk::ep::internode::combine<false, 8>(int4*)": (COMM, "all_to_all"),
        "ep_token_shuffle": (COMM, "all_to_all"),
        "sm90_xmma_gemm_bf16bf16_bf16f32": (COMPUTE, "gemm"),
        "ep_token_shuffle_local": (COMPUTE, "other"),
    }


def test_kernels_launched_inside_communication_ranges(tmp_path):
    """DualPipe's "dispatch(F)" annotation launches an unnamed kernel (communication,
    all_to_all) and a GEMM (its name wins: compute); a kernel launched inside the
    c10d::allreduce_ op is an all_reduce; one launched after the range ended is not."""
    ev = load(tmp_path, [
        step(1, 0.0, 300.0),
        x("dispatch(F)", "user_annotation", 10.0, 20.0),
        launch(12.0, 1.0, 1), launch(14.0, 1.0, 2),
        x("c10d::allreduce_", "cpu_op", 40.0, 10.0),
        launch(42.0, 1.0, 3),
        launch(60.0, 1.0, 4),
        kernel("token_exchange_v2", 100.0, 10.0, 1, stream=9),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 100.0, 10.0, 2, stream=7),
        kernel("grad_sync_kernel", 120.0, 10.0, 3, stream=9),
        kernel("custom_fused_thing", 140.0, 10.0, 4, stream=7),
    ])
    assert classes(ev) == {
        "token_exchange_v2": (COMM, "all_to_all"),
        "sm90_xmma_gemm_bf16bf16_bf16f32": (COMPUTE, "gemm"),
        "grad_sync_kernel": (COMM, "all_reduce"),
        "custom_fused_thing": (COMPUTE, "other"),
    }


def test_launches_inside_ranges_as_searched_one_by_one():
    """comm._launches_inside (all ranges at once, by one key per launch) against its
    definition: per range, the launches of its thread with start <= ts <= end, as slices of
    launches sorted by (thread, time); and its range-by-range path where keys do not fit."""
    from profkit.classify import comm

    rng = np.random.default_rng(43)
    for trial in range(200):
        n, m = int(rng.integers(0, 60)), int(rng.integers(0, 30))
        span = int(rng.choice([50, 10**6, 2**61]))
        l_thread = rng.integers(0, 4, n) * (1 << 32) + rng.integers(0, 3, n)
        l_ts = rng.integers(-span // 2, span // 2, n)
        order = np.lexsort((l_ts, l_thread))
        l_thread, l_ts = l_thread[order], l_ts[order]
        r_thread = rng.integers(0, 5, m) * (1 << 32) + rng.integers(0, 3, m)
        r_start = rng.integers(-span // 2, span // 2, m)
        r_end = r_start + rng.integers(0, max(span // 4, 1), m)
        first, last = comm._launches_inside(l_thread, l_ts, r_thread, r_start, r_end)
        for i in range(m):
            inside = {j for j in range(n) if l_thread[j] == r_thread[i]
                      and r_start[i] <= l_ts[j] <= r_end[i]}
            assert set(range(first[i], last[i])) == inside, (trial, i)


def test_communication_range_names_match_in_any_case(tmp_path):
    """The range names match whatever their case ("Combine(B)", "AllReduce grads", as the
    rule's regex is written case-insensitive); a word that only contains one ("Redispatch")
    does not."""
    ev = load(tmp_path, [
        step(1, 0.0, 300.0),
        x("Combine(B)", "user_annotation", 10.0, 20.0), launch(12.0, 1.0, 1),
        x("AllReduce grads", "user_annotation", 40.0, 10.0), launch(42.0, 1.0, 2),
        x("Redispatch", "user_annotation", 60.0, 10.0), launch(62.0, 1.0, 3),
        kernel("token_exchange_v2", 100.0, 10.0, 1, stream=9),
        kernel("grad_sync_kernel", 120.0, 10.0, 2, stream=9),
        kernel("custom_fused_thing", 140.0, 10.0, 3, stream=7),
    ])
    assert classes(ev) == {
        "token_exchange_v2": (COMM, "all_to_all"),
        "grad_sync_kernel": (COMM, "all_reduce"),
        "custom_fused_thing": (COMPUTE, "other"),
    }


DEEPSEEK = PUBLIC_CORPUS / "deepseek_train_h800" / "train.json"


@pytest.mark.skipif(not DEEPSEEK.exists(), reason=f"public corpus not found at {PUBLIC_CORPUS}")
def test_deepseek_h800_training_trace():
    """DeepSeek's published H800 trace (github deepseek-ai/profile-data): its DeepEP kernels
    (dpsk::ep::internode::*, 46% of kernel time) read 0% communication before. Expected
    shares computed here from the raw JSON, independently of profkit."""
    raw = [e for e in json.loads(DEEPSEEK.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    total = sum(e["dur"] for e in raw)
    deepep = [e for e in raw if "dpsk::ep::" in e["name"]]
    run = load_run(DEEPSEEK, cache=False)
    rd = run.ranks[0]
    k = rd.events[rd.events[S.KIND] == S.KIND_KERNEL]
    comm = k[k[S.CLASS] == COMM]
    assert comm[S.DUR_NS].sum() / k[S.DUR_NS].sum() == pytest.approx(
        sum(e["dur"] for e in deepep) / total, rel=1e-6)
    assert set(comm[S.SUBCLASS]) == {"all_to_all"} and set(comm[S.STREAM]) == {27}
    assert len(rd.collectives) == len(deepep)  # the collectives view sees every one
    assert set(rd.collectives[S.COLL_NAME]) == {"all_to_all"}


# --- user rules ----------------------------------------------------------------------------
RULES = """
[[rule]]
pattern = "^my_a2a_kernel"
class = "communication"
subclass = "all_to_all"

[[rule]]
pattern = "^my_"
class = "compute"
subclass = "gemm"
"""
MY_KERNELS = [step(1, 0.0, 100.0), launch(1.0, 1.0, 1), launch(2.0, 1.0, 2), launch(3.0, 1.0, 3),
              kernel("my_a2a_kernel_v2", 10.0, 20.0, 1, stream=9),
              kernel("my_tile_kernel", 10.0, 20.0, 2),
              kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 40.0, 5.0, 3,
                     stream=9)]
EXPECTED = {"my_a2a_kernel_v2": (COMM, "all_to_all"), "my_tile_kernel": (COMPUTE, "gemm"),
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)": (COMM, "other")}


def test_rules_file_applies_in_order_at_ingest(tmp_path):
    (tmp_path / "rules.toml").write_text(RULES)
    classify.use_rules(load_file(tmp_path / "rules.toml"))
    assert classes(load(tmp_path, MY_KERNELS)) == EXPECTED


def test_project_rules_from_pyproject_found_upward(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    (project / "src" / "deep").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n\n" + RULES.replace("[[rule]]", "[[tool.profkit.classify.rule]]"))
    monkeypatch.chdir(project / "src" / "deep")
    classify.use_rules(None)  # as a library user: the project's rules, read on first use
    assert classes(load(tmp_path, MY_KERNELS)) == EXPECTED
    assert load_rules(None, project) == project_rules(project / "src")
    assert project_rules(tmp_path) == Rules()  # no pyproject.toml above tmp_path's own


def test_rules_are_part_of_the_ingest_cache_key(tmp_path):
    path = write_trace(tmp_path / "run" / "rank0.json", trace_doc(rank=0, world_size=1,
                                                                  events=MY_KERNELS))
    plain_key = cache_key(path)
    before = classes(load_run(path).ranks[0].events)  # cached under no rules
    (tmp_path / "rules.toml").write_text(RULES)
    classify.use_rules(load_file(tmp_path / "rules.toml"))
    assert cache_key(path) != plain_key
    assert before["my_tile_kernel"] == (COMPUTE, "other")
    assert classes(load_run(path).ranks[0].events) == EXPECTED  # not the cached tables


def test_map_workers_classify_with_the_clients_rules(tmp_path):
    """A worker (another process, another working directory) gets the rules in its task."""
    from profkit.analyzers.executor import FileTask, plan_tasks, summarize_file

    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=1, events=MY_KERNELS))
    (tmp_path / "rules.toml").write_text(RULES)
    rules = load_file(tmp_path / "rules.toml")
    classify.use_rules(rules)
    assert plan_tasks(tmp_path, {}, [path], False, None)[0].rules == rules
    classify.use_rules(Rules())  # the worker's own state knows nothing of them
    res = summarize_file(FileTask(str(path), str(tmp_path), {}, use_cache=False, rules=rules))
    totals = res.summary.kernels["kernel_totals"]
    got = {n: (c, s) for n, c, s in zip(totals[S.NAME], totals[S.CLASS], totals[S.SUBCLASS])}
    assert got == EXPECTED


@pytest.mark.parametrize("rule, problem", [
    ('pattern = "^x"\nclass = "comms"', "rule 1 (pattern '^x'): unknown class 'comms'"),
    ('pattern = "^(x"\nclass = "compute"', "rule 1 (pattern '^(x'): bad regular expression"),
    ('pattern = "^x"\nclass = "communication"\nsubclass = "alltoall"',
     "unknown communication subclass 'alltoall'"),
    ('pattern = "^x"\nclas = "compute"', "unknown key clas"),
    ('class = "compute"', "rule 1: needs a pattern"),
])
def test_bad_rules_name_the_file_and_the_rule(tmp_path, rule, problem):
    (tmp_path / "rules.toml").write_text(f"[[rule]]\npattern = \"^ok\"\nclass = \"compute\"\n\n"
                                         f"[[rule]]\n{rule}\n")
    with pytest.raises(UsageError) as info:
        load_file(tmp_path / "rules.toml")
    assert str(info.value).startswith(f"{tmp_path / 'rules.toml'}: ")
    assert problem.replace("rule 1", "rule 2") in str(info.value)


def test_unreadable_rules_files(tmp_path):
    (tmp_path / "bad.toml").write_text("[[rule]\npattern = ")
    with pytest.raises(UsageError, match="bad.toml: not valid TOML"):
        load_file(tmp_path / "bad.toml")
    with pytest.raises(UsageError, match="missing.toml: cannot read the rules file"):
        load_file(tmp_path / "missing.toml")


def test_cli_classify_option_and_its_errors(tmp_path, capsys):
    from profkit.cli import main

    path = write_trace(tmp_path / "run" / "rank0.json", trace_doc(rank=0, world_size=1,
                                                                  events=MY_KERNELS))
    (tmp_path / "rules.toml").write_text(RULES)
    out = tmp_path / "a.json"
    assert main(["analyze", str(path.parent), "--classify", str(tmp_path / "rules.toml"),
                 "--format", "json", "-o", str(out)]) == 0
    # my_a2a_kernel_v2 [10, 30) us is communication now, under my_tile_kernel [10, 30): 20 of
    # the 25 us of communication overlap compute (without the rules: 0 of 5)
    assert json.loads(out.read_text())["ranks"][0]["comm_overlap_frac"] == pytest.approx(0.8)
    (tmp_path / "bad.toml").write_text('[[rule]]\npattern = "^x"\nclass = "network"\n')
    bad = tmp_path / "b.json"
    assert main(["analyze", str(path.parent), "--classify", str(tmp_path / "bad.toml"),
                 "-o", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'bad.toml'}: rule 1 (pattern '^x'): unknown class 'network'" in err
    assert not bad.exists()


def test_cli_mfu_options(tmp_path):
    """--flops-per-step 2e9 in the 100 us step: 20 TFLOP/s, of --peak-tflops 1000: MFU 2%."""
    from profkit.cli import main

    # compute-bound (a GEMM fills 95 of the 100 us step): MFU advice is given only there
    busy = [step(1, 0.0, 100.0), launch(1.0, 1.0, 1), kernel("my_tile_kernel", 5.0, 95.0, 1)]
    path = write_trace(tmp_path / "run" / "rank0.json", trace_doc(rank=0, world_size=1,
                                                                  events=busy))
    out = tmp_path / "a.json"
    assert main(["analyze", str(path.parent), "--flops-per-step", "2e9", "--peak-tflops",
                 "1000", "--format", "json", "-o", str(out)]) == 0
    mfu = [f for f in json.loads(out.read_text())["findings"] if f["category"] == "mfu"]
    assert [(f["severity"], f["evidence"]["mfu"]) for f in mfu] == [("warning", pytest.approx(0.02))]
    with pytest.raises(SystemExit) as info:
        main(["analyze", str(path.parent), "--peak-tflops", "-5"])
    assert info.value.code == 2
