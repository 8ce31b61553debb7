"""alf's lean Adam against torch's fused Adam, bit for bit."""
import copy

import pytest
import torch

from alf.utils.optim import Adam


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(5, 3, generator=g)),
            torch.nn.Parameter(torch.randn(3, generator=g))]


def _grads(params, step):
    g = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


def _run(opt_cls, params, steps, **kw):
    opt = opt_cls(params, **kw)
    for step in range(steps):
        _grads(params, step)
        opt.step()
        if step == 2:
            for group in opt.param_groups:  # a schedule changes lr
                group["lr"] *= 0.5
    return opt


@pytest.mark.parametrize("kw", [dict(lr=1e-2),
                                dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-5,
                                     weight_decay=0.1)])
def test_matches_torch_fused_adam(kw):
    ours, theirs = _params(), _params()
    opt = _run(Adam, ours, 6, **kw)
    ref = _run(lambda p, **k: torch.optim.Adam(p, fused=True, **k), theirs,
               6, **kw)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    for a, b in zip(ours, theirs):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[a][key], ref.state[b][key])


def test_resumes_from_a_state_dict_like_torch():
    ours, theirs = _params(), _params()
    opt = _run(Adam, ours, 3, lr=1e-2)
    ref = _run(lambda p, **k: torch.optim.Adam(p, fused=True, **k), theirs,
               3, lr=1e-2)
    # A fresh optimizer loads the state (the lean lists must not point at
    # the old tensors) and both go on.
    saved = copy.deepcopy(opt.state_dict())
    opt.state[ours[0]]["exp_avg"].zero_()  # stale lists would keep this
    opt.load_state_dict(saved)
    for step in range(3, 6):
        _grads(ours, step)
        _grads(theirs, step)
        opt.step()
        ref.step()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_parameter_without_gradient_is_left_alone_as_torch_does():
    ours, theirs = _params(), _params()
    opts = [Adam(ours, lr=1e-2), torch.optim.Adam(theirs, lr=1e-2,
                                                  fused=True)]
    for step in range(4):
        for params, opt in zip((ours, theirs), opts):
            _grads(params, step)
            if step == 2:
                params[1].grad = None  # an unused head this step
            opt.step()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    assert torch.equal(opts[0].state[ours[1]]["step"],
                       opts[1].state[theirs[1]]["step"])


def test_step_hooks_still_run():
    params = _params()
    opt = Adam(params, lr=1e-2)
    calls = []
    opt.register_step_post_hook(lambda *a: calls.append(1))
    for step in range(3):
        _grads(params, step)
        opt.step()
    assert calls == [1, 1, 1]
