"""The calling convention (aotgrad.core.signature.GraphSignature) against the graphs it describes.

Every compiled entry's signature must say exactly what each forward output and backward input
is; these tests read the graphs the compilers received and check them position by position,
and check that the stages refuse graphs that disagree with it.
"""

from __future__ import annotations

import pytest
import torch
import torch.fx
from eager_compare import check

import aotgrad
from aotgrad.compilers import nop
from aotgrad.config import AotConfig
from aotgrad.core.signature import ForwardOutput, GraphSignature, is_tangent
from aotgrad.module import aot_module
from aotgrad.partition import default_partition, min_cut_rematerialization_partition


def _readme_example(buf, x):
    buf.add_(1)
    return x.t(), (x * buf).sum()


def _outputs(gm: torch.fx.GraphModule) -> list:
    (out,) = gm.graph.find_nodes(op="output")
    return list(out.args[0])


def test_readme_example_signature_names_every_output():
    cf = aotgrad.aot_function(_readme_example, nop)
    buf, x = torch.zeros(2, 3), torch.randn(2, 3, requires_grad=True)
    cf(buf, x)
    sig = cf.entries[0].signature
    # the view x.t() is no forward output (the runtime rebuilds it off x); the sum is
    assert sig.mutated_inputs == (0,) and sig.user_outputs == (1,)
    assert sig.num_intermediate_bases == 0
    assert sig.tangents == (1,)
    assert sig.forward_output(0) == (ForwardOutput.mutated_input, 0)
    assert sig.forward_output(1) == (ForwardOutput.user_output, 1)
    fw = cf.entries[0].graphs["forward"]
    assert len(_outputs(fw)) == sig.num_forward_graph_outputs
    for p in range(sig.num_forward_outputs, sig.num_forward_graph_outputs):
        assert sig.forward_output(p)[0] is ForwardOutput.saved_tensor
    text = repr(sig)
    assert "0  mutated_input      new value of graph input 0" in text
    assert "1  user_output        user output 1  <- tangent 0" in text
    assert f"{sig.num_saved_tensors} saved tensors" in text
    with pytest.raises(IndexError):
        sig.forward_output(sig.num_forward_graph_outputs)


@pytest.mark.parametrize("partition_fn", [default_partition, min_cut_rematerialization_partition])
def test_backward_graph_follows_the_signature(partition_fn):
    def f(a, b):
        h = (a * b).relu()
        return h.view(-1), h.sum(), 3, h.exp()

    cf = aotgrad.aot_function(f, nop, partition_fn=partition_fn)
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    cf(a, b)
    entry = cf.entries[0]
    sig = entry.signature
    # h.view(-1) views the intermediate h, which is not returned: h is an extra output
    # (after the non-aliased user outputs; the view and the int 3 are none) and takes a tangent
    assert sig.user_outputs == (1, 3) and sig.num_intermediate_bases == 1
    assert sig.tangents == (0, 1, 2)
    bw = entry.graphs["backward"]
    placeholders = bw.graph.find_nodes(op="placeholder")
    assert len(placeholders) == sig.num_backward_inputs
    tangent_flags = [is_tangent(n) for n in placeholders]
    first = sig.backward_tangent_slice.start
    assert tangent_flags == [False] * first + [True] * len(sig.tangents)
    assert len(_outputs(bw)) == sig.num_graph_inputs == 2
    check(f, lambda: (torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)))


def test_intermediate_bases_sit_after_user_outputs():
    def f(x):
        y = x * 2
        return y[0], y[1:].t()

    cf = aotgrad.aot_function(f, nop)
    cf(torch.randn(3, 2, requires_grad=True))
    sig = cf.entries[0].signature
    assert sig.num_intermediate_bases == 1
    base = sig.intermediate_base_slice.start
    assert sig.forward_output(base) == (ForwardOutput.intermediate_base, 0)
    assert sig.tangents == (base,)
    check(f, lambda: (torch.randn(3, 2, requires_grad=True),))


