"""What an op's recorded ``Input Dims`` may hold for the FLOP and byte formulas to read it
(profkit.classify.flops, profkit.classify.traffic).

The profiler writes each argument's shape: a list of ints for a tensor, ``[]`` for a scalar,
a list of shapes for a TensorList (400,441 ops of the public traces and the samples, none
with anything else or a list longer than 20). A hostile or corrupt value must cost only
its op, so anything else is refused before a formula sees it.
"""

from __future__ import annotations

MAX_SHAPE_DIMS = 64  # dimensions of one recorded shape (real ones: up to ~8; numpy's cap)
_NUMBER = (int, float)


def readable_dims(dims: object) -> bool:
    """Whether an op's ``Input Dims`` is what the formulas read: a list whose arguments are
    each a list of numbers (a shape of at most :data:`MAX_SHAPE_DIMS`; ``[]`` for a scalar)
    or a list of such lists (a TensorList). A value that is anything else costs its op:
    text or lists inside a shape would be repeated by the formulas' products (``"a" * 10**9``
    allocates a GB), and the product of thousands of huge dimensions takes minutes."""
    if not isinstance(dims, list):
        return False
    for arg in dims:
        if not isinstance(arg, list):
            return False
        if all(isinstance(x, _NUMBER) for x in arg):
            if len(arg) > MAX_SHAPE_DIMS:
                return False
        elif not all(isinstance(t, list) and len(t) <= MAX_SHAPE_DIMS
                     and all(isinstance(x, _NUMBER) for x in t) for t in arg):
            return False
    return True
