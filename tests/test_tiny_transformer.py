"""attn_edu.tiny_transformer: the chapter 07 model, data, training, rollout, ablation.

Fast tests only (a few seconds on 2 CPU cores): tiny sizes, few steps.
"""
import pytest

torch = pytest.importorskip("torch")

from attn_edu import induction_seeds, tiny_transformer as tt  # noqa: E402
from attn_edu.multihead_torch import MultiHeadAttention  # noqa: E402

V, L = 10, 8


def small_model(seed=0, heads=2, layers=2):
    torch.manual_seed(seed)
    return tt.TinyTransformer(V, L, d_model=32, num_heads=heads, num_layers=layers, d_ff=64)


def test_built_from_attn_edu_modules():
    model = small_model()
    assert all(isinstance(b.attn, MultiHeadAttention) for b in model.blocks)


def test_shapes_logits_and_attention():
    model = small_model(heads=4, layers=3)
    x = torch.randint(V, (5, L))
    logits = model(x)
    assert logits.shape == (5, L, V)
    logits2, weights = model(x, return_attention=True)
    assert torch.equal(logits, logits2)
    assert len(weights) == 3
    for w in weights:
        assert w.shape == (5, 4, L, L)
        assert torch.allclose(w.sum(-1), torch.ones(5, 4, L), atol=1e-5)
    with pytest.raises(ValueError, match="shape"):
        model(torch.randint(V, (5, L + 1)))
    with pytest.raises(ValueError, match="divisible"):
        tt.TinyTransformer(V, L, d_model=30, num_heads=4)


def test_data_generators_targets():
    g = torch.Generator().manual_seed(0)
    x, y = tt.reversal_batch(64, L, V, g)
    assert x.shape == y.shape == (64, L) and x.dtype == torch.int64
    assert int(x.min()) >= 0 and int(x.max()) < V
    for i in range(L):
        assert torch.equal(y[:, i], x[:, L - 1 - i])
    x, y = tt.sorting_batch(64, L, V, g)
    assert (y[:, 1:] >= y[:, :-1]).all()
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        assert row_y == sorted(row_x)
    assert tt.make_batch("sort", 3, L, V, g)[0].shape == (3, L)
    with pytest.raises(ValueError, match="unknown task"):
        tt.make_batch("copy", 3, L, V, g)


def test_train_and_test_splits_are_disjoint():
    g = torch.Generator().manual_seed(1)
    x_train, _ = tt.reversal_batch(4000, L, V, g, split="train")
    x_test, _ = tt.held_out_set("reverse", 300, L, V)
    assert not tt.is_held_out(x_train, V).any()
    assert tt.is_held_out(x_test, V).all()
    assert torch.unique(x_test, dim=0).shape[0] == 300  # distinct
    frac = tt.is_held_out(torch.randint(V, (20000, L), generator=g), V).float().mean()
    assert 0.04 < float(frac) < 0.09  # about 1 in 16
    with pytest.raises(ValueError, match="split"):
        tt.reversal_batch(4, L, V, g, split="valid")


def test_rollout_rows_sum_to_one_and_match_hand_computation():
    torch.manual_seed(0)
    a1 = torch.softmax(torch.randn(2, 3, 4, 4), -1)  # (B, H, L, L), layer 1
    a2 = torch.softmax(torch.randn(2, 3, 4, 4), -1)  # layer 2
    r = tt.attention_rollout([a1, a2], residual_alpha=0.5)
    assert r.shape == (2, 4, 4)
    assert torch.allclose(r.sum(-1), torch.ones(2, 4, dtype=r.dtype), atol=1e-12)
    eye = torch.eye(4, dtype=torch.float64)
    t1 = 0.5 * a1.double().mean(1) + 0.5 * eye
    t2 = 0.5 * a2.double().mean(1) + 0.5 * eye
    assert torch.allclose(r, t2 @ t1, atol=1e-12)  # later layer on the left
    both = tt.attention_rollout(torch.stack([a1, a2]), all_layers=True)
    assert both.shape == (2, 2, 4, 4)
    assert torch.allclose(both[0], t1) and torch.allclose(both[1], r)
    # alpha = 1: only the residual path, the identity; alpha = 0: the raw product
    assert torch.allclose(tt.attention_rollout([a1, a2], 1.0), eye.expand(2, 4, 4))
    raw = a2.double().mean(1) @ a1.double().mean(1)
    assert torch.allclose(tt.attention_rollout([a1, a2], 0.0), raw)
    with pytest.raises(ValueError):
        tt.attention_rollout([a1], residual_alpha=1.5)


