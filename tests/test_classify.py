"""The communication-kernel list: what each pattern must and must not match."""

from __future__ import annotations

import pytest

from gpuscope.classify import communication_name_mask, is_communication

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
