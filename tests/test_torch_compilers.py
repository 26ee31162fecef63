"""torch's compilers and partitioners through aotgrad, and aotgrad's through torch (issue 11).

torch's compiler convention is *boxed* (``_boxed_call``: one list argument); aotgrad takes
both conventions (``aotgrad.compilers.positional``). Each program is compared with eager
through ``eager_compare.check``. torch's AOT Autograd appears here only as the comparison
side (its partitioners are given to aotgrad, ours to it).
"""

from __future__ import annotations

import pytest
import torch
from eager_compare import Counting, check
from torch._functorch import partitioners as torch_partitioners
from torch._functorch.aot_autograd import aot_function as torch_aot_function
from torch._functorch.aot_autograd import (
    make_boxed_compiler as torch_make_boxed_compiler,
)
from torch._functorch.aot_autograd import make_boxed_func as torch_make_boxed_func
from torch._functorch.compilers import nop as torch_nop
from torch._functorch.compilers import print_compile as torch_print_compile

import aotgrad
from aotgrad import compilers, partition


def rg(*shape):
    return torch.randn(*shape, requires_grad=True)


def _mlp_with_buffer(x, w, buf):
    buf.add_(1)
    return (torch.tanh(x @ w) * buf).sum(1)


def _aliases(x):
    y = x * 2
    return y.t(), x.view(-1), y.sum()


PROGRAMS = {
    "mlp_with_buffer_mutation": (_mlp_with_buffer, lambda: (rg(4, 3), rg(3, 5), torch.zeros(5))),
    "aliased_outputs": (_aliases, lambda: (rg(3, 2),)),
}


COMPILERS = {
    "torch nop (boxed)": lambda: torch_nop,
    "torch make_boxed_compiler(user compiler)": lambda: torch_make_boxed_compiler(lambda gm, _: gm.forward),
    "user compiler returning make_boxed_func": lambda: (lambda gm, _: torch_make_boxed_func(gm.forward)),
    "aotgrad make_boxed_compiler": lambda: compilers.make_boxed_compiler(lambda gm, _: gm),
    "plain GraphModule": Counting,
}


@pytest.mark.parametrize("program", list(PROGRAMS))
@pytest.mark.parametrize("compiler", list(COMPILERS))
def test_torch_style_compilers_plug_in(compiler, program):
    fn, make = PROGRAMS[program]
    comp = COMPILERS[compiler]()
    check(fn, make, compiled=aotgrad.aot_function(fn, comp))
    # the inference compiler defaults to the same one (mutate_outputs: the harness reads
    # grad_fn of a no_grad view whose base changed, which eager itself refuses)
    check(fn, make, compiled=aotgrad.aot_function(fn, comp), grad_mode=False, mutate_outputs=False)


def test_boxed_callable_receives_a_list_it_may_clear():
    seen = []

    def compiler(gm, example_inputs):
        def run(args):
            seen.append(type(args))
            out = gm.forward(*args)
            args.clear()  # frees the inputs early, as compiled code may
            return out

        run._boxed_call = True
        return run

    fn, make = PROGRAMS["mlp_with_buffer_mutation"]
    check(fn, make, compiled=aotgrad.aot_function(fn, compiler))
    assert seen and all(t is list for t in seen)


def test_torch_print_compile_prints_each_graph(capsys):
    cf = aotgrad.aot_function(_aliases, torch_print_compile)
    t, _, s = cf(rg(3, 2))
    (t.sum() + s).backward()
    out = capsys.readouterr().out
    assert out.count("def forward") == 2  # forward, then backward
    for _ in range(2):  # without the gradient of t: the backward pruned of it, compiled once
        cf(rg(3, 2))[2].backward()
    assert capsys.readouterr().out.count("def forward") == 1


def test_compilers_make_boxed_func_matches_torchs():
    f = compilers.make_boxed_func(lambda a, b: a + b)
    assert f._boxed_call and f([1, 2]) == 3
    g = torch_make_boxed_func(lambda a, b: a + b)
    assert compilers.positional(g)(1, 2) == compilers.positional(f)(1, 2) == 3


def test_inductor_compile_fx_inner_as_is():
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table

    fn = lambda x, w: torch.tanh(x @ w).sum(1)  # noqa: E731
    check(fn, lambda: (rg(4, 3), rg(3, 5)), mutate_outputs=False,
          compiled=aotgrad.aot_function(fn, compile_fx_inner, decompositions=select_decomp_table()))


@pytest.mark.parametrize("partition_fn", [torch_partitioners.default_partition,
                                          torch_partitioners.min_cut_rematerialization_partition],
                         ids=["torch default_partition", "torch min_cut"])
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_torch_partitioners_through_aotgrad(partition_fn, program):
    fn, make = PROGRAMS[program]
    check(fn, make, compiled=aotgrad.aot_function(fn, compilers.nop, partition_fn=partition_fn))


@pytest.mark.parametrize("partition_fn", [partition.default_partition, partition.min_cut_rematerialization_partition],
                         ids=["aotgrad default_partition", "aotgrad min_cut"])
def test_aotgrad_partitioners_through_torch(partition_fn):
    def fn(x, w):
        h = torch.relu(x @ w)
        return (h * h.sin()).sum()

    x, w = rg(4, 3), rg(3, 5)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    out = torch_aot_function(fn, torch_nop, partition_fn=partition_fn)(x, w)
    ref = fn(xr, wr)
    torch.testing.assert_close(out, ref)
    out.backward()
    ref.backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)