def test_ablation_changes_output_and_restores_exactly():
    model = small_model().eval()
    x = torch.randint(V, (16, L), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before, w_before = model(x, return_attention=True)
        with tt.ablate_heads(model, layer=0, heads=[1]):
            during, w_during = model(x, return_attention=True)
        after = model(x)
    assert not torch.allclose(before, during)
    assert torch.equal(before, after)  # restored exactly
    assert torch.equal(w_before[0], w_during[0])  # weights still computed
    # the hook zeroes exactly head 1's slice before out_proj: compare by hand
    attn = model.blocks[0].attn
    h = model.blocks[0].ln1(model.tok_emb(x) + model.pos_emb(torch.arange(L)))
    with torch.no_grad():
        captured = {}
        hook = attn.out_proj.register_forward_pre_hook(
            lambda m, inp: captured.setdefault("merged", inp[0].clone()))
        full = attn(h)
        hook.remove()
        merged = captured["merged"]  # (B, L, H*d_head)
        merged[..., attn.d_head:2 * attn.d_head] = 0
        with tt.ablate_heads(model, 0, 1):
            assert torch.allclose(attn(h), attn.out_proj(merged), atol=1e-6)
        assert torch.equal(attn(h), full)
    # all heads off: the attention output is out_proj's bias alone
    with torch.no_grad(), tt.ablate_heads(model, 0, [0, 1]):
        assert torch.allclose(attn(h), attn.out_proj.bias.expand_as(full), atol=1e-6)
    # restored after an exception too
    with pytest.raises(RuntimeError), tt.ablate_heads(model, 1, 0):
        raise RuntimeError("boom")
    with torch.no_grad():
        assert torch.equal(model(x), before)
    with pytest.raises(ValueError):
        with tt.ablate_heads(model, 2, 0):
            pass
    with pytest.raises(ValueError):
        with tt.ablate_heads(model, 0, 5):
            pass


@pytest.mark.slow  # trains the model (about 30 s)
def test_short_training_lowers_loss_and_evaluate():
    model = small_model()
    x_test, y_test = tt.held_out_set("reverse", 200, L, V)
    hist = tt.train(model, "reverse", steps=50, batch_size=64, lr=3e-3, warmup=5,
                    eval_every=25, eval_data=(x_test, y_test), probe=x_test[:2], seed=0)
    assert hist["step"] == [0, 25, 50]
    assert hist["loss"][-1] < 0.85 * hist["loss"][1]  # (loss at step 0: not recorded)
    assert hist["loss"][-1] < 2.0  # chance level is ln(10) = 2.30
    assert hist["token_acc"][-1] > hist["token_acc"][0]
    assert len(hist["snapshots"]) == 3 and hist["snapshots"][0].shape == (2, 2, 2, L, L)
    tok, seq = tt.evaluate(model, x_test, y_test)
    assert tok == hist["token_acc"][-1] and 0 <= seq <= tok <= 1
    # a perfect "model" gets 1.0 / 1.0
    class Oracle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return torch.nn.functional.one_hot(x.flip(1), V).float()
    assert tt.evaluate(Oracle(), x_test, y_test) == (1.0, 1.0)


@pytest.mark.slow  # trains the model twice
def test_training_is_deterministic_on_cpu():
    runs = []
    for _ in range(2):
        model = small_model(seed=3)
        hist = tt.train(model, "sort", steps=10, batch_size=32, eval_every=5, seed=7)
        runs.append((hist["loss"], [p.detach().clone() for p in model.parameters()]))
    (loss_a, params_a), (loss_b, params_b) = runs
    assert loss_a[1:] == loss_b[1:]
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b))


# ---------------------------------------------------------------- induction heads (chapter 07)


def test_repeated_batch_repeats_its_first_period_tokens():
    x, period = tt.repeated_batch(200, 24, 32, torch.Generator().manual_seed(0))
    assert x.shape == (200, 24) and period.shape == (200,)
    assert int(period.min()) >= 4 and int(period.max()) <= 12
    assert len(set(period.tolist())) > 5                       # the distance varies
    for b in range(200):
        p = int(period[b])
        assert torch.equal(x[b, p:2 * p], x[b, :p])
    with pytest.raises(ValueError, match="min_period"):
        tt.repeated_batch(2, 10, 5, min_period=6)


def test_induction_targets_are_the_predictable_queries():
    rows = tt.induction_targets(torch.tensor([3, 5]), 11)      # (2, 11)
    assert rows[0].nonzero().flatten().tolist() == [3, 4]      # 3 <= i < 5
    assert rows[1].nonzero().flatten().tolist() == [5, 6, 7, 8]


def test_induction_scores_on_hand_made_patterns():
    B, L = 3, 12
    period = torch.tensor([4, 5, 6])
    prev = torch.zeros(B, 1, L, L)
    prev[:, 0, 0, 0] = 1
    prev[:, 0, torch.arange(1, L), torch.arange(L - 1)] = 1    # every query on i - 1
    ind = torch.full((B, 1, L, L), 1.0 / L)
    for b in range(B):
        p = int(period[b])
        for i in range(p, 2 * p - 1):
            ind[b, 0, i] = 0
            ind[b, 0, i, i - p + 1] = 1                        # the token after x_i's earlier copy
    s = tt.induction_scores([prev, ind], period)
    assert s["previous_token"].shape == (2, 1)
    assert s["previous_token"][0, 0] == 1 and s["induction"][1, 0] == 1
    assert s["induction"][0, 0] < 0.5 and s["previous_token"][1, 0] < 0.2


