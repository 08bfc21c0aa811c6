"""The built-in kernel-name patterns of each sub-class, and the sub-classes each class may take.

Plain data (no numpy), so that checking a user's rules (:mod:`profkit.classify.rules`) does not
load the classifier (:mod:`profkit.classify.events`), which compiles these patterns.
"""

from __future__ import annotations

from profkit import schema as S

# Compute sub-classes, tried in order (conv before gemm: implicit-gemm convolutions).
COMPUTE_RULES = (
    ("attention", r"flash|fmha|attention|attn|sdpa|_mha|mha_|paged|mla_|_mla|fused_moe_?attn"),
    ("conv", r"conv(?!ert)|implicit_?gemm|winograd|fprop|dgrad|wgrad"),  # not "convert"
    (
        "gemm",
        r"gemm|gemv|matmul|cutlass|cublas|xmma|wgmma|nvjet|cijk_|hipblaslt|triton_tem|"
        r"_mm_|bmm|splitk|s\d{3,4}gemm|ampere_.*_nn|sm\d+_.*tensorop",
    ),
    (
        "reduction",
        r"reduce|reduction|softmax|norm|sum_|mean|argmax|argmin|topk|sort|scan|cub::|"
        r"triton_red|triton_per|bn_|batch_norm|layer_norm|cross_entropy|nll_loss",
    ),
    (
        "elementwise",
        r"elementwise|vectorized|unrolled|pointwise|triton_poi|copy|fill|index|cat_?array|"
        r"gather|scatter|where|masked|activation|gelu|relu|silu|dropout|embedding|"
        r"distribution|rope|rotary|_cast|cast_|quant",
    ),
)

COLL_RULES = (
    ("all_reduce", r"all_?reduce|cross_device_reduce|quick_?reduce"),
    ("reduce_scatter", r"reduce_?scatter"),
    ("all_gather", r"all_?gather"),
    # DeepEP's dispatch / combine (and their notify kernels) exchange tokens all-to-all
    ("all_to_all", r"all_?to_?all|dispatch|combine|notify"),
    ("broadcast", r"broadcast|bcast"),
    ("send_recv", r"send|recv|p2p|batch_isend_irecv"),
    ("barrier", r"barrier"),
    ("reduce", r"reduce"),
    ("gather", r"gather"),
    ("scatter", r"scatter"),
)

MEMCPY_DIRECTIONS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "DtoA", "AtoD")


# Sub-classes each class may take (user rules are checked against them).
SUBCLASSES = {
    S.CLS_COMPUTE: tuple(label for label, _ in COMPUTE_RULES) + ("other",),
    S.CLS_COMMUNICATION: tuple(dict.fromkeys(label for label, _ in COLL_RULES)) + ("other",),
    S.CLS_MEMCPY: MEMCPY_DIRECTIONS + ("other",),
    S.CLS_MEMSET: ("memset",),
}