def test_kept_inference_mutations_leave_the_signature():
    def f(buf, x):
        buf.mul_(2)
        return x + buf

    cf = aotgrad.aot_function(f, nop, keep_inference_input_mutations=True)
    with torch.no_grad():
        cf(torch.ones(3), torch.randn(3))
    sig = cf.entries[0].signature
    assert sig.mutated_inputs == () and sig.tangents == ()
    gm = cf.entries[0].graphs["inference"]
    assert len(_outputs(gm)) == sig.num_forward_outputs == 1
    assert "copy_" in gm.code
    check(f, lambda: (torch.ones(3), torch.randn(3)), grad_mode=False, compiled=aotgrad.aot_function(f, nop, keep_inference_input_mutations=True))


def test_tangents_are_recognised_by_tag_not_by_name():
    def f(x):
        return x.sin()

    cf = aotgrad.aot_function(f, nop)
    cf(torch.randn(3, requires_grad=True))
    joint = cf.entries[0].joint_graph
    nodes = joint.graph.find_nodes(op="placeholder")
    assert [is_tangent(n) for n in nodes] == [False, True]
    nodes[1].name = "renamed"  # a compiler may rename; the tag stays
    assert is_tangent(nodes[1])
    graph = torch.fx.Graph()  # a graph traced elsewhere follows torch's naming
    assert is_tangent(graph.placeholder("tangents_1")) and not is_tangent(graph.placeholder("primals_1"))


def test_stages_refuse_graphs_that_disagree_with_the_signature():
    sig = GraphSignature(num_graph_inputs=2, mutated_inputs=(1,), user_outputs=(0,), num_intermediate_bases=0)
    with pytest.raises(AssertionError, match="2 non-aliased user outputs where the signature has 1"):
        sig.pack_forward(["m"], ["u", "v"], [])
    graph = torch.fx.Graph()
    a = graph.placeholder("primals_1")
    graph.output([a])
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(AssertionError, match="returns 1 values, the signature 2"):
        sig.check_forward_graph(gm, saved=False)
    with pytest.raises(AssertionError, match="takes 1 inputs, the signature 0"):
        sig.check_backward_graph(gm)


def test_partitioner_returning_a_wrong_split_is_caught():
    def drops_a_saved_value(joint, joint_inputs, *, num_fwd_outputs):
        fw, bw = default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs)
        (out,) = fw.graph.find_nodes(op="output")
        out.args = (list(out.args[0])[:-1],)
        fw.recompile()
        return fw, bw

    cf = aotgrad.aot_function(lambda x: x.sin(), nop, partition_fn=drops_a_saved_value)
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(AssertionError, match="backward graph takes"):
        cf(x)


def test_outputs_aliasing_merged_inputs_carry_call_input_indices():
    """With a synthetic base, graph inputs differ from call inputs; an output that views a
    merged input names the caller's input (rebuilt off it, ._base as in eager)."""

    def f(a, b, c):
        a.add_(1)
        return c * 2, b.view(-1)

    def make():
        base = torch.zeros(4, 3)
        return base[:2], torch.randn(5), base[1:]

    cf = aotgrad.aot_function(f, nop)
    args = make()
    cf(*args)
    entry = cf.entries[0]
    assert entry.input_aliasing is not None and entry.input_aliasing.unmerged == (1,)
    out = entry.metadata.output_info[1]
    assert out.call_input_index == 1 and out.base_index is None  # call input b, graph input 0
    assert "input 1" in repr(entry.metadata)
    check(f, make)


def test_config_fills_defaults_once():
    config = AotConfig(nop)
    assert config.bw_compiler is nop and config.inference_compiler is nop
    assert config.partition_fn is default_partition
    with pytest.raises(TypeError, match="fw_compiler must be callable"):
        AotConfig(None)
    seen = []

    def bw(gm, example_inputs):
        seen.append("bw")
        return gm

    model = torch.nn.Linear(2, 2)
    # torch's aot_module(mod, *args, **kwargs): aot_function's options after fn
    cm = aot_module(model, nop, bw, dynamic=False)
    cm(torch.randn(3, 2)).sum().backward()
    assert seen == ["bw"]
