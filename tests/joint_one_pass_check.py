"""Checks that the joint traced in the analysis run (tracing.analyze_tracing_joint, used
where pipeline._one_pass_training allows) is what the two-run path makes: the analysis
run on its own, then tracing.trace_joint. ``checking(real)`` wraps
``analyze_tracing_joint``: wherever it returns a joint, the two-run path is run on fresh
fake leaves and compared (metadata, signature, tangent reach, and the joint graph node by
node, its metadata included); a difference is raised, and noted in ``MISMATCHES``."""

from typing import Any

import torch

from aotgrad.core import tracing

#: (program name, what differs) for each joint that differed from the two-run path's
MISMATCHES: list[tuple[str, str]] = []
#: how many joints were traced in the analysis run and compared
COMPARED: list[int] = [0]


def describe_value(v: Any) -> Any:
    """A node's ``val``/``tensor_meta`` as what can be compared across traces."""
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), tuple(v.stride()), v.storage_offset(), v.dtype, v.device, v.requires_grad)
    if isinstance(v, (list, tuple)):
        return tuple(describe_value(x) for x in v)
    return repr(v)


def graph_rows(gm: torch.fx.GraphModule) -> list[tuple]:
    """Per node: name, op, target, arguments, and every meta entry (values described;
    ``seq_nr``, autograd's global sequence number, as its rank among the graph's: a second
    trace numbers the same nodes from where the counter stands)."""
    ranks = {k: r for r, k in enumerate(sorted({n.meta["seq_nr"] for n in gm.graph.nodes if "seq_nr" in n.meta}))}
    rows = []
    for n in gm.graph.nodes:
        meta = tuple(sorted(
            (k, describe_value(v) if k in ("val", "tensor_meta") else ranks[v] if k == "seq_nr" else repr(v))
            for k, v in n.meta.items()
        ))
        rows.append((n.name, n.op, str(n.target), str(n.args), str(n.kwargs), meta))
    return rows


def joint_difference(one: tuple, two: tuple) -> str | None:
    """What differs between (analysis, JointGraph) of the one-run and the two-run path."""
    (a1, j1), (a2, j2) = one, two
    if repr(a1.metadata) != repr(a2.metadata):
        return f"metadata:\n{a1.metadata!r}\n{a2.metadata!r}"
    if repr(a1.signature) != repr(a2.signature) or repr(j1.signature) != repr(j2.signature):
        return f"signature:\n{j1.signature!r}\n{j2.signature!r}"
    if j1.tangent_reach != j2.tangent_reach:
        return f"tangent reach {j1.tangent_reach} != {j2.tangent_reach}"
    if [describe_value(t) for t in j1.primals + j1.tangents] != [describe_value(t) for t in j2.primals + j2.tangents]:
        return "primals or tangents"
    if j1.graph.code != j2.graph.code:
        return f"joint code:\n{j1.graph.code}\n{j2.graph.code}"
    rows1, rows2 = graph_rows(j1.graph), graph_rows(j2.graph)
    for r1, r2 in zip(rows1, rows2, strict=True):
        if r1 != r2:
            return f"node {r1[0]}:\n{r1}\n{r2}"
    return None


def checking(real):
    """``analyze_tracing_joint`` that compares each joint it returns with the two-run path's."""

    def analyze_tracing_joint(program, analyze, fake_inputs, fake_mode):
        analysis, joint = real(program, analyze, fake_inputs, fake_mode)
        if joint is None:
            return analysis, joint
        fresh = tracing._primals(fake_inputs, fake_mode)
        separate = analyze(program, fresh)
        two = tracing.trace_joint(program, separate, fresh, fake_mode, None, grad_enabled=True)
        COMPARED[0] += 1
        why = joint_difference((analysis, joint), (separate, two))
        if why is not None:
            MISMATCHES.append((getattr(program, "__name__", repr(program)), why))
            raise AssertionError(f"joint traced in the analysis run differs: {why}")
        return analysis, joint

    return analyze_tracing_joint