def test_attention_only_lm_is_causal_and_returns_weights():
    torch.manual_seed(0)
    m = tt.AttentionOnlyLM(16, 10, d_model=16, num_heads=2).eval()
    x = torch.randint(16, (2, 7))
    logits, ws = m(x, return_attention=True)
    assert logits.shape == (2, 7, 16) and len(ws) == 2 and ws[0].shape == (2, 2, 7, 7)
    assert torch.all(ws[1].triu(diagonal=1) == 0)              # no weight on the future
    x2 = x.clone()
    x2[:, 5:] = (x2[:, 5:] + 1) % 16
    with torch.no_grad():
        assert torch.equal(m(x)[:, :5], m(x2)[:, :5])
    with pytest.raises(ValueError, match="1 <= L <= 10"):
        m(torch.zeros(1, 11, dtype=torch.long))


def test_train_induction_lowers_the_repeat_loss_and_restores_threads():
    torch.manual_seed(0)
    m = tt.AttentionOnlyLM(16, 16, d_model=16, num_heads=2)
    threads = torch.get_num_threads()
    h = tt.train_induction(m, steps=50, seq_len=16, batch_size=32, lr=1e-2, seed=0)
    assert torch.get_num_threads() == threads
    assert h["step"] == [25, 50]
    assert h["loss_repeat"][-1] < h["loss_other"][-1]          # the copy is learned first
    with tt.ablate_heads(m, 0, [0]):                           # works on this model too
        m(torch.zeros(1, 15, dtype=torch.long))


def test_duplicate_token_score_and_layer0_roles():
    B, L = 3, 12
    period = torch.tensor([4, 5, 6])
    dup = torch.full((B, 1, L, L), 1.0 / L)
    for b in range(B):
        p = int(period[b])
        for i in range(p, 2 * p):
            dup[b, 0, i] = 0
            dup[b, 0, i, i - p] = 1                            # the earlier copy of x_i itself
    prev = torch.zeros(B, 1, L, L)
    prev[:, 0, 0, 0] = 1
    prev[:, 0, torch.arange(1, L), torch.arange(L - 1)] = 1
    s = tt.induction_scores([dup, prev], period)
    assert s["duplicate_token"][0, 0] == 1 and s["duplicate_token"][1, 0] == 0
    assert s["previous_token"][0, 0] < 0.3 and s["induction"][0, 0] < 0.3
    assert tt.layer0_role(0.9, 0.1) == "previous-token"
    assert tt.layer0_role(0.1, 0.85) == "duplicate-token"
    assert tt.layer0_role(0.2, 0.25) == "other"


class _Oracle(torch.nn.Module):
    """Predicts the next token of the sequences it was given (or always token 0)."""

    def __init__(self, x, vocab, right=True):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.x, self.vocab, self.right = x, vocab, right

    def forward(self, x):
        nxt = self.x[:, 1:x.shape[1] + 1] if self.right else torch.zeros_like(x)
        return torch.nn.functional.one_hot(nxt, self.vocab).float() + 0 * self.w


def test_copy_accuracy_counts_the_predictable_tokens():
    x, period = tt.repeated_batch(50, 16, 8, torch.Generator().manual_seed(0))
    assert tt.copy_accuracy(_Oracle(x, 8), x, period) == 1.0
    targets = tt.induction_targets(period, 15)
    zero_share = (x[:, 1:][targets] == 0).float().mean().item()
    assert tt.copy_accuracy(_Oracle(x, 8, right=False), x, period) == pytest.approx(zero_share)


def test_recorded_induction_seeds_let_the_ablation_name_the_layer0_head():
    runs = induction_seeds.recorded_induction_seeds()
    two = [r for r in runs if r["num_heads"] == 2]
    assert len(two) >= 10 and len({r["seed"] for r in two}) == len(two)
    for r in two:
        essential = min(range(2), key=lambda h: r["ablated"][0][h])
        assert r["ablated"][0][essential] < 0.5 * r["accuracy"]     # the circuit breaks
        assert r["roles"][essential] != "other"                    # and its scores say why
        assert r["ablated"][0][1 - essential] > 0.8 * r["accuracy"]
    assert {r["roles"][min(range(2), key=lambda h: r["ablated"][0][h])] for r in two} == {
        "previous-token", "duplicate-token"}                       # both mechanisms occur
    one = [r for r in runs if r["num_heads"] == 1]
    assert one and all(r["accuracy"] > 0.9 for r in one)          # one head per layer suffices


@pytest.mark.slow
def test_induction_study_reproduces_the_record_for_seed_0():
    recorded = next(r for r in induction_seeds.recorded_induction_seeds() if r["seed"] == 0 and r["num_heads"] == 2)
    fresh = induction_seeds.induction_study(0)
    assert fresh["roles"] == recorded["roles"]
    assert fresh["accuracy"] == pytest.approx(recorded["accuracy"], abs=0.02)
    for fresh_row, recorded_row in zip(fresh["ablated"], recorded["ablated"]):
        assert fresh_row == pytest.approx(recorded_row, abs=0.03)
