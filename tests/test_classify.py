"""The communication-kernel list: what each pattern must and must not match."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.classify import (
    NamePattern,
    communication_name_mask,
    communication_of,
    is_communication,
)

COMMUNICATION = [
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)",
    "void (anonymous namespace)::multimem_all_reduce_kernel<__nv_bfloat16, 8, 4>(...)",
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(...)",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)",
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, ...)",
    "void deep_ep::internode_ll::combine<false, 7168>(void*, ...)",
    "rccl_AllReduce_kernel",
]
COMPUTE = [
    "volta_sgemm_128x64_nn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(...)",
    "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>",
    "void moe::dispatch_tokens_kernel(...)",  # a model's own dispatch, not a collective
    "triton_poi_fused_add_0",
    "Memcpy DtoD (Device -> Device)",
]


@pytest.mark.parametrize("name", COMMUNICATION)
def test_communication_names(name: str) -> None:
    assert is_communication(name)


@pytest.mark.parametrize("name", COMPUTE)
def test_compute_names(name: str) -> None:
    assert not is_communication(name)


def test_mask_is_per_interned_name() -> None:
    mask = communication_name_mask(["aten::mm", COMMUNICATION[0], COMPUTE[0]])
    assert mask.tolist() == [False, True, False]


NAME_CHARS = "abcdefgABCDEFGklmnorsuvKLMNORSUV_0123456789:<>( )&.,ſKİı"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=NAME_CHARS, max_size=40))
def test_name_patterns_match_as_the_case_insensitive_regex(name: str) -> None:
    sources = [
        r"nccl|AllReduce|\bsend\b|send_?recv",
        r"Cijk_|CatArray|s16816|\bdot_kernel",
        r"(?:one|two)_shot|k\w*_(?:a|b)",
        r"[a-c]Kr",  # a character set: matched by the case-insensitive regex itself
    ]
    for source in sources:
        expected = re.compile(source, re.IGNORECASE).search(name) is not None
        assert NamePattern(source).search(name) == expected
        upper = name.upper()
        assert NamePattern(source).search(upper) == (
            re.compile(source, re.IGNORECASE).search(upper) is not None
        )


def test_patterns_that_lowering_could_change_are_left_to_the_regex() -> None:
    for source in (r"[A-Z]x", r"(?i)a", r"\x41", r"(a)\1", r"\N{LATIN SMALL LETTER A}"):
        assert NamePattern(source)._lowered is None
    assert NamePattern(r"\bFoo\W").search("a FOO!")
    assert NamePattern(r"\bFoo\W").search("a fOo-")
    assert not NamePattern(r"\bFoo\W").search("afoo!")


def test_communication_of_matches_only_the_names_used() -> None:
    names = ["aten::mm", COMMUNICATION[0], COMPUTE[0], COMMUNICATION[1]]
    ids = np.array([1, 2, 1, 3], dtype=np.int32)
    assert communication_of(names, ids).tolist() == [True, False, True, True]
    assert communication_of(names, np.zeros(0, dtype=np.int32)).tolist() == []
